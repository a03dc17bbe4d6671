"""Fusion inside one part's group, checked against hand-computed RRF, weighted RRF and convex examples."""

from __future__ import annotations

import pytest
from ctxret.errors import InputError
from ctxret.query.fusion import (
    DEFAULT_CANDIDATES,
    DEFAULT_DOCUMENT_LEXICAL_WEIGHT,
    DEFAULT_FUSION,
    DEFAULT_LEXICAL_WEIGHT,
    DEFAULT_RRF_K,
    FusionMethod,
    FusionSettings,
    convex,
    fuse,
    rrf,
)
from ctxret.query.settings import SearchSettings

DENSE = [("a", 0.9), ("b", 0.7), ("c", 0.5)]
LEXICAL = [("c", 10.0), ("a", 6.0), ("d", 2.0)]


def test_defaults_are_the_measured_ones():
    assert DEFAULT_FUSION is FusionMethod.CONVEX
    assert DEFAULT_LEXICAL_WEIGHT == 0.7
    assert DEFAULT_RRF_K == 60.0
    assert DEFAULT_CANDIDATES == 50
    s = FusionSettings()
    assert (s.method, s.lexical_weight, s.rrf_k, s.candidates) == (FusionMethod.CONVEX, 0.7, 60.0, 50)
    assert DEFAULT_DOCUMENT_LEXICAL_WEIGHT == s.document_lexical_weight == 0.5


def test_one_number_means_one_weight():
    s = SearchSettings()
    assert (s.hybrid.lexical_weight, s.hybrid.document_lexical_weight) == (0.7, 0.5)
    assert s.hybrid.label == "convex w=0.7 (per document or section 0.5)"
    assert s.hybrid.for_per("piece") is s.hybrid
    assert s.hybrid.for_per("document").lexical_weight == s.hybrid.for_per("section").lexical_weight == 0.5
    assert FusionSettings(document_lexical_weight=None).for_per("document").lexical_weight == 0.7
    both = s.with_options(lexical_weight=0.9).hybrid
    assert (both.lexical_weight, both.document_lexical_weight) == (0.9, 0.9)
    assert both.label == "convex w=0.9"
    docs = s.with_options(document_lexical_weight=0.3).hybrid
    assert (docs.lexical_weight, docs.document_lexical_weight) == (0.7, 0.3)
    each = s.with_options(lexical_weight=0.6, document_lexical_weight=0.4).hybrid
    assert (each.lexical_weight, each.document_lexical_weight) == (0.6, 0.4)
    assert FusionSettings(document_lexical_weight=None).fusion_dict() == {"method": "convex", "lexical_weight": 0.7}
    assert "document_lexical_weight" not in FusionSettings(method="rrf").fusion_dict()
    with pytest.raises(InputError, match="lexical_weight must be a number between 0 and 1"):
        s.with_options(document_lexical_weight=-0.1)


def test_rrf_by_hand():
    fused = dict(fuse(DENSE, LEXICAL, "rrf", rrf_k=60))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert fused["d"] == pytest.approx(1 / 63)
    assert [i for i, _ in fuse(DENSE, LEXICAL, FusionMethod.RRF)] == ["a", "c", "b", "d"]


def test_rrf_k_changes_scores_not_membership():
    small = dict(fuse(DENSE, LEXICAL, "rrf", rrf_k=1))
    assert small["a"] == pytest.approx(1 / 2 + 1 / 3)
    assert small["c"] == pytest.approx(1 / 4 + 1 / 2)
    assert set(small) == {"a", "b", "c", "d"}


def test_weighted_rrf_by_hand():
    fused = fuse(DENSE, LEXICAL, "weighted_rrf", lexical_weight=0.8, rrf_k=60)
    scores = dict(fused)
    assert scores["a"] == pytest.approx(0.2 / 61 + 0.8 / 62)
    assert scores["b"] == pytest.approx(0.2 / 62)
    assert scores["c"] == pytest.approx(0.2 / 63 + 0.8 / 61)
    assert scores["d"] == pytest.approx(0.8 / 63)
    assert [i for i, _ in fused] == ["c", "a", "d", "b"]


def test_weighted_rrf_at_half_ranks_like_rrf():
    assert [i for i, _ in fuse(DENSE, LEXICAL, "weighted_rrf", lexical_weight=0.5)] == [
        i for i, _ in fuse(DENSE, LEXICAL, "rrf")
    ]


def test_convex_by_hand_missing_scores_take_the_sides_minimum():
    # cosine side: a .9, b .7, c .5, d (missing -> .5): minmax a 1, b .5, c 0, d 0
    # bm25 side:   c 10, a 6, d 2, b (missing -> 2):    minmax c 1, a .5, d 0, b 0
    fused = fuse(DENSE, LEXICAL, "convex", lexical_weight=0.7)
    scores = dict(fused)
    assert scores["a"] == pytest.approx(0.7 * 0.5 + 0.3 * 1.0)
    assert scores["b"] == pytest.approx(0.3 * 0.5)
    assert scores["c"] == pytest.approx(0.7 * 1.0)
    assert scores["d"] == pytest.approx(0.0)
    assert [i for i, _ in fused] == ["c", "a", "b", "d"]


