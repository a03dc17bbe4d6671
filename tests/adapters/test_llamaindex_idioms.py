"""What a LlamaIndex user reaches for first: MetadataFilters, an IngestionPipeline that stores, any
BaseEmbedding and Settings.embed_model, insert / delete_ref_doc / as_query_engine, postprocessors
as per-group rerankers, and a score a cutoff can use."""

from __future__ import annotations

import uuid

import pytest
from ctxret import ContextualIndex
from ctxret.errors import InputError
from llama_index.core import Document, Settings
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.ingestion import IngestionPipeline
from llama_index.core.llms import MockLLM
from llama_index.core.postprocessor import LongContextReorder, SimilarityPostprocessor
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llamaindex_ctxret import (
    ContextualIndexWriter,
    ContextualNodeParser,
    ContextualRetriever,
    ContextualStoreIndex,
    add_documents_to_index,
    metadata_filters_to_where,
)

DOCS = [
    Document(
        text="# Deploys\n## Rollback\nRun deploy.sh --rollback, then purge the CDN cache.\n"
        "## On call\nPriya Raman is on call for platform this week; Tomasz covers Thursday.\n",
        id_="runbook",
        metadata={"title": "Runbook", "team": "ops", "year": 2025},
    ),
    Document(
        text="Biscuit the dog has his vaccinations at the Green Paws vet clinic on Thursday.",
        id_="vet",
        metadata={"title": "Pets", "team": "home", "year": 2024},
    ),
    Document(
        text="The flight to Lisbon leaves Berlin at 09:40 on October 20 with TAP.",
        id_="flight",
        metadata={"title": "Travel", "team": "home", "year": 2026},
    ),
]
QUERY = "How do I roll back a bad deploy? When are Biscuit's vaccinations?"


def _index(embedder, **kw) -> ContextualIndex:
    return ContextualIndex(in_memory=True, collection=f"li-{uuid.uuid4().hex}", embedder=embedder, **kw)


@pytest.fixture
def filled(local_embedder) -> ContextualIndex:
    index = _index(local_embedder)
    add_documents_to_index(index, DOCS)
    return index


# -- MetadataFilters ----------------------------------------------------------------------------
def _f(key, value, op=FilterOperator.EQ):
    return MetadataFilter(key=key, value=value, operator=op)


def test_metadata_filters_translate_to_chroma_where():
    assert metadata_filters_to_where(MetadataFilters(filters=[_f("team", "ops")])) == {"team": {"$eq": "ops"}}
    ops = {
        FilterOperator.NE: "$ne",
        FilterOperator.GT: "$gt",
        FilterOperator.GTE: "$gte",
        FilterOperator.LT: "$lt",
        FilterOperator.LTE: "$lte",
    }
    for op, name in ops.items():
        assert metadata_filters_to_where(MetadataFilters(filters=[_f("year", 2025, op)])) == {"year": {name: 2025}}
    both = MetadataFilters(
        filters=[_f("team", ["ops", "home"], FilterOperator.IN), _f("year", [2024], FilterOperator.NIN)]
    )
    assert metadata_filters_to_where(both) == {"$and": [{"team": {"$in": ["ops", "home"]}}, {"year": {"$nin": [2024]}}]}
    nested = MetadataFilters(
        filters=[
            _f("team", "home"),
            MetadataFilters(filters=[_f("year", 2024), _f("year", 2026)], condition=FilterCondition.OR),
        ]
    )
    assert metadata_filters_to_where(nested) == {
        "$and": [{"team": {"$eq": "home"}}, {"$or": [{"year": {"$eq": 2024}}, {"year": {"$eq": 2026}}]}]
    }
    assert metadata_filters_to_where(MetadataFilters(filters=[])) is None
    with pytest.raises(InputError, match="text_match.*no Chroma equivalent"):
        metadata_filters_to_where(MetadataFilters(filters=[_f("team", "op", FilterOperator.TEXT_MATCH)]))
    with pytest.raises(InputError, match="'not'"):
        metadata_filters_to_where(MetadataFilters(filters=[_f("team", "ops")], condition=FilterCondition.NOT))


