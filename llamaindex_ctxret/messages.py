"""LlamaIndex chat messages → OpenAI chat-completions dicts, the format the ctxret core indexes.

Only the conversion happens here; turns, sources and pieces are built by the core, so a thread written through
LlamaIndex's ``Memory`` and the same thread written as OpenAI dicts store the same pieces.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ctxret import InputError
from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
    VideoBlock,
)

__all__ = ["chat_messages_to_openai", "chat_message_to_openai"]

_ROLES = {"chatbot": "assistant", "model": "assistant"}
#: Keys of ``additional_kwargs`` read as the message's time and its id (first wins).
TIME_KEYS = ("timestamp", "created_at")
ID_KEYS = ("id", "message_id")


def chat_messages_to_openai(messages: Iterable[ChatMessage | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Convert LlamaIndex ``ChatMessage`` s to OpenAI dicts, in order (dicts are copied as they are).

    - the role's value (``chatbot``/``model`` → ``assistant``); text blocks joined as the content; image, audio,
      video and document blocks as a short note (``[image: <url>]``), never their data; thinking blocks left out;
    - tool calls: ``ToolCallBlock`` s and OpenAI-style ``additional_kwargs["tool_calls"]`` → ``tool_calls``; a
      ``tool`` message's ``additional_kwargs["tool_call_id"]`` kept;
    - ``additional_kwargs["timestamp"]`` (or ``created_at``) → the message's time; ``id`` (or ``message_id``) → its
      id (an append stores a message with an id once however often it is sent).
    """
    if isinstance(messages, (str, bytes, ChatMessage, Mapping)):
        raise InputError("messages must be a list of ChatMessage (or OpenAI dicts), not a single message or string")
    return [chat_message_to_openai(m, where=f"message {i}") for i, m in enumerate(messages)]


def chat_message_to_openai(message: ChatMessage | Mapping[str, Any], *, where: str = "message") -> dict[str, Any]:
    """One message (see :func:`chat_messages_to_openai`)."""
    if isinstance(message, Mapping):
        return dict(message)
    if not isinstance(message, ChatMessage):
        raise InputError(f"{where}: expected a LlamaIndex ChatMessage or an OpenAI dict, got {type(message).__name__}")
    role = getattr(message.role, "value", message.role)
    out: dict[str, Any] = {"role": _ROLES.get(str(role), str(role))}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            args = block.tool_kwargs if isinstance(block.tool_kwargs, str) else json.dumps(block.tool_kwargs)
            calls.append(
                {"id": block.tool_call_id, "type": "function", "function": {"name": block.tool_name, "arguments": args}}
            )
        elif isinstance(block, ThinkingBlock):
            continue
        elif isinstance(block, (ImageBlock, AudioBlock, VideoBlock, DocumentBlock)):
            kind = type(block).__name__.removesuffix("Block").lower()
            ref = getattr(block, "url", None) or getattr(block, "path", None) or getattr(block, "title", None)
            out_ref = str(ref) if ref else getattr(block, "image_mimetype", None) or "inline data"
            texts.append(f"[{kind}: {out_ref}]")
    extra = message.additional_kwargs or {}
    for call in extra.get("tool_calls") or []:
        calls.append(_openai_call(call))
    out["content"] = "\n".join(t for t in texts if t)
    if calls and out["role"] == "assistant":
        unique: list[dict[str, Any]] = []
        ids: set[str] = set()
        for call in calls:  # a call in both forms (a block and additional_kwargs) is one call
            if call.get("id") and call["id"] in ids:
                continue
            ids.add(call.get("id") or "")
            unique.append(call)
        out["tool_calls"] = unique
    if out["role"] == "tool" and extra.get("tool_call_id") is not None:
        out["tool_call_id"] = str(extra["tool_call_id"])
    if extra.get("name") and out["role"] in ("user", "assistant", "tool"):
        out["name"] = str(extra["name"])
    for key in TIME_KEYS:
        if extra.get(key) not in (None, ""):
            out["timestamp"] = extra[key]
            break
    for key in ID_KEYS:
        if extra.get(key) not in (None, ""):
            out["id"] = str(extra[key])
            break
    return out


def _openai_call(call: Any) -> dict[str, Any]:
    """An OpenAI tool call (a dict or the SDK's object) as a dict."""
    if isinstance(call, Mapping):
        fn = call.get("function") or {}
        return {
            "id": call.get("id"),
            "type": "function",
            "function": {"name": fn.get("name"), "arguments": fn.get("arguments")},
        }
    fn = getattr(call, "function", None)
    return {
        "id": getattr(call, "id", None),
        "type": "function",
        "function": {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None)},
    }
