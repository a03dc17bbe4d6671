"""The lexical file's postings in memory give FTS5's numbers (:mod:`fts5_oracle`: the same queries in
FTS5 SQL, on the same file), stay in step with every write, and follow writes made through another
connection to the same file."""

from __future__ import annotations

import math
import sqlite3

import pytest
from ctxret.storage.lexical import LexicalIndex
from fts5_oracle import FTS5
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORDS = [
    "parking",
    "garage",
    "level",
    "car",
    "dentist",
    "appointment",
    "thursday",
    "lisbon",
    "flight",
    "hotel",
    "the",
    "is",
    "my",
    "code",
    "locker",
    "gym",
    "birthday",
    "sister",
    "quote",
    "plumber",
    "release",
    "priya",
]
THREADS = ["t1", "t2", "t3"]

text = st.lists(st.sampled_from(WORDS), min_size=0, max_size=12).map(" ".join)
piece = st.tuples(st.sampled_from([f"p{i}" for i in range(30)]), st.sampled_from(THREADS), text)
op = st.one_of(
    st.tuples(st.just("write"), st.lists(piece, min_size=1, max_size=8, unique_by=lambda p: p[0])),
    st.tuples(st.just("delete"), st.lists(st.sampled_from([f"p{i}" for i in range(30)]), max_size=5)),
    st.tuples(st.just("clear"), st.just([])),
)


def _apply(ix: LexicalIndex, kind: str, arg: list) -> None:
    if kind == "write":
        ix.write([p[0] for p in arg], [p[2] for p in arg], [p[1] for p in arg], ["turn"] * len(arg))
    elif kind == "delete":
        ix.delete(arg)
    else:
        ix.clear()


def _same_ranking(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> None:
    assert [i for i, _ in a] == [i for i, _ in b]
    for (_, x), (_, y) in zip(a, b, strict=True):
        assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(op, min_size=1, max_size=8),
    query=text,
    k=st.integers(1, 12),
    scope=st.sampled_from([None, ["t1"], ["t2", "t3"]]),
)
def test_memory_gives_fts5_numbers_through_any_writes(ops, query, k, scope) -> None:
    mem = LexicalIndex(":memory:")
    fts5 = FTS5(mem)  # the file itself, read by FTS5's SQL
    mem.search("warm", 1)  # the postings exist before the writes, so every write goes through them
    for kind, arg in ops:
        _apply(mem, kind, arg)
        _same_ranking(mem.search(query, k, scope), fts5.search(query, k, scope))  # nothing kept from before a write
    assert mem._postings is not None
    ids = [f"p{i}" for i in range(30)]
    want, got = fts5.scores(query, ids, scope), mem.scores(query, ids, scope)
    assert want.keys() == got.keys()
    assert all(math.isclose(want[i], got[i], rel_tol=1e-9, abs_tol=1e-12) for i in want)
    want, got = fts5.coverage(query, ids), mem.coverage(query, ids)
    assert want.keys() == got.keys()
    assert all(math.isclose(want[i], got[i], rel_tol=1e-9, abs_tol=1e-12) for i in want)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pieces=st.lists(piece, min_size=1, max_size=30, unique_by=lambda p: p[0]),
    dead=st.lists(st.sampled_from([f"p{i}" for i in range(30)]), max_size=10),
    query=text,
    k=st.integers(1, 12),
    scope=st.sampled_from([None, ["t1"], ["t2", "t3"], ["nobody"]]),
)
def test_top_k_is_the_best_k_of_every_piece_s_exact_score(pieces, dead, query, k, scope) -> None:
    """The top k found from the terms' posting lists alone is, to the bit, the best k of every
    piece's score (ties by id), whatever the ties, the repeats of a term and the scope."""
    mem = LexicalIndex(":memory:")
    mem.search("warm", 1)
    mem.write([p[0] for p in pieces], [p[2] for p in pieces], [p[1] for p in pieces], ["turn"] * len(pieces))
    mem.delete(dead)
    every = mem.scores(query, [p[0] for p in pieces], scope)
    want = sorted(((i, s) for i, s in every.items() if s > 0), key=lambda x: (-x[1], x[0]))[:k]
    assert mem.search(query, k, scope) == want


def test_ties_break_by_piece_id_as_fts5_does() -> None:
    mem = LexicalIndex(":memory:")
    fts5 = FTS5(mem)
    ids = [f"id-{c}" for c in "qwertyuiop"]
    mem.write(ids, ["locker code"] * len(ids), ["t"] * len(ids), ["turn"] * len(ids))
    assert [i for i, _ in mem.search("locker", 4)] == sorted(ids)[:4] == [i for i, _ in fts5.search("locker", 4)]


def test_many_deletes_compact_and_keep_the_numbers() -> None:
    mem = LexicalIndex(":memory:")
    fts5 = FTS5(mem)
    ids = [f"p{i:03d}" for i in range(300)]
    texts = [f"{WORDS[i % len(WORDS)]} {WORDS[(i * 7) % len(WORDS)]} note {i}" for i in range(300)]
    mem.write(ids, texts, [THREADS[i % 3] for i in range(300)], ["turn"] * 300)
    mem.search("note", 1)
    mem.delete(ids[::2] + ids[1:200:3])
    assert mem._postings is not None and len(mem._postings._ids) < 300  # compacted: dead rows dropped
    for q in ("parking garage", "dentist thursday note", "the flight to lisbon"):
        _same_ranking(mem.search(q, 20), fts5.search(q, 20))
        _same_ranking(mem.search(q, 20, ["t2"]), fts5.search(q, 20, ["t2"]))


def test_another_connection_s_writes_are_seen(tmp_path) -> None:
    path = tmp_path / "lexical.sqlite3"
    a, b = LexicalIndex(path), LexicalIndex(path)
    a.write(["p1"], ["parking garage level 3"], ["t1"], ["turn"])
    assert [i for i, _ in b.search("garage", 5)] == ["p1"]
    held = b._postings
    a.journal.mark_pending()  # another connection's marker, not a change of the pieces: b keeps its postings
    assert [i for i, _ in b.search("garage", 5)] == ["p1"] and b._postings is held
    a.write(["p2"], ["the garage code is 4412"], ["t2"], ["turn"], settle=True)
    assert {i for i, _ in b.search("garage", 5)} == {"p1", "p2"}
    a.delete(["p1"])
    assert [i for i, _ in b.search("garage", 5)] == ["p2"]
    b.write(["p3"], ["garage door"], ["t1"], ["turn"])  # b's own write after a's: b's postings hold both
    assert {i for i, _ in b.search("garage", 5)} == {"p2", "p3"}
    assert {i for i, _ in a.search("garage", 5)} == {"p2", "p3"}
    a.clear()
    assert b.search("garage", 5) == []


def test_a_failed_transaction_leaves_the_postings_as_the_file(tmp_path) -> None:
    ix = LexicalIndex(tmp_path / "lexical.sqlite3")
    ix.write(["p1"], ["parking garage"], ["t1"], ["turn"])
    ix.search("garage", 1)
    with pytest.raises(sqlite3.IntegrityError):  # a duplicate id inside one write breaks the UNIQUE constraint
        ix.write(["p2", "p2"], ["garage a", "garage b"], ["t1", "t1"], ["turn", "turn"])
    assert [i for i, _ in ix.search("garage", 5)] == ["p1"]
    assert ix.count() == 1
