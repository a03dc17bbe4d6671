"""Hybrid (dense + BM25) representations of the harness, built on the runtime's own parts.

BM25 comes from :class:`ctxret.lexical.LexicalIndex` (``":memory:"``), fusion from
:func:`ctxret.fusion.fuse`, the floor's lexical evidence from :meth:`LexicalIndex.coverage`, and
every default (fusion method, lexical weight, RRF k, candidates per side, lexical floor) from
:mod:`ctxret.fusion` — imported, never restated — so a number measured here is what the runtime's
hybrid stage (:func:`ctxret.fusion.hybrid_search`) does: per query part, the top ``candidates`` of
each side (dense cosine over the stored vectors, BM25 of the part's text over the piece texts) are
fused into that part's ranking; ``convex`` gets the exact cosine of every candidate and the exact
BM25 of dense-only candidates (0.0 when a piece holds none of the part's words).

The floor (:func:`floor_mask`) is the runtime's: ``floor`` stays a raw cosine; a hit under it is
kept only if it holds at least ``lexical_floor`` (default
:data:`ctxret.fusion.DEFAULT_LEXICAL_FLOOR`) of the part's IDF-weighted words
(:meth:`ctxret.lexical.LexicalIndex.coverage`); ``lexical_floor=None`` applies the cosine floor to
every hit; ``floor=None`` keeps everything. ``tests/test_eval_threads.py`` pins the harness's
hybrid top-k against :meth:`ctxret.ContextualIndex.search` on an in-memory index.

One difference by construction: the harness keeps one lexical index per conversation, so BM25
and IDF statistics are per conversation; a runtime file holding many threads computes them over
all of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..fusion import (
    DEFAULT_LEXICAL_FLOOR,
    DEFAULT_LEXICAL_WEIGHT,
    DEFAULT_RRF_K,
    FusionMethod,
    FusionSettings,
    fuse,
    passes_floor,
)

__all__ = [
    "HYBRID_REPRESENTATIONS",
    "RUNTIME_DEFAULT",
    "FusionConfig",
    "fusion_for",
    "dense_candidates",
    "fused_ranking",
    "floor_mask",
]

#: Hybrid representation name → the fusion method it runs (at the run's lexical weight and RRF k).
HYBRID_REPRESENTATIONS: dict[str, FusionMethod] = {
    "hybrid_rrf": FusionMethod.RRF,  # equal-weight RRF (k = rrf_k, 60 by default)
    "hybrid_weighted": FusionMethod.WEIGHTED_RRF,  # RRF with the lexical side weighted by lexical_weight
    "hybrid_convex": FusionMethod.CONVEX,  # lexical_weight * minmax(bm25) + (1 - lexical_weight) * minmax(cosine)
}

#: The runtime's default hybrid settings (``ctxret.fusion.FusionSettings()``: method, lexical
#: weight, RRF k, candidates per side, lexical floor), used by the ``hybrid_default``
#: representation whatever the run's flags say.
RUNTIME_DEFAULT = FusionSettings()


@dataclass(frozen=True)
class FusionConfig:
    """One fusion setting: method, lexical weight (ignored by plain RRF) and RRF k (ignored by convex)."""

    method: FusionMethod
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    rrf_k: float = DEFAULT_RRF_K

    @classmethod
    def from_settings(cls, settings: FusionSettings) -> FusionConfig:
        """The fusion part of a runtime :class:`~ctxret.fusion.FusionSettings`."""
        return cls(settings.method, settings.lexical_weight, settings.rrf_k)

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
    coverage: Callable[[list[str]], dict[str, float]] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Fuse one part's candidates as the runtime does: (item indices best first, fused scores,
    lexical coverage of each fused hit or ``None``).

    ``dense_scores`` holds the cosine of every item (exact search), ``dense`` / ``lexical`` the two
    candidate lists (ids best first), ``exact_bm25(ids)`` the BM25 of given ids for the part and
    ``coverage(ids)`` their share of the part's term weight (:meth:`LexicalIndex.coverage`; the
    runtime asks it only for hits under the cosine floor — the value of a hit does not depend on
    which others are asked, so asking for all of them once serves every floor).
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
    idx = np.fromiter((index_of[i] for i, _ in fused), dtype=np.int64, count=len(fused))
    sc = np.fromiter((s for _, s in fused), dtype=np.float64, count=len(fused))
    cov = None
    if coverage is not None:
        got = coverage([i for i, _ in fused]) if fused else {}
        cov = np.fromiter((got.get(i, 0.0) for i, _ in fused), dtype=np.float64, count=len(fused))
    return idx, sc, cov


def floor_mask(
    cosines: np.ndarray,
    coverage: np.ndarray | None,
    floor: float | None,
    lexical_floor: float | None = DEFAULT_LEXICAL_FLOOR,
) -> np.ndarray:
    """Which ranked hits survive the floor: :func:`ctxret.fusion.passes_floor`, the runtime's rule.

    No ``floor``: all of them. Otherwise a hit is kept when its cosine is at least ``floor``, or
    (hybrid: ``coverage`` given) when it holds at least ``lexical_floor`` of its part's term weight
    and its cosine is at least ``RESCUE_COSINE_SHARE`` of the floor;
    ``lexical_floor=None`` applies the cosine floor to every hit. Dense rankings pass
    ``coverage=None``: the cosine floor alone, as the runtime's dense path does.
    """
    cosines = np.asarray(cosines, dtype=np.float64)
    return np.asarray(passes_floor(cosines, coverage, floor, lexical_floor), dtype=bool).reshape(cosines.shape)
