"""Fusing a dense ranking with a lexical ranking inside one query part's group.

Every function takes the two candidate lists of ONE part (best first) and returns fused
``(id, fused_score)`` pairs, best first. Fusion never mixes parts: each group is fused on its own.

* ``rrf``: reciprocal rank fusion, ``sum_r w_r / (k + rank_r)`` with ranks from 1 (Cormack et al.;
  LangChain's EnsembleRetriever uses ``k = 60``). Equal weights unless given.
* ``convex``: ``w * norm(bm25) + (1 - w) * norm(cosine)`` with min-max normalisation over the
  candidates of the part; a candidate missing from one list scores 0 on that side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum

from .errors import InputError


class FusionMethod(str, Enum):
    """How dense and lexical results are fused inside a group."""

    RRF = "rrf"  # equal-weight reciprocal rank fusion
    WEIGHTED_RRF = "weighted_rrf"  # reciprocal rank fusion, lexical side weighted by `lexical_weight`
    CONVEX = "convex"  # convex combination of min-max normalised scores


def rrf(rankings: Sequence[Sequence[str]], k: float = 60.0, weights: Sequence[float] | None = None) -> list[tuple[str, float]]:
    """Weighted reciprocal rank fusion of several rankings (ids best first)."""
    if k < 0:
        raise InputError(f"RRF k must be non-negative, got {k}")
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise InputError(f"{len(rankings)} rankings but {len(weights)} weights")
    scores: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for r, (ranking, w) in enumerate(zip(rankings, weights)):
        for rank, doc_id in enumerate(ranking, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + w / (k + rank)
            first_seen.setdefault(doc_id, (rank, r))
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))


def _minmax(scores: Mapping[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi <= lo:
        return {key: 1.0 for key in scores}
    return {key: (v - lo) / (hi - lo) for key, v in scores.items()}


def convex(dense: Mapping[str, float], lexical: Mapping[str, float], lexical_weight: float = 0.5) -> list[tuple[str, float]]:
    """Convex combination of min-max normalised dense and lexical scores."""
    if not 0.0 <= lexical_weight <= 1.0:
        raise InputError(f"lexical_weight must be between 0 and 1, got {lexical_weight}")
    d, lx = _minmax(dense), _minmax(lexical)
    order = {key: i for i, key in enumerate(list(lexical) + [x for x in dense if x not in lexical])}
    fused = {key: lexical_weight * lx.get(key, 0.0) + (1.0 - lexical_weight) * d.get(key, 0.0) for key in order}
    return sorted(fused.items(), key=lambda kv: (-kv[1], order[kv[0]]))


def fuse(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    method: FusionMethod | str = FusionMethod.RRF,
    *,
    lexical_weight: float = 0.5,
    rrf_k: float = 60.0,
) -> list[tuple[str, float]]:
    """Fuse one part's dense ``(id, cosine)`` and lexical ``(id, bm25)`` lists, each best first."""
    method = FusionMethod(method)
    if method is FusionMethod.RRF:
        return rrf([[i for i, _ in dense], [i for i, _ in lexical]], k=rrf_k)
    if method is FusionMethod.WEIGHTED_RRF:
        if not 0.0 <= lexical_weight <= 1.0:
            raise InputError(f"lexical_weight must be between 0 and 1, got {lexical_weight}")
        return rrf([[i for i, _ in dense], [i for i, _ in lexical]], k=rrf_k, weights=[1.0 - lexical_weight, lexical_weight])
    return convex(dict(dense), dict(lexical), lexical_weight)


#: Candidates fetched per part from each side (dense and lexical) before fusion and the cut to k.
DEFAULT_CANDIDATES = 50
