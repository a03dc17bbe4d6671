"""Fitting text to an embedder's input limit: pieces re-packed until they fit, long texts embedded in windows.

Nothing is ever truncated inside a model: a piece over the model's token limit is re-packed at a
smaller byte budget (:func:`ctxret.ingest.pieces.fit_pieces`); any other text over the limit (a whole turn, a long
query) is embedded as the unit mean of windows that fit (:func:`embed_fitting`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..blend import mean_vector
from ..text import MIN_PIECE_BYTES, clean_text, pack_text_pieces
from .base import Embedder, check_vectors, embedder_name

__all__ = ["embed_fitting", "aembed_fitting", "embed_in_batches", "EMBED_CHUNK"]

#: Texts per embed call while a progress bar is shown (its granularity: the bar moves from the first batch).
EMBED_CHUNK = 64


def _fitting_plan(embedder: Embedder, texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """Texts to send, and which input each belongs to: an over-limit text becomes windows that fit."""
    limit = int(embedder.max_tokens)
    counts = embedder.count_tokens(texts)
    flat: list[str] = []
    owner: list[int] = []
    for i, (text, count) in enumerate(zip(texts, counts, strict=False)):
        if count <= limit:
            flat.append(text)
            owner.append(i)
            continue
        size = len(text.encode("utf-8"))
        budget = max(MIN_PIECE_BYTES, int(size * limit / count * 0.9))
        while True:
            windows = pack_text_pieces(text, budget)
            if max(embedder.count_tokens(windows)) <= limit or budget <= MIN_PIECE_BYTES:
                break
            budget = max(MIN_PIECE_BYTES, budget * 2 // 3)
        flat.extend(windows)
        owner.extend([i] * len(windows))
    return flat, owner


def _combine_windows(vecs: np.ndarray, owner: Sequence[int], n: int) -> np.ndarray:
    vecs = np.asarray(vecs, dtype=np.float32)
    out = np.zeros((n, vecs.shape[1]), np.float32)
    owner_arr = np.asarray(owner)
    for i in range(n):
        rows = vecs[owner_arr == i]
        out[i] = rows[0] if len(rows) == 1 else mean_vector(rows)
    return out


def embed_fitting(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed texts in one pass; a text over the model's token limit is embedded as the unit mean of windows that fit."""
    texts = [clean_text(t) for t in texts]
    if not texts:
        return np.zeros((0, int(embedder.dims)), np.float32)
    flat, owner = _fitting_plan(embedder, texts)
    return _combine_windows(_checked(embedder, embedder.embed(flat), len(flat)), owner, len(texts))


async def aembed_fitting(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Async :func:`embed_fitting`: awaits the embedder's async path."""
    texts = [clean_text(t) for t in texts]
    if not texts:
        return np.zeros((0, int(embedder.dims)), np.float32)
    flat, owner = _fitting_plan(embedder, texts)
    return _combine_windows(_checked(embedder, await embedder.aembed(flat), len(flat)), owner, len(texts))


def _checked(embedder: Embedder, vectors: Any, n: int) -> np.ndarray:
    """The embedder's answer checked (:func:`~.base.check_vectors`): queries, context and views alike."""
    return check_vectors(vectors, n, int(embedder.dims), embedder_name(embedder))


def embed_in_batches(
    embedder: Embedder, texts: Sequence[str], *, progress: bool | None, desc: str, bar: Any = None
) -> np.ndarray:
    """Embed texts that already fit, with a progress bar when asked (``None``: on a terminal, for more than one batch).

    With a bar, texts go to the model :data:`EMBED_CHUNK` at a time, so it moves from the first batch;
    the texts are sorted by length first, so the batches pad as little as one call would. ``bar``: a
    tqdm bar of the caller's to move instead of a new one.
    """
    show = bar is not None or (progress if progress is not None else (len(texts) > EMBED_CHUNK and sys.stderr.isatty()))
    if not show or not texts:
        return _checked(embedder, embedder.embed(list(texts)), len(texts))
    from tqdm.auto import tqdm

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out = np.zeros((len(texts), int(embedder.dims)), np.float32)
    own = bar is None
    if own:
        bar = tqdm(total=len(texts), desc=desc, unit="piece", file=sys.stderr, mininterval=0, miniters=1)
    try:
        for start in range(0, len(order), EMBED_CHUNK):
            rows = order[start : start + EMBED_CHUNK]
            out[rows] = _checked(embedder, embedder.embed([texts[i] for i in rows]), len(rows))
            bar.update(len(rows))
    finally:
        if own:
            bar.close()
    return out
