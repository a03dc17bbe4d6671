"""``AgentMemory``: what an agent's memory does around each model call: recall before it, write after it.

The framework adapters (LangChain's ``CtxretMemoryMiddleware`` for ``create_agent``) only hand it the messages (as
OpenAI chat dicts) and the scope (the thread of ctxret the memory lives in: a conversation, or a user across their
conversations); everything else is here.

* :meth:`AgentMemory.recall` (before a model call) searches the scope with the latest user message and returns the
  per-part groups as text for the model's input: one section per part, hits best first, within ``max_chars`` (spent
  rank by rank across the parts, :func:`ctxret.query.render.render_groups`), under the product's floor (a part
  nothing in memory answers says so; when no part finds anything the text is empty). Pieces of the messages the
  model already sees (its input) are left out inside the search (a ``where`` on their keys), so memory adds only
  what is not in view: older turns a trimming step dropped, other conversations of the scope. The search runs
  under ``deadline_ms`` (the core's recall deadline: it returns within it, with what the stages that finished
  found), and a store or embedder that fails is logged and gives no memory: the model is never held or failed by
  recall. A later model call of the same turn (after a tool's result; LlamaIndex's agent reads its memory again once
  it has answered) is given the turn's memory without a second search: one search a turn.
* :meth:`AgentMemory.write` (after a model call, and when the run ends) appends the conversation's messages to the
  scope (``ContextualIndex.add_messages``: the next turns; a message sent again adds nothing, known by its id). It
  remembers, per scope, the keys of what it wrote, so sending the whole agent state after every model call costs
  one append of the new messages only (a new process sends the state once, and the append finds what is stored).
  ``tool_calls`` decides what of the tools is written: every call with its arguments and result (``True``, the
  default: ctxret stores a tool call and its full result as one source), none (``False``: only what the user and
  the assistant said), or the calls of the named tools.

**Background writes** (``background=True``, the default): :meth:`AgentMemory.write` hands the append to the index's
:class:`BackgroundWriter` and returns at once, so the model call never waits for the exchange to be embedded and
stored. What is guaranteed:

* **nothing is lost while the process lives**: at least once, with the append's retry safety (a message sent again
  adds nothing). A write that fails (the store or the embedder: a ctxret error, a lost connection) is logged and tried
  again (after 0.5 s, the wait doubling to 30 s), never raised into the model call; a message that cannot be stored
  as given (an :class:`~ctxret.errors.InputError`, or any other error it raises) is logged and left out, the others
  written. The queue is bounded (:data:`MAX_QUEUED_MESSAGES`); a write that finds it full waits for room.
* **a recall sees the exchange before it**: a recall of a scope first waits for the scope's pending writes (at most
  half its ``deadline_ms``), except those whose every message is in the model's input (left out of the search by key
  anyway: within a conversation, the recall never waits).
* **flushed on close and at exit**: :meth:`AgentMemory.flush` (and ``ContextualIndex.flush()``) waits until every
  pending write is stored; ``ContextualIndex.close()`` flushes first; at interpreter exit (a script's end, ``sys.exit``,
  Ctrl-C, an uncaught exception, a server's graceful shutdown) the pending writes are flushed for up to
  :data:`EXIT_FLUSH_SECONDS`. A process killed outright (``SIGKILL``, the OOM killer, a power cut, ``SIGTERM`` in a
  program that does not handle it) loses what was not yet stored, about one exchange's write (~0.1 s with the local
  model); the middleware's next write of that conversation sends it again (the agent's state holds it), so only a
  conversation never resumed loses it. A serverless function frozen after it returns should call ``flush()`` before
  returning (or use ``background=False``).

``background=False`` writes inside the call (what the model call then waits for), and raises a failure.
"""

from __future__ import annotations

import asyncio
import atexit
import itertools
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .embedders.fitting import embed_fitting
from .embedders.guard import for_writes
from .errors import ClosedError, CtxretError, EmbeddingError, InputError, StoreError
from .index import ContextualIndex
from .ingest.messages import check_thread_id, read_messages
from .query.latest import own_vectors
from .query.render import (
    CONVERSATION_KEY,
    MEMORY_NOTE,
    auto_max_chars,
    check_max_chars,
    render_layout,
    template_delimiters,
)
from .results import Group, Hit, IndexResult
from .storage.schema import check_id

logger = logging.getLogger(__name__)

__all__ = [
    "CONVERSATION_KEY",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_TEMPLATE",
    "EXIT_FLUSH_SECONDS",
    "MAX_QUEUED_MESSAGES",
    "AgentMemory",
    "BackgroundWriter",
    "Recall",
    "select_tool_calls",
]

