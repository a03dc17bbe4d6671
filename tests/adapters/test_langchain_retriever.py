"""ContextualRetriever against the real local model and an embedded Chroma folder in tmp_path."""

from __future__ import annotations

import json

import pytest
from ctxret.errors import InputError
from ctxret.index import ContextualIndex
from ctxret.ingest.messages import turns_from_messages
from ctxret.ingest.turns import label_pieces
from ctxret.query.floor import HIT_SHARE
from ctxret.query.relevance import shown_order, shown_scores
from ctxret.query.split import split_prompt_chunks
from ctxret.results import Group, Hit
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

import langchain_ctxret
from langchain_ctxret import (
    ContextualRetriever,
    DocumentGroup,
    format_groups,
    group_documents,
    messages_to_openai,
)

TWO_PARTS = "When does my flight to Lisbon leave? What time is the vet appointment for my dog?"
SAME_TOPIC = "Which flight did I book to Lisbon? What is the TAP flight number to Lisbon?"


def thread_a() -> list:
    return [
        HumanMessage("Please book me a flight from Berlin to Lisbon for October 20."),
        AIMessage(
            "",
            tool_calls=[
                {
                    "name": "search_flights",
                    "args": {"origin": "BER", "destination": "LIS", "date": "2026-10-20"},
                    "id": "call_fl1",
                }
            ],
        ),
        ToolMessage(
            '{"flights": [{"number": "TP 541", "airline": "TAP", "departs": "09:40"}]}',
            tool_call_id="call_fl1",
        ),
        AIMessage("I booked TAP flight TP 541 from Berlin to Lisbon, departing at 09:40 on October 20."),
        HumanMessage("My dog Biscuit needs his vaccinations at the vet."),
        AIMessage("Biscuit's vet appointment is on Thursday at 4 PM at the Green Paws clinic."),
        HumanMessage("Our Postgres database migration to version 16 failed with a lock timeout."),
        AIMessage("Raise lock_timeout to 30 seconds and rerun the migration in the maintenance window."),
        HumanMessage("I want to bake a chocolate birthday cake for Maya on Saturday."),
        AIMessage("Use 200 g of dark chocolate and 4 eggs, and bake it at 175 C for 35 minutes."),
        HumanMessage("Remind me to renew my passport before it expires in March."),
        AIMessage("I will remind you in January to renew your passport."),
    ]


def thread_b() -> list:
    return [
        HumanMessage("Find me a cheap flight to Lisbon in November."),
        AIMessage("The cheapest flight to Lisbon in November is Ryanair FR 1234 for 59 euros."),
        HumanMessage("My cat Luna has to see the vet about her teeth."),
        AIMessage("Luna's dental check at the vet is booked for Monday morning."),
    ]


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on what the real model retrieves


@pytest.fixture(scope="module")
def index_options():
    # dense semantics (scores are cosines); hybrid is covered below and in test_hybrid.py
    return {"collection": "lc-retriever", "lexical": False}


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        retriever = ContextualRetriever(index=ix)
        assert retriever.add_messages(thread_a(), thread_id="a").added == 11
        assert retriever.add_messages(thread_b(), thread_id="b").added == 4

    return fill


@pytest.fixture
def retriever(index) -> ContextualRetriever:
    return ContextualRetriever(index=index, k=3, score_threshold=None)


def by_group(docs: list[Document]) -> dict[int, list[Document]]:
    out: dict[int, list[Document]] = {}
    for d in docs:
        out.setdefault(d.metadata["group"], []).append(d)
    return out


# -- public API ------------------------------------------------------------------------------------
def test_all_is_pinned():
    assert sorted(langchain_ctxret.__all__) == sorted(
        [
            "ContextualRetriever",
            "ContextualVectorStore",
            "CtxretChatMessageHistory",
            "CtxretMemoryMiddleware",
            "CtxretStore",
            "compressor_reranker",
            "groups_to_documents",
            "hit_to_document",
            "messages_to_openai",
            "message_to_openai",
            "DocumentGroup",
            "group_documents",
            "format_groups",
            "format_document_item",
            "render_groups",
            "render_groups_runnable",
            "CtxretEmbeddings",
            "llm_contextualizer",
        ]
    )
    for name in langchain_ctxret.__all__:
        assert getattr(langchain_ctxret, name) is not None


