"""Hybrid (dense + BM25) representations of the harness, built on the runtime's own parts.

BM25 comes from :class:`ctxret.lexical.LexicalIndex` (``":memory:"``) and fusion from
:func:`ctxret.fusion.fuse`, used the way the runtime's hybrid stage
(:func:`ctxret.fusion.hybrid_search`) uses them, so a number measured here is what the runtime
does: per query part, the top ``candidates`` of each side (dense cosine over the blended pieces,
BM25 of the part's text over the piece texts) are fused into that part's ranking; ``convex``
gets the exact cosine of every candidate and the exact BM25 of dense-only candidates (0.0 when a
piece holds none of the part's words). The cosine floor applies only to hits that lexical search
did not find (see :func:`floor_mask`). Defaults (method weight, RRF k) are the runtime's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..fusion import DEFAULT_CANDIDATES, DEFAULT_LEXICAL_WEIGHT, DEFAULT_RRF_K, FusionMethod, fuse

__all__ = [
    "HYBRID_REPRESENTATIONS",
    "DEFAULT_LEXICAL_WEIGHT",
    "DEFAULT_RRF_K",
    "DEFAULT_CANDIDATES",
    "FusionConfig",
    "fusion_for",
    "dense_candidates",
    "fused_ranking",
    "floor_mask",
]

#: Hybrid representation name → the fusion method it runs.
HYBRID_REPRESENTATIONS: dict[str, FusionMethod] = {
    "hybrid_rrf": FusionMethod.RRF,  # equal-weight RRF (k = rrf_k, 60 by default)
    "hybrid_weighted": FusionMethod.WEIGHTED_RRF,  # RRF with the lexical side weighted by lexical_weight
    "hybrid_convex": FusionMethod.CONVEX,  # lexical_weight * minmax(bm25) + (1 - lexical_weight) * minmax(cosine)
}


@dataclass(frozen=True)
class FusionConfig:
    """One fusion setting: method, lexical weight (ignored by plain RRF) and RRF k (ignored by convex)."""

    method: FusionMethod
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    rrf_k: float = DEFAULT_RRF_K

    @property
    def label(self) -> str:
        if self.method is FusionMethod.RRF:
            return f"rrf k={self.rrf_k:g}"
        if self.method is FusionMethod.WEIGHTED_RRF:
            return f"weighted_rrf w={self.lexical_weight:g} k={self.rrf_k:g}"
        return f"convex w={self.lexical_weight:g}"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"method": self.method.value}
        if self.method is not FusionMethod.RRF:
            out["lexical_weight"] = self.lexical_weight
        if self.method is not FusionMethod.CONVEX:
            out["rrf_k"] = self.rrf_k
        return out


def fusion_for(representation: str, lexical_weight: float = DEFAULT_LEXICAL_WEIGHT, rrf_k: float = DEFAULT_RRF_K) -> FusionConfig:
    """The fusion setting of a hybrid representation name."""
    method = HYBRID_REPRESENTATIONS[representation]
    if method is FusionMethod.RRF:
        return FusionConfig(method, 0.5, rrf_k)
    return FusionConfig(method, lexical_weight, rrf_k)


def dense_candidates(scores: np.ndarray, n: int, ids: Sequence[str]) -> list[tuple[str, float]]:
    """The top ``n`` ``(ids[i], score)`` of a dense score vector, best first (ties: lower index first)."""
    scores = np.asarray(scores)
    order = np.argsort(-scores, kind="stable")[:n]
    return [(ids[int(i)], float(scores[i])) for i in order]


def fused_ranking(
    dense_scores: np.ndarray,
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    config: FusionConfig,
    index_of: dict[str, int],
    exact_bm25: Callable[[list[str]], dict[str, float]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fuse one part's candidates as the runtime does: (item indices best first, fused scores,
    found-lexically mask).

    ``dense_scores`` holds the cosine of every item (exact search), ``dense`` / ``lexical`` the two
    candidate lists (ids best first), ``exact_bm25(ids)`` the BM25 of given ids for the part.
    """
    union = dict.fromkeys([*(i for i, _ in dense), *(i for i, _ in lexical)])
    cosine = {rid: float(dense_scores[index_of[rid]]) for rid in union}
    bm25: dict[str, float] | None = None
    if config.method is FusionMethod.CONVEX:
        listed = {i for i, _ in lexical}
        only_dense = [i for i, _ in dense if i not in listed]
        bm25 = {**{rid: 0.0 for rid in cosine}, **(exact_bm25(only_dense) if only_dense else {}), **dict(lexical)}
    fused = fuse(
        dense, lexical, config.method, lexical_weight=config.lexical_weight, rrf_k=config.rrf_k, cosine=cosine, bm25=bm25
    )
    found = {i for i, _ in lexical}
    idx = np.fromiter((index_of[i] for i, _ in fused), dtype=np.int64, count=len(fused))
    sc = np.fromiter((s for _, s in fused), dtype=np.float64, count=len(fused))
    lex_mask = np.fromiter((i in found for i, _ in fused), dtype=bool, count=len(fused))
    return idx, sc, lex_mask


def floor_mask(cosines: np.ndarray, lexical: np.ndarray | None, floor: float | None) -> np.ndarray:
    """Which ranked hits survive the cosine floor: all of them without a floor; with one, those at
    or above it and (hybrid) every hit lexical search found."""
    keep = np.ones(len(cosines), dtype=bool) if floor is None else cosines >= floor
    if lexical is not None:
        keep |= lexical
    return keep
