"""HyDE per part: each part's query vector is blended with its hypothetical answer's, as specified."""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest
from ctxret import InputError, SearchSettings
from ctxret.blend import blend_with_context
from ctxret.query.hyde import llm_hyde
from ctxret.query.vectors import query_vectors
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from llama_index.core.llms import MockLLM
from sample_threads import FLIGHT_AND_VET as MESSAGES

from langchain_ctxret import ContextualRetriever
from llamaindex_ctxret import ContextualRetriever as LlamaRetriever

MESSAGE = "When does my flight to Lisbon leave? And when is the vet appointment for my dog?"
ANSWERS = {
    "When does my flight to Lisbon leave?": "Your TAP flight to Lisbon departs at 09:40.",
    "And when is the vet appointment for my dog?": "The vet appointment is on Thursday afternoon.",
}


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # HyDE's blend is checked against the real model's vectors


@pytest.fixture
def index(open_index):
    """A fresh index per test, closed by ``open_index``."""
    ix = open_index(in_memory=True, collection=f"h-{uuid.uuid4().hex[:10]}")
    ix.add_messages(MESSAGES, "u1")
    return ix


def spy_dense(index, monkeypatch):
    """Record the query vectors every dense search of a thread-scoped search is given."""
    seen: list[np.ndarray] = []
    resolve = index.store.resolve

    def spying(scope):
        dense, lexical = resolve(scope)
        inner = dense.dense

        def dense_fn(vectors, n, s):
            seen.append(np.array(vectors))
            return inner(vectors, n, s)

        monkeypatch.setattr(dense, "dense", dense_fn)
        return dense, lexical

    monkeypatch.setattr(index.store, "resolve", spying)
    return seen


@pytest.mark.parametrize("weight", [0.5, 0.8, 1.0])
def test_hyde_blends_each_part_with_its_answer(index, monkeypatch, local_embedder, weight):
    seen = spy_dense(index, monkeypatch)
    groups = index.search(MESSAGE, thread_id="u1", lexical=False, hyde=ANSWERS.get, hyde_weight=weight)
    assert groups[0].stages == ("embed", "dense", "hyde", "latest")  # an agent's memory: the user's word first
    parts, plain = query_vectors(local_embedder, MESSAGE, weight=0.8)
    assert [g.part for g in groups] == parts
    first, second = seen  # the plain vectors (dense), then the blended ones (hyde)
    np.testing.assert_allclose(first, plain, atol=1e-5)
    answers = local_embedder.embed([ANSWERS[p] for p in parts])
    expected = np.stack([blend_with_context(plain[i], answers[i], weight) for i in range(len(parts))])
    np.testing.assert_allclose(second, expected, atol=1e-5)
    if weight == 1.0:
        np.testing.assert_allclose(second, plain, atol=1e-5)
    else:
        assert not np.allclose(second, plain, atol=1e-3)


def test_an_empty_answer_keeps_the_part_vector(index, monkeypatch, local_embedder):
    seen = spy_dense(index, monkeypatch)
    index.search(MESSAGE, thread_id="u1", lexical=False, hyde=lambda p: "" if "flight" in p else ANSWERS[p])
    plain, hyde = seen
    np.testing.assert_allclose(hyde[0], plain[0], atol=1e-6)
    assert not np.allclose(hyde[1], plain[1], atol=1e-3)


def test_frameworks_llms_are_taken_directly(index):
    # LangChain: through the retriever's search_kwargs, one LLM call per part
    responses = [*ANSWERS.values(), "unused"]  # the fakes cycle: a third answer makes the count visible
    for llm in (FakeListLLM(responses=responses), FakeListChatModel(responses=responses)):
        retriever = ContextualRetriever(
            index=index, k=2, thread_id="u1", search_kwargs={"hyde": llm, "deadline_ms": 30_000}
        )
        docs = retriever.invoke(MESSAGE)
        assert llm.i == 2 and docs and {d.metadata["group"] for d in docs} == {0, 1}
    # LlamaIndex MockLLM (it echoes the prompt), sync and async
    retriever = LlamaRetriever(index, similarity_top_k=2, thread_id="u1", search_kwargs={"hyde": MockLLM()})
    assert retriever.retrieve(MESSAGE)
    assert asyncio.run(retriever.aretrieve(MESSAGE))
    assert isinstance(SearchSettings(hyde=MockLLM()).hyde, llm_hyde)


def test_hyde_errors(index):
    with pytest.raises(InputError, match="hyde must"):
        SearchSettings(hyde="not a function")
    with pytest.raises(InputError, match="hyde_weight"):
        index.search(MESSAGE, hyde=ANSWERS.get, hyde_weight=1.5)
    with pytest.raises(InputError, match="as a str"):
        index.search(MESSAGE, thread_id="u1", hyde=lambda p: 42)
