"""The lexical file's copy of each piece's document and metadata (what unscoped search and a thread's
first read take instead of Chroma's slower read of them) always equals what Chroma holds, or is not
used: after writes, rewrites that Chroma merges, deletes, a crash between the two stores, a file
written by the previous version, and while another writer is between its two writes."""

from __future__ import annotations

import contextlib
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from ctxret import ContextualIndex
from ctxret.storage.lexical import LexicalIndex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_threads import GARDEN, thread

WORK = thread(
    [
        ("The release of version 2.4 moves to Friday after the billing fix.", "Release 2.4 on Friday, after billing."),
        ("Priya owns the billing service and reviews its changes.", "Priya is the billing owner."),
    ]
)
QUERIES = ["When is the dentist? And the release date?", "billing owner", "tomatoes and cabinets"]


def chroma_view(ix: ContextualIndex) -> dict[str, tuple[str, dict]]:
    return {
        r["id"]: (r["document"] or "", dict(r["metadata"] or {}))
        for r in ix.store.chroma.iter_records(None, include=("documents", "metadatas"))
    }


def copy_view(ix: ContextualIndex) -> dict[str, tuple[str, dict]]:
    lexical = ix.store.lexical
    assert lexical is not None
    got = lexical.copies.stored(lexical.ids())
    assert got is not None
    return got


def results(ix: ContextualIndex, **kw) -> list:
    return [
        [(h.id, h.text, dict(h.stored), round(h.score, 6)) for h in g.hits]
        for q in QUERIES
        for g in ix.search(q, k=3, score_threshold=None, **kw)
    ]


@contextlib.contextmanager
def chroma_reads(ix: ContextualIndex) -> Iterator[list[tuple[list[str], tuple[str, ...]]]]:
    """Every read by id the store makes of Chroma, as ``(ids, include)``; the real read runs."""
    calls: list[tuple[list[str], tuple[str, ...]]] = []
    get = ix.store.chroma.get

    def spy(wanted, include=("documents", "metadatas"), where=None):
        calls.append((list(wanted), tuple(include)))
        return get(wanted, include=include, where=where)

    ix.store.chroma.get = spy  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        ix.store.chroma.get = get  # type: ignore[method-assign]


@pytest.fixture
def index(open_index):
    """A fresh index per test with the hashing embedder (the copy is storage: no ranking is asserted)."""
    return open_index()


def test_the_copy_is_what_chroma_holds_and_searches_do_not_change_with_it(index) -> None:
    meta = {"team": "core", "priority": 2, "score": 0.25, "urgent": True, "tags": ["a", "b"], "gone": None}
    index.add_messages(GARDEN, thread_id="garden", metadata=meta)
    index.add_messages(WORK, thread_id="work")
    chroma = chroma_view(index)
    assert copy_view(index) == chroma and len(chroma) > 5
    garden = [chroma[i][1] for i in index.store.lexical.ids("garden")]
    assert garden and all("gone" not in m and m["priority"] == 2 for m in garden)
    with_copy = results(index)
    with_copy_scoped = results(index, thread_id=["garden", "work"])
    # Without the copy (a file whose rows have none): Chroma is read instead, with the same results.
    index.store.lexical._db.execute("DELETE FROM piece_copies")
    index.store.cache.invalidate()
    assert index.store.lexical.copies.stored(index.store.lexical.ids()) == {}
    assert results(index) == with_copy and any(with_copy)
    assert results(index, thread_id=["garden", "work"]) == with_copy_scoped


def test_a_rewrite_that_chroma_merges_is_copied_as_chroma_holds_it(index) -> None:
    index.add_messages(WORK, thread_id="work", metadata={"team": "core", "old": "x"})
    ids = sorted(index.store.lexical.ids("work"))
    vectors, held = _vectors(index, ids), chroma_view(index)
    # The same pieces again with other metadata: Chroma's upsert merges keys (None removes one).
    index.store.write(
        ids, vectors, [held[i][0] for i in ids], [{**held[i][1], "team": "infra", "old": None, "new": 1} for i in ids]
    )
    chroma = chroma_view(index)
    assert all(m["team"] == "infra" and m["new"] == 1 and "old" not in m for _, m in chroma.values())
    assert copy_view(index) == chroma
    # Fewer keys: the others stay in Chroma, and in the copy.
    index.store.write(
        ids, vectors, [held[i][0] for i in ids], [{"thread_id": "work", "turn_id": held[i][1]["turn_id"]} for i in ids]
    )
    assert chroma_view(index) == chroma
    assert copy_view(index) == chroma


