"""LLM-written views (questions, summary): written once, searched with the piece, kept in step with it everywhere."""

from __future__ import annotations

import json
import uuid
from unittest import mock

import numpy as np
import pytest
from ctxret import ConfigMismatchError, ContextualIndex, InputError
from ctxret.ingest.views import VIEWS_KEY, parse_view_lines, stored_views
from ctxret.storage.views import VIEWS_SUFFIX
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from llama_index.core.llms import MockLLM
from sample_threads import FLIGHT_AND_VET as MESSAGES

#: A question nothing in the pieces' words or meaning answers: only the view written for the vet piece does.
ODD = "Which purple zeppelin carries the accordion orchestra?"


class Writer:
    """A deterministic view writer (stands in for an LLM): the vet piece 'answers' ODD; counts its calls."""

    def __init__(self, question: str = ODD):
        self.calls: list[int] = []
        self.question = question

    def __call__(self, passage, bodies):
        self.calls.append(len(bodies))
        return [
            [self.question, "When is the vet appointment?"] if "vet appointment" in b else [f"What about {b[:20]}?"]
            for b in bodies
        ]


def make(local_embedder, writer=None, **kwargs):
    kwargs.setdefault("views", ["questions"])
    kwargs.setdefault("in_memory", True)
    kwargs.setdefault("collection", f"v-{uuid.uuid4().hex[:10]}")
    return ContextualIndex(embedder=local_embedder, view_writer=writer if writer is not None else Writer(), **kwargs)


def view_records(index):
    name = index.store.chroma.collection_name + VIEWS_SUFFIX
    return list(index.store.chroma.iter_records(None, include=("metadatas", "documents"), name=name))


def assert_consistent(index):
    """Every view belongs to a stored piece, and every stored piece's view texts are exactly its view records."""
    pieces = {r["id"]: r["metadata"] for r in index.store.records()}
    views = view_records(index)
    assert all(v["metadata"]["piece_id"] in pieces for v in views)
    expected = sorted((pid, k, t) for pid, m in pieces.items() for k, ts in (stored_views(m) or {}).items() for t in ts)
    assert sorted((v["metadata"]["piece_id"], v["metadata"]["view_kind"], v["document"]) for v in views) == expected
    return pieces, views


def vet_hit(groups):
    return [h for g in groups for h in g if "vet appointment" in h.text]


# -- written once, stored with the piece -----------------------------------------------------------
def test_views_are_written_once_stored_with_the_piece_and_recorded(local_embedder):
    writer = Writer()
    index = make(local_embedder, writer)
    index.add_messages(MESSAGES, "u1")
    assert writer.calls == [2, 2]  # one call per turn, with all of its pieces
    pieces, views = assert_consistent(index)
    assert all(VIEWS_KEY in m for m in pieces.values())
    assert len(views) == 5 and index.stats()["views"] == 5
    assert index.stats()["pieces"] == 4  # views are never counted as pieces
    assert index.config.views == "questions" and index.store.stored_config()["views"] == "questions"
    # the same thread again: nothing is sent to the LLM
    assert index.add_messages(MESSAGES, "u1").turns_changed == 0
    assert writer.calls == [2, 2]


@pytest.mark.parametrize("search", ["scoped", "unscoped", "async"])
def test_a_hit_found_only_through_its_view_is_the_piece(local_embedder, search):
    index = make(local_embedder)
    index.add_messages(MESSAGES, "u1")
    piece_ids = {r["id"] for r in index.store.records()}
    kwargs = {"thread_id": "u1"} if search != "unscoped" else {}
    run = (
        (lambda **o: __import__("asyncio").run(index.asearch(ODD, k=3, **kwargs, **o)))
        if search == "async"
        else (lambda **o: index.search(ODD, k=3, **kwargs, **o))
    )
    # without its views the vet piece is not what this question finds
    plain = run(views=False, lexical=False)
    assert not vet_hit(plain) or vet_hit(plain)[0].scores["cosine"] < 0.5
    groups = run(lexical=False)
    (hit,) = vet_hit(groups)[:1]
    assert groups[0].hits[0].id == hit.id and hit.id in piece_ids  # the piece, never the view
    assert hit.text.endswith("Biscuit's vet appointment is on Thursday at 4 PM at Green Paws.")
    assert hit.scores["view"] == pytest.approx(hit.scores["cosine"]) and hit.scores["cosine"] > 0.95
    assert hit.metadata["view_kind"] == "questions" and hit.metadata["view_text"] == ODD
    assert "views" in groups[0].stages and not groups[0].degraded
    assert all(h.id in piece_ids for g in groups for h in g)


def test_a_view_never_surfaces_outside_the_scope(local_embedder):
    index = make(local_embedder)
    index.add_messages(MESSAGES, "u1")
    index.add_messages([{"role": "user", "content": "The garden needs watering."}], "u2")
    for kwargs in ({"thread_id": "u2"}, {"thread_id": "u2", "where": {"kind": "turn"}}):
        assert not vet_hit(index.search(ODD, **kwargs)), kwargs
    # a caller filter that excludes the vet piece (an assistant step), scoped (memory) and unscoped (Chroma)
    for kwargs in ({"thread_id": "u1"}, {}):
        groups = index.search(ODD, where={"ctxret:source_kind": "user"}, lexical=False, **kwargs)
        assert not vet_hit(groups), kwargs
        assert vet_hit(index.search(ODD, where={"ctxret:source_kind": "assistant"}, lexical=False, **kwargs)), kwargs