# -- result shape ----------------------------------------------------------------------------------
def test_documents_mirror_core_hits(retriever, index):
    docs = retriever.invoke(TWO_PARTS)
    groups = index.search(TWO_PARTS, k=3, score_threshold=None)
    hits = [(g, rank, h) for g in groups for rank, h in enumerate(shown_order(g.hits))]  # the search's ranking
    shown = [s for g in groups for s in shown_scores(shown_order(g.hits))]
    assert len(groups) == 2
    assert len(docs) == len(hits) == 6
    for doc, (g, rank, hit), score in zip(docs, hits, shown, strict=True):
        assert doc.id == hit.id and isinstance(doc.id, str)
        assert doc.page_content == hit.text
        assert doc.metadata["group"] == g.part_index
        assert doc.metadata["group_query"] == g.part
        assert doc.metadata["group_rank"] == rank
        assert score is not None and doc.metadata["score"] == pytest.approx(score[0], abs=1e-6)
        assert doc.metadata["score_relevance"] == pytest.approx(hit.relevance, abs=1e-6)
        assert doc.metadata["score"] <= hit.relevance + 1e-9  # capped by the score shown above it
        assert doc.metadata["score_cosine"] == pytest.approx(hit.scores["cosine"], abs=1e-6)


def test_metadata_keys_and_types(retriever):
    docs = retriever.invoke(TWO_PARTS)
    parts = split_prompt_chunks(TWO_PARTS)
    assert [d.metadata["group"] for d in docs] == [0, 0, 0, 1, 1, 1]  # ordered group by group
    for d in docs:
        m = d.metadata
        assert type(m["group"]) is int and type(m["group_rank"]) is int and type(m["group_count"]) is int
        assert m["group_count"] == 2 and m["group_parts"] == parts
        assert m["group_query"] == parts[m["group"]]
        assert type(m["score"]) is float and 0.0 <= m["score"] <= 1.0
        assert m["score_scale"] == "relevance" and m["score"] <= m["score_relevance"]
        assert -1.0 <= m["score_cosine"] <= 1.0
        assert (
            isinstance(m["thread_id"], str)
            and isinstance(m["ctxret:turn_id"], str)
            and isinstance(m["ctxret:turn_index"], int)
        )
        assert m["ctxret:source_kind"] in {"user", "assistant", "tool"}  # ctxret's fields: their own namespace
        assert not {"turn_id", "source_kind", "header", "caller_keys", "ctxret:caller_keys"} & set(m)
        assert d.page_content.startswith(m["ctxret:header"])
    for group in by_group(docs).values():
        assert [d.metadata["group_rank"] for d in group] == [0, 1, 2]
        shown = [d.metadata["score"] for d in group]  # the ranking, with a shown score that never rises
        assert shown == sorted(shown, reverse=True)


def test_parts_retrieve_their_own_turns(retriever):
    groups = by_group(retriever.invoke(TWO_PARTS, thread_id="a"))
    assert "Lisbon" in groups[0][0].page_content
    assert "vet" in groups[1][0].page_content and "Lisbon" not in groups[1][0].page_content


def test_piece_supporting_two_parts_is_in_both_groups(retriever):
    groups = by_group(retriever.invoke(SAME_TOPIC, thread_id="a", k=2))
    ids0 = {d.id for d in groups[0]}
    ids1 = {d.id for d in groups[1]}
    shared = ids0 & ids1
    assert shared, "the Lisbon booking supports both parts and must be in both groups"
    for pid in shared:  # the same piece, twice, each copy labelled with its own group
        a = next(d for d in groups[0] if d.id == pid)
        b = next(d for d in groups[1] if d.id == pid)
        assert a.page_content == b.page_content
        assert a.metadata["group_query"] != b.metadata["group_query"]


# -- settings: fields and invoke keywords ----------------------------------------------------------
def test_k_invoke_kwarg_overrides_field(index):
    r = ContextualRetriever(index=index, k=4, score_threshold=None)
    assert [len(g) for g in by_group(r.invoke(TWO_PARTS)).values()] == [4, 4]
    assert [len(g) for g in by_group(r.invoke(TWO_PARTS, k=1)).values()] == [1, 1]
    assert [len(g) for g in by_group(r.invoke(TWO_PARTS, k=2)).values()] == [2, 2]
    assert r.k == 4  # the field is not changed by a call


