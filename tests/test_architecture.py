"""ARCHITECTURE.md and the references in the docs and docstrings cannot rot.

* Every module of the core (``shared/ctxret``) and of the two adapters is named in ARCHITECTURE.md, as its path
  relative to the core package (``query/search.py``) or as ``langchain_ctxret/retriever.py`` (a package's
  ``__init__.py`` is named by its package).
* Every module path, dotted module name (``ctxret.query.search``, ``query.fusion``) and ``module.function`` /
  ``Class.method`` reference written in ARCHITECTURE.md, docs/*.md, README.md and in the docstrings' Sphinx roles
  (``:mod:``, ``:class:``, ``:func:``, ...; a relative ``~.cache.ScopeView`` resolved against the module holding it)
  names something that exists: the module is imported and the attribute looked up.

What counts as a reference is pragmatic: a backticked name (or, in ARCHITECTURE.md's diagrams, a word) whose first
part is one of the packages, a subpackage or module of the core, an adapter's module or a class the packages define.
A failure names the file, the line and the broken reference.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "shared" / "ctxret"
ADAPTERS = {"langchain_ctxret": ROOT / "langchain_ctxret", "llamaindex_ctxret": ROOT / "llamaindex_ctxret"}
PACKAGES = {"ctxret": CORE, **ADAPTERS}
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
PAGES = [ARCHITECTURE, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


# -- the modules --------------------------------------------------------------------------------
def module_files() -> dict[str, Path]:
    """Dotted name → file of every module of the core and the adapters."""
    out = {}
    for package, folder in PACKAGES.items():
        for file in sorted(folder.rglob("*.py")):
            parts = list(file.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = file
    return out


MODULES = module_files()
#: The first words a reference may start with, mapped to the dotted prefixes they may stand for.
_HEADS: dict[str, set[str]] = {}
for _name in MODULES:
    _parts = _name.split(".")
    _HEADS.setdefault(_parts[0], set()).add(_parts[0])
    if _parts[0] == "ctxret" and len(_parts) > 1:
        _HEADS.setdefault(_parts[1], set()).add(f"ctxret.{_parts[1]}")  # query.fusion, storage/base
    if len(_parts) > 1:
        _HEADS.setdefault(_parts[-1], set()).add(_name)  # rebuild.swap_in, timewords


def expected_names() -> dict[str, str]:
    """Each module's dotted name → how ARCHITECTURE.md names it (a path relative to the core package, or with the
    adapter's folder)."""
    out = {}
    for name, file in MODULES.items():
        package = name.split(".")[0]
        rel = file.relative_to(PACKAGES[package]).as_posix()
        if package != "ctxret":
            rel = f"{package}/{rel}"
        if file.name != "__init__.py":  # a package's __init__ is named by its package
            out[name] = rel
    return out


# -- resolving one reference --------------------------------------------------------------------
@cache
def _import(name: str) -> object | None:
    """The module ``name`` if it is one of ours and imports; ``None`` if it is not a module of ours."""
    if name not in MODULES:
        return None
    try:
        return importlib.import_module(name)
    except ImportError as e:  # an extra that is not installed (langgraph): fall back to the file's own names
        if e.name and e.name.split(".")[0] in PACKAGES:
            raise
        return _SourceModule(MODULES[name])


class _SourceModule:
    """What a module that cannot be imported here defines, read from its source: its top-level names and the
    names its classes define (enough to tell that a reference exists)."""

    def __init__(self, file: Path):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        self.names: dict[str, set[str]] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.names[node.name] = {
                    n.name if hasattr(n, "name") else getattr(getattr(n, "target", None), "id", "") for n in node.body
                }
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.col_offset == 0:
                self.names[node.name] = set()
            elif isinstance(node, ast.ImportFrom | ast.Import):
                for alias in node.names:
                    self.names.setdefault(alias.asname or alias.name.split(".")[0], set())
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.col_offset == 0:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        self.names.setdefault(target.id, set())

    def has(self, attrs: list[str]) -> bool:
        if not attrs:
            return True
        if attrs[0] not in self.names:
            return False
        return len(attrs) == 1 or (len(attrs) == 2 and attrs[1] in self.names[attrs[0]])


