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
from .chroma import ChromaStore, _store_error
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
        self, where: Mapping[str, Any] | None = None, include: Sequence[str] = ("metadatas",),
        name: str | None = None, limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:  # fmt: skip
        page = self.claims._call("read turn claims", lambda col: col.get(where=where, include=list(include),
                                                                          limit=limit))  # fmt: skip
        for i, rid in enumerate(page["ids"]):
            metas = page.get("metadatas")
            yield {"id": rid, "metadata": metas[i] if metas else None}


class TurnClaims:
    """The turn claims of one collection on a Chroma server (see the module docstring)."""

    def __init__(self, chroma: ChromaStore, *, lease: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.chroma = chroma
        self.name = chroma.collection_name + CLAIMS_SUFFIX
        self.lease = float(lease)
        self._clock = clock
        self._col: Any = None
        self.token = uuid.uuid4().hex

    def _collection(self) -> Any:
        if self._col is None:
            self._col = self.chroma.client.get_or_create_collection(
                self.name, metadata={"ctxret:claims": True}, embedding_function=None
            )
        return self._col

    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        try:
            return fn(self._collection())
        except CtxretError:
            raise
        except Exception as e:
            raise _store_error(self.chroma, what, e) from e

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
        metas = [{"thread_id": thread_id, "kind": "turn", "turn_index": int(n), "turn_id": turn_key(thread_id, n),
                  "version": 0, "token": self.token, "ts": now} for n in numbers]  # fmt: skip
        self._call("claim turns", lambda col: col.add(ids=ids, embeddings=[[1.0]] * len(ids), metadatas=metas))
        page = self._call("read turn claims", lambda col: col.get(ids=ids, include=["metadatas"]))
        mine = {rid for rid, meta in zip(page["ids"], page["metadatas"] or [], strict=False)
                if (meta or {}).get("token") == self.token}  # fmt: skip
        return {n for n, rid in zip(numbers, ids, strict=True) if rid in mine}

    def claim_continuation(self, thread_id: str, turn: int, version: int) -> str | None:
        """Claim the right to add to stored turn ``turn`` as it is at ``version``: the slot's id, or ``None`` while
        another live append holds it (wait for its write, then read the turn again)."""
        now = self._clock()
        attempt = self._attempt(thread_id, turn, version, now)
        if attempt is None:
            return None
        rid = self.slot_id(thread_id, turn, version, attempt)
        meta = {"thread_id": thread_id, "kind": "continued", "turn_index": int(turn), "version": int(version),
                "token": self.token, "ts": now}  # fmt: skip
        self._call("claim turns", lambda col: col.add(ids=[rid], embeddings=[[1.0]], metadatas=[meta]))
        page = self._call("read turn claims", lambda col: col.get(ids=[rid], include=["metadatas"]))
        held = ((page["metadatas"] or [{}])[0] or {}) if page["ids"] else {}
        return rid if held.get("token") == self.token else None

    def _attempt(self, thread_id: str, turn: int, version: int, now: float) -> int | None:
        """The attempt number a continuation of ``(turn, version)`` claims: the first whose slot is free, after
        slots held past their lease (a killed appender); ``None`` while a live claim holds it."""
        attempt = 0
        while True:
            rid = self.slot_id(thread_id, turn, version, attempt)

            def read(col: Any, rid: str = rid) -> Any:
                return col.get(ids=[rid], include=["metadatas"])

            page = self._call("read turn claims", read)
            if not page["ids"]:
                return attempt
            meta = (page["metadatas"] or [{}])[0] or {}
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
            self._call("release turn claims", lambda col: col.delete(ids=list(claim.ids)))
        except CtxretError as e:  # a claim left behind only keeps its number unused
            logger.warning("could not release turn claims of thread %r: %s", claim.thread_id, e)

    def clear(self, thread_id: str | None = None) -> None:
        """Forget the claims of a thread (deleted), or of every thread (the store cleared)."""
        where = None if thread_id is None else {"thread_id": thread_id}
        self._call("clear turn claims", lambda col: col.delete(where=where) if where else
                   col.delete(ids=col.get(include=[])["ids"] or ["-"]))  # fmt: skip
