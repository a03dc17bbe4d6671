"""LangChain chat messages → OpenAI chat-completions dicts, the format the ctxret core indexes.

The conversion is the only thing done here; turns, sources and pieces are built by the core
(:func:`ctxret.ingest.messages.turns_from_messages`), so a LangChain thread and the equivalent OpenAI thread
index into the same pieces (same ids, same texts).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ctxret import InputError
from ctxret.adapters import as_list
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

__all__ = ["messages_to_openai", "message_to_openai"]

#: Keys of ``additional_kwargs`` / ``response_metadata`` read as the message's time (first wins).
TIME_KEYS = ("timestamp", "created_at")
_CHAT_ROLES = {"human": "user", "ai": "assistant", "user": "user", "assistant": "assistant"}


def messages_to_openai(messages: Iterable[BaseMessage | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Convert LangChain messages to OpenAI chat-completions dicts, in order.

    - ``HumanMessage`` → ``user``; ``AIMessage`` → ``assistant``; ``SystemMessage`` → ``system``
      (``developer`` when langchain-openai marked it so); ``ToolMessage`` → ``tool`` with its
      ``tool_call_id``; ``FunctionMessage`` → ``function``; ``ChatMessage`` keeps its role
      (``human``/``ai`` mapped to ``user``/``assistant``).
    - ``AIMessage.tool_calls`` → OpenAI ``tool_calls`` (``{"id", "type": "function", "function":
      {"name", "arguments"}}``) with the call ids kept and the arguments as a JSON string: the raw
      string from ``additional_kwargs["tool_calls"]`` when it is there and parses to the same
      arguments (so a thread that came from OpenAI keeps its exact text), else
      ``json.dumps(args, ensure_ascii=False)`` in the arguments' own key order.
      ``invalid_tool_calls`` are kept too (their argument string as received).
    - Content blocks are passed on as they are: the core reads text, media, Anthropic ``tool_use``
      and ``tool_result`` blocks (see :func:`ctxret.ingest.messages.turns_from_messages`). ``tool_use`` blocks
      are dropped when the message has ``tool_calls`` (the same call, twice; the ``tool_calls``
      are the parsed form). A ``ToolMessage`` with ``status="error"`` gets ``"is_error": True``,
      like an Anthropic ``tool_result`` with ``is_error``.
    - ``name`` is kept (the core shows it as the speaker label); ``id`` too (an append knows a message by it: one
      sent again, as LangGraph's state shows every message again, is stored once). A ``timestamp`` (or
      ``created_at``) in ``additional_kwargs``, else in ``response_metadata``, becomes the dict's
      ``"timestamp"``.

    OpenAI dicts in the input are passed through (copied), so a list may mix both kinds.
    """
    if isinstance(messages, (str, bytes, BaseMessage, Mapping)):
        raise InputError(
            "messages must be a list of LangChain messages or OpenAI dicts, not a single message or string"
        )
    messages = as_list(messages, "messages", "LangChain messages or OpenAI dicts")
    return [message_to_openai(m, where=f"message {i}") for i, m in enumerate(messages)]


def message_to_openai(message: BaseMessage | Mapping[str, Any], *, where: str = "message") -> dict[str, Any]:
    """Convert one LangChain message (see :func:`messages_to_openai`); an OpenAI dict is copied."""
    if isinstance(message, Mapping):
        return dict(message)
    if not isinstance(message, BaseMessage):
        raise InputError(f"{where}: expected a LangChain message or an OpenAI dict, got {type(message).__name__}")
    out: dict[str, Any]
    if isinstance(message, ToolMessage):
        out = {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
        if getattr(message, "status", None) == "error":
            out["is_error"] = True
    elif isinstance(message, AIMessage):
        out = _ai_message(message)
    elif isinstance(message, HumanMessage):
        out = {"role": "user", "content": message.content}
    elif isinstance(message, SystemMessage):
        role = "developer" if message.additional_kwargs.get("__openai_role__") == "developer" else "system"
        out = {"role": role, "content": message.content}
    elif isinstance(message, FunctionMessage):
        out = {"role": "function", "content": message.content}
    elif isinstance(message, ChatMessage):
        out = {"role": _CHAT_ROLES.get(message.role, message.role), "content": message.content}
    else:
        raise InputError(
            f"{where}: cannot index a {type(message).__name__}; pass HumanMessage, AIMessage, "
            "ToolMessage, "
            "SystemMessage, FunctionMessage or ChatMessage"
        )
    if message.name:
        out["name"] = message.name
    if message.id:
        out["id"] = str(message.id)
    ts = _timestamp(message)
    if ts is not None:
        out["timestamp"] = ts
    return out


def _ai_message(message: AIMessage) -> dict[str, Any]:
    raw_calls = {c.get("id"): c for c in (message.additional_kwargs.get("tool_calls") or []) if isinstance(c, Mapping)}
    calls: list[dict[str, Any]] = []
    for tc in message.tool_calls:
        args = tc.get("args") or {}
        raw = (raw_calls.get(tc.get("id")) or {}).get("function") or {}
        raw_args = raw.get("arguments") if isinstance(raw, Mapping) else None
        arguments = (
            raw_args
            if isinstance(raw_args, str) and _same_json(raw_args, args)
            else json.dumps(args, ensure_ascii=False)
        )
        calls.append(_call(tc.get("id"), tc.get("name"), arguments))
    for bad in message.invalid_tool_calls:
        bad_args = bad.get("args")
        args_text = bad_args if isinstance(bad_args, str) else json.dumps(bad_args or "")
        calls.append(_call(bad.get("id"), bad.get("name"), args_text))
    if not calls and raw_calls:  # hand-made messages that only carry the OpenAI form
        calls = [dict(c) for c in raw_calls.values()]
    content: Any = message.content
    if calls and isinstance(content, list):
        content = [p for p in content if not (isinstance(p, Mapping) and p.get("type") == "tool_use")]
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = calls
    fc = message.additional_kwargs.get("function_call")
    if isinstance(fc, Mapping):
        out["function_call"] = dict(fc)
    return out


def _call(call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    call: dict[str, Any] = {
        "type": "function",
        "function": {"name": name or "tool", "arguments": arguments},
    }
    if call_id is not None:
        call["id"] = call_id
    return call


def _same_json(text: str, value: Any) -> bool:
    try:
        return json.loads(text) == value
    except (TypeError, ValueError):
        return False


def _timestamp(message: BaseMessage) -> Any:
    for source in (message.additional_kwargs, message.response_metadata):
        for key in TIME_KEYS:
            value = (source or {}).get(key)
            if value not in (None, ""):
                return value
    return None
