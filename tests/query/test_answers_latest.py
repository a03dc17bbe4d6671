"""Answers above questions (ctxret.query.answers) and the latest fact first (ctxret.query.latest): real store, real
model, both adapters' scores."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import replace
from datetime import datetime

import numpy as np
import pytest
from ctxret import ContextualIndex, EmbeddingError
from ctxret.query.answers import is_question, lift_answers
from ctxret.query.latest import (
    CONTEXT,
    DEPTH,
    SAME_SUBJECT,
    OwnVectors,
    asks_now,
    own_vectors,
    same_subject,
    subjects,
)
from ctxret.query.search import PartCandidates
from hypothesis import given
from hypothesis import strategies as st

FLIGHT = [
    {"role": "user", "content": "Book me a flight from Berlin to Lisbon for October 20."},
    {"role": "assistant", "content": "Booked TAP flight TP 541, departing at 09:40 on October 20."},
    {"role": "user", "content": "Also, my dog Biscuit needs his vaccinations next week."},
    {"role": "assistant", "content": "Biscuit's vet appointment is on Thursday at 4 PM at Green Paws."},
]
#: A fact, two unrelated sessions, then the fact changed; a fact never restated in between.
CUTOVER = [
    ("2026-11-02T10:00:00", "At work the cutover is planned for November 14, the vendor signed off."),
    ("2026-11-02T10:01:00", "My sister is visiting from Porto next month, she loves the old tram lines."),
    ("2026-11-05T09:00:00", "The new espresso machine in the office finally works."),
    ("2026-11-09T16:00:00", "We moved the cutover to November 21 because the vendor needed another week."),
]


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on ranking


@pytest.fixture(scope="module")
def index_options():
    return {"in_memory": True}


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages(FLIGHT, thread_id="trip")
        ix.add_messages([{"role": "user", "content": t, "timestamp": ts} for ts, t in CUTOVER], thread_id="work")

    return fill


# -- answers above questions ---------------------------------------------------------------------------------------
def test_the_assistants_reply_follows_the_request_it_answers_on_its_own_relevance(index):
    """Before: the assistant's "Booked TAP flight…" (own relevance 0.36) was lifted above the request and shown at the
    request's relevance (0.90): the agent's own words shown as the best evidence. Now it sits right under the request
    it answers (they stay together), at its own relevance."""
    hits = index.search("When does my flight to Lisbon leave?", k=3, thread_id="trip")[0].hits
    bodies = [h.body for h in hits]
    assert bodies[0].startswith("Book me a flight") and bodies[1].startswith("Booked TAP flight")
    assert hits[0].relevance > 0.5 > hits[1].relevance  # its own
    assert hits[1].score == pytest.approx(hits[0].score)  # right under the request: the scores stay in order
    off = index.search("When does my flight to Lisbon leave?", k=3, thread_id="trip", answers_first=False)[0].hits
    booked = next(h for h in off if h.body.startswith("Booked TAP flight"))
    assert booked.score < hits[1].score and booked.relevance == pytest.approx(hits[1].relevance)


def test_a_speakers_answer_still_ranks_above_the_question_with_its_relevance(local_embedder):
    """Between people (a user's message answering another's question: LoCoMo's speakers, or the user answering the
    assistant), the answer is what the one who knows said: it takes the question's place and relevance."""
    ix = ContextualIndex(in_memory=True, embedder=local_embedder)
    try:
        ix.add_messages(
            [
                {"role": "user", "name": "Mel", "content": "What are you researching these days, Caroline?"},
                {"role": "user", "name": "Caroline", "content": "Adoption agencies, I want to give a child a home."},
                {"role": "user", "name": "Mel", "content": "The weather was lovely at the lake on Sunday."},
            ],
            thread_id="friends",
        )
        hits = ix.search("What is Caroline researching?", k=3, thread_id="friends")[0].hits
        assert hits[0].body.startswith("Adoption agencies") and hits[1].body.startswith("What are you researching")
        assert hits[0].relevance >= hits[1].relevance
    finally:
        ix.close()


