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
  recall.
* :meth:`AgentMemory.write` (after a model call, and when the run ends) appends the conversation's messages to the
  scope (``ContextualIndex.add_messages``: the next turns; a message sent again adds nothing, known by its id). It
  remembers, per scope, the keys of what it wrote, so sending the whole agent state after every model call costs
  one append of the new messages only (a new process sends the state once, and the append finds what is stored).
  ``tool_calls`` decides what of the tools is written: every call with its arguments and result (``True``, the
  default: ctxret stores a tool call and its full result as one source), none (``False``: only what the user and
  the assistant said), or the calls of the named tools.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import EmbeddingError, InputError, StoreError
from .index import ContextualIndex
from .ingest.messages import read_messages
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

__all__ = ["CONVERSATION_KEY", "DEFAULT_MAX_CHARS", "DEFAULT_TEMPLATE", "AgentMemory", "Recall", "select_tool_calls"]

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
    keys: OrderedDict[str, set[str]] = field(default_factory=OrderedDict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def known(self, scope: str) -> set[str]:
        with self.lock:
            keys = self.keys.get(scope)
            if keys is None:
                return set()
            self.keys.move_to_end(scope)
            return set(keys)

    def add(self, scope: str, keys: Collection[str]) -> None:
        with self.lock:
            self.keys.setdefault(scope, set()).update(keys)
            self.keys.move_to_end(scope)
            while len(self.keys) > MAX_SCOPES:
                self.keys.popitem(last=False)


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
    messages; ``search_options``: any other search option (``score_threshold``, ``lexical``, ``where``, ...).
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
        options = dict(search_options or {})
        bad = [o for o in options if o in _RECALL_OPTIONS]
        if bad:
            raise InputError(f"pass {', '.join(bad)} as the memory's own argument (k=, scope=, deadline_ms=)")
        self._user_where = options.pop("where", None)
        self.index = index
        plan = index.plan(**{**options, "k": k or index.settings.k, "deadline_ms": deadline_ms})  # bad options fail now
        if max_chars == "auto":
            max_chars = auto_max_chars(plan.k, index.config.piece_bytes)
        self.k, self.max_chars, self.template = k, max_chars, template
        self.deadline_ms, self.tool_calls, self.include_system = deadline_ms, tool_calls, include_system
        self.search_options = options
        self._delimiters = template_delimiters(template)
        self._written = _Written()

    # -- recall -------------------------------------------------------------------------------------
    def _request(self, messages: Sequence[Mapping[str, Any]], scope: str) -> tuple[str, dict[str, Any]] | None:
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
        return query, kwargs

    def _recall(self, query: str, groups: Sequence[Group], conversation: str | None) -> Recall:
        degraded = any(g.degraded for g in groups)
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

    def recall(self, messages: Sequence[Mapping[str, Any]], scope: str, *, conversation: str | None = None) -> Recall:
        """Search ``scope`` with the latest user message of ``messages`` (the model's input, OpenAI dicts) and
        return the memory text for the model (see the module docstring). ``conversation``: the conversation the
        model call belongs to (the framework's thread or session): hits of another are named by theirs. It never
        raises: anything that fails (the store, the embedder, a scope or message it cannot read, a search option's
        callable) is logged as a warning and gives no memory (``Recall.degraded``)."""
        query = ""
        try:
            request = self._request(messages, scope)
            if request is None:
                return Recall("")
            query, kwargs = request
            return self._recall(query, self.index.search(query, **kwargs), conversation)
        except Exception as e:  # recall never fails the model call
            return _failed(query, e)

    async def arecall(
        self, messages: Sequence[Mapping[str, Any]], scope: str, *, conversation: str | None = None
    ) -> Recall:
        """Async :meth:`recall` (never raises either)."""
        query = ""
        try:
            request = self._request(messages, scope)
            if request is None:
                return Recall("")
            query, kwargs = request
            return self._recall(query, await self.index.asearch(query, **kwargs), conversation)
        except Exception as e:  # recall never fails the model call
            return _failed(query, e)

    # -- write --------------------------------------------------------------------------------------
    def _new(self, messages: Sequence[Mapping[str, Any]], scope: str) -> tuple[list[dict[str, Any]], list[str]]:
        check_id(scope, "memory scope")
        chosen = select_tool_calls(messages, self.tool_calls)
        if not self.include_system:
            chosen = [m for m in chosen if m.get("role") not in ("system", "developer")]
        known = self._written.known(scope)
        keys = _keys(chosen)
        new = [(m, k) for m, k in zip(chosen, keys, strict=True) if k is None or k not in known]
        return [m for m, _ in new], [k for _, k in new if k is not None]

    def write(
        self, messages: Sequence[Mapping[str, Any]], scope: str, *, conversation: str | None = None
    ) -> IndexResult:
        """Append the messages of ``messages`` not written yet to ``scope`` (see the module docstring); a failure
        raises, and the messages are sent again at the next write. ``conversation`` (the framework's thread or
        session) is stored with each piece as its ``conversation`` metadata: the memory text names it."""
        new, keys = self._new(messages, scope)
        if not new:
            return IndexResult()
        result = self.index.add_messages(
            new, scope, include_system=self.include_system, metadata=_conversation_metadata(conversation)
        )
        self._written.add(scope, keys)
        return result

    async def awrite(
        self, messages: Sequence[Mapping[str, Any]], scope: str, *, conversation: str | None = None
    ) -> IndexResult:
        """Async :meth:`write` (the append in a worker thread)."""
        new, keys = self._new(messages, scope)
        if not new:
            return IndexResult()
        result = await self.index.aadd_messages(
            new, scope, include_system=self.include_system, metadata=_conversation_metadata(conversation)
        )
        self._written.add(scope, keys)
        return result


def _conversation_metadata(conversation: str | None) -> dict[str, str] | None:
    """The metadata an agent's write stores with each piece: the conversation it came from (``None``: none)."""
    if conversation is None:
        return None
    if not isinstance(conversation, str) or not conversation.strip():
        raise InputError(f"conversation must be a non-empty string or None, got {conversation!r}")
    return {CONVERSATION_KEY: conversation}
