"""Hybrid (dense + BM25) representations of the harness: the runtime's own search, on exact stores.

Every hybrid number the harness reports comes from :func:`ctxret.query.deadline.run_candidates` (the
product's search loop up to its candidates: dense and lexical candidates per part, one fetch for
lexical-only hits, exact BM25 and cosine for every candidate, fusion — the same schedule as a
product search) run on an :class:`~ctxret.storage.memory.ExactStore` (the
conversation's thread view: exact cosine over its stored vectors, BM25 with its own statistics —
the code a thread-scoped product search runs), answers lifted and the latest fact first included. Only the floor is
applied afterwards (:func:`group_floor_mask`, the runtime's rule of :mod:`ctxret.query.floor`), so
one search serves every floor of a sweep; and :func:`~ctxret.query.search.fuse_candidates` re-ranks
one search's candidates under each fusion setting of a sweep.

A conversation is a thread, so the statistics are the conversation's, exactly as in a
thread-scoped search of the product.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..embedders.base import Embedder
from ..query.deadline import run_candidates
from ..query.executor import Backends
from ..query.floor import hit_floor, part_answered
from ..query.fusion import FusionMethod, FusionSettings, passes_floor
from ..query.search import PartCandidates, SearchPlan
from ..storage.base import DenseBackend, LexicalBackend
from ..storage.memory import ExactStore
from ..storage.schema import Scope
from ..text import MAX_PARTS

__all__ = [
    "HYBRID_REPRESENTATIONS",
    "RUNTIME_DEFAULT",
    "fusion_for",
    "floor_mask",
    "group_floor_mask",
    "hybrid_candidates",
    "scope_candidates",
    "with_candidates",
]

#: Hybrid representation name → the fusion method it runs (at the run's lexical weight and RRF k).
HYBRID_REPRESENTATIONS: dict[str, FusionMethod] = {
    "hybrid_rrf": FusionMethod.RRF,  # equal-weight RRF (k = rrf_k, 60 by default)
    "hybrid_weighted": FusionMethod.WEIGHTED_RRF,  # RRF with the lexical side weighted by lexical_weight
    "hybrid_convex": FusionMethod.CONVEX,  # lexical_weight * minmax(bm25) + (1 - lexical_weight) * minmax(cosine)
}

#: The runtime's default hybrid settings, used by the ``hybrid_default`` representation whatever
#: the run's flags say.
RUNTIME_DEFAULT = FusionSettings()


def fusion_for(representation: str, fusion: FusionSettings = RUNTIME_DEFAULT) -> FusionSettings:
    """The fusion setting of a hybrid representation name: its method, at ``fusion``'s lexical weight
    (0.5 for equal-weight RRF), RRF k, candidates and lexical floor."""
    method = HYBRID_REPRESENTATIONS[representation]
    return replace(fusion, method=method, lexical_weight=0.5 if method is FusionMethod.RRF else fusion.lexical_weight)


def hybrid_candidates(
    store: ExactStore,
    thread_id: str,
    parts: Sequence[str],
    qvecs: np.ndarray,
    *,
    k: int,
    fusion: FusionSettings,
    where: Mapping[str, Any] | None = None,
    answers_first: bool = True,
    latest_first: bool = True,
    speakers_first: bool = True,
    embedder: Embedder | None = None,
    user_first: bool = True,
) -> list[PartCandidates]:
    """The runtime's hybrid candidates of each part in one thread (every candidate's ``idf_coverage``
    included, for any floor): the store's thread view, as the product serves a thread-scoped search.
    ``where``: a metadata filter applied inside the thread view before ranking (a time window on ``ts_epoch``).
    ``answers_first`` / ``latest_first`` / ``speakers_first`` / ``user_first``: the search options of the same names
    (the runtime's defaults: on).
    ``embedder``: what the ``latest`` stage embeds hits' texts with (the conversation's; ``None``: it does not run)."""
    scope = Scope(thread_id, where)
    dense, lexical = store.resolve(scope)
    return scope_candidates(
        dense,
        lexical,
        scope,
        parts,
        qvecs,
        k=k,
        fusion=fusion,
        answers_first=answers_first,
        latest_first=latest_first,
        speakers_first=speakers_first,
        embedder=embedder,
        user_first=user_first,
    )


def scope_candidates(
    dense: DenseBackend,
    lexical: LexicalBackend | None,
    scope: Scope,
    parts: Sequence[str],
    qvecs: np.ndarray,
    *,
    k: int,
    fusion: FusionSettings | None,
    answers_first: bool = True,
    latest_first: bool = True,
    speakers_first: bool = True,
    embedder: Embedder | None = None,
    user_first: bool = True,
) -> list[PartCandidates]:
    """The runtime's candidates of each part (the product's search loop up to its candidates,
    :func:`ctxret.query.deadline.run_candidates`) from the given backends: hybrid under ``fusion`` (every
    candidate's ``idf_coverage`` included, for any floor), or dense only (``fusion=None``: the top ``k`` by cosine).
    ``embedder``: as for :func:`hybrid_candidates`."""
    plan = SearchPlan(
        k=k,
        floor=None,
        weight=1.0,
        max_parts=MAX_PARTS,
        split=True,
        hybrid=fusion,
        parents=False,
        answers_first=answers_first,
        latest_first=latest_first,
        speakers_first=speakers_first,
        user_first=user_first,
    )
    backends = Backends(dense, lexical if fusion is not None else None)
    return run_candidates(plan, parts, qvecs, scope, backends, idf_coverage_for="all", embedder=embedder)


def with_candidates(fusion: FusionSettings, candidates: int, lexical_floor: float | None) -> FusionSettings:
    return replace(fusion, candidates=candidates, lexical_floor=lexical_floor)


def group_floor_mask(
    cosines: np.ndarray,
    idf_coverage: np.ndarray | None,
    floor: float | None,
    lexical_floor: float | None = RUNTIME_DEFAULT.lexical_floor,
    k: int = 5,
    lifted: Mapping[int, int] | None = None,
) -> np.ndarray:
    """Which ranked hits of one part survive the floor, by the runtime's rule (:mod:`ctxret.query.floor`): each hit
    is kept down to half the floor (:func:`floor_mask` at :func:`~ctxret.query.floor.hit_floor`; a lifted hit with
    the hit it was lifted above), and the group only when its first ``k`` kept hits hold an answer
    (:func:`~ctxret.query.floor.part_answered`)."""
    cosines = np.asarray(cosines, dtype=np.float64)
    if floor is None:
        return np.ones(cosines.shape, dtype=bool)
    source = np.arange(len(cosines))
    for a, b in (lifted or {}).items():
        source[a] = b
    cov = None if idf_coverage is None else np.asarray(idf_coverage, dtype=np.float64)
    mask = floor_mask(cosines[source], None if cov is None else cov[source], hit_floor(floor), lexical_floor)
    head = np.flatnonzero(mask)[:k]
    answered = part_answered(
        cosines[head].tolist(), None if cov is None else cov[source[head]].tolist(), floor, lexical_floor
    )
    return mask if answered else np.zeros(cosines.shape, dtype=bool)


def floor_mask(
    cosines: np.ndarray,
    idf_coverage: np.ndarray | None,
    floor: float | None,
    lexical_floor: float | None = RUNTIME_DEFAULT.lexical_floor,
) -> np.ndarray:
    """Which ranked hits survive the floor: :func:`ctxret.query.fusion.passes_floor`, the runtime's rule.

    Dense rankings pass ``idf_coverage=None``: the cosine floor alone, as the runtime's dense path does.
    """
    cosines = np.asarray(cosines, dtype=np.float64)
    return np.asarray(passes_floor(cosines, idf_coverage, floor, lexical_floor), dtype=bool).reshape(cosines.shape)