def test_a_statement_keeps_its_ranking(index):
    """A part that states something looks for the statement itself, the request included."""
    on = index.search("I asked for a flight from Berlin to Lisbon.", k=3, thread_id="trip")[0].hits
    off = index.search("I asked for a flight from Berlin to Lisbon.", k=3, thread_id="trip", answers_first=False)
    assert [h.id for h in on] == [h.id for h in off[0].hits]


def test_the_adapters_show_the_request_then_the_reply_each_at_its_score(index):
    from langchain_ctxret import ContextualRetriever

    docs = ContextualRetriever(index=index, k=2, thread_id="trip").invoke("When does my flight to Lisbon leave?")
    assert docs[1].page_content.endswith("Booked TAP flight TP 541, departing at 09:40 on October 20.")
    assert docs[0].metadata["score"] > 0.5 > docs[1].metadata["score"]

    from llamaindex_ctxret import ContextualRetriever as LIRetriever

    nodes = LIRetriever(index, similarity_top_k=2, thread_id="trip").retrieve("When does my flight to Lisbon leave?")
    assert "Booked TAP flight" in nodes[1].node.get_content() and nodes[0].score > 0.5 > nodes[1].score


def _candidates(part, rows):
    """PartCandidates from ``(id, score, body, source_ordinal)`` rows of one turn, ranked as given."""
    info = {
        rid: (body, {"thread_id": "t", "turn_id": "t#1", "source_ordinal": src, "ordinal": 0, "body": body})
        for rid, _, body, src in rows
    }
    return PartCandidates(part, [(rid, sc) for rid, sc, _, _ in rows], info, {rid: 0.5 for rid in info})


def test_lift_answers_moves_only_the_next_source_and_only_upwards():
    c = _candidates(
        "Where is the party?",
        [
            ("q", 0.9, "Where is the party on Saturday?", 0),
            ("x", 0.8, "Bring snacks.", 5),
            ("a", 0.4, "At Ana's.", 1),
        ],
    )
    lifted = lift_answers(c)
    assert [rid for rid, _ in lifted.ranked] == ["a", "q", "x"]
    assert dict(lifted.ranked)["a"] == 0.9 and lifted.lifted == {"a": "q"}
    assert lift_answers(c, depth=0).ranked == c.ranked  # only questions within the depth lift
    statement = _candidates(
        "The party is at Ana's.",
        [
            (rid, sc, b, s)
            for rid, sc, b, s in [("q", 0.9, "Where is the party on Saturday?", 0), ("a", 0.4, "At Ana's.", 1)]
        ],
    )
    assert lift_answers(statement).ranked == statement.ranked
    above = _candidates("Where is the party?", [("a", 0.9, "At Ana's.", 1), ("q", 0.8, "Where is the party?", 0)])
    assert lift_answers(above).ranked == above.ranked  # the answer ranks above already


def test_an_assistants_reply_to_the_user_follows_the_question_and_shares_only_its_floor():
    def meta(rid, src, kind):
        return {"thread_id": "t", "turn_id": "t#1", "source_ordinal": src, "ordinal": 0, "source_kind": kind}

    info = {
        "q": ("Where do I work now?", {**meta("q", 0, "user"), "body": "Where do I work now?"}),
        "x": ("I like tea.", {**meta("x", 5, "user"), "body": "I like tea."}),
        "a": ("You work at Acme.", {**meta("a", 1, "assistant"), "body": "You work at Acme."}),
    }
    c = PartCandidates("Where do I work?", [("q", 0.9), ("x", 0.8), ("a", 0.4)], info, {r: 0.5 for r in info})
    got = lift_answers(c)
    assert got.ranked == [("q", 0.9), ("a", 0.9), ("x", 0.8)]
    assert got.follows == {"a": "q"} and got.lifted == {}
    tool = {**info, "a": (info["a"][0], {**info["a"][1], "source_kind": "tool"})}
    assert lift_answers(replace(c, info=tool)).lifted == {"a": "q"}  # a tool's output is lifted as before


def test_is_question():
    assert is_question("Where is the party on Saturday?")
    assert is_question("Book me a flight to Lisbon.")
    assert not is_question("Booked TAP flight TP 541.")


