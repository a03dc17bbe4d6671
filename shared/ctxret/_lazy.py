"""Lazy re-exports: a package names what it offers; each name's module loads on first use, and ``dir()`` lists it
before (tab completion in a shell or a notebook sees every name the package offers)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_getattr(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``names[name]`` (relative to ``package``) on first use."""

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name], package), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


def lazy_dir(module_globals: Mapping[str, Any], names: Iterable[str]) -> Callable[[], list[str]]:
    """A module ``__dir__`` listing its own globals and the lazy ``names`` (loaded or not)."""
    lazy = frozenset(names)

    def __dir__() -> list[str]:
        return sorted(set(module_globals) | lazy)

    return __dir__
