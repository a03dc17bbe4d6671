"""One collection format: written by LangChain and read by LlamaIndex, and the reverse.

Same inputs through ``langchain_ctxret.ContextualRetriever.add_documents``/``add_messages`` and
through ``llamaindex_ctxret.add_documents_to_index`` store the same records; searching either
collection through either retriever gives the same piece ids, groups and scores.
"""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain_core")

from ctxret.index import ContextualIndex  # noqa: E402
from ctxret.ingest import turns_from_messages  # noqa: E402
from langchain_core.documents import Document as LCDocument  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from llama_index.core import Document as LIDocument  # noqa: E402

from langchain_ctxret import ContextualRetriever as LCRetriever  # noqa: E402
from langchain_ctxret import messages_to_openai  # noqa: E402
from llamaindex_ctxret import ContextualNodeParser, add_documents_to_index, documents_from_messages  # noqa: E402
from llamaindex_ctxret import ContextualRetriever as LIRetriever  # noqa: E402

RUNBOOK = (
    "# Deploys\n"
    "We deploy the web app every Tuesday from the main branch. "
    "The pipeline runs in GitHub Actions and takes twelve minutes.\n\n"
    "## Rollback\n"
    "To roll back a bad deploy, run make rollback from the ops repository. "
    "It restores the previous container image and restarts the pods.\n\n"
    "# On-call\n"
    "The pager rotation changes every Monday at nine. "
    "Escalate to Dana when an incident is not acknowledged within fifteen minutes.\n"
)
VET = "The vet said Biscuit sprained his left hind leg and needs two weeks of rest and short walks."

OPENAI_MESSAGES = [
    {
        "role": "user",
        "content": "Find me a flight to Lisbon next Friday.",
        "timestamp": "2026-10-16T14:02:00",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "flight_search", "arguments": '{"to": "LIS"}'},
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "TAP 1234 departs 08:15 from Newark, arrives Lisbon 20:05, 412 USD.",
    },
    {
        "role": "assistant",
        "content": "The TAP flight 1234 leaves Newark at 8:15 and costs 412 dollars.",
    },
    {
        "role": "user",
        "content": "What did the vet say about Biscuit's limp?",
        "timestamp": "2026-10-17T09:30:00",
    },
    {
        "role": "assistant",
        "content": VET,
    },
]

LC_MESSAGES = [
    HumanMessage(
        "Find me a flight to Lisbon next Friday.",
        additional_kwargs={"timestamp": "2026-10-16T14:02:00"},
    ),
    AIMessage("", tool_calls=[{"name": "flight_search", "args": {"to": "LIS"}, "id": "c1"}]),
    ToolMessage("TAP 1234 departs 08:15 from Newark, arrives Lisbon 20:05, 412 USD.", tool_call_id="c1"),
    AIMessage("The TAP flight 1234 leaves Newark at 8:15 and costs 412 dollars."),
    HumanMessage(
        "What did the vet say about Biscuit's limp?",
        additional_kwargs={"timestamp": "2026-10-17T09:30:00"},
    ),
    AIMessage(VET),
]

QUERIES = [
    "How do I roll back a bad deploy? What did the vet say about Biscuit?",
    "Which flight goes to Lisbon and how much does it cost?",
    "Who do I escalate to when the pager is not acknowledged? When do we deploy?",
]
K = 3


def _index(path, embedder) -> ContextualIndex:
    return ContextualIndex(path, embedder=embedder)


def _write_langchain(index: ContextualIndex) -> None:
    retriever = LCRetriever(index=index)
    retriever.add_documents(
        [LCDocument(page_content=RUNBOOK, metadata={"title": "Runbook", "team": "ops"}, id="runbook")]
    )
    # written as given, as the LlamaIndex chat document is (add_messages appends: an untimed message takes the time
    # it is first added, so its records are not these; docs/memory.md)
    turns = turns_from_messages(messages_to_openai(LC_MESSAGES), "u1")
    index.add_turns(turns, metadata={"user": "ann"})


def _write_llamaindex(index: ContextualIndex) -> None:
    docs = [
        LIDocument(text=RUNBOOK, id_="runbook", metadata={"title": "Runbook", "team": "ops"}),
        *documents_from_messages(OPENAI_MESSAGES, "u1", metadata={"user": "ann"}),
    ]
    add_documents_to_index(index, docs)


def _records(index: ContextualIndex) -> dict[str, tuple[str, dict]]:
    return {
        r["id"]: (r["document"], r["metadata"])
        for r in index.store.chroma.iter_records(None, include=("documents", "metadatas"))
    }


def _lc_rows(docs) -> list[tuple]:
    return [
        (
            d.id,
            d.page_content,
            *(d.metadata[k] for k in ("group", "group_query", "group_rank", "score")),
        )
        for d in docs
    ]


def _li_rows(nodes) -> list[tuple]:
    return [
        (
            n.node_id,
            n.node.text,
            *(n.node.metadata[k] for k in ("group", "group_query", "group_rank")),
            n.score,
        )
        for n in nodes
    ]


def _via_langchain(index: ContextualIndex, query: str) -> list[tuple]:
    return _lc_rows(LCRetriever(index=index, k=K, score_threshold=None).invoke(query))


def _via_llamaindex(index: ContextualIndex, query: str) -> list[tuple]:
    return _li_rows(LIRetriever(index, similarity_top_k=K, score_threshold=None).retrieve(query))


def _assert_same(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b) > 0
    assert [x[:5] for x in a] == [y[:5] for y in b]  # ids, texts, groups, group queries, ranks
    assert max(abs(x[5] - y[5]) for x, y in zip(a, b, strict=True)) < 1e-6