# -- the latest fact first ----------------------------------------------------------------------------------------
def test_the_changed_fact_ranks_above_the_first_statement_and_both_stay(index):
    """Before: the first statement (worded like the question) ranked first."""
    now = datetime(2026, 11, 20, 12)
    hits = index.search("When is the cutover?", k=4, thread_id="work", now=now)[0].hits
    bodies = [h.body for h in hits]
    new = next(i for i, b in enumerate(bodies) if "November 21" in b)
    old = next(i for i, b in enumerate(bodies) if "November 14" in b)
    assert new < old
    assert hits[new].metadata["ctxret:timestamp"] > hits[old].metadata["ctxret:timestamp"]  # each keeps its time
    assert hits[new].relevance >= hits[old].relevance
    off = index.search("When is the cutover?", k=4, thread_id="work", now=now, latest_first=False)[0].hits
    assert [h.body for h in off].index(bodies[old]) < [h.body for h in off].index(bodies[new])


def test_a_fact_changed_twice_ranks_its_latest_value_first(local_embedder):
    """Three statements of one plan: the second and third are each other's nearest, the first's nearest is the second;
    before, the pair swapped among themselves and the first value stayed on top."""
    again = ("2026-11-12T09:00:00", "Update: the cutover moved again, to November 28, after the vendor's second delay.")
    ix = ContextualIndex(in_memory=True, embedder=local_embedder)
    try:
        ix.add_messages(
            [{"role": "user", "content": t, "timestamp": ts} for ts, t in [*CUTOVER, again]], thread_id="work"
        )
        now = datetime(2026, 11, 20, 12)
        off = ix.search("When is the cutover?", k=5, thread_id="work", now=now, latest_first=False)[0].hits
        assert "November 14" in off[0].body  # worded like the question
        (group,) = ix.search("When is the cutover?", k=5, thread_id="work", now=now)
        days = [d for h in group.hits for d in ("November 28", "November 21", "November 14") if d in h.body]
        assert days == ["November 28", "November 21", "November 14"] and group.stages[-1] == "latest"
        assert {h.id for h in group.hits} == {h.id for h in off}  # nothing enters or leaves the group
        assert [h.score for h in group.hits] == sorted((h.score for h in group.hits), reverse=True)
    finally:
        ix.close()


def test_subjects_pairs_mutual_neighbours_and_joins_a_third_to_them():
    inf = -np.inf
    chain = np.array([[inf, 0.81, 0.84, 0.2], [0.81, inf, 0.92, 0.3], [0.84, 0.92, inf, 0.3], [0.2, 0.3, 0.3, inf]])
    assert subjects(chain, 0.5) == [[0, 1, 2]]
    assert subjects(chain, 0.83) == [[0, 1, 2]] and subjects(chain, 0.85) == [[1, 2]]
    assert subjects(chain, 0.95) == []
    assert subjects(chain, 0.5, [1.0, 2.0, 3.0, 4.0]) == [[0, 1, 2]]  # the first statement joins the later two
    assert subjects(chain, 0.5, [4.0, 2.0, 3.0, 1.0]) == [[0, 1, 2]]  # the latest joins: it is like both
    assert subjects(chain, 0.5, [None, 2.0, 3.0, 4.0]) == [[1, 2]]  # a hit without a time never joins
    # a pair (0, 1); hit 3's nearest is 0, but it is not like 1: it joins only when said before both
    like_one = np.array([[inf, 0.92, 0.3, 0.6], [0.92, inf, 0.3, 0.2], [0.3, 0.3, inf, 0.1], [0.6, 0.2, 0.1, inf]])
    assert subjects(like_one, 0.5, [2.0, 3.0, 4.0, 1.0]) == [[0, 1, 3]]
    assert subjects(like_one, 0.5, [1.0, 2.0, 3.0, 4.0]) == [[0, 1]]
    assert subjects(like_one, 0.5, [1.0, 3.0, 4.0, 2.0]) == [[0, 1]]  # after one of them: it would pass that one
    assert subjects(np.array([[inf]]), 0.5) == []


