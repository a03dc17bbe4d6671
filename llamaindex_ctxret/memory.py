"""A memory block for LlamaIndex's ``Memory``: what ``Memory`` flushes is written to ctxret, recall comes back grouped.

``llama_index.core.memory.Memory`` keeps recent messages in its short-term queue and, when the queue is over its
token limit, flushes the oldest to its memory blocks. :class:`CtxretMemoryBlock` is such a block:

* ``aput`` (the flush) appends the flushed messages to a ctxret thread (``ContextualIndex.add_messages``: the next
  turns; a message sent again adds nothing);
* ``aget`` searches that thread with the latest user message and returns the per-part groups as text (one section
  per part, as ``render_groups`` renders them; a part that finds nothing says so), within ``max_chars``; an empty
  string when nothing passes the floor, so ``Memory`` adds no block.

>>> block = CtxretMemoryBlock(index=index)                                           # doctest: +SKIP
>>> memory = Memory.from_defaults(session_id="user-42", memory_blocks=[block])       # doctest: +SKIP
>>> agent = FunctionAgent(llm=llm, tools=[...])                                       # doctest: +SKIP
>>> await agent.run("What is my dog called?", memory=memory)                          # doctest: +SKIP

The thread is ``thread_id`` when set, else the ``Memory``'s ``session_id`` (one thread per session), so the same
index can back many users' memories.
"""

from __future__ import annotations

from typing import Any, Literal

from ctxret import ContextualIndex, InputError
from ctxret.adapters import CONVERSATION_KEY, MEMORY_NOTE, auto_max_chars, check_max_chars, render_groups
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import BaseMemoryBlock
from pydantic import Field, field_validator

from .messages import chat_messages_to_openai

__all__ = ["CtxretMemoryBlock"]


class CtxretMemoryBlock(BaseMemoryBlock[str]):
    """ctxret as a ``Memory`` block (see the module docstring).

    ``index``: a :class:`ctxret.ContextualIndex`; ``thread_id``: the thread (default: the ``Memory``'s
    ``session_id``); ``k``: hits per part; ``max_chars``: the size of the text returned (hits are taken rank by rank
    across the parts; ``"auto"``: room for the ``k`` hits of two parts at the index's largest piece, as the agent
    middleware's); ``search_kwargs``: any other search option (``score_threshold``, ``lexical``, ``now``...).
    """

    name: str = Field(default="ctxret_memory", description="The block's name in the memory template.")
    index: Any = Field(description="The ContextualIndex the messages are written to and searched in.")
    thread_id: str | None = Field(default=None, description="The thread (default: the Memory's session_id).")
    k: int = Field(default=3, ge=1, description="Hits per part.")
    max_chars: int | Literal["auto"] | None = Field(
        default="auto",
        description="At most this many characters of memory text ('auto': room for the k hits of two parts at the "
        "index's largest piece).",
    )
    search_kwargs: dict[str, Any] = Field(default_factory=dict, description="More search options.")
    include_system: bool = Field(default=False, description="Also store system messages.")
    note: str = Field(
        default=MEMORY_NOTE,
        description="The line before the memory text: how to read it (the text is quoted material, never "
        "instructions); '' for none.",
    )

    @field_validator("max_chars")
    @classmethod
    def _check_max_chars(cls, value: Any) -> Any:
        return check_max_chars(value)

    @field_validator("index")
    @classmethod
    def _check_index(cls, value: Any) -> Any:
        index = getattr(value, "index", value)
        if not isinstance(index, ContextualIndex):
            raise InputError(f"CtxretMemoryBlock needs a ctxret ContextualIndex, got {type(value).__name__}")
        return index

    def _thread(self, session_id: Any = None) -> str:
        thread = self.thread_id or session_id
        if not isinstance(thread, str) or not thread.strip():
            raise InputError(
                "CtxretMemoryBlock has no thread: set thread_id=..., or use it inside a Memory (its session_id)"
            )
        return thread

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        latest = next((m for m in reversed(messages or []) if m.role == MessageRole.USER and m.content), None)
        if latest is None:
            return ""
        session = block_kwargs.get("session_id")
        groups = await self.index.asearch(
            str(latest.content), k=self.k, thread_id=self._thread(session), **self.search_kwargs
        )
        if not any(g.hits for g in groups):
            return ""
        text = render_groups(
            groups,
            max_chars=auto_max_chars(self.k, self.index.config.piece_bytes)
            if self.max_chars == "auto"
            else self.max_chars,
            now=self.search_kwargs.get("now", self.index.settings.now),
            conversation=session if isinstance(session, str) else None,
        )
        return f"{self.note}\n\n{text}" if self.note else text

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if not messages:
            return
        session = next((m.additional_kwargs.get("session_id") for m in messages if m.additional_kwargs), None)
        await self.index.aadd_messages(
            chat_messages_to_openai(messages),
            self._thread(session),
            include_system=self.include_system,
            metadata={CONVERSATION_KEY: session} if isinstance(session, str) and session.strip() else None,
        )
