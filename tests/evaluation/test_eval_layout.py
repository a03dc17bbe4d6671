"""The harness's modules: imports go one way (no cycle, counting imports inside functions), and no module
imports another module's private name."""

from __future__ import annotations

import ast
from pathlib import Path

import ctxret.evaluation

EVALUATION = Path(ctxret.evaluation.__file__).parent


def _imports(path: Path) -> list[ast.ImportFrom]:
    return [n for n in ast.walk(ast.parse(path.read_text("utf-8"))) if isinstance(n, ast.ImportFrom)]


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in EVALUATION.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for m in mods:
        deps: set[str] = set()
        for node in _imports(EVALUATION / f"{m}.py"):
            if node.level == 1:
                deps.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        graph[m] = deps & mods
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(m: str, path: list[str]) -> list[str] | None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return [*path[path.index(d) :], d]
            if d not in state and (found := visit(d, [*path, d])):
                return found
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m, [m])):
            return found
    return None


def test_no_import_cycle_in_the_harness():
    graph = _graph()
    assert {"threads", "views", "datasets", "index"} <= set(graph)
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_the_cycle_check_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_private_name_is_imported_from_another_module():
    private = [
        f"{path.name}:{node.lineno} imports {alias.name} from {'.' * node.level}{node.module or ''}"
        for path in sorted(EVALUATION.glob("*.py"))
        for node in _imports(path)
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    ]
    assert not private, "\n".join(private)
