"""Every sync method of the vector store, the retrievers and the index objects has a working async twin.

The first test walks the classes: each public sync method (the class's own, and the framework contract it
implements: LangChain's ``VectorStore``, ``BaseRetriever.invoke``, LlamaIndex's ``retrieve``) has a coroutine twin,
and a call below (or an exemption with its reason). The others call each pair on the same store and compare.
"""

from __future__ import annotations

import asyncio
import inspect

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from ctxret import ContextualIndex  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.vectorstores import VectorStore  # noqa: E402
from llama_index.core import Document as LIDocument  # noqa: E402

from langchain_ctxret import ContextualRetriever as LCRetriever  # noqa: E402
from langchain_ctxret import ContextualVectorStore, CtxretChatMessageHistory  # noqa: E402
from llamaindex_ctxret import ContextualIndexWriter, ContextualStoreIndex  # noqa: E402
from llamaindex_ctxret import ContextualRetriever as LIRetriever  # noqa: E402

#: The twin of each sync method (``a<name>`` unless said here).
TWIN_NAMES = {"__call__": "acall", "invoke": "ainvoke", "retrieve": "aretrieve", "messages": "aget_messages"}
#: Sync methods without a twin, and why ((class name or "*", method)).
EXEMPT = {
    ("*", "as_grouped_retriever"): "builds a retriever (its invoke has ainvoke)",
    ("*", "as_retriever"): "builds a retriever (its invoke has ainvoke)",
    ("*", "as_query_engine"): "builds a query engine (LlamaIndex's: aquery)",
    ("*", "as_chat_engine"): "builds a chat engine (LlamaIndex's: achat)",
    ("*", "from_path"): "a constructor: opens a store",
    ("*", "model_post_init"): "pydantic's",
    ("*", "class_name"): "LlamaIndex's serialisation name",
    ("ContextualStoreIndex", "from_documents"): "a constructor (VectorStoreIndex has no async one either)",
}
_VS = set(dir(VectorStore))
CLASSES = {
    ContextualVectorStore: [n for n in _VS if not n.startswith("_") and not (n[0] == "a" and n[1:] in _VS)],
    LCRetriever: ["invoke"],
    LIRetriever: ["retrieve"],
    ContextualStoreIndex: [],
    ContextualIndexWriter: ["__call__"],
    CtxretChatMessageHistory: ["messages"],
}
CALLED: set[tuple[type, str]] = set()  # (class, sync method) the tests below call with their twin


def _exempt(cls: type, name: str) -> bool:
    return ("*", name) in EXEMPT or (cls.__name__, name) in EXEMPT


def _sync_methods(cls: type, contract: list[str]) -> list[str]:
    own = [n for n in vars(cls) if not n.startswith("_") and callable(getattr(cls, n))]
    names = set(own) | set(contract)
    twins = {n for n in names if n.startswith("a") and n[1:] in names} | {TWIN_NAMES.get(n) for n in names}
    return sorted(n for n in names - twins - {"embeddings"} if not _exempt(cls, n))


def test_every_sync_method_has_an_async_twin():
    missing = []
    for cls, contract in CLASSES.items():
        for name in _sync_methods(cls, contract):
            twin = TWIN_NAMES.get(name, "a" + name)
            if not inspect.iscoroutinefunction(getattr(cls, twin, None)):
                missing.append(f"{cls.__name__}.{name} -> {twin}")
    assert not missing, f"sync methods without an async twin: {missing}"


# -- the pairs, called on one store ------------------------------------------------------------------------------
DOCS = [
    Document(page_content="The flight to Lisbon leaves at 09:40 from gate 12.", id="flight", metadata={"kind": "trip"}),
    Document(page_content="The hotel in Lisbon is booked for three nights.", id="hotel", metadata={"kind": "trip"}),
    Document(page_content="Biscuit's vaccinations are on Thursday at Green Paws.", id="vet", metadata={"kind": "pet"}),
]
Q = "When does my flight to Lisbon leave?"


