"""The relevance knows which hit its part's search ranks first (``first``): the hit a user sees first, and a threshold
on the score shown keeps or drops the whole group with it."""

from __future__ import annotations

import uuid

import pytest
from ctxret import ContextualIndex
from ctxret.embedders.hashing import HashEmbedder
from ctxret.query.relevance import LOCAL_MINILM, RelevanceCalibration, RelevanceModel, fit_relevance

#: Only ``first`` counts: the first hit of a part 0.993, any other 0.007.
FIRST_ONLY = RelevanceCalibration(
    RelevanceModel(intercept=-5.0, cosine_weight=0.0, first_weight=10.0),
    RelevanceModel(intercept=-5.0, cosine_weight=0.0, first_weight=10.0),
    "test",
)
NOTES = [
    "The flight to Lisbon leaves at 09:40 with TAP.",
    "The Lisbon hotel is booked for three nights.",
    "Biscuit the dog has his vaccinations on Thursday.",
]


def test_first_defaults_to_the_best_dense_match_and_raises_the_score_when_given():
    cal = LOCAL_MINILM
    assert cal.hybrid.first_weight > 0 and cal.dense.first_weight > 0  # fitted: being ranked first is evidence
    assert cal(0.5, 0.5, 0.6, True) > cal(0.5, 0.5, 0.6, False)
    assert cal(0.5, 0.5, None) == cal(0.5, 0.5, None, True)  # no best given: the hit is its part's best, and first
    assert cal(0.5, 0.5, 0.6) == cal(0.5, 0.5, 0.6, False)  # under the best dense match: not first by default
    with pytest.raises(Exception, match="first_weight"):
        RelevanceModel(intercept=0.0, cosine_weight=1.0, first_weight=float("nan"))


@pytest.mark.parametrize("lexical", [True, False])
def test_a_search_marks_its_first_hit_and_only_that_one(lexical):
    index = ContextualIndex(in_memory=True, collection=f"first-{uuid.uuid4().hex}", embedder=HashEmbedder())
    index.add_documents(NOTES)
    (group,) = index.search(
        "When does the Lisbon flight leave?", k=3, score_threshold=None, relevance=FIRST_ONLY, lexical=lexical
    )
    assert len(group.hits) == 3
    assert [round(h.relevance, 3) for h in group.hits] == [0.993, 0.007, 0.007]


def test_the_fit_reads_first_from_the_rank():
    samples = []
    for q in range(60):  # the first of each query is right 70% of the time, a later hit 10%, whatever the cosine
        for rank in range(5):
            right = (q % 10 < 7) if rank == 0 else (q % 10 == rank)
            samples.append({"cosine": 0.4, "coverage": 0.5, "best": 0.4, "rank": rank, "right": right, "query": q})
    cal = fit_relevance(samples)
    assert cal(0.4, 0.5, 0.4, True) == pytest.approx(0.7, abs=0.03)
    assert cal(0.4, 0.5, 0.4, False) == pytest.approx(0.1, abs=0.03)


def test_a_search_without_a_floor_scores_a_first_hit_the_floor_would_drop_as_an_also_ran(local_embedder):
    """``score_threshold=None`` turns the floor off (a store filling its results to ``limit``): the first hit of a
    part nothing answers is not scored as ranked first, so its relevance stays low; a part the floor keeps is."""
    index = ContextualIndex(in_memory=True, collection=f"first-{uuid.uuid4().hex}", embedder=local_embedder)
    index.add_documents(NOTES)
    floor = index.plan().floor
    assert floor is not None and floor > 0.2  # the local model's floor
    (lost,) = index.search("quarterly tax filing deadlines", k=3, score_threshold=None, relevance=FIRST_ONLY)
    assert lost.hits and lost.hits[0].scores["cosine"] < floor  # found without the floor, under it
    assert [round(h.relevance, 3) for h in lost.hits] == [0.007] * len(lost.hits)
    (found,) = index.search("When does the Lisbon flight leave?", k=3, score_threshold=None, relevance=FIRST_ONLY)
    assert found.hits[0].scores["cosine"] >= floor
    assert round(found.hits[0].relevance, 3) == 0.993
