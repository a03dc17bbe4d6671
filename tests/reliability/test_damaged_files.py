"""Damaged, missing and vanished files: derived files heal on open; what cannot heal is a ``StoreError`` naming it.

The defects: a truncated lexical file, or one with garbage in the middle, made the store impossible to open (a raw
``sqlite3.DatabaseError``, no path, no fix), although it is a derived copy of Chroma's stored texts; a damaged
``chroma.sqlite3`` raised chromadb's ``InternalError``; a store folder deleted under a live process answered writes with
"readonly database" and, opened again in that process, served the deleted pieces from chromadb's cached system while a
lone lexical file appeared in a new folder. Now the lexical file and the write journal are moved aside (named in a
warning) and rebuilt from Chroma without re-embedding, and the folder is checked before every write and search.
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from ctxret import ContextualIndex
from ctxret.errors import StoreError
from ctxret.storage.lexical import LexicalIndex

from .hash_embedder import HashEmbedder

THREADS = {f"t{i}": f"Alpha bravo charlie note {i}. " * 30 + f"Delta echo {i}." for i in range(40)}


class Counting(HashEmbedder):
    """Counts the texts it embeds (a rebuild of the lexical file embeds none)."""

    def __init__(self) -> None:
        self.texts = 0

    def embed(self, texts):
        self.texts += len(texts)
        return super().embed(texts)


PIECES = 120  # 3 pieces a thread


def build(folder: Path, **options) -> dict[str, list[str]]:
    """A store of 40 threads; returns what two searches find in it (the answers every healed store must give)."""
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False, **options) as index:
        for thread, text in THREADS.items():
            index.add_messages([{"role": "user", "content": text}], thread_id=thread)
        assert index.store.count() == PIECES
        return answers(index)


def answers(index: ContextualIndex) -> dict[str, list[str]]:
    return {
        q: [h.id for g in index.search(q, k=10, score_threshold=None) for h in g.hits]
        for q in ("delta echo 7", "alpha note 12")
    }


def overwrite(path: Path, start: float, end: float, data: bytes | None = None) -> None:
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.seek(int(size * start))
        f.write(data if data is not None else bytes((i * 37) % 251 for i in range(int(size * (end - start)))))


def other_version(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("UPDATE ctxret_meta SET value = 'fts5-ascii-0/old' WHERE key = 'version'")
    db.commit()
    db.close()


DAMAGE = {
    "truncated": lambda p: os.truncate(p, p.stat().st_size // 3),
    "garbage in the middle": lambda p: overwrite(p, 0.3, 0.7),
    "not a database": lambda p: overwrite(p, 0.0, 0.0, b"this is not a SQLite file " * 8),
    "from another version": other_version,
    "missing": lambda p: p.unlink(),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_lexical_file_is_moved_aside_and_rebuilt_from_chroma(tmp_path, caplog, damage):
    folder = tmp_path / "store"
    expected = build(folder)
    lexical = folder / "ctxret-lexical-ctxret.sqlite3"
    DAMAGE[damage](lexical)
    emb = Counting()
    with caplog.at_level(logging.WARNING, logger="ctxret"):
        index = ContextualIndex(folder, embedder=emb, progress=False)
    aside = sorted(p.name for p in folder.glob("ctxret-lexical-ctxret.sqlite3.*-*") if not p.name.endswith("-wal"))
    if damage == "missing":
        assert aside == []
    else:
        assert len(aside) == 1, aside
        assert any(str(lexical) in r.message and aside[0] in r.message for r in caplog.records), caplog.text
    assert emb.texts == 0  # rebuilt from Chroma's stored texts: nothing embedded
    assert index.store.lexical.count() == index.store.count() == PIECES
    assert answers(index) == expected  # hybrid searches answer as before
    index.add_messages([{"role": "user", "content": "Foxtrot golf."}], thread_id="new")
    index.close()


def test_a_damaged_write_journal_is_moved_aside_and_the_store_opens(tmp_path, caplog):
    folder = tmp_path / "store"
    build(folder, lexical=False)
    journal = folder / "ctxret-journal-ctxret.sqlite3"
    overwrite(journal, 0.0, 0.0, b"garbage" * 20)
    with caplog.at_level(logging.WARNING, logger="ctxret"):
        index = ContextualIndex(folder, embedder=HashEmbedder(), progress=False, lexical=False)
    assert "write journal" in caplog.text and "announcements it held are lost" in caplog.text
    assert index.store.count() == PIECES
    index.add_messages([{"role": "user", "content": "Foxtrot golf."}], thread_id="new")
    assert index.store.count() == PIECES + 1
    index.close()


def test_a_file_closed_cleanly_is_stamped_and_the_stamp_goes_when_it_is_opened(tmp_path):
    folder = tmp_path / "store"
    build(folder)
    stamp = folder / "ctxret-lexical-ctxret.sqlite3.checked"
    assert stamp.exists()  # unchanged since this clean close: the next open does not read the whole file again
    index = ContextualIndex(folder, embedder=HashEmbedder(), progress=False)
    assert not stamp.exists()  # open: a crash from here on means a check on the next open
    index.close()
    assert stamp.exists()


def test_damage_met_by_a_read_is_a_store_error_naming_the_file_and_the_next_open_heals(tmp_path):
    folder = tmp_path / "store"
    build(folder)
    lexical = folder / "ctxret-lexical-ctxret.sqlite3"
    overwrite(lexical, 0.3, 1.0)  # the pages a search reads (opening the file reads the first ones only)
    opened = LexicalIndex(lexical)  # the file as a store holds it open: damage is met by the first search
    with pytest.raises(StoreError, match=f"the lexical file {lexical} is damaged .*open it again"):
        opened.search("alpha note 3", 5)
    assert opened.damaged  # so a store closing it does not stamp it as closed cleanly
    opened.close()
    reopened = ContextualIndex(folder, embedder=HashEmbedder(), progress=False)  # heals
    assert reopened.store.lexical.count() == PIECES
    reopened.close()


@pytest.mark.parametrize("damage", ["truncated", "not a database"])
def test_a_damaged_chroma_file_is_a_store_error_naming_it(tmp_path, damage):
    folder = tmp_path / "store"
    build(folder)
    chroma = folder / "chroma.sqlite3"
    saved = chroma.read_bytes()
    DAMAGE[damage](chroma)
    with pytest.raises(StoreError, match=f"{chroma} is damaged .*restore the store folder from a backup"):
        ContextualIndex(folder, embedder=HashEmbedder(), progress=False)
    chroma.write_bytes(saved)  # restored: the folder lock was given back, the store opens
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False) as index:
        assert index.store.count() == PIECES


def test_a_folder_deleted_under_a_live_process_refuses_writes_and_serves_no_ghost(tmp_path):
    folder = tmp_path / "store"
    index = ContextualIndex(folder, embedder=HashEmbedder(), progress=False)
    index.add_messages([{"role": "user", "content": "The vault code is 4711."}], thread_id="a")
    assert index.search("vault code", thread_id="a")[0].hits
    shutil.rmtree(folder)
    calls = {
        "write": lambda: index.add_messages([{"role": "user", "content": "More."}], thread_id="b"),
        "scoped search": lambda: index.search("vault code", thread_id="a"),
        "search": lambda: index.search("vault code"),
        "delete": lambda: index.delete(thread_id="a"),
        "stats": index.stats,
    }
    for name, call in calls.items():
        with pytest.raises(StoreError, match=f"the store folder {folder} was deleted while this index had it open"):
            call()
        assert not folder.exists(), name  # nothing recreated it
    again = ContextualIndex(folder, embedder=HashEmbedder(), progress=False)  # the same process opens the path
    assert again.store.count() == 0  # a new, empty store: not the deleted one's pieces
    assert not any(g.hits for g in again.search("vault code", score_threshold=None))
    again.add_messages([{"role": "user", "content": "A new beginning."}], thread_id="c")
    assert (folder / "chroma.sqlite3").exists() and again.store.count() == 1
    other = subprocess.run(  # the new folder is locked for this process: another one is refused
        [sys.executable, "-c", f"from ctxret import ContextualIndex; ContextualIndex({str(folder)!r}, embedder=None)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert other.returncode != 0 and "is in use by" in other.stderr
    again.close()
    index.close()
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False) as third:
        assert third.store.count() == 1