def test_retriever_takes_metadata_filters(filled):
    home = MetadataFilters(filters=[_f("team", "home")])
    nodes = ContextualRetriever(filled, similarity_top_k=3, score_threshold=None, filters=home).retrieve(QUERY)
    assert nodes and {n.node.metadata["team"] for n in nodes} == {"home"}
    recent = MetadataFilters(filters=[_f("year", 2025, FilterOperator.GTE)])
    nodes = ContextualRetriever(
        filled, similarity_top_k=3, score_threshold=None, filters=recent, where={"team": "home"}
    ).retrieve(QUERY)
    assert nodes and {n.node.metadata["doc_id"] for n in nodes} == {"flight"}  # filters AND where


# -- one pass: parse and store ---------------------------------------------------------------------
def test_ingestion_pipeline_parses_and_stores_in_one_run(local_embedder):
    index = _index(local_embedder)
    writer = ContextualIndexWriter(index)
    pipeline = IngestionPipeline(transformations=[ContextualNodeParser.from_index(index), writer])
    nodes = pipeline.run(documents=DOCS)
    stored = {r["id"] for r in index.store.records(())}
    assert nodes and {n.node_id for n in nodes} == stored  # the returned nodes are what is stored
    assert writer.last_result.added == len(nodes)
    reference = _index(local_embedder)
    add_documents_to_index(reference, DOCS)  # the same pieces as the two-step path
    assert stored == {r["id"] for r in reference.store.records(())}
    found = ContextualRetriever(index, similarity_top_k=1).retrieve("How do I roll back a bad deploy?")
    assert "rollback" in found[0].node.text
    again = IngestionPipeline(transformations=[ContextualNodeParser.from_index(index), writer], disable_cache=True)
    again.run(documents=DOCS)
    assert writer.last_result.added == 0 and writer.last_result.unchanged == len(nodes)  # nothing re-embedded
    assert writer.to_dict()["collection"] == index.store.collection_name


def test_the_writer_alone_parses_documents(local_embedder):
    index = _index(local_embedder)
    nodes = IngestionPipeline(transformations=[ContextualIndexWriter(index)]).run(documents=DOCS[1:])
    assert nodes and index.stats()["pieces"] == len(nodes)


# -- embeddings -------------------------------------------------------------------------------------
def test_any_base_embedding_and_settings_embed_model():
    index = _index(MockEmbedding(embed_dim=8))
    assert index.config.dims == 8 and index.config.model_id.startswith("llamaindex:MockEmbedding")
    before = Settings._embed_model
    try:
        Settings.embed_model = MockEmbedding(embed_dim=12)
        store = ContextualStoreIndex(in_memory=True, collection=f"s-{uuid.uuid4().hex}")
        assert store.index.config.dims == 12
        r = ContextualRetriever.from_path(in_memory=True, collection=f"s-{uuid.uuid4().hex}", similarity_top_k=2)
        assert r.index.config.dims == 12 and r.similarity_top_k == 2
        explicit = ContextualStoreIndex(
            in_memory=True, collection=f"s-{uuid.uuid4().hex}", embed_model=MockEmbedding(embed_dim=4)
        )
        assert explicit.index.config.dims == 4  # embed_model= beats Settings
    finally:
        Settings._embed_model = before


# -- insert / delete_ref_doc / as_query_engine ------------------------------------------------------
def test_store_index_insert_delete_and_query_engine(local_embedder):
    store = ContextualStoreIndex.from_documents(DOCS[:2], index=_index(local_embedder))
    assert store.insert(DOCS[2]) == "flight"
    anon = Document(text="The boiler is serviced every May.")
    ref = store.insert(anon)
    assert ref.startswith("doc-") and store.index.stats()["pieces"] > 0
    assert store.delete_ref_doc(ref) == 1
    assert store.delete_ref_doc("flight") == 1
    assert store.delete_ref_doc("no-such-doc") == 0
    engine = store.as_query_engine(llm=MockLLM(), similarity_top_k=2, score_threshold=None)
    response = engine.query(QUERY)
    assert str(response)  # MockLLM echoes its prompt
    groups = {n.node.metadata["group"] for n in response.source_nodes}
    assert groups == {0, 1} and all(0.0 <= n.score <= 1.0 for n in response.source_nodes)
    assert "flight" not in {n.node.metadata.get("doc_id") for n in response.source_nodes}


