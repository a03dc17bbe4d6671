"""The embedder protocol: any backend that turns texts into unit vectors, in input order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


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