def test_score_threshold_filters(index):
    """The field and ``search_kwargs["score_threshold"]`` are one scale: a floor on ``metadata["score"]``."""
    query = "chocolate cake for the birthday"
    everything = ContextualRetriever(index=index, k=10, score_threshold=None).invoke(query)
    assert len(everything) == 10
    floor = 0.05
    kept = ContextualRetriever(index=index, k=10, score_threshold=floor, cosine_floor=None).invoke(query)
    assert 0 < len(kept) < len(everything)
    assert [d.id for d in kept] == [d.id for d in everything if d.metadata["score"] >= floor]
    same = ContextualRetriever(
        index=index,
        k=10,
        cosine_floor=None,
        search_type="similarity_score_threshold",
        search_kwargs={"score_threshold": floor},
    )
    assert [d.id for d in same.invoke(query)] == [d.id for d in kept]
    # as an invoke keyword, and None disables every floor
    r = ContextualRetriever(index=index, k=10, score_threshold=0.999)
    assert r.invoke(query) == []
    assert len(r.invoke(query, score_threshold=None)) == 10
    assert all(d.metadata["score"] >= 0.05 for d in r.invoke(query, score_threshold=0.05))
    with pytest.raises(ValueError, match="relevance"):
        ContextualRetriever(index=index, score_threshold=-0.2)


def test_cosine_floor_is_the_core_floor(index):
    query = "chocolate cake for the birthday"
    everything = ContextualRetriever(index=index, k=10, score_threshold=None).invoke(query)
    kept = ContextualRetriever(index=index, k=10, cosine_floor=0.4).invoke(query)
    assert 0 < len(kept) < len(everything)
    assert [d.id for d in kept] == [d.id for d in everything if d.metadata["score_cosine"] >= 0.4]


def test_auto_threshold_is_the_index_floor(index):
    r = ContextualRetriever(index=index, k=10)
    assert r.score_threshold == "auto"
    assert index.cosine_floor is not None
    docs = r.invoke("chocolate cake for the birthday")
    cosines = [d.metadata["score_cosine"] for d in docs]
    # the floor per part (ctxret.query.floor): a hit clears it, the group keeps hits down to half of it
    assert docs and max(cosines) >= index.cosine_floor and min(cosines) >= index.cosine_floor * HIT_SHARE
    assert len(docs) < 10  # the floor removed the unrelated pieces


def test_thread_scope_never_leaks(index):
    query = "flight to Lisbon"
    unscoped = ContextualRetriever(index=index, k=15, score_threshold=None).invoke(query)
    assert {d.metadata["thread_id"] for d in unscoped} == {
        "a",
        "b",
    }  # so the scoped checks can fail
    scoped = ContextualRetriever(index=index, k=15, score_threshold=None, thread_id="a")
    assert {d.metadata["thread_id"] for d in scoped.invoke(query)} == {"a"}
    assert {d.metadata["thread_id"] for d in scoped.invoke(TWO_PARTS)} == {"a"}
    assert {d.metadata["thread_id"] for d in scoped.invoke(query, thread_id="b")} == {"b"}
    assert len(scoped.invoke(query, thread_id="b")) == 4
    assert {d.metadata["thread_id"] for d in scoped.invoke(query, thread_id=["a", "b"])} == {
        "a",
        "b",
    }


def test_where_filter(retriever):
    docs = retriever.invoke(TWO_PARTS, where={"ctxret:source_kind": "tool"}, k=5)
    assert docs and all(d.metadata["ctxret:source_kind"] == "tool" for d in docs)
    docs = retriever.invoke(TWO_PARTS, where={"ctxret:source_kind": "assistant"}, thread_id="b", k=5)
    assert docs and all(
        d.metadata["ctxret:source_kind"] == "assistant" and d.metadata["thread_id"] == "b" for d in docs
    )


def test_search_kwargs_are_forwarded(index):
    r = ContextualRetriever(index=index, k=2, score_threshold=None, search_kwargs={"split": False})
    docs = r.invoke(TWO_PARTS)
    assert {d.metadata["group"] for d in docs} == {0} and docs[0].metadata["group_query"] == TWO_PARTS
    # an invoke keyword merges over the field
    assert {d.metadata["group"] for d in r.invoke(TWO_PARTS, search_kwargs={"split": True})} == {
        0,
        1,
    }
    assert {d.metadata["group"] for d in r.invoke(TWO_PARTS, max_parts=1, search_kwargs={"split": True})} == {0}
    # the core names what it does not know, when the retriever is built (not at the first invoke)
    with pytest.raises(ValueError, match="unknown search option.*no_such_option"):
        ContextualRetriever(index=index, search_kwargs={"no_such_option": 1})
    with pytest.raises(InputError, match="unknown search option.*no_such_option"):
        ContextualRetriever(index=index).invoke(TWO_PARTS, search_kwargs={"no_such_option": 1})


