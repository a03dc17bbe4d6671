"""Plain vector search: the stored pieces nearest a vector the caller made, by cosine.

What a vector store's by-vector searches mean (langchain-chroma's ``similarity_search_by_vector`` and
``max_marginal_relevance_search_by_vector``): no message, so no parts, no blending with a whole message, no lexical
side and no floor; the ``k`` nearest pieces inside the scope, each with its cosine (``Hit.scores["cosine"]``) and the
relevance of that cosine alone. With ``lambda_mult``, maximal marginal relevance over the ``fetch_k`` nearest
(:func:`ctxret.query.mmr.mmr_order`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InputError
from ..results import Hit
from ..storage.base import DEFERRED
from ..storage.schema import Scope
from .executor import reading
from .mmr import DEFAULT_FETCH_K, check_fetch_k, check_lambda_mult, mmr_order
from .relevance import RelevanceCalibration, relevance

__all__ = ["nearest"]


def nearest(
    store: Any,
    vector: Any,
    k: int,
    scope: Scope,
    *,
    dims: int,
    calibration: RelevanceCalibration | None = None,
    fetch_k: int = DEFAULT_FETCH_K,
    lambda_mult: float | None = None,
) -> list[Hit]:
    """The ``k`` pieces nearest ``vector`` inside ``scope`` (best first), or their MMR order with ``lambda_mult``.

    ``store``: anything with ``resolve(scope) -> (dense backend, lexical)`` (``PieceStore``).
    ``dims``: the collection's dimension; a vector of another length, or with NaN, infinite or all-zero entries, is an
    :class:`InputError` naming what is wrong."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k must be a positive integer, got {k!r}")
    q = _query_vector(vector, dims)
    n = int(k) if lambda_mult is None else max(int(k), check_fetch_k(fetch_k))
    with reading(store) as reads:  # one session: the texts read last are of the pieces the graph search found
        return _nearest(reads, q, n, k, scope, dims, calibration, lambda_mult)


def _nearest(
    store: Any,
    q: np.ndarray,
    n: int,
    k: int,
    scope: Scope,
    dims: int,
    calibration: RelevanceCalibration | None,
    lambda_mult: float | None,
) -> list[Hit]:
    dense, _ = store.resolve(scope)
    rows = dense.dense(q[None, :], n, scope)[0]
    fetched = dense.fetch([r[0] for r in rows], scope)
    ids = [r[0] for r in rows if r[0] in fetched]
    cosines = [float(r[2]) for r in rows if r[0] in fetched]
    if lambda_mult is not None:
        order = mmr_order(
            cosines,
            np.stack([fetched[i][2] for i in ids]) if ids else np.zeros((0, dims)),
            int(k),
            check_lambda_mult(lambda_mult),
        )
    else:
        order = list(range(min(int(k), len(ids))))
    chosen = [ids[i] for i in order]
    deferred = [i for i in chosen if fetched[i][1] is DEFERRED]
    done = dense.complete(deferred) if deferred else {}  # unscoped reads give vectors only: texts for the kept ones
    hits = []
    for i in order:
        if ids[i] in done:
            text, meta = done[ids[i]]
        elif fetched[ids[i]][1] is DEFERRED:
            continue  # deleted since the search
        else:
            text, meta, _ = fetched[ids[i]]
        scores = {"cosine": cosines[i]}
        if calibration is not None:
            scores["relevance"] = relevance(calibration, cosines[i], None)
        hits.append(Hit(ids[i], text, cosines[i], dict(meta), scores))
    return hits


def _query_vector(vector: Any, dims: int) -> np.ndarray:
    try:
        q = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise InputError(f"the query vector must be a list of {dims} numbers, got {type(vector).__name__}") from e
    if q.ndim != 1 or q.shape[0] != dims:
        raise InputError(
            f"the query vector has {q.shape[0] if q.ndim == 1 else q.shape} dimensions but the collection's vectors "
            f"have {dims}; embed the query with the index's embedder (store.embeddings.embed_query(text))"
        )
    if not np.all(np.isfinite(q)):
        raise InputError("the query vector holds NaN or infinite numbers; embed the query again")
    norm = float(np.linalg.norm(q))
    if norm == 0.0 or math.isnan(norm):
        raise InputError("the query vector is all zeros: it has no direction to search by")
    return (q / norm).astype(np.float32)
