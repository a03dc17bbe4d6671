"""The store's own files are verified: what cannot be rebuilt is never made afresh, and a write never runs without the
files that make it crash-safe.

The defects: an embedded folder whose ``chroma.sqlite3`` was missing opened as an empty store, and the lexical repair
then deleted the only copy of the texts left (one INFO line); an emptied one failed with "no such table: tenants"; a
page of it overwritten raised chromadb's ``pyo3_runtime.PanicException`` (a ``BaseException``: ``except Exception``
missed it) or a "compaction" error that named no file. With the lexical file or write journal deleted under an open
store, writes went on into the unlinked file (a kill then left rewritten turns in two versions, never repaired), and
deleting ``ctxret.lock`` let a second process open the folder beside the first.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ctxret import ContextualIndex
from ctxret.errors import StoreError
from ctxret.storage.heal import mark_checked

from .hash_embedder import HashEmbedder

THREADS = 12


def build(folder: Path, **options) -> int:
    """A closed store of ``THREADS`` threads; returns its piece count."""
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False, **options) as index:
        for i in range(THREADS):
            index.add_messages([{"role": "user", "content": f"Alpha note {i}: the vault code is {4700 + i}."}], f"t{i}")
        return index.store.count()


def lexical_count(folder: Path) -> int:
    import sqlite3

    db = sqlite3.connect(folder / "ctxret-lexical-ctxret.sqlite3")
    try:
        return int(db.execute("SELECT count(*) FROM pieces").fetchone()[0])
    finally:
        db.close()


def open_index(folder: Path, **options) -> ContextualIndex:
    return ContextualIndex(folder, embedder=HashEmbedder(), progress=False, **options)


@pytest.mark.parametrize("damage", ["missing", "empty"])
def test_a_lost_chroma_database_is_a_store_error_and_the_lexical_copy_is_kept(tmp_path, caplog, damage):
    folder = tmp_path / "store"
    n = build(folder)
    db = folder / "chroma.sqlite3"
    if damage == "missing":
        db.unlink()
    else:
        db.write_bytes(b"")
    with caplog.at_level(logging.INFO, logger="ctxret"), pytest.raises(StoreError) as raised:
        open_index(folder)
    message = str(raised.value)
    assert f"{db} is {damage}" in message and "restore the folder" in message.lower(), message
    assert "repaired" not in caplog.text  # before: "... repaired from the vector store: 0 added, 24 removed"
    assert lexical_count(folder) == n  # the only copy of the texts left is untouched
    assert (db.exists() and db.stat().st_size == 0) if damage == "empty" else not db.exists()  # nothing made afresh
    # the lock was given back: the folder opens once the database is back (here: a new store, on purpose)
    shutil.rmtree(folder)
    with open_index(folder) as index:
        assert index.store.count() == 0


def test_a_lost_chroma_database_beside_a_write_journal_or_a_lexical_file_elsewhere(tmp_path):
    folder = tmp_path / "store"
    build(folder, lexical=False)  # announcements in a journal; the data in a Chroma segment folder
    (folder / "chroma.sqlite3").unlink()
    with pytest.raises(StoreError, match="chroma.sqlite3 is missing, but the store folder .* segment folder"):
        open_index(folder, lexical=False)
    elsewhere = tmp_path / "other"
    lexical = tmp_path / "bm25.sqlite3"
    n = build(elsewhere, lexical_path=lexical)  # the lexical file outside the folder: the collection is checked
    (elsewhere / "chroma.sqlite3").unlink()
    for child in elsewhere.iterdir():
        if child.is_dir():
            shutil.rmtree(child)  # nothing of the store left in the folder: only the lexical file knows
    with pytest.raises(StoreError, match=f"the lexical file {lexical} holds {n} pieces .* no such collection"):
        open_index(elsewhere, lexical_path=lexical)


def test_a_collection_emptied_behind_ctxret_is_not_a_repair(tmp_path):
    folder = tmp_path / "store"
    n = build(folder)
    with open_index(folder) as index:
        ids = [r["id"] for r in index.store.backend.iter_records(None, include=())]
        index.store.backend.delete_ids(ids)  # Chroma emptied outside ctxret's write path
    with pytest.raises(StoreError, match="holds no piece .* would delete the only copy of the texts left"):
        open_index(folder)
    assert lexical_count(folder) == n
    (folder / "ctxret-lexical-ctxret.sqlite3").unlink()  # the fix the error names, when it was on purpose
    with open_index(folder) as index:
        assert index.store.count() == index.store.lexical.count() == 0


OVERWRITE = bytes((i * 37) % 251 for i in range(4096))


def overwrite_page(db: Path, page: int, keep_time: bool) -> None:
    st = db.stat()
    with db.open("r+b") as f:
        f.seek(page * 4096)
        f.write(OVERWRITE)
    if keep_time:  # as if nothing changed since the clean close that stamped it: the open's check is skipped
        os.utime(db, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("stamped", [False, True], ids=["checked on open", "stamped: chromadb meets it"])
def test_a_damaged_page_of_chroma_sqlite3_is_a_store_error_naming_it(tmp_path, stamped):
    built = tmp_path / "built"
    n = build(built)
    folder = tmp_path / "store"  # a copy: a folder this process has not opened (chromadb keeps an opened one cached)
    shutil.copytree(built, folder)
    db = folder / "chroma.sqlite3"
    saved = db.read_bytes()
    mark_checked(db)
    # page 1: the first page of Chroma's schema tables (a panic in chromadb 1.5's Rust core when it opens the file)
    overwrite_page(db, 1, keep_time=stamped)
    with pytest.raises(StoreError, match=f"{db} .*damaged.*restore the store folder from a backup") as raised:
        open_index(folder)
    if stamped:
        assert "panicked" in str(raised.value)  # before: pyo3_runtime.PanicException, past every `except Exception`
    db.write_bytes(saved)  # restored: the lock was given back, the store opens
    with open_index(folder) as index:
        assert index.store.count() == n


def test_panics_are_store_failures_and_interrupts_are_not():
    from ctxret.storage.chroma import chroma_failure, is_panic

    class PanicException(BaseException):  # what pyo3 makes at run time
        pass

    PanicException.__module__ = "pyo3_runtime"
    assert is_panic(PanicException("boom")) and chroma_failure(PanicException("boom"))
    assert not chroma_failure(KeyboardInterrupt()) and not chroma_failure(SystemExit(1))
    assert not chroma_failure(GeneratorExit()) and chroma_failure(ValueError("x"))


@pytest.mark.parametrize("lexical", [True, False], ids=["lexical file", "write journal"])
def test_a_lexical_file_or_journal_removed_under_an_open_store_stops_writes(tmp_path, lexical):
    folder = tmp_path / "store"
    index = open_index(folder, lexical=lexical)
    index.add_messages([{"role": "user", "content": "First note."}], thread_id="a")
    name = "ctxret-lexical-ctxret.sqlite3" if lexical else "ctxret-journal-ctxret.sqlite3"
    (folder / name).unlink()
    before = index.store.count()
    role = "lexical file" if lexical else "write journal"
    with pytest.raises(StoreError, match=f"the {role} {folder / name} was removed .* nothing was written"):
        index.add_messages([{"role": "user", "content": "Second note."}], thread_id="a")
    with pytest.raises(StoreError, match=f"the {role}"):
        index.delete(thread_id="a")
    assert index.store.count() == before
    assert index.search("first note", thread_id="a")[0].hits  # reads go on
    index.close()
    with open_index(folder, lexical=lexical) as again:  # reopened: the file is made again, writes work
        again.add_messages([{"role": "user", "content": "Second note."}], thread_id="a")
        assert again.store.count() == before + 1


OPEN_OTHER = "from ctxret import ContextualIndex; ContextualIndex({folder!r}, embedder=None)"


def test_a_removed_lock_file_stops_the_holder_writing_and_keeps_a_second_process_out(tmp_path):
    folder = tmp_path / "store"
    index = open_index(folder)
    index.add_messages([{"role": "user", "content": "First note."}], thread_id="a")
    (folder / "ctxret.lock").unlink()
    other = subprocess.run(
        [sys.executable, "-c", OPEN_OTHER.format(folder=str(folder))], capture_output=True, text=True, timeout=300
    )
    assert other.returncode != 0 and "whose lock file" in other.stderr and str(os.getpid()) in other.stderr, (
        other.stderr[-1500:]
    )
    with pytest.raises(StoreError, match="the lock file .*ctxret.lock was removed or replaced"):
        index.add_messages([{"role": "user", "content": "Second note."}], thread_id="a")
    index.close()
    with open_index(folder) as again:  # closed everywhere, opened again: a new lock file, writes work
        again.add_messages([{"role": "user", "content": "Second note."}], thread_id="a")
