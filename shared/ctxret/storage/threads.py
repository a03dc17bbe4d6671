"""What an append reads of a chat thread: its last turn's number, its last turns, and which messages it holds.

Chat turns are numbered 1, 2, … inside their thread (``turn_index``; documents' sections are not chat turns).
An append (:mod:`ctxret.ingest.append`) numbers the new turns after the last one, so it needs that number without
reading the thread: :func:`chat_head` finds it with a few one-record probes (``turn_index >= n``, a doubling then a
bisection: about 2·log2(turns) reads of no record at all, ~1 ms each on an embedded store; two when the caller
knows the head from an earlier append). The rest reads only the turns at the end (:func:`chat_turns`) and the
pieces whose message keys a call sends again (:func:`stored_keys`, :func:`turns_of_calls`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

__all__ = ["RecordReader", "chat_head", "chat_turns", "stored_keys", "turns_of_calls"]

_IN_CHUNK = 256


class RecordReader(Protocol):
    """What these reads need of a store (``ChromaStore`` has it)."""

    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]: ...


def _chat(thread_id: str, *clauses: Mapping[str, Any]) -> dict[str, Any]:
    return {"$and": [{"thread_id": thread_id}, {"kind": "turn"}, *clauses]}


def _has_turn_from(store: RecordReader, thread_id: str, index: int) -> bool:
    where = _chat(thread_id, {"turn_index": {"$gte": int(index)}})
    return any(True for _ in store.iter_records(where, include=(), limit=1))


def chat_head(store: RecordReader, thread_id: str, hint: int = 0) -> int:
    """The number of the thread's last chat turn (0: none). ``hint``: the head as last seen (checked, not trusted)."""
    if hint > 0 and _has_turn_from(store, thread_id, hint):
        if not _has_turn_from(store, thread_id, hint + 1):
            return hint
        low = hint  # a turn >= low exists; find the first missing by doubling
    else:
        if not _has_turn_from(store, thread_id, 1):
            return 0
        low = 1
    step = 1
    high = low + step
    while _has_turn_from(store, thread_id, high):
        low = high
        step *= 2
        high = low + step
    while high - low > 1:  # a turn >= low exists, none >= high
        mid = (low + high) // 2
        if _has_turn_from(store, thread_id, mid):
            low = mid
        else:
            high = mid
    return low


def chat_turns(store: RecordReader, thread_id: str, first: int, last: int | None = None) -> list[dict[str, Any]]:
    """Every piece (metadata) of the thread's chat turns numbered ``first`` .. ``last`` (to the end by default)."""
    clauses: list[Mapping[str, Any]] = [{"turn_index": {"$gte": int(first)}}]
    if last is not None:
        clauses.append({"turn_index": {"$lte": int(last)}})
    return [rec["metadata"] or {} for rec in store.iter_records(_chat(thread_id, *clauses))]


def stored_keys(store: RecordReader, thread_id: str, keys: Iterable[str]) -> dict[str, int]:
    """Which of ``keys`` (message keys) a piece of the thread holds (as its message or its tool result), and in
    which turn."""
    wanted = sorted(set(keys))
    found: dict[str, int] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        where = _chat(thread_id, {"$or": [{"message_key": {"$in": chunk}}, {"result_key": {"$in": chunk}}]})
        for rec in store.iter_records(where):
            meta = rec["metadata"] or {}
            for k in ("message_key", "result_key"):
                if meta.get(k) in chunk:
                    found.setdefault(str(meta[k]), int(meta["turn_index"]))
    return found


def turns_of_calls(store: RecordReader, thread_id: str, call_ids: Iterable[str]) -> dict[str, int]:
    """The turn that holds each of ``call_ids`` (tool calls) in the thread."""
    wanted = sorted(set(call_ids))
    out: dict[str, int] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        for rec in store.iter_records(_chat(thread_id, {"tool_call_id": {"$in": chunk}})):
            meta = rec["metadata"] or {}
            out[str(meta["tool_call_id"])] = int(meta["turn_index"])
    return out
