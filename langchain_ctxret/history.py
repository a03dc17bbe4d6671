"""A LangChain chat history backed by ctxret: what a chain keeps as history becomes searchable memory.

``CtxretChatMessageHistory(index, thread_id)`` is a ``BaseChatMessageHistory``: ``add_messages`` appends to the
thread (``ContextualIndex.add_messages``: the next turns; a message sent again adds nothing), ``messages`` reads the
thread back in order, ``clear()`` deletes its messages. Anything that keeps history through that interface writes
ctxret memory turn by turn (``RunnableWithMessageHistory``, or your own loop), and ``ContextualRetriever`` reads it.

>>> history = CtxretChatMessageHistory(index, "user-42")                  # doctest: +SKIP
>>> history.add_messages([HumanMessage("My dog is Biscuit."), AIMessage("Noted.")])  # doctest: +SKIP
>>> ContextualRetriever(index=index, thread_id="user-42").invoke("What is my dog called?")  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from ctxret import ContextualIndex, InputError
from ctxret.adapters import thread_messages
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, convert_to_messages

from .messages import messages_to_openai

__all__ = ["CtxretChatMessageHistory"]


class CtxretChatMessageHistory(BaseChatMessageHistory):
    """The messages of one ctxret thread, as a LangChain chat history (see the module docstring).

    ``index``: a :class:`ctxret.ContextualIndex` (or anything with an ``index`` attribute holding one, such as
    ``ContextualRetriever``); ``thread_id``: the thread (a user, a conversation); ``metadata``: stored with every
    message written through it; ``include_system``: also store system messages.

    ``messages`` are the messages as they were added, as ``InMemoryChatMessageHistory`` returns them: each content
    string exactly (whitespace, blank lines, tabs and a trailing newline kept, though the pieces searched are packed;
    a list of content blocks comes back as its text), with the ``id`` it was given, its ``name`` and its time
    (``additional_kwargs["timestamp"]``); tool calls come back as ``AIMessage.tool_calls`` and their results as
    ``ToolMessage`` s. A thread written before ctxret kept messages exactly reads as stored (whitespace collapsed).
    """

    def __init__(
        self, index: Any, thread_id: str, *, metadata: Mapping[str, Any] | None = None, include_system: bool = False
    ) -> None:
        index = getattr(index, "index", index)
        if not isinstance(index, ContextualIndex):
            raise InputError(
                f"CtxretChatMessageHistory needs a ctxret ContextualIndex (or a ContextualRetriever), got "
                f"{type(index).__name__}"
            )
        if not isinstance(thread_id, str) or not thread_id.strip():
            raise InputError(f"thread_id must be a non-empty string (a user or a conversation), got {thread_id!r}")
        self.index = index
        self.thread_id = thread_id
        self.metadata = dict(metadata) if metadata else None
        self.include_system = include_system

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The thread's messages, in order."""
        return convert_to_messages(thread_messages(self.index.store.chroma, self.thread_id))

    async def aget_messages(self) -> list[BaseMessage]:
        return await asyncio.to_thread(lambda: self.messages)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append ``messages`` to the thread (a message sent again adds nothing)."""
        self.index.add_messages(
            messages_to_openai(messages), self.thread_id, metadata=self.metadata, include_system=self.include_system
        )

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self.index.aadd_messages(
            messages_to_openai(messages), self.thread_id, metadata=self.metadata, include_system=self.include_system
        )

    def clear(self) -> None:
        """Delete the thread's messages (documents added under the same thread id stay)."""
        self.index.delete(thread_id=self.thread_id, where={"ctxret:kind": "turn"})

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)