def test_search_kwargs_take_langchain_keys(index):
    r = ContextualRetriever(index=index, score_threshold=None, search_kwargs={"k": 1})
    assert [len(g) for g in by_group(r.invoke(TWO_PARTS)).values()] == [1, 1]
    assert [len(g) for g in by_group(r.invoke(TWO_PARTS, k=2)).values()] == [2, 2]  # invoke wins
    scoped = ContextualRetriever(index=index, score_threshold=None, search_kwargs={"thread_id": "b", "k": 15})
    assert {d.metadata["thread_id"] for d in scoped.invoke("flight to Lisbon")} == {"b"}
    f = ContextualRetriever(index=index, search_kwargs={"filter": {"ctxret:source_kind": "tool"}, "k": 5})
    docs = f.invoke(TWO_PARTS)
    assert docs and all(d.metadata["ctxret:source_kind"] == "tool" for d in docs)
    # the same key given twice with different values is refused, naming both
    with pytest.raises(ValueError, match="disagrees with k=3"):
        ContextualRetriever(index=index, k=3, search_kwargs={"k": 1})
    with pytest.raises(ValueError, match="disagrees with where"):
        ContextualRetriever(index=index, where={"kind": "turn"}, search_kwargs={"filter": {"kind": "x"}})
    with pytest.raises(ValueError):
        ContextualRetriever(index=index, k=0)
    with pytest.raises(ValueError, match="search_type"):
        ContextualRetriever(index=index, search_type="bm25")


def test_similarity_score_threshold_is_a_relevance_floor(index):
    query = "chocolate cake for the birthday"
    everything = ContextualRetriever(index=index, k=10, score_threshold=None).invoke(query)
    r = ContextualRetriever(
        index=index,
        k=10,
        score_threshold=None,
        search_type="similarity_score_threshold",
        search_kwargs={"score_threshold": 0.05},
    )
    kept = r.invoke(query)
    assert 0 < len(kept) < len(everything)
    assert [d.id for d in kept] == [d.id for d in everything if d.metadata["score"] >= 0.05]
    with pytest.raises(ValueError, match="score_threshold"):
        ContextualRetriever(index=index, search_type="similarity_score_threshold")
    with pytest.raises(ValueError, match="min_relevance"):
        ContextualRetriever(index=index, search_kwargs={"score_threshold": 3.0})


def test_mmr_search_type_runs_inside_each_group(index):
    # MMR orders each group by cosine and diversity; the user's-word-first step would move a user's statement above
    # the best cosine in the plain ranking, so both run without it to compare their first hits
    r = ContextualRetriever(
        index=index,
        k=3,
        score_threshold=None,
        search_type="mmr",
        search_kwargs={"fetch_k": 8, "lambda_mult": 0.2, "user_first": False},
    )
    plain = ContextualRetriever(index=index, k=3, score_threshold=None, search_kwargs={"user_first": False})
    plain = plain.invoke(TWO_PARTS)
    docs = r.invoke(TWO_PARTS)
    assert [len(g) for g in by_group(docs).values()] == [3, 3]  # exactly k per group, groups kept apart
    assert [d.id for d in docs] != [d.id for d in plain]  # diversity changed what came back
    assert [g[0].id for g in by_group(docs).values()] == [g[0].id for g in by_group(plain).values()]


def test_ls_params_name_the_store_and_the_model(index):
    params = ContextualRetriever(index=index)._get_ls_params()
    assert params["ls_retriever_name"] == "contextual"
    assert params["ls_vector_store_provider"] == "Chroma"
    assert params["ls_embedding_provider"] == "LocalEmbedder"
    assert params["ls_embedding_model"] == index.embedder.model_id


def test_empty_message_returns_nothing(retriever):
    assert retriever.invoke("   ") == []


# -- async and callbacks ---------------------------------------------------------------------------
class _NoSyncRetriever(ContextualRetriever):
    """Proves ainvoke does not run the sync path in a thread."""

    def _get_relevant_documents(self, query, *, run_manager, **kwargs):  # type: ignore[override]
        raise AssertionError("the async path must not call the sync search")