def _view(result):
    """Documents, (document, score) pairs and nodes as comparable tuples (scores to 6 places)."""
    if isinstance(result, list):
        return [_view(x) for x in result]
    if isinstance(result, tuple):
        return tuple(_view(x) for x in result)
    if isinstance(result, float):
        return round(result, 6)
    if isinstance(result, Document):
        return (result.id, result.page_content, sorted(result.metadata.items(), key=str))
    if hasattr(result, "node") and hasattr(result, "score"):
        return (result.node.node_id, result.node.get_content(), round(float(result.score), 6))
    return result


@pytest.fixture
def store(hash_embedder):
    return ContextualVectorStore.from_documents(DOCS, CtxretEmbeddingsFor(hash_embedder))


def CtxretEmbeddingsFor(embedder):  # noqa: N802  (reads as the class it builds)
    from langchain_ctxret import CtxretEmbeddings

    return CtxretEmbeddings(embedder)


def _pair(cls: type, name: str, obj, *args, **kwargs):
    twin = TWIN_NAMES.get(name, "a" + name)
    CALLED.add((cls, name))
    sync = getattr(obj, name)(*args, **kwargs)
    got = asyncio.run(getattr(obj, twin)(*args, **kwargs))
    return sync, got


READS = [
    ("similarity_search", (Q,), {"k": 2}),
    ("similarity_search", (Q,), {"k": 3, "filter": {"kind": "trip"}}),
    ("similarity_search_with_score", (Q,), {"k": 2}),
    ("similarity_search_with_relevance_scores", (Q,), {"k": 2}),
    ("max_marginal_relevance_search", (Q,), {"k": 2, "fetch_k": 5}),
    ("search", (Q, "similarity"), {"k": 2}),
    ("search", (Q, "mmr"), {"k": 2}),
    ("search", (Q, "similarity_score_threshold"), {"k": 2, "score_threshold": 0.1}),
    ("get_by_ids", (["vet", "flight"],), {}),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), READS, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(READS)])
def test_vector_store_reads(store, name, args, kwargs):
    sync, got = _pair(ContextualVectorStore, name, store, *args, **kwargs)
    assert sync and _view(sync) == _view(got)


def test_vector_store_reads_by_vector(store):
    vec = store.embeddings.embed_query(Q)
    for name, kwargs in (
        ("similarity_search_by_vector", {"k": 2}),
        ("similarity_search_by_vector_with_relevance_scores", {"k": 2}),
        ("max_marginal_relevance_search_by_vector", {"k": 2, "fetch_k": 5}),
    ):
        sync, got = _pair(ContextualVectorStore, name, store, vec, **kwargs)
        assert sync and _view(sync) == _view(got), name


def test_vector_store_writes(store):
    ids, again = _pair(ContextualVectorStore, "add_texts", store, ["The gate changed to 14."], ids=["gate"])
    assert ids == again == ["gate"] and len(store.get_by_ids(["gate"])) == 1  # the second is an upsert
    doc = Document(page_content="Parking is in lot B.", id="parking")
    assert _pair(ContextualVectorStore, "add_documents", store, [doc]) == (["parking"], ["parking"])
    assert store.delete(["gate"]) is True and asyncio.run(store.adelete(["parking"])) is True
    CALLED.add((ContextualVectorStore, "delete"))
    assert store.get_by_ids(["gate", "parking"]) == []


def test_vector_store_constructors(hash_embedder):
    emb = CtxretEmbeddingsFor(hash_embedder)
    texts, metas = [d.page_content for d in DOCS], [d.metadata for d in DOCS]
    a = ContextualVectorStore.from_texts(texts, emb, metas, ids=[d.id for d in DOCS])
    b = asyncio.run(ContextualVectorStore.afrom_texts(texts, emb, metas, ids=[d.id for d in DOCS]))
    c = asyncio.run(ContextualVectorStore.afrom_documents(DOCS, emb))
    CALLED.update({(ContextualVectorStore, "from_texts"), (ContextualVectorStore, "from_documents")})
    want = _view(a.similarity_search(Q, k=3))
    assert want and _view(b.similarity_search(Q, k=3)) == want == _view(c.similarity_search(Q, k=3))
    assert a.index.store is not b.index.store  # no path: each in its own memory store


