"""The import rule of ARCHITECTURE.md, checked on the source: layers import one way, no module imports itself back,
and no module imports another's private name (``from x import _name``).

Every ``import`` / ``from ... import`` in the package is read with :mod:`ast` — at module level, inside functions
(a lazy import is still a dependency) and under ``TYPE_CHECKING`` (a type is a dependency too).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "shared" / "ctxret"

#: The layers, lowest first: a unit (a subpackage, or a top-level module) imports only units of its own layer or
#: earlier ones. ARCHITECTURE.md states the same list.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_version", "_faults", "_lazy", "_lru"),
    ("text", "blend", "metanames", "results"),
    ("embedders",),
    ("storage",),
    ("ingest",),
    ("query",),
    ("config",),
    ("store", "index", "items", "agent_memory", "adapters"),
    ("evaluation",),
    ("cli", "__main__"),
    ("ctxret",),  # the package's __init__: the public face
)
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
#: The packages whose modules import no private name of another module.
PACKAGES = (PACKAGE, ROOT / "langchain_ctxret", ROOT / "llamaindex_ctxret")


def _modules(package: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The package modules ``module`` imports (``from pkg import mod`` names the module, else the package)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: None if is_package else -1]
                base = base[: len(base) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                name = f"{prefix}.{alias.name}"
                yield name if name in known else prefix


def private_names(source: str) -> list[str]:
    """The private names (one leading underscore, not a dunder) ``source`` imports with ``from ... import``, anywhere
    in it (module level, inside functions, under ``TYPE_CHECKING``)."""
    return [
        alias.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]


def private_imports(package: Path) -> set[tuple[str, str]]:
    """``(module, name)`` for each private name a module of ``package`` imports from another module."""
    return {
        (module, name)
        for module, path in _modules(package).items()
        for name in private_names(path.read_text(encoding="utf-8"))
    }


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """``{module: {package modules it imports}}`` (implicit parent-package imports left out)."""
    known = _modules(package)
    return {m: {t for t in _imported(m, p, known) if t in known and t != m} for m, p in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if RANK[unit(b)] > RANK[unit(a)])


def test_every_unit_has_a_layer() -> None:
    assert {unit(m) for m in import_graph()} <= set(RANK), "a new subpackage or module needs its place in LAYERS"


def test_no_import_cycle_in_the_package() -> None:
    assert cycles(import_graph()) == []


def test_layers_import_one_way() -> None:
    assert layer_violations(import_graph()) == []


def test_config_only_re_exports() -> None:
    """``ctxret.config`` defines nothing: the settings live with the stage that uses them."""
    tree = ast.parse((PACKAGE / "config.py").read_text(encoding="utf-8"))
    defined = [n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    assert defined == []
    from ctxret.config import IndexConfig, SearchSettings
    from ctxret.ingest.config import IndexConfig as ingest_config
    from ctxret.query.settings import SearchSettings as query_settings

    assert IndexConfig is ingest_config and SearchSettings is query_settings


#: Names only a Chroma client has: a module that reaches for them is talking to Chroma.
CHROMA_CLIENT_CALLS = {
    "get_or_create_collection",
    "get_collection",
    "list_collections",
    "delete_collection",
    "create_collection",
    "get_max_batch_size",
}


def test_only_the_chroma_backend_touches_chroma() -> None:
    """``storage/chroma.py`` is the one module that imports chromadb or calls a Chroma client: the rest of storage
    talks to the vector backend protocol (``storage/base.VectorBackend``)."""
    for module, path in _modules(PACKAGE).items():
        if module == "ctxret.storage.chroma":
            continue
        names = set(_imported(module, path, {}))
        assert not {n for n in names if n.split(".")[0] == "chromadb"}, module
        tree = ast.parse(path.read_text(encoding="utf-8"))
        calls = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)} & CHROMA_CLIENT_CALLS
        assert not calls, (module, calls)


@pytest.mark.parametrize("adapter", ["langchain_ctxret", "llamaindex_ctxret"])
def test_adapters_import_the_core_never_each_other(adapter: str) -> None:
    other = {"langchain_ctxret": "llamaindex_ctxret", "llamaindex_ctxret": "langchain_ctxret"}[adapter]
    graph = import_graph(ROOT / adapter)
    assert cycles(graph) == []
    for module, path in _modules(ROOT / adapter).items():
        assert not {n for n in _imported(module, path, {}) if n.split(".")[0] == other}, module


def test_no_private_names_across_modules() -> None:
    found = set().union(*(private_imports(package) for package in PACKAGES))
    assert sorted(found) == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """The walkers see a cycle, a violation and a private import where there is one (so the tests above could
    fail)."""
    graph = {"ctxret.a": {"ctxret.b"}, "ctxret.b": {"ctxret.a"}, "ctxret.text": {"ctxret.query.search"}}
    graph["ctxret.query.search"] = set()
    assert cycles(graph) == [["ctxret.a", "ctxret.b"]]
    RANK.setdefault("a", 0)
    RANK.setdefault("b", 0)
    try:
        assert layer_violations(graph) == ["ctxret.text -> ctxret.query.search"]
    finally:
        del RANK["a"], RANK["b"]
    source = (
        "from __future__ import annotations\nfrom .a import _x, y, __version__\nfrom b import _Y as Z\n"
        "def f():\n    from .c import _lazy\n"
    )
    assert private_names(source) == ["_x", "_Y", "_lazy"]
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "a.py").write_text("_x = 1\n", encoding="utf-8")
    (package / "b.py").write_text("from .a import _x\n", encoding="utf-8")
    assert private_imports(package) == {("pkg.b", "_x")}
