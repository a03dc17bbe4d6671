"""A deterministic hashing embedder: no model, no download, the same vectors on every machine.

:class:`HashEmbedder` maps a text to hashed features -- its lower-cased words and the character
trigrams of each word -- summed into ``dims`` buckets and L2-normalised. Texts that share words or
word fragments are near (``"the cats Miso and Tofu"`` is nearer ``"my cat is called Miso"`` than
``"book a hotel in Lisbon"``); texts that share none are near orthogonal. It knows no meaning:
synonyms and paraphrases are far apart. It is for tests and for offline plumbing (checking that a
store writes, reads, filters and deletes what it should without loading a model), never for
retrieval quality.

It implements the :class:`~ctxret.embedders.base.Embedder` protocol and late chunking
(:meth:`HashEmbedder.embed_late`, what ``context="late"`` -- its default, as the local model's --
calls), so the index's write path runs as it does with the local model::

    from ctxret import ContextualIndex
    from ctxret.embedders.hashing import HashEmbedder

    index = ContextualIndex(embedder=HashEmbedder(), store=...)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence

import numpy as np

from ..text import clean_text

__all__ = ["HashEmbedder", "HashLateVectors"]

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r"\w+|[^\w\s]")
_WORD_WEIGHT = 1.0
_TRIGRAM_WEIGHT = 0.5


class HashLateVectors:
    """What :meth:`HashEmbedder.embed_late` returns (the fields of the local model's ``LateVectors``):
    per turn its pieces' context rows (``context``), the one-piece turns' own rows (``own``), the tokens read."""

    def __init__(self, context: list[np.ndarray], own: list[np.ndarray | None], tokens: int) -> None:
        self.context = context
        self.own = own
        self.tokens = tokens


class HashEmbedder:
    """Hashed word and character-trigram features in ``dims`` buckets, unit rows (an empty text's row is zero).

    Args:
        dims: the vector size (default 256). The model id names it (``hash:<dims>``), so an index built with
            one size refuses another.
        max_tokens: the input limit the index fits pieces to (:meth:`count_tokens` counts words and
            punctuation marks; nothing is truncated).

    Deterministic across processes and machines (BLAKE2b of each feature, not Python's salted ``hash``).
    Its default cosine floor is 0: every feature is non-negative, so a floor would only hide hits a plumbing
    test means to see.
    """

    default_piece_bytes: int = 600
    default_score_threshold: float = 0.0
    default_context: str = "late"
    default_weight: float = 0.0

    def __init__(self, dims: int = 256, *, max_tokens: int = 512) -> None:
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 2:
            raise ValueError(f"HashEmbedder(dims={dims!r}): dims must be an int of at least 2, e.g. 256")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 16:
            raise ValueError(f"HashEmbedder(max_tokens={max_tokens!r}): max_tokens must be an int of at least 16")
        self._dims = dims
        self._max_tokens = max_tokens
        self._cache: dict[str, int] = {}

    @property
    def model_id(self) -> str:
        return f"hash:{self._dims}"

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def max_tokens(self) -> int:
        return self._max_tokens

    def __repr__(self) -> str:
        return f"HashEmbedder(dims={self._dims}, max_tokens={self._max_tokens})"

    def _bucket(self, feature: str) -> int:
        bucket = self._cache.get(feature)
        if bucket is None:
            digest = hashlib.blake2b(feature.encode("utf-8", "surrogatepass"), digest_size=8).digest()
            bucket = int.from_bytes(digest, "little") % self._dims
            if len(self._cache) < 200_000:
                self._cache[feature] = bucket
        return bucket

    def _features(self, text: str) -> np.ndarray:
        """The raw (not normalised) feature row of one text."""
        row = np.zeros(self._dims, dtype=np.float64)
        for word in _WORD.findall(clean_text(text).lower()):
            row[self._bucket("w:" + word)] += _WORD_WEIGHT
            padded = f" {word} "
            for i in range(len(padded) - 2):
                row[self._bucket("c:" + padded[i : i + 3])] += _TRIGRAM_WEIGHT
        return row

    @staticmethod
    def _unit(rows: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return (rows / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An ``(n, dims)`` float32 array of unit rows, in input order (zero rows for texts without words)."""
        if isinstance(texts, str):
            raise TypeError("HashEmbedder.embed takes a sequence of texts, not one string: embed([text])")
        rows = np.zeros((len(texts), self._dims), dtype=np.float64)
        for i, text in enumerate(texts):
            rows[i] = self._features(text)
        return self._unit(rows)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Words and punctuation marks of each text (what :attr:`max_tokens` bounds)."""
        return [len(_TOKEN.findall(clean_text(t))) for t in texts]

    def embed_late(
        self,
        turns: Sequence[Sequence[str]],
        *,
        own: bool = False,
        progress: Callable[[int], object] | None = None,
    ) -> HashLateVectors:
        """Late chunking without a model: each piece's context row is the unit sum of its own unit row and its
        turn's (the pieces read together), so a piece leans toward its turn's words. ``own``: a one-piece
        turn also gets the piece's :meth:`embed` row. ``progress(n)`` is called once per turn with its pieces."""
        contexts: list[np.ndarray] = []
        owns: list[np.ndarray | None] = []
        tokens = 0
        for pieces in turns:
            pieces = list(pieces)
            tokens += sum(self.count_tokens(pieces))
            if not pieces:
                contexts.append(np.zeros((0, self._dims), dtype=np.float32))
                owns.append(None)
                continue
            raw = np.stack([self._features(p) for p in pieces])
            alone = self._unit(raw).astype(np.float64)
            turn = self._unit(raw.sum(axis=0, keepdims=True)).astype(np.float64)
            contexts.append(self._unit(alone + turn))
            owns.append(self._unit(raw[:1]) if own and len(pieces) == 1 else None)
            if progress is not None:
                progress(len(pieces))
        return HashLateVectors(contexts, owns, tokens)