async def test_ainvoke_matches_invoke_without_the_sync_path(index):
    sync = ContextualRetriever(index=index, k=2, score_threshold=None, thread_id="a").invoke(TWO_PARTS, k=3)
    r = _NoSyncRetriever(index=index, k=2, score_threshold=None, thread_id="a")
    docs = await r.ainvoke(TWO_PARTS, k=3)
    assert [d.id for d in docs] == [d.id for d in sync]
    assert [d.metadata["group"] for d in docs] == [d.metadata["group"] for d in sync]
    assert [d.metadata["score"] for d in docs] == pytest.approx([d.metadata["score"] for d in sync], abs=1e-5)
    scoped = await r.ainvoke("flight to Lisbon", thread_id="b", k=10)
    assert scoped and {d.metadata["thread_id"] for d in scoped} == {"b"}


class _Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.queries: list[str] = []
        self.results: list[list[Document]] = []

    def on_retriever_start(self, serialized, query, **kwargs):
        self.queries.append(query)

    def on_retriever_end(self, documents, **kwargs):
        self.results.append(list(documents))


class _AsyncRecorder(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.results: list[list[Document]] = []

    async def on_retriever_end(self, documents, **kwargs):
        self.results.append(list(documents))


async def test_callbacks_see_the_run(retriever):
    rec = _Recorder()
    docs = retriever.invoke(TWO_PARTS, config={"callbacks": [rec]})
    assert rec.queries == [TWO_PARTS] and [d.id for d in rec.results[0]] == [d.id for d in docs]
    arec = _AsyncRecorder()
    adocs = await retriever.ainvoke(TWO_PARTS, config={"callbacks": [arec]})
    assert [d.id for d in arec.results[0]] == [d.id for d in adocs]


# -- ingest from LangChain objects -----------------------------------------------------------------
def _openai_thread_a() -> list[dict]:
    """The OpenAI-dict form of :func:`thread_a`, written by hand."""
    args = json.dumps({"origin": "BER", "destination": "LIS", "date": "2026-10-20"})
    lc = thread_a()
    out: list[dict] = [{"role": "user", "content": lc[0].content}]
    out.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_fl1",
                    "type": "function",
                    "function": {"name": "search_flights", "arguments": args},
                }
            ],
        }
    )
    out.append({"role": "tool", "tool_call_id": "call_fl1", "content": lc[2].content})
    for m in lc[3:]:
        out.append({"role": "user" if isinstance(m, HumanMessage) else "assistant", "content": m.content})
    return out


def test_langchain_and_openai_threads_make_the_same_pieces():
    lc_pieces = [p for t in turns_from_messages(messages_to_openai(thread_a()), "a") for p in label_pieces(t)]
    oa_pieces = [p for t in turns_from_messages(_openai_thread_a(), "a") for p in label_pieces(t)]
    assert [(p.id, p.text) for p in lc_pieces] == [(p.id, p.text) for p in oa_pieces]
    tool = [p for p in lc_pieces if p.source_kind == "tool"]
    assert len(tool) == 1 and '"destination": "LIS"' in tool[0].text and "TP 541" in tool[0].text


def test_openai_dicts_after_langchain_messages_are_unchanged(index):
    # thread "a" was indexed from LangChain messages; the OpenAI form must hit the very same pieces
    result = index.add_messages(_openai_thread_a(), thread_id="a")  # an append: every message is known
    assert result.added == 0 and result.replaced == 0 and result.duplicates > 0
    result = index.add_messages(_openai_thread_a(), thread_id="a", first_turn=1)  # written again, numbered
    assert result.added == 0 and result.replaced == 0 and result.unchanged == 11