def test_convex_uses_exact_scores_when_given():
    cosine = {"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.8}
    bm25 = {"a": 6.0, "b": 4.0, "c": 10.0, "d": 2.0}
    scores = dict(fuse(DENSE, LEXICAL, "convex", lexical_weight=0.7, cosine=cosine, bm25=bm25))
    assert scores["a"] == pytest.approx(0.7 * 0.5 + 0.3 * 1.0)
    assert scores["b"] == pytest.approx(0.7 * 0.25 + 0.3 * 0.5)
    assert scores["c"] == pytest.approx(0.7)
    assert scores["d"] == pytest.approx(0.3 * 0.75)
    # the listed scores win over the maps for listed ids
    again = dict(convex(dict(DENSE), dict(LEXICAL), 0.7, cosine={**cosine, "a": -1.0}, bm25=bm25))
    assert again == pytest.approx(scores)


def test_convex_extremes_reproduce_each_side():
    cosine = {"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.1}
    bm25 = {"a": 6.0, "b": 0.0, "c": 10.0, "d": 2.0}
    dense_only = [i for i, _ in fuse(DENSE, LEXICAL, "convex", lexical_weight=0.0, cosine=cosine, bm25=bm25)]
    lexical_only = [i for i, _ in fuse(DENSE, LEXICAL, "convex", lexical_weight=1.0, cosine=cosine, bm25=bm25)]
    assert dense_only == ["a", "b", "c", "d"]
    assert lexical_only == ["c", "a", "d", "b"]


def test_convex_constant_side_and_empty_lists():
    # every lexical score equal: that side adds the same to all, dense order decides
    assert [i for i, _ in fuse(DENSE, [("a", 1.0), ("b", 1.0), ("c", 1.0)], "convex")] == ["a", "b", "c"]
    assert [i for i, _ in fuse(DENSE, [], "convex")] == ["a", "b", "c"]
    assert [i for i, _ in fuse([], LEXICAL, "convex")] == ["c", "a", "d"]
    for method in FusionMethod:
        assert fuse([], [], method) == []


def test_fused_scores_are_sorted_and_cover_the_union():
    for method in FusionMethod:
        fused = fuse(DENSE, LEXICAL, method)
        assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)
        assert {i for i, _ in fused} == {"a", "b", "c", "d"}
        assert len(fused) == 4  # no duplicates


def test_rrf_ties_break_by_best_rank_then_earlier_list():
    # x is rank 1 in the lexical list, y rank 1 in the dense list: same score, dense list first
    assert [i for i, _ in rrf([["y"], ["x"]])] == ["y", "x"]
    assert [i for i, _ in rrf([["y", "x"], ["x", "y"]])] == ["y", "x"]
    # a duplicate id inside one ranking counts once
    assert dict(rrf([["a", "a"]])) == pytest.approx({"a": 1 / 61})


def test_bad_settings_are_refused_with_the_fix():
    with pytest.raises(InputError, match="unknown fusion 'max'"):
        fuse(DENSE, LEXICAL, "max")
    with pytest.raises(InputError, match="lexical_weight"):
        fuse(DENSE, LEXICAL, "convex", lexical_weight=1.5)
    with pytest.raises(InputError, match="lexical_weight"):
        fuse(DENSE, LEXICAL, "weighted_rrf", lexical_weight=-0.1)
    with pytest.raises(InputError, match="rrf_k"):
        fuse(DENSE, LEXICAL, "rrf", rrf_k=-1)
    with pytest.raises(InputError, match="weights"):
        rrf([["a"], ["b"]], weights=[1.0])
    with pytest.raises(InputError, match="candidates"):
        FusionSettings(candidates=0)
    with pytest.raises(InputError, match="lexical_weight"):
        FusionSettings(lexical_weight=True)
    assert FusionSettings("rrf").method is FusionMethod.RRF


def test_passes_floor_rule_on_scalars_and_arrays():
    import numpy as np
    from ctxret.query.fusion import RESCUE_COSINE_SHARE, passes_floor

    assert RESCUE_COSINE_SHARE == 0.5
    assert passes_floor(0.31, 0.0, 0.3, 0.3) is True  # over the floor
    assert passes_floor(0.2, 0.5, 0.3, 0.3) is True  # rescued by its words (cosine >= 0.15)
    assert passes_floor(0.1, 1.0, 0.3, 0.3) is False  # words alone do not rescue an off-topic piece
    assert passes_floor(0.2, 0.29, 0.3, 0.3) is False  # too few of the part's words
    assert passes_floor(0.2, 1.0, 0.3, None) is False  # lexical_floor=None: cosine floor for all
    assert passes_floor(-0.5, 0.0, None, 0.3) is True  # no floor
    arr = passes_floor(np.array([0.31, 0.2, 0.1]), np.array([0.0, 0.5, 1.0]), 0.3, 0.3)
    assert arr.tolist() == [True, True, False]
