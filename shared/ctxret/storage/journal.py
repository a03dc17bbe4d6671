"""The write journal: every write to the vector store announced in the lexical file first.

Every write to the vector store is announced by a row of its own in the file's ``pending_writes``
table (token, pid, host, the ids it touches), deleted in the same transaction as the lexical write
that follows it (:meth:`Journal.settle_latest`). Any number of writers (threads, processes sharing
the file) can be in flight: none can clear another's row, so a crash between the two stores always
leaves a row, and the next open repairs (:func:`~.lexical_sync.sync_from_store` reads the pieces a
gone writer announced again; :func:`~.replay.repair_writes` finishes or undoes its write). A writer
is gone when its process is (same host), or an hour after it wrote the row (another host).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from .sql import reports_damage

__all__ = ["Journal", "SCHEMA"]

#: The journal's table, in the lexical file (created and dropped with the file's other tables).
SCHEMA = (
    "CREATE TABLE IF NOT EXISTS pending_writes (token TEXT PRIMARY KEY, pid INTEGER NOT NULL, "
    "host TEXT NOT NULL, since REAL NOT NULL, ids TEXT)"
)

_HOST = socket.gethostname()
#: An announcement from another machine (a lexical file on a shared disk) counts as abandoned after this long.
_FOREIGN_PENDING_SECONDS = 3600.0


class Journal:
    """The announcements in one lexical file, read and written through the file's connection and lock
    (so that settling one is part of the lexical write's transaction)."""

    def __init__(self, db: sqlite3.Connection, lock: threading.RLock, path: str = "") -> None:
        self._db = db
        self._lock = lock
        self.path = path  # the file's, for errors
        # This object's writes announced by mark_pending() and not settled yet, per thread (LIFO).
        self._outstanding = threading.local()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            done = False
            try:
                yield
                done = True
            finally:
                self._db.execute("COMMIT" if done else "ROLLBACK")

    @property
    @reports_damage
    def pending(self) -> bool:
        """True while a write to the vector store may not have reached the lexical file yet (or crashed)."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM pending_writes LIMIT 1").fetchone() is not None

    @reports_damage
    def mark_pending(
        self,
        ids: Iterable[str] | None = None,
        *,
        new: Iterable[str] | None = None,
        stale: Iterable[str] = (),
        clear: bool = False,
    ) -> str:
        """Announce a write to the vector store; the write that follows (``settle=True``) clears it.

        ``ids``: the pieces the write touches (``None`` and nothing else given: it may touch any piece).
        A piece store's write says more, so that a crash can be finished or undone on the next open
        (:meth:`abandoned_writes`): ``new`` (ids not stored before; ``ids`` then lists the ones
        written again under the same id), ``stale`` (ids it deletes), or ``clear`` (it deletes
        every piece). If that write never comes (a crash, an error between the two stores), the
        announcement stays in the file until a repair (:func:`~.lexical_sync.sync_from_store`) finds
        its writer gone, and reads those pieces again from the vector store.
        """
        token = os.urandom(8).hex()
        listed: str | None
        if clear:
            listed = json.dumps({"clear": True})
        elif new is not None or stale:
            listed = json.dumps(
                {
                    "new": sorted({str(i) for i in new or ()}),
                    "rewritten": sorted({str(i) for i in ids or ()}),
                    "stale": sorted({str(i) for i in stale}),
                }
            )
        else:
            listed = None if ids is None else json.dumps(sorted({str(i) for i in ids}))
        with self._tx():
            self._db.execute(
                "INSERT INTO pending_writes(token, pid, host, since, ids) VALUES (?, ?, ?, ?, ?)",
                (token, os.getpid(), _HOST, time.time(), listed),
            )
        stack = getattr(self._outstanding, "tokens", None)
        if stack is None:
            stack = self._outstanding.tokens = []
        stack.append(token)
        return token

    @reports_damage
    def abandoned(self) -> set[str] | None:
        """The pieces announced by writers that are gone (:meth:`settle_all` would clear them): their
        content in the lexical file may be older than the vector store's. ``None``: a gone writer did
        not list them (every piece may be affected)."""
        out: set[str] = set()
        for _, listed in self._gone_announcements():
            found = _listed(listed)
            if found is None or found.get("clear"):
                return None
            for key in ("ids", "new", "rewritten", "stale"):
                out.update(found.get(key, ()))
        return out

    @reports_damage
    def abandoned_writes(self) -> list[dict[str, Any]]:
        """The announcements of gone writers, oldest first, as ``{"new", "rewritten", "stale"}`` id lists,
        ``{"clear": True}``, ``{"ids": [...]}`` (a write that did not say which ids were new) or ``{}``
        (it did not list its pieces)."""
        return [_listed(listed) or {} for _, listed in self._gone_announcements()]

    def _gone_announcements(self) -> list[tuple[str, str | None]]:
        """``(token, listed ids as JSON or None)`` of the announcements whose writers are gone, or
        are this object's (what a full repair settles), oldest first."""
        mine = set(getattr(self._outstanding, "tokens", None) or [])
        with self._lock:
            rows = self._db.execute("SELECT token, pid, host, since, ids FROM pending_writes ORDER BY since").fetchall()
        return [
            (token, listed)
            for token, pid, host, since, listed in rows
            if token in mine or pid == os.getpid() or not _alive(pid, host, since)
        ]

    def settle_latest(self) -> None:
        """Inside the lexical file's write transaction: clear this thread's latest announcement."""
        stack = getattr(self._outstanding, "tokens", None)
        if stack:
            self._db.execute("DELETE FROM pending_writes WHERE token = ?", (stack.pop(),))

    @reports_damage
    def settle(self) -> None:
        """Clear this thread's latest announcement in a transaction of its own (a write that reached
        the vector store and has nothing to write to the lexical file, or was refused whole)."""
        with self._tx():
            self.settle_latest()

    @reports_damage
    def settle_all(self) -> None:
        """After a full repair: clear the announcements whose writers are gone (or are this object's).

        A live writer's announcement (another process sharing the file) stays: its own write clears it.
        """
        with self._tx():
            for token, _ in self._gone_announcements():
                self._db.execute("DELETE FROM pending_writes WHERE token = ?", (token,))
        if getattr(self._outstanding, "tokens", None):
            self._outstanding.tokens = []


def _alive(pid: int, host: str, since: float) -> bool:
    """Whether the writer of an announcement may still be running."""
    if host != _HOST:
        return time.time() - since < _FOREIGN_PENDING_SECONDS
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _listed(listed: str | None) -> dict[str, Any] | None:
    """An announcement's id lists (see :meth:`Journal.mark_pending`); ``None``: none listed."""
    if listed is None:
        return None
    found = json.loads(listed)
    return {"ids": found} if isinstance(found, list) else dict(found)
