"""Turn claims: appends to one thread from several processes (a Chroma server) number their turns without a lock.

On an embedded folder one process writes (the folder lock) and appends to a thread take turns inside it
(:meth:`.lock.Writers.appending`). On a server, processes on any host may append to the same thread at once. Each
append *claims* the turn slots it is about to write before it writes them, in ``<collection>-claims``:

* a new turn is the slot ``(n, 0)``; adding to stored turn ``n`` (an assistant reply or a tool result sent after its
  question) is the slot ``(n, v)``, ``v`` the version of the turn the append read (its sources and results);
* a slot is a record id, and Chroma's ``add`` keeps the first record of an id and ignores later ones (checked on
  chromadb 1.5: a second ``add`` of an id leaves the first record), so reading the records back tells each
  claimer whether it won. A new-turn slot lost means another append took that number: take the next one; a
  continuation slot lost means another append is changing that turn: wait for its write, read again;
* the winner checks that no stored turn holds its numbers (a write that landed and released its claims between
  its read and its claim) and that the turn it continues is as it read it, writes, raises the thread's head record,
  and removes its claims. An append that fails keeps its new-turn claims (their numbers stay unused: a retry of the
  same append takes them again), and gives back its continuation slot.

Where a thread ends (:meth:`TurnClaims.end`): every append raises the thread's **head record** (one record per thread,
``<thread>:head``) to the highest number it wrote, and every number above the record is *witnessed*: by a stored turn,
or by a claim (an append in flight, failed or killed). So the numbers above the record are dense, and
:func:`~.threads.probe_up` finds the highest number in use exactly, however many numbers killed appends left unused
(a gap, never a duplicate) and wherever turns were deleted below it. Two writes raising the record at once may leave
it lower than the higher of them: it is a floor, never trusted as the end.

A continuation slot held by an append that is gone is taken over: at once when its process (on this host) is gone,
else after ``lease`` seconds (another host's, or a process that hangs).

**Writes announced.** A server has no local journal, so a write that removes pieces of one thread (a turn rewritten,
a thread replaced) is announced here first (``<thread>:write:<token>``: the ids it adds and removes) and the
announcement removed once the write is done (:meth:`TurnClaims.announce`, :meth:`TurnClaims.settle`). The next
writer of that thread (an append reading where it ends, a rewrite, a numbered write) finishes or undoes a write whose
process is gone (:meth:`TurnClaims.abandoned`; ``PieceStore.repair_thread``): a kill leaves the thread old or new once
anyone writes it again. A writer on another host counts as gone an hour after its announcement.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import CtxretError
from .base import VectorBackend
from .threads import ThreadEnd, chat_head_scan, last_stored, probe_up, taken_turns, turn_key

logger = logging.getLogger(__name__)

__all__ = ["CLAIMS_SUFFIX", "Claim", "TurnClaims"]

CLAIMS_SUFFIX = "-claims"
_HOST = socket.gethostname()
#: An announced write from another host counts as abandoned after this long (its process cannot be checked).
_FOREIGN_WRITE_SECONDS = 3600.0
_ONE = np.ones((1, 1), np.float32)  # a claim's vector (never searched)


@dataclass
class Claim:
    """The slots one append holds in a thread: the new turn numbers it won and the continuation slot (record
    ids), kept while it reads the thread again and released after its write."""

    thread_id: str
    ids: list[str] = field(default_factory=list)
    numbers: set[int] = field(default_factory=set)
    continuation: tuple[int, int] | None = None  # (turn, version) of the continuation slot held
    continuation_id: str | None = None
    waits: int = 0  # how often it waited for another append's continuation (the wait grows: 0.05 s to 1 s)
    floor: int = 0  # the highest number found stored after it was claimed: numbers above it only
    waiting_since: float | None = None  # when it began waiting for another append's continuation slot


class TurnClaims:
    """The turn claims and head records of one collection on a Chroma server (see the module docstring)."""

    def __init__(self, backend: VectorBackend, *, lease: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.backend = backend
        self.name = backend.collection_name + CLAIMS_SUFFIX
        self.lease = float(lease)
        self._clock = clock
        self._open = False
        self.token = uuid.uuid4().hex

    def collection(self) -> str:
        """The claims collection's name, opened (created) on first use."""
        if not self._open:
            self.backend.open_side(self.name, "claims")
            self._open = True
        return self.name

    def _read(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        return self.backend.get(ids, include=("metadatas",), name=self.collection())

    @staticmethod
    def _thread(thread_id: str) -> str:
        return hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @classmethod
    def slot_id(cls, thread_id: str, index: int, version: int, attempt: int = 0) -> str:
        return f"{cls._thread(thread_id)}:{index}:{version}:{attempt}"

    @classmethod
    def head_id(cls, thread_id: str) -> str:
        return f"{cls._thread(thread_id)}:head"

    # -- where a thread ends ----------------------------------------------------------------------
    def head(self, thread_id: str) -> int | None:
        """The thread's head record (a floor of the numbers in use), ``None`` when it has none."""
        page = self._read([self.head_id(thread_id)])
        meta = (page[0]["metadata"] or {}) if page else {}
        return int(meta["head"]) if meta.get("thread_id") == thread_id and "head" in meta else None

    def set_head(self, thread_id: str, n: int) -> None:
        """Make the thread's head record ``n`` (what a rewrite of the whole thread leaves; a new record)."""
        meta = {"thread_id": thread_id, "kind": "head", "head": int(n)}
        self.backend.upsert([self.head_id(thread_id)], _ONE, [""], [meta], name=self.collection())

    def raise_heads(self, heads: Mapping[str, int]) -> None:
        """Raise the head records of threads that have one to the numbers a write stored (a thread without one
        gets it when an append reads where it ends)."""
        if not heads:
            return
        ids = {self.head_id(t): t for t in heads}
        up: dict[str, int] = {}
        for rec in self._read(list(ids)):
            thread = ids.get(rec["id"])
            meta = rec["metadata"] or {}
            if thread is not None and meta.get("thread_id") == thread and int(meta.get("head", 0)) < heads[thread]:
                up[thread] = heads[thread]
        if up:
            self.backend.upsert(
                [self.head_id(t) for t in up],
                np.ones((len(up), 1), np.float32),
                [""] * len(up),
                [{"thread_id": t, "kind": "head", "head": int(n)} for t, n in up.items()],
                name=self.collection(),
            )

    def claimed(self, thread_id: str, n: int) -> bool:
        """Whether new turn number ``n`` of the thread is claimed (by an append in flight, failed or killed)."""
        return bool(self._read([self.slot_id(thread_id, n, 0)]))

    def end(self, reader: Any, thread_id: str) -> ThreadEnd:
        """Where the thread ends: the highest number in use (stored or claimed) above its head record, exactly, and
        its last stored turn. A thread without a record (written before records, or by an older version) has its
        turn numbers read once, and gets one."""
        floor = self.head(thread_id)
        if floor is None:
            floor = chat_head_scan(reader, thread_id)
            self.set_head(thread_id, floor)
        top = probe_up(lambda n: bool(taken_turns(reader, thread_id, [n])) or self.claimed(thread_id, n), floor)
        return ThreadEnd(last_stored(reader, thread_id, top), top)

    # -- writes announced --------------------------------------------------------------------------
    def announce(self, thread_id: str, new: Sequence[str], stale: Sequence[str]) -> str:
        """Before a write of one thread that removes pieces: its announcement's id (:meth:`settle` it after)."""
        rid = f"{self._thread(thread_id)}:write:{uuid.uuid4().hex}"
        body = json.dumps({"new": sorted(set(new)), "stale": sorted(set(stale))})
        self.backend.add([rid], _ONE, [body], [self._meta(thread_id=thread_id, kind="write")], name=self.collection())
        return rid

    def settle(self, rid: str) -> None:
        """The announced write is done (or repaired): its announcement goes."""
        try:
            self.backend.delete_ids([rid], name=self.collection())
        except CtxretError as e:  # left behind: the next writer of the thread finds the write complete
            logger.warning("could not remove a write announcement (%s): %s", rid, e)

    def abandoned(self, thread_id: str) -> list[tuple[str, list[str], list[str]]]:
        """``(id, new ids, stale ids)`` of the thread's announced writes whose process is gone, oldest first."""
        where = {"$and": [{"thread_id": thread_id}, {"kind": "write"}]}
        found = []
        now = self._clock()
        for rec in self.backend.iter_records(where, ("metadatas", "documents"), name=self.collection()):
            meta = rec["metadata"] or {}
            if meta.get("thread_id") != thread_id or meta.get("token") == self.token:
                continue
            age = now - float(meta.get("ts", now))
            if meta.get("host") == _HOST and "pid" in meta:
                if _holder_alive(meta):
                    continue
            elif age < _FOREIGN_WRITE_SECONDS:
                continue
            try:
                body = json.loads(rec.get("document") or "{}")
            except ValueError:
                body = {}
            new, stale = list(body.get("new", [])), list(body.get("stale", []))
            found.append((float(meta.get("ts", 0.0)), rec["id"], new, stale))
        return [(rid, new, stale) for _, rid, new, stale in sorted(found)]

    # -- claims -----------------------------------------------------------------------------------
    def _meta(self, **fields: Any) -> dict[str, Any]:
        return {**fields, "token": self.token, "pid": os.getpid(), "host": _HOST, "ts": self._clock()}

    def claim_new(self, thread_id: str, numbers: Sequence[int]) -> set[int]:
        """Claim new turn numbers; returns the ones won (the others are another append's)."""
        if not numbers:
            return set()
        ids = [self.slot_id(thread_id, n, 0) for n in numbers]
        metas = [
            self._meta(thread_id=thread_id, kind="turn", turn_index=int(n), turn_id=turn_key(thread_id, n), version=0)
            for n in numbers
        ]
        self.backend.add(ids, [[1.0]] * len(ids), None, metas, name=self.collection())
        mine = {r["id"] for r in self._read(ids) if (r["metadata"] or {}).get("token") == self.token}
        return {n for n, rid in zip(numbers, ids, strict=True) if rid in mine}

    def claim_continuation(self, thread_id: str, turn: int, version: int) -> str | None:
        """Claim the right to add to stored turn ``turn`` as it is at ``version``: the slot's id, or ``None`` while
        another live append holds it (wait for its write, then read the turn again)."""
        attempt = self._attempt(thread_id, turn, version, self._clock())
        if attempt is None:
            return None
        rid = self.slot_id(thread_id, turn, version, attempt)
        meta = self._meta(thread_id=thread_id, kind="continued", turn_index=int(turn), version=int(version))
        self.backend.add([rid], [[1.0]], None, [meta], name=self.collection())
        page = self._read([rid])
        held = (page[0]["metadata"] or {}) if page else {}
        return rid if held.get("token") == self.token else None

    def _attempt(self, thread_id: str, turn: int, version: int, now: float) -> int | None:
        """The attempt number a continuation of ``(turn, version)`` claims: the first whose slot is free, after
        slots whose holder is gone (its process on this host, or ``lease`` seconds); ``None`` while a live claim
        holds it."""
        attempt = 0
        while True:
            page = self._read([self.slot_id(thread_id, turn, version, attempt)])
            if not page:
                return attempt
            meta = page[0]["metadata"] or {}
            if meta.get("token") == self.token:
                return attempt
            if _holder_alive(meta) and now - float(meta.get("ts", 0.0)) < self.lease:
                return None
            attempt += 1

    def release(self, claim: Claim | None, *, failed: bool = False) -> None:
        """Remove a claim's records after its write; ``failed``: only its continuation slot (the new turn numbers it
        won stay claimed, so no other append takes them while this one may be retried)."""
        if claim is None or not claim.ids:
            return
        ids = [claim.continuation_id] if failed and claim.continuation_id is not None else [] if failed else claim.ids
        if not ids:
            return
        try:
            self.backend.delete_ids(list(ids), name=self.collection())
        except CtxretError as e:  # a claim left behind only keeps its number unused
            logger.warning("could not release turn claims of thread %r: %s", claim.thread_id, e)

    def clear(self, thread_id: str | None = None) -> None:
        """Forget the claims and head record of a thread (deleted), or of every thread (the store cleared)."""
        self.backend.delete_where(None if thread_id is None else {"thread_id": thread_id}, name=self.collection())


def _holder_alive(meta: Mapping[str, Any]) -> bool:
    """Whether the append that holds a slot may still run: its process on this host exists (another host's, or a
    slot written by an older version without its process: as long as its lease runs)."""
    if meta.get("host") != _HOST or "pid" not in meta:
        return True
    try:
        os.kill(int(meta["pid"]), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError):
        return True
    return True