def _has_attr(obj: object, attr: str) -> tuple[bool, object]:
    try:
        if hasattr(obj, attr):
            value = getattr(obj, attr)
            return True, None if isinstance(value, property) else value  # a property's value is not known
    except ImportError:  # a lazy name whose extra is not installed (langgraph)
        return attr in getattr(obj, "__all__", ()), None
    if isinstance(obj, type):  # a field without a default: dataclass, annotations, pydantic, set in a method
        try:
            source = inspect.getsource(obj)
        except (OSError, TypeError):
            source = ""
        if re.search(rf"\bself\.{re.escape(attr)}\s*(:[^=]+)?=", source):
            return True, None
        if dataclasses.is_dataclass(obj) and attr in {f.name for f in dataclasses.fields(obj)}:
            return True, None
        for klass in obj.__mro__:
            if attr in getattr(klass, "__annotations__", {}) or attr in getattr(klass, "model_fields", {}):
                return True, None
    return False, None


def _has(obj: object, attrs: list[str]) -> bool:
    if isinstance(obj, _SourceModule):
        return obj.has(attrs)
    for attr in attrs:
        if obj is None:  # a field's value is not known: the rest cannot be checked
            return True
        found, obj = _has_attr(obj, attr)
        if not found:
            return False
    return True


def resolve_absolute(dotted: str) -> bool:
    """``dotted`` (``ctxret.query.search.plan_search``) is a module of ours, or an attribute chain of one."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = _import(".".join(parts[:cut]))
        if module is not None:
            return _has(module, parts[cut:])
    return False


@cache
def class_index() -> dict[str, list[str]]:
    """A top-level class name defined in our packages → the modules that define it (for ``Class.method``)."""
    out: dict[str, list[str]] = {}
    for name, file in MODULES.items():
        for node in ast.parse(file.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, []).append(name)
    return out


def _in_class_of(module: str, attrs: list[str]) -> bool:
    """``attrs`` (``views.load_thread``'s ``load_thread``) is a method of a class ``module`` defines."""
    return any(
        _name_resolves(f"{module}.{cls}.{'.'.join(attrs)}") for cls, mods in class_index().items() if module in mods
    )


def _name_resolves(dotted: str) -> bool:
    try:
        return resolve_absolute(dotted)
    except Exception:
        return False


def resolve(ref: str, classes: set[str] | None = None) -> bool | None:
    """Whether the reference exists; ``None`` when it is not a reference to our code. ``ref`` is a dotted name
    (``query.fusion.fuse``, ``ctxret.Store``, ``Store.of``), a path (``query/split.py``) or both
    (``storage/base.DenseBackend``). ``Class.method`` counts for the classes in ``classes`` (every class of ours
    when ``None``)."""
    ref = ref.strip().removesuffix("()").rstrip(".,:;")
    if _PATH.match(ref):
        return resolve_path(ref)
    alternatives = re.fullmatch(r"([\w.]+\.)(\w+(?:/\w+)+)", ref)  # Group.stages/degraded/skipped
    if alternatives:
        found = [resolve(alternatives.group(1) + a, classes) for a in alternatives.group(2).split("/")]
        return None if None in found else all(found)
    dotted = re.sub(r"\.py(?=\.|$)", "", ref).replace("/", ".").strip(".")
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", dotted):
        return None
    head, *rest = dotted.split(".")
    if head in PACKAGES:
        return _name_resolves(dotted)
    if head in class_index() and (classes is None or head in classes):
        if not rest:
            return True
        return any(_name_resolves(f"{m}.{dotted}") for m in class_index()[head])
    if head in _HEADS and (rest or "/" in ref):
        for prefix in _HEADS[head]:
            if _name_resolves(f"{prefix}.{'.'.join(rest)}".rstrip(".")):
                return True
            if rest and _in_class_of(prefix, rest):  # views.load_thread, index.search: a method
                return True
        return False
    return None


def resolve_path(path: str, dirs: Iterable[str] = ()) -> bool:
    """``path`` (``query/split.py``, ``langchain_ctxret/store.py``, ``tests/fts5_oracle.py``) is a file; a bare
    ``name.py`` may also be in one of ``dirs`` (the folders named before it on the same line)."""
    bases = [CORE, ROOT, ROOT / "shared"]
    if "/" not in path:
        bases = [*(CORE / d for d in dirs), *(ROOT / d for d in dirs), *bases]
    return any((base / path).is_file() for base in bases)


# -- the references of a page -------------------------------------------------------------------
_TICKED = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_PATH = re.compile(r"^[\w./-]*\w\.py$|^[\w.-]+(?:/[\w.-]+)+\.(?:json|jsonl|md|toml|txt|ipynb)$")
_DOTTED = re.compile(r"[A-Za-z_][\w/]*(?:\.[A-Za-z_]\w*)+|[A-Za-z_]\w*/[\w/.]*\w")
_DIR = re.compile(r"(?:^|[\s`(])((?:[\w]+/)+)")


def _candidates(text: str) -> Iterable[str]:
    """The reference-like words of a backticked span: ``query/fusion.fuse`` in ``query/fusion.fuse(a, b)``."""
    text = text.strip()
    if _PATH.match(text):
        yield text
        return
    m = re.match(r"[A-Za-z_][\w./]*", text)
    if m and ("." in m.group(0) or "/" in m.group(0)):
        yield m.group(0).rstrip(".")


def page_references(text: str, diagrams: bool = False) -> list[tuple[int, str, list[str]]]:
    """``(line, reference, folders named before it on the line)`` of a markdown page: every backticked span (and,
    with ``diagrams``, every dotted word of a non-Python fenced block) that looks like a reference."""
    out = []
    fence = ""
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fence = "" if fence else (line[3:].strip() or "text")
            continue
        if fence:
            if diagrams and fence not in ("python", "py", "bash", "sh", "console", "json"):
                out += [(number, w, []) for w in _DOTTED.findall(line)]
            continue
        for m in _TICKED.finditer(line):
            dirs = [d.rstrip("/") for d in _DIR.findall(line[: m.start()])]
            dirs += [str(Path(p).parent) for p in re.findall(r"`([\w/]+/\w+\.py)`", line[: m.start()])]
            out += [(number, c, dirs) for c in _candidates(m.group(1))]
    return out


@cache
def exported() -> set[str]:
    """The names the three packages export: what a user page's ``Class.method`` may start with (``Settings`` in
    docs/llamaindex.md is LlamaIndex's)."""
    return {name for package in PACKAGES for name in importlib.import_module(package).__all__}


def broken_in_page(name: str, text: str, diagrams: bool = False) -> list[str]:
    """``file:line: reference`` of each reference of a page that names nothing (ARCHITECTURE.md's ``Class.method``
    for every class of ours, the other pages' for the exported classes)."""
    classes = None if name == "ARCHITECTURE.md" else exported()
    broken = []
    for number, ref, dirs in page_references(text, diagrams):
        ok = resolve_path(ref, dirs) if _PATH.match(ref) else resolve(ref, classes)
        if ok is False:
            broken.append(f"{name}:{number}: `{ref}`")
    return broken


# -- the references of a docstring --------------------------------------------------------------
_ROLE = re.compile(r":(mod|func|class|meth|attr|data|obj|exc):`~?([^`<]+?)(?:\s*<([^>]+)>)?`")


def docstrings(file: Path) -> Iterable[tuple[int, str]]:
    """``(first line, raw text)`` of each docstring of a module."""
    tree = ast.parse(file.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    yield first.value.lineno, first.value.value


def resolve_role(target: str, module: str) -> bool | None:
    """A role's target resolved like Sphinx does: ``.x.y`` (and ``~.x.y``) against ``module`` and its packages in
    turn; an absolute dotted name as :func:`resolve` does; a bare name against ``module``'s own names."""
    target = target.strip().removeprefix("~").removesuffix("()")
    if target.startswith("."):
        parts = module.split(".")
        return any(_name_resolves(".".join(parts[:cut]) + target) for cut in range(len(parts), 0, -1))
    head = target.split(".")[0]
    if "." in target and head not in PACKAGES and head not in class_index() and head not in _HEADS:
        # a name the module imports (``Hit.parent_text``) or a class of another library: checked when it imports
        mod = _import(module)
        if mod is not None and not isinstance(mod, _SourceModule) and hasattr(mod, head):
            return _name_resolves(f"{module}.{target}")
        return None
    if "." not in target:
        return None if target not in PACKAGES else True
    return resolve(target)


def broken_in_docstrings(module: str, file: Path, label: str = "") -> list[str]:
    """``file:line: role`` of each docstring role of ``module`` (held in ``file``) that names nothing."""
    label = label or file.relative_to(ROOT).as_posix()
    broken = []
    for start, text in docstrings(file):
        for m in _ROLE.finditer(text):
            target = m.group(3) or m.group(2)
            if resolve_role(target, module) is False:
                line = start + text.count("\n", 0, m.start())
                broken.append(f"{label}:{line}: {m.group(0)}")
    return broken


# -- the tests ----------------------------------------------------------------------------------
def test_every_module_is_named_in_architecture():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    named = set()
    for _, ref, dirs in page_references(text):
        if _PATH.match(ref):
            named |= {ref} | {f"{d}/{ref}" for d in dirs}
        elif ref.endswith("/"):
            named.add(ref)
    named |= {m.group(1) for m in re.finditer(r"`([\w/]+/)`", text)}
    missing = [rel for rel in expected_names().values() if rel not in named]
    assert not missing, (
        "ARCHITECTURE.md does not name these modules in its tables (add a row, or name them in their package's "
        f"row as `path.py`): {missing}"
    )


def test_architecture_names_no_module_that_is_gone():
    text = ARCHITECTURE.read_text(encoding="utf-8")
    broken = broken_in_page("ARCHITECTURE.md", text, diagrams=True)
    assert not broken, "ARCHITECTURE.md names what does not exist:\n" + "\n".join(broken)


@pytest.mark.parametrize("page", PAGES[1:], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_doc_references_resolve(page):
    broken = broken_in_page(page.relative_to(ROOT).as_posix(), page.read_text(encoding="utf-8"))
    assert not broken, "references to modules or names that do not exist:\n" + "\n".join(broken)


def test_docstring_references_resolve():
    broken = [b for module, file in MODULES.items() for b in broken_in_docstrings(module, file)]
    assert not broken, "docstring roles that name nothing (fix the path or the name):\n" + "\n".join(broken)


def test_the_checks_can_fail(tmp_path):
    """A page or docstring naming a module, a function or a file that does not exist is reported, with its line."""
    page = (
        "# Fake\n\n| `query/search.py` | fine |\n| `query/nosuch.py` | gone |\n"
        "the loop: `ctxret.query.gone_module`, `query.fusion.no_such_rule`, `Store.no_such_method`\n"
        "```\nquery  ingest.nowhere ─► query.split\n```\n"
    )
    broken = broken_in_page("fake.md", page, diagrams=True)
    assert broken == [
        "fake.md:4: `query/nosuch.py`",
        "fake.md:5: `ctxret.query.gone_module`",
        "fake.md:5: `query.fusion.no_such_rule`",
        "fake.md:5: `Store.no_such_method`",
        "fake.md:7: `ingest.nowhere`",
    ]
    assert broken_in_page("fine.md", "`query/search.py`, `query.fusion.fuse`, `ContextualIndex.search`\n") == []
    module = tmp_path / "fake_module.py"
    module.write_text(
        '"""See :func:`~.cache.NoSuchThing` and :mod:`ctxret.lexical`, not :class:`~.cache.ScopeView`."""\n'
    )
    assert [b.split(": ", 1)[1] for b in broken_in_docstrings("ctxret.storage.pieces", module, "fake_module.py")] == [
        ":func:`~.cache.NoSuchThing`",
        ":mod:`ctxret.lexical`",
    ]