def test_views_follow_replace_delete_and_clear(local_embedder):
    writer = Writer()
    index = make(local_embedder, writer)
    index.add_messages(MESSAGES, "u1")
    index.add_messages(MESSAGES, "u2")
    changed = MESSAGES[:3] + [{"role": "assistant", "content": "The vet moved Biscuit to Friday at 10 AM."}]
    result = index.replace_messages(changed, "u1")
    assert result.turns_changed == 1 and writer.calls[-1] == 2
    assert_consistent(index)
    assert not vet_hit(index.search(ODD, thread_id="u1", lexical=False))  # the stale view went with its piece
    assert vet_hit(index.search(ODD, thread_id="u2", lexical=False))
    assert index.delete(thread_id="u2") == 4
    pieces, views = assert_consistent(index)
    assert {v["metadata"]["thread_id"] for v in views} == {"u1"}
    index.clear()
    assert view_records(index) == [] and index.store.count() == 0
    assert index.search(ODD) == [] or all(len(g) == 0 for g in index.search(ODD))


def test_llm_answers_through_the_frameworks(local_embedder):
    # LangChain LLM and chat model: the index prompts them (numbered lines, several per piece)
    answer = "1. When do I fly to Lisbon?\n1. Which flight did I book?\n2. What time does TP 541 leave?"
    for llm in (FakeListLLM(responses=[answer] * 4), FakeListChatModel(responses=[answer] * 4)):
        index = make(local_embedder, llm)
        index.add_messages(MESSAGES[:2], "u1")
        assert llm.i == 1  # one call for the one turn
        index.add_messages(MESSAGES[:2], "u1")
        assert llm.i == 1  # unchanged: not sent again
        pieces, views = assert_consistent(index)
        assert sorted(v["document"] for v in views) == sorted(
            ["When do I fly to Lisbon?", "Which flight did I book?", "What time does TP 541 leave?"]
        )
        (hit,) = index.search("Which flight did I book?", k=1, lexical=False)[0].hits
        assert hit.metadata["view_text"] == "Which flight did I book?" and "view" in hit.scores
    # LlamaIndex MockLLM echoes the prompt: its numbered chunk lines come back as each piece's summary
    llm = MockLLM()
    with mock.patch.object(MockLLM, "complete", autospec=True, side_effect=MockLLM.complete) as complete:
        index = make(local_embedder, llm, views=["summary"])
        index.add_messages(MESSAGES, "u1")
        n = complete.call_count
        assert n == 2
        index.add_messages(MESSAGES, "u1")
        assert complete.call_count == n
    pieces, views = assert_consistent(index)
    assert len(views) == 4 and all(v["metadata"]["view_kind"] == "summary" for v in views)


def test_rebuild_reembeds_stored_views_without_the_llm(tmp_path, local_embedder):
    writer = Writer()
    index = ContextualIndex(tmp_path / "s", embedder=local_embedder, views=["questions"], view_writer=writer)
    index.add_messages(MESSAGES, "u1")
    index.close()

    def down(passage, bodies):
        raise AssertionError("a rebuild must not call the LLM")

    rebuilt = ContextualIndex.rebuild(tmp_path / "s", embedder=local_embedder, weight=0.7, view_writer=down)
    assert rebuilt.config.weight == 0.7 and rebuilt.config.views == "questions"
    assert_consistent(rebuilt)
    assert vet_hit(rebuilt.search(ODD, thread_id="u1", lexical=False))
    assert vet_hit(rebuilt.search(ODD, lexical=False))
    names = rebuilt.store.chroma.names()
    assert not [n for n in names if "-rebuild" in n or "-previous" in n], names


class Crash(BaseException):
    pass


@pytest.mark.parametrize(
    "point",
    [
        "rebuild:before-swap",
        "swap:after-views",
        "swap:after-rename-old",
        "swap:after-rename-new",
        "swap:before-lexical",
    ],
)
def test_a_crash_during_a_rebuild_keeps_pieces_and_views_together(tmp_path, local_embedder, monkeypatch, point):
    index = ContextualIndex(tmp_path / "s", embedder=local_embedder, views=["questions"], view_writer=Writer())
    index.add_messages(MESSAGES, "u1")
    index.close()

    def fault(name):
        if name == point:
            raise Crash(name)

    monkeypatch.setattr("ctxret.storage.rebuild.fault_point", fault)  # the rebuild and its swap
    with pytest.raises(Crash):
        ContextualIndex.rebuild(tmp_path / "s", embedder=local_embedder, weight=0.7, view_writer=Writer())
    monkeypatch.undo()
    # reopening finishes or undoes the swap: either the old pieces with the old views or the new with the new
    try:
        again = ContextualIndex(tmp_path / "s", embedder=local_embedder, view_writer=Writer())
    except ConfigMismatchError:
        pytest.fail("reopening after a crash must not need any settings")
    assert again.config.weight in (0.7, index.config.weight)
    assert_consistent(again)
    assert len(view_records(again)) == 5
    assert vet_hit(again.search(ODD, thread_id="u1", lexical=False))
    names = again.store.chroma.names()
    assert not [n for n in names if "-rebuild" in n or "-previous" in n], names
    again.close()