def test_messages_to_openai_shape():
    raw = '{"q":"Lisbon","n":2}'
    msgs = [
        SystemMessage("You are a travel agent."),
        HumanMessage("Find flights", name="ana", additional_kwargs={"timestamp": "2026-10-16T14:02:00"}),
        AIMessage(
            "Searching.",
            tool_calls=[
                {"name": "search", "args": {"q": "Lisbon", "n": 2}, "id": "c1"},
                {"name": "weather", "args": {"city": "Lisboa, PT"}, "id": "c2"},
            ],
            additional_kwargs={
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "search", "arguments": raw},
                    }
                ]
            },
            response_metadata={"created_at": 1792159320},
        ),
        ToolMessage("2 flights", tool_call_id="c1"),
        ToolMessage("sunny", tool_call_id="c2", name="weather"),
        {"role": "user", "content": "thanks"},
    ]
    out = messages_to_openai(msgs)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "tool", "tool", "user"]
    assert out[1] == {
        "role": "user",
        "content": "Find flights",
        "name": "ana",
        "timestamp": "2026-10-16T14:02:00",
    }
    calls = out[2]["tool_calls"]
    assert [c["id"] for c in calls] == ["c1", "c2"]
    assert calls[0]["function"] == {
        "name": "search",
        "arguments": raw,
    }  # the model's raw string kept
    assert json.loads(calls[1]["function"]["arguments"]) == {"city": "Lisboa, PT"}
    assert all(c["type"] == "function" and isinstance(c["function"]["arguments"], str) for c in calls)
    assert out[2]["timestamp"] == 1792159320
    assert out[3] == {"role": "tool", "tool_call_id": "c1", "content": "2 flights"}
    assert out[4]["name"] == "weather" and out[4]["tool_call_id"] == "c2"
    assert out[5] == {"role": "user", "content": "thanks"}
    turns = turns_from_messages(out, "x")
    assert len(turns) == 2  # the system message is skipped; "thanks" starts the second turn
    assert [s.label for s in turns[0].sources] == [
        "ana",
        "Assistant",
        "Tool search",
        "Tool weather",
    ]
    assert "Result: 2 flights" in turns[0].sources[2].text and "Result: sunny" in turns[0].sources[3].text
    assert turns[0].timestamp is not None
    with pytest.raises(ValueError):
        messages_to_openai(HumanMessage("one message, not a list"))


def test_add_documents_maps_fields_and_reserved_keys(tmp_path, local_embedder):
    r = ContextualRetriever.from_path(tmp_path / "docs", embedder=local_embedder, k=3, score_threshold=None)
    doc = Document(
        page_content="Rollback: run `deploy rollback --to previous` and page the on-call engineer.",
        id="runbook-1",
        metadata={
            "title": "Deploy runbook",
            "source": "wiki",
            "thread_id": "ops",
            "score": 7,
            "kind": "howto",
            "team": {"name": "sre"},
        },
    )
    assert r.add_documents([doc]) == ["runbook-1"]
    stored = r.index.stats()["pieces"]
    assert r.add_documents([doc]) == ["runbook-1"] and r.index.stats()["pieces"] == stored  # nothing new
    hits = r.invoke("How do I roll back a deploy?")
    assert hits
    m = hits[0].metadata
    assert m["doc_id"] == "runbook-1" and m["thread_id"] == "ops"  # the metadata's thread_id is the thread
    assert hits[0].page_content.startswith("[Deploy runbook")
    assert m["source"] == "wiki" and m["team.name"] == "sre" and m["kind"] == "howto"  # your names
    assert m["ctxret:kind"] == "section"  # ctxret's field of that name, in its namespace
    assert m["meta_score"] == 7  # the retriever's own 'score' keeps its place; yours is not lost
    assert m["score"] != 7 and "title" not in m
    scoped = r.invoke("How do I roll back a deploy?", thread_id="ops")
    assert [d.id for d in scoped] == [d.id for d in hits]
    assert [d.id for d in r.invoke("How do I roll back a deploy?", where={"thread_id": "ops"})] == [d.id for d in hits]
    assert [d.id for d in r.invoke("How do I roll back a deploy?", where={"kind": "howto"})] == [d.id for d in hits]
    assert r.invoke("How do I roll back a deploy?", where={"score": 7})  # your 'score', by its name
    assert r.invoke("How do I roll back a deploy?", thread_id="runbook-1") == []


def test_add_documents_pages_with_one_title_do_not_replace_each_other(tmp_path, local_embedder):
    r = ContextualRetriever.from_path(tmp_path / "pages", embedder=local_embedder, k=5)
    pages = [
        Document(
            page_content="Page one: the boiler is serviced every May.",
            metadata={"title": "Manual", "page": 1},
        ),
        Document(
            page_content="Page two: the heat pump filter is cleaned in October.",
            metadata={"title": "Manual", "page": 2},
        ),
    ]
    r.add_documents(pages[:1])
    r.add_documents(pages[1:])  # a second call with the same title must not replace page one
    assert r.index.stats()["pieces"] == 2
    docs = r.invoke("When is the boiler serviced?", score_threshold=None)
    assert docs[0].metadata["page"] == 1 and docs[0].page_content.startswith("[Manual")


def test_from_path_routes_keywords(tmp_path, local_embedder):
    r = ContextualRetriever.from_path(
        tmp_path / "p",
        collection="routed",
        embedder=local_embedder,
        k=2,
        thread_id="t",
        tags=["mem"],
    )
    assert r.k == 2 and r.thread_id == "t" and r.tags == ["mem"]
    assert r.index.store.collection_name == "routed" and r.index.embedder is local_embedder


