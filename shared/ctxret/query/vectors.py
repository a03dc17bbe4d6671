"""Query vectors: a message → its parts (≤ 8) and one blended vector per part, from one embedding request.

The whole message is capped at 8,000 UTF-8 bytes keeping the end; each part is blended with the
whole (``blend_with_context(part, whole, weight)``). A message that is a single part is
embedded once: its part and its whole are the same text, and the blend of a vector with itself
is that vector.
"""

from __future__ import annotations

import numpy as np

from ..blend import OWN_WEIGHT, blend_with_context
from ..embedders.base import Embedder
from ..embedders.fitting import aembed_fitting, embed_fitting
from ..errors import InputError
from ..text import MAX_PARTS, WHOLE_MESSAGE_MAX_BYTES, clean_text, tail_utf8
from .split.splitter import split_prompt_chunks

__all__ = ["aquery_vectors", "blend_parts", "embed_inputs", "query_texts", "query_vectors"]


def query_texts(message: str, *, max_parts: int = MAX_PARTS, split: bool = True) -> tuple[list[str], str]:
    """The parts of ``message`` and its whole-message text (capped, the end kept); ``([], "")`` when empty."""
    if not isinstance(message, str):
        raise InputError(f"message must be a string, got {type(message).__name__}")
    whole = tail_utf8(clean_text(message), WHOLE_MESSAGE_MAX_BYTES).strip()
    if not whole:
        return [], ""
    return (split_prompt_chunks(message, max_parts) if split else [whole]), whole


def embed_inputs(parts: list[str], whole: str, split: bool) -> list[str]:
    """What to embed: the parts, plus the whole message when it is not already the only part."""
    if not split or (len(parts) == 1 and clean_text(parts[0]) == clean_text(whole)):
        return parts
    return parts + [whole]


def blend_parts(vecs: np.ndarray, n_parts: int, weight: float) -> np.ndarray:
    """The parts' query vectors from the vectors of :func:`embed_inputs` (the whole message's last)."""
    if len(vecs) == n_parts:  # one vector per part: unblended (no split) or part == whole
        return np.asarray(vecs, dtype=np.float32)
    return blend_with_context(vecs[:-1], vecs[-1], weight).astype(np.float32)


def query_vectors(
    embedder: Embedder,
    message: str,
    *,
    weight: float = OWN_WEIGHT,
    max_parts: int = MAX_PARTS,
    split: bool = True,
) -> tuple[list[str], np.ndarray]:
    """The parts of ``message`` and their blended query vectors, from one embedding request.

    With ``split=False`` the single part is the whole message and its vector the unblended
    whole-message vector: the one-vector baseline. An empty or whitespace-only message gives no parts.
    """
    parts, whole = query_texts(message, max_parts=max_parts, split=split)
    if not parts:
        return [], np.zeros((0, int(embedder.dims)), np.float32)
    return parts, blend_parts(embed_fitting(embedder, embed_inputs(parts, whole, split)), len(parts), weight)


async def aquery_vectors(
    embedder: Embedder,
    message: str,
    *,
    weight: float = OWN_WEIGHT,
    max_parts: int = MAX_PARTS,
    split: bool = True,
) -> tuple[list[str], np.ndarray]:
    """Async :func:`query_vectors`: the embedding request awaits the embedder's async path."""
    parts, whole = query_texts(message, max_parts=max_parts, split=split)
    if not parts:
        return [], np.zeros((0, int(embedder.dims)), np.float32)
    return parts, blend_parts(await aembed_fitting(embedder, embed_inputs(parts, whole, split)), len(parts), weight)
