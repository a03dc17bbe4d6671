"""Fusing a dense ranking with a lexical ranking inside one query part's group.

Every fusion takes the two candidate lists of ONE part (best first) and returns fused
``(id, fused_score)`` pairs, best first. Fusion never mixes parts: each group is fused on its own.

* ``convex`` (the default): ``w * norm(bm25) + (1 - w) * norm(cosine)``, min-max normalised over
  the part's candidates (the union of both lists), ``w = lexical_weight`` (default 0.7) for a search
  of pieces, ``w = document_lexical_weight`` (default 0.5) for a search that ranks documents or
  sections (``per="document"`` / ``"section"``): the weight follows what is asked for. With
  hybrid search every candidate has both scores exactly (the cosine of a lexical-only hit is
  computed from its stored vector, the BM25 of a dense-only hit from the lexical index), so
  nothing is guessed. The fused score is in [0, 1] and relative to the part's candidates.
* ``rrf``: reciprocal rank fusion, ``sum_r 1 / (k + rank_r)`` with ranks from 1 (Cormack et al.;
  LangChain's EnsembleRetriever uses ``k = 60``).
* ``weighted_rrf``: ``(1 - w) / (k + rank_dense) + w / (k + rank_lexical)``.

The rules are a registry, :data:`FUSION_RULES` (name -> :class:`FusionRule`): :func:`fuse`, :class:`FusionSettings`
and the CLI's ``--fusion`` choices read it.

Measured on the LoCoMo dev split (see BENCHMARKS.md), equal-weight RRF loses most of BM25's lead
over dense search there; convex fusion at ``w = 0.7`` is at least as good as the better of the
two on both top-hit and QA recall@5. Documents want a more even fusion: on SciFact dev (5,183
abstracts, 809 claims, ``per="document"``) ``w = 0.5`` gains 0.9 nDCG@10 over 0.7 (+0.8 under CV), while
on LoCoMo 0.5 costs facts top-1 — hence a weight for searches that rank documents (BENCHMARKS.md,
"The documents' lexical weight").

The floor with fusion: ``cosine_floor`` stays a raw cosine, applied per part, then per hit (:mod:`.floor`).
:func:`passes_floor` is the rule both apply: a hit whose cosine clears the floor passes; a hit under it passes only
on strong lexical evidence: it holds at least
``lexical_floor`` (default 0.3) of the part's term weight — the IDF-weighted share of the part's
distinct tokens (words in half the pieces or more, like "the", weigh nothing; a word no piece
holds weighs the most) — and its cosine is at least half the floor (``RESCUE_COSINE_SHARE``). So a
part about nothing in memory still comes back empty, while a piece that holds the rare words of the
part (a booking reference, a name, a CJK term the model embeds poorly) counts even when its cosine
is a little under the floor. ``lexical_floor=None`` applies the cosine floor alone; ``cosine_floor=None``
(or ``score_threshold=None``) disables both. Groups are never padded: a group may hold fewer than ``k`` hits.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum
from functools import partial
from typing import Any

import numpy as np

from ..errors import InputError
from .options import option, parse_float, parse_int


class FusionMethod(str, Enum):
    """How dense and lexical results are fused inside a group."""

    RRF = "rrf"  # equal-weight reciprocal rank fusion
    WEIGHTED_RRF = "weighted_rrf"  # reciprocal rank fusion, lexical side weighted by `lexical_weight`
    CONVEX = "convex"  # convex combination of min-max normalised scores


#: Candidates fetched per part from each side (dense and lexical) before fusion and the cut to k.
DEFAULT_CANDIDATES = 50
#: The default fusion (chosen on the LoCoMo dev split; see BENCHMARKS.md).
DEFAULT_FUSION = FusionMethod.CONVEX
#: Weight of the lexical side for ``convex`` and ``weighted_rrf`` (chosen on LoCoMo dev).
DEFAULT_LEXICAL_WEIGHT = 0.7
#: The same weight for a search that ranks documents or sections (``per="document"`` / ``"section"``), chosen on
#: SciFact dev by 5-fold CV over claims (BENCHMARKS.md, "The documents' lexical weight").
DEFAULT_DOCUMENT_LEXICAL_WEIGHT = 0.5
#: RRF's ``k`` (rank offset).
DEFAULT_RRF_K = 60.0
#: A hit under the cosine floor is kept when its ``idf_coverage`` (the share of its part's
#: IDF-weighted query tokens it holds; see ``LexicalIndex.coverage``) is at least this. Chosen on the LoCoMo dev
#: split: it keeps the hybrid's accuracy while off-topic parts still come back empty.
DEFAULT_LEXICAL_FLOOR = 0.3
#: With a caller ``where`` filter, the lexical side fetches this many times ``candidates`` before
#: the filter (checked in Chroma) removes what does not match.
WHERE_OVERFETCH = 4


def fusion_method(method: FusionMethod | str) -> FusionMethod:
    """``method`` as a :class:`FusionMethod` with a rule in :data:`FUSION_RULES`, or an error naming the valid ones."""
    try:
        found = FusionMethod(method)
    except ValueError:
        found = None
    if found is None or found.value not in FUSION_RULES:
        names = ", ".join(repr(name) for name in FUSION_RULES)
        raise InputError(f"unknown fusion {method!r}; use one of {names}") from None
    return found


def check_weight(lexical_weight: Any) -> float:
    if (
        isinstance(lexical_weight, bool)
        or not isinstance(lexical_weight, (int, float))
        or not (0.0 <= float(lexical_weight) <= 1.0)
    ):
        raise InputError(f"lexical_weight must be a number between 0 and 1, got {lexical_weight!r}")
    return float(lexical_weight)


def check_rrf_k(rrf_k: Any) -> float:
    if isinstance(rrf_k, bool) or not isinstance(rrf_k, (int, float)) or not math.isfinite(rrf_k) or rrf_k < 0:
        raise InputError(f"rrf_k must be a non-negative number, got {rrf_k!r}")
    return float(rrf_k)


def check_lexical_floor(lexical_floor: Any) -> float | None:
    if lexical_floor is None:
        return None
    if (
        isinstance(lexical_floor, bool)
        or not isinstance(lexical_floor, (int, float))
        or not (0.0 <= float(lexical_floor) <= 1.0)
    ):
        raise InputError(
            f"lexical_floor (share of the query's term weight) must be between 0 and 1, got {lexical_floor!r}"
        )
    return float(lexical_floor)


def check_candidates(candidates: Any) -> int:
    if isinstance(candidates, bool) or not isinstance(candidates, (int, np.integer)) or not 1 <= candidates < 2**31:
        raise InputError(
            f"candidates (per part and side) must be a positive integer (at most 2,147,483,647), got {candidates!r}"
        )
    return int(candidates)


def rrf(
    rankings: Sequence[Sequence[str]], k: float = DEFAULT_RRF_K, weights: Sequence[float] | None = None
) -> list[tuple[str, float]]:
    """Weighted reciprocal rank fusion of several rankings (ids best first).

    Ties are broken by the best rank any list gave, then by the earlier list.
    """
    k = check_rrf_k(k)
    weights = list(weights) if weights is not None else [1.0] * len(rankings)
    if len(weights) != len(rankings):
        raise InputError(f"{len(rankings)} rankings but {len(weights)} weights")
    scores: dict[str, float] = {}
    first_seen: dict[str, tuple[int, int]] = {}
    for r, (ranking, w) in enumerate(zip(rankings, weights, strict=False)):
        for rank, doc_id in enumerate(dict.fromkeys(ranking), start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + w / (k + rank)
            first_seen[doc_id] = min(first_seen.get(doc_id, (rank, r)), (rank, r))
    return sorted(scores.items(), key=lambda kv: (-kv[1], first_seen[kv[0]]))


def _minmax(scores: Mapping[str, float]) -> dict[str, float]:
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi <= lo:
        return {key: 1.0 for key in scores}
    return {key: (v - lo) / (hi - lo) for key, v in scores.items()}


def convex(
    dense: Mapping[str, float],
    lexical: Mapping[str, float],
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
    *,
    cosine: Mapping[str, float] | None = None,
    bm25: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Convex combination of min-max normalised dense and lexical scores over the union of candidates.

    ``cosine`` / ``bm25`` optionally give exact scores for candidates missing from one list; a
    candidate with no score on a side takes that side's lowest candidate score (it ranked below
    every listed candidate there), i.e. 0 after normalisation. Ties: lexical order, then dense.
    """
    w = check_weight(lexical_weight)
    order = {key: i for i, key in enumerate(dict.fromkeys([*lexical, *dense]))}
    if not order:
        return []

    def side(listed: Mapping[str, float], exact: Mapping[str, float] | None) -> dict[str, float]:
        full = {**(exact or {}), **listed}
        vals = {key: full[key] for key in order if key in full}
        lo = min(vals.values()) if vals else 0.0
        return _minmax({key: vals.get(key, lo) for key in order})

    d, lx = side(dense, cosine), side(lexical, bm25)
    fused = {key: w * lx[key] + (1.0 - w) * d[key] for key in order}
    return sorted(fused.items(), key=lambda kv: (-kv[1], order[kv[0]]))