def test_langchain_retriever_pairs(hash_embedder):
    r = LCRetriever.from_path(embedder=hash_embedder, k=2, score_threshold=None)
    msgs = [HumanMessage("My dog Biscuit needs his shots."), AIMessage("Booked Green Paws for Thursday.")]
    one = r.add_messages(msgs, thread_id="t1")
    two = asyncio.run(r.aadd_messages(msgs, thread_id="t2"))
    CALLED.add((LCRetriever, "add_messages"))
    assert (one.turns, one.added) == (two.turns, two.added) and one.added
    again = _pair(LCRetriever, "replace_messages", r, msgs, thread_id="t1")
    assert [(x.turns, x.added) for x in again] == [(1, 0), (1, 0)]
    assert _pair(LCRetriever, "add_documents", r, DOCS) == (["flight", "hotel", "vet"],) * 2
    sync, got = _pair(LCRetriever, "invoke", r, "When are Biscuit's shots? When does the flight leave?")
    assert sync and _view(sync) == _view(got)
    assert (r.delete(thread_id="t1"), asyncio.run(r.adelete(thread_id="t2"))) == (one.added, two.added)
    CALLED.add((LCRetriever, "delete"))


def test_llamaindex_pairs(hash_embedder):
    docs = [LIDocument(text=d.page_content, id_=d.id, metadata=d.metadata) for d in DOCS]
    index = ContextualStoreIndex(embed_model=CtxretEmbeddingFor(hash_embedder))
    res = _pair(ContextualStoreIndex, "insert_documents", index, docs)
    assert res[0].added == 3 and res[1].added == 0  # the second finds them stored
    assert _pair(ContextualStoreIndex, "insert", index, docs[0]) == ("flight", "flight")
    assert _pair(ContextualStoreIndex, "refresh_ref_docs", index, docs) == ([False] * 3, [False] * 3)
    retriever = index.as_retriever(similarity_top_k=2, score_threshold=None)
    sync, got = _pair(LIRetriever, "retrieve", retriever, Q)
    assert sync and _view(sync) == _view(got)
    n = index.delete_ref_doc("vet")
    assert n and asyncio.run(index.adelete_ref_doc("hotel")) and index.delete_ref_doc("vet") == 0
    CALLED.add((ContextualStoreIndex, "delete_ref_doc"))
    writer = ContextualIndexWriter(ContextualIndex(in_memory=True, embedder=hash_embedder))
    sync_nodes, async_nodes = _pair(ContextualIndexWriter, "__call__", writer, docs)
    assert [x.node_id for x in sync_nodes] == [x.node_id for x in async_nodes] and sync_nodes


def CtxretEmbeddingFor(embedder):  # noqa: N802
    from llamaindex_ctxret import CtxretEmbedding

    return CtxretEmbedding(embedder)


def test_chat_history_pairs(hash_embedder):
    index = ContextualIndex(in_memory=True, embedder=hash_embedder)
    a = CtxretChatMessageHistory(index=index, thread_id="a")
    b = CtxretChatMessageHistory(index=index, thread_id="b")
    msgs = [HumanMessage("My dog Biscuit needs his shots."), AIMessage("Booked Green Paws for Thursday.")]
    a.add_messages(msgs)
    asyncio.run(b.aadd_messages(msgs))
    assert (
        [m.content for m in a.messages]
        == [m.content for m in asyncio.run(b.aget_messages())]
        == [m.content for m in msgs]
    )
    a.clear()
    asyncio.run(b.aclear())
    assert a.messages == [] == asyncio.run(b.aget_messages())
    CALLED.update({(CtxretChatMessageHistory, n) for n in ("add_messages", "messages", "clear")})


def test_each_sync_method_was_called_with_its_twin():
    """Runs last in this file: every method the walk found is one the tests above called with its twin."""
    want = {(cls, n) for cls, contract in CLASSES.items() for n in _sync_methods(cls, contract)}
    if len(CALLED) < 10:
        pytest.skip("run with the whole file (the pairs record what they call)")
    assert want <= CALLED, (
        f"not called with their twin: {sorted(f'{c.__module__}.{c.__name__}.{n}' for c, n in want - CALLED)}"
    )
