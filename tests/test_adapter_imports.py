"""The adapters are written against a small API: ``ctxret`` (the public package) and ``ctxret.adapters``.

Every import of the core in ``langchain_ctxret`` and ``llamaindex_ctxret`` — at module level, inside functions and
under ``TYPE_CHECKING`` — is read with :mod:`ast`: it names ``ctxret`` or ``ctxret.adapters`` and no name that starts
with an underscore. ``ctxret.adapters`` offers exactly what the adapters use, and each of its names resolves.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("langchain_ctxret", "llamaindex_ctxret")
#: The core modules an adapter may import from.
ALLOWED = {"ctxret", "ctxret.adapters"}


def core_imports(source: str) -> list[tuple[int, str, str]]:
    """``(line, module, name)`` for every name ``source`` takes from the core (``name`` ``""``: ``import module``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, "") for a in node.names if a.name.split(".")[0] == "ctxret"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ctxret":
            found += [(node.lineno, str(node.module), a.name) for a in node.names]
    return sorted(found)


def violations(source: str, where: str = "<source>") -> list[str]:
    """What ``source`` imports from the core outside the adapter API: another module, ``import ctxret...`` (a whole
    module to reach into), or a private name."""
    out = []
    for line, module, name in core_imports(source):
        if not name:
            out.append(f"{where}:{line}: import {module} (use `from ctxret import ...` or `from ctxret.adapters ...`)")
        elif module not in ALLOWED:
            out.append(f"{where}:{line}: from {module} import {name} (not the adapter API: ctxret, ctxret.adapters)")
        elif name.startswith("_") or name == "*":
            out.append(f"{where}:{line}: from {module} import {name} (a private name, or all of them)")
    return out


def adapter_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
        for adapter in ADAPTERS
        for path in sorted((ROOT / adapter).rglob("*.py"))
    }


def test_the_adapters_import_only_ctxret_and_ctxret_adapters() -> None:
    found = [v for where, source in adapter_sources().items() for v in violations(source, where)]
    assert found == [], "\n".join(found)


def test_the_adapters_import_the_core_at_all() -> None:
    """The walk sees the adapters' imports (so an empty list above means something)."""
    used = {(module, name) for source in adapter_sources().values() for _, module, name in core_imports(source)}
    assert ("ctxret", "ContextualIndex") in used and ("ctxret.adapters", "missing_extra") in used


def test_the_check_can_fail() -> None:
    bad = (
        "from ctxret.query.settings import SearchSettings\n"
        "from ctxret.adapters import _private\n"
        "def f():\n"
        "    from ctxret.embedders.wrappers import _WrappedEmbedder\n"
        "import ctxret.storage.schema\n"
        "from ctxret import *\n"
        "from ctxret import Group\n"
        "from ctxret.adapters import as_list\n"
        "from .local import thing\n"
    )
    assert violations(bad) == [
        "<source>:1: from ctxret.query.settings import SearchSettings (not the adapter API: ctxret, ctxret.adapters)",
        "<source>:2: from ctxret.adapters import _private (a private name, or all of them)",
        "<source>:4: from ctxret.embedders.wrappers import _WrappedEmbedder "
        "(not the adapter API: ctxret, ctxret.adapters)",
        "<source>:5: import ctxret.storage.schema (use `from ctxret import ...` or `from ctxret.adapters ...`)",
        "<source>:6: from ctxret import * (a private name, or all of them)",
    ]


def test_the_adapter_api_is_what_the_adapters_use_and_resolves() -> None:
    api = importlib.import_module("ctxret.adapters")
    names = set(api.__all__)
    assert len(names) == len(api.__all__), "a name listed twice"
    assert names == set(api._SOURCES), "__all__ and the table of sources name the same names"
    assert not {n for n in names if n.startswith("_")}
    used = {
        name
        for source in adapter_sources().values()
        for _, module, name in core_imports(source)
        if module == "ctxret.adapters"
    }
    assert names - used == set(), "names no adapter uses: take them out of ctxret.adapters"
    assert used - names == set(), "names the adapters import that ctxret.adapters does not offer"
    for name in sorted(names):
        assert getattr(api, name, None) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        api.no_such_name  # noqa: B018


def test_the_renamed_name_is_the_query_sides_document_key() -> None:
    from ctxret.adapters import document_key, hit_document_key
    from ctxret.ingest.documents import document_key as ingest_key
    from ctxret.query.documents import document_key as query_key

    assert hit_document_key is query_key and document_key is ingest_key


def test_framework_model_is_what_a_wrapper_wraps(local_embedder) -> None:
    from ctxret.adapters import framework_model
    from ctxret.embedders import LangChainEmbedder

    from langchain_ctxret import CtxretEmbeddings

    lc = CtxretEmbeddings(local_embedder)
    assert framework_model(LangChainEmbedder(lc)) is lc
    assert framework_model(local_embedder) is None


def test_importing_the_adapter_api_is_light() -> None:
    code = (
        "import sys, ctxret.adapters\n"
        "heavy = ['onnxruntime', 'chromadb', 'langchain_core', 'llama_index', 'openai']\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"import ctxret.adapters pulled in: {out.stdout.strip()}"
