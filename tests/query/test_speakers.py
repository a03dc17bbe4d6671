"""A named speaker's own words first (ctxret.query.speakers): the rule on ranked candidates, the name matching, and
the stage in a real search (real store, real model, both adapters)."""

from __future__ import annotations

import pytest
from ctxret.query.search import PartCandidates
from ctxret.query.speakers import DEPTH, named_speaker, speakers_first
from ctxret.storage.base import Deferred
from hypothesis import given
from hypothesis import strategies as st

#: Two speakers; a question about Tim's German is worded like John's line about his own Spanish.
CHAT = [
    ("Tim", "I've been so busy with school, exams every week this month."),
    ("John", "Learning a language is tough, I tried learning Spanish last year and gave up."),
    ("Tim", "Duolingo every night before bed, my German is getting better."),
    ("John", "Basketball practice was brutal today, coach made us run sprints."),
    ("Tim", "My sister just moved to Lisbon, so I might visit her in the summer."),
]
ASKED = "Which language does Tim practice?"


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on ranking


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages(
            [{"role": "user" if who == "Tim" else "assistant", "name": who, "content": text} for who, text in CHAT],
            thread_id="friends",
        )
        ix.add_messages([{"role": "user", "content": t} for _, t in CHAT], thread_id="nameless")
        # documents whose own metadata says who wrote them: a caller key, not a speaker of a thread
        ix.add_documents(
            [{"id": f"note-{n}", "text": t, "metadata": {"source_name": who}} for n, (who, t) in enumerate(CHAT)],
            thread_id="notes",
        )

    return fill


def _candidates(part, rows):
    """PartCandidates from ``(id, score, speaker)`` rows, ranked as given (``speaker`` None: no name stored;
    ``...``: metadata not read yet)."""
    info = {
        rid: (
            rid,
            Deferred()
            if who is ...
            else {"thread_id": "t", "source_kind": "user", **({"source_name": who} if who else {})},
        )
        for rid, _, who in rows
    }
    return PartCandidates(part, [(rid, sc) for rid, sc, _ in rows], info, {rid: 0.5 for rid in info})


# -- the rule -------------------------------------------------------------------------------------------------------
def test_the_named_speakers_hits_move_above_the_others_in_their_order_at_the_passed_hits_score():
    c = _candidates(
        "What language is Tim learning?",
        [("t1", 0.95, "Tim"), ("j1", 0.9, "John"), ("j2", 0.8, "John"), ("t2", 0.6, "Tim"), ("x", 0.5, None)],
    )
    out = speakers_first(c)
    assert [rid for rid, _ in out.ranked] == ["t1", "t2", "j1", "j2", "x"]
    assert dict(out.ranked) == {"t1": 0.95, "t2": 0.9, "j1": 0.9, "j2": 0.8, "x": 0.5}
    scores = [s for _, s in out.ranked]
    assert scores == sorted(scores, reverse=True)  # the group's scores stay in order
    assert out.lifted == {}  # a moved hit faces the floor on its own
    assert out.passed == {"t2": "j1"}  # and keeps at least the relevance of the first hit it passed


def test_a_lifted_answer_and_its_question_move_as_one():
    """The answers stage put the assistant's booking right above Alice's request; the pair stays together."""
    c = _candidates(
        "When does Alice's flight leave?",
        [("x", 0.9, "Bob"), ("a", 0.8, "assistant"), ("q", 0.8, "Alice"), ("y", 0.7, "Bob"), ("b", 0.6, "Alice")],
    )
    c.lifted["a"] = "q"
    assert [rid for rid, _ in speakers_first(c).ranked] == ["a", "q", "b", "x", "y"]
    c.lifted.clear()
    assert [rid for rid, _ in speakers_first(c).ranked] == ["q", "b", "x", "a", "y"]


def test_only_the_first_depth_candidates_take_part():
    rows = [(f"j{i}", 1.0 - i / 100, "John") for i in range(DEPTH)] + [("t", 0.5, "Tim")]
    c = _candidates("Where does Tim live?", rows)
    assert speakers_first(c).ranked == c.ranked  # Tim's hit is below the depth
    assert [rid for rid, _ in speakers_first(c, depth=DEPTH + 1).ranked][0] == "t"


@pytest.mark.parametrize(
    "part",
    [
        "Did Tim and John both go to the game?",  # two speakers: no one's words come first
        "Where does Anna live?",  # no speaker of the thread
        "Where does timothy live?",  # a longer word holds the name
        "where does tim live?",  # names are matched in their case
    ],
)
def test_a_part_naming_none_or_two_speakers_keeps_its_ranking(part):
    c = _candidates(part, [("j1", 0.9, "John"), ("t1", 0.8, "Tim"), ("j2", 0.7, "John")])
    assert speakers_first(c).ranked == c.ranked


def test_a_tool_is_no_speaker():
    """A part that says "search" asks for no tool's output first."""
    c = _candidates("Can you search my notes for the dentist?", [("a", 0.9, "Ann"), ("t", 0.8, "search")])
    c.info["t"][1]["source_kind"] = "tool"
    assert speakers_first(c).ranked == c.ranked
    c.info["t"][1]["source_kind"] = "assistant"
    assert [rid for rid, _ in speakers_first(c).ranked] == ["t", "a"]


