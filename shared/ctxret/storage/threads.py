"""What an append reads of a chat thread: its last turn's number, its last turns, and which messages it holds.

Chat turns are numbered 1, 2, … inside their thread (``turn_index``; documents' sections are not chat turns), and a
turn's pieces carry ``turn_id = "<thread>#<n>"``. An append (:mod:`ctxret.ingest.append`) numbers the new turns after
the last one, so it needs that number without reading the thread. Every read here is a filter on **one** key with few
matches (``turn_id``, ``message_key``, ``result_key``, ``tool_call_id``), checked against the thread and kind in
Python: Chroma answers those from its index in a few milliseconds however long the thread is, where a filter that
also names ``thread_id`` costs time in proportion to the thread (measured: 26–38 ms at 10,000 turns, against 2–6 ms;
``benchmarks/bench_append.py``).

:func:`chat_head` finds the last turn by probing single turns: the number an earlier append saw is checked (two
probes), else a doubling then a bisection (about 2·log2(turns) probes). Turns are numbered densely, so a probe of turn
``n`` answers "is there a turn ``>= n``"; where turns were deleted (a gap) the answer can be too low, which the append
sees when a number it would take is already stored (:func:`taken_turns`): it then reads every turn number of the
thread (:func:`chat_head_scan`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

__all__ = [
    "RecordReader",
    "chat_head",
    "chat_head_scan",
    "chat_turns",
    "stored_keys",
    "taken_turns",
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


def chat_head(store: RecordReader, thread_id: str, hint: int = 0) -> int:
    """The number of the thread's last chat turn (0: none); ``hint``: the number as last seen (checked)."""
    if hint > 0 and _has(store, thread_id, hint):
        if not _has(store, thread_id, hint + 1):
            return hint
        low = hint + 1
    elif _has(store, thread_id, 1):
        low = 1
    else:
        return 0
    step = 1
    high = low + step
    while _has(store, thread_id, high):  # turn ``low`` exists; double until one does not
        low = high
        step *= 2
        high = low + step
    while high - low > 1:
        mid = (low + high) // 2
        if _has(store, thread_id, mid):
            low = mid
        else:
            high = mid
    return low


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
