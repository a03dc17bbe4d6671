"""Context strategies: the vector each piece is blended with (its ``context``).

* ``mean`` (default): the unit mean of the turn's piece vectors — no extra embedding call, never
  over the model's input limit.
* ``turn``: the embedding of the turn's whole text (windows averaged when it is over the limit);
  costs one more embedding per turn.
* ``late``: late chunking — the turn's text (its pieces, in order) runs through the model once
  with token-level output, and each piece's context is the unit mean of its own tokens' vectors,
  which have attended to their neighbours (within the model's window; longer turns are read in
  overlapping windows). Needs an embedder with ``embed_tokens`` (the local model); hosted APIs do
  not expose token vectors. With ``weight=0`` the stored vector is the late-chunked vector alone.
* ``llm``: LLM-written context (Anthropic's contextual retrieval, in the blend): a *contextualizer*
  you pass — one call per turn or section, given its text and its pieces — writes one short line
  situating each piece; the line's embedding is the piece's context, the line is stored with the
  piece (``context_text``) and indexed for BM25 with it (contextual BM25). The piece text that is
  shown and embedded stays the original. A piece whose line is empty falls back to ``mean``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..blend import mean_vector
from ..embedders.base import can_embed_late, embedder_name, gives_token_batches, gives_tokens
from ..errors import CtxretError, InputError, callable_error
from .turns import Piece

CONTEXT_STRATEGIES = ("mean", "turn", "late", "llm")

#: ``contextualizer(passage_text, piece_bodies) -> one context line per piece``.
Contextualizer = Callable[[str, Sequence[str]], Sequence[str]]


def contextualize(
    contextualizer: Contextualizer | None, turn_text: str, pieces: Sequence[Piece], where: str
) -> list[str]:
    """Call the contextualizer for one turn and check what it returned (one string per piece)."""
    if contextualizer is None:
        raise InputError(
            "context='llm' needs a contextualizer: ContextualIndex(..., context='llm', contextualizer=fn) where "
            "fn(passage_text, piece_bodies) returns one context line per piece (LangChain: "
            "langchain_ctxret.llm_contextualizer(llm))"
        )
    try:
        lines = contextualizer(turn_text, [p.body for p in pieces])
    except CtxretError:
        raise
    except Exception as e:
        raise callable_error("contextualizer", contextualizer, e) from e
    if isinstance(lines, str) or not isinstance(lines, Sequence) or len(lines) != len(pieces):
        if isinstance(lines, str):
            got = "a string"
        else:
            got = f"{len(lines) if isinstance(lines, Sequence) else type(lines).__name__}"
        raise InputError(
            f"the contextualizer returned {got} for {where}, which has {len(pieces)} pieces; "
            "it must return one context line (str) per piece, in order"
        )
    out = []
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise InputError(f"the contextualizer's line {i} for {where} is {type(line).__name__}, not str")
        out.append(" ".join(line.split()))
    return out


def _joined(pieces: Sequence[Piece]) -> tuple[str, list[tuple[int, int]]]:
    """A turn's pieces joined by newlines, and each piece's character span in the result."""
    spans: list[tuple[int, int]] = []
    parts: list[str] = []
    pos = 0
    for p in pieces:
        if parts:
            parts.append("\n")
            pos += 1
        spans.append((pos, pos + len(p.text)))
        parts.append(p.text)
        pos += len(p.text)
    return "".join(parts), spans


def late_context_vectors(embedder: Any, pieces: Sequence[Piece]) -> np.ndarray:
    """One late-chunked vector per piece of one turn: pieces joined in order, pooled by span."""
    return late_context_many(embedder, [pieces])[0]


def late_context_many(
    embedder: Any, turn_pieces: Sequence[Sequence[Piece]], *, progress: Callable[[int], object] | None = None
) -> list[np.ndarray]:
    """:func:`late_context_vectors` of many turns, their token passes sharing model runs (``progress(n)``: ``n``
    more pieces done, after each model run, when the embedder reports it)."""
    return late_passes(embedder, turn_pieces, progress=progress)[0]


def late_passes(
    embedder: Any,
    turn_pieces: Sequence[Sequence[Piece]],
    *,
    own: bool = False,
    progress: Callable[[int], object] | None = None,
) -> tuple[list[np.ndarray], list[np.ndarray | None]]:
    """Late chunking of many turns in one token pass: per turn, its pieces' context vectors, and with ``own``
    the pieces' own embeddings where that pass gives them (``None`` elsewhere).

    The pass over a turn reads each piece inside its turn, so it gives a piece's own embedding -- the piece
    read alone, as ``embed`` reads it -- only when the turn is that one piece and fits in one model window
    (the model input is then exactly ``[CLS]`` piece ``[SEP]``). Pooling a piece's tokens out of a longer
    pass is not that embedding (its tokens have read their neighbours: it is the late-chunked vector itself),
    so the blend's ``weight`` would lose its meaning; such pieces are embedded on their own.
    """
    if can_embed_late(embedder):  # one pass over each turn's tokens, as the pieces were tokenized when fitted
        out = embedder.embed_late([[p.text for p in pieces] for pieces in turn_pieces], own=own, progress=progress)
        return [np.asarray(c, dtype=np.float32) for c in out.context], list(out.own)
    if not gives_tokens(embedder):
        raise InputError(
            f"context='late' needs token-level output, which {embedder_name(embedder)} does not give; "
            "use the local embedder (ctxret[local]) or context='mean'"
        )
    from ..embedders.local import pool_spans

    joined = [_joined(pieces) for pieces in turn_pieces]
    if gives_token_batches(embedder):
        tokens = embedder.embed_tokens_many([t for t, _ in joined])
    else:
        tokens = [embedder.embed_tokens(t) for t, _ in joined]
    contexts = [
        np.asarray(pool_spans(tok, spans), dtype=np.float32) for tok, (_, spans) in zip(tokens, joined, strict=True)
    ]
    if progress is not None:
        progress(sum(len(p) for p in turn_pieces))
    return contexts, [None] * len(contexts)


def context_vectors(
    strategy: str,
    embedder: Any,
    turn_pieces: Sequence[Sequence[Piece]],
    piece_vectors: np.ndarray,
    turn_texts: Sequence[str],
    context_texts: Sequence[Sequence[str]] | None = None,
    *,
    progress: Callable[[int], object] | None = None,
) -> list[np.ndarray]:
    """Context for every piece, turn by turn: a ``(d,)`` vector per turn, or ``(n, d)`` per piece (``late``, ``llm``).

    ``context_texts`` (``llm`` only): the contextualizer's line for every piece, turn by turn. ``progress``
    (``late`` only): called with the pieces done after each model run.
    """
    if strategy == "mean":
        out, row = [], 0
        for pieces in turn_pieces:
            n = len(pieces)
            out.append(mean_vector(piece_vectors[row : row + n]) if n else np.zeros(piece_vectors.shape[1], np.float32))
            row += n
        return out
    if strategy == "turn":
        from ..embedders.fitting import embed_fitting

        return list(embed_fitting(embedder, turn_texts))
    if strategy == "llm":
        from ..embedders.fitting import embed_fitting

        if context_texts is None:
            raise InputError("context='llm' needs the contextualizer's lines (context_texts)")
        flat = [line for lines in context_texts for line in lines if line]
        vecs = embed_fitting(embedder, flat) if flat else np.zeros((0, piece_vectors.shape[1]), np.float32)
        out, row, v = [], 0, 0
        for pieces, lines in zip(turn_pieces, context_texts, strict=True):
            n = len(pieces)
            fallback = mean_vector(piece_vectors[row : row + n]) if n else None
            ctx = np.zeros((n, piece_vectors.shape[1]), np.float32)
            for i, line in enumerate(lines):
                if line:
                    ctx[i] = vecs[v]
                    v += 1
                else:
                    ctx[i] = fallback
            out.append(ctx)
            row += n
        return out
    if strategy == "late":
        dims = piece_vectors.shape[1]
        filled = [i for i, pieces in enumerate(turn_pieces) if pieces]
        late = late_context_many(embedder, [turn_pieces[i] for i in filled], progress=progress)
        out_late = [np.zeros((0, dims), np.float32) for _ in turn_pieces]
        for i, vecs in zip(filled, late, strict=True):
            out_late[i] = vecs
        return out_late
    raise InputError(f"unknown context strategy {strategy!r}; use one of {CONTEXT_STRATEGIES}")