@dataclass(frozen=True)
class FusionRule:
    """One fusion rule of :data:`FUSION_RULES`: ``fuse(dense, lexical, lexical_weight, rrf_k, cosine, bm25)`` (one
    part's ``(id, score)`` lists best first -> fused ``(id, score)`` best first); ``label(settings)`` the rule in
    words; ``weighted`` / ``rank_offset``: whether it reads ``lexical_weight`` / ``rrf_k``; ``help``: one line for
    ``--fusion``'s help."""

    fuse: Callable[..., list[tuple[str, float]]]
    label: Callable[[FusionSettings], str]
    weighted: bool
    rank_offset: bool
    help: str


def _ids(ranked: Sequence[tuple[str, float]]) -> list[str]:
    return [i for i, _ in ranked]


def _fuse_rrf(dense: Any, lexical: Any, lexical_weight: float, rrf_k: float, cosine: Any, bm25: Any) -> Any:
    return rrf([_ids(dense), _ids(lexical)], k=rrf_k)


def _fuse_weighted_rrf(dense: Any, lexical: Any, lexical_weight: float, rrf_k: float, cosine: Any, bm25: Any) -> Any:
    return rrf([_ids(dense), _ids(lexical)], k=rrf_k, weights=[1.0 - lexical_weight, lexical_weight])


