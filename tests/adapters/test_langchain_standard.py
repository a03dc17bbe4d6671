"""LangChain's standard retriever suite (``RetrieversIntegrationTests``) on ContextualRetriever.

Every construction builds a fresh in-memory index (a unique Chroma collection: EphemeralClient
instances share state inside one process) holding 12 one-piece documents, all in scope. The
example query is a single sentence, so one part and one group: exactly ``k`` Documents come back
with the floor disabled (``score_threshold=None``).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from ctxret.index import ContextualIndex
from ctxret.query.split import split_prompt_chunks
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_ctxret import ContextualRetriever

CORPUS = [
    "The flight to Lisbon leaves Berlin at 09:40 on October 20 with TAP.",
    "The return flight from Lisbon lands in Berlin on October 27 at 18:05.",
    "Biscuit the dog has his vaccinations at the Green Paws vet clinic on Thursday.",
    "The Postgres 16 migration failed with a lock timeout during the deploy.",
    "Maya's chocolate birthday cake bakes at 175 C for 35 minutes.",
    "The passport expires in March and must be renewed in January.",
    "The hotel in Lisbon is in Alfama, checkout is at 11:00.",
    "Rent is due on the first of each month by bank transfer.",
    "The team retrospective moved to Friday afternoon at 3 PM.",
    "Luna the cat has a dental check at the vet on Monday morning.",
    "The car needs new winter tyres before November.",
    "The Lisbon airport train to the city centre takes 25 minutes.",
]
QUERY = "When does my flight to Lisbon leave?"


class TestContextualRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _embedder(self, local_embedder) -> None:
        # Autouse fixtures run before the suite's ``retriever`` fixture: the properties can use it.
        type(self).embedder = local_embedder

    @property
    def retriever_constructor(self) -> type[ContextualRetriever]:
        return ContextualRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        index = ContextualIndex(in_memory=True, collection=f"std-{uuid.uuid4().hex}", embedder=self.embedder)
        retriever = ContextualRetriever(index=index)
        docs = [Document(page_content=text, id=f"note-{i}") for i, text in enumerate(CORPUS)]
        assert retriever.add_documents(docs) == [d.id for d in docs]
        return {"index": index, "k": 3, "score_threshold": None}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


def test_example_query_is_one_part():
    # The suite counts Documents; a second part would double them.
    assert split_prompt_chunks(QUERY) == [QUERY]
