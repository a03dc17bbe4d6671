"""Tenant safety: 1,200 random thread-scoped searches over 24 threads with colliding document ids.

Every thread holds documents named like every other thread's (``notes.md``, ``todo.md``), a
document whose id is another thread's id, and a chat; each text carries its thread's secret. Searches
go through the core (sync and async), LangChain and LlamaIndex, dense and hybrid, with and without
parents, ``where`` filters and several thread ids. No hit, and no parent text, may come from
outside the scope.
"""

from __future__ import annotations

import asyncio
import random
import re

import pytest
from ctxret import ContextualIndex
from ctxret.evaluation.embedding import CachedEmbedder
from langchain_core.documents import Document as LCDocument

from langchain_ctxret import ContextualRetriever as LCRetriever
from llamaindex_ctxret import ContextualRetriever as LIRetriever

pytestmark = pytest.mark.slow

THREADS = [f"tenant-{i:02d}" for i in range(24)]
SECRET = re.compile(r"secret-tenant-\d\d")
SEARCHES = 1200


@pytest.fixture(scope="module")
def tenants(tmp_path_factory, local_embedder):
    emb = CachedEmbedder(local_embedder)  # repeated query texts are embedded once
    index = ContextualIndex(tmp_path_factory.mktemp("leaks") / "store", embedder=emb, progress=False)
    lc = LCRetriever(index=index)
    for i, t in enumerate(THREADS):
        other = THREADS[(i + 1) % len(THREADS)]
        index.add_documents(
            [
                {
                    "id": "notes.md",
                    "text": f"# Notes\nMeeting notes of {t}: secret-{t} is the vault code.\n"
                    f"## Budget\nBudget for {t} is {i} thousand.",
                },
                {"id": "todo.md", "text": f"# Todo\nCall the bank about secret-{t}. Renew the lease."},
                {"id": other, "text": f"# About {other}\nA page {t} wrote about {other}; it mentions secret-{t} only."},
            ],
            thread_id=t,
            metadata={"team": "red" if i % 2 else "blue"},
        )
        index.add_messages(
            [
                {"role": "user", "content": f"What is my vault code? I am {t}."},
                {"role": "assistant", "content": f"Your vault code is secret-{t}; keep it private."},
            ],
            thread_id=t,
        )
        lc.add_documents(
            [LCDocument(page_content=f"Shared doc title, secret-{t} inside.", metadata={"title": "shared"})],
            thread_id=t,
        )
    return index


def _queries(rng: random.Random) -> str:
    words = ["vault code", "meeting notes", "budget", "call the bank", "lease", "page about", "shared doc"]
    target = rng.choice(THREADS)
    return rng.choice(
        [f"What is the {rng.choice(words)}?", f"secret-{target} {rng.choice(words)}", f"{target} notes. And the lease?"]
    )


def _check(hits, scope: set[str], label: str) -> int:
    for thread, text, parent in hits:
        assert thread in scope, f"{label}: a hit from {thread} outside {scope}"
        for blob in (text, parent or ""):
            leaked = {s.removeprefix("secret-") for s in SECRET.findall(blob)} - scope
            assert not leaked, f"{label}: text of {leaked} inside a search of {scope}: {blob[:120]!r}"
    return len(hits)


def test_no_hit_or_parent_crosses_a_thread(tenants):
    index = tenants
    rng = random.Random(7)
    lc, li = LCRetriever(index=index), LIRetriever(index)
    seen = searches = 0
    for n in range(SEARCHES):
        message = _queries(rng)
        scope = set(rng.sample(THREADS, rng.choice([1, 1, 1, 2, 3])))
        thread_id = next(iter(scope)) if len(scope) == 1 and rng.random() < 0.5 else sorted(scope)
        options = {
            "k": rng.choice([1, 3, 5]),
            "score_threshold": None,
            "lexical": rng.random() < 0.6,
            "parents": rng.random() < 0.4,
        }
        where = {"team": rng.choice(["red", "blue"])} if rng.random() < 0.2 else None
        via = n % 4
        if via == 0:
            groups = index.search(message, thread_id=thread_id, where=where, **options)
            hits = [(h.metadata["thread_id"], h.text, h.parent_text) for g in groups for h in g.hits]
        elif via == 1:
            groups = asyncio.run(index.asearch(message, thread_id=thread_id, where=where, **options))
            hits = [(h.metadata["thread_id"], h.text, h.parent_text) for g in groups for h in g.hits]
        elif via == 2:
            k = options.pop("k")
            threshold = options.pop("score_threshold")
            docs = lc.invoke(
                message, k=k, score_threshold=threshold, thread_id=thread_id, where=where, search_kwargs=options
            )
            hits = [(d.metadata["thread_id"], d.page_content, d.metadata.get("parent_text")) for d in docs]
        else:
            k = options.pop("k")
            options.pop("score_threshold")
            retriever = LIRetriever(
                index, similarity_top_k=k, score_threshold=None, thread_id=thread_id, where=where, search_kwargs=options
            )
            nodes = retriever.retrieve(message)
            hits = [
                (nd.node.metadata["thread_id"], nd.node.get_content(), nd.node.metadata.get("parent_text"))
                for nd in nodes
            ]
        seen += _check(hits, scope, f"search {n} via {['core', 'async', 'langchain', 'llamaindex'][via]}")
        searches += 1
    assert searches == SEARCHES and seen > SEARCHES  # the searches found things, none outside their scope
    del li
