"""Embedding backends. Heavy backends are imported lazily (``LocalEmbedder`` needs ``ctxret[local]``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import lazy_dir
from .base import Embedder

if TYPE_CHECKING:
    from .local import LocalEmbedder, TokenEmbeddings, pool_spans, shared_local_embedder
    from .openai import OpenAIEmbedder
    from .wrappers import LangChainEmbedder, LlamaIndexEmbedder

__all__ = [
    "Embedder",
    "LocalEmbedder",
    "TokenEmbeddings",
    "pool_spans",
    "shared_local_embedder",
    "OpenAIEmbedder",
    "LangChainEmbedder",
    "LlamaIndexEmbedder",
]

_LAZY = {
    "LocalEmbedder": ".local",
    "TokenEmbeddings": ".local",
    "pool_spans": ".local",
    "shared_local_embedder": ".local",
    "OpenAIEmbedder": ".openai",
    "LangChainEmbedder": ".wrappers",
    "LlamaIndexEmbedder": ".wrappers",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__dir__ = lazy_dir(globals(), _LAZY)