#: How the memory text is put in the model's input (``{memory}``: the rendered groups): marked as quoted material, and
#: how to read its entries (:data:`ctxret.query.render.MEMORY_NOTE`).
DEFAULT_TEMPLATE = "<memory>\n" + MEMORY_NOTE + "\n\n{memory}\n</memory>"
#: The memory text's size: ``"auto"`` makes room for the ``k`` hits of two parts at the index's largest piece
#: (:func:`ctxret.query.render.auto_max_chars`: 7,400 characters with the local model and ``k=5``).
DEFAULT_MAX_CHARS = "auto"
#: Search options the recall sets itself.
_RECALL_OPTIONS = ("thread_id", "k", "deadline_ms")
#: How many in-view messages a recall leaves out of its search by key (the newest; a store query compares at most
#: :data:`~ctxret.storage.where.MAX_WHERE_VALUES` values, and the caller's ``where`` may hold some).
MAX_VIEW_KEYS = 5_000
#: Scopes whose written keys are remembered (least recently used dropped first: only a cost, never a duplicate).
MAX_SCOPES = 4096
#: Keys remembered per scope (the most recent; the same).
MAX_KEYS = 4096
#: Messages the background queue of one index holds at most; a write that finds it full waits for room.
MAX_QUEUED_MESSAGES = 10_000
#: Seconds the flush at interpreter exit waits for the pending background writes (what is left then is logged).
EXIT_FLUSH_SECONDS = 30.0
#: Seconds the background writer's thread waits for work before it ends (one thread for a stream of writes: a thread
#: per write costs the allocator's and the store's per-thread memory each time).
WORKER_IDLE_SECONDS = 60.0
#: Seconds a recall without a deadline waits at most for the pending writes of its scope (a store that keeps failing
#: never holds the model call).
RECALL_WAIT_SECONDS = 5.0
#: The first and the longest wait before a failed background write is tried again.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class Recall:
    """What one recall found: the ``text`` for the model's input (empty: nothing), the search's ``groups`` and the
    ``hits`` the text shows (the groups' first hits that fit ``max_chars``, group by group)."""

    text: str
    groups: tuple[Group, ...] = ()
    query: str = ""
    degraded: bool = False
    hits: tuple[Hit, ...] = ()


