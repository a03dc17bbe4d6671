"""Recency as an option (issue 28 item 3): ``recency_half_life`` decays each hit's score by the age of its stored
timestamp inside its group, before the cut to ``k``; off by default, on a real embedded store with stamped turns."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from ctxret.errors import InputError
from ctxret.ingest.messages import turns_from_messages
from ctxret.query.settings import SearchSettings

NOW = datetime(2024, 3, 1, 12, 0)
DAY = 86_400.0
# the same topic on different days: near-ties that only the time tells apart
TURNS = [
    (datetime(2024, 2, 29, 10, 0), "We talked about the garden shed and the paint colour."),
    (datetime(2023, 9, 1, 10, 0), "We talked about the garden shed and the new roof."),
    (datetime(2024, 1, 5, 10, 0), "We talked about the garden shed and the door hinge."),
    (datetime(2024, 2, 20, 10, 0), "We talked about the garden shed and the window glass."),
    (datetime(2023, 6, 1, 10, 0), "We talked about the garden shed and the floor boards."),
]
QUESTION = "What did we say about the garden shed?"


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on ranking


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages(
            [{"role": "user", "content": text, "timestamp": ts.isoformat()} for ts, text in TURNS], thread_id="t"
        )
        # written as given, without a time (add_messages would give it the time it is added)
        untimed = [{"role": "user", "content": "We talked about the garden shed and its paint."}]
        ix.add_turns(turns_from_messages(untimed, "u"))

    return fill


def _stamp(hit):
    stamp = hit.metadata.get("ctxret:timestamp")
    return datetime.fromisoformat(stamp) if stamp else None


def test_off_changes_nothing(index):
    plain = index.search(QUESTION, k=3, thread_id="t", now=NOW, score_threshold=None)
    off = index.search(QUESTION, k=3, thread_id="t", now=NOW, score_threshold=None, recency_half_life=None)
    assert [(h.id, h.score, dict(h.scores)) for h in plain[0].hits] == [
        (h.id, h.score, dict(h.scores)) for h in off[0].hits
    ]
    assert all("recency" not in h.scores for h in plain[0].hits)
    assert SearchSettings().recency_half_life is None


def test_recent_near_tie_outranks_older(index):
    (plain,) = index.search(QUESTION, k=1, thread_id="t", now=NOW, score_threshold=None)
    (recent,) = index.search(QUESTION, k=1, thread_id="t", now=NOW, score_threshold=None, recency_half_life=7 * DAY)
    newest = max(ts for ts, _ in TURNS)
    assert _stamp(plain.hits[0]) != newest  # the plain order puts an older turn first (what recency can change)
    assert _stamp(recent.hits[0]) == newest  # a recent hit came into the k
    (h,) = recent.hits
    age_days = (NOW - newest).total_seconds() / DAY
    assert h.scores["recency"] == pytest.approx(0.5 ** (age_days / 7))
    (every,) = index.search(QUESTION, k=5, thread_id="t", now=NOW, score_threshold=None)
    (before,) = [p for p in every.hits if p.id == h.id]
    assert h.score == pytest.approx(before.score * h.scores["recency"])  # the group's own score, decayed


def test_group_is_ordered_by_decayed_score(index):
    (g,) = index.search(
        QUESTION, k=5, thread_id="t", now=NOW, score_threshold=None, recency_half_life=timedelta(days=30)
    )
    scores = [h.score for h in g.hits]
    assert scores == sorted(scores, reverse=True)
    for h in g.hits:
        age = (NOW - _stamp(h)).total_seconds()
        assert h.scores["recency"] == pytest.approx(0.5 ** (age / (30 * DAY)))
    # a stamp after now is not aged (age is never negative)
    (g,) = index.search(
        QUESTION, k=5, thread_id="t", now=datetime(2000, 1, 1), score_threshold=None, recency_half_life=DAY
    )
    assert all(h.scores["recency"] == 1.0 for h in g.hits)


def test_piece_without_timestamp_is_not_decayed(index):
    (g,) = index.search(QUESTION, k=6, now=NOW, score_threshold=None, recency_half_life=DAY)
    unstamped = [h for h in g.hits if _stamp(h) is None]
    assert len(unstamped) == 1
    (h,) = unstamped
    assert "recency" not in h.scores
    (plain,) = index.search(QUESTION, k=6, now=NOW, score_threshold=None)
    assert h.score == pytest.approx(next(p.score for p in plain.hits if p.id == h.id))
    assert g.hits[0] is h  # a one-day half-life ages every stamped turn below it


@pytest.mark.parametrize("bad", [0, -5, 0.0, float("nan"), float("inf"), True, "7d", timedelta(0), [1]])
def test_bad_values_name_the_option(bad):
    with pytest.raises(InputError, match="recency_half_life"):
        SearchSettings(recency_half_life=bad)
    with pytest.raises(InputError, match="recency_half_life"):
        SearchSettings().with_options(recency_half_life=bad)


def test_good_values_are_seconds():
    assert SearchSettings(recency_half_life=timedelta(hours=12)).recency_half_life == 43_200.0
    assert SearchSettings(recency_half_life=60).recency_half_life == 60.0


def test_through_the_adapters(index):
    from langchain_ctxret import ContextualRetriever as LCRetriever
    from llamaindex_ctxret import ContextualRetriever as LIRetriever

    newest = max(ts for ts, _ in TURNS)
    kw = {"now": NOW, "recency_half_life": 7 * DAY}
    docs = LCRetriever(index=index, k=1, score_threshold=None, thread_id="t", search_kwargs=kw).invoke(QUESTION)
    assert [datetime.fromisoformat(d.metadata["ctxret:timestamp"]) for d in docs] == [newest]
    nodes = LIRetriever(index, similarity_top_k=1, score_threshold=None, thread_id="t", search_kwargs=kw).retrieve(
        QUESTION
    )
    assert [datetime.fromisoformat(n.node.metadata["ctxret:timestamp"]) for n in nodes] == [newest]


def test_cli_flag(index):
    from ctxret.cli.commands import search_options
    from ctxret.cli.parser import build_parser

    args = build_parser().parse_args(["search", "garden shed", "--recency-half-life", "3600"])
    assert search_options(args)["recency_half_life"] == 3600.0
