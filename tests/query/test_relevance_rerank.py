"""relevance (a score that does not depend on the other candidates) and the group stages: min_relevance, rerank, MMR."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from ctxret import ContextualIndex, SearchSettings
from ctxret.errors import InputError
from ctxret.query.mmr import mmr_order
from ctxret.query.relevance import (
    LOCAL_MINILM,
    RelevanceCalibration,
    RelevanceModel,
    auc,
    calibration_for,
    fit_relevance,
)

NOTES = [
    "The flight to Lisbon leaves Berlin at 09:40 on October 20 with TAP, booking reference XJ42Q.",
    "Biscuit the dog has his vaccinations at the Green Paws vet clinic on Thursday.",
    "The Postgres 16 migration failed with a lock timeout during the deploy.",
    "Maya's chocolate birthday cake bakes at 175 C for 35 minutes.",
    "The passport expires in March and must be renewed in January.",
]
# Unrelated notes that still become candidates of the query's part (dense candidates always fill up).
FILLER = [
    "Photosynthesis turns light into chemical energy.",
    "Granite is an igneous rock.",
    *[
        f"Note {i}: the {w} meeting about quarterly budget line {i} was moved to room {100 + i}."
        for i, w in enumerate(["finance", "sales", "legal", "design", "hiring"] * 8)
    ],
]
QUERY = "What is the booking reference of my flight to Lisbon?"


def _index(embedder, **kw):
    return ContextualIndex(in_memory=True, collection=f"rel-{uuid.uuid4().hex}", embedder=embedder, **kw)


def _hit(index, query=QUERY, k=5, **kw):
    groups = index.search(query, k=k, score_threshold=None, **kw)
    assert len(groups) == 1
    return {h.body: h for h in groups[0].hits}


@pytest.mark.parametrize("lexical", [True, False])
def test_relevance_of_a_hit_does_not_change_when_unrelated_candidates_are_added(local_embedder, lexical):
    index = _index(local_embedder, lexical=lexical)
    index.add_documents([{"text": t, "id": f"n{i}"} for i, t in enumerate(NOTES)])
    before = _hit(index)[NOTES[0]]
    index.add_documents([{"text": t, "id": f"f{i}"} for i, t in enumerate(FILLER)])
    after_hits = _hit(index)
    after = after_hits[NOTES[0]]
    assert any(body in FILLER for body in after_hits)  # the new notes are candidates of the part
    assert 0.0 < after.scores["relevance"] <= 1.0
    assert after.scores["cosine"] == pytest.approx(before.scores["cosine"], abs=1e-6)
    if lexical:
        # the answer holds every weighted word of the part: coverage 1.0 whatever the corpus
        assert before.scores["coverage"] == after.scores["coverage"] == 1.0
    assert after.scores["relevance"] == pytest.approx(before.scores["relevance"], abs=1e-6)


def test_fused_score_moved_where_relevance_did_not(local_embedder):
    # what the issue reported: the min-max fused score of the same hit depends on the other candidates
    index = _index(local_embedder)
    index.add_documents([{"text": t, "id": f"n{i}"} for i, t in enumerate(NOTES)])
    cake_before = _hit(index, k=50)[NOTES[3]]
    index.add_documents([{"text": t, "id": f"f{i}"} for i, t in enumerate(FILLER)])
    cake_after = _hit(index, k=50)[NOTES[3]]
    assert cake_after.scores["fused"] != pytest.approx(cake_before.scores["fused"], abs=1e-3)
    assert cake_after.scores["relevance"] == pytest.approx(cake_before.scores["relevance"], abs=1e-9)


def test_relevance_is_the_calibrated_function_of_cosine_and_coverage(local_embedder):
    index = _index(local_embedder)
    index.add_documents([{"text": t, "id": f"n{i}"} for i, t in enumerate(NOTES)])
    found = _hit(index).values()
    best = max(h.scores["cosine"] for h in found)  # every note is a candidate: the part's best cosine
    for hit in found:
        s = hit.scores
        assert s["relevance"] == pytest.approx(LOCAL_MINILM(s["cosine"], s["coverage"], best))
        assert 0.0 <= s["coverage"] <= 1.0
    assert calibration_for(local_embedder) is LOCAL_MINILM
    # the right answer is clearly relevant, an unrelated note clearly not
    hits = _hit(index)
    assert hits[NOTES[0]].scores["relevance"] > 0.6
    assert hits[NOTES[3]].scores["relevance"] < 0.1


def test_min_relevance_drops_hits_under_it_and_a_custom_calibration_is_used(local_embedder):
    index = _index(local_embedder)
    index.add_documents([{"text": t, "id": f"n{i}"} for i, t in enumerate(NOTES)])
    kept = index.search(QUERY, k=5, cosine_floor=None, min_relevance=0.5)[0].hits
    assert [h.body for h in kept] == [NOTES[0]]
    flat = RelevanceCalibration(RelevanceModel(0.0, 0.0, 0.0), RelevanceModel(0.0, 0.0), "flat")
    hits = index.search(QUERY, k=5, score_threshold=None, relevance=flat)[0].hits
    assert {h.scores["relevance"] for h in hits} == {0.5}
    with pytest.raises(InputError, match="min_relevance"):
        SearchSettings(min_relevance=1.5)


def test_uncalibrated_embedders_get_the_shifted_placeholder():
    class Other:
        model_id = "langchain:Fake:x"
        default_score_threshold = 0.5

    cal = calibration_for(Other())
    assert cal.source.startswith("uncalibrated")
    # the other embedder's floor maps where the local model's floor maps
    assert cal(0.5, None) == pytest.approx(LOCAL_MINILM(0.3, None))


def test_fit_recovers_a_known_logistic_curve():
    rng = np.random.default_rng(0)
    cos, cov = rng.uniform(0, 1, 4000), rng.uniform(0, 1, 4000)
    true = RelevanceModel(-4.0, 3.0, 5.0, 0.0)
    y = rng.uniform(size=4000) < true(cos, cov)
    cal = fit_relevance([{"cosine": a, "coverage": b, "right": bool(r)} for a, b, r in zip(cos, cov, y, strict=False)])
    assert cal.hybrid.cosine_weight == pytest.approx(3.0, abs=0.6)
    assert cal.hybrid.coverage_weight == pytest.approx(5.0, abs=0.8)
    assert auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75


# -- rerank ---------------------------------------------------------------------------------------
def test_rerank_orders_each_group_by_its_scores_before_the_cut(local_embedder):
    index = _index(local_embedder)
    index.add_documents([{"text": t, "id": f"n{i}"} for i, t in enumerate(NOTES)])
    seen = []

    def by_length(part, hits):  # the longest piece first; drop the cake
        seen.append((part, len(hits)))
        return [None if "cake" in h.text else float(len(h.body)) for h in hits]

    message = "When does my flight to Lisbon leave? What did the vet say about Biscuit?"
    groups = index.search(message, k=2, score_threshold=None, rerank=by_length, rerank_candidates=4)
    assert len(groups) == 2 and [n for _, n in seen] == [4, 4]  # per part, on 4 candidates each
    assert [p for p, _ in seen] == [g.part for g in groups]
    for g in groups:
        assert len(g.hits) == 2
        lengths = [len(h.body) for h in g.hits]
        assert lengths == sorted(lengths, reverse=True)
        for h in g.hits:
            assert "cake" not in h.text
            assert h.score == h.scores["rerank"] == float(len(h.body)) and h.score_scale == "rerank"
            assert {"cosine", "fused", "relevance"} <= set(h.scores)


def test_a_bad_reranker_answer_is_an_error(local_embedder):
    index = _index(local_embedder)
    index.add_documents(NOTES)
    with pytest.raises(InputError, match="one score"):
        index.search(QUERY, score_threshold=None, rerank=lambda part, hits: [1.0])
    with pytest.raises(InputError, match="finite"):
        index.search(QUERY, score_threshold=None, rerank=lambda part, hits: [float("nan")] * len(hits))
    with pytest.raises(InputError, match="callable"):
        SearchSettings(rerank="cross-encoder")


async def test_rerank_and_mmr_run_in_asearch_too(local_embedder):
    index = _index(local_embedder)
    index.add_documents(NOTES)
    groups = await index.asearch(
        QUERY, k=2, score_threshold=None, rerank=lambda p, hits: [-i for i in range(len(hits))]
    )
    assert groups[0].hits[0].scores["rerank"] == 0
    groups = await index.asearch(QUERY, k=3, score_threshold=None, mmr=True, fetch_k=5, lambda_mult=0.5)
    assert len(groups[0].hits) == 3


# -- MMR ------------------------------------------------------------------------------------------
def test_mmr_order_against_a_hand_computed_case():
    vecs = np.array([[1.0, 0.0], [0.99, 0.14], [0.0, 1.0]])
    sims = [0.9, 0.89, 0.5]
    assert mmr_order(sims, vecs, 3, lambda_mult=1.0) == [0, 1, 2]  # relevance only
    assert mmr_order(sims, vecs, 2, lambda_mult=0.5) == [0, 2]  # the near-duplicate loses to the diverse one


def test_mmr_inside_each_group_skips_near_duplicates(local_embedder):
    index = _index(local_embedder, lexical=False)
    dup = "The flight to Lisbon leaves Berlin at 09:40 on October 20 with TAP."
    hotel = "The hotel in Lisbon is in Alfama, checkout at 11:00."
    index.add_documents(
        [{"text": dup, "id": "a"}, {"text": dup + " Window seat.", "id": "b"}, {"text": hotel, "id": "c"}, *NOTES[1:]]
    )
    query = "my flight from Berlin to Lisbon"
    plain = index.search(query, k=2, score_threshold=None)[0].hits
    assert {h.metadata["doc_id"] for h in plain} == {"a", "b"}
    diverse = index.search(query, k=2, score_threshold=None, mmr=True, fetch_k=5, lambda_mult=0.6)[0].hits
    assert diverse[0].id == plain[0].id and diverse[1].metadata["doc_id"] == "c"
