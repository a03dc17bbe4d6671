"""A cached thread updated in place by the writes of this process is the thread read afresh.

An agent writes after every model call; the thread cache makes each cached thread its next version
(``Block.updated``: rows appended, the rows a write removed or wrote again marked dead, the derived structures
carried over) instead of dropping it. Property: any sequence of appends, rewrites and removals gives a block equal to
one built afresh from the same pieces — ids, vectors, documents, metadata, parents, the ``where`` columns, and BM25
(scores, top k, coverage) to the last bit. Then on real stores (embedded Chroma, in-process, no lexical file): after
each append (tool calls continue the last turn, which rewrites it) and a replacement, the cached block holds exactly
what ``read_thread`` reads from the store, and the thread is never read again.
"""

from __future__ import annotations

import numpy as np
import pytest
from ctxret import ContextualIndex, Store
from ctxret.storage import cache as cache_module
from ctxret.storage.cache import Block, ScopeView, read_thread, where_mask
from ctxret.storage.tokenize import analysis
from ctxret.storage.where import compile_where
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability.hash_embedder import HashEmbedder

WORDS = ["fox", "dog", "river", "cells", "protein", "tumour", "growth", "the", "and", "code", "4471", "lisbon"]
QUERIES = ["fox river", "the dog and the cells", "protein growth tumour", "code 4471", "lisbon", "nothing here"]
KEYS = ["k0", "k1", "k2", "k3"]


def piece(pid: str, rng: np.random.Generator, version: int = 0) -> tuple[str, np.ndarray, str, dict]:
    words = rng.choice(WORDS, size=int(rng.integers(1, 7))).tolist()
    vec = rng.integers(-2, 3, size=4).astype(np.float32)
    meta = {
        "thread_id": "t",
        "parent_id": f"s{int(rng.integers(0, 4))}",
        "message_key": KEYS[int(rng.integers(0, 4))],
        "n": int(rng.integers(0, 3)),
        "v": version,
    }
    if rng.random() < 0.3:
        meta["context_text"] = str(rng.choice(WORDS))
    return pid, vec, " ".join(words), meta


def block_of(rows: dict[str, tuple[np.ndarray, str, dict]]) -> Block:
    ids = sorted(rows)  # a fresh read's order (the lexical file's ids, sorted)
    vecs = np.stack([rows[i][0] for i in ids]) if ids else np.zeros((0, 4), np.float32)
    return Block(ids, vecs, [rows[i][1] for i in ids], [rows[i][2] for i in ids])


def assert_same(got: Block, fresh: Block) -> None:
    """Equal as the thread's pieces: every live row, and every derived answer a search reads."""
    a = analysis()
    live = sorted(got.row())
    assert live == sorted(fresh.row()) == sorted(fresh.ids)
    assert got.n_live == len(fresh)
    for rid in live:
        i, j = got.row()[rid], fresh.row()[rid]
        assert got.vectors[i].tobytes() == fresh.vectors[j].tobytes()
        assert got.documents[i] == fresh.documents[j] and got.metadatas[i] == fresh.metadatas[j]
    named = {k: sorted(got.ids[r] for r in rows) for k, rows in got.parent_rows().items()}
    assert named == {k: sorted(fresh.ids[r] for r in rows) for k, rows in fresh.parent_rows().items()}
    for key in ("message_key", "parent_id"):
        col = {v: sorted(got.ids[r] for r in rows) for v, rows in got.column(key).items()}
        assert col == {v: sorted(fresh.ids[r] for r in rows) for v, rows in fresh.column(key).items()}
    ours, theirs = got.bm25(a), fresh.bm25(a)
    assert ours.n == theirs.n
    for q in QUERIES:
        assert ours.scores(q, live) == theirs.scores(q, live)  # exactly: the same floats
        assert ours.coverage(q, live) == theirs.coverage(q, live)
        for k in (1, 3, 50):
            assert ours.search(q, k) == theirs.search(q, k)
        found = dict(ours.search(q, 10_000))  # the scores of given pieces are the ranking's own numbers
        assert {i: v for i, v in ours.scores(q, live).items() if i in found} == found
    for where in WHERES:  # the columns' answers are Chroma's reading, row by row
        kept = {got.ids[i] for i in np.flatnonzero(where_mask(where, got)) if got.live is None or got.live[i]}
        ok = compile_where(where)
        assert kept == {fresh.ids[i] for i, m in enumerate(fresh.metadatas) if ok(m)}
    view = ScopeView([got], {"message_key": {"$ne": "k3"}}, a)
    fresh_view = ScopeView([fresh], {"message_key": {"$ne": "k3"}}, a)
    q = np.asarray([[1, 0, -1, 2]], np.float32)
    assert sorted(r[0] for r in view.dense(q, 100, None)[0]) == sorted(r[0] for r in fresh_view.dense(q, 100, None)[0])


