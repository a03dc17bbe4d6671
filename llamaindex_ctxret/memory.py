"""A memory block for LlamaIndex's ``Memory``: every exchange is written to ctxret, recall comes back grouped.

``llama_index.core.memory.Memory`` keeps recent messages in its short-term queue and gives them to its memory blocks
at every ``get`` (``aget``: the agent calls it before each model call, and once more after the run's answer), and
flushes its oldest messages to them (``aput``) only when the queue is over its token limit (30,000 tokens by
default: a short session never reaches it). :class:`CtxretMemoryBlock` is such a block:

* ``aget`` appends what it is given that it has not written yet (the queue, known by position: what follows the
  messages it starts by repeating), up to its last message that is not the user's (the question being asked is
  written with its answer: the agent calls ``get`` once more after the run's answer), so every exchange reaches
  ctxret under ``Memory.from_defaults`` whatever its limits, the end of a session included; then it searches
  the thread with the latest user message, leaving out the messages the model sees (by key), and returns the
  per-part groups as text (one section per part, as ``render_groups`` renders them; a part that finds nothing says
  so), within ``max_chars``; an empty string when nothing passes the floor, so ``Memory`` adds no block;
* ``aput`` (a flush) appends the flushed messages it has not written yet (already written by ``aget``: nothing).

Writes run in the background by default (``background=True``, :class:`ctxret.agent_memory.AgentMemory`): the agent
never waits for them, a failure is logged and tried again, the next recall waits for what it could miss, and
:meth:`CtxretMemoryBlock.flush`, ``index.close()`` and the interpreter's exit store what is pending.

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
from ctxret.adapters import MEMORY_NOTE, AgentMemory, check_max_chars, render_groups
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import BaseMemoryBlock
from pydantic import Field, PrivateAttr, field_validator

from .messages import chat_messages_to_openai

__all__ = ["CtxretMemoryBlock"]


class CtxretMemoryBlock(BaseMemoryBlock[str]):
    """ctxret as a ``Memory`` block (see the module docstring).

    ``index``: a :class:`ctxret.ContextualIndex`; ``thread_id``: the thread (default: the ``Memory``'s
    ``session_id``); ``k``: hits per part (``None``: the index's default, 5, as the other memory classes);
    ``max_chars``: the size of the text returned (hits are taken rank by rank across the parts; ``"auto"``: room for
    the ``k`` hits of two parts at the index's largest piece, as the agent middleware's); ``background``: writes off
    the agent's path (the default); ``deadline_ms``: the recall's time budget; ``note``: the line before the memory
    text; ``search_kwargs``: any other search option (``score_threshold``, ``lexical``, ``now``...).
    """

    name: str = Field(default="ctxret_memory", description="The block's name in the memory template.")
    index: Any = Field(description="The ContextualIndex the messages are written to and searched in.")
    thread_id: str | None = Field(default=None, description="The thread (default: the Memory's session_id).")
    k: int | None = Field(default=None, ge=1, description="Hits per part (None: the index's default).")
    max_chars: int | Literal["auto"] | None = Field(
        default="auto",
        description="At most this many characters of memory text ('auto': room for the k hits of two parts at the "
        "index's largest piece).",
    )
    search_kwargs: dict[str, Any] = Field(default_factory=dict, description="More search options.")
    include_system: bool = Field(default=False, description="Also store system messages.")
    background: bool = Field(default=True, description="Write in the background (never holding the agent).")
    deadline_ms: float | None = Field(default=1000, description="The recall's time budget (None: none).")
    note: str = Field(
        default=MEMORY_NOTE,
        description="The line before the memory text: how to read it (the text is quoted material, never "
        "instructions); '' for none.",
    )
    _memory: AgentMemory | None = PrivateAttr(default=None)

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

    @property
    def memory(self) -> AgentMemory:
        """The core's agent memory the block writes and recalls through."""
        if self._memory is None:
            self._memory = AgentMemory(
                self.index,
                k=self.k,
                max_chars=self.max_chars,
                deadline_ms=self.deadline_ms,
                include_system=self.include_system,
                background=self.background,
                search_options=self.search_kwargs,
            )
        return self._memory

    def _thread(self, session_id: Any = None) -> str:
        thread = self.thread_id or session_id
        if not isinstance(thread, str) or not thread.strip():
            raise InputError(
                "CtxretMemoryBlock has no thread: set thread_id=..., or use it inside a Memory (its session_id)"
            )
        return thread

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        session = block_kwargs.get("session_id")
        thread, conversation = self._thread(session), _session(session)
        given = chat_messages_to_openai(messages or [])
        # first: the write it hands over would compete with it
        recall = await self.memory.arecall(given, thread, conversation=conversation)
        await self.memory.awrite(_said(given), thread, conversation=conversation, by_position=True)
        if not any(g.hits for g in recall.groups):
            return ""
        text = render_groups(
            recall.groups,
            max_chars=self.memory.max_chars,
            now=self.search_kwargs.get("now", self.index.settings.now),
            conversation=conversation,
        )
        return f"{self.note}\n\n{text}" if self.note else text

    async def _aput(self, messages: list[ChatMessage]) -> None:
        if not messages:
            return
        session = next((m.additional_kwargs.get("session_id") for m in messages if m.additional_kwargs), None)
        await self.memory.awrite(
            chat_messages_to_openai(messages), self._thread(session), conversation=_session(session)
        )

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the writes handed to the background are stored (``timeout`` seconds at most; ``True`` when none
        is left)."""
        return self.memory.flush(timeout)

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async :meth:`flush`."""
        return await self.memory.aflush(timeout)


def _said(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a ``get`` may write: its messages up to the last one that is not the user's. The user messages it ends
    with wait for the next ``get`` (the one after the answer), so an exchange is written once, whole, after the
    answer and not during the model's call; ``Memory.aget(input=...)`` adds the input as a last user message (an
    agent gives the run's own message again after a tool call), which is not said twice."""
    end = len(messages)
    while end and messages[end - 1].get("role") == "user":
        end -= 1
    return messages[:end]


def _session(session: Any) -> str | None:
    """The conversation a block's messages belong to: the ``Memory``'s session (stored as ``conversation`` metadata
    and named in the memory text for hits of other sessions)."""
    return session if isinstance(session, str) and session.strip() else None
