"""A turn's pieces as they are stored: labelled, re-packed until each fits the embedder's input limit
(:func:`fit_pieces`), and the flat Chroma metadata stored with each (:func:`piece_metadata`)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..embedders.base import Embedder
from ..errors import InputError
from ..storage.schema import SHARED_KEYS, caller_metadata, join_caller_keys
from ..text import MIN_PIECE_BYTES, exact_patches, pack_text_pieces
from .turns import Piece, Turn, label_pieces, piece_id

__all__ = ["fit_pieces", "piece_metadata"]


def fit_pieces(turn: Turn, embedder: Embedder, max_bytes: int) -> list[Piece]:
    """Label ``turn``'s pieces at ``max_bytes`` and re-pack any piece over the embedder's token limit.

    An over-limit piece is re-packed at a smaller budget until every part fits, so nothing is
    ever truncated inside the model. Ordinals and ids are assigned after fitting.
    """
    pieces = label_pieces(turn, max_bytes)
    if not pieces:
        return pieces
    limit = int(embedder.max_tokens)
    counts = embedder.count_tokens([p.text for p in pieces])
    if max(counts) <= limit:
        return _exact(turn, pieces)
    out: list[Piece] = []
    for piece, count in zip(pieces, counts, strict=False):
        out.extend([piece] if count <= limit else _split_to_fit(embedder, piece, count, limit))
    seen: dict[int, int] = defaultdict(int)
    fitted = []
    for p in out:
        ordinal = seen[p.source_ordinal]
        seen[p.source_ordinal] += 1
        pid = piece_id(turn.thread_id, turn.index, p.source_ordinal, ordinal, p.text, turn.doc_id)
        fitted.append(replace(p, ordinal=ordinal, id=pid))
    return _exact(turn, fitted)


def _exact(turn: Turn, pieces: list[Piece]) -> list[Piece]:
    """A chat turn's pieces with what gives back each message exactly (:func:`ctxret.text.exact_patches`: the
    packed bodies collapse whitespace); a document's as they are (its sections are never given back as written)."""
    if turn.kind != "turn":
        return pieces
    by_source: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(pieces):
        by_source[p.source_ordinal].append(i)
    out = list(pieces)
    texts = {s.ordinal: s.text for s in turn.sources}
    for ordinal, at in by_source.items():
        patches = exact_patches(texts[ordinal], [pieces[i].body for i in at])
        for i, patch in zip(at, patches, strict=True):
            if patch is not None:
                out[i] = replace(pieces[i], exact_patch=patch)
    return out


def _split_to_fit(embedder: Embedder, piece: Piece, count: int, limit: int) -> list[Piece]:
    body_bytes = len(piece.body.encode("utf-8"))
    budget = max(MIN_PIECE_BYTES, int(body_bytes * limit / count * 0.9))
    while True:
        bodies = pack_text_pieces(piece.body, budget)
        texts = [f"{piece.header}\n{b}" for b in bodies]
        if max(embedder.count_tokens(texts)) <= limit:
            return [replace(piece, text=t, body=b) for t, b in zip(texts, bodies, strict=False)]
        if budget <= MIN_PIECE_BYTES:
            raise InputError(
                f"cannot fit a piece of turn {piece.turn_id!r} into {limit} tokens even at {budget} bytes; "
                "shorten the header (title, source names) or use an embedder with a larger input limit"
            )
        budget = max(MIN_PIECE_BYTES, budget * 2 // 3)


def piece_metadata(turn: Turn, p: Piece) -> dict[str, Any]:
    """The flat Chroma metadata ctxret stores with a piece."""
    caller = caller_metadata(p.metadata) if p.metadata else {}
    shared = [k for k in SHARED_KEYS if p.metadata and p.metadata.get(k) is not None]  # the piece's own: checked
    meta: dict[str, Any] = {
        **caller,
        "thread_id": p.thread_id,
        "turn_id": p.turn_id,
        "parent_id": p.turn_id,
        "turn_index": p.turn_index,
        "turn_label": turn.label,
        "kind": p.kind,
        "source_kind": p.source_kind,
        "source_label": p.source_label,
        "source_ordinal": p.source_ordinal,
        "ordinal": p.ordinal,
        "header": p.header,
        "body": p.body,
    }
    if caller or shared:  # a shared key the caller gave is listed: returned as given (schema.caller_view)
        meta["caller_keys"] = join_caller_keys([*caller, *shared])
    if p.source_name:
        meta["source_name"] = p.source_name
    if p.doc_id is not None:
        meta["doc_id"] = p.doc_id
    if p.message_key is not None:
        meta["message_key"] = p.message_key
    if p.call_id is not None:
        meta["tool_call_id"] = p.call_id
    if p.result_key is not None:
        meta["result_key"] = p.result_key
    if p.exact_patch is not None:
        meta["exact_patch"] = p.exact_patch
    if p.timestamp is not None:
        meta["timestamp"] = p.timestamp.isoformat()
        meta["ts_epoch"] = _epoch(p.timestamp)
        if p.time_added:
            meta["time_added"] = True
    if turn.item:  # an item's own fields (the item store's turn): ctxret's, never a caller's
        meta.update(turn.item)
    return meta


def _epoch(ts: datetime) -> float:
    if ts.tzinfo is None:
        return (ts - datetime(1970, 1, 1)).total_seconds()
    return ts.timestamp()