WHERES = [
    {"message_key": {"$nin": ["k0", "k2"]}},
    {"message_key": "k1"},
    {"message_key": {"$ne": "k3"}},
    {"message_key": {"$in": ["k3", "zz"]}},
    {"n": {"$gte": 1}},
    {"n": {"$lt": 2}},
    {"$and": [{"n": {"$gt": 0}}, {"message_key": {"$nin": ["k1"]}}]},
    {"$or": [{"n": {"$lte": 0}}, {"parent_id": "s2"}, {"v": 1}]},
    {"context_text": {"$gt": 1}},  # text: no number, never matches
]

# one write: (new pieces, existing pieces written again, existing pieces removed)
WRITES = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2**16)), min_size=1, max_size=12
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 12), WRITES, st.sampled_from([2, 256]), st.booleans())
def test_a_block_updated_by_any_writes_is_the_block_read_afresh(start, writes, compact_at, warm):
    rng = np.random.default_rng(start)
    rows = {pid: rest for pid, *rest in (piece(f"p{i}", rng) for i in range(start))}
    block = block_of(rows)
    old_compact = cache_module.COMPACT_DEAD
    cache_module.COMPACT_DEAD = compact_at  # 2: compactions happen along the way too
    try:
        if warm:  # what a search works out before the writes (carried over) or not (worked out afterwards)
            block.bm25(analysis()), block.parent_rows(), block.column("message_key"), block.column("parent_id")
        made = start
        for new, again, gone, seed in writes:
            r = np.random.default_rng(seed)
            held = sorted(rows)
            rewritten = [held[int(i)] for i in r.choice(len(held), size=min(again, len(held)), replace=False)]
            left = [p for p in held if p not in rewritten]
            stale = [left[int(i)] for i in r.choice(len(left), size=min(gone, len(left)), replace=False)]
            out = [piece(p, r, version=1) for p in rewritten] + [piece(f"p{made + i}", r) for i in range(new)]
            made += new
            for p in stale:
                rows.pop(p)
            for pid, *rest in out:
                rows[pid] = tuple(rest)
            vecs = np.stack([o[1] for o in out]) if out else np.zeros((0, 4), np.float32)
            nxt = block.updated([o[0] for o in out], vecs, [o[2] for o in out], [o[3] for o in out], [*stale, "nope"])
            assert nxt is not None
            assert block.row().keys() >= set(held) - set(rewritten) - set(stale)  # the old version is untouched
            block = nxt
        assert_same(block, block_of(rows))
    finally:
        cache_module.COMPACT_DEAD = old_compact


def test_an_old_version_keeps_answering_as_before_while_the_next_is_searched():
    rng = np.random.default_rng(0)
    rows = {pid: rest for pid, *rest in (piece(f"p{i}", rng) for i in range(20))}
    old = block_of(rows)
    before = {q: old.bm25(analysis()).search(q, 5) for q in QUERIES}
    snapshot = (list(old.ids), old.vectors.copy(), dict(old.row()))
    out = [piece("p3", rng, version=1), piece("p99", rng)]
    new = old.updated([o[0] for o in out], np.stack([o[1] for o in out]), [o[2] for o in out], [o[3] for o in out])
    assert new is not None and "p99" in new.row() and new.metadatas[new.row()["p3"]]["v"] == 1
    assert old.ids == snapshot[0] and old.vectors.tobytes() == snapshot[1].tobytes() and old.row() == snapshot[2]
    assert {q: old.bm25(analysis()).search(q, 5) for q in QUERIES} == before


# -- on real stores: the cache after each write is the thread read afresh ---------------------------------
STORES = {
    "embedded": lambda tmp: Store.embedded(tmp / "s"),
    "embedded, no lexical file": lambda tmp: Store.embedded(tmp / "s", lexical=False),
    "inprocess": lambda tmp: Store.memory(backend="inprocess"),
}


