"""The user's own word first in an agent's memory (``user_first``, ctxret.query.latest) and the assistant's replies
under the questions they answer (ctxret.query.answers): a realistic agent history on the real local model, written as
the agent middleware writes it."""

from __future__ import annotations

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.agent_memory import AgentMemory
from ctxret.evaluation.agent_history import MAYA, HistoryQuestion, score_question
from ctxret.query.latest import LatestRequest, asks_then, latest_first, recency_prior, states, user_above_assistant
from ctxret.query.search import PartCandidates
from hypothesis import given
from hypothesis import strategies as st


@pytest.fixture(scope="module")
def maya(local_embedder):
    """MAYA's three months with her assistant: job Acme -> offer Northwind -> job Globex, a move planned to Bristol ->
    Edinburgh, a half marathon -> a 10K, and once the assistant's stale answer ("You work at Acme Corp")."""
    ix = ContextualIndex(in_memory=True, embedder=local_embedder)
    memory = AgentMemory(ix, deadline_ms=None, background=False)
    for messages in MAYA.messages():
        memory.write(messages, "maya")
    yield ix
    ix.close()


def _ask(ix, text, **options):
    (group,) = ix.search(text, thread_id="maya", now=MAYA.now, **{"k": 5, **options})
    return group.hits


@pytest.mark.parametrize("q", [MAYA.questions[0], MAYA.questions[1]], ids=["job", "city"])
def test_the_current_job_and_city_come_first(maya, q):
    """Before: "Where do I work now?" showed the assistant's "You work at Acme Corp" first and "I accepted a job at
    Globex" not at all; "Which city did I move to?" the assistant's "Bristol is a lovely city"."""
    assert score_question(q, _ask(maya, q.text))["current_first"] == 1.0
    assert score_question(q, _ask(maya, q.text, user_first=False))["current_first"] == 0.0


@pytest.mark.parametrize("q", [q for q in MAYA.questions if not q.changed], ids=lambda q: q.text)
def test_a_fact_that_never_changed_still_comes_first(maya, q):
    assert score_question(q, _ask(maya, q.text))["current_first"] == 1.0


def test_the_agents_wrong_answer_never_outranks_the_users_statement(maya):
    """The user said Globex; the assistant once answered "You work at Acme Corp" (wrongly). Asked again, what the user
    said ranks above the agent's reply, and the reply keeps the relevance of its own text (before: the question's,
    0.99, on top)."""
    asked, wrong = MAYA.wrong_answer
    hits = _ask(maya, asked)
    reply = next(i for i, h in enumerate(hits) if h.body == wrong)
    said = [
        i
        for i, h in enumerate(hits)
        if h.metadata["ctxret:source_kind"] == "user" and ("Globex" in h.body or "Acme" in h.body)
    ]
    assert said and max(said) < reply
    assert "Globex" in next(h.body for h in hits if "Globex" in h.body or "Acme" in h.body)
    own = next(h for h in _ask(maya, asked, answers_first=False, k=20) if h.body == wrong)
    assert hits[reply].relevance == pytest.approx(own.relevance)
    before = _ask(maya, asked, user_first=False)
    assert before[1].body == wrong and before[1].relevance < before[0].relevance  # under its question, its own


def test_a_question_for_an_earlier_state_reaches_for_no_later_statement(maya):
    text = "Where did I work before?"
    assert asks_then(text)
    assert {h.id for h in _ask(maya, text)} == {h.id for h in _ask(maya, text, user_first=False)}


def test_states():
    assert states("Can you suggest a dinner? I'm allergic to peanuts.")
    assert states("I signed up for the half marathon. Can you make me a plan?")
    assert not states("Remind me, where do I work now?")
    assert not states("Where do I work now? Which city did I move to?")


@given(st.text(max_size=80))
def test_states_and_asks_then_read_any_text(text):
    assert isinstance(states(text), bool) and isinstance(asks_then(text), bool)


def _rows(said):
    return {
        rid: (text, {"source_kind": kind, "ts_epoch": t, "body": text}, np.zeros(4))
        for rid, (kind, text, t) in said.items()
    }


