"""``ContextualStoreIndex`` keeps ``VectorStoreIndex``'s habits: ``node.ref_doc_id`` is the source Document's ``id_``,
``delete_ref_doc`` / ``refresh_ref_docs`` / ``ref_doc_info`` work by it, ``as_chat_engine`` (with LlamaIndex's own
``MockLLM``), and its standard keyword arguments are taken or refused saying what they are.

The document-id policy stays one across adapters: a Document whose ``id_`` nobody chose (LlamaIndex's random default)
is stored under the content id (a hash of title and text, as LangChain's and the core's), and its ``id_`` becomes that
id when it is indexed or parsed; an ``id_`` you chose (``Document(id_=...)``, ``filename_as_id=True``) is used as is.
"""

from __future__ import annotations

import uuid

import pytest
from ctxret import ContextualIndex, InputError
from ctxret.ingest.documents import document_id
from ctxret.storage.schema import Scope
from llama_index.core import Document, StorageContext
from llama_index.core.llms import MockLLM

from llamaindex_ctxret import ContextualNodeParser, ContextualStoreIndex

RUNBOOK = "Roll back a bad deploy with deploy.sh --rollback, then purge the CDN cache."
VET = "Biscuit's vaccinations are at the Green Paws clinic on Thursday."


@pytest.fixture
def store(local_embedder):
    s = ContextualStoreIndex(
        index=ContextualIndex(in_memory=True, collection=f"li-{uuid.uuid4().hex[:8]}", embedder=local_embedder)
    )
    yield s
    s.index.close()


def test_ref_doc_id_is_the_source_documents_id(store):
    docs = [Document(text=RUNBOOK), Document(text=VET, id_="vet-note")]
    random_id = docs[0].id_
    store.insert_documents(docs)
    assert docs[0].id_ == document_id(RUNBOOK) != random_id  # the content id: one policy with LangChain's
    assert docs[1].id_ == "vet-note"  # a chosen id is kept
    nodes = store.as_retriever(similarity_top_k=1, score_threshold=None).retrieve("How do I roll back a deploy?")
    assert nodes[0].node.ref_doc_id == docs[0].id_
    vet = store.as_retriever(similarity_top_k=1, score_threshold=None).retrieve("When are Biscuit's vaccinations?")
    assert vet[0].node.ref_doc_id == "vet-note"
    parsed = ContextualNodeParser().get_nodes_from_documents([Document(text=RUNBOOK)])
    assert {n.ref_doc_id for n in parsed} == {docs[0].id_}


def test_delete_refresh_and_info_by_the_documents_id(store):
    docs = [Document(text=RUNBOOK), Document(text=VET, id_="vet-note")]
    store.insert_documents(docs)
    info = store.ref_doc_info
    assert set(info) == {docs[0].id_, "vet-note"} and all(i.node_ids for i in info.values())
    stored = {r["id"] for r in store.index.store.records(("metadatas",), Scope(where={"doc_id": "vet-note"}))}
    assert set(info["vet-note"].node_ids) == stored
    edited = Document(text="Biscuit's vaccinations moved to Friday at the Green Paws clinic.", id_="vet-note")
    assert store.refresh_ref_docs([edited, docs[0]]) == [True, False]
    texts = [n.node.get_content() for n in store.as_retriever(score_threshold=None).retrieve("Biscuit vaccinations")]
    assert any("Friday" in t for t in texts) and not any("Thursday" in t for t in texts)
    before = store.index.store.count()
    assert store.delete_ref_doc(docs[0].id_) > 0
    assert store.index.store.count() < before and docs[0].id_ not in store.ref_doc_info


def test_the_same_text_through_both_adapters_is_one_document(store):
    from langchain_core.documents import Document as LCDocument

    from langchain_ctxret import ContextualRetriever

    lc = ContextualRetriever(index=store.index)
    [lc_id] = lc.add_documents([LCDocument(page_content=RUNBOOK)])
    n = store.index.store.count()
    li_doc = Document(text=RUNBOOK)
    store.insert(li_doc)
    assert li_doc.id_ == lc_id and store.index.store.count() == n  # nothing new: the same document
    assert store.delete_ref_doc(li_doc.id_) == n and store.index.store.count() == 0


def test_as_chat_engine_with_llamaindex_mock_llm(store):
    store.insert_documents([Document(text=RUNBOOK), Document(text=VET)])
    engine = store.as_chat_engine(llm=MockLLM(max_tokens=8), similarity_top_k=1, score_threshold=None)
    answer = engine.chat("How do I roll back a bad deploy?")
    assert answer.source_nodes and "rollback" in answer.source_nodes[0].node.get_content()
    follow_up = engine.chat("And then?")
    assert isinstance(follow_up.response, str)
    with pytest.raises(InputError, match="chat_mode"):
        store.as_chat_engine(llm=MockLLM(), chat_mode="react")


def test_standard_keyword_arguments(local_embedder):
    store = ContextualStoreIndex.from_documents(
        [Document(text=RUNBOOK)], show_progress=True, in_memory=True, embed_model=local_embedder
    )
    assert store.show_progress is True and store.index.store.count() > 0
    store.index.close()
    with pytest.raises(InputError, match="storage_context.*StorageContext"):
        ContextualStoreIndex.from_documents([Document(text=RUNBOOK)], storage_context=StorageContext.from_defaults())
    with pytest.raises(InputError, match="transformations.*ContextualIndexWriter"):
        ContextualStoreIndex.from_documents([Document(text=RUNBOOK)], transformations=[], in_memory=True)
    with pytest.raises(InputError, match="use_async"):
        ContextualStoreIndex.from_documents([Document(text=RUNBOOK)], use_async=True, in_memory=True)
