"""What a LangChain user reaches for first: any Embeddings as the embedder, ids in and out, delete,
compressors as rerankers (per group), traced LLM calls, the vector store and its grouped retriever."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from ctxret import ContextualIndex
from langchain_core.callbacks import BaseCallbackHandler, Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake import FakeListLLM

from langchain_ctxret import (
    ContextualRetriever,
    ContextualVectorStore,
    CtxretEmbeddings,
    compressor_reranker,
    llm_contextualizer,
)

NOTES = {
    "flight": "The flight to Lisbon leaves Berlin at 09:40 on October 20 with TAP.",
    "hotel": "The hotel in Lisbon is in Alfama; checkout is at 11:00.",
    "vet": "Biscuit the dog has his vaccinations at the Green Paws vet clinic on Thursday.",
    "cat": "Luna the cat has a dental check at the vet on Monday morning.",
    "cake": "Maya's chocolate birthday cake bakes at 175 C for 35 minutes.",
    "deploy": "The Postgres 16 migration failed with a lock timeout during the deploy.",
}
TWO_PARTS = "When does my flight to Lisbon leave? When is the vet appointment for my pets?"


def _docs() -> list[Document]:
    return [Document(page_content=t, metadata={"topic": k}, id=k) for k, t in NOTES.items()]


@pytest.fixture
def retriever(local_embedder) -> ContextualRetriever:
    r = ContextualRetriever.from_path(
        in_memory=True, collection=f"lc-{uuid.uuid4().hex}", embedder=local_embedder, k=2, score_threshold=None
    )
    r.add_documents(_docs())
    return r


def by_group(docs: list[Document]) -> dict[int, list[Document]]:
    out: dict[int, list[Document]] = {}
    for d in docs:
        out.setdefault(d.metadata["group"], []).append(d)
    return out


# -- embeddings ---------------------------------------------------------------------------------
def test_any_langchain_embeddings_is_the_embedder():
    r = ContextualRetriever.from_path(
        in_memory=True, collection=f"fake-{uuid.uuid4().hex}", embedder=DeterministicFakeEmbedding(size=16), k=1
    )
    assert r.add_documents(_docs()) == list(NOTES)
    assert r.index.config.dims == 16 and r.index.config.model_id.startswith("langchain:DeterministicFakeEmbedding")
    docs = r.invoke("Biscuit vaccinations at the vet", score_threshold=None)
    assert len(docs) == 1 and docs[0].metadata["doc_id"] == "vet"  # found through its words (BM25 side)


def test_ctxret_embeddings_are_unwrapped(local_embedder):
    index = ContextualIndex(
        in_memory=True, collection=f"w-{uuid.uuid4().hex}", embedder=CtxretEmbeddings(local_embedder)
    )
    assert index.embedder is local_embedder


# -- ids in, ids out -----------------------------------------------------------------------------
def test_add_documents_returns_ids_and_delete_takes_them(retriever):
    ids = retriever.add_documents([Document(page_content="The boiler is serviced every May.")], ids=["boiler"])
    assert ids == ["boiler"]
    anon = retriever.add_documents([Document(page_content="The heat pump filter is cleaned in October.")])
    assert len(anon) == 1 and anon[0].startswith("doc-")
    assert retriever.invoke("When is the boiler serviced?", k=1)[0].metadata["doc_id"] == "boiler"
    assert retriever.delete(ids=["boiler", "no-such-doc"]) == 1
    assert all(d.metadata["doc_id"] != "boiler" for d in retriever.invoke("When is the boiler serviced?", k=5))
    assert retriever.delete(ids=[]) == 0


async def test_async_add_and_delete(retriever):
    assert await retriever.aadd_documents([Document(page_content="Rent is due on the first.", id="rent")]) == ["rent"]
    assert (await retriever.ainvoke("When is rent due?", k=1))[0].metadata["doc_id"] == "rent"
    assert await retriever.adelete(["rent"]) == 1


# -- rerank: LangChain compressors, per group ------------------------------------------------------
class ReverseCompressor(BaseDocumentCompressor):
    """Returns the documents in reverse order with a relevance_score, as Cohere or FlashRank do."""

    calls: list[tuple[str, int, Any]] = []

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        type(self).calls.append((query, len(documents), callbacks))
        out = []
        for i, d in enumerate(reversed(documents)):
            out.append(
                Document(page_content=d.page_content, metadata={**d.metadata, "relevance_score": 10.0 - i}, id=d.id)
            )
        return out


class KeepWordCompressor(BaseDocumentCompressor):
    """Keeps the documents holding a word, in the order given, without scores (like an LLM filter)."""

    word: str

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        return [d for d in documents if self.word in d.page_content]


def test_a_compressor_reranks_inside_each_group(retriever):
    ReverseCompressor.calls = []
    plain = by_group(retriever.invoke(TWO_PARTS, k=3))
    r = ContextualRetriever(
        index=retriever.index, k=3, score_threshold=None, rerank=ReverseCompressor(), rerank_candidates=3
    )
    groups = by_group(r.invoke(TWO_PARTS))
    assert [q for q, _, _ in ReverseCompressor.calls] == [g[0].metadata["group_query"] for g in groups.values()]
    assert all(n == 3 for _, n, _ in ReverseCompressor.calls)  # rerank_candidates per part
    assert all(cb is not None for _, _, cb in ReverseCompressor.calls)  # the run's callbacks reach the compressor
    ranked = retriever.index.search(TWO_PARTS, k=3, score_threshold=None)  # the ranking order the compressor gets
    for i, docs in groups.items():
        assert [d.id for d in docs] == [h.id for h in reversed(ranked[i].hits)]
        assert {d.id for d in docs} == {d.id for d in plain[i]}
        assert [d.metadata["score_rerank"] for d in docs] == [10.0, 9.0, 8.0]
        # a reranked group shows the score it is ordered by; the relevance stays under its own name
        assert all(
            d.metadata["score"] == d.metadata["score_rerank"] and d.metadata["score_scale"] == "rerank" for d in docs
        )
        assert all(0.0 <= d.metadata["score_relevance"] <= 1.0 for d in docs)


def test_a_filtering_compressor_drops_and_orders_by_position(retriever):
    r = ContextualRetriever(index=retriever.index, k=3, score_threshold=None, rerank=KeepWordCompressor(word="Lisbon"))
    docs = r.invoke("Tell me about my trip to Lisbon and the hotel")
    assert docs and all("Lisbon" in d.page_content for d in docs)
    assert [d.metadata["score_rerank"] for d in by_group(docs)[0]] == [1.0, 0.5][: len(by_group(docs)[0])]


def test_compressor_reranker_is_the_core_callable(retriever):
    groups = retriever.index.search(
        TWO_PARTS, k=2, score_threshold=None, rerank=compressor_reranker(ReverseCompressor())
    )
    assert all(h.score_scale == "rerank" for g in groups for h in g.hits)
    with pytest.raises(ValueError, match="BaseDocumentCompressor or a callable"):
        ContextualRetriever(index=retriever.index, rerank="cross-encoder")


# -- the LLM contextualizer is traced --------------------------------------------------------------
class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[dict] = []

    def on_llm_start(self, serialized: dict, prompts: list[str], **kwargs: Any) -> None:
        self.starts.append(kwargs)


def test_llm_contextualizer_passes_config_and_callbacks(local_embedder):
    rec = Recorder()
    llm = FakeListLLM(responses=["1. Helix Capital's buyout offer to CEO Maria Chen."])
    ctx = llm_contextualizer(llm, config={"tags": ["ctx"], "metadata": {"tenant": "t1"}}, callbacks=[rec])
    assert ctx("Maria Chen, our CEO, received a buyout offer.", ["He refused the offer."]) == [
        "Helix Capital's buyout offer to CEO Maria Chen."
    ]
    assert len(rec.starts) == 1
    assert "ctx" in rec.starts[0]["tags"] and rec.starts[0]["metadata"]["tenant"] == "t1"
    assert rec.starts[0]["name"] == "ctxret_contextualizer"


# -- the vector store's views ----------------------------------------------------------------------
def test_vector_store_flat_search_and_grouped_retriever(local_embedder):
    store = ContextualVectorStore.from_documents(
        _docs(),
        local_embedder and CtxretEmbeddings(local_embedder),
        in_memory=True,
        collection=f"vs-{uuid.uuid4().hex}",
    )
    flat = store.similarity_search(TWO_PARTS, k=3)
    assert len(flat) == 3 and all(d.metadata.keys() == {"topic"} for d in flat)  # as added
    scored = store.similarity_search_with_relevance_scores("Biscuit's vaccinations", k=2)
    assert scored[0][0].id == "vet" and 0.0 <= scored[0][1] <= 1.0
    assert store.get_by_ids(["cake", "nope"]) == [
        Document(page_content=NOTES["cake"], metadata={"topic": "cake"}, id="cake")
    ]
    assert [d.metadata["topic"] for d in store.similarity_search("pets at the vet", k=2, filter={"topic": "cat"})] == [
        "cat"
    ]
    retriever = store.as_grouped_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4})
    assert isinstance(retriever, ContextualRetriever) and "ContextualVectorStore" in retriever.tags
    groups = by_group(retriever.invoke(TWO_PARTS))
    assert len(groups) == 2 and all(len(g) == 2 for g in groups.values())
    mmr = store.max_marginal_relevance_search("Lisbon", k=2, fetch_k=4)
    assert len(mmr) == 2


def test_vector_store_upserts_and_reads_one_thread_of_a_shared_document_id(local_embedder):
    """Two threads may hold a document with the same id: upserting it in one thread leaves the other's
    pieces alone, and get_by_ids never stitches the two threads' texts into one Document."""
    index = ContextualIndex(in_memory=True, collection=f"vs-{uuid.uuid4().hex}", embedder=local_embedder)
    store = ContextualVectorStore(index)
    alice = Document(page_content="Alice private: diagnosis confidential-alice-777.", id="notes.md")
    store.add_documents([alice], thread_id="alice")
    store.add_documents([Document(page_content="Bob notes: buy milk.", id="notes.md")], thread_id="bob")
    store.add_documents([Document(page_content="Bob notes: buy milk and eggs.", id="notes.md")], thread_id="bob")
    alice_hits = index.search("diagnosis", k=3, thread_id="alice", score_threshold=None)
    assert any("confidential-alice-777" in h.text for g in alice_hits for h in g.hits)  # not deleted by Bob's upsert
    bob_hits = index.search("buy milk", k=3, thread_id="bob", score_threshold=None)
    assert [h.body for g in bob_hits for h in g.hits] == ["Bob notes: buy milk and eggs."]  # the old text replaced
    got = store.get_by_ids(["notes.md"])
    assert sorted(d.page_content for d in got) == [
        "Alice private: diagnosis confidential-alice-777.",
        "Bob notes: buy milk and eggs.",
    ]  # one Document per thread, never one text made of both
    store.delete(["notes.md"], thread_id="bob")
    assert [d.page_content for d in store.get_by_ids(["notes.md"])] == [alice.page_content]
