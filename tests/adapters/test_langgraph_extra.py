"""The agent parts need ``ctxret[langgraph]``; the base install works without it.

A subprocess blocks ``langchain`` and ``langgraph`` (``sys.modules[name] = None``: an import of either fails as if it
were not installed) and imports ``langchain_ctxret``: the retriever and the chat history work, and the middleware
and the store raise ``MissingExtraError`` naming the extra to install.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import sys
for name in ("langchain", "langgraph"):
    sys.modules[name] = None
import langchain_ctxret
from langchain_ctxret import ContextualRetriever, CtxretChatMessageHistory, render_groups
assert not any(m.split(".")[0] in ("langchain", "langgraph") and sys.modules[m] is not None for m in sys.modules)
for name in ("CtxretStore", "CtxretMemoryMiddleware"):
    try:
        getattr(langchain_ctxret, name)
    except ImportError as e:
        print(name, type(e).__name__, e)
    else:
        print(name, "imported")
"""


@pytest.mark.slow
def test_langchain_ctxret_imports_without_langgraph_and_names_the_extra():
    proc = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2, proc.stdout
    for line, name in zip(lines, ("CtxretStore", "CtxretMemoryMiddleware"), strict=True):
        assert line.startswith(f"{name} MissingExtraError"), line
        assert 'pip install "ctxret[langgraph]"' in line


def test_with_the_extra_both_are_exported():
    from langchain.agents.middleware import AgentMiddleware
    from langgraph.store.base import BaseStore

    import langchain_ctxret

    assert issubclass(langchain_ctxret.CtxretMemoryMiddleware, AgentMiddleware)
    assert issubclass(langchain_ctxret.CtxretStore, BaseStore)


def test_the_extra_exists_and_the_test_extra_installs_it():
    from pathlib import Path

    import tomllib

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {r.split(">")[0] for r in extras["langgraph"]} == {"langchain", "langgraph"}
    assert any(r.startswith("ctxret[") and "langgraph" in r for r in extras["test"])
    assert not any(d.startswith(("langchain>", "langchain ", "langgraph")) for d in project["dependencies"])
