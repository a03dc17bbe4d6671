"""``ContextualVectorStore`` keeps langchain-chroma's habits: distances from ``similarity_search_with_score`` (lower
first), relevance from ``..._with_relevance_scores``, searches by vector, ``as_retriever()`` returning the documents as
added, and langchain-chroma's constructor names. The grouped retriever is one call away (``as_grouped_retriever``)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from langchain_core.documents import Document
from langchain_core.vectorstores import VectorStoreRetriever

from langchain_ctxret import ContextualRetriever, ContextualVectorStore, CtxretEmbeddings

NOTES = {
    "flight": "The flight to Lisbon leaves Berlin at 09:40 on October 20 with TAP.",
    "hotel": "The hotel in Lisbon is in Alfama; checkout is at 11:00.",
    "vet": "Biscuit the dog has his vaccinations at the Green Paws vet clinic on Thursday.",
    "cat": "Luna the cat has a dental check at the vet on Monday morning.",
    "cake": "Maya's chocolate birthday cake bakes at 175 C for 35 minutes.",
    "deploy": "The Postgres 16 migration failed with a lock timeout during the deploy.",
}


@pytest.fixture
def store(local_embedder):
    docs = [Document(page_content=t, metadata={"topic": k}, id=k) for k, t in NOTES.items()]
    s = ContextualVectorStore.from_documents(
        docs, CtxretEmbeddings(local_embedder), in_memory=True, collection=f"habits-{uuid.uuid4().hex}"
    )
    yield s
    s.index.close()


def _cosines(store: ContextualVectorStore, query: str) -> dict[str, float]:
    """Each document's cosine to the query's vector, from the stored vectors themselves (the reference)."""
    q = np.asarray(store.embeddings.embed_query(query), dtype=np.float64)
    out: dict[str, float] = {}
    for r in store.index.store.records(("metadatas", "embeddings"), None):
        v = np.asarray(r["embedding"], dtype=np.float64)
        cos = float(q @ v / (np.linalg.norm(q) * np.linalg.norm(v)))
        doc = str(r["metadata"]["doc_id"])
        out[doc] = max(out.get(doc, -1.0), cos)
    return out


def test_similarity_search_with_score_returns_distances_lower_first(store):
    query = "When does the flight to Lisbon leave?"
    found = store.similarity_search_with_score(query, k=3)
    distances = [d for _, d in found]
    assert distances == sorted(distances) and len(found) == 3
    assert found[0][0].id == "flight"
    reference = _cosines(store, query)
    for doc, distance in found:
        assert distance == pytest.approx(1.0 - reference[doc.id], abs=1e-4)  # Chroma's cosine distance
        assert not doc.page_content.startswith("[")


def test_relevance_scores_are_relevance_higher_first(store):
    found = store.similarity_search_with_relevance_scores("Biscuit's vaccinations", k=3)
    scores = [s for _, s in found]
    assert found[0][0].id == "vet" and all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] == max(scores)
    by_distance = dict((d.id, s) for d, s in store.similarity_search_with_score("Biscuit's vaccinations", k=3))
    assert by_distance["vet"] != pytest.approx(found[0][1])  # two scales, two names


def test_searches_by_vector(store):
    vector = store.embeddings.embed_query("a birthday cake in the oven")
    docs = store.similarity_search_by_vector(vector, k=2)
    assert [d.id for d in docs][0] == "cake" and len(docs) == 2
    assert docs[0] == Document(page_content=NOTES["cake"], metadata={"topic": "cake"}, id="cake")
    scored = store.similarity_search_by_vector_with_relevance_scores(vector, k=2)
    assert [d.id for d, _ in scored] == [d.id for d in docs]
    assert store.similarity_search_by_vector(vector, k=2, filter={"topic": "deploy"})[0].id == "deploy"
    mmr = store.max_marginal_relevance_search_by_vector(
        store.embeddings.embed_query("Lisbon"), k=2, fetch_k=6, lambda_mult=0.5
    )
    assert len(mmr) == 2 and len({d.id for d in mmr}) == 2
    with pytest.raises(ValueError, match="dimensions"):
        store.similarity_search_by_vector([0.1, 0.2], k=1)


def test_as_retriever_returns_the_documents_as_added(store):
    retriever = store.as_retriever(search_kwargs={"k": 2})
    assert isinstance(retriever, VectorStoreRetriever)
    docs = retriever.invoke("When does my flight to Lisbon leave? When is the vet appointment for my pets?")
    assert len(docs) == 2 and {d.id for d in docs} <= set(NOTES)
    assert all(d.page_content == NOTES[d.id] and d.metadata == {"topic": d.id} for d in docs)
    threshold = store.as_retriever(search_type="similarity_score_threshold", search_kwargs={"score_threshold": 0.99})
    assert all(d.id in NOTES for d in threshold.invoke("Lisbon flight"))
    mmr = store.as_retriever(search_type="mmr", search_kwargs={"k": 2, "fetch_k": 4}).invoke("Lisbon")
    assert len(mmr) == 2
    grouped = store.as_grouped_retriever(search_kwargs={"k": 1})
    assert isinstance(grouped, ContextualRetriever) and "ContextualVectorStore" in grouped.tags
    parts = grouped.invoke("When does my flight to Lisbon leave? When is the vet appointment for my pets?")
    assert sorted({d.metadata["group"] for d in parts}) == [0, 1]


def test_langchain_chroma_constructor_names(tmp_path, local_embedder):
    import chromadb
    from chromadb.config import Settings

    emb = CtxretEmbeddings(local_embedder)
    on_disk = ContextualVectorStore(
        collection_name="chroma-names", persist_directory=str(tmp_path / "db"), embedding_function=emb
    )
    on_disk.add_texts(["The flight to Lisbon leaves at 09:40."], ids=["flight"])
    assert on_disk.index.store.collection_name == "chroma-names"
    assert (tmp_path / "db").is_dir() and on_disk.similarity_search("flight", k=1)[0].id == "flight"
    on_disk.index.close()
    # the settings every test uses: a process has one ephemeral Chroma system
    client = chromadb.EphemeralClient(Settings(anonymized_telemetry=False))
    with_client = ContextualVectorStore(client=client, collection_name="chroma-client", embedding_function=emb)
    with_client.add_texts(["Biscuit's vaccinations are on Thursday."], ids=["vet"])
    assert client.get_collection("chroma-client").count() > 0
    positional = ContextualVectorStore("chroma-positional", emb, in_memory=True)  # Chroma(collection_name, embedding)
    assert positional.index.store.collection_name == "chroma-positional"
    with pytest.raises(Exception, match="collection_name.*collection"):
        ContextualVectorStore(collection_name="a-b-c", collection="d-e-f", embedding_function=emb, in_memory=True)
    with pytest.raises(Exception, match="client_settings"):
        ContextualVectorStore(client_settings=Settings(), embedding_function=emb, in_memory=True)
