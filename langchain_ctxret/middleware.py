"""ctxret as the memory of a LangChain agent: an ``AgentMiddleware`` for ``langchain.agents.create_agent``.

``CtxretMemoryMiddleware(index, scope=...)`` gives a ``create_agent`` agent ctxret memory with nothing else to write:

* **before each model call** it searches the scope with the latest user message and adds what memory holds to the
  model's request (the system message), one section per part of the message, within ``max_chars``, under the
  product's floor; the memory text lives only in that request, never in the agent's state (the checkpointer) nor
  in ctxret. Messages the model already sees are left out of it. A slow or failing store never holds the model:
  the search has ``deadline_ms``, and a store error is logged and the model is called without memory.
* **after each model call and when the run ends** it appends the conversation's new messages to the scope (each
  message once, however often the state shows it: LangGraph gives every message an id), tool calls and results as
  ``tool_calls`` says (all by default: a tool's arguments and full result are what ctxret stores as a tool source).
  The write runs in the background by default (``background=True``): the agent never waits for the exchange to be
  embedded and stored, a failing write is logged and tried again, never raised into the run; a recall waits for the
  scope's pending writes it could miss, and :meth:`CtxretMemoryMiddleware.flush`, ``index.close()`` and the
  interpreter's exit store what is pending (:class:`ctxret.agent_memory.AgentMemory` says what is guaranteed).

The recall and the write are :class:`ctxret.agent_memory.AgentMemory`'s; this class only reads the agent's request,
state and run. ``scope`` is the thread of ctxret the memory lives in: by default the LangGraph thread id (the
conversation: ``config={"configurable": {"thread_id": ...}}``), or a string, or a callable of the run's
``Runtime`` returning one (``lambda runtime: runtime.context.user_id``: a user's memory across their
conversations).

>>> from langchain.agents import create_agent                                                   # doctest: +SKIP
>>> memory = CtxretMemoryMiddleware(index, scope=lambda runtime: runtime.context["user_id"])   # doctest: +SKIP
>>> agent = create_agent(model, tools=[...], middleware=[memory], checkpointer=InMemorySaver())  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

from ctxret import InputError
from ctxret.adapters import DEFAULT_MAX_CHARS, DEFAULT_TEMPLATE, AgentMemory, Recall, missing_extra
from langchain_core.messages import BaseMessage, SystemMessage

from .messages import message_to_openai, messages_to_openai

try:
    from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
    from langgraph.config import get_config
    from langgraph.runtime import Runtime
except ImportError as e:  # pragma: no cover - the base install has neither
    raise missing_extra(e.name or "langchain", "langgraph", "CtxretMemoryMiddleware") from e

logger = logging.getLogger(__name__)

__all__ = ["CtxretMemoryMiddleware"]

Scope = str | Callable[[Runtime[Any]], str] | None


class CtxretMemoryMiddleware(AgentMiddleware):
    """ctxret memory for ``create_agent`` (see the module docstring).

    Args:
        index: a :class:`ctxret.ContextualIndex` (or a ``ContextualRetriever``, which holds one).
        scope: the ctxret thread the memory lives in: ``None`` (the LangGraph thread id), a string, or a callable
            of the run's ``Runtime`` (``runtime.context``, ``runtime.execution_info.thread_id``...) returning one.
        k: hits per part of the message (``None``: the index's default, 5).
        max_chars: the most characters of memory text put in the request (hits taken rank by rank across parts;
            ``"auto"``, the default: room for the ``k`` hits of two parts at the index's largest piece, 7,400 with
            the local model; ``None``: no bound).
        tool_calls: what of the tools is written: ``True`` (every call with its arguments and result), ``False``
            (none: only what the user and the assistant said), or a collection of tool names (those tools' calls).
        write: ``False`` reads memory only (another process writes it).
        background: write off the agent's path (the default); ``False``: each write inside the model call's step,
            a failure raised.
        deadline_ms: the recall's time budget (``None``: none); the search returns within it with what it found.
        include_system: also write system messages of the state.
        template: how the memory text is put in the system message (``{memory}``).
        search_kwargs: any other search option (``score_threshold``, ``lexical``, ``where``, ``now``...).
    """

    def __init__(
        self,
        index: Any,
        *,
        scope: Scope = None,
        k: int | None = None,
        max_chars: int | str | None = DEFAULT_MAX_CHARS,
        tool_calls: bool | Collection[str] = True,
        write: bool = True,
        background: bool = True,
        deadline_ms: float | None = 1000,
        include_system: bool = False,
        template: str = DEFAULT_TEMPLATE,
        search_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if scope is not None and not (isinstance(scope, str) or callable(scope)):
            raise InputError(
                f"scope must be None (the LangGraph thread id), a string or a callable of the run, got {scope!r}"
            )
        if isinstance(scope, str) and not scope.strip():
            raise InputError("scope is an empty string; give a user or conversation id, or leave it None")
        if not isinstance(write, bool):
            raise InputError(f"write must be True or False, got {write!r}")
        self.memory = AgentMemory(
            index,
            k=k,
            max_chars=max_chars,
            template=template,
            deadline_ms=deadline_ms,
            tool_calls=tool_calls,
            include_system=include_system,
            background=background,
            search_options=search_kwargs,
        )
        self.scope = scope
        self.write = write

    @property
    def index(self) -> Any:
        """The :class:`ctxret.ContextualIndex` the memory lives in."""
        return self.memory.index

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the writes handed to the background are stored (``timeout`` seconds at most; ``True`` when none
        is left): before reading memory some other way right after a run, or at the end of a serverless handler."""
        return self.memory.flush(timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`."""
        return await self.memory.aflush(timeout)

    # -- the scope ----------------------------------------------------------------------------------
    def scope_of(self, runtime: Runtime[Any] | None) -> str:
        """The ctxret thread this run's memory lives in (see ``scope``)."""
        if isinstance(self.scope, str):
            return self.scope
        if self.scope is not None:
            try:
                value = self.scope(runtime)  # type: ignore[arg-type]
            except Exception as e:  # the user's callable: its failure is named, with the fix
                raise InputError(
                    f"the memory scope callable {getattr(self.scope, '__name__', self.scope)!r} raised "
                    f"{type(e).__name__}: {e}; it gets the run's Runtime (runtime.context, runtime.execution_info) "
                    "and must return the scope's id, e.g. lambda runtime: runtime.context['user_id']"
                ) from e
            if not isinstance(value, str) or not value.strip():
                raise InputError(f"the memory scope callable returned {value!r}; it must return a non-empty string")
            return value
        thread = self.conversation_of(runtime)
        if not thread:
            raise InputError(
                "CtxretMemoryMiddleware has no scope: run the agent with a thread, "
                "config={'configurable': {'thread_id': ...}} (and a checkpointer), or pass scope='user-42' or "
                "scope=lambda runtime: runtime.context['user_id']"
            )
        return thread

    @staticmethod
    def conversation_of(runtime: Runtime[Any] | None) -> str | None:
        """The conversation this run belongs to: its LangGraph thread id (``None``: a run without a thread).
        Stored with every message the middleware writes (``conversation`` metadata) and named in the memory text
        for hits of other conversations."""
        info = getattr(runtime, "execution_info", None)
        thread = getattr(info, "thread_id", None)
        if not thread:
            try:
                thread = (get_config().get("configurable") or {}).get("thread_id")
            except RuntimeError:  # outside a LangGraph run
                thread = None
        return str(thread) if thread else None

    # -- before the model: recall --------------------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        """Search memory with the latest user message and call the model with it in the system message."""
        runtime = request.runtime
        recall = self.memory.recall(
            _visible(request.messages), self.scope_of(runtime), conversation=self.conversation_of(runtime)
        )
        return handler(_with_memory(request, recall))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> Any:
        """Async :meth:`wrap_model_call`."""
        runtime = request.runtime
        recall = await self.memory.arecall(
            _visible(request.messages), self.scope_of(runtime), conversation=self.conversation_of(runtime)
        )
        return await handler(_with_memory(request, recall))

    # -- after the model and at the end: write ---------------------------------------------------------
    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Append the state's new messages to memory."""
        if self.write:
            scope = self.scope_of(runtime)
            self.memory.write(self._unwritten(state, scope), scope, conversation=self.conversation_of(runtime))
        return None

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        if self.write:
            scope = self.scope_of(runtime)
            await self.memory.awrite(self._unwritten(state, scope), scope, conversation=self.conversation_of(runtime))
        return None

    def _unwritten(self, state: Any, scope: str) -> list[dict[str, Any]]:
        """The state's messages as OpenAI dicts, but those written (or handed to the background) before, known by their
        ids: the state is the whole conversation at every call, and only its new messages need converting."""
        messages = state.get("messages", []) if isinstance(state, Mapping) else getattr(state, "messages", [])
        messages = [m for m in messages if isinstance(m, BaseMessage)]
        if isinstance(self.memory.tool_calls, bool):  # what is written of a message depends on that message alone
            known = self.memory.written(scope, [f"id:{m.id}" for m in messages if m.id])
            messages = [m for m in messages if not m.id or f"id:{m.id}" not in known]
        return messages_to_openai(messages)

    def after_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Append what the run added after the last model call (a tool that ended it)."""
        return self.after_model(state, runtime)

    async def aafter_agent(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        return await self.aafter_model(state, runtime)


def _visible(messages: Any) -> list[dict[str, Any]]:
    """The model's input as the recall reads it: the latest user message as an OpenAI dict (the query), every other
    message with an id as its role and id only (what the recall leaves out by key; converting each message of the
    conversation at every model call would cost its length), a message without an id whole (a message of a kind
    ctxret does not read is left out: it is neither the query nor stored)."""
    messages = list(messages)
    latest = next((i for i in range(len(messages) - 1, -1, -1) if getattr(messages[i], "type", None) == "human"), None)
    out = []
    for i, m in enumerate(messages):
        if i != latest and isinstance(m, BaseMessage) and isinstance(m.id, str) and m.id:
            out.append({"role": _ROLES.get(m.type, "assistant"), "content": "", "id": m.id})
        elif (d := _convert(m)) is not None:
            out.append(d)
            if i == latest and not _says(d):  # the latest user message says nothing: the recall reads further back
                return [x for x in (_convert(m) for m in messages) if x is not None]
    return out


def _says(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return bool(content.strip()) if isinstance(content, str) else bool(content)


#: The roles of LangChain's message types (a message in view needs only its role and id).
_ROLES = {"human": "user", "ai": "assistant", "tool": "tool", "system": "system", "function": "function"}


def _convert(message: Any) -> dict[str, Any] | None:
    try:
        return message_to_openai(message)
    except InputError:
        logger.debug("recall: a %s in the model's input is not read", type(message).__name__)
        return None


def _with_memory(request: ModelRequest[Any], recall: Recall) -> ModelRequest[Any]:
    """``request`` with the memory text after its system message's (a new system message when it has none)."""
    if not recall.text:
        return request
    system = request.system_message
    if system is None:
        return request.override(system_message=SystemMessage(recall.text))
    content = system.content
    if isinstance(content, str):
        merged: Any = f"{content}\n\n{recall.text}" if content else recall.text
    else:
        merged = [*content, {"type": "text", "text": recall.text}]
    return request.override(system_message=SystemMessage(content=merged, **_kept(system)))


def _kept(message: SystemMessage) -> dict[str, Any]:
    """What a rewritten system message keeps of the original besides its content."""
    out: dict[str, Any] = {}
    if message.additional_kwargs:
        out["additional_kwargs"] = dict(message.additional_kwargs)
    if message.response_metadata:
        out["response_metadata"] = dict(message.response_metadata)
    if message.name:
        out["name"] = message.name
    if message.id:
        out["id"] = message.id
    return out
