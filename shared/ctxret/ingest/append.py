"""Appending messages to a thread, as agents write memory: the next exchange becomes the thread's next turns.

``ContextualIndex.add_messages(messages, thread_id)`` reads what the thread ends with and adds the messages after it;
nothing stored before changes, except the last turn when the messages continue it (an assistant reply or a tool result
sent after the question it answers is part of that question's turn, as it would be had both come in one call, so the
turn is written again with it). A thread written one call per message, per exchange or per session holds exactly the
pieces of the same thread written in one call.

**A message sent again adds nothing.** Every stored source carries the key of the message it came from
(:attr:`~.turns.Source.message_key`): the message's own ``id`` when it has one (LangChain messages, OpenAI Responses
items, chat exports), else a hash of what it says (role, name, text, tool calls and results, and its own time). A
message known by its id, or by its content and its own time, is the same message wherever the thread holds it: a
retry, a redelivery from an at-least-once queue, or a newer export of the same conversation adds only what is new. A
message with neither an id nor a time is known by its content and position: a call that starts by repeating the
messages the thread ends with (or the whole thread, as a re-sent export does) adds only what follows them. (Two
identical messages with no id and no time, sent one after the other on purpose, are therefore read as one; give
messages ids or times to keep such repeats.) A message without a time gets the time it is added (time windows and
recency need one).

**Where the thread ends** is read exactly, gaps in its numbers included (a deleted turn, a number a killed append
claimed, a numbered write past the end: :mod:`ctxret.storage.threads`): new turns go after the highest number in use,
never into a gap or onto a stored turn, and a message that continues a turn continues the last one stored.

**Concurrent appenders** to one thread lose and duplicate nothing: inside a process they take turns
(:meth:`~ctxret.storage.pieces.PieceStore.appending`); processes sharing a Chroma server claim their turn numbers
first (:mod:`ctxret.storage.claims`), and a reply sent alone continues the turn its own process's last append left
awaiting a reply (its question), not another writer's turn that came in between. Writing a thread whole (a
replacement) is explicit: ``replace_messages``, or ``first_turn=`` for callers that number turns themselves.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..errors import InputError, StoreError
from ..results import IndexResult
from ..storage.claims import Claim
from ..storage.threads import ThreadEnd, chat_turns, stored_keys, taken_turns, turns_of_calls
from .messages import (
    Message,
    check_first_turn,
    check_thread_id,
    group_messages,
    group_sources,
    group_turns,
    make_turn,
    read_messages,
    source_fingerprint,
    stores_anything,
)
from .plan import turns_from_records
from .turns import Source, Turn

logger = logging.getLogger(__name__)

__all__ = [
    "AppendPlan",
    "append_messages",
    "append_threads",
    "plan_append",
    "replace_thread",
    "stored_message_keys",
    "stored_times",
    "thread_messages",
    "write_numbered",
]

#: How often an append reads the thread again when another process moved it between its read and its claim.
MAX_ATTEMPTS = 50


@dataclass
class AppendPlan:
    """What one append writes: the turns (new ones after ``top``, and the stored turn it continues, rewritten)."""

    head: int  # the thread's last stored chat turn when the append read it
    turns: list[Turn] = field(default_factory=list)
    duplicates: int = 0  # messages found already stored
    continued: tuple[int, int] | None = None  # (turn, version) of the stored turn it adds to
    top: int = -1  # the highest turn number in use then (new turns go after it; -1: ``head``)
    awaiting: int | None = None  # a stored turn the call ends in, awaiting a reply (its question sent again)

    def __post_init__(self) -> None:
        if self.top < self.head:
            self.top = self.head

    @property
    def new(self) -> list[int]:
        return [t.index for t in self.turns if t.index > self.top]


def stored_message_keys(sources: Iterable[Source]) -> list[str | None]:
    """The keys of the messages a stored turn's sources came from, in the order they were sent (a tool call's
    assistant message, then its result). Sources stored before messages had keys get the fingerprint of the plain
    user or assistant message they came from (tool sources: ``None``, which matches nothing)."""
    keys: list[str | None] = []
    for src in sources:
        key = src.message_key
        if key is None and src.kind in ("user", "assistant", "system"):
            key = source_fingerprint(src.kind, src.name, src.text, src.timestamp)
        if not keys or key is None or keys[-1] != key:
            keys.append(key)
        if src.result_key is not None:
            keys.append(src.result_key)
    return keys


def _version(turn: Turn) -> int:
    """How much a stored turn holds: its sources and the results attached to them (a continuation changes it)."""
    return len(turn.sources) + sum(1 for s in turn.sources if s.result_key is not None)


def _overlap(keys: Sequence[str | None], tail: Sequence[str | None]) -> int:
    """The largest ``j`` with ``keys[:j] == tail[-j:]``: the messages a call starts by sending again."""
    for j in range(min(len(keys), len(tail)), 0, -1):
        if list(keys[:j]) == list(tail[-j:]) and None not in tail[-j:]:
            return j
    return 0


def plan_append(
    reader: Any,
    thread_id: str,
    msgs: Sequence[Message],
    include_system: bool,
    *,
    end: ThreadEnd,
    own: int | None = None,
    now: datetime | None = None,
) -> AppendPlan:
    """Plan the append of ``msgs`` (read, storable messages) after the thread's ``end`` (its last stored turn, and
    the highest number in use: new turns go after it). ``own``: the turn this process's last append to the thread
    left awaiting a reply, which a reply sent alone continues (else the last stored turn)."""
    return _plan(reader, thread_id, msgs, include_system, end, now, own)


def _plan(
    reader: Any,
    thread_id: str,
    msgs: Sequence[Message],
    include_system: bool,
    end: ThreadEnd,
    now: datetime | None,
    own: int | None = None,
) -> AppendPlan:
    head = end.last
    tail_turns: dict[int, Turn] = {}
    if head:
        first = max(1, head - len(msgs) + 1)  # a message is at least one turn's worth: enough to align the call
        for t in turns_from_records(chat_turns(reader, thread_id, first, head)):
            tail_turns[t.index] = t
    tail = [k for i in sorted(tail_turns) for k in stored_message_keys(tail_turns[i].sources)]
    keys = [m.key for m in msgs]
    start = _overlap(keys, tail)
    rest = list(msgs[start:])
    if start == 0 and head and len(rest) >= 2 and not rest[0].strong:
        _refuse_changed_resend(reader, thread_id, rest, head)
    rest = _known_runs(reader, thread_id, rest, tail_turns, head)
    plan = AppendPlan(head, duplicates=len(msgs) - len(rest), top=end.top)
    before = _before(msgs, rest)  # the stored message the new ones follow in the call, and its turn
    anchor = _turn_of(reader, thread_id, before, tail_turns) if before is not None else None
    if not rest:
        if before is not None and before.role == "user" and anchor is not None:
            plan.awaiting = anchor  # a question sent again: its reply, sent alone, continues its turn
        return plan
    groups = group_messages(_timed(rest, {}, now))
    nxt = end.top + 1
    if groups and groups[0][0].role != "user" and head:
        # it continues a stored turn: the one holding the calls its results answer, else the turn of the stored
        # message the call sends it after (a reply sent with its question), else the turn this process left
        # awaiting a reply, else the last one
        calls = [r.call_id for m in groups[0] for r in m.results if r.call_id]
        target = head
        mine = anchor if anchor is not None else own if own is not None and own != head else None
        if mine is not None and mine != head and 0 < mine < head:
            awaited = tail_turns.get(mine) or next(
                iter(turns_from_records(chat_turns(reader, thread_id, mine, mine))), None
            )
            if awaited is not None and (anchor is not None or (awaited.sources and awaited.sources[-1].kind == "user")):
                target = mine
                tail_turns[mine] = awaited
        if calls:
            held = {c: t.index for t in tail_turns.values() for s in t.sources if (c := s.call_id) in calls}
            missing = [c for c in calls if c not in held]
            if missing:
                held.update(turns_of_calls(reader, thread_id, missing))
            if held:
                target = held[next(c for c in calls if c in held)]
        stored = tail_turns.get(target)
        if stored is None:
            found = turns_from_records(chat_turns(reader, thread_id, target, target))
            stored = found[0] if found else None
        if stored is not None:
            sources = group_sources(groups[0], include_system, prior=stored.sources)
            turn = replace(make_turn(thread_id, target, sources), metadata=stored.metadata)
            plan.turns.append(turn)
            plan.continued = (target, _version(stored))
            groups = groups[1:]
    for group in groups:
        sources = group_sources(group, include_system)
        if sources:
            plan.turns.append(make_turn(thread_id, nxt, sources))
            nxt += 1
    return plan


def _before(msgs: Sequence[Message], rest: Sequence[Message]) -> Message | None:
    """The message of the call right before the first new one (the last one when all are stored), if any."""
    if not rest:
        return msgs[-1] if msgs else None
    i = next(i for i, m in enumerate(msgs) if m is rest[0])
    return msgs[i - 1] if i else None


def _turn_of(reader: Any, thread_id: str, msg: Message, tail_turns: Mapping[int, Turn]) -> int | None:
    """The stored turn that holds ``msg`` (found among the thread's last turns, else by its key), or ``None``."""
    if msg.key is None:
        return None
    for i in sorted(tail_turns, reverse=True):
        if msg.key in stored_message_keys(tail_turns[i].sources):
            return i
    return stored_keys(reader, thread_id, [msg.key]).get(msg.key) if msg.strong else None


def _known_runs(
    reader: Any, thread_id: str, msgs: list[Message], tail_turns: Mapping[int, Turn], head: int
) -> list[Message]:
    """``msgs`` without those the thread holds: a message known by its id or its time wherever it is stored, and
    a message with neither when it follows a stored message (found so) the way it follows it in the thread (a
    re-sent run of messages, anchored by one the thread is known to hold)."""
    strong = {m.key for m in msgs if m.strong and m.key is not None}
    if not strong:
        return msgs
    found = stored_keys(reader, thread_id, strong)
    if not found:
        return msgs
    # the stored order around the found messages: their turns and as many after them as the call could cover
    turns = dict(tail_turns)
    wanted = sorted({i for t in found.values() for i in range(t, min(head, t + len(msgs)) + 1)} - set(turns))
    for lo, hi in _runs(wanted):
        turns.update({t.index: t for t in turns_from_records(chat_turns(reader, thread_id, lo, hi))})
    order: list[str | None] = []
    for i in sorted(turns):
        if order and i - 1 not in turns:
            order.append(None)  # a gap: no message follows across it
        order += stored_message_keys(turns[i].sources)
    position = {k: p for p, k in enumerate(order) if k is not None}
    out: list[Message] = []
    anchor: int | None = None
    for m in msgs:
        if m.strong and m.key in found:
            anchor = position.get(m.key or "")
            continue
        if not m.strong and anchor is not None and anchor + 1 < len(order) and order[anchor + 1] == m.key:
            anchor += 1
            continue
        anchor = None
        out.append(m)
    return out


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted integers as ``(first, last)`` runs of consecutive values."""
    out: list[tuple[int, int]] = []
    for v in values:
        if out and v == out[-1][1] + 1:
            out[-1] = (out[-1][0], v)
        else:
            out.append((v, v))
    return out


def _refuse_changed_resend(reader: Any, thread_id: str, msgs: Sequence[Message], head: int) -> None:
    """A call that sends the whole thread again (its first two messages are the thread's first two, and it is at
    least as long as the thread) but differs from it somewhere is a rewrite of stored messages, which an append
    never does: refuse it, naming where it differs and the fix (an unchanged re-send was aligned already)."""
    start = [k for t in turns_from_records(chat_turns(reader, thread_id, 1, 2)) for k in stored_message_keys(t.sources)]
    if start[:2] != [msgs[0].key, msgs[1].key]:
        return
    turns = turns_from_records(chat_turns(reader, thread_id, 1, head))
    stored = [(k, t.index) for t in turns for k in stored_message_keys(t.sources)]
    if len(msgs) < len(stored):
        return
    at = next((i for i, (k, _) in enumerate(stored) if msgs[i].key != k), None)
    if at is None:
        return
    turn = stored[at][1]
    begins = msgs[next(i for i, (_, t) in enumerate(stored) if t == turn)].index  # the turn's first message
    raise InputError(
        f"these messages re-send thread {thread_id!r} from its start, but message {at + 1} differs from the stored "
        f"one (turn {turn}); an append adds new messages and never rewrites stored ones: send only the new "
        f"messages, or rewrite explicitly: replace_messages(messages, thread_id) makes the thread exactly these "
        f"messages, add_messages(messages[{begins}:], thread_id, first_turn={turn}) rewrites from turn {turn}"
    )


def _renumber(plan: AppendPlan, numbers: Sequence[int]) -> None:
    """Give the plan's new turns the turn numbers ``numbers`` (ascending), in order."""
    turns, fresh = [], iter(sorted(numbers))
    for t in plan.turns:
        turns.append(t if t.index <= plan.top else make_turn(t.thread_id, next(fresh), t.sources))
    plan.turns = turns


def _awaiting(plan: AppendPlan) -> int | None:
    """The turn an append leaves awaiting a reply: its last new turn, when that ends with a user message (or the
    stored turn of the question it sent again)."""
    new = [t for t in plan.turns if t.index > plan.top]
    if not new:
        return plan.awaiting
    return new[-1].index if new[-1].sources and new[-1].sources[-1].kind == "user" else None


def append_messages(
    store: Any,
    messages: Iterable[Mapping[str, Any]],
    thread_id: str,
    *,
    include_system: bool,
    write: Callable[[list[Turn]], IndexResult],
    now: datetime | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IndexResult:
    """Append ``messages`` to ``thread_id`` in ``store`` (a :class:`~ctxret.storage.pieces.PieceStore`); ``write``
    writes the planned turns (the index's one write path). See the module docstring."""
    return append_threads(
        store, [(thread_id, messages)], include_system=include_system, write=write, now=now, sleep=sleep
    )


def append_threads(
    store: Any,
    items: Iterable[tuple[str, Iterable[Mapping[str, Any]]]],
    *,
    include_system: bool,
    write: Callable[[list[Turn]], IndexResult],
    now: datetime | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IndexResult:
    """Append messages to several threads in one write (``items``: ``(thread_id, messages)``; the messages of one
    thread given twice are appended in order): every message is read and checked before anything is written, the
    threads' new turns share embedding batches (a backfill of many chat files). Same rules as
    :func:`append_messages`, thread by thread."""
    by_thread: dict[str, list[Message]] = {}
    for thread_id, messages in items:
        check_thread_id(thread_id)
        msgs = [m for m in read_messages(messages, include_system) if stores_anything(m, include_system)]
        by_thread.setdefault(thread_id, []).extend(msgs)
    by_thread = {t: m for t, m in by_thread.items() if m}
    if not by_thread:
        return write([])
    reader, claims = store.chroma, store.claims
    held: dict[str, Claim] = {}
    failed = [True]
    with contextlib.ExitStack() as locks:
        if claims is not None:  # after the write, or given up (then its new numbers stay claimed: see claims.py)
            locks.callback(lambda: [claims.release(c, failed=failed[0]) for c in held.values()])
        for thread_id in sorted(by_thread):  # one order for every appender: no deadlock
            locks.enter_context(store.appending(thread_id))
        moved = 0
        while moved < MAX_ATTEMPTS:
            plans = {
                t: plan_append(reader, t, msgs, include_system, end=store.thread_end(t), own=store.own.get(t), now=now)
                for t, msgs in by_thread.items()
            }
            duplicates = IndexResult(duplicates=sum(p.duplicates for p in plans.values()))
            todo = {t: p for t, p in plans.items() if p.turns}
            for t, p in plans.items():
                if not p.turns and p.awaiting is not None:
                    store.own[t] = p.awaiting
            if not todo:
                failed[0] = False
                return write([]) + duplicates  # nothing new (the writer may still have other work: a CLI's documents)
            if claims is not None:
                ready = True
                for t, p in todo.items():  # the slots held stay held while the threads are read again
                    ready = ready and _claim(claims, reader, t, p, held.setdefault(t, Claim(t)), sleep)
                if not ready:
                    moved += not any(c.waiting_since is not None for c in held.values())  # a wait is not a move
                    continue
            result = write([turn for p in todo.values() for turn in p.turns])
            failed[0] = False
            for t, p in todo.items():
                mine = _awaiting(p)
                if mine is not None:
                    store.own[t] = mine
                else:
                    store.own.pop(t, None)
            return result + duplicates
    raise StoreError(
        f"could not append to thread(s) {sorted(by_thread)}: other writers kept changing their last turns "
        f"({MAX_ATTEMPTS} attempts); nothing was written by this call: send it again"
    )


def _timed(msgs: Sequence[Message], stored: Mapping[str, tuple[datetime, bool]], now: datetime | None) -> list[Message]:
    """Each message without a time of its own gets one: its stored time when the thread holds it already (so
    writing it again changes nothing), else the time of the last message before it in the same call that has one
    (a tool result or a reply belongs to the moment of the message it answers), else the time it is added (``now``).
    A time it was added is ``stamped``: kept for time windows and recency, not written into the embedded header."""
    at = now or datetime.now().astimezone().replace(microsecond=0)
    out: list[Message] = []
    last: tuple[datetime, bool] | None = None
    for m in msgs:
        if m.timestamp is None:
            ts, stamped = stored.get(m.key or "", last or (at, True))
            m = replace(m, timestamp=ts, stamped=stamped)
        else:
            ts, stamped = m.timestamp, m.stamped
        last = (ts, stamped)
        out.append(m)
    return out


def stored_times(reader: Any, thread_id: str, first: int, last: int | None) -> dict[str, tuple[datetime, bool]]:
    """The stored time of each message of the thread's chat turns ``first`` .. ``last``, by message key, and whether
    it is the time the message was added (``stamped``)."""
    out: dict[str, tuple[datetime, bool]] = {}
    for turn in turns_from_records(chat_turns(reader, thread_id, first, last)):
        for src in turn.sources:
            if src.message_key and src.timestamp is not None:
                out.setdefault(src.message_key, (src.timestamp, src.stamped))
    return out


def write_numbered(
    store: Any,
    messages: Iterable[Mapping[str, Any]],
    thread_id: str,
    first_turn: int,
    *,
    include_system: bool,
    write: Callable[[list[Turn]], IndexResult],
    now: datetime | None = None,
) -> tuple[IndexResult, int]:
    """Write ``messages`` as the thread's turns ``first_turn, first_turn + 1, …``, replacing those (a changed turn is
    written again, an unchanged one costs nothing). Returns the result and how many turns the messages made."""
    check_thread_id(thread_id)
    check_first_turn(first_turn)
    turns = _numbered(store, messages, thread_id, first_turn, include_system, now)
    with store.appending(thread_id):
        store.repair_thread(thread_id)  # a server: a write of the thread a killed process left half done
        result = write(turns)  # raises the thread's head past them: an append goes after the highest number
    return result, len(turns)


def _numbered(
    store: Any,
    messages: Iterable[Mapping[str, Any]],
    thread_id: str,
    first_turn: int,
    include_system: bool,
    now: datetime | None,
) -> list[Turn]:
    """``messages`` as the thread's turns from ``first_turn`` on (a message without a time keeps its stored one)."""
    msgs = read_messages(messages, include_system)
    last = first_turn + len(msgs)
    msgs = _timed(msgs, stored_times(store.chroma, thread_id, first_turn, last), now)
    return group_turns(msgs, thread_id, first_turn, include_system)


def replace_thread(
    store: Any,
    messages: Iterable[Mapping[str, Any]],
    thread_id: str,
    *,
    include_system: bool,
    write: Callable[..., IndexResult],
    now: datetime | None = None,
) -> IndexResult:
    """Make the thread's chat turns exactly ``messages`` (turn 1 on), in one store write: changed turns are written
    again and stored turns past the last one removed together, so a crash leaves the thread as it was or as it is
    after the call, and a search beside it sees one or the other (``write(turns, threads=[thread_id])``: the
    thread given whole; :func:`~ctxret.ingest.writer.write_turns`); unchanged turns cost nothing (a message without
    a time keeps the time it was first added); the thread's documents stay."""
    check_thread_id(thread_id)
    with store.appending(thread_id):
        store.repair_thread(thread_id)  # a server: a write of the thread a killed process left half done
        turns = _numbered(store, messages, thread_id, 1, include_system, now)
        result = write(turns, threads=[thread_id])
        store.set_head(thread_id, max((t.index for t in turns), default=0))  # the thread ends there now
        store.own.pop(thread_id, None)
    return result


#: A tool source's text: ``<tool> arguments: <args>`` (when it had arguments), then ``Result: <text>``.
_TOOL_BODY = re.compile(
    r"^(?:(?P<name>.+?) arguments: (?P<args>.*?)\n)?(?P<label>Result(?: \(error\))?): (?P<result>.*)$", re.DOTALL
)


def thread_messages(reader: Any, thread_id: str) -> list[dict[str, Any]]:
    """The thread's chat messages as stored, in order, as OpenAI chat dicts: ``role``, ``content`` (the text exactly as
    it was added, from the pieces and what they keep to give it back, :func:`ctxret.text.restore_text`; a thread
    written before that: whitespace collapsed, lines kept), ``name``, ``timestamp`` and the ``id`` a message was given;
    an assistant message's tool calls as ``tool_calls``, each result as a ``tool`` message (``(none)``: no result
    yet). What a chat-history class returns as its messages."""
    out: list[dict[str, Any]] = []
    for turn in turns_from_records(chat_turns(reader, thread_id, 1)):
        last_key: str | None = None
        results: list[dict[str, Any]] = []
        for src in turn.sources:
            key = src.message_key
            if src.kind == "tool":
                m = _TOOL_BODY.match(src.text)
                name = src.name or (m.group("name") if m and m.group("name") else "tool")
                args = (m.group("args") or "{}") if m else "{}"
                result = m.group("result") if m else src.text
                if not (out and out[-1]["role"] == "assistant" and key is not None and key == last_key):
                    out.append(_message("assistant", "", src, key))
                call_id = src.call_id or f"call_{len(out)}_{src.ordinal}"
                out[-1].setdefault("tool_calls", []).append(
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
                )
                if result != "(none)":
                    tool = _message("tool", result, src, src.result_key)
                    tool["tool_call_id"] = call_id
                    if m and m.group("label") != "Result":
                        tool["is_error"] = True
                    results.append(tool)
            else:
                if results:
                    out.extend(results)
                    results = []
                role = src.kind if src.kind in ("user", "assistant", "system") else "user"
                out.append(_message(role, src.text, src, key))
            last_key = key
        out.extend(results)
    return out


def _message(role: str, content: str, src: Source, key: str | None) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": role, "content": content}
    if src.name and src.kind in ("user", "assistant"):  # a tool source's name is its tool's
        msg["name"] = src.name
    if src.timestamp is not None:
        msg["timestamp"] = src.timestamp.isoformat()
    if key is not None and key.startswith("id:"):
        msg["id"] = key[3:]
    return msg


def _claim(
    claims: Any, reader: Any, thread_id: str, plan: AppendPlan, held: Claim, sleep: Callable[[float], None]
) -> bool:
    """Hold the slots ``plan`` needs (new turn numbers past every number in use, and the continuation slot) and
    renumber its new turns to them; ``False``: read the thread again (the slots won stay in ``held``). A continuation
    slot another live append holds is waited for, never past the claims' lease (then it is taken over)."""
    need = len(plan.new)
    above = max(plan.top, held.floor, max(held.numbers, default=0))
    while len(held.numbers) < need:
        want = list(range(above + 1, above + 1 + need - len(held.numbers)))
        for n in claims.claim_new(thread_id, want):
            held.numbers.add(n)
            held.ids.append(claims.slot_id(thread_id, n, 0))
        above = want[-1]
    if plan.continued != held.continuation:
        if held.continuation_id is not None:  # the turn changed since: that slot is of no use any more
            claims.release(Claim(thread_id, [held.continuation_id]))
            held.ids.remove(held.continuation_id)
            held.continuation, held.continuation_id = None, None
        if plan.continued is not None:
            rid = claims.claim_continuation(thread_id, *plan.continued)
            if rid is None:  # another append is adding to the same turn: wait for its write, then read again
                now = time.monotonic()
                if held.waiting_since is None:
                    held.waiting_since = now
                elif now - held.waiting_since > claims.lease + 10.0:
                    raise StoreError(
                        f"could not append to thread {thread_id!r}: another writer held turn {plan.continued[0]} for "
                        f"{now - held.waiting_since:.0f} s, past the {claims.lease:.0f} s after which a writer that "
                        "is gone is taken over; nothing was written by this call: send it again"
                    )
                sleep(min(1.0, 0.05 * 2**held.waits))
                held.waits += 1
                return False
            held.continuation, held.continuation_id = plan.continued, rid
            held.ids.append(rid)
    held.waiting_since = None
    numbers = sorted(held.numbers)[:need]
    if numbers:  # a write that landed between our read and our claim holds none of them (it claimed them first)
        taken = taken_turns(reader, thread_id, numbers)
        if taken:
            held.numbers -= taken
            held.floor = max(held.floor, *taken)  # never claim at or under a stored turn again
            return False
    if plan.continued is not None:
        turn, version = plan.continued
        now_turn = turns_from_records(chat_turns(reader, thread_id, turn, turn))
        if not now_turn or _version(now_turn[0]) != version:
            return False
    _renumber(plan, numbers)
    return True