@dataclass
class _Written:
    """What one memory wrote (or handed to the background), per scope: the keys of those messages (the most recent
    :data:`MAX_KEYS` of each scope; a message whose key was dropped is sent again and the append finds it stored: a
    cost, never a duplicate), and the keys of the last messages in the order handed over (:data:`MAX_KEYS` of them),
    which a memory that knows messages by position reads (:meth:`AgentMemory.write`, ``by_position``)."""

    keys: OrderedDict[str, OrderedDict[str, None]] = field(default_factory=OrderedDict)
    tails: dict[str, list[str | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def known(self, scope: str, keys: Collection[str | None]) -> set[str]:
        """Which of ``keys`` were written to ``scope``."""
        with self.lock:
            held = self.keys.get(scope)
            if held is None:
                return set()
            self.keys.move_to_end(scope)
            return {k for k in keys if k is not None and k in held}

    def tail(self, scope: str) -> list[str | None]:
        with self.lock:
            return list(self.tails.get(scope, ()))

    def add(self, scope: str, keys: Sequence[str | None]) -> None:
        """``keys`` were written to ``scope``."""
        with self.lock:
            held = self.keys.setdefault(scope, OrderedDict())
            for k in keys:
                if k is not None:
                    held[k] = None
                    held.move_to_end(k)
            while len(held) > MAX_KEYS:
                held.popitem(last=False)
            self._touch(scope)

    def extend_tail(self, scope: str, keys: Sequence[str | None]) -> None:
        """``keys`` follow the last ones handed over for ``scope``, in this order."""
        with self.lock:
            tail = self.tails.setdefault(scope, [])
            tail.extend(keys)
            del tail[:-MAX_KEYS]
            self.keys.setdefault(scope, OrderedDict())
            self._touch(scope)

    def _touch(self, scope: str) -> None:
        self.keys.move_to_end(scope)
        while len(self.keys) > MAX_SCOPES:
            old, _ = self.keys.popitem(last=False)
            self.tails.pop(old, None)


def _resent(keys: Sequence[str | None], tail: Sequence[str | None]) -> int:
    """The largest ``j`` with ``keys[:j] == tail[-j:]`` (no unreadable message among them): the messages a list
    starts by giving again (a short-term queue given whole at every call, its oldest messages dropped over time)."""
    if not keys or not tail or keys[0] is None:
        return 0
    n = len(tail)
    for p in range(max(n - len(keys), 0), n):  # where the run could start in the tail: at the list's first message
        if tail[p] == keys[0] and None not in tail[p:] and list(keys[: n - p]) == list(tail[p:]):
            return n - p
    return 0


class _Job:
    """One pending append: messages for one scope (later writes to the scope join it while it waits)."""

    __slots__ = (
        "index",
        "scope",
        "messages",
        "keys",
        "include_system",
        "metadata",
        "warm",
        "written",
        "seq",
        "running",
        "attempts",
        "due",
    )

    def __init__(
        self,
        index: ContextualIndex,
        scope: str,
        messages: list[dict[str, Any]],
        keys: list[str | None],
        include_system: bool,
        metadata: dict[str, Any] | None,
        written: _Written,
        seq: int,
        warm: bool = False,
    ) -> None:
        self.index, self.scope, self.messages, self.keys = index, scope, messages, keys
        self.include_system, self.metadata, self.written, self.seq = include_system, metadata, written, seq
        self.warm = warm  # the stored texts embedded alone for the ``latest`` stage (:func:`warm_latest`)
        self.running = False
        self.attempts = 0
        self.due = 0.0  # when it may run (after a failure: later)


def warm_latest(index: ContextualIndex, scope: str, result: IndexResult) -> int:
    """Embed alone the stored texts of the turns ``result`` wrote to ``scope`` into the ``latest`` stage's memo
    (:func:`ctxret.query.latest.own_vectors`): the texts that stage embeds while a search waits when these pieces are
    among a part's first hits (an agent's memory asks about the user's facts at nearly every recall). Done by the
    background writer after each append, off the model call's path, so a recall embeds only its own message however
    large memory grows (a process started afresh embeds the hits it meets, as before). How many texts it embedded; a
    failure is logged at debug level and costs only the warm-up."""
    turns = sorted({str(turn) for thread, turn in result.changed if thread == scope})
    memo = own_vectors(index.embedder) if turns else None
    if memo is None:
        return 0
    try:
        where = {"$and": [{"thread_id": scope}, {"turn_id": {"$in": turns}}]}
        records = index.store.backend.iter_records(where, include=("documents",))
        texts = list(dict.fromkeys(str(r.get("document") or "") for r in records))
        known = memo.get(texts)
        missing = [t for t in texts if t and t not in known]
        if missing:
            memo.put(missing, embed_fitting(for_writes(index.embedder, index.embed_timeout), missing))
        return len(missing)
    except Exception as e:  # noqa: BLE001 - a warm-up only saves a later search's time
        logger.debug("ctxret memory: the stored texts of scope %r were not embedded ahead: %s", scope, e)
        return 0


class BackgroundWriter:
    """The appends handed to the background on one index: a bounded queue and one worker thread.

    Jobs of one scope run in the order they came (a write to a scope whose last job still waits joins that job: one
    append of both, which stores what two would); scopes take turns. A failed job is tried again later (doubling waits,
    :data:`RETRY_FIRST_SECONDS` to :data:`RETRY_MAX_SECONDS`), the scope's later jobs behind it; a message the store
    refuses is left out (logged). :meth:`wait` and :meth:`flush` wait for them. One writer per index
    (:func:`writer_of`), flushed by ``ContextualIndex.flush()`` / ``close()`` and at interpreter exit.
    """

    def __init__(self, index: ContextualIndex, max_messages: int = MAX_QUEUED_MESSAGES) -> None:
        self._index = weakref.ref(index)
        self.max_messages = max_messages
        self._cond = threading.Condition()
        self._jobs: list[_Job] = []  # in the order they came
        self._queued = 0  # messages in the jobs
        self._seq = itertools.count()
        self._worker: threading.Thread | None = None
        #: Appends stored and attempts that failed (for tests and benchmarks).
        self.stored = 0
        self.failures = 0

    # -- the callers' side ----------------------------------------------------------------------------------
    def submit(
        self,
        scope: str,
        messages: Sequence[dict[str, Any]],
        keys: Sequence[str | None],
        include_system: bool,
        written: _Written,
        metadata: dict[str, Any] | None = None,
        warm: bool = False,
    ) -> None:
        """Queue an append of ``messages`` (their ``keys``) to ``scope``, each piece stored with ``metadata`` (the
        conversation); ``written`` learns the keys once stored. ``warm``: the stored texts are then embedded alone for
        the searches' ``latest`` stage (:func:`warm_latest`)."""
        index = self._index()
        if index is None or not messages:
            return
        with self._cond:
            if self._queued + len(messages) > self.max_messages and self._jobs:
                logger.warning(
                    "ctxret memory: %d messages wait to be written in the background (the most: %d); this write waits "
                    "for room",
                    self._queued,
                    self.max_messages,
                )
                self._cond.wait_for(lambda: self._queued + len(messages) <= self.max_messages or not self._jobs)
            last = next((j for j in reversed(self._jobs) if j.scope == scope), None)
            if (
                last is not None
                and not last.running
                and not last.attempts
                and last.include_system == include_system
                and last.metadata == metadata
                and last.warm == warm
                and last.written is written
            ):
                last.messages.extend(messages)
                last.keys.extend(keys)
            else:
                job = _Job(
                    index, scope, list(messages), list(keys), include_system, metadata, written, next(self._seq), warm
                )
                self._jobs.append(job)
            self._queued += len(messages)
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="ctxret-memory-writer", daemon=True)
                self._worker.start()
            self._cond.notify_all()

    def pending_keys(self, scope: str) -> set[str]:
        """The keys of the messages waiting to be written to ``scope`` (or being written)."""
        with self._cond:
            return {k for j in self._jobs if j.scope == scope for k in j.keys if k is not None}

    def full(self, n: int = 1) -> bool:
        with self._cond:
            return bool(self._jobs) and self._queued + n > self.max_messages

    def must_wait(self, scope: str, seen: Collection[str] | None = None) -> bool:
        """Whether a pending write of ``scope`` holds a message not among ``seen`` (keys; ``None``: any message)."""
        with self._cond:
            return self._holds(scope, seen)

    def _holds(self, scope: str, seen: Collection[str] | None) -> bool:
        return any(
            j.scope == scope and (seen is None or any(k is None or k not in seen for k in j.keys)) for j in self._jobs
        )

    def wait(self, scope: str | None = None, seen: Collection[str] | None = None, timeout: float | None = None) -> bool:
        """Wait until no pending write of ``scope`` (``None``: of any scope) holds a message not among ``seen`` (keys;
        ``None``: any), ``timeout`` seconds at most; ``True`` when none does."""
        with self._cond:
            if scope is None:
                return self._cond.wait_for(lambda: not self._jobs, timeout)
            return self._cond.wait_for(lambda: not self._holds(scope, seen), timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every pending write is stored (``timeout`` seconds at most); ``True`` when none is left."""
        return self.wait(None, None, timeout)

    @property
    def queued(self) -> int:
        """Messages waiting to be written (or being written)."""
        with self._cond:
            return self._queued

    # -- the worker -------------------------------------------------------------------------------------------
    def _next(self) -> _Job | None:
        """Under the lock: the first job that may run now (the first of its scope, not waiting to be tried again)."""
        now = time.monotonic()
        heads: dict[str, _Job] = {}
        for j in self._jobs:
            heads.setdefault(j.scope, j)
        ready = [j for j in heads.values() if not j.running and j.due <= now]
        return min(ready, key=lambda j: j.seq) if ready else None

    def _run(self) -> None:
        while True:
            with self._cond:
                job = self._next()
                idle_since = time.monotonic()
                while job is None:
                    if not self._jobs and time.monotonic() - idle_since > WORKER_IDLE_SECONDS:
                        self._worker = None  # the next submit starts another
                        return
                    heads = {j.scope: j for j in reversed(self._jobs)}.values()  # each scope's first job
                    due = [j.due for j in heads if not j.running]  # a job waits for its scope's first one
                    soonest = min(due, default=time.monotonic() + WORKER_IDLE_SECONDS)
                    self._cond.wait(min(max(soonest - time.monotonic(), 0.01), WORKER_IDLE_SECONDS))
                    job = self._next()
                job.running = True
                messages, keys = list(job.messages), list(job.keys)
            settled = self._write(job, messages, keys)
            with self._cond:
                job.running = False
                if settled:
                    del job.messages[:settled], job.keys[:settled]
                    self._queued -= settled
                if not job.messages:
                    self._jobs.remove(job)
                    self.stored += 1
                self._cond.notify_all()

    def _write(self, job: _Job, messages: list[dict[str, Any]], keys: list[str | None]) -> int:
        """One attempt at ``job``: how many of its first messages are settled (stored, or refused for good); the rest
        is tried again later."""
        try:
            result = job.index.add_messages(
                messages, job.scope, include_system=job.include_system, metadata=job.metadata
            )
        except ClosedError:
            self._lost(job, messages)
            return len(messages)
        except Exception as e:  # noqa: BLE001 - a background write never raises: it is logged, and tried again
            if _passing(e):
                self._failed(job, len(messages), e)
                return 0
            if len(messages) == 1:
                logger.error("ctxret memory: a message for scope %r is not stored: %s", job.scope, _named(e))
                return 1
            return self._one_by_one(job, messages, keys)  # the message at fault is left out, the others written
        job.written.add(job.scope, [k for k in keys if k is not None])
        if job.warm:
            warm_latest(job.index, job.scope, result)
        return len(messages)

    def _one_by_one(self, job: _Job, messages: list[dict[str, Any]], keys: list[str | None]) -> int:
        for i, (m, k) in enumerate(zip(messages, keys, strict=True)):
            try:
                job.index.add_messages([m], job.scope, include_system=job.include_system, metadata=job.metadata)
            except ClosedError:
                self._lost(job, messages[i:])
                return len(messages)
            except Exception as e:  # noqa: BLE001 - as in _write
                if _passing(e):
                    self._failed(job, len(messages) - i, e)
                    return i
                logger.error("ctxret memory: a message for scope %r is not stored: %s", job.scope, _named(e))
            else:
                if k is not None:
                    job.written.add(job.scope, [k])
        return len(messages)

    def _failed(self, job: _Job, n: int, e: Exception) -> None:
        self.failures += 1
        job.attempts += 1
        wait = min(RETRY_FIRST_SECONDS * 2 ** (job.attempts - 1), RETRY_MAX_SECONDS)
        job.due = time.monotonic() + wait
        log = logger.warning if job.attempts == 1 or job.attempts % 10 == 0 else logger.debug
        log(
            "ctxret memory: writing %d message(s) to scope %r failed (attempt %d), trying again in %.1f s: %s",
            n,
            job.scope,
            job.attempts,
            wait,
            e,
        )

    @staticmethod
    def _lost(job: _Job, messages: Sequence[Any]) -> None:
        logger.error(
            "ctxret memory: the index was closed with %d message(s) for scope %r not yet written; they are lost "
            "(close the index after the agent, or flush() first)",
            len(messages),
            job.scope,
        )


def _passing(e: BaseException) -> bool:
    """Whether a failed write may succeed when tried again: the store's or the embedder's failure (a ctxret error
    other than the caller's input), or the system's (a lost connection, a full disk); anything else is the message's
    fault (a bad input): it would fail again."""
    return (isinstance(e, CtxretError) and not isinstance(e, InputError)) or isinstance(e, OSError)


def _named(e: BaseException) -> str:
    return str(e) if isinstance(e, CtxretError) else f"{type(e).__name__}: {e}"


_WRITERS: weakref.WeakKeyDictionary[ContextualIndex, BackgroundWriter] = weakref.WeakKeyDictionary()
_WRITERS_LOCK = threading.Lock()


def writer_of(index: ContextualIndex) -> BackgroundWriter:
    """The background writer of ``index`` (made on first use; ``index.flush()`` and ``index.close()`` flush it)."""
    with _WRITERS_LOCK:
        writer = _WRITERS.get(index)
        if writer is None:
            writer = _WRITERS[index] = BackgroundWriter(index)
            index.on_flush(writer.flush)
        return writer


def _flush_at_exit() -> None:
    """At interpreter exit: the pending background writes of every index, for up to :data:`EXIT_FLUSH_SECONDS`."""
    with _WRITERS_LOCK:
        writers = list(_WRITERS.values())
    deadline = time.monotonic() + EXIT_FLUSH_SECONDS
    for w in writers:
        if not w.flush(max(deadline - time.monotonic(), 0.0)):
            logger.error(
                "ctxret memory: %d message(s) were not written before the process ended (the store kept failing for "
                "%.0f s)",
                w.queued,
                EXIT_FLUSH_SECONDS,
            )


# Before the interpreter joins its threads and stops thread pools (what ``concurrent.futures`` does itself), so the
# writes can still run; a plain ``atexit`` hook where that is not available.
getattr(threading, "_register_atexit", atexit.register)(_flush_at_exit)


def select_tool_calls(
    messages: Sequence[Mapping[str, Any]], tool_calls: bool | Collection[str]
) -> list[dict[str, Any]]:
    """``messages`` (OpenAI chat dicts) with the tool calls ``tool_calls`` keeps: all (``True``), none (``False``:
    assistant messages lose their ``tool_calls``, tool results are left out), or the calls of the tools named
    (a result is kept when its call is: by its ``name``, else by the ``tool_call_id`` of a kept call)."""
    if tool_calls is True:
        return [dict(m) for m in messages]
    names = set() if tool_calls is False else set(tool_calls)
    kept_ids: set[str] = set()
    call_names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for m in messages:
        msg = dict(m)
        calls = msg.get("tool_calls")
        if msg.get("role") == "assistant" and isinstance(calls, list):
            keep = [c for c in calls if _call_name(c) in names]
            for c in calls:
                if isinstance(c, Mapping) and c.get("id") is not None:
                    call_names[str(c["id"])] = _call_name(c) or ""
            kept_ids.update(str(c["id"]) for c in keep if isinstance(c, Mapping) and c.get("id") is not None)
            if keep:
                msg["tool_calls"] = keep
            else:
                msg.pop("tool_calls", None)
                if not _has_text(msg.get("content")):
                    continue  # a message that only called tools left out: nothing of it is kept
        if msg.get("role") in ("tool", "function"):
            call_id = msg.get("tool_call_id")
            name = msg.get("name") or call_names.get(str(call_id), "")
            if not (name in names or (call_id is not None and str(call_id) in kept_ids)):
                continue
        out.append(msg)
    return out


def _has_text(content: Any) -> bool:
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(not isinstance(b, Mapping) or b.get("type") not in ("tool_use", "function_call") for b in content)
    return content is not None


def _call_name(call: Any) -> str | None:
    if not isinstance(call, Mapping):
        return None
    fn = call.get("function")
    name = fn.get("name") if isinstance(fn, Mapping) else call.get("name")
    return name if isinstance(name, str) else None


def _keys(messages: Sequence[Mapping[str, Any]]) -> list[str | None]:
    """Each message's key (``id:<id>``, else a hash of what it says; ``None`` when it cannot be read): the key
    :func:`ctxret.ingest.messages.read_messages` gives it (a chat message with an id is known by it, unread)."""
    out: list[str | None] = []
    for m in messages:
        given = m.get("id")
        if "role" in m and isinstance(given, str) and given:
            out.append(f"id:{given}")
            continue
        try:
            out.append(read_messages([m], include_system=True)[0].key)
        except InputError:
            out.append(None)
    return out


def _latest_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in reversed(messages):
        if m.get("role") != "user":
            continue
        try:
            text = read_messages([m])[0].text
        except InputError:
            continue
        if text.strip():
            return text
    return ""


#: How many scopes' last recalls a memory keeps (:class:`_Recalls`).
MAX_RECALLS = 1024


class _Recalls:
    """The last recall of each scope, by its turn (:func:`_turn`): a model call later in the same exchange (after a
    tool's result; LlamaIndex's agent reads its memory again once it has answered) is given the same memory without a
    second search. What was written since is in the model's view, which the search leaves out anyway. A degraded
    recall is not kept; at most :data:`MAX_RECALLS` scopes, the least recently used dropped first."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, tuple[tuple[Any, ...], Recall]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, turn: tuple[Any, ...]) -> Recall | None:
        with self._lock:
            held = self._items.get(turn[0])
            return held[1] if held is not None and held[0] == turn else None

    def put(self, turn: tuple[Any, ...], recall: Recall) -> Recall:
        if not recall.degraded:
            with self._lock:
                self._items[turn[0]] = (turn, recall)
                self._items.move_to_end(turn[0])
                while len(self._items) > MAX_RECALLS:
                    self._items.popitem(last=False)
        return recall


def _turn(
    messages: Sequence[Mapping[str, Any]], scope: str, query: str, conversation: str | None
) -> tuple[tuple[Any, ...], bool]:
    """The turn a recall belongs to, ``(scope, the latest user message's key, query, conversation)``, and whether the
    exchange has gone on since that message (messages after it, none the user's): a later model call of the same
    turn. A turn's first call (its user message last) always searches."""
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), None)
    if last is None:
        return (scope, None, query, conversation), False
    key = _keys([messages[last]])[0]
    return (scope, key, query, conversation), key is not None and last < len(messages) - 1


def _failed(query: str, error: Exception) -> Recall:
    """No memory for a recall that failed: logged (a ctxret error by its message, anything else with its traceback)."""
    if isinstance(error, (StoreError, EmbeddingError, InputError)):
        logger.warning("memory recall failed, the model is called without memory: %s", error)
    else:
        logger.warning("memory recall failed, the model is called without memory", exc_info=error)
    return Recall("", (), query, True)


class AgentMemory:
    """An agent's memory in ``index`` (see the module docstring).

    ``k``: hits per part (``None``: the index's default); ``max_chars``: the size of the memory text (``"auto"``:
    room for the ``k`` hits of two parts at the index's largest piece; ``None``: no bound);
    ``template``: how the text is put in the model's input (``{memory}``); ``deadline_ms``: the recall's time
    budget (``None``: none); ``tool_calls``: what of the tools is written; ``include_system``: also write system
    messages; ``background``: writes off the model call's path (the default; see the module docstring);
    ``search_options``: any other search option (``score_threshold``, ``lexical``, ``where``, ...).
    """

    def __init__(
        self,
        index: Any,
        *,
        k: int | None = None,
        max_chars: int | str | None = DEFAULT_MAX_CHARS,
        template: str = DEFAULT_TEMPLATE,
        deadline_ms: float | None = 1000,
        tool_calls: bool | Collection[str] = True,
        include_system: bool = False,
        background: bool = True,
        search_options: Mapping[str, Any] | None = None,
    ) -> None:
        index = getattr(index, "index", index)
        if not isinstance(index, ContextualIndex):
            raise InputError(f"agent memory needs a ctxret ContextualIndex, got {type(index).__name__}")
        max_chars = check_max_chars(max_chars)
        if not isinstance(template, str) or "{memory}" not in template:
            raise InputError(f"template must be a string holding '{{memory}}', got {template!r}")
        if not isinstance(tool_calls, bool) and (
            isinstance(tool_calls, str) or not all(isinstance(n, str) for n in tool_calls)
        ):
            raise InputError(f"tool_calls must be True, False or a collection of tool names, got {tool_calls!r}")
        if not isinstance(include_system, bool):
            raise InputError(f"include_system must be True or False, got {include_system!r}")
        if not isinstance(background, bool):
            raise InputError(f"background must be True or False, got {background!r}")
        options = dict(search_options or {})
        bad = [o for o in options if o in _RECALL_OPTIONS]
        if bad:
            raise InputError(f"pass {', '.join(bad)} as the memory's own argument (k=, scope=, deadline_ms=)")
        self._user_where = options.pop("where", None)
        self.index = index
        plan = index.plan(**{**options, "k": k or index.settings.k, "deadline_ms": deadline_ms})  # bad options fail now
        if max_chars == "auto":
            max_chars = auto_max_chars(plan.k, index.config.piece_bytes)
        self.k, self.template = k, template
        #: The memory text's budget in characters (``"auto"`` resolved for the index; ``None``: no bound).
        self.max_chars: int | None = None if max_chars is None else int(max_chars)
        self.deadline_ms, self.tool_calls, self.include_system = deadline_ms, tool_calls, include_system
        self.search_options = options
        self._delimiters = template_delimiters(template)
        self._written = _Written()
        #: Whether writes go to the index's background writer (:class:`BackgroundWriter`).
        self.background = background
        self._writer = writer_of(index)
        #: Whether the background writer embeds the stored texts ahead for the recall's ``latest`` stage (it runs).
        self._warm = bool(plan.latest_first)
        self._recalls = _Recalls()

    # -- recall -------------------------------------------------------------------------------------
    def _request(
        self, messages: Sequence[Mapping[str, Any]], scope: str
    ) -> tuple[str, dict[str, Any], list[str]] | None:
        check_id(scope, "memory scope")
        query = _latest_user_text(messages)
        if not query:
            return None
        keys = list(dict.fromkeys(k for k in _keys(messages) if k))
        if len(keys) > MAX_VIEW_KEYS:  # the newest stay out of memory; older ones in view may come back as memory
            logger.info(
                "memory recall: %d messages in view, the newest %d left out of the search", len(keys), MAX_VIEW_KEYS
            )
            keys = keys[-MAX_VIEW_KEYS:]
        keys = sorted(keys)
        clauses = [c for c in (self._user_where, {"ctxret:message_key": {"$nin": keys}} if keys else None) if c]
        where = None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
        kwargs: dict[str, Any] = {
            **self.search_options,
            "thread_id": scope,
            "where": where,
            "deadline_ms": self.deadline_ms,
        }
        if self.k is not None:
            kwargs["k"] = self.k
        return query, kwargs, keys

    def _late(self, scope: str, seen: Collection[str], kwargs: dict[str, Any], wait: Any) -> bool:
        """Before a recall of ``scope``: wait (``wait``) for the scope's pending background writes that hold a message
        the model does not see (``seen``: the keys of its input), half the recall's deadline at most; the search's
        deadline is shortened by the wait (without a deadline: :data:`RECALL_WAIT_SECONDS` at most). ``True`` when some
        are still pending (the recall is degraded)."""
        budget = RECALL_WAIT_SECONDS if self.deadline_ms is None else self.deadline_ms / 2000
        started = time.monotonic()
        done = wait(scope, seen, budget)
        if self.deadline_ms is not None:
            kwargs["deadline_ms"] = max(self.deadline_ms - (time.monotonic() - started) * 1000, self.deadline_ms / 2)
        if not done:
            logger.info("memory recall of scope %r runs before the scope's pending writes are stored", scope)
        return not done

    def _recall(self, query: str, groups: Sequence[Group], conversation: str | None, late: bool = False) -> Recall:
        degraded = late or any(g.degraded for g in groups)
        if degraded:
            logger.info(
                "memory recall for %r ran out of its %s ms: %s",
                query[:60],
                self.deadline_ms,
                sorted({s for g in groups for s in g.skipped}),
            )
        if not any(g.hits for g in groups):
            return Recall("", tuple(groups), query, degraded)
        rendered = render_layout(
            groups,
            max_chars=self.max_chars,
            now=self.search_options.get("now", self.index.settings.now),
            conversation=conversation,
            delimiters=self._delimiters,
        )
        shown = tuple(h for g, n in zip(groups, rendered.shown, strict=True) for h in g.hits[:n])
        return Recall(self.template.format(memory=rendered.text), tuple(groups), query, degraded, shown)

    def _start(
        self, messages: Sequence[Mapping[str, Any]], scope: str, conversation: str | None
    ) -> Recall | tuple[str, dict[str, Any], list[str], tuple[Any, ...]]:
        """What a recall starts from: a :class:`Recall` when it needs no search (no user message; a later model call
        of a turn recalled already), else ``(query, search options, keys in view, the turn)``."""
        request = self._request(messages, scope)
        if request is None:
            return Recall("")
        query, kwargs, seen = request
        turn, again = _turn(messages, scope, query, conversation)
        if again and (done := self._recalls.get(turn)) is not None:
            return done
        return query, kwargs, seen, turn

    def recall(self, messages: Sequence[Mapping[str, Any]], scope: str, *, conversation: str | None = None) -> Recall:
        """Search ``scope`` with the latest user message of ``messages`` (the model's input, OpenAI dicts) and
        return the memory text for the model (see the module docstring). ``conversation``: the conversation the
        model call belongs to (the framework's thread or session): hits of another are named by theirs. It never
        raises: anything that fails (the store, the embedder, a scope or message it cannot read, a search option's
        callable) is logged as a warning and gives no memory (``Recall.degraded``)."""
        query = ""
        try:
            start = self._start(messages, scope, conversation)
            if isinstance(start, Recall):
                return start
            query, kwargs, seen, turn = start
            late = self._writer.must_wait(scope, seen) and self._late(scope, seen, kwargs, self._writer.wait)
            return self._recalls.put(turn, self._recall(query, self.index.search(query, **kwargs), conversation, late))
        except Exception as e:  # recall never fails the model call
            return _failed(query, e)

    async def arecall(
        self, messages: Sequence[Mapping[str, Any]], scope: str, *, conversation: str | None = None
    ) -> Recall:
        """Async :meth:`recall` (never raises either)."""
        query = ""
        try:
            start = self._start(messages, scope, conversation)
            if isinstance(start, Recall):
                return start
            query, kwargs, seen, turn = start
            late = False
            if self._writer.must_wait(scope, seen):  # off the event loop
                late = await asyncio.to_thread(self._late, scope, seen, kwargs, self._writer.wait)
            recall = self._recall(query, await self.index.asearch(query, **kwargs), conversation, late)
            return self._recalls.put(turn, recall)
        except Exception as e:  # recall never fails the model call
            return _failed(query, e)

    # -- write --------------------------------------------------------------------------------------
    def _new(
        self, messages: Sequence[Mapping[str, Any]], scope: str, by_position: bool
    ) -> tuple[list[dict[str, Any]], list[str | None]]:
        """The messages to write and their keys: those not written yet, nor waiting to be (known by key); with
        ``by_position``, those after the run that repeats the last ones handed over."""
        check_id(scope, "memory scope")
        check_thread_id(scope)  # a scope no append may write (an item store's thread) is refused now, not later
        chosen = select_tool_calls(messages, self.tool_calls)
        if not self.include_system:
            chosen = [m for m in chosen if m.get("role") not in ("system", "developer")]
        keys = _keys(chosen)
        if by_position:
            start = _resent(keys, self._written.tail(scope))
            return [dict(m) for m in chosen[start:]], keys[start:]
        known = self._written.known(scope, keys) | (self._writer.pending_keys(scope) & {k for k in keys if k})
        new = [(m, k) for m, k in zip(chosen, keys, strict=True) if k is None or k not in known]
        return [m for m, _ in new], [k for _, k in new]

    def write(
        self,
        messages: Sequence[Mapping[str, Any]],
        scope: str,
        *,
        conversation: str | None = None,
        by_position: bool = False,
    ) -> IndexResult:
        """Append the messages of ``messages`` not written yet to ``scope`` (see the module docstring). In the
        background (the default) it returns at once, with an empty result; else a failure raises, and the messages
        are sent again at the next write. ``conversation`` (the framework's thread or session) is stored with each
        piece as its ``conversation`` metadata: the memory text names it.

        A message is known by its key (its id, else what it says and its time): ``messages`` may be the whole
        conversation at every call (LangGraph's state). ``by_position``: ``messages`` is a window that moves on (a
        short-term queue given whole at every call, its oldest messages dropped): what follows the run of messages it
        starts by giving again is new, so a message said twice ("ok", later "ok" again) is written twice even without
        an id or a time."""
        metadata = _conversation_metadata(conversation)
        new, keys = self._new(messages, scope, by_position)
        if not new:
            return IndexResult()
        if self.background:
            self._submit(scope, new, keys, by_position, metadata)
            return IndexResult()
        result = self.index.add_messages(new, scope, include_system=self.include_system, metadata=metadata)
        self._written.add(scope, keys)
        if by_position:
            self._written.extend_tail(scope, keys)
        return result

    async def awrite(
        self,
        messages: Sequence[Mapping[str, Any]],
        scope: str,
        *,
        conversation: str | None = None,
        by_position: bool = False,
    ) -> IndexResult:
        """Async :meth:`write` (the append in a worker thread, or handed to the background)."""
        metadata = _conversation_metadata(conversation)
        new, keys = self._new(messages, scope, by_position)
        if not new:
            return IndexResult()
        if self.background:
            if self._writer.full(len(new)):  # it would wait for room: off the event loop
                await asyncio.to_thread(self._submit, scope, new, keys, by_position, metadata)
            else:
                self._submit(scope, new, keys, by_position, metadata)
            return IndexResult()
        result = await self.index.aadd_messages(new, scope, include_system=self.include_system, metadata=metadata)
        self._written.add(scope, keys)
        if by_position:
            self._written.extend_tail(scope, keys)
        return result

    def _submit(
        self,
        scope: str,
        new: list[dict[str, Any]],
        keys: list[str | None],
        by_position: bool,
        metadata: dict[str, Any] | None,
    ) -> None:
        if by_position:  # the next window is read against what is handed over now (written in this order)
            self._written.extend_tail(scope, keys)
        self._writer.submit(scope, new, keys, self.include_system, self._written, metadata, self._warm)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write handed to the background on this memory's index is stored (``timeout`` seconds at
        most); ``True`` when none is left. ``ContextualIndex.close()`` does it first, and so does the interpreter's
        exit."""
        return self._writer.flush(timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`."""
        return await asyncio.to_thread(self._writer.flush, timeout)

    @property
    def pending(self) -> int:
        """Messages waiting to be written in the background on this memory's index."""
        return self._writer.queued

    def written(self, scope: str, keys: Collection[str]) -> set[str]:
        """Which of the message ``keys`` this memory wrote to ``scope``, or handed to the background (an adapter leaves
        those out before converting a framework's messages: the state of a conversation is sent at every call)."""
        return self._written.known(scope, keys) | (self._writer.pending_keys(scope) & set(keys))


def _conversation_metadata(conversation: str | None) -> dict[str, str] | None:
    """The metadata an agent's write stores with each piece: the conversation it came from (``None``: none)."""
    if conversation is None:
        return None
    if not isinstance(conversation, str) or not conversation.strip():
        raise InputError(f"conversation must be a non-empty string or None, got {conversation!r}")
    return {CONVERSATION_KEY: conversation}
