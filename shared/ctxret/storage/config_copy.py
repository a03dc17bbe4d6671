"""A copy of a collection's index config in its lexical file, so ``ctxret stats`` can answer without Chroma.

``stats`` needs the counts (the lexical file's index has them) and the index config recorded on the
Chroma collection. Reading that config meant importing chromadb and opening a client — most of a
search's start-up. The store writes a copy of the config into the lexical file whenever it records
one on the collection (:meth:`PieceStore.open`, the end of a rebuild's swap: :func:`record`), and
:func:`quick_stats` reads counts and config from the file alone, with the standard ``sqlite3``, read
only, without importing chromadb or the model, taking no lock and never reading the postings.

It answers only when the file can be trusted on its own — the same rule under which searches take
texts from the file's copy: the file holds the copy for this collection, it is filled (its pieces
table exists and its version is current), no write is announced (``pending_writes`` empty) and the
Chroma folder still lists the collection (its ``chroma.sqlite3`` read the same way). Otherwise it
returns ``None`` and ``stats`` opens the store as before.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["STORE_FILE", "TABLE", "holds_store", "lists_collection", "quick_stats", "read", "record"]

#: The table of the lexical file that holds the copies: one row per collection.
TABLE = "ctxret_index_config"


def record(lexical: Any, collection: str, config: Mapping[str, Any] | None) -> None:
    """Write ``config`` (as recorded on ``collection``) into ``lexical``'s file (a no-op without a file
    or config). A failure is logged, and the copy removed when possible: ``stats`` then reads Chroma."""
    path = getattr(lexical, "path", None)
    if lexical is None or not path or path == ":memory:":
        return
    try:
        with _connect(str(path)) as db:
            db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (collection TEXT PRIMARY KEY, config TEXT NOT NULL)")
            if config:
                db.execute(
                    f"INSERT OR REPLACE INTO {TABLE}(collection, config) VALUES (?, ?)",
                    (collection, json.dumps(dict(config), default=str)),
                )
            else:
                db.execute(f"DELETE FROM {TABLE} WHERE collection = ?", (collection,))
    except sqlite3.Error as e:
        logger.warning(
            "could not copy the index config of %r into %s (%s); stats will read Chroma", collection, path, e
        )
        try:
            with _connect(str(path)) as db:
                db.execute(f"DELETE FROM {TABLE} WHERE collection = ?", (collection,))
        except sqlite3.Error:
            pass


def _connect(path: str) -> sqlite3.Connection:
    return sqlite3.connect(path, timeout=30.0)


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=5.0)


def read(path: str | Path, collection: str) -> dict[str, Any] | None:
    """The config copy of ``collection`` in the lexical file at ``path``, or ``None``."""
    try:
        db = _read_only(Path(path))
    except sqlite3.Error:
        return None
    try:
        row = db.execute(f"SELECT config FROM {TABLE} WHERE collection = ?", (collection,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    return dict(json.loads(row[0])) if row is not None else None


#: The database file of an embedded Chroma folder.
STORE_FILE = "chroma.sqlite3"


def holds_store(folder: str | Path) -> bool:
    """Whether ``folder`` holds an embedded store (Chroma's database file), found without opening it: a command that
    needs an index asks this first, so that a folder with none is named as such and nothing is created in it."""
    return (Path(folder) / STORE_FILE).is_file()


def lists_collection(folder: str | Path, collection: str) -> bool:
    """Whether the embedded Chroma folder lists ``collection``, read only from its database file with the standard
    ``sqlite3`` (no chromadb, nothing created; any doubt: ``False``)."""
    return _chroma_lists(Path(folder), collection)


def _chroma_lists(folder: Path, collection: str) -> bool:
    """Whether the embedded Chroma folder lists ``collection`` (read only from its SQLite file; any doubt:
    ``False``, so the caller asks Chroma itself)."""
    file = folder / STORE_FILE
    if not file.is_file():
        return False
    try:
        db = _read_only(file)
        try:
            return db.execute("SELECT 1 FROM collections WHERE name = ?", (collection,)).fetchone() is not None
        finally:
            db.close()
    except sqlite3.Error:
        return False


def quick_stats(folder: str | Path, lexical_path: str | Path, collection: str) -> dict[str, Any] | None:
    """``PieceStore.stats()`` plus ``"config"`` from the lexical file alone (see the module docstring), or
    ``None`` when the file cannot answer on its own."""
    from .lexical import LEXICAL_VERSION

    path = Path(lexical_path)
    if not path.is_file() or not _chroma_lists(Path(folder), collection):
        return None
    try:
        db = _read_only(path)
    except sqlite3.Error:
        return None
    try:
        db.execute("BEGIN")  # one snapshot: the marker, the version, the copy and the counts
        version = db.execute("SELECT value FROM ctxret_meta WHERE key = 'version'").fetchone()
        if version is None or not str(version[0]).startswith(f"{LEXICAL_VERSION}/"):
            return None
        if db.execute("SELECT 1 FROM pending_writes LIMIT 1").fetchone() is not None:
            return None
        row = db.execute(f"SELECT config FROM {TABLE} WHERE collection = ?", (collection,)).fetchone()
        if row is None:
            return None
        counts = db.execute(
            "SELECT thread_id, count(*), count(DISTINCT turn_id) FROM pieces GROUP BY thread_id"
        ).fetchall()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    per_thread = {str(t): int(n) for t, n, _ in counts}
    return {
        "pieces": sum(per_thread.values()),
        "turns": sum(int(turns) for _, _, turns in counts),
        "threads": len(per_thread),
        "pieces_per_thread": dict(sorted(per_thread.items())),
        "collection": collection,
        "store": str(Path(folder).expanduser()),
        "lexical": str(path),
        "config": dict(json.loads(row[0])),
    }