def test_the_users_statement_moves_above_the_assistants_words_of_the_same_subject_with_its_run():
    """A question and the assistant's reply under it are one run; the user's statement of the same subject moves
    above the run, at its first hit's score and relevance (``passed``); a statement of another subject stays."""
    rows = _rows(
        {
            "q": ("user", "Where do I work now?", 5.0),
            "a": ("assistant", "You work at Acme Corp.", 5.0),
            "x": ("user", "I like tea.", 2.0),
            "u": ("user", "I work at Acme Corp.", 1.0),
        }
    )
    ranked = [("q", 0.9), ("a", 0.9), ("x", 0.5), ("u", 0.4)]
    c = PartCandidates("Where do I work?", ranked, {r: (v[0], v[1]) for r, v in rows.items()}, {}, follows={"a": "q"})
    got = user_above_assistant(c, rows, {("a", "u"), ("u", "a")})
    assert got.ranked == [("u", 0.9), ("q", 0.9), ("a", 0.9), ("x", 0.5)]
    assert got.passed == {"u": "q"}
    assert user_above_assistant(c, rows, set()) is c  # not of the same subject: nothing moves


def test_a_later_statement_reached_beyond_the_group_joins_the_earlier_one_it_restates():
    """The group's first hits hold the first statement; the changed one ranks 7th. Reached, alike, it joins the
    subject and comes first, in the first one's place, at its score; nothing reached that restates nothing enters."""
    said = {
        "q": ("user", "Where do I live?", 9.0),
        "a": ("assistant", "You live in Bristol.", 9.0),
        "old": ("user", "We are moving to Bristol in July.", 1.0),
        "b": ("assistant", "Lovely city!", 1.0),
        "c": ("user", "I like tea.", 2.0),
        "new": ("user", "We are moving to Edinburgh instead.", 3.0),
        "z": ("user", "The weather is nice.", 4.0),
    }
    rows = _rows(said)
    ranked = [("q", 1.0), ("a", 0.9), ("old", 0.8), ("b", 0.7), ("c", 0.6), ("z", 0.3), ("new", 0.2)]
    c = PartCandidates("Where do I live?", ranked, {r: (v[0], v[1]) for r, v in rows.items()}, {})
    pool = ["q", "a", "old", "b", "c", "new", "z"]
    vec = {"q": [1, 0, 0, 0], "a": [0, 1, 0, 0], "old": [0, 1, 0.2, 0], "b": [0, 0.2, 1, 0], "c": [0, 0, 0, 1]}
    vec |= {"new": [0, 1, 0.25, 0], "z": [0, -1, 0, -0.2], "part": [1, 0.5, 0, 0]}
    own = np.array([vec[r] for r in [*pool, "part"]], dtype=float)
    request = LatestRequest(pool, rows, np.zeros((1, 4)), head=5, part="Where do I live?", user_first=True)
    got = latest_first(c, 5, request, own)
    order = [rid for rid, _ in got.ranked]
    assert order.index("new") < order.index("old") < order.index("a")  # the changed fact first, above the echo
    assert order.index("z") > order.index("c")  # like none of the group's statements: stays out of it
    assert order[:4] == ["q", "new", "old", "a"]  # the subject's run above the assistant's echo, in its place
    assert got.lifted["new"] == "old" and got.passed["new"] == got.passed["old"] == "a"


def test_an_agents_echo_of_the_change_does_not_count_as_the_users_statement():
    assert score_question(HistoryQuestion("?", ("Globex",), ("Acme",)), [])["current_first"] == 0.0


def test_the_recency_prior_puts_the_newer_of_two_near_alike_hits_first_and_keeps_the_scores_in_place():
    info = {rid: (rid, {"ts_epoch": t}) for rid, t in {"old": 1.0, "new": 9.0, "mid": 5.0, "far": 9.0}.items()}
    ranked = [("old", 1.0), ("new", 0.99), ("mid", 0.6), ("far", 0.2)]
    c = PartCandidates("Where do I live now?", ranked, info, {})
    got = recency_prior(c, 4)
    assert [rid for rid, _ in got.ranked] == ["new", "old", "mid", "far"]  # 0.01 apart: the newer first
    assert [s for _, s in got.ranked] == [s for _, s in ranked]  # the scores stay where they were
    assert recency_prior(c, 1) is c  # one hit: nothing to order
    untimed = {rid: (rid, {}) for rid in info}
    assert recency_prior(PartCandidates("?", ranked, untimed, {}), 4).ranked == ranked