def _fuse_convex(dense: Any, lexical: Any, lexical_weight: float, rrf_k: float, cosine: Any, bm25: Any) -> Any:
    return convex(dict(dense), dict(lexical), lexical_weight, cosine=cosine, bm25=bm25)


def _convex_label(s: FusionSettings) -> str:
    doc = s.document_lexical_weight
    if doc is None or doc == s.lexical_weight:
        return f"convex w={s.lexical_weight:g}"
    return f"convex w={s.lexical_weight:g} (per document or section {doc:g})"


#: The fusion rules by name (the values of :class:`FusionMethod`): what :func:`fuse`, :class:`FusionSettings` and the
#: CLI's ``--fusion`` choices read.
FUSION_RULES: dict[str, FusionRule] = {
    FusionMethod.CONVEX.value: FusionRule(
        _fuse_convex,
        _convex_label,
        weighted=True,
        rank_offset=False,
        help="convex: lexical_weight x min-max(BM25) + (1 - lexical_weight) x min-max(cosine)",
    ),
    FusionMethod.RRF.value: FusionRule(
        _fuse_rrf,
        lambda s: f"rrf k={s.rrf_k:g}",
        weighted=False,
        rank_offset=True,
        help="rrf: reciprocal rank fusion, 1 / (rrf_k + rank) summed over both sides",
    ),
    FusionMethod.WEIGHTED_RRF.value: FusionRule(
        _fuse_weighted_rrf,
        lambda s: f"weighted_rrf w={s.lexical_weight:g} k={s.rrf_k:g}",
        weighted=True,
        rank_offset=True,
        help="weighted_rrf: rrf with the BM25 side weighted by lexical_weight",
    ),
}


def fusion_rule(method: FusionMethod | str) -> FusionRule:
    """The registered rule named ``method``."""
    return FUSION_RULES[fusion_method(method).value]