def _vectors(ix: ContextualIndex, ids: list[str]):
    import numpy as np

    recs = {r["id"]: r["embedding"] for r in ix.store.chroma.get(ids, include=("embeddings",))}
    return np.asarray([recs[i] for i in ids], dtype=np.float32)


def test_the_copy_is_not_used_while_a_write_is_announced(index) -> None:
    index.add_messages(GARDEN, thread_id="garden")
    lexical = index.store.lexical
    ids = sorted(lexical.ids())
    other = LexicalIndex(lexical.path)  # another writer sharing the file, between its two writes
    other.journal.mark_pending(ids[:1])
    assert lexical.copies.stored(ids) is None
    with chroma_reads(index) as asked:
        done = index.store.complete(ids[:3])
    assert [wanted for wanted, _ in asked] == [ids[:3]] and set(done) == set(ids[:3])
    other.write(delete=[], settle=True)
    assert lexical.copies.stored(ids) == copy_view(index) and len(lexical.copies.stored(ids) or {}) == len(ids)
    other.close()


def test_deleted_pieces_leave_the_copy(index) -> None:
    index.add_messages(GARDEN, thread_id="garden")
    index.add_messages(WORK, thread_id="work")
    garden = index.store.lexical.ids("garden")
    index.delete(thread_id="garden")
    assert index.store.lexical.copies.stored(garden) == {}
    assert copy_view(index) == chroma_view(index)
    assert all(h.metadata["thread_id"] == "work" for g in index.search("dentist tomatoes release") for h in g.hits)


