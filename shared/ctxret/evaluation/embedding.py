"""An embedder wrapper that embeds each distinct text once per process.

Every harness wraps its embedder with :func:`cached_embedder`, so queries, parts, pieces and
contexts shared between representations, conditions and sweeps are embedded once. It satisfies
the :class:`ctxret.embedders.base.Embedder` protocol, so the core functions (``fit_pieces``,
``embed_fitting``, ``query_vectors``) run on it unchanged: the harness measures the real
pipeline, only without repeated model calls.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..embedders.base import Embedder


class CachedEmbedder:
    """Caches ``embed`` and ``count_tokens`` results by text; forwards everything else."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dims = int(inner.dims)
        self.max_tokens = int(inner.max_tokens)
        self.default_piece_bytes = int(inner.default_piece_bytes)
        self.default_score_threshold = float(inner.default_score_threshold)
        self._vectors: dict[str, np.ndarray] = {}
        self._tokens: dict[str, int] = {}
        self.model_texts = 0  # texts actually sent to the model

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, cached={len(self._vectors)})"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self._vectors]
        if missing:
            vectors = np.asarray(self.inner.embed(missing), dtype=np.float32)
            self.model_texts += len(missing)
            for text, vec in zip(missing, vectors, strict=False):
                self._vectors[text] = vec
        if not texts:
            return np.zeros((0, self.dims), np.float32)
        return np.stack([self._vectors[t] for t in texts]).astype(np.float32, copy=False)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return await asyncio.to_thread(self.embed, list(texts))

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        texts = list(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in self._tokens]
        if missing:
            for text, n in zip(missing, self.inner.count_tokens(missing), strict=False):
                self._tokens[text] = int(n)
        return [self._tokens[t] for t in texts]

    def __getattr__(self, name: str) -> Any:  # anything else the inner embedder offers
        return getattr(self.inner, name)


_CACHES: weakref.WeakKeyDictionary[Any, CachedEmbedder] = weakref.WeakKeyDictionary()
_BY_ID: dict[int, CachedEmbedder] = {}


def cached_embedder(embedder: Embedder) -> CachedEmbedder:
    """The process-wide cache for ``embedder`` (the same wrapper for the same embedder object)."""
    if isinstance(embedder, CachedEmbedder):
        return embedder
    try:
        cache = _CACHES.get(embedder)
        if cache is None:
            cache = _CACHES[embedder] = CachedEmbedder(embedder)
        return cache
    except TypeError:  # not weak-referenceable: keep it for the process
        cache = _BY_ID.get(id(embedder))
        if cache is None or cache.inner is not embedder:
            cache = _BY_ID[id(embedder)] = CachedEmbedder(embedder)
        return cache
