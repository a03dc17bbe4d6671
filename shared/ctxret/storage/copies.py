"""The lexical file's copy of each piece's document and metadata, exactly as Chroma holds them.

An unscoped search reads the texts of the hits it keeps, and a thread's first search its pieces'
texts, from here (~0.4 ms for the ~32 kept hits of a search) instead of from Chroma (2.5–6 ms at
100K pieces). The copy (table ``piece_copies``, by the piece's rowid in the lexical file: a table of
its own, so that reading the postings does not page through it) is written in the same transaction
as the piece's tokens, by the same writes, replays and repairs, and is only read while no write to
Chroma is announced (:attr:`~.journal.Journal.pending`); an announcement lists the pieces it
writes, so the repair after a crash reads exactly those again from Chroma. A piece the copy lacks
(metadata JSON does not keep exactly) is read from Chroma.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .sql import in_chunks, reports_damage

if TYPE_CHECKING:
    from .base import VectorBackend
    from .journal import Journal

__all__ = ["Copies", "SCHEMA", "as_stored", "encode_copy"]

#: The copies' table, in the lexical file (created and dropped with the file's other tables).
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS piece_copies (rowid INTEGER PRIMARY KEY, document TEXT NOT NULL, "
    "metadata TEXT NOT NULL)"
)

#: A piece's copy as the file keeps it: ``(document, metadata as JSON)``, or ``(None, None)``: none kept.
Copy = tuple[str | None, str | None]


class Copies:
    """The copies in one lexical file, through the file's connection and lock: written inside the
    lexical write's transaction (:meth:`insert`, :meth:`delete`, :meth:`clear`), read as one snapshot
    with the journal (:meth:`stored`)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock, journal: Journal, path: str = "") -> None:
        self._db = db
        self._lock = lock
        self._journal = journal
        self.path = path  # the file's, for errors

    def insert(self, rowid: int | None, copy: Copy) -> None:
        """Inside a write transaction: keep the copy of the piece at ``rowid`` (nothing for ``(None, None)``)."""
        if copy[0] is not None and copy[1] is not None:
            self._db.execute("INSERT INTO piece_copies(rowid, document, metadata) VALUES (?, ?, ?)", (rowid, *copy))

    def delete(self, chunk: Sequence[str], marks: str) -> None:
        """Inside a write transaction, before the pieces' rows go: drop the copies of the ids in ``chunk``."""
        self._db.execute(
            f"DELETE FROM piece_copies WHERE rowid IN (SELECT rowid FROM pieces WHERE id IN ({marks}))", chunk
        )

    def clear(self) -> None:
        """Inside a write transaction: drop every copy."""
        self._db.execute("DELETE FROM piece_copies")

    @reports_damage
    def stored(self, ids: Iterable[str]) -> dict[str, tuple[str, dict[str, Any]]] | None:
        """The ``(document, metadata)`` of pieces as the vector store holds them, for the ids kept
        here with them (the rest: read the vector store). ``None`` while a write to the vector store
        is announced and not settled (:attr:`~.journal.Journal.pending`): until it settles, this copy
        may be behind. The announcement check and the rows are one snapshot of the file."""
        ids = list(dict.fromkeys(str(i) for i in ids))
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        with self._lock:
            self._db.execute("BEGIN")
            try:
                if self._journal.pending:
                    return None
                for chunk, marks in in_chunks(ids):
                    rows = self._db.execute(
                        "SELECT p.id, c.document, c.metadata FROM pieces p JOIN piece_copies c ON c.rowid = p.rowid "
                        f"WHERE p.id IN ({marks})",
                        chunk,
                    )
                    for pid, document, meta in rows:
                        out[pid] = (document, json.loads(meta))
            finally:
                self._db.execute("COMMIT")
        return out


def encode_copy(document: Any, metadata: Any) -> Copy:
    """A piece's document and metadata as the file keeps them (JSON); ``(None, None)`` when the
    metadata does not survive JSON unchanged or either is not valid UTF-8 (a lone surrogate): that
    piece is read from the vector store instead."""
    if not isinstance(document, str) or not isinstance(metadata, Mapping):
        return None, None
    try:
        encoded = json.dumps(dict(metadata), ensure_ascii=False, allow_nan=True)
        for text in (document, encoded):
            text.encode("utf-8")  # SQLite text is UTF-8: a lone surrogate raises here, not in the transaction
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return None, None
    return (document, encoded) if json.loads(encoded) == dict(metadata) else (None, None)


def as_stored(
    backend: VectorBackend,
    ids: Sequence[str],
    documents: Sequence[str],
    metadatas: Sequence[Mapping[str, Any]],
    again: set[str],
) -> list[tuple[Any, Any]]:
    """What Chroma now holds for pieces just written, for the copy: a new piece's document and
    metadata as sent (Chroma drops ``None`` values); a piece written before (``again``) is read
    back, since Chroma's upsert merges metadata with the keys it had."""
    back = {}
    if again:
        back = {
            r["id"]: (r.get("document") or "", dict(r.get("metadata") or {}))
            for r in backend.get(sorted(again), include=("documents", "metadatas"))
        }
    return [
        back.get(i, (None, None)) if i in again else (d, {k: v for k, v in m.items() if v is not None})
        for i, d, m in zip(ids, documents, metadatas, strict=False)
    ]