def test_a_crash_after_chroma_took_new_metadata_is_repaired_on_open(tmp_path, hash_embedder) -> None:
    """A writer dies after Chroma took new metadata for pieces the file already held: the next
    open reads those pieces again (the announcement lists them), so no search shows the old ones."""
    path = tmp_path / "store"
    ix = ContextualIndex(path, embedder=hash_embedder)
    ix.add_messages(WORK, thread_id="work", metadata={"team": "core"})
    ix.close()
    crash = textwrap.dedent(
        """
        import os, sys
        from ctxret import ContextualIndex
        from ctxret.embedders.hashing import HashEmbedder
        from ctxret.storage.lexical import LexicalIndex
        ix = ContextualIndex(sys.argv[1], embedder=HashEmbedder())
        store = ix.store
        ids = sorted(store.lexical.ids())
        recs = store.chroma.get(ids, include=("embeddings", "documents", "metadatas"))
        store.lexical.journal.mark_pending(ids)
        store.chroma.upsert(ids, [r["embedding"] for r in recs], [r["document"] for r in recs],
                            [{**r["metadata"], "team": "infra"} for r in recs])
        os._exit(0)  # killed before the lexical write
        """
    )
    proc = subprocess.run([sys.executable, "-c", crash, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    stale = LexicalIndex(path / "ctxret-lexical-ctxret.sqlite3")
    assert stale.journal.pending and stale.copies.stored(stale.ids()) is None  # not trusted until the repair
    assert {m["team"] for _, m in _raw_copy(stale).values()} == {"core"}
    stale.close()
    ix = ContextualIndex(path, embedder=hash_embedder)
    assert not ix.store.lexical.journal.pending
    assert copy_view(ix) == chroma_view(ix)
    assert {m["team"] for _, m in copy_view(ix).values()} == {"infra"}
    assert {h.metadata["team"] for g in ix.search("release billing owner") for h in g.hits} == {"infra"}
    ix.close()


def _raw_copy(lexical: LexicalIndex) -> dict[str, tuple[str, dict]]:
    import json

    rows = lexical._db.execute(
        "SELECT p.id, c.document, c.metadata FROM pieces p JOIN piece_copies c ON c.rowid = p.rowid"
    )
    return {i: (d, json.loads(m)) for i, d, m in rows}


def test_a_file_from_the_previous_version_is_refilled_with_the_copy(tmp_path, hash_embedder) -> None:
    path = tmp_path / "store"
    ix = ContextualIndex(path, embedder=hash_embedder)
    ix.add_messages(GARDEN, thread_id="garden", metadata={"team": "core"})
    before = results(ix)
    ix.close()
    file = path / "ctxret-lexical-ctxret.sqlite3"
    db = sqlite3.connect(file)  # what version 3 left: no copy columns, no listed announcements
    db.executescript(
        """
        UPDATE ctxret_meta SET value = 'fts5-ascii-3/' || substr(value, instr(value, '/') + 1) WHERE key = 'version';
        CREATE TABLE old AS SELECT rowid, id, thread_id, turn_id FROM pieces;
        DROP TABLE pieces; ALTER TABLE old RENAME TO pieces; DROP TABLE piece_copies;
        DROP TABLE pending_writes;
        CREATE TABLE pending_writes (token TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL,
                                     since REAL NOT NULL);
        """
    )
    db.close()
    ix = ContextualIndex(path, embedder=hash_embedder)
    assert copy_view(ix) == chroma_view(ix) and len(chroma_view(ix)) > 3
    assert results(ix) == before
    ix.close()


def test_the_copy_holds_only_what_json_keeps_exactly(tmp_path) -> None:
    lexical = LexicalIndex(tmp_path / "l.sqlite3")
    lexical.write(
        ["a", "b", "c"],
        ["x", "y", "z"],
        ["t", "t", "t"],
        ["1", "1", "1"],
        stored=[("x", {"n": 1, "f": 1.0, "ok": True, "s": "é"}), ("y", {"nan": float("nan")}), ("z", {"o": object()})],
    )
    got = lexical.copies.stored(["a", "b", "c"])
    assert got == {"a": ("x", {"n": 1, "f": 1.0, "ok": True, "s": "é"})}
    assert type(got["a"][1]["f"]) is float and type(got["a"][1]["n"]) is int
    with pytest.raises(Exception, match="one \\(document, metadata\\) per id"):
        lexical.write(["d"], ["w"], ["t"], ["1"], stored=[])
    assert lexical.ids() == {"a", "b", "c"}


def test_unscoped_search_reads_kept_hits_from_the_copy(index) -> None:
    index.add_messages(GARDEN, thread_id="garden")
    index.add_messages(WORK, thread_id="work")
    with chroma_reads(index) as asked:
        groups = index.search("When is the dentist? And the release date?", score_threshold=None)
    assert any(g.hits for g in groups) and all(h.text and h.metadata["thread_id"] for g in groups for h in g.hits)
    assert asked and all(inc == ("embeddings",) for _, inc in asked), asked  # vectors only


_TEXT = st.text(st.characters(exclude_categories=()))  # lone surrogates and control characters too
_VALUES = st.one_of(
    _TEXT,
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.integers(-1000, 1000), max_size=3),
    st.none(),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pieces=st.lists(
        st.tuples(_TEXT, st.dictionaries(st.text(max_size=12), _VALUES, max_size=4)), min_size=1, max_size=5
    )
)
def test_any_text_and_metadata_is_copied_exactly_or_left_to_chroma(tmp_path, pieces) -> None:
    """Whatever the text and metadata (lone surrogates, NaN, big ints, ...), a write never fails for
    the copy's sake, and the copy gives back exactly what was written or nothing for that piece."""
    lexical = LexicalIndex(":memory:")
    ids = [f"p{i}" for i in range(len(pieces))]
    lexical.write(ids, ["words here"] * len(ids), ["t"] * len(ids), ["t#1"] * len(ids), stored=pieces)
    got = lexical.copies.stored(ids)
    assert got is not None and lexical.ids() == set(ids)
    for pid, (document, meta) in zip(ids, pieces, strict=True):
        if pid in got:
            assert got[pid] == (document, meta)
            assert [type(v) for v in got[pid][1].values()] == [type(v) for v in meta.values()]
    lexical.close()