def fuse(
    dense: Sequence[tuple[str, float]],
    lexical: Sequence[tuple[str, float]],
    method: FusionMethod | str = DEFAULT_FUSION,
    *,
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
    rrf_k: float = DEFAULT_RRF_K,
    cosine: Mapping[str, float] | None = None,
    bm25: Mapping[str, float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse one part's dense ``(id, cosine)`` and lexical ``(id, bm25)`` lists, each best first, by the rule of
    :data:`FUSION_RULES` named ``method``.

    ``cosine`` and ``bm25`` (exact scores of candidates missing from a list) are used by
    ``convex``; the rank fusions use the two lists as given.
    """
    rule = fusion_rule(method)
    w = check_weight(lexical_weight) if rule.weighted else lexical_weight
    return rule.fuse(dense, lexical, w, check_rrf_k(rrf_k) if rule.rank_offset else rrf_k, cosine, bm25)


# -- the hybrid stage of a search ---------------------------------------------------------------
@dataclass(frozen=True)
class FusionSettings:
    """Query-time hybrid settings (never recorded in the collection; change them per call).

    ``lexical_weight`` weighs the lexical side of a search of pieces, ``document_lexical_weight`` that of a search
    that ranks documents or sections (``per="document"`` / ``"section"``; ``None``: ``lexical_weight`` there too;
    :meth:`for_per`). The flat option ``lexical_weight=`` given alone (``search(..., lexical_weight=0.9)``) sets
    both, so one number means one weight."""

    method: FusionMethod = option(
        DEFAULT_FUSION,
        parse=str,
        choices=lambda: tuple(FUSION_RULES),
        flags=("--fusion",),
        shown_default=DEFAULT_FUSION.value,
        help="how each part's dense and BM25 hits are fused: " + "; ".join(r.help for r in FUSION_RULES.values()),
    )
    lexical_weight: float = option(
        DEFAULT_LEXICAL_WEIGHT,
        parse=parse_float,
        metavar="W",
        help="weight of the BM25 side for convex / weighted_rrf, 0-1 (given alone, also for a search by document or "
        "section)",
    )
    rrf_k: float = option(DEFAULT_RRF_K, parse=parse_float, metavar="K", help="rrf's rank offset, >= 0")
    candidates: int = option(
        DEFAULT_CANDIDATES,
        parse=parse_int,
        metavar="N",
        help="candidates per part fetched from each side before fusion",
    )
    lexical_floor: float | None = option(
        DEFAULT_LEXICAL_FLOOR,
        parse=partial(parse_float, none=True),
        metavar="SHARE",
        help="a hit under the cosine floor is kept when it holds this share (0-1) of its part's IDF-weighted words "
        "and half the floor's cosine; 'none': the cosine floor alone",
    )
    document_lexical_weight: float | None = option(
        DEFAULT_DOCUMENT_LEXICAL_WEIGHT,
        parse=partial(parse_float, none=True),
        metavar="W",
        help="weight of the BM25 side for a search by document or section (--per); 'none': --lexical-weight",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "method", fusion_method(self.method))
        object.__setattr__(self, "lexical_weight", check_weight(self.lexical_weight))
        if self.document_lexical_weight is not None:
            object.__setattr__(self, "document_lexical_weight", check_weight(self.document_lexical_weight))
        object.__setattr__(self, "rrf_k", check_rrf_k(self.rrf_k))
        object.__setattr__(self, "candidates", check_candidates(self.candidates))
        object.__setattr__(self, "lexical_floor", check_lexical_floor(self.lexical_floor))

    def for_per(self, per: str) -> FusionSettings:
        """The settings a search with ``per`` fuses by: ``document_lexical_weight`` as the lexical weight when it
        ranks documents or sections."""
        if per == "piece" or self.document_lexical_weight is None:
            return self
        return replace(self, lexical_weight=self.document_lexical_weight)

    @property
    def label(self) -> str:
        """``"convex w=0.7"``, ``"rrf k=60"``, ``"weighted_rrf w=0.7 k=60"``: the fusion rule in words."""
        return fusion_rule(self.method).label(self)

    def fusion_dict(self) -> dict[str, Any]:
        """The fusion rule's settings (method, and the weight and RRF k where they apply)."""
        rule = fusion_rule(self.method)
        out: dict[str, Any] = {"method": self.method.value}
        if rule.weighted:
            out["lexical_weight"] = self.lexical_weight
            if self.document_lexical_weight is not None:
                out["document_lexical_weight"] = self.document_lexical_weight
        if rule.rank_offset:
            out["rrf_k"] = self.rrf_k
        return out


#: A hit under the cosine floor can be kept for its words only down to this share of the floor.
RESCUE_COSINE_SHARE = 0.5


def passes_floor(cosine: Any, idf_coverage: Any, floor: float | None, lexical_floor: float | None) -> Any:
    """The floor rule with fusion, shared by the runtime and the evaluation harness.

    A hit is kept when its cosine is at least ``floor``; or, with hybrid search (``idf_coverage`` is
    not ``None``), when it holds at least ``lexical_floor`` of its part's IDF-weighted words (its
    ``idf_coverage``, from the lexical backend's ``coverage``) and its cosine is at least
    ``RESCUE_COSINE_SHARE`` of the floor
    (a shared rare word alone does not bring back an off-topic piece). ``floor=None`` keeps
    everything; ``lexical_floor=None`` applies the cosine floor to every hit. Works on scalars
    and on numpy arrays (element-wise).
    """
    cos = np.asarray(cosine, dtype=np.float64)
    if floor is None:
        return np.ones_like(cos, dtype=bool) if cos.ndim else True
    keep = cos >= floor
    if idf_coverage is not None and lexical_floor is not None:
        rescued = np.asarray(idf_coverage, dtype=np.float64) >= lexical_floor
        keep = keep | (rescued & (cos >= floor * RESCUE_COSINE_SHARE))
    return keep if cos.ndim else bool(keep)
