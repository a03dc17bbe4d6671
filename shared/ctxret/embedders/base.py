"""The embedder protocol: any backend that turns texts into unit vectors, in input order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..errors import EmbeddingError


@runtime_checkable
class Embedder(Protocol):
    """What the index needs from an embedding backend.

    ``embed`` returns an ``(n, dims)`` float32 array of unit rows (a row of an empty text may be
    zero), in input order. ``model_id`` is recorded in the index config so a collection is never
    searched with vectors from another model. ``max_tokens`` is the model's input limit; the
    index sizes pieces so that ``count_tokens`` never exceeds it (``count_tokens`` may return an
    upper bound when the exact tokenizer is unavailable, never an underestimate).
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def default_piece_bytes(self) -> int:
        """The piece byte budget that fits this model (the index's default for it)."""
        ...

    @property
    def default_score_threshold(self) -> float:
        """A sensible default cosine floor for this model's vectors (calibrate on your data)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    async def aembed(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


def embedder_name(embedder: Any) -> str:
    """How errors name an embedder: its type and model id (a guard's: the embedder it guards, :mod:`.guard`)."""
    embedder = getattr(embedder, "guarded_embedder", embedder)
    try:
        model = getattr(embedder, "model_id", "?")
    except Exception:  # an embedder whose model_id fails: named by its type  # noqa: BLE001
        model = "?"
    return f"{type(embedder).__name__} ({model})"


def check_vectors(vectors: Any, n: int, dims: int, model: str) -> np.ndarray:
    """An embedder's answer for ``n`` texts as the ``(n, dims)`` float32 array the protocol promises.

    Anything else (another count or size, a flat or ragged answer, NaN or infinity) is an
    :class:`EmbeddingError` naming the embedder (``model``) and the fix: nothing is truncated,
    padded, stored or searched with. Every embedding goes through it, written or searched.
    """
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 2 or arr.shape[0] != n:
        got = "a ragged or non-numeric answer" if arr is None else f"an array of shape {arr.shape}"
        raise EmbeddingError(
            f"the embedder {model} returned {got} for {n} texts; it must return one {dims}-dimensional vector "
            "per text, in order (an (n, dims) array): check its embed() and aembed()"
        )
    if arr.shape[1] != dims:
        raise EmbeddingError(
            f"the embedder {model} returned {arr.shape[1]}-dimensional vectors but this index holds "
            f"{dims}-dimensional ones; use the embedder (and dimensions) the index was built with, or rebuild it"
        )
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise EmbeddingError(
            f"the embedder {model} returned vectors with NaN or infinite values ({len(bad)} of {n}, the first for "
            f"text {int(bad[0])}); nothing was stored or searched with them: check the model and its inputs"
        )
    return arr
