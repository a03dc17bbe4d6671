"""Time-aware search on the product path (issue 28 phase 2): ``now`` / ``since`` / ``until`` and each part's own
window, applied inside the store's query, on a real embedded store with stamped turns."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from ctxret.errors import InputError
from ctxret.ingest.messages import turns_from_messages
from ctxret.query.settings import SearchSettings
from ctxret.storage.schema import Scope

NOW = datetime(2024, 3, 1, 12, 0)  # a Friday
# (day, text): one turn a day about the same topic, so only the time tells them apart
DAYS = [
    (datetime(2023, 12, 31, 10, 0), "We talked about the garden shed and the paint colour."),
    (datetime(2024, 1, 1, 10, 0), "We talked about the garden shed and the new roof."),
    (datetime(2024, 1, 31, 10, 0), "We talked about the garden shed and the door hinge."),
    (datetime(2024, 2, 1, 10, 0), "We talked about the garden shed and the window glass."),
    (datetime(2024, 2, 15, 10, 0), "We talked about the garden shed and the floor boards."),
    (datetime(2024, 2, 21, 10, 0), "We talked about the garden shed and the gutter."),
    (datetime(2024, 2, 26, 10, 0), "We talked about the garden shed and the lock."),
    (datetime(2024, 2, 29, 9, 0), "We talked about the garden shed and the shelves."),
    (datetime(2024, 3, 1, 8, 0), "We talked about the garden shed and the lamp."),
]


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on ranking inside time windows


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        msgs = [{"role": "user", "content": text, "timestamp": ts.isoformat()} for ts, text in DAYS]
        ix.add_messages(msgs, thread_id="t")
        # written as given, without a time (add_messages would give it the time it is added)
        untimed = [{"role": "user", "content": "We talked about the garden shed and nothing else."}]
        ix.add_turns(turns_from_messages(untimed, "u"))

    return fill


def _days(group):
    return {datetime.fromisoformat(h.metadata["ctxret:timestamp"]).date() for h in group.hits}


def _inside(group, start, end):
    return all(start <= datetime.fromisoformat(h.metadata["ctxret:timestamp"]) < end for h in group.hits)


@pytest.mark.parametrize(
    "question, start, end",
    [
        ("What did we say about the garden shed yesterday?", datetime(2024, 2, 28), datetime(2024, 3, 2)),
        ("What did we say about the garden shed this morning?", datetime(2024, 2, 29), datetime(2024, 3, 2)),
        ("What did we say about the garden shed two days ago?", datetime(2024, 2, 27), datetime(2024, 3, 2)),
        ("What did we say about the garden shed last week?", datetime(2024, 2, 18), datetime(2024, 2, 27)),
        ("What did we say about the garden shed a week ago?", datetime(2024, 2, 19), datetime(2024, 2, 29)),
        ("What did we say about the garden shed last month?", datetime(2024, 1, 31), datetime(2024, 3, 2)),
        ("What did we say about the garden shed on 15 February 2024?", datetime(2024, 2, 14), datetime(2024, 2, 17)),
        ("What did we say about the garden shed on Feb 21?", datetime(2024, 2, 20), datetime(2024, 2, 23)),
        ("What did we say about the garden shed in January?", datetime(2023, 12, 31), datetime(2024, 2, 2)),
        ("What did we say about the garden shed last year?", datetime(2022, 12, 31), datetime(2024, 1, 2)),
    ],
)
def test_each_expression_kind_searches_inside_its_window(index, question, start, end):
    (g,) = index.search(question, k=9, thread_id="t", now=NOW, score_threshold=None)
    assert g.hits and g.window is not None and not g.window_note
    assert _inside(g, start, end), (question, sorted(_days(g)), g.window)
    plain = index.search(question, k=9, thread_id="t", now=NOW, score_threshold=None, time_windows=False)[0]
    assert plain.window is None and len(_days(plain)) > len(_days(g))


def test_month_and_year_edges(index):
    # "in December" said in March 2024 is December 2023: the last day of the year, not 1 January
    (g,) = index.search(
        "What did we say about the garden shed in December?", k=9, thread_id="t", now=NOW, score_threshold=None
    )
    assert _days(g) <= {datetime(2023, 12, 31).date(), datetime(2024, 1, 1).date()}  # the ±1 day tolerance
    assert datetime(2023, 12, 31).date() in _days(g)
    (g,) = index.search(
        "What did we say about the garden shed in February?", k=9, thread_id="t", now=NOW, score_threshold=None
    )
    assert datetime(2024, 2, 29).date() in _days(g)  # a leap day is inside February
    assert datetime(2024, 1, 1).date() not in _days(g)


def test_aware_now_against_naive_stored_timestamps(index):
    # naive stored times are the store's wall clock: "yesterday" is read on now's wall clock whatever its zone
    for tz in (timezone.utc, timezone(timedelta(hours=-8)), timezone(timedelta(hours=9))):
        (g,) = index.search(
            "What did we say about the garden shed yesterday?",
            k=9,
            thread_id="t",
            now=NOW.replace(tzinfo=tz),
            score_threshold=None,
        )
        assert _inside(g, datetime(2024, 2, 28), datetime(2024, 3, 2)), tz


def test_iso_now_string_and_default_now(index):
    a = index.search(
        "What did we say about the garden shed yesterday?",
        k=9,
        thread_id="t",
        now=NOW.isoformat(),
        score_threshold=None,
    )
    b = index.search(
        "What did we say about the garden shed yesterday?", k=9, thread_id="t", now=NOW, score_threshold=None
    )
    assert [h.id for h in a[0].hits] == [h.id for h in b[0].hits]
    # default now is today (years after the stored turns): the window holds nothing, so it falls back
    (g,) = index.search("What did we say about the garden shed yesterday?", k=9, thread_id="t", score_threshold=None)
    assert g.window is None and "holds no piece" in g.window_note and len(g.hits) == len(DAYS)


def test_no_time_words_is_the_search_as_before(index):
    q = "What did we say about the garden shed and the roof? And the door hinge?"
    a = index.search(q, k=4, thread_id="t", now=NOW)
    b = index.search(q, k=4, thread_id="t", time_windows=False)
    assert [[(h.id, h.score, h.scores) for h in g.hits] for g in a] == [
        [(h.id, h.score, h.scores) for h in g.hits] for g in b
    ]
    assert all(g.window is None and g.window_note == "" for g in a)


def test_each_part_its_own_window(index):
    q = "What did we say about the garden shed yesterday? What did we say about the garden shed in January?"
    groups = index.search(q, k=9, thread_id="t", now=NOW, score_threshold=None)
    assert len(groups) == 2 and [g.part_index for g in groups] == [0, 1]
    assert _inside(groups[0], datetime(2024, 2, 28), datetime(2024, 3, 2))
    assert _inside(groups[1], datetime(2023, 12, 31), datetime(2024, 2, 2))
    assert groups[0].window != groups[1].window
    assert groups[0].stages[0] == "embed"


def test_thread_without_timestamps(index):
    (g,) = index.search(
        "What did we say about the garden shed yesterday?", thread_id="u", now=NOW, score_threshold=None
    )
    assert g.hits and g.window is None and "no piece in this scope has a timestamp" in g.window_note
    with pytest.raises(InputError, match="no piece in this scope has a timestamp"):
        index.search("the garden shed", thread_id="u", since="2024-01-01")


@pytest.mark.parametrize("thread_id", ["t", None])
def test_since_until_scoped_and_unscoped(index, thread_id):
    groups = index.search(
        "the garden shed", k=9, thread_id=thread_id, since="2024-02-01", until="2024-02-22", score_threshold=None
    )
    (g,) = groups
    assert {d.isoformat() for d in _days(g)} == {"2024-02-01", "2024-02-15", "2024-02-21"}
    assert g.window == (datetime(2024, 2, 1), datetime(2024, 2, 22))
    # inside the store's query, not after the cut: k=1 still finds a piece inside the bounds
    (g,) = index.search(
        "the garden shed and the lamp",
        k=1,
        thread_id=thread_id,
        since="2024-01-01",
        until="2024-01-02",
        score_threshold=None,
    )
    assert [d.isoformat() for d in _days(g)] == ["2024-01-01"]


def test_since_until_with_a_part_window_intersect(index):
    (g,) = index.search(
        "What did we say about the garden shed last month?",
        k=9,
        thread_id="t",
        now=NOW,
        since="2024-02-10",
        score_threshold=None,
    )
    assert _inside(g, datetime(2024, 2, 10), datetime(2024, 3, 2))


async def test_asearch_applies_windows(index):
    (g,) = await index.asearch(
        "What did we say about the garden shed yesterday?", k=9, thread_id="t", now=NOW, score_threshold=None
    )
    assert _inside(g, datetime(2024, 2, 28), datetime(2024, 3, 2)) and g.window is not None


@pytest.mark.parametrize(
    "options, name",
    [
        ({"now": "soon"}, "now"),
        ({"since": 3}, "since"),
        ({"until": "x"}, "until"),
        ({"since": "2024-02-02", "until": "2024-02-01"}, "since"),
        ({"time_windows": "yes"}, "time_windows"),
    ],
)
def test_bad_time_options_name_the_option(options, name):
    with pytest.raises(InputError, match=name):
        SearchSettings(**options)


def test_scope_window_is_a_where_clause():
    s = Scope("t", {"kind": "turn"}, window=(datetime(2024, 1, 1), None))
    assert s.caller_where == {"kind": "turn"}
    assert s.where == {"$and": [{"kind": "turn"}, {"ts_epoch": {"$gte": 1704067200.0}}]}
    assert Scope("t", window=(None, None)).where is None


def _lc_days(docs):  # the vector store's Documents carry the caller's metadata: the day from the text
    return {ts.date() for d in docs for ts, text in DAYS if text in d.page_content}


def test_now_through_the_langchain_retriever_and_vector_store(index):
    from langchain_ctxret import ContextualRetriever, ContextualVectorStore

    q = "What did we say about the garden shed yesterday?"
    want = {datetime(2024, 2, 29).date(), datetime(2024, 3, 1).date()}
    r = ContextualRetriever(index=index, k=9, score_threshold=None, thread_id="t", search_kwargs={"now": NOW})
    docs = r.invoke(q)
    assert docs and _lc_days(docs) <= want
    vs = ContextualVectorStore(index)
    docs = vs.as_retriever(search_kwargs={"k": 9, "now": NOW.isoformat(), "filter": {"thread_id": "t"}}).invoke(q)
    assert docs and _lc_days(docs) <= want
    docs = vs.as_retriever(search_kwargs={"k": 9, "since": "2024-02-01", "until": "2024-02-02"}).invoke("garden shed")
    assert [d.isoformat() for d in _lc_days(docs)] == ["2024-02-01"]


def test_now_through_the_llamaindex_retriever(index):
    from llamaindex_ctxret import ContextualRetriever

    q = "What did we say about the garden shed yesterday?"
    r = ContextualRetriever(index, similarity_top_k=9, score_threshold=None, thread_id="t", search_kwargs={"now": NOW})
    nodes = r.retrieve(q)
    days = {datetime.fromisoformat(n.node.metadata["ctxret:timestamp"]).date() for n in nodes}
    assert nodes and days <= {datetime(2024, 2, 29).date(), datetime(2024, 3, 1).date()}


def test_asking_windows_only_the_parts_that_ask(index):
    q = "We talked about the garden shed yesterday."  # a statement naming its own time, not a search for it
    (g,) = index.search(q, k=9, thread_id="t", now=NOW, score_threshold=None, time_windows="asking")
    assert g.window is None and len(_days(g)) == len(DAYS)
    (g,) = index.search(q, k=9, thread_id="t", now=NOW, score_threshold=None)
    assert g.window is not None
    q = "What did we say about the garden shed yesterday?"
    (g,) = index.search(q, k=9, thread_id="t", now=NOW, score_threshold=None, time_windows="asking")
    assert g.window is not None and _inside(g, datetime(2024, 2, 28), datetime(2024, 3, 2))
