"""Context strategies: the vector each piece is blended with (its ``context``).

* ``mean`` (default): the unit mean of the turn's piece vectors — no extra embedding call, never
  over the model's input limit (the seed's choice).
* ``turn``: the embedding of the turn's whole text (windows averaged when it is over the limit);
  costs one more embedding per turn.
* ``late``: late chunking — the turn's text (its pieces, in order) runs through the model once
  with token-level output, and each piece's context is the unit mean of its own tokens' vectors,
  which have attended to their neighbours (within the model's window; longer turns are read in
  overlapping windows). Needs an embedder with ``embed_tokens`` (the local model); hosted APIs do
  not expose token vectors. With ``weight=0`` the stored vector is the late-chunked vector alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .blend import mean_vector
from .errors import InputError
from .turns import Piece

CONTEXT_STRATEGIES = ("mean", "turn", "late")


def late_context_vectors(embedder: Any, pieces: Sequence[Piece]) -> np.ndarray:
    """One late-chunked vector per piece of one turn: pieces joined in order, pooled by span."""
    if not hasattr(embedder, "embed_tokens"):
        raise InputError(
            f"context='late' needs token-level output, which {type(embedder).__name__} does not give; "
            "use the local embedder (ctxret[local]) or context='mean'"
        )
    from .embedders.local import pool_spans

    spans = []
    parts = []
    pos = 0
    for p in pieces:
        if parts:
            parts.append("\n")
            pos += 1
        spans.append((pos, pos + len(p.text)))
        parts.append(p.text)
        pos += len(p.text)
    tokens = embedder.embed_tokens("".join(parts))
    vecs = pool_spans(tokens, spans)
    return np.asarray(vecs, dtype=np.float32)


def context_vectors(
    strategy: str, embedder: Any, turn_pieces: Sequence[Sequence[Piece]], piece_vectors: np.ndarray, turn_texts: Sequence[str]
) -> list[np.ndarray]:
    """Context for every piece, turn by turn: a ``(d,)`` vector per turn, or ``(n, d)`` per piece (``late``)."""
    if strategy == "mean":
        out, row = [], 0
        for pieces in turn_pieces:
            n = len(pieces)
            out.append(mean_vector(piece_vectors[row : row + n]) if n else np.zeros(piece_vectors.shape[1], np.float32))
            row += n
        return out
    if strategy == "turn":
        from .index import embed_fitting

        return list(embed_fitting(embedder, turn_texts))
    if strategy == "late":
        return [late_context_vectors(embedder, pieces) if pieces else np.zeros((0, piece_vectors.shape[1]), np.float32) for pieces in turn_pieces]
    raise InputError(f"unknown context strategy {strategy!r}; use one of {CONTEXT_STRATEGIES}")
