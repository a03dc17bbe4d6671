"""What an append reads of a chat thread: where it ends, its last turns, and which messages it holds.

Chat turns are numbered 1, 2, … inside their thread (``turn_index``; documents' sections are not chat turns), and a
turn's pieces carry ``turn_id = "<thread>#<n>"``. An append (:mod:`ctxret.ingest.append`) numbers the new turns after
the highest number in use and continues the last stored turn, so it needs both (:class:`ThreadEnd`) without reading
the thread. Every read here is a filter on **one** key with few matches (``turn_id``, ``message_key``, ``result_key``,
``tool_call_id``), checked against the thread and kind in Python: Chroma answers those from its index in a few
milliseconds however long the thread is, where a filter that also names ``thread_id`` costs time in proportion to the
thread (measured: 26–38 ms at 10,000 turns, against 2–6 ms; ``benchmarks/bench_append.py``).

Turn numbers may have gaps (a turn deleted, a number an append claimed and never wrote because it was killed, a
numbered write past the end), so the end is never found by probing single turns from 1 (a probe that meets a gap
stops there, and an append then writes into the gap or over a stored turn). Where it comes from instead:

* a store only this process writes (an embedded folder, memory): the highest number, read once per thread by
  :func:`chat_head_scan` (every turn number of the thread) and then kept up to date by every write of this process
  (``PieceStore.thread_end``);
* a Chroma server: a head record per thread, raised by every write and read back as a floor, above which every number
  in use is *witnessed* (a stored turn, or an append's claim, which a killed append leaves behind), so the numbers
  above it are dense and :func:`probe_up` finds the top exactly (``storage/claims.py``).

The last stored turn (:func:`last_stored`) is then the top, or a few numbers under it (a killed append's claim, the
last turns deleted).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "RecordReader",
    "ThreadEnd",
    "chat_head_scan",
    "chat_turns",
    "last_stored",
    "probe_up",
    "stored_keys",
    "taken_turns",
    "turn_key",
    "turns_of_calls",
]

_IN_CHUNK = 256


class RecordReader(Protocol):
    """What these reads need of a store (every :class:`~.base.VectorBackend` has it)."""

    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]: ...


def turn_key(thread_id: str, index: int) -> str:
    """A chat turn's ``turn_id``."""
    return f"{thread_id}#{int(index)}"


def _mine(meta: Mapping[str, Any] | None, thread_id: str) -> bool:
    return bool(meta) and meta.get("thread_id") == thread_id and meta.get("kind", "turn") == "turn"  # type: ignore[union-attr]


def _where_in(key: str, values: Sequence[str]) -> dict[str, Any]:
    return {key: values[0]} if len(values) == 1 else {key: {"$in": list(values)}}


def _records_in(store: RecordReader, key: str, values: Iterable[str], thread_id: str) -> Iterator[dict[str, Any]]:
    """The thread's chat pieces whose ``key`` is one of ``values`` (one-key filters of 256 values at a time)."""
    wanted = sorted(set(values))
    for start in range(0, len(wanted), _IN_CHUNK):
        for rec in store.iter_records(_where_in(key, wanted[start : start + _IN_CHUNK])):
            if _mine(rec["metadata"], thread_id):
                yield rec


def taken_turns(store: RecordReader, thread_id: str, numbers: Iterable[int]) -> set[int]:
    """Which of the chat turn ``numbers`` the thread holds."""
    keys = [turn_key(thread_id, n) for n in numbers]
    return {int(rec["metadata"]["turn_index"]) for rec in _records_in(store, "turn_id", keys, thread_id)}


def _has(store: RecordReader, thread_id: str, n: int) -> bool:
    return bool(taken_turns(store, thread_id, [n]))


@dataclass(frozen=True)
class ThreadEnd:
    """Where a chat thread ends, as an append reads it."""

    last: int  # the number of its last stored chat turn (0: none)
    top: int  # the highest turn number in use (>= last): stored, claimed by an append, or used before a delete


def probe_up(used: Callable[[int], bool], base: int) -> int:
    """The highest ``n >= base`` such that every number of ``base + 1 .. n`` is ``used``: a doubling, then a
    bisection (about 2·log2(n - base) probes; one when nothing is used above ``base``). Exact when the numbers used
    above ``base`` are dense."""
    low, step = base, 1
    while used(low + step):
        low += step
        step *= 2
    high = low + step
    while high - low > 1:
        mid = (low + high) // 2
        if used(mid):
            low = mid
        else:
            high = mid
    return low


def last_stored(store: RecordReader, thread_id: str, top: int, probes: int = 8) -> int:
    """The thread's last stored chat turn at or under ``top`` (the highest number in use): ``top`` itself, or one of
    the ``probes`` numbers under it, else read from every turn number of the thread (0: none)."""
    for n in range(top, max(0, top - probes), -1):
        if _has(store, thread_id, n):
            return n
    return min(top, chat_head_scan(store, thread_id)) if top > probes else 0


def chat_head_scan(store: RecordReader, thread_id: str) -> int:
    """The thread's last chat turn number from every one of its pieces (the slow, sure read)."""
    return max(
        (
            int(r["metadata"]["turn_index"])
            for r in store.iter_records({"thread_id": thread_id})
            if _mine(r["metadata"], thread_id)
        ),
        default=0,
    )


def chat_turns(store: RecordReader, thread_id: str, first: int, last: int | None = None) -> list[dict[str, Any]]:
    """Every piece (metadata) of the thread's chat turns numbered ``first`` .. ``last`` (to the end by default)."""
    if last is None:
        return [
            r["metadata"]
            for r in store.iter_records({"thread_id": thread_id})
            if _mine(r["metadata"], thread_id) and int(r["metadata"]["turn_index"]) >= first
        ]
    keys = [turn_key(thread_id, n) for n in range(max(1, int(first)), int(last) + 1)]
    return [rec["metadata"] for rec in _records_in(store, "turn_id", keys, thread_id)]


def stored_keys(store: RecordReader, thread_id: str, keys: Iterable[str]) -> dict[str, int]:
    """Which of ``keys`` (message keys) a piece of the thread holds (as its message or its tool result), and in
    which turn."""
    keys = list(keys)
    found: dict[str, int] = {}
    for field in ("message_key", "result_key"):
        for rec in _records_in(store, field, keys, thread_id):
            found.setdefault(str(rec["metadata"][field]), int(rec["metadata"]["turn_index"]))
    return found


def turns_of_calls(store: RecordReader, thread_id: str, call_ids: Iterable[str]) -> dict[str, int]:
    """The turn that holds each of ``call_ids`` (tool calls) in the thread."""
    return {
        str(rec["metadata"]["tool_call_id"]): int(rec["metadata"]["turn_index"])
        for rec in _records_in(store, "tool_call_id", call_ids, thread_id)
    }