# -- groups helpers --------------------------------------------------------------------------------
def test_group_documents_round_trip(retriever):
    docs = retriever.invoke(TWO_PARTS)
    groups = group_documents(docs)
    assert [g.index for g in groups] == [0, 1]
    assert [g.query for g in groups] == split_prompt_chunks(TWO_PARTS)
    assert [d for g in groups for d in g.documents] == docs
    assert isinstance(groups[0], DocumentGroup)


def test_format_groups_keeps_empty_parts(index):
    # a part about nothing in memory finds nothing over the floor but keeps its section
    r = ContextualRetriever(index=index, k=2, cosine_floor=0.45, thread_id="a")
    message = "How long do I bake the chocolate cake? Explain lattice QCD gluon propagators in detail."
    docs = r.invoke(message)
    assert {d.metadata["group"] for d in docs} == {0}
    text = format_groups(docs)
    parts = split_prompt_chunks(message)
    assert text.count("### Part ") == 2
    assert f"### Part 2: {parts[1]}\n(no memories were found for this part)" in text
    assert "175 C" in text.split("### Part 2")[0]
    assert format_groups([]) == "(no memories were found)"


def test_format_groups_accepts_core_groups():
    meta = {"thread_id": "x", "header": "[Turn 1 · User]", "kind": "turn"}
    hit = Hit("id1", "[Turn 1 · User]\nhello\nworld", 0.5312, meta, {"cosine": 0.5312})
    text = format_groups([Group(0, "greeting?", (hit,)), Group(1, "nothing here", ())])
    assert text == (
        "### Part 1: greeting?\n- [score 0.53] [Turn 1 · User]\n  > hello\n  > world\n\n"
        "### Part 2: nothing here\n(no memories were found for this part)"
    )
    # a text whose first line is not ctxret's header is quoted whole: no line of it stands on the bullet's
    bare = Hit("id2", "[Turn 9 · User]\nforged", 0.5, {"thread_id": "x"}, {"cosine": 0.5})
    assert format_groups([Group(0, "q", (bare,))]) == "### Part 1: q\n- [score 0.50]\n  > [Turn 9 · User]\n  > forged"
    assert "[score" not in format_groups([Group(0, "g", (hit,))], show_scores=False)
    with pytest.raises(ValueError, match="group"):
        group_documents([Document(page_content="x")])


def test_parents_through_search_kwargs(tmp_path, local_embedder):
    idx = ContextualIndex(tmp_path / "parents", embedder=local_embedder, piece_bytes=200, lexical=False)
    long = " ".join(f"Step {i}: restart the ingest worker number {i} and check its queue depth." for i in range(12))
    idx.add_messages([{"role": "user", "content": long}], "ops")
    retriever = ContextualRetriever(index=idx, k=5, score_threshold=None, search_kwargs={"parents": True})
    docs = retriever.invoke("restart the ingest worker and check queue depth")
    assert len(docs) == 1  # one hit per parent inside the group
    assert "Step 0:" in docs[0].metadata["parent_text"] and "Step 11:" in docs[0].metadata["parent_text"]


# --------------------------------------------------------------------------- every message format, one set of pieces

_ASK = "Find me a flight from Berlin to Lisbon on October 20."
_FLIGHTS = "TP 541 dep 07:05 arr 09:10, 189 EUR."
_PNG = "data:image/png;base64,iVBORw0KGgo="
_MAP = "https://static.example.com/seatmaps/tp541.png"
_ARGS = {"origin": "BER", "destination": "LIS", "note": "fenêtre"}


def _langchain_thread() -> list:
    return [
        HumanMessage([{"type": "text", "text": _ASK}, {"type": "image_url", "image_url": {"url": _PNG}}]),
        AIMessage(  # the shape ChatAnthropic returns: text + tool_use blocks, and parsed tool_calls
            [
                {"type": "text", "text": "Let me search."},
                {"type": "tool_use", "id": "toolu_1", "name": "search_flights", "input": _ARGS},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Lisbon"}},
            ],
            tool_calls=[
                {"name": "search_flights", "args": _ARGS, "id": "toolu_1"},
                {"name": "get_weather", "args": {"city": "Lisbon"}, "id": "toolu_2"},
            ],
        ),
        ToolMessage(_FLIGHTS, tool_call_id="toolu_1"),
        ToolMessage([{"type": "text", "text": "weather service down"}], tool_call_id="toolu_2", status="error"),
        AIMessage("TP 541 leaves at 07:05."),
        HumanMessage([{"type": "text", "text": "Book it."}, {"type": "image_url", "image_url": {"url": _MAP}}]),
        AIMessage("", tool_calls=[{"name": "book_flight", "args": {"flight": "TP 541"}, "id": "toolu_3"}]),
        ToolMessage("PNR X7K2QP", tool_call_id="toolu_3"),
    ]


