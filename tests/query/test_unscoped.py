"""Unscoped search reads texts and metadata for the hits it keeps only, and answers as a scope
holding every thread does (same statistics, same pieces)."""

from __future__ import annotations

import pytest
from ctxret import ContextualIndex
from ctxret.query.deadline import run_candidates
from ctxret.query.executor import Backends
from ctxret.query.search import assemble
from ctxret.storage.base import Deferred
from ctxret.storage.schema import Scope
from sample_threads import GARDEN, thread

WORK = thread(
    [
        ("The release of version 2.4 moves to Friday after the billing fix.", "Release 2.4 on Friday, after billing."),
        ("Priya owns the billing service and reviews its changes.", "Priya is the billing owner."),
        ("The quarterly report is due to finance next Monday.", "Report to finance on Monday."),
    ]
)

QUERIES = [
    "When is the dentist? And what colour for the kitchen cabinets?",
    "car insurance renewal date",
    "What did we decide about the release and the tomatoes?",
    "zzz nothing here",
]


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on ranking across threads


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages(GARDEN, thread_id="garden")
        ix.add_messages(WORK, thread_id="work")
        ix.add_messages(
            thread([("My sister's birthday is on the 3rd of May.", "I'll remember May 3rd.")]), thread_id="family"
        )

    return fill


def _view(groups):
    return [[(h.id, h.text, dict(h.stored)) for h in g.hits] for g in groups]


def _scores(groups):
    return [h.score for g in groups for h in g.hits]


@pytest.mark.parametrize("message", QUERIES)
def test_unscoped_answers_as_every_thread_does(index, message) -> None:
    everyone = index.store.thread_ids()
    # the latest stage reads its hits' stored rows, whose metadata an unscoped store defers: it runs in thread scopes
    unscoped = index.search(message, k=4, score_threshold=None, latest_first=False)
    scoped = index.search(message, k=4, score_threshold=None, thread_id=everyone, latest_first=False)
    assert _view(unscoped) == _view(scoped)
    assert _scores(unscoped) == pytest.approx(_scores(scoped), abs=1e-5)  # Chroma's float32 distances
    assert all(h.text and h.metadata.get("thread_id") for g in unscoped for h in g.hits)


def test_candidates_are_deferred_and_only_kept_hits_are_read(index) -> None:
    parts, qvecs = index.query_vectors(QUERIES[1])  # a part that does not ask: no answer to lift
    plan = index.plan(k=2, score_threshold=None)
    dense, lexical = index.store.resolve(Scope())
    cands = run_candidates(plan, parts, qvecs, Scope(), Backends(dense, lexical))
    assert all(isinstance(meta, Deferred) for c in cands for _, meta in c.info.values())
    asked: list[list[str]] = []

    def complete(ids):
        asked.append(list(ids))
        return dense.complete(ids)

    groups = assemble(plan, cands, complete=complete)
    kept = {h.id for g in groups for h in g.hits}
    assert len(asked) == 1 and kept <= set(asked[0]) and len(asked[0]) <= plan.k * len(parts)
    assert all(not isinstance(h.stored, Deferred) and h.text for g in groups for h in g.hits)


def test_asking_parts_read_their_candidates_once_to_lift_answers(index) -> None:
    """A part that asks needs its candidates' metadata to find the reply after a stored question (query/answers.py):
    one read for every asking part, none for the others."""
    parts, qvecs = index.query_vectors(QUERIES[0])
    plan = index.plan(k=2, score_threshold=None)
    dense, lexical = index.store.resolve(Scope())
    asked: list[list[str]] = []

    class Counting:
        def __getattr__(self, name):
            return getattr(dense, name)

        def complete(self, ids):
            asked.append(list(ids))
            return dense.complete(ids)

    cands = run_candidates(plan, parts, qvecs, Scope(), Backends(Counting(), lexical))
    assert len(asked) == 1 and set(asked[0]) == {rid for c in cands for rid in c.info}
    assert not any(isinstance(meta, Deferred) for c in cands for _, meta in c.info.values())


def test_a_piece_deleted_during_a_search_is_left_out(index, local_embedder, tmp_path) -> None:
    ix = ContextualIndex(tmp_path / "race", embedder=local_embedder)
    ix.add_messages(GARDEN, thread_id="garden")
    ix.add_messages(WORK, thread_id="work")
    parts, qvecs = ix.query_vectors("dentist appointment on Thursday")
    plan = ix.plan(k=3, score_threshold=None)
    dense, lexical = ix.store.resolve(Scope())
    cands = run_candidates(plan, parts, qvecs, Scope(), Backends(dense, lexical))
    first = cands[0].ranked[0][0]
    ix.delete(thread_id="garden")  # between the candidates and the read of the kept hits
    groups = assemble(plan, cands, complete=dense.complete)
    assert first not in {h.id for g in groups for h in g.hits}
    assert all(h.metadata["thread_id"] == "work" for g in groups for h in g.hits)
    ix.close()


def test_a_new_collection_gets_the_measured_graph_settings(index) -> None:
    """New collections get the HNSW settings BENCHMARKS measured ("HNSW search width"): a denser
    graph than Chroma's defaults, searched at least twice as wide as the candidates a part asks."""
    from ctxret.query.fusion import DEFAULT_CANDIDATES
    from ctxret.storage.chroma import HNSW

    hnsw = (index.store.chroma._col(None).configuration_json or {}).get("hnsw", {})
    assert {k: hnsw.get(k) for k in ("space", "max_neighbors", "ef_construction", "ef_search")} == HNSW
    measured = ("cosine", 32, 200, 100)  # change BENCHMARKS' measurements with them
    assert (HNSW["space"], HNSW["max_neighbors"], HNSW["ef_construction"], HNSW["ef_search"]) == measured
    assert HNSW["ef_search"] >= 2 * DEFAULT_CANDIDATES