def test_the_statements_of_a_subject_keep_the_group_ordered_by_score():
    """A fact changed twice whose latest statement already ranks first, the first one third and the one between fourth:
    the three come together, latest first, and the first one, now above a hit that scored higher, takes the best score
    among them (the scores stay in order)."""
    from ctxret.query.latest import LatestRequest, latest_first

    said = {
        "c": ("cutover moved again to the 28th", 3.0),
        "a": ("cutover on the 14th", 1.0),
        "b": ("cutover moved to the 21st", 2.0),
    }
    rows = {
        rid: (text, {"source_name": "Ana", "ts_epoch": t, "body": text}, np.zeros(4)) for rid, (text, t) in said.items()
    }
    rows["x"] = ("the espresso machine works", {"source_name": "Ben", "ts_epoch": 5.0, "body": "espresso"}, np.zeros(4))
    ranked = [("c", 1.0), ("x", 0.9), ("a", 0.8), ("b", 0.7)]
    c = PartCandidates("When is the cutover?", ranked, {r: (rows[r][0], rows[r][1]) for r in rows}, {})
    pool = [rid for rid, _ in ranked]
    own = np.array([[1.0, 0.1, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.1, 0.0], [1.0, 0.05, 0.05, 0.0]])
    got = latest_first(c, 5, LatestRequest(pool, rows, np.zeros((1, 4))), own)
    assert [rid for rid, _ in got.ranked] == ["c", "b", "a", "x"]
    scores = [s for _, s in got.ranked]
    assert scores == sorted(scores, reverse=True) and scores[:3] == [1.0, 1.0, 1.0]


@given(st.integers(2, 6).flatmap(lambda n: st.lists(st.floats(-1, 2), min_size=n * n, max_size=n * n)))
def test_subjects_puts_each_hit_in_at_most_one_group_of_similar_hits(values):
    n = int(round(len(values) ** 0.5))
    sim = np.array(values).reshape(n, n)
    sim = (sim + sim.T) / 2
    np.fill_diagonal(sim, -np.inf)
    groups = subjects(sim, 0.5)
    members = [m for g in groups for m in g]
    assert len(members) == len(set(members))
    for g in groups:
        assert len(g) >= 2 and all(max(sim[m, o] for o in g if o != m) >= 0.5 for m in g)


def test_a_question_about_the_past_keeps_its_ranking(index):
    on = index.search("When was the cutover planned first?", k=4, thread_id="work")[0].hits
    off = index.search("When was the cutover planned first?", k=4, thread_id="work", latest_first=False)[0].hits
    assert [h.id for h in on] == [h.id for h in off]


def test_a_fact_never_restated_is_not_moved_for_its_age(index):
    """The sister's visit is the oldest statement; nothing restates it, so nothing later passes it."""
    on = index.search("Who is visiting from Porto?", k=4, thread_id="work")[0].hits
    assert "Porto" in on[0].body
    off = index.search("Who is visiting from Porto?", k=4, thread_id="work", latest_first=False)[0].hits
    assert [h.id for h in on] == [h.id for h in off]


def test_statements_without_a_time_never_move(local_embedder):
    """Documents carry no timestamps: two statements of one subject keep the order the search gives them, whatever
    the question asks (the rule needs two hits said at different times)."""
    ix = ContextualIndex(in_memory=True, embedder=local_embedder)
    try:
        ix.add_documents([{"text": text, "id": f"note-{n}"} for n, (_, text) in enumerate(CUTOVER)], thread_id="docs")
        for question in ("When is the cutover?", "What is the cutover date?"):
            assert asks_now(question)
            on = ix.search(question, k=4, thread_id="docs")[0].hits
            off = ix.search(question, k=4, thread_id="docs", latest_first=False)[0].hits
            assert "cutover" in on[0].body and "cutover" in on[1].body  # the two statements lead the group
            assert [h.id for h in on] == [h.id for h in off]
            assert all(h.metadata.get("ctxret:ts_epoch") is None for h in on)
    finally:
        ix.close()


