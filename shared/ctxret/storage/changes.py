"""A change log beside the pieces, so every process sharing a Chroma server sees every committed write.

Each process keeps things derived from the collection: a per-thread cache of pieces (thread-scoped
searches) and, with ``lexical_path``, a local SQLite BM25 file. On an embedded folder there is one
process (the folder lock), so its own writes keep them current. On a server, other processes and
hosts write too: every write through ctxret therefore appends one record to ``<collection>-changes``
*after* its data is committed — the piece ids it wrote and deleted and their threads — and before
each search a process reads the records since its last look (one small filtered ``get``, a few ms)
and replays them: the touched threads leave the cache, the lexical file takes the new texts from
Chroma and drops the deleted ids. Bounded cost per search: the records of the last
``window`` seconds.

Ordering without a counter: records carry the writer's clock (``ts``) and are read from
``last look − window``; records already applied are remembered by id for that window, so a record
written a little late (a slow commit, clocks up to ``window`` seconds apart — keep hosts on NTP) is
still seen once. Records older than ``retention`` are deleted by writers now and then; a process
that has not looked for longer than that resynchronises everything (cache dropped, lexical file
repaired from Chroma by id), as it also does on open. Every ``check_every`` seconds the piece counts
of Chroma and the lexical file are compared as a safety net (a writer that died between its data and
its record).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..errors import CtxretError, StoreError
from .base import VectorBackend

logger = logging.getLogger(__name__)

__all__ = ["ChangeLog", "CHANGES_SUFFIX"]

CHANGES_SUFFIX = "-changes"


class ChangeLog:
    """The change records of one collection (see the module docstring)."""

    def __init__(
        self,
        backend: VectorBackend,
        *,
        window: float = 120.0,
        retention: float = 3600.0,
        check_every: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.name = backend.collection_name + CHANGES_SUFFIX
        self.window = float(window)
        self.retention = float(retention)
        self.check_every = float(check_every)
        self._clock = clock
        self._open = False  # whether the log's collection was opened (again after a failure)
        self.writer = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._seen: dict[str, float] = {}  # record id -> ts, for the window
        self._last_look: float | None = None
        self._last_check = 0.0
        self._writes = 0
        self._unsent: list[tuple[str, str]] = []  # (record id, body) Chroma has not taken yet

    def _collection(self) -> str:
        if not self._open:
            self.backend.open_side(self.name, "changes")
            self._open = True
        return self.name

    def record(self, upserted: Sequence[str], deleted: Sequence[str], threads: Iterable[str]) -> None:
        """Append the record of one committed write (call after the data is in).

        A record Chroma does not take (a server gone mid-call) is kept and sent again before this
        process's next record or look; the :class:`StoreError` says the data itself is stored.
        """
        if not upserted and not deleted:
            return
        body = {"up": list(upserted), "del": list(deleted), "threads": sorted(set(threads))}
        self._unsent.append((uuid.uuid4().hex, json.dumps(body)))
        self._send("record a write in its change log")
        self._writes += 1
        if self._writes % 100 == 0:
            self.compact()

    def _send(self, what: str) -> None:
        """Add the records not sent yet, oldest first (each keeps its id: a resend is not a duplicate)."""
        while self._unsent:
            rid, body = self._unsent[0]
            now = self._clock()
            try:
                self.backend.add(
                    [rid],
                    np.ones((1, 1), np.float32),
                    [body],
                    [{"ts": now, "writer": self.writer}],
                    name=self._collection(),
                )
            except CtxretError as e:
                self._open = False  # open it again next time (the server may have restarted, the log been dropped)
                err = f"could not {what}: {e}"
                raise StoreError(
                    f"{err} -- the pieces themselves are stored; {len(self._unsent)} change record(s) for other "
                    "processes sharing the server are kept and sent with this process's next write or search "
                    f"(until then the others see the change at their next count check, every {self.check_every:.0f} "
                    "s, or when they reopen the store)"
                ) from e
            self._seen[rid] = now  # our own change is applied already
            self._unsent.pop(0)

    def compact(self) -> None:
        """Delete records older than the retention (any writer may; readers that old resynchronise)."""
        try:
            self.backend.delete_where({"ts": {"$lt": self._clock() - self.retention}}, name=self._collection())
        except Exception:  # noqa: BLE001  # best effort: an old record only costs a little reading
            logger.debug("change log compaction failed", exc_info=True)

    def poll(self) -> tuple[list[dict[str, Any]], bool, bool]:
        """``(new records, count check due, resync everything)``.

        The records are those other processes committed since the last look. ``resync`` is set on the
        first look and after a pause longer than the retention (records may be gone): the caller then
        checks everything, id by id. ``check`` is set every ``check_every`` seconds: compare counts.
        """
        self._send("send the change records kept from an earlier write")
        now = self._clock()
        last = self._last_look
        self._last_look = now
        if last is None or now - last > self.retention - self.window:
            self._seen = {}
            self._last_check = now
            return [], False, True
        try:
            where = {"ts": {"$gte": last - self.window}}
            got = list(self.backend.iter_records(where, ("metadatas", "documents"), name=self._collection()))
        except CtxretError as e:
            self._open = False
            self._last_look = last  # look again from the same point next time
            raise StoreError(f"could not read its change log: {e}") from e
        fresh = []
        for rec in got:
            rid, meta, doc = rec["id"], rec["metadata"], rec["document"]
            if rid in self._seen:
                continue
            ts = float((meta or {}).get("ts", now))
            self._seen[rid] = ts
            try:
                fresh.append(json.loads(doc or "{}"))
            except ValueError:
                logger.warning("unreadable change record %s in %s: resynchronising", rid, self.name)
                return [], False, True
        horizon = now - 2 * self.window
        self._seen = {k: v for k, v in self._seen.items() if v >= horizon}
        due = now - self._last_check > self.check_every
        if due:
            self._last_check = now
        return fresh, due, any(r.get("all") for r in fresh)

    def record_everything(self) -> None:
        """A change to every piece (a rebuild swapped the collection): readers resynchronise."""
        self._unsent.append((uuid.uuid4().hex, json.dumps({"all": True})))
        self._send("record a rebuild in its change log")