@pytest.fixture(scope="module")
def stores(tmp_path_factory, hash_embedder):
    """Two folders: one written through LangChain, one through LlamaIndex."""
    root = tmp_path_factory.mktemp("cross")
    lc, li = root / "langchain", root / "llamaindex"
    _write_langchain(_index(lc, hash_embedder))
    _write_llamaindex(_index(li, hash_embedder))
    return lc, li


def test_both_writers_store_the_same_records(stores, hash_embedder):
    lc, li = (_records(_index(p, hash_embedder)) for p in stores)
    assert len(lc) > 6
    assert lc == li  # same ids, texts and metadata
    lc_index, li_index = (_index(p, hash_embedder) for p in stores)
    ids = sorted(lc)
    lc_vecs = lc_index.store.chroma.get(ids, include=("embeddings",))
    li_vecs = li_index.store.chroma.get(ids, include=("embeddings",))
    by_id = {r["id"]: r["embedding"] for r in li_vecs}
    assert len(by_id) == len(lc_vecs) == len(ids)
    for rid, vec in ((r["id"], r["embedding"]) for r in lc_vecs):
        assert abs(vec - by_id[rid]).max() < 1e-6  # same blended vectors


def test_parser_nodes_are_what_langchain_stored(stores, hash_embedder):
    stored = _records(_index(stores[0], hash_embedder))
    docs = [
        LIDocument(text=RUNBOOK, id_="runbook", metadata={"title": "Runbook", "team": "ops"}),
        *documents_from_messages(OPENAI_MESSAGES, "u1", metadata={"user": "ann"}),
    ]
    nodes = ContextualNodeParser().get_nodes_from_documents(docs)
    assert {n.node_id: (n.text, n.metadata) for n in nodes} == stored


@pytest.mark.parametrize("query", QUERIES)
def test_written_by_langchain_read_by_llamaindex(stores, hash_embedder, query):
    index = _index(stores[0], hash_embedder)
    _assert_same(_via_langchain(index, query), _via_llamaindex(index, query))


@pytest.mark.parametrize("query", QUERIES)
def test_written_by_llamaindex_read_by_langchain(stores, hash_embedder, query):
    # LangChain opens the folder the way a user would (its own ContextualIndex, from_path).
    lc = LCRetriever.from_path(stores[1], embedder=hash_embedder, k=K, score_threshold=None)
    _assert_same(_lc_rows(lc.invoke(query)), _via_llamaindex(_index(stores[1], hash_embedder), query))


def test_one_framework_each_side(stores, hash_embedder):
    """LangChain on its own folder and LlamaIndex on its own folder answer alike."""
    lc_index, li_index = (_index(p, hash_embedder) for p in stores)
    for query in QUERIES:
        _assert_same(_via_langchain(lc_index, query), _via_llamaindex(li_index, query))


async def test_async_paths_agree(stores, hash_embedder):
    index = _index(stores[1], hash_embedder)
    query = QUERIES[0]
    lc_docs = await LCRetriever(index=index, k=K, score_threshold=None).ainvoke(query)
    li_nodes = await LIRetriever(index, similarity_top_k=K, score_threshold=None).aretrieve(query)
    _assert_same(_lc_rows(lc_docs), _li_rows(li_nodes))
    assert {row[2] for row in _li_rows(li_nodes)} == {0, 1}


def _stored(index: ContextualIndex) -> dict[str, dict]:
    return {r["id"]: r["metadata"] for r in index.store.chroma.iter_records(None)}


def test_documents_without_ids_get_one_id_policy(tmp_path, hash_embedder):
    """The same text and title with no id: the same document id and pieces through either framework
    (LangChain used to hash the text alone, LlamaIndex the title and text)."""
    text = "The office closes at noon on Friday. Badge readers reset over the weekend."
    lc = ContextualIndex(tmp_path / "lc", embedder=hash_embedder, lexical=False)
    li = ContextualIndex(tmp_path / "li", embedder=hash_embedder, lexical=False)
    LCRetriever(index=lc).add_documents([LCDocument(page_content=text, metadata={"title": "Facilities"})])
    add_documents_to_index(li, [LIDocument(text=text, metadata={"title": "Facilities"})])
    core = ContextualIndex(tmp_path / "core", embedder=hash_embedder, lexical=False)
    core.add_documents([{"text": text, "title": "Facilities"}])
    assert _stored(lc) == _stored(li) == _stored(core) and _stored(lc)
    assert {m["doc_id"] for m in _stored(lc).values()} == {m["thread_id"] for m in _stored(lc).values()}


def test_reserved_caller_keys_have_one_policy(tmp_path, hash_embedder):
    """Caller metadata named like ctxret's own keys is stored as ``meta_<key>`` by both adapters
    (LlamaIndex used to refuse what LangChain renamed)."""
    meta = {"title": "Notes", "kind": "memo", "timestamp": "yesterday", "score": 5, "owner": "dana"}
    lc = ContextualIndex(tmp_path / "lc", embedder=hash_embedder, lexical=False)
    li = ContextualIndex(tmp_path / "li", embedder=hash_embedder, lexical=False)
    LCRetriever(index=lc).add_documents([LCDocument(page_content=VET, metadata=dict(meta), id="vet")])
    add_documents_to_index(li, [LIDocument(text=VET, metadata={**meta, "doc_id": "vet"})])
    stored = _stored(lc)
    assert stored == _stored(li) and stored
    for m in stored.values():
        assert (m["meta_kind"], m["meta_timestamp"], m["meta_score"], m["owner"]) == ("memo", "yesterday", 5, "dana")
        assert m["kind"] == "section" and "timestamp" not in m
