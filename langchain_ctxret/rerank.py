"""A LangChain document compressor (a reranker) as the core's per-group ``rerank`` callable.

``compressor_reranker(compressor)`` returns ``rerank(part, hits) -> scores`` for
``SearchSettings(rerank=...)``: each group's candidates go to ``compressor.compress_documents(docs,
part)`` as Documents (``page_content`` = the piece text, ``id`` = the piece id, metadata = the
piece's plus ``score`` = its relevance and ``group_query`` = the part); the compressor returns a
reordered subset. A returned Document's ``metadata["relevance_score"]`` (Cohere, FlashRank, …)
is its rerank score; without one, the returned order is the score (``1 / (1 + position)``).
Documents it leaves out are dropped from the group (so a compressor's ``top_n`` caps the group:
keep it at least ``k``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ctxret import Hit, InputError
from ctxret.adapters import candidate_metadata
from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document

__all__ = ["compressor_reranker", "documents_to_scores", "as_reranker"]


def hit_document(hit: Hit, part: str) -> Document:
    """What a compressor sees for one candidate."""
    meta = candidate_metadata(hit, part)
    if hit.relevance is not None:
        meta.update(score=hit.relevance, score_scale="relevance")
    return Document(page_content=hit.text, metadata=meta, id=str(hit.id))


def documents_to_scores(sent: Sequence[Document], returned: Sequence[Document]) -> list[float | None]:
    """One score per sent Document (``None``: the compressor left it out), from what it returned.

    Returned Documents are matched to sent ones by ``id``, then by identity, then by text.
    """
    by_id = {d.id: i for i, d in enumerate(sent) if d.id}
    by_obj = {id(d): i for i, d in enumerate(sent)}
    by_text: dict[str, list[int]] = {}
    for n, d in enumerate(sent):
        by_text.setdefault(d.page_content, []).append(n)
    order: list[tuple[int, Document]] = []
    used: set[int] = set()
    for d in returned:
        i: int | None = by_id.get(d.id) if d.id else None
        if i is None:
            i = by_obj.get(id(d))
        if i is None:
            i = next((j for j in by_text.get(d.page_content, []) if j not in used), None)
        if i is None or i in used:
            continue  # a document the compressor made up, or a repeat
        used.add(i)
        order.append((i, d))
    given = [_score(d.metadata.get("relevance_score")) for _, d in order]
    scores: list[float | None] = [None] * len(sent)
    use_given = bool(order) and all(s is not None for s in given)
    for pos, ((i, _), s) in enumerate(zip(order, given, strict=False)):
        scores[i] = s if use_given else 1.0 / (1.0 + pos)
    return scores


def _score(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value)  # numpy scalars, numeric strings
        except (TypeError, ValueError):
            return None
    return float(value) if math.isfinite(float(value)) else None


def compressor_reranker(
    compressor: BaseDocumentCompressor, *, callbacks: Callbacks = None
) -> Callable[[str, Sequence[Hit]], list[float | None]]:
    """The core's ``rerank`` callable running ``compressor`` on each group (see the module docstring)."""
    if not isinstance(compressor, BaseDocumentCompressor):
        raise InputError(f"expected a LangChain BaseDocumentCompressor, got {type(compressor).__name__}")

    def rerank(part: str, hits: Sequence[Hit]) -> list[float | None]:
        docs = [hit_document(h, part) for h in hits]
        return documents_to_scores(docs, compressor.compress_documents(docs, part, callbacks=callbacks))

    rerank.__name__ = f"rerank_{type(compressor).__name__}"
    return rerank


def as_reranker(value: Any, *, callbacks: Callbacks = None) -> Any:
    """A compressor as the core's callable; a callable (or ``None``) as it is."""
    if value is None or isinstance(value, BaseDocumentCompressor):
        return compressor_reranker(value, callbacks=callbacks) if value is not None else None
    if callable(value):
        return value
    raise InputError(
        "rerank must be a LangChain BaseDocumentCompressor or a callable (part, hits) -> scores, "
        f"got {type(value).__name__}"
    )
