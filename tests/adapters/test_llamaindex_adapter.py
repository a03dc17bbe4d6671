"""The LlamaIndex adapter: node parser, writer and retriever (LocalEmbedder, embedded Chroma)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

from ctxret.errors import InputError  # noqa: E402
from ctxret.index import ContextualIndex  # noqa: E402
from ctxret.ingest.documents import document_turns  # noqa: E402
from ctxret.ingest.messages import turns_from_messages
from ctxret.ingest.turns import label_pieces  # noqa: E402
from ctxret.query.floor import HIT_SHARE
from llama_index.core import Document  # noqa: E402
from llama_index.core.ingestion import IngestionCache, IngestionPipeline  # noqa: E402
from llama_index.core.ingestion.pipeline import get_transformation_hash  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.postprocessor import SimilarityPostprocessor  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeRelationship, QueryBundle, TextNode  # noqa: E402

import llamaindex_ctxret  # noqa: E402
from llamaindex_ctxret import (  # noqa: E402
    ContextualNodeParser,
    ContextualRetriever,
    add_documents_to_index,
    documents_from_messages,
)

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

MESSAGES = [
    {
        "role": "user",
        "content": "Find me a flight to Lisbon next Friday.",
        "timestamp": "2026-10-16T14:02:00",
    },
    {
        "role": "assistant",
        "content": None,
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

QUERY = "How do I roll back a bad deploy? What did the vet say about Biscuit?"

_LONG_PARAGRAPH = " ".join(
    f"Sentence number {i} of the storage notes explains how shard {i} is replicated in three zones." for i in range(30)
)


def _documents() -> list[Document]:
    runbook = Document(text=RUNBOOK, id_="runbook", metadata={"title": "Runbook", "team": "ops"})
    notes = Document(text=_LONG_PARAGRAPH, metadata={"title": "Storage notes", "team": "infra"})
    return [runbook, notes, *documents_from_messages(MESSAGES, "u1", metadata={"user": "ann"})]


def _records(index: ContextualIndex) -> dict[str, dict]:
    return {r["id"]: r for r in index.store.chroma.iter_records(None, include=("documents", "metadatas"))}


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on what the real model retrieves


@pytest.fixture
def index(open_index):
    """A fresh index per test, closed by ``open_index``."""
    return open_index(lexical=False)


@pytest.fixture(scope="module")
def filled(tmp_path_factory, local_embedder):
    """One index holding the test documents (read-only for the tests that use it)."""
    idx = ContextualIndex(tmp_path_factory.mktemp("li") / "db", embedder=local_embedder, lexical=False)
    add_documents_to_index(idx, _documents())
    return idx


# -- public API ------------------------------------------------------------------------------
def test_all_is_pinned():
    assert sorted(llamaindex_ctxret.__all__) == sorted(
        [
            "ContextualIndexWriter",
            "ContextualNodeParser",
            "ContextualRetriever",
            "ContextualStoreIndex",
            "metadata_filters_to_where",
            "postprocessor_reranker",
            "CtxretEmbedding",
            "CtxretMemoryBlock",
            "add_documents_to_index",
            "chat_message_to_openai",
            "chat_messages_to_openai",
            "documents_from_messages",
            "documents_to_turns",
            "groups_to_nodes",
        ]
    )
    for name in llamaindex_ctxret.__all__:
        assert getattr(llamaindex_ctxret, name) is not None


# -- node parser ----------------------------------------------------------------------------------
def test_parser_nodes_are_the_core_pieces():
    nodes = ContextualNodeParser().get_nodes_from_documents(_documents()[:1])
    turns = document_turns(RUNBOOK, title="Runbook", doc_id="runbook", metadata={"team": "ops"})
    pieces = [p for t in turns for p in label_pieces(t, 600)]
    assert [n.node_id for n in nodes] == [p.id for p in pieces]
    assert [n.text for n in nodes] == [p.text for p in pieces]
    assert nodes[0].metadata["header"] == "[Runbook · Deploys]"
    assert nodes[1].metadata["turn_label"] == "Runbook" and nodes[1].metadata["source_label"] == "Deploys › Rollback"


def test_parser_nodes_equal_what_the_core_stores(index):
    """Same ids, texts and metadata as ContextualIndex.add_documents / add_messages store."""
    index.add_documents([{"text": RUNBOOK, "title": "Runbook", "id": "runbook", "metadata": {"team": "ops"}}])
    index.add_documents([{"text": _LONG_PARAGRAPH, "title": "Storage notes", "metadata": {"team": "infra"}}])
    index.add_turns(turns_from_messages(MESSAGES, "u1"), metadata={"user": "ann"})  # as given, like the parser
    stored = _records(index)
    nodes = ContextualNodeParser().get_nodes_from_documents(_documents())
    assert len(nodes) == len(stored) > 6
    for node in nodes:
        rec = stored[node.node_id]
        assert node.text == rec["document"]
        assert node.metadata == rec["metadata"]


def test_writer_stores_the_parser_nodes(index):
    docs = _documents()
    result = add_documents_to_index(index, docs)
    nodes = ContextualNodeParser().get_nodes_from_documents(docs)
    stored = _records(index)
    assert result.added == len(nodes) == len(stored)
    assert {n.node_id for n in nodes} == set(stored)
    assert all(stored[n.node_id]["metadata"] == n.metadata for n in nodes)
    again = add_documents_to_index(index, docs)
    assert again.added == 0 and again.unchanged == len(nodes)


def test_documents_without_a_chosen_id_get_a_stable_one():
    a = ContextualNodeParser().get_nodes_from_documents([Document(text=_LONG_PARAGRAPH)])
    b = ContextualNodeParser().get_nodes_from_documents([Document(text=_LONG_PARAGRAPH)])
    assert [n.node_id for n in a] == [n.node_id for n in b]  # LlamaIndex's random id_ is not used
    assert a[0].metadata["doc_id"].startswith("doc-")


def test_relationships_chain_inside_each_document():
    docs = _documents()
    nodes = ContextualNodeParser().get_nodes_from_documents(docs)
    by_doc: dict[str, list[TextNode]] = {}
    for n in nodes:
        by_doc.setdefault(n.ref_doc_id, []).append(n)
    assert set(by_doc) == {d.doc_id for d in docs}
    assert len(by_doc[docs[1].doc_id]) > 2  # the long paragraph is several pieces of one section
    for chain in by_doc.values():
        assert NodeRelationship.PREVIOUS not in chain[0].relationships
        assert NodeRelationship.NEXT not in chain[-1].relationships
        for prev, node in zip(chain, chain[1:], strict=False):
            assert prev.relationships[NodeRelationship.NEXT].node_id == node.node_id
            assert node.relationships[NodeRelationship.PREVIOUS].node_id == prev.node_id


def test_prev_next_can_be_turned_off():
    nodes = ContextualNodeParser(include_prev_next_rel=False).get_nodes_from_documents(_documents())
    assert all(set(n.relationships) == {NodeRelationship.SOURCE} for n in nodes)


def test_metadata_modes_embed_the_piece_text_once():
    nodes = ContextualNodeParser().get_nodes_from_documents(_documents())
    for node in nodes:
        embed = node.get_content(metadata_mode=MetadataMode.EMBED)
        header = node.metadata["header"]
        assert embed == node.text  # exactly what the core embeds
        assert embed.count(header) == 1
        for key in ("thread_id", "turn_id", "caller_keys", "source_ordinal", "team", "user"):
            assert f"{key}: " not in embed
        llm = node.get_content(metadata_mode=MetadataMode.LLM)
        assert llm.count(header) == 1 and llm.endswith(node.text)
        assert "turn_id: " not in llm and "body: " not in llm and "caller_keys" not in llm
    runbook = [n for n in nodes if n.metadata.get("team") == "ops"]
    assert runbook and all("team: ops" in n.get_content(metadata_mode=MetadataMode.LLM) for n in runbook)


def test_chat_document_keeps_messages_off_the_pieces():
    nodes = ContextualNodeParser().get_nodes_from_documents(documents_from_messages(MESSAGES, "u1"))
    assert nodes and all("messages" not in n.metadata and "first_turn" not in n.metadata for n in nodes)
    assert {n.metadata["thread_id"] for n in nodes} == {"u1"}
    tool = [n for n in nodes if n.metadata["source_kind"] == "tool"]
    assert tool and tool[0].text.startswith("[Turn 1 · Tool flight_search · Oct 16, 2026, 2:02 PM]\n")
    assert "TAP 1234" in tool[0].text


def test_messages_as_json_string_and_thread_precedence():
    import json

    doc = Document(text="", metadata={"messages": json.dumps(MESSAGES), "thread_id": "t-doc"})
    nodes = ContextualNodeParser(thread_id="t-parser").get_nodes_from_documents([doc])
    assert {n.metadata["thread_id"] for n in nodes} == {"t-doc"}
    doc = Document(text="", metadata={"messages": MESSAGES})
    nodes = ContextualNodeParser(thread_id="t-parser").get_nodes_from_documents([doc])
    assert {n.metadata["thread_id"] for n in nodes} == {"t-parser"}


def test_pipeline_cache_works_twice():
    cache = IngestionCache()
    parser = ContextualNodeParser()
    docs = _documents()
    first = IngestionPipeline(transformations=[parser], cache=cache).run(documents=docs)
    assert cache.get(get_transformation_hash(docs, parser)) is not None  # the run was cached
    second = IngestionPipeline(transformations=[ContextualNodeParser()], cache=cache).run(documents=_documents())
    assert [n.node_id for n in second] == [n.node_id for n in first]
    assert [n.text for n in second] == [n.text for n in first]
    assert [n.metadata for n in second] == [n.metadata for n in first]
    assert [n.excluded_embed_metadata_keys for n in second] == [n.excluded_embed_metadata_keys for n in first]
    assert second[1].relationships[NodeRelationship.PREVIOUS].node_id == first[0].node_id
    # another setting is another cache entry
    other = ContextualNodeParser(piece_bytes=300)
    assert get_transformation_hash(docs, other) != get_transformation_hash(docs, parser)
    assert ContextualNodeParser.from_dict(parser.to_dict()).to_dict() == parser.to_dict()


def test_parser_from_index_fits_pieces_to_the_token_limit(index):
    dense = ",".join(str(i) for i in range(400))  # about one token per byte: 600 bytes > 256 tokens
    doc = Document(text=dense, id_="numbers")
    plain = ContextualNodeParser().get_nodes_from_documents([doc])
    fitted = ContextualNodeParser.from_index(index).get_nodes_from_documents([doc])
    assert len(fitted) > len(plain)
    limit = index.embedder.max_tokens
    assert max(index.embedder.count_tokens([n.text for n in fitted])) <= limit
    add_documents_to_index(index, [doc])
    assert {n.node_id for n in fitted} == set(_records(index))
    assert ContextualNodeParser(index=index).to_dict()["index_config"]["max_tokens"] == limit


def test_parser_rejects_a_piece_bytes_that_differs_from_the_index(index):
    with pytest.raises(InputError, match="piece_bytes=300 differs"):
        ContextualNodeParser(index=index, piece_bytes=300)


def test_writer_rejects_parsed_nodes(index):
    nodes = ContextualNodeParser().get_nodes_from_documents(_documents()[:1])
    with pytest.raises(InputError, match="not the parser's output nodes"):
        add_documents_to_index(index, nodes)


# -- retriever ------------------------------------------------------------------------------------
def test_retriever_returns_the_core_groups_in_order(filled):
    groups = filled.search(QUERY, k=3, score_threshold=None)
    assert len(groups) == 2
    nodes = ContextualRetriever(filled, similarity_top_k=3, score_threshold=None).retrieve(QUERY)
    expected = [(g.part_index, g.part, rank, h.id, h.relevance) for g in groups for rank, h in enumerate(g.hits)]
    got = [
        (
            n.node.metadata["group"],
            n.node.metadata["group_query"],
            n.node.metadata["group_rank"],
            n.node.node_id,
            n.score,
        )
        for n in nodes
    ]
    assert [g[:4] for g in got] == [e[:4] for e in expected]
    assert all(abs(g[4] - e[4]) < 1e-6 for g, e in zip(got, expected, strict=True))
    assert nodes[0].node.metadata["ctxret:source_label"] == "Deploys › Rollback"
    assert any(n.node.metadata["group"] == 1 and "vet said" in n.node.text for n in nodes[3:5])
    for node in nodes:
        assert node.node.metadata["score_relevance"] == pytest.approx(node.score, abs=1e-6)
        assert node.node.metadata["score_scale"] == "relevance" and 0.0 <= node.score <= 1.0
        assert node.node.metadata["group_count"] == 2
        assert node.node.get_content(metadata_mode=MetadataMode.EMBED) == node.node.text
        assert "group_query" not in node.node.get_content(metadata_mode=MetadataMode.LLM)


def test_a_piece_supporting_two_parts_is_in_both_groups(filled):
    total = filled.stats()["pieces"]
    nodes = ContextualRetriever(filled, similarity_top_k=total, score_threshold=None).retrieve(QUERY)
    assert len(nodes) == 2 * total  # every piece in each group: LlamaIndex's de-duplication is off
    ids = [n.node_id for n in nodes]
    assert ids[:total] != ids[total:] and sorted(ids[:total]) == sorted(ids[total:])


def test_score_threshold_auto_none_and_number(filled):
    """score_threshold is a floor on the score shown (the relevance), as in LangChain and the core; the cosine floor
    is cosine_floor."""
    floor = filled.cosine_floor

    def cos(n):
        return n.node.metadata["score_cosine"]

    auto = ContextualRetriever(filled, similarity_top_k=5).retrieve(QUERY)
    # the floor per part (ctxret.query.floor): a hit clears it, the group keeps hits down to half of it
    assert auto and max(cos(n) for n in auto) >= floor and all(cos(n) >= floor * HIT_SHARE for n in auto)
    off = ContextualRetriever(filled, similarity_top_k=5, score_threshold=None).retrieve(QUERY)
    assert len(off) == 10 and min(cos(n) for n in off) < floor
    high = ContextualRetriever(filled, similarity_top_k=5, cosine_floor=0.68).retrieve(QUERY)
    assert high and max(cos(n) for n in high) >= 0.68 and all(cos(n) >= 0.68 * HIT_SHARE for n in high)
    assert len(high) < len(off)
    shown = sorted(n.score for n in auto)
    cut = shown[len(shown) // 2]
    kept = ContextualRetriever(filled, similarity_top_k=5, score_threshold=cut).retrieve(QUERY)
    assert kept and all(n.score >= cut for n in kept) and len(kept) < len(auto)  # on the scale shown
    with pytest.raises(InputError, match="relevance"):
        ContextualRetriever(filled, score_threshold=1.5)


def test_thread_and_where_scope(filled):
    only_chat = ContextualRetriever(filled, similarity_top_k=4, score_threshold=None, thread_id="u1").retrieve(QUERY)
    assert only_chat and {n.node.metadata["thread_id"] for n in only_chat} == {"u1"}
    infra = ContextualRetriever(filled, similarity_top_k=4, score_threshold=None, where={"team": "infra"}).retrieve(
        QUERY
    )
    assert infra and {n.node.metadata["team"] for n in infra} == {"infra"}
    assert {n.node.metadata["ctxret:turn_label"] for n in infra} == {"Storage notes"}


def test_search_kwargs_are_forwarded(filled):
    one = ContextualRetriever(
        filled, similarity_top_k=2, score_threshold=None, search_kwargs={"max_parts": 1}
    ).retrieve(QUERY)
    assert {n.node.metadata["group"] for n in one} == {0} and one[0].node.metadata["group_query"] == QUERY
    whole = ContextualRetriever(filled, similarity_top_k=2, score_threshold=None, search_kwargs={"split": False})
    ref = filled.search(QUERY, k=2, score_threshold=None, split=False)
    assert [n.node_id for n in whole.retrieve(QUERY)] == [h.id for h in ref[0].hits]
    with pytest.raises(InputError, match="similarity_top_k"):
        ContextualRetriever(filled, search_kwargs={"k": 3})


def test_bad_arguments(filled):
    with pytest.raises(InputError, match="ContextualIndex"):
        ContextualRetriever("not an index")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="positive integer"):
        ContextualRetriever(filled, similarity_top_k=0)
    with pytest.raises(InputError, match="score_threshold"):
        ContextualRetriever(filled, score_threshold="high")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="score_threshold"):
        ContextualRetriever(filled, score_threshold=True)  # type: ignore[arg-type]


def test_query_embedding_is_ignored(filled):
    retriever = ContextualRetriever(filled, similarity_top_k=3, score_threshold=None)
    plain = retriever.retrieve(QUERY)
    bundled = retriever.retrieve(QueryBundle(QUERY, embedding=[1.0] + [0.0] * 383))
    assert [n.node_id for n in bundled] == [n.node_id for n in plain]
    assert [n.score for n in bundled] == pytest.approx([n.score for n in plain], abs=1e-6)


def test_empty_query_returns_nothing(filled):
    assert ContextualRetriever(filled).retrieve("   ") == []


async def test_aretrieve_matches_retrieve(filled):
    retriever = ContextualRetriever(filled, similarity_top_k=3, score_threshold=None)
    sync = retriever.retrieve(QUERY)
    got = await retriever.aretrieve(QUERY)
    assert [(n.node_id, n.node.metadata["group"]) for n in got] == [(n.node_id, n.node.metadata["group"]) for n in sync]
    assert [n.score for n in got] == pytest.approx([n.score for n in sync], abs=1e-6)


# -- end to end -----------------------------------------------------------------------------------
def _check_groups(source_nodes, parsed_ids):
    assert source_nodes
    groups: dict[int, list] = {}
    for n in source_nodes:
        groups.setdefault(n.node.metadata["group"], []).append(n)
        assert n.node_id in parsed_ids
    order = [n.node.metadata["group"] for n in source_nodes]
    assert order == sorted(order)  # group by group
    for members in groups.values():
        assert [n.node.metadata["group_rank"] for n in members] == list(range(len(members)))
        scores = [n.score for n in members]
        assert scores == sorted(scores, reverse=True)
        assert len({n.node.metadata["group_query"] for n in members}) == 1
    return groups


async def test_pipeline_store_retriever_query_engine(index):
    docs = _documents()
    nodes = IngestionPipeline(transformations=[ContextualNodeParser.from_index(index)]).run(documents=docs)
    add_documents_to_index(index, docs)
    parsed = {n.node_id for n in nodes}
    assert parsed == set(_records(index))

    retriever = ContextualRetriever(index, similarity_top_k=3, score_threshold=None)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUERY)
    groups = _check_groups(response.source_nodes, parsed)
    assert set(groups) == {0, 1} and all(len(g) == 3 for g in groups.values())
    assert groups[0][0].node.metadata["ctxret:source_label"] == "Deploys › Rollback"
    assert groups[1][0].node.metadata["thread_id"] == "u1"
    assert isinstance(response.response, str)

    cutoff = 0.35
    filtered = RetrieverQueryEngine.from_args(
        retriever,
        llm=MockLLM(),
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=cutoff)],
    )
    kept = (await filtered.aquery(QUERY)).source_nodes
    _check_groups(kept, parsed)
    assert all(n.score >= cutoff for n in kept)
    assert 0 < len(kept) < len(response.source_nodes)


def test_hybrid_scores_are_named_and_ranked(tmp_path, local_embedder):
    """With the default hybrid search, NodeWithScore.score is the relevance; the ranking score is named in the
    metadata."""
    idx = ContextualIndex(tmp_path / "hy", embedder=local_embedder)
    add_documents_to_index(idx, _documents())
    nodes = ContextualRetriever(idx, similarity_top_k=3, score_threshold=None).retrieve(
        "How do I roll back a bad deploy?"
    )
    assert nodes
    for n in nodes:
        meta = n.node.metadata
        assert meta["score_scale"] == "relevance" and n.score == pytest.approx(meta["score_relevance"])
        assert "score_cosine" in meta and "score_bm25" in meta and "score_fused" in meta and "score_coverage" in meta
    fused = [n.node.metadata["score_fused"] for n in nodes if n.node.metadata["group"] == 0]
    assert fused == sorted(fused, reverse=True)  # the group's order is the fused ranking