def test_unread_metadata_and_nameless_hits_never_move():
    deferred = _candidates("Where does Tim live?", [("j1", 0.9, ...), ("t1", 0.8, ...)])
    assert speakers_first(deferred).ranked == deferred.ranked
    nameless = _candidates("Where does Tim live?", [("a", 0.9, None), ("b", 0.8, None)])
    assert speakers_first(nameless).ranked == nameless.ranked


def test_named_speaker():
    names = ["Tim", "John", "Ann", "Ann Lee"]
    assert named_speaker("How does Tim get to work?", names) == "Tim"
    assert named_speaker("What is Tim's favorite book?", names) == "Tim"
    assert named_speaker("Where did Ann Lee go?", names) == "Ann Lee"  # the longer name, not two
    assert named_speaker("Where did Ann go?", names) == "Ann"
    assert named_speaker("What did Tim tell John?", names) is None
    assert named_speaker("Where is Annabel?", names) is None
    assert named_speaker("Where is Tim?", []) is None


NAME = st.text(alphabet=st.characters(categories=("Lu", "Ll")), min_size=2, max_size=12)
FILLER = st.text(alphabet=st.characters(categories=("Ll", "Zs", "Po", "Nd")), max_size=40)


@given(NAME, FILLER, FILLER)
def test_a_name_between_non_letters_is_found_and_inside_a_word_is_not(name, before, after):
    part = f"{before} {name}'s {after}?"
    assert named_speaker(part, [name]) == name
    assert named_speaker(f"{before} x{name}y {after}", [name]) in (None, name)  # found only if it stands alone too
    if name not in before and name not in after:
        assert named_speaker(f"{before} x{name}y {after}", [name]) is None


# -- the stage in a search ------------------------------------------------------------------------------------------
def test_a_question_naming_a_speaker_ranks_their_own_words_first(index):
    """Off, John's line about his own Spanish outranks what Tim said of his German."""
    q = ASKED
    off = index.search(q, k=3, thread_id="friends", speakers_first=False)[0].hits
    on = index.search(q, k=3, thread_id="friends")[0].hits
    assert off[0].metadata["ctxret:source_name"] == "John"
    assert on[0].metadata["ctxret:source_name"] == "Tim" and on[0].body.startswith("Duolingo")
    assert {h.id for h in on} <= {h.id for h in index.search(q, k=5, thread_id="friends", speakers_first=False)[0].hits}
    assert [h.score for h in on] == sorted((h.score for h in on), reverse=True)
    own = {h.id: h for h in index.search(q, k=5, thread_id="friends", speakers_first=False)[0].hits}
    assert {h.id for h in on} <= set(own)
    # it keeps at least the relevance the hit it passed had in its place (first) and its own there
    assert on[0].relevance >= max(own[on[0].id].relevance, off[0].relevance) - 1e-9
    assert on[0].scores["cosine"] == pytest.approx(own[on[0].id].scores["cosine"])  # its own cosine


def test_a_thread_without_names_documents_and_a_question_naming_two_keep_their_ranking(index):
    asked = ((ASKED, "nameless"), ("Did Tim and John talk about German?", "friends"), (ASKED, "notes"))
    for q, thread in asked:
        on = index.search(q, k=3, thread_id=thread, cosine_floor=None)[0].hits
        off = index.search(q, k=3, thread_id=thread, speakers_first=False, cosine_floor=None)[0].hits
        assert len(on) == 3 and [h.id for h in on] == [h.id for h in off]
    notes = index.search(ASKED, k=3, thread_id="notes", cosine_floor=None)[0].hits
    assert notes[0].metadata["source_name"] == "John"  # what would move, were it a speaker


def test_the_adapters_and_async_search_rank_the_named_speaker_first(index):
    import asyncio

    from langchain_ctxret import ContextualRetriever
    from llamaindex_ctxret import ContextualRetriever as LIRetriever

    q = ASKED
    docs = ContextualRetriever(index=index, k=3, thread_id="friends").invoke(q)
    assert docs[0].metadata["ctxret:source_name"] == "Tim"
    retriever = ContextualRetriever(index=index, k=3, thread_id="friends", search_kwargs={"speakers_first": False})
    off = retriever.invoke(q)
    assert off[0].metadata["ctxret:source_name"] == "John"
    # a threshold the top hit passed with the stage off still finds it, and Tim's line with it
    floor = off[0].metadata["score"] - 1e-9
    kept = ContextualRetriever(index=index, k=3, thread_id="friends", score_threshold=floor).invoke(q)
    assert kept and kept[0].metadata["ctxret:source_name"] == "Tim" and kept[0].page_content == docs[0].page_content
    nodes = LIRetriever(index, similarity_top_k=3, thread_id="friends").retrieve(q)
    assert nodes[0].node.metadata["ctxret:source_name"] == "Tim"
    groups = asyncio.run(index.asearch(q, k=3, thread_id="friends"))
    assert groups[0].hits[0].metadata["ctxret:source_name"] == "Tim"
