"""The one search loop: the sync and async drivers run the same stages and record them the same way;
a search splits its message once; a search from vectors made already runs the product's schedule."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from ctxret.query import vectors as query_vectors_module
from ctxret.query.deadline import run_search
from ctxret.query.executor import QueryVectors, store_backends
from ctxret.storage.schema import Scope
from sample_threads import GARDEN, thread

WORK = thread(
    [
        ("The release of version 2.4 moves to Friday after the billing fix.", "Release 2.4 on Friday, after billing."),
        ("Priya owns the billing service and reviews its changes.", "Priya is the billing owner."),
    ]
)
MESSAGE = "When is the dentist? And what colour for the kitchen cabinets? Who owns billing?"


# the shared ``index`` with the hashing embedder: these tests compare two drivers of one loop, not rankings
@pytest.fixture(scope="module")
def index_options():
    return {"in_memory": True, "collection": f"x-{uuid.uuid4().hex[:10]}"}


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages(GARDEN, thread_id="garden")
        ix.add_messages(WORK, thread_id="work")

    return fill


def record(groups):
    """Everything a search returns: the hits whole, and each group's record of stages."""
    return [
        (
            g.part_index,
            g.part,
            g.stages,
            g.skipped,
            g.degraded,
            [(h.id, h.text, h.score, dict(h.scores), dict(h.stored), h.parent_text) for h in g.hits],
        )
        for g in groups
    ]


def broken_hyde(part: str) -> str:
    raise RuntimeError("LLM quota exceeded")


SEARCHES = [
    {"thread_id": "garden"},
    {},
    {"lexical": False},
    {"thread_id": ["garden", "work"], "parents": True},
    {"hyde": lambda part: f"The answer to: {part}"},
    {"mmr": True, "k": 2},
    {"score_threshold": None, "k": 3, "deadline_ms": 60_000},
    {"hyde": broken_hyde, "deadline_ms": 60_000},  # an optional stage's error under a deadline: skipped, logged
]


@pytest.mark.parametrize("options", SEARCHES, ids=lambda o: ",".join(sorted(o)) or "unscoped")
def test_sync_and_async_give_the_same_groups_and_stage_records(index, options, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="ctxret.query.executor"):
        sync = index.search(MESSAGE, **options)
        asynchronous = asyncio.run(index.asearch(MESSAGE, **options))
    assert record(sync) == record(asynchronous)
    assert sync and all(g.stages[:2] == ("embed", "dense") for g in sync)
    if options.get("hyde") is broken_hyde:
        assert all(g.skipped == ("hyde",) and g.degraded for g in sync)
        assert caplog.text.count("LLM quota exceeded") == 2  # once per search
    else:
        assert not any(g.degraded for g in sync)


@pytest.mark.parametrize("options", [{"thread_id": "garden"}, {"hyde": lambda part: "On Thursday."}, {}])
def test_a_search_splits_its_message_once(index, monkeypatch, options) -> None:
    calls: list[str] = []
    split = query_vectors_module.split_prompt_chunks

    def counting(message, *args, **kwargs):
        calls.append(message)
        return split(message, *args, **kwargs)

    monkeypatch.setattr(query_vectors_module, "split_prompt_chunks", counting)
    groups = index.search(MESSAGE, **options)
    assert len(groups) == 3 and groups[0].stages[:3] == ("embed", "dense", "lexical")
    assert calls == [MESSAGE]
    asyncio.run(index.asearch(MESSAGE, **options))
    assert calls == [MESSAGE, MESSAGE]


def test_a_search_from_vectors_runs_the_products_schedule(index) -> None:
    """What the benchmarks time "excluding embedding": the product's own loop from the parts' vectors,
    with the same result as the product's search of the message (only ``embed`` is not in its record)."""
    scope = Scope("garden")
    plan = index.plan(has_lexical=True)
    parts, vecs = index.query_vectors(MESSAGE)
    backends = store_backends(index.store, scope)
    from_vectors = run_search(plan, QueryVectors(parts, vecs), scope, index.embedder, backends)
    product = index.search(MESSAGE, thread_id="garden")
    assert [g.stages[:3] for g in product] == [("embed", "dense", "lexical")] * 3
    assert [g.stages for g in from_vectors] == [g.stages[1:] for g in product]
    # with no embedder the ``latest`` stage (it embeds hits' texts) cannot run, and nothing says it was skipped
    no_embedder = run_search(plan, QueryVectors(parts, vecs), scope, None, backends)
    assert [g.stages for g in no_embedder] == [("dense", "lexical")] * 3 and not any(g.degraded for g in no_embedder)
    strip = [[(h.id, h.text, h.score, dict(h.scores)) for h in g.hits] for g in from_vectors]
    assert strip == [[(h.id, h.text, h.score, dict(h.scores)) for h in g.hits] for g in product]
    assert any(g.hits for g in product)
