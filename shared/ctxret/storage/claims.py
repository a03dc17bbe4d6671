"""Turn claims: appends to one thread from several processes (a Chroma server) number their turns without a lock.

On an embedded folder one process writes (the folder lock) and appends to a thread take turns inside it
(:meth:`.lock.Writers.appending`). On a server, processes on any host may append to the same thread at once. Each
append *claims* the turn slots it is about to write before it writes them, in ``<collection>-claims``:

* a new turn is the slot ``(n, 0)``; adding to stored turn ``n`` (an assistant reply or a tool result sent after its
  question) is the slot ``(n, v)``, ``v`` the version of the turn the append read (its sources and results);
* a slot is a record id, and Chroma's ``add`` keeps the first record of an id and ignores later ones (checked on
  chromadb 1.5: a second ``add`` of an id leaves the first record), so reading the records back tells each
  claimer whether it won. A new-turn slot lost means another append took that number: take the next one; a
  continuation slot lost means another append is changing that turn: wait for its write, read again (the new-turn
  numbers won are kept meanwhile: a number once claimed is always written, so numbers stay dense);
* the winner checks that no stored turn holds its numbers (a write that landed and released its claims between
  its read and its claim) and that the turn it continues is as it read it, writes, and removes its claims: the
  claims collection holds only appends in flight.

A claimed new-turn number raises the thread's head for other appenders (:meth:`TurnClaims.head`), so two appenders
never number a turn alike, and turn numbers stay dense and in claim order. A process killed between its claim and its
write leaves its claim: that number stays unused (a gap, never a duplicate), and a continuation slot it held is
taken over after ``lease`` seconds.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import CtxretError
from .base import VectorBackend
from .threads import chat_head, turn_key

logger = logging.getLogger(__name__)

__all__ = ["CLAIMS_SUFFIX", "Claim", "TurnClaims"]

CLAIMS_SUFFIX = "-claims"


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


class _Reader:
    """The claims collection read like pieces (``iter_records``), for :func:`chat_head`."""

    def __init__(self, claims: TurnClaims) -> None:
        self.claims = claims

    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        return self.claims.backend.iter_records(where, include, name=self.claims.collection(), limit=limit)


class TurnClaims:
    """The turn claims of one collection on a Chroma server (see the module docstring)."""

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
    def slot_id(thread_id: str, index: int, version: int, attempt: int = 0) -> str:
        thread = hashlib.sha256(thread_id.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return f"{thread}:{index}:{version}:{attempt}"

    def head(self, thread_id: str, hint: int = 0) -> int:
        """The highest new-turn number claimed in the thread (0: none in flight)."""
        return chat_head(_Reader(self), thread_id, hint)

    def claim_new(self, thread_id: str, numbers: Sequence[int]) -> set[int]:
        """Claim new turn numbers; returns the ones won (the others are another append's)."""
        if not numbers:
            return set()
        now = self._clock()
        ids = [self.slot_id(thread_id, n, 0) for n in numbers]
        metas = [
            {
                "thread_id": thread_id,
                "kind": "turn",
                "turn_index": int(n),
                "turn_id": turn_key(thread_id, n),
                "version": 0,
                "token": self.token,
                "ts": now,
            }
            for n in numbers
        ]
        self.backend.add(ids, [[1.0]] * len(ids), None, metas, name=self.collection())
        mine = {r["id"] for r in self._read(ids) if (r["metadata"] or {}).get("token") == self.token}
        return {n for n, rid in zip(numbers, ids, strict=True) if rid in mine}

    def claim_continuation(self, thread_id: str, turn: int, version: int) -> str | None:
        """Claim the right to add to stored turn ``turn`` as it is at ``version``: the slot's id, or ``None`` while
        another live append holds it (wait for its write, then read the turn again)."""
        now = self._clock()
        attempt = self._attempt(thread_id, turn, version, now)
        if attempt is None:
            return None
        rid = self.slot_id(thread_id, turn, version, attempt)
        meta = {
            "thread_id": thread_id,
            "kind": "continued",
            "turn_index": int(turn),
            "version": int(version),
            "token": self.token,
            "ts": now,
        }
        self.backend.add([rid], [[1.0]], None, [meta], name=self.collection())
        page = self._read([rid])
        held = (page[0]["metadata"] or {}) if page else {}
        return rid if held.get("token") == self.token else None

    def _attempt(self, thread_id: str, turn: int, version: int, now: float) -> int | None:
        """The attempt number a continuation of ``(turn, version)`` claims: the first whose slot is free, after
        slots held past their lease (a killed appender); ``None`` while a live claim holds it."""
        attempt = 0
        while True:
            page = self._read([self.slot_id(thread_id, turn, version, attempt)])
            if not page:
                return attempt
            meta = page[0]["metadata"] or {}
            if meta.get("token") == self.token:
                return attempt
            if now - float(meta.get("ts", 0.0)) < self.lease:
                return None
            attempt += 1

    def release(self, claim: Claim | None) -> None:
        """Remove a claim's records (after its write, or when the append gives up)."""
        if claim is None or not claim.ids:
            return
        try:
            self.backend.delete_ids(list(claim.ids), name=self.collection())
        except CtxretError as e:  # a claim left behind only keeps its number unused
            logger.warning("could not release turn claims of thread %r: %s", claim.thread_id, e)

    def clear(self, thread_id: str | None = None) -> None:
        """Forget the claims of a thread (deleted), or of every thread (the store cleared)."""
        self.backend.delete_where(None if thread_id is None else {"thread_id": thread_id}, name=self.collection())