def exchange(n: int, tools: bool) -> list[list[dict]]:
    """The writes an agent makes for one exchange: with a tool, the call, then its result and the answer (which
    continue the turn: it is written again)."""
    user = {"role": "user", "content": f"Question {n}: where is the locker {n} and its code?", "id": f"u{n}"}
    if not tools:
        return [[user, {"role": "assistant", "content": f"Locker {n} is on level {n % 4}.", "id": f"a{n}"}]]
    call = {
        "role": "assistant",
        "content": "",
        "id": f"c{n}",
        "tool_calls": [{"id": f"call{n}", "type": "function", "function": {"name": "find", "arguments": "{}"}}],
    }
    result = {"role": "tool", "tool_call_id": f"call{n}", "content": f"locker {n}: code {4400 + n}", "id": f"r{n}"}
    answer = {"role": "assistant", "content": f"The code of locker {n} is {4400 + n}.", "id": f"a{n}"}
    return [[user, call], [result, answer]]


@pytest.mark.parametrize("kind", list(STORES))
def test_the_cached_thread_after_each_write_is_the_thread_read_afresh(tmp_path, kind):
    index = ContextualIndex(STORES[kind](tmp_path), embedder=HashEmbedder(), progress=False)
    store = index.store
    for n in range(3):
        for msgs in exchange(n, tools=n % 2 == 1):
            index.add_messages(msgs, thread_id="u")
    index.search("locker code", thread_id="u")  # cached, with its BM25
    loads = store.cache.loads
    for n in range(3, 12):
        for msgs in exchange(n, tools=n % 3 != 0):
            index.add_messages(msgs, thread_id="u")
            cached = store.cache.get("u")
            fresh = read_thread(store.backend, store.lexical, "u")
            assert_same_as_store(cached, fresh)
        index.search(f"code of locker {n}", thread_id="u", k=3)
    assert store.cache.loads == loads  # never read again
    hits = index.search("The code of locker 11", thread_id="u", k=5, score_threshold=None)[0].hits
    assert any("4411" in h.text for h in hits)  # the last exchange's answer, found in the updated thread
    # a replacement (the thread written whole again) and a delete still leave one version each
    index.replace_messages([m for n in range(2) for msgs in exchange(n, tools=False) for m in msgs], thread_id="u")
    assert_same_as_store(store.cache.get("u"), read_thread(store.backend, store.lexical, "u"))
    index.delete(thread_id="u")
    assert len(store.cache.get("u").row()) == 0
    index.close()


def assert_same_as_store(cached: Block, fresh: Block) -> None:
    assert sorted(cached.row()) == sorted(fresh.ids)
    for rid, j in fresh.row().items():
        i = cached.row()[rid]
        assert cached.vectors[i].tobytes() == fresh.vectors[j].tobytes(), rid
        assert (cached.documents[i], cached.metadatas[i]) == (fresh.documents[j], fresh.metadatas[j]), rid
    a = analysis()
    ids = list(fresh.row())
    for q in ("locker code", "level 3", "question 7 code"):
        assert cached.bm25(a).scores(q, ids) == fresh.bm25(a).scores(q, ids)
        assert cached.bm25(a).search(q, 5) == fresh.bm25(a).search(q, 5)
    assert {k: sorted(cached.ids[r] for r in v) for k, v in cached.parent_rows().items()} == {
        k: sorted(fresh.ids[r] for r in v) for k, v in fresh.parent_rows().items()
    }


def test_a_write_that_fails_part_way_drops_the_thread(tmp_path, monkeypatch):
    index = ContextualIndex(Store.embedded(tmp_path / "s"), embedder=HashEmbedder(), progress=False)
    index.add_messages(exchange(0, tools=False)[0], thread_id="u")
    index.search("locker", thread_id="u")
    store = index.store

    def boom(*a, **kw):
        raise RuntimeError("the lexical file failed")

    monkeypatch.setattr(store.lexical, "write", boom)
    with pytest.raises(RuntimeError):
        index.add_messages(exchange(1, tools=False)[0], thread_id="u")
    assert "u" not in store.cache._blocks  # not carried over: the next search reads what is stored