def test_same_subject_takes_the_shared_direction_out_of_the_own_text_vectors():
    rng = np.random.default_rng(0)
    shared = np.array([1.0, 0.0, 0.0])
    context = shared + 0.1 * rng.standard_normal((CONTEXT, 3))  # what every candidate shares: the first axis
    own = np.array([[1.0, 0.1, 0.0], [1.0, 0.12, 0.01], [1.0, 0.0, 0.1]])
    sim = same_subject(own, context)
    assert np.isneginf(np.diag(sim)).all()
    assert sim[0, 1] > 0.9 > 0.3 > sim[0, 2]  # raw cosines 0.99+ both: only what differs from the shared counts
    with_words = same_subject(own, context, np.full((3, 3), 0.5))
    assert with_words[0, 1] == pytest.approx(sim[0, 1] + 0.5)
    # fewer candidates than CONTEXT (a small thread): their mean is mostly the pair itself, nothing is taken out
    raw = own / np.linalg.norm(own, axis=1, keepdims=True)
    assert same_subject(own, context[:4])[0, 2] == pytest.approx(raw[0] @ raw[2])
    assert SAME_SUBJECT > 0


@pytest.mark.parametrize(
    ("part", "now"),
    [
        ("What car does Caroline drive?", True),
        ("When is the cutover?", True),
        ("Where's the key?", True),
        ("Who is Caroline's manager now?", True),
        ("When did Caroline go camping?", False),
        ("What was the plan last week?", False),
        ("Caroline drives a Mazda.", False),
        ("Who won Caroline's game?", False),
        # the latest state asked for in any tense, and tallies or durations up to now (LongMemEval's updates)
        ("What type of camera lens did I purchase most recently?", True),
        ("How many tops have I bought from H&M so far?", True),
        ("How many Korean restaurants have I tried in my city?", True),
        ("How long have I had my cat, Luna?", True),
        ("What is my current highest score in Ticket to Ride?", True),
        ("What books has Melanie read?", False),
        ("How many sessions of the support group did I attend?", False),
    ],
)
def test_asks_now(part, now):
    assert asks_now(part) is now


LATEST_WORDS = re.compile(r"now|current|latest|recent|so far|these days|lately|anymore|still|how|have|has|'ve", re.I)


@given(st.text(max_size=120).filter(lambda t: not LATEST_WORDS.search(t)))
def test_asks_now_is_false_for_any_text_that_says_did_and_not_latest(text):
    assert not asks_now(f"What did {text} is?")


@given(st.text(max_size=120))
def test_asks_now_is_true_for_any_question_asking_for_the_latest(text):
    assert asks_now(f"What {text} did she buy most recently?")


# -- the latest stage in the search loop ----------------------------------------------------------------------------
def test_the_latest_stage_runs_only_for_a_question_about_now_over_a_restated_fact(index):
    """Most searches pay nothing: the stage embeds hits' texts only when a part asks about now and two of its first
    hits were said by one source at different times."""
    now = datetime(2026, 11, 20, 12)
    (changed,) = index.search("When is the cutover?", k=4, thread_id="work", now=now)
    assert changed.stages[-1] == "latest" and not changed.degraded
    (past,) = index.search("When was the cutover planned first?", k=4, thread_id="work")
    assert "latest" not in past.stages and not past.degraded
    (one_time,) = index.search("When does my flight to Lisbon leave?", k=3, thread_id="trip")
    assert len({h.metadata.get("ctxret:ts_epoch") for h in one_time.hits}) == 1  # written in one call: one time
    assert "latest" not in one_time.stages
    (off,) = index.search("When is the cutover?", k=4, thread_id="work", now=now, latest_first=False)
    assert "latest" not in off.stages


def test_the_async_search_puts_the_latest_fact_first_too(index):
    now = datetime(2026, 11, 20, 12)
    (sync,) = index.search("When is the cutover?", k=4, thread_id="work", now=now)
    (got,) = asyncio.run(index.asearch("When is the cutover?", k=4, thread_id="work", now=now))
    assert [h.id for h in got.hits] == [h.id for h in sync.hits]
    assert "November 21" in got.hits[0].body and got.stages == sync.stages


class FailsOnStoredTexts:
    """The local model, failing when asked for stored turns' texts (an embedding API erroring mid-search)."""

    def __init__(self, inner):
        self.inner = inner
        for name in ("model_id", "dims", "max_tokens", "default_piece_bytes", "default_score_threshold"):
            setattr(self, name, getattr(inner, name))
        self.failing = False

    def embed(self, texts):
        if self.failing and any(t.startswith("[Turn") for t in texts):
            raise ConnectionError("embedding service unavailable")
        return self.inner.embed(texts)

    async def aembed(self, texts):
        return self.embed(texts)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


