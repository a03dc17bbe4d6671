"""The public entry points document their arguments and show a runnable example, and the examples run.

Each entry point's docstring has a Google-style ``Args:`` section and an ``Example:`` section holding a fenced
```` ```python ```` block. The blocks run as scripts in an empty folder, offline, with the local model and an
in-memory store, the way tests/test_readme.py runs the docs' blocks (its ``# prints:`` convention included: a
comment claims what the statement prints first; decimals within 0.05).
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap

import pytest
from test_readme import check_claims, with_marks

#: ``module:qualified name`` of every public entry point whose docstring must carry ``Args:`` and an example.
ENTRY_POINTS = [
    "ctxret.index:ContextualIndex",
    "ctxret.index:ContextualIndex.add_messages",
    "ctxret.index:ContextualIndex.add_documents",
    "ctxret.index:ContextualIndex.search",
    "ctxret.store:Store",
    "langchain_ctxret.retriever:ContextualRetriever",
    "langchain_ctxret.vectorstore:ContextualVectorStore",
    "llamaindex_ctxret.retriever:ContextualRetriever",
    "llamaindex_ctxret.node_parser:ContextualNodeParser",
]

_BLOCK = re.compile(r"^[ \t]*```python\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)


def docstring(target: str) -> str:
    module, qualname = target.split(":")
    obj: object = importlib.import_module(module)
    for name in qualname.split("."):
        obj = getattr(obj, name)
    return inspect.cleandoc(obj.__doc__ or "")


def examples(doc: str) -> list[str]:
    """The ```python blocks of a docstring's ``Example:`` section, dedented."""
    at = doc.find("\nExample:\n")
    return [textwrap.dedent(m.group(1)) for m in _BLOCK.finditer(doc[at:])] if at >= 0 else []


@pytest.mark.parametrize("target", ENTRY_POINTS)
def test_entry_point_documents_its_arguments_and_an_example(target):
    doc = docstring(target)
    assert "\nArgs:\n" in doc, f"{target}: its docstring needs a Google-style 'Args:' section"
    assert examples(doc), f"{target}: its docstring needs an 'Example:' section with a ```python block"


def test_examples_are_found_as_written():
    doc = "Summary.\n\nArgs:\n    x: a thing.\n\nExample:\n    ```python\n    print(1)  # prints: 1\n    ```\n"
    assert examples(doc) == ["print(1)  # prints: 1\n"]
    assert examples("Summary.\n\n```python\nprint(1)\n```\n") == []  # a block outside Example: is no example


@pytest.mark.slow
@pytest.mark.parametrize("target", ENTRY_POINTS)
def test_example_runs_and_prints_what_it_claims(target, tmp_path):
    for n, body in enumerate(examples(docstring(target))):
        script = tmp_path / f"example{n}.py"
        script.write_text(with_marks(body), encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXRET_", "OPENAI_"))}
        env.update(HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8")
        proc = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"{target}'s example failed:\n{proc.stdout}\n{proc.stderr}"
        assert proc.stdout.strip(), f"{target}'s example printed nothing"
        wrong = check_claims(body, proc.stdout)
        assert not wrong, f"{target}'s example: " + "; ".join(wrong)