# -- config and errors ---------------------------------------------------------------------------
def test_views_are_part_of_the_index_config(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "s", embedder=local_embedder, views="questions", view_writer=Writer())
    index.close()
    with pytest.raises(ConfigMismatchError, match="views"):
        ContextualIndex(tmp_path / "s", embedder=local_embedder, views=["summary"], view_writer=Writer())
    opened = ContextualIndex(tmp_path / "s", embedder=local_embedder)  # the recorded views; searching needs no LLM
    assert opened.config.view_kinds == ("questions",)
    opened.search("anything")
    with pytest.raises(InputError, match="no writer"):
        opened.add_messages(MESSAGES, "u1")
    assert opened.store.count() == 0
    opened.close()
    plain = ContextualIndex(tmp_path / "p", embedder=local_embedder)
    assert plain.config.views == "" and "views" not in plain.stats()
    plain.close()


def test_writer_errors_write_nothing(local_embedder):
    index = make(local_embedder, lambda passage, bodies: [["only one"]])
    with pytest.raises(InputError, match="one list of texts"):
        index.add_messages(MESSAGES, "u1")
    assert index.store.count() == 0 and view_records(index) == []
    with pytest.raises(InputError, match="one writer per kind"):
        make(local_embedder, Writer(), views=["questions", "summary"])
    with pytest.raises(InputError, match="unknown view kind"):
        make(local_embedder, Writer(), views=["keywords"])
    index = make(local_embedder, lambda passage, bodies: [[1] for _ in bodies])
    with pytest.raises(InputError, match="not str"):
        index.add_messages(MESSAGES, "u1")
    # an empty answer is a piece without views, not an error
    index = make(local_embedder, lambda passage, bodies: [[] for _ in bodies])
    index.add_messages(MESSAGES, "u1")
    assert view_records(index) == []
    assert all(json.loads(r["metadata"][VIEWS_KEY]) == {"questions": []} for r in index.store.records())


def test_two_kinds_from_a_dict_of_writers(local_embedder):
    summary = lambda passage, bodies: [f"Summary: {b[:30]}" for b in bodies]  # noqa: E731 (a str per piece is one view)
    index = make(local_embedder, {"questions": Writer(), "summary": summary}, views=["summary", "questions"])
    assert index.config.views == "questions,summary"
    index.add_messages(MESSAGES, "u1")
    pieces, views = assert_consistent(index)
    assert {v["metadata"]["view_kind"] for v in views} == {"questions", "summary"}
    assert vet_hit(index.search(ODD, thread_id="u1", lexical=False))


def test_parse_view_lines():
    text = "1. First?\nnoise\n2) Second.\n1. Another?\n3 - third\nchunk 2: more\n9. out of range"
    assert parse_view_lines(text, 3, many=True) == [["First?", "Another?"], ["Second.", "more"], ["third"]]
    assert parse_view_lines(text, 3, many=False) == [["First?"], ["Second."], ["third"]]
    assert np.isfinite(len(parse_view_lines("", 2, many=True)))


# -- the harness -------------------------------------------------------------------------------------
def test_harness_views_and_hyde_are_opt_in_and_use_the_runtime_merge(tmp_path, local_embedder):
    from ctxret.evaluation import views as harness
    from ctxret.evaluation.datasets import load_threads
    from ctxret.evaluation.index import ConversationIndex
    from ctxret.evaluation.threads import run_threads
    from test_eval_threads import write_synthetic

    convs = load_threads(write_synthetic(tmp_path))
    res = run_threads(
        convs, local_embedder, representations=["late_only", "views_questions", "hybrid_views_both", "hyde"]
    )
    assert {r["representation"] for r in res.rows} == {"late_only", "views_questions", "hybrid_views_both", "hyde"}
    default = run_threads(convs, local_embedder, representations=None, query_sets=["facts"], limit_queries=1)
    assert not set(harness.VIEW_REPRESENTATIONS) & {r["representation"] for r in default.rows}
    ix = ConversationIndex(convs[0], local_embedder)
    cost = harness.view_cost(ix)
    assert cost["view_vectors"] >= cost["pieces"] and cost["per_piece"] >= 1.0
    # a real LLM can be given; the fake is deterministic
    assert harness.FakeLLM.hyde("When is the vet appointment?") == "Is the vet appointment."
    harness.use_llm(FakeListLLM(responses=["1. When is it?"]))
    try:
        assert harness._SETUP.name == "FakeListLLM"
    finally:
        harness.use_llm(None)
