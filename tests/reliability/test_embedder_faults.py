"""Embedders that misbehave: what they raise reaches the caller as ``EmbeddingError`` naming them (the cause kept),
through every write and search; a write whose embedder hangs gives up after ``embed_timeout`` and stores nothing.

The defects: an embedder's own exception (a LangChain model's ``openai.InternalServerError``, a ``RuntimeError`` of a
model runtime) came through ``add_messages``, ``add_documents``, ``search`` and ``asearch`` as it was, and an embedder
that never answered held a write forever. The OpenAI-backed embeddings here are a LangChain ``Embeddings`` written the
way users write one, with the real ``openai`` client talking to the local OpenAI-compatible server, which fails or
hangs on demand.
"""

from __future__ import annotations

import asyncio
import math
import threading

import openai
import pytest
from ctxret import ContextualIndex
from ctxret.embedders.guard import DEFAULT_EMBED_TIMEOUT, embed_timeout_of, guarded
from ctxret.embedders.local import LocalEmbedder
from ctxret.embedders.openai import OpenAIEmbedder
from ctxret.errors import EmbeddingError, InputError
from langchain_core.embeddings import Embeddings

from .hash_embedder import HashEmbedder


class UserOpenAIEmbeddings(Embeddings):
    """A LangChain ``Embeddings`` over the ``openai`` client, as users write one (no retries of its own)."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        self.client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=timeout)
        self.model = "text-embedding-3-small"

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        answer = self.client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        return [d.embedding for d in answer.data]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


class Crashing(HashEmbedder):
    """A model runtime that crashes once ``broken`` is set (sync and async)."""

    broken = False

    def embed(self, texts):
        if self.broken:
            raise RuntimeError("the model runtime crashed")
        return super().embed(texts)

    async def aembed(self, texts):
        return self.embed(texts)


class Hanging(HashEmbedder):
    """Never answers a write once ``stuck`` is set, until ``release`` is; ``returned`` once it has answered."""

    def __init__(self) -> None:
        self.stuck = False
        self.release, self.returned = threading.Event(), threading.Event()

    def embed(self, texts):
        if self.stuck:
            self.release.wait(60)
            self.returned.set()
        return super().embed(texts)


CHAT = [
    {"role": "user", "content": "The budget review moved to Friday."},
    {"role": "assistant", "content": "Noted: the budget review is on Friday."},
]
DOC = {"id": "plan.md", "text": "# Plan\nShip the release on Monday.\n## Risks\nThe vendor may be late."}


def writes_and_searches(index: ContextualIndex):
    """Every entry point that calls the embedder, by name."""
    return {
        "add_messages": lambda: index.add_messages(CHAT, thread_id="chat-2"),
        "add_documents": lambda: index.add_documents([DOC]),
        "search": lambda: index.search("budget review", thread_id="chat"),
        "unscoped search": lambda: index.search("budget review"),
        "asearch": lambda: asyncio.run(index.asearch("budget review", thread_id="chat")),
    }


def test_a_crashing_embedder_is_an_embedding_error_naming_it_everywhere(tmp_path):
    emb = Crashing()
    index = ContextualIndex(tmp_path / "store", embedder=emb, progress=False)
    index.add_messages(CHAT, thread_id="chat")
    before = index.store.count()
    emb.broken = True
    for name, call in writes_and_searches(index).items():
        with pytest.raises(EmbeddingError, match=r"Crashing \(test-hash-64\).*RuntimeError: the model runtime") as e:
            call()
        assert isinstance(e.value.__cause__, RuntimeError), name
    assert index.store.count() == before == index.store.lexical.count()
    emb.broken = False
    assert index.search("budget review", thread_id="chat")[0].hits  # the index works again
    index.close()


def test_a_langchain_model_whose_service_fails_is_an_embedding_error_with_the_service_error_as_cause(
    tmp_path, fake_openai
):
    index = ContextualIndex(tmp_path / "store", embedder=UserOpenAIEmbeddings(fake_openai.url), progress=False)
    index.add_messages(CHAT, thread_id="chat")
    before = index.store.count()
    fake_openai.fail_always(500)
    named = r"LangChainEmbedder \(langchain:UserOpenAIEmbeddings:.*InternalServerError"
    for call in writes_and_searches(index).values():
        with pytest.raises(EmbeddingError, match=named):
            call()
    with pytest.raises(EmbeddingError) as e:
        index.add_documents([DOC])
    assert isinstance(e.value.__cause__, openai.InternalServerError)
    assert index.store.count() == before == index.store.lexical.count()
    fake_openai.reset()
    assert index.add_documents([DOC]).added  # the same call once the service is back
    index.close()


def test_a_write_whose_embedder_hangs_gives_up_after_embed_timeout_and_stores_nothing(tmp_path):
    emb = Hanging()
    index = ContextualIndex(tmp_path / "store", embedder=emb, progress=False, embed_timeout=0.5)
    index.add_messages(CHAT, thread_id="chat")
    before = (index.store.count(), index.store.lexical.count())
    emb.stuck = True
    with pytest.raises(EmbeddingError, match=r"Hanging \(test-hash-64\) did not answer embed\(\) within 0.5 s") as e:
        index.add_documents([DOC])
    assert e.value.written.turns == 0  # what the call stored: nothing
    emb.release.set()  # the abandoned call answers now: its answer is thrown away
    assert emb.returned.wait(60)
    index.add_messages(CHAT, thread_id="chat")  # a later write (the lock is free, no late batch sneaks in)
    assert (index.store.count(), index.store.lexical.count()) == before
    assert not any(g.hits for g in index.search("vendor release", score_threshold=None, thread_id="plan.md"))
    index.close()


def test_a_langchain_model_whose_service_hangs_gives_up_after_embed_timeout(tmp_path, fake_openai):
    index = ContextualIndex(
        tmp_path / "store", embedder=UserOpenAIEmbeddings(fake_openai.url), progress=False, embed_timeout=1
    )
    fake_openai.inject_always("hang", seconds=4)
    with pytest.raises(EmbeddingError, match="did not answer embed\\(\\) within 1 s"):
        index.add_documents([DOC])
    assert index.store.count() == 0
    index.close()


def test_embed_timeout_defaults_and_checks():
    assert embed_timeout_of(HashEmbedder()) == DEFAULT_EMBED_TIMEOUT  # an embedder that does not say
    assert embed_timeout_of(HashEmbedder(), 2) == 2.0
    assert embed_timeout_of(HashEmbedder(), math.inf) is None
    assert LocalEmbedder.capabilities.embed_timeout is None and OpenAIEmbedder.capabilities.embed_timeout is None
    for bad in (0, -1, "10", True, math.nan):
        with pytest.raises(InputError, match="embed_timeout must be a number of seconds"):
            embed_timeout_of(HashEmbedder(), bad)
    with pytest.raises(InputError, match="embed_timeout"):
        ContextualIndex(in_memory=True, embedder=HashEmbedder(), embed_timeout=-3)


def test_the_guard_keeps_the_embedders_own_errors_and_attributes():
    emb = HashEmbedder()
    guard = guarded(emb, 5.0)
    assert guarded(guard, 5.0) is guard and guarded(guard).guarded_embedder is emb
    assert (guard.model_id, guard.dims, guard.max_tokens) == (emb.model_id, emb.dims, emb.max_tokens)
    assert not hasattr(guard, "embed_tokens")  # late chunking asks: the hash model has no token pass
    assert guard.embed(["alpha"]).shape == (1, emb.dims)
    assert asyncio.run(guard.aembed(["alpha"])).shape == (1, emb.dims)