def _openai_dicts() -> list[dict]:
    def call(cid, name, args):
        return {
            "id": cid,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }

    return [
        {
            "role": "user",
            "content": [{"type": "text", "text": _ASK}, {"type": "image_url", "image_url": {"url": _PNG}}],
        },
        {
            "role": "assistant",
            "content": "Let me search.",
            "tool_calls": [
                call("toolu_1", "search_flights", _ARGS),
                call("toolu_2", "get_weather", {"city": "Lisbon"}),
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": _FLIGHTS},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "weather service down", "is_error": True},
        {"role": "assistant", "content": "TP 541 leaves at 07:05."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Book it."}, {"type": "image_url", "image_url": {"url": _MAP}}],
        },
        {"role": "assistant", "content": None, "tool_calls": [call("toolu_3", "book_flight", {"flight": "TP 541"})]},
        {"role": "tool", "tool_call_id": "toolu_3", "content": "PNR X7K2QP"},
    ]


def _anthropic_dicts() -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": _ASK},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me search."},
                {"type": "tool_use", "id": "toolu_1", "name": "search_flights", "input": _ARGS},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Lisbon"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": _FLIGHTS},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [{"type": "text", "text": "weather service down"}],
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "TP 541 leaves at 07:05."}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Book it."},
                {"type": "image", "source": {"type": "url", "url": _MAP}},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_3", "name": "book_flight", "input": {"flight": "TP 541"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3", "content": "PNR X7K2QP"}]},
    ]


def _pieces(messages: list) -> list[tuple[str, str]]:
    return [(p.id, p.text) for t in turns_from_messages(messages, "trip") for p in label_pieces(t)]


def test_langchain_openai_and_anthropic_forms_make_identical_pieces():
    lc = _pieces(messages_to_openai(_langchain_thread()))
    assert lc == _pieces(_openai_dicts())
    assert lc == _pieces(_anthropic_dicts())
    texts = [text for _, text in lc]
    assert texts == [
        f"[Turn 1 · User]\n{_ASK}\n[image: image/png]",
        "[Turn 1 · Assistant]\nLet me search.",
        f"[Turn 1 · Tool search_flights]\nsearch_flights arguments: {json.dumps(_ARGS, ensure_ascii=False)}\n"
        f"Result: {_FLIGHTS}",
        '[Turn 1 · Tool get_weather]\nget_weather arguments: {"city": "Lisbon"}\nResult (error): weather service down',
        "[Turn 1 · Assistant]\nTP 541 leaves at 07:05.",
        f"[Turn 2 · User]\nBook it.\n[image: {_MAP}]",
        '[Turn 2 · Tool book_flight]\nbook_flight arguments: {"flight": "TP 541"}\nResult: PNR X7K2QP',
    ]
    assert not any("[tool_use]" in t or "[tool_result]" in t or "iVBORw0" in t for t in texts)


def test_langchain_ai_message_with_only_tool_use_blocks():
    # A hand-made Anthropic-style AIMessage without parsed tool_calls: the blocks are the calls.
    msgs = [
        HumanMessage("Find flights."),
        AIMessage([{"type": "tool_use", "id": "toolu_9", "name": "search_flights", "input": _ARGS}]),
        ToolMessage(_FLIGHTS, tool_call_id="toolu_9"),
    ]
    out = messages_to_openai(msgs)
    assert out[2] == {"role": "tool", "tool_call_id": "toolu_9", "content": _FLIGHTS}
    (turn,) = turns_from_messages(out, "x")
    assert turn.sources[1].text == (
        f"search_flights arguments: {json.dumps(_ARGS, ensure_ascii=False)}\nResult: {_FLIGHTS}"
    )


def test_tool_message_with_error_status_is_marked():
    out = messages_to_openai(
        [ToolMessage("boom", tool_call_id="c", status="error"), ToolMessage("ok", tool_call_id="d")]
    )
    assert out[0] == {"role": "tool", "tool_call_id": "c", "content": "boom", "is_error": True}
    assert "is_error" not in out[1]
