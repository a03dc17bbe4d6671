"""LangChain's standard vector store suite (``VectorStoreIntegrationTests``) on ContextualVectorStore.

The suite's own embeddings (``DeterministicFakeEmbedding``, 6 numbers, random per text) go in as
they are: ``ContextualIndex`` wraps any LangChain ``Embeddings``. Every test gets a fresh
in-memory index (a unique collection). With random vectors the suite's expected order comes from
the hybrid search's BM25 side, which every in-memory store has.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator

import pytest
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests import VectorStoreIntegrationTests

from langchain_ctxret import ContextualVectorStore


class TestContextualVectorStoreStandard(VectorStoreIntegrationTests):
    @pytest.fixture
    def vectorstore(self) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        store = ContextualVectorStore(
            embedding=self.get_embeddings(), in_memory=True, collection=f"vs-{uuid.uuid4().hex}"
        )
        try:
            yield store
        finally:
            store.index.close()