def test_delete_ref_doc_with_a_thread_deletes_only_that_thread_s_document(local_embedder):
    """A document id can be stored in two threads (each user's ``notes``): ``thread_id=`` deletes one
    thread's copy and leaves the other's; without it both go, as the id names them both."""
    store = ContextualStoreIndex(index=_index(local_embedder))
    for who, text in (("alice", "Alice's locker code is 4412."), ("bob", "Bob parks on level 3.")):
        assert store.insert(Document(text=text, id_="notes", metadata={"thread_id": who})) == "notes"
    assert store.delete_ref_doc("notes", thread_id="bob") > 0
    left = store.index.store.records(("metadatas", "documents"))
    assert {(r["metadata"]["thread_id"], r["document"].endswith("4412.")) for r in left} == {("alice", True)}
    assert store.delete_ref_doc("notes") > 0 and store.index.stats()["pieces"] == 0


# -- rerank: node postprocessors, per group -------------------------------------------------------------
class ReverseRerank(BaseNodePostprocessor):
    """Reverses the nodes and gives them new scores, as a cross-encoder reranker would."""

    calls: list = []

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        type(self).calls.append((query_bundle.query_str, len(nodes)))
        return [NodeWithScore(node=n.node, score=100.0 - i) for i, n in enumerate(reversed(nodes))]


def test_a_postprocessor_reranks_inside_each_group(filled):
    ReverseRerank.calls = []
    plain = ContextualRetriever(filled, similarity_top_k=3, score_threshold=None).retrieve(QUERY)
    nodes = ContextualRetriever(
        filled, similarity_top_k=3, score_threshold=None, rerank=ReverseRerank(), rerank_candidates=3
    ).retrieve(QUERY)
    parts = list(dict.fromkeys(n.node.metadata["group_query"] for n in plain))
    assert [q for q, _ in ReverseRerank.calls] == parts and all(n == 3 for _, n in ReverseRerank.calls)
    ranked = filled.search(QUERY, k=3, score_threshold=None)  # the ranking order the postprocessor gets
    for g in (0, 1):
        mine = [n for n in nodes if n.node.metadata["group"] == g]
        base = [n for n in plain if n.node.metadata["group"] == g]
        assert [n.node.node_id for n in mine] == [h.id for h in reversed(ranked[g].hits)]
        assert {n.node.node_id for n in mine} == {n.node.node_id for n in base}
        assert [n.node.metadata["score_rerank"] for n in mine] == [100.0, 99.0, 98.0]
        # as after LlamaIndex's own rerankers, NodeWithScore.score is the reranker's (the order shown);
        # the relevance stays in the metadata
        assert [n.score for n in mine] == [100.0, 99.0, 98.0]
        assert all(n.node.metadata["score_scale"] == "rerank" for n in mine)
        assert all(0.0 <= n.node.metadata["score_relevance"] <= 1.0 for n in mine)


def test_builtin_postprocessors_as_rerankers(filled):
    plain = ContextualRetriever(filled, similarity_top_k=5, score_threshold=None).retrieve(QUERY)
    cut = 0.3
    kept = ContextualRetriever(
        filled, similarity_top_k=5, score_threshold=None, rerank=SimilarityPostprocessor(similarity_cutoff=cut)
    ).retrieve(QUERY)
    assert 0 < len(kept) < len(plain)
    assert {n.node.node_id for n in kept} == {n.node.node_id for n in plain if n.score >= cut}
    reordered = ContextualRetriever(
        filled, similarity_top_k=5, score_threshold=None, rerank=LongContextReorder()
    ).retrieve(QUERY)
    for g in (0, 1):  # the group is ordered by the scores it returned: the relevance
        scores = [n.score for n in reordered if n.node.metadata["group"] == g]
        assert scores == sorted(scores, reverse=True)
    with pytest.raises(InputError, match="BaseNodePostprocessor or a callable"):
        ContextualRetriever(filled, rerank="cross-encoder")


def test_a_similarity_cutoff_means_the_same_in_a_small_and_a_large_store(local_embedder):
    small = _index(local_embedder)
    add_documents_to_index(small, DOCS)
    large = _index(local_embedder)
    notes = [Document(text=f"Meeting note {i}: the budget review moved to room {i}.", id_=f"m{i}") for i in range(30)]
    add_documents_to_index(large, DOCS + notes)
    q = "Who is on call for platform this week?"

    def scored(index):
        return {
            n.node.node_id: n.score
            for n in ContextualRetriever(index, similarity_top_k=3, score_threshold=None).retrieve(q)
        }

    a, b = scored(small), scored(large)
    top = max(a, key=a.get)
    assert a[top] > 0.5 and "Priya" in small.store.chroma.get([top], include=("documents",))[0]["document"]
    assert top in b and b[top] == pytest.approx(a[top], abs=1e-6)