def test_a_failing_latest_stage_under_a_deadline_keeps_the_groups_order_and_says_so(local_embedder, caplog):
    embedder = FailsOnStoredTexts(local_embedder)
    ix = ContextualIndex(in_memory=True, embedder=embedder)
    try:
        ix.add_messages([{"role": "user", "content": t, "timestamp": ts} for ts, t in CUTOVER], thread_id="work")
        now = datetime(2026, 11, 20, 12)
        (before,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now, latest_first=False)
        embedder.failing = True  # before the stage ever embedded these texts (it remembers what it embedded)
        with caplog.at_level(logging.WARNING):
            (got,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now, deadline_ms=60_000)
        assert got.degraded and got.skipped == ("latest",) and "latest" not in got.stages
        assert [h.id for h in got.hits] == [h.id for h in before.hits]  # the order the stages before it gave
        assert "embedding service unavailable" in caplog.text
        with pytest.raises(EmbeddingError, match="embedding service unavailable"):  # no deadline: the caller's error
            ix.search("When is the cutover?", k=4, thread_id="work", now=now)
        embedder.failing = False
        (good,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now, deadline_ms=60_000)
        assert good.stages[-1] == "latest" and not good.degraded and "November 21" in good.hits[0].body
    finally:
        ix.close()


class RecordsStoredTexts(FailsOnStoredTexts):
    """The local model, remembering the stored turns' texts it was asked for (what the ``latest`` stage embeds)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.asked: list[list[str]] = []

    def embed(self, texts):
        if any(t.startswith("[Turn") for t in texts):
            self.asked.append(list(texts))
        return super().embed(texts)


def test_the_latest_stage_embeds_at_most_depth_texts_whatever_k(local_embedder):
    embedder = RecordsStoredTexts(local_embedder)
    ix = ContextualIndex(in_memory=True, embedder=embedder)
    try:
        more = [(f"2026-11-0{d}T12:00:00", f"The cutover checklist item {d} is done.") for d in range(3, 9)]
        ix.add_messages(
            [{"role": "user", "content": t, "timestamp": ts} for ts, t in sorted(CUTOVER + more)], thread_id="work"
        )
        embedder.asked.clear()  # the write embedded them too
        (group,) = ix.search("When is the cutover?", k=10, thread_id="work", now=datetime(2026, 11, 20, 12))
        assert len(group.hits) > DEPTH and group.stages[-1] == "latest"
        assert len(embedder.asked) == 1 and len(embedder.asked[0]) == DEPTH  # one request, the first DEPTH hits
        assert [h.body for h in group.hits].index(CUTOVER[3][1]) < [h.body for h in group.hits].index(CUTOVER[0][1])
    finally:
        ix.close()


def test_the_latest_stage_embeds_a_text_once_for_the_searches_after_it(local_embedder):
    """An agent asks about the same memories again: the stage embeds only texts it has not embedded before with this
    embedder, and ranks as it did."""
    embedder = RecordsStoredTexts(local_embedder)
    ix = ContextualIndex(in_memory=True, embedder=embedder)
    try:
        ix.add_messages([{"role": "user", "content": t, "timestamp": ts} for ts, t in CUTOVER], thread_id="work")
        embedder.asked.clear()  # the write embedded them too
        now = datetime(2026, 11, 20, 12)
        (first,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now)
        assert first.stages[-1] == "latest" and len(embedder.asked) == 1
        seen = set(embedder.asked[0])
        (again,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now)
        (rephrased,) = asyncio.run(ix.asearch("When is the cutover now?", k=4, thread_id="work", now=now))
        assert len(embedder.asked) == 1  # nothing more embedded, sync or async
        assert [h.id for h in again.hits] == [h.id for h in first.hits] and again.stages == first.stages
        assert rephrased.stages[-1] == "latest" and "November 21" in rephrased.hits[0].body
        later = "My sister pushed her visit from Porto to January, so no tram rides this year."
        ix.add_messages([{"role": "user", "content": later, "timestamp": "2026-11-12T09:00:00"}], thread_id="work")
        embedder.asked.clear()
        (visit,) = ix.search("When is my sister visiting from Porto?", k=4, thread_id="work", now=now)
        assert visit.stages[-1] == "latest" and "January" in visit.hits[0].body
        (asked,) = embedder.asked  # one request: the hits it has not embedded before, none it has
        assert any("January" in t for t in asked) and not seen & set(asked)
        assert len(asked) < len({h.text for h in visit.hits})
    finally:
        ix.close()


def test_an_embedding_api_gets_one_more_request_only_for_hits_it_has_not_embedded(fake_openai):
    """With the OpenAI client over HTTP: a question about now makes two requests the first time (the message, then the
    hits' own texts) and one the next time."""
    from ctxret import OpenAIEmbedder

    emb = OpenAIEmbedder(model="text-embedding-3-small", dimensions=384, api_key="sk-test", base_url=fake_openai.url)
    ix = ContextualIndex(in_memory=True, embedder=emb)
    try:
        ix.add_messages([{"role": "user", "content": t, "timestamp": ts} for ts, t in CUTOVER], thread_id="work")
        fake_openai.reset()
        now = datetime(2026, 11, 20, 12)
        (first,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now)
        assert first.stages[-1] == "latest" and "November 21" in first.hits[0].body
        message, own = fake_openai.requests
        assert message.n_inputs == 1 and 2 <= own.n_inputs <= DEPTH  # the hits' texts (the floor may cut some after)
        (again,) = ix.search("When is the cutover?", k=4, thread_id="work", now=now)
        assert [r.n_inputs for r in fake_openai.requests] == [1, own.n_inputs, 1]  # the message only
        assert [h.id for h in again.hits] == [h.id for h in first.hits] and again.stages == first.stages
    finally:
        ix.close()


def test_own_vectors_keep_the_most_recently_used_texts():
    memo = OwnVectors(size=2 * 8)  # bytes: two vectors of two float32
    memo.put(["a", "b"], np.eye(2, dtype=np.float32))
    assert set(memo.get(["a"])) == {"a"}  # "a" is now the most recently used
    memo.put(["c"], np.ones((1, 2), dtype=np.float32))
    got = memo.get(["a", "b", "c"])
    assert set(got) == {"a", "c"} and len(memo) == 2
    np.testing.assert_array_equal(got["a"], [1.0, 0.0])


def test_own_vectors_are_one_per_embedder_and_go_with_it(local_embedder):
    import gc
    import weakref

    from ctxret.embedders.guard import guarded

    mine, other = RecordsStoredTexts(local_embedder), RecordsStoredTexts(local_embedder)
    memo = own_vectors(mine)
    assert memo is not None and own_vectors(guarded(mine)) is memo and own_vectors(other) is not memo
    gone = weakref.ref(memo)
    del memo, mine
    gc.collect()
    assert gone() is None  # an embedder's memo does not outlive it


def test_the_latest_stage_reads_the_store_once_for_every_part(index, monkeypatch):
    """Two parts asking about now over restated facts: one read of their rows, not one per part (thread-scoped: the
    thread's cached view; the same count for Chroma's ``fetch`` in an unscoped search)."""
    from ctxret.storage.cache import ScopeView

    reads: list[list[str]] = []
    fetch = ScopeView.fetch

    def counted(self, ids, scope):
        reads.append(list(ids))
        return fetch(self, ids, scope)

    monkeypatch.setattr(ScopeView, "fetch", counted)
    now = datetime(2026, 11, 20, 12)
    message = "When is the cutover? And who is visiting from Porto now?"
    index.search(message, k=4, thread_id="work", now=now, latest_first=False)
    before = len(reads)  # what the rest of the search reads
    groups = index.search(message, k=4, thread_id="work", now=now)
    assert len(groups) == 2 and all(g.stages[-1] == "latest" for g in groups)
    assert len(reads) == 2 * before + 1  # the stage's one read, for both parts (one per part: 2 * before + 2)
    assert all(len(r) == len(set(r)) for r in reads)  # each row once, though both parts rank the same hits
    assert "November 21" in groups[0].hits[0].body
