"""The frameworks' memory classes write to ctxret turn by turn, and recall reads it.

LangChain: ``CtxretChatMessageHistory`` (a ``BaseChatMessageHistory``), used alone and by ``RunnableWithMessageHistory``
with LangChain's own fake chat model. LlamaIndex: ``CtxretMemoryBlock`` inside ``Memory``, used by a real
``FunctionAgent`` with LlamaIndex's ``MockFunctionCallingLLM``. On a LoCoMo conversation (when ``../shared`` is
beside the repo), sessions written through each class hold exactly the pieces of one core call.
"""

from __future__ import annotations

import asyncio
import warnings
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from ctxret import ContextualIndex, InputError
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from reliability.hash_embedder import HashEmbedder

from langchain_ctxret import ContextualRetriever, CtxretChatMessageHistory, messages_to_openai

LOCOMO = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "locomo-dev" / "26.json"
T0 = datetime(2026, 4, 1, 9, 0)


def snapshot(index: ContextualIndex) -> dict[str, tuple]:
    out = {}
    for rec in index.store.chroma.iter_records(None, include=("documents", "metadatas", "embeddings")):
        vec = tuple(np.round(np.asarray(rec["embedding"], dtype=np.float64), 5))
        out[rec["id"]] = (rec["document"], tuple(sorted((rec["metadata"] or {}).items())), vec)
    return out


def exchanges() -> list[list]:
    facts = ["My dog is called Biscuit.", "I moved to Berlin in March.", "My sister Ana is a pilot."]
    out = []
    for i, fact in enumerate(facts):
        ts = (T0 + timedelta(days=i)).isoformat()
        out.append(
            [
                HumanMessage(fact, id=f"h{i}", additional_kwargs={"timestamp": ts}),
                AIMessage(f"Noted: {fact.lower()}", id=f"a{i}", additional_kwargs={"timestamp": ts}),
            ]
        )
    return out


# -- LangChain -------------------------------------------------------------------------------------
def test_chat_history_appends_turn_by_turn_and_reads_back_in_order():
    index = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    history = CtxretChatMessageHistory(index, "u1")
    for pair in exchanges():
        history.add_messages(pair)
        history.add_messages(pair)  # a retry: nothing more
    back = history.messages
    sent = [m for pair in exchanges() for m in pair]
    assert [(type(m), m.content, m.id) for m in back] == [(type(m), m.content, m.id) for m in sent]
    assert back[0].additional_kwargs["timestamp"] == sent[0].additional_kwargs["timestamp"]
    one_call = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    one_call.add_messages(messages_to_openai(sent), "u1")
    assert snapshot(index) == snapshot(one_call)
    docs = ContextualRetriever(index=index, thread_id="u1", k=2, score_threshold=None).invoke("What is my dog called?")
    assert any("Biscuit" in d.page_content for d in docs)
    history.clear()
    assert history.messages == [] and index.store.count() == 0


def test_chat_history_keeps_tool_calls_and_results():
    index = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    history = CtxretChatMessageHistory(index, "t")
    call = AIMessage("", id="a1", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "c1"}])
    history.add_messages([HumanMessage("Weather in Oslo?", id="h1"), call])
    history.add_messages([ToolMessage("4 C, rain", tool_call_id="c1", id="t1"), AIMessage("Rainy, 4 C.", id="a2")])
    back = history.messages
    assert [type(m).__name__ for m in back] == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert back[1].tool_calls[0]["args"] == {"city": "Oslo"} and back[1].tool_calls[0]["id"] == "c1"
    assert back[2].content == "4 C, rain" and back[2].tool_call_id == "c1"
    assert index.store.stats()["turns"] == 1  # the result and the answer joined their question's turn


async def test_chat_history_async_twins_and_bad_input():
    index = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    history = CtxretChatMessageHistory(index, "u")
    await history.aadd_messages(exchanges()[0])
    assert [m.content for m in await history.aget_messages()] == [m.content for m in exchanges()[0]]
    await history.aclear()
    assert await history.aget_messages() == []
    with pytest.raises(InputError, match="ContextualIndex"):
        CtxretChatMessageHistory(object(), "u")
    with pytest.raises(InputError, match="thread_id"):
        CtxretChatMessageHistory(index, "")


def test_runnable_with_message_history_writes_memory_the_retriever_reads():
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    index = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    replies = iter([AIMessage("Noted, Biscuit."), AIMessage("Berlin, noted."), AIMessage("Your dog is Biscuit.")])
    model = GenericFakeChatModel(messages=replies)
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{input}")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # langchain-core 1.8 steers users to LangGraph
        chain = RunnableWithMessageHistory(
            prompt | model,
            lambda session_id: CtxretChatMessageHistory(index, session_id),
            input_messages_key="input",
            history_messages_key="history",
        )
        for text in ("My dog is called Biscuit.", "I live in Berlin.", "What is my dog called?"):
            chain.invoke({"input": text}, config={"configurable": {"session_id": "ana"}})
    history = CtxretChatMessageHistory(index, "ana")
    assert [m.content for m in history.messages] == [
        "My dog is called Biscuit.",
        "Noted, Biscuit.",
        "I live in Berlin.",
        "Berlin, noted.",
        "What is my dog called?",
        "Your dog is Biscuit.",
    ]
    assert index.store.stats()["turns"] == 3
    docs = ContextualRetriever(index=index, thread_id="ana", k=3, score_threshold=None).invoke("dog's name")
    assert any("My dog is called Biscuit." in d.page_content for d in docs)


# -- LlamaIndex ------------------------------------------------------------------------------------
def test_memory_block_stores_what_memory_flushes_and_a_function_agent_recalls_it():
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms import ChatMessage
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.memory import Memory

    from llamaindex_ctxret import CtxretMemoryBlock

    index = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    block = CtxretMemoryBlock(index=index, k=2)
    memory = Memory.from_defaults(session_id="ana", token_limit=60, token_flush_size=20, memory_blocks=[block])
    agent = FunctionAgent(llm=MockFunctionCallingLLM(), tools=[])

    async def chat() -> None:
        said = [
            "My dog is called Biscuit and he loves the beach.",
            "I moved to Berlin in March last year.",
            "My sister Ana flies planes for a living.",
            "Remind me, what do you know about my dog?",
        ]
        for text in said:
            await agent.run(user_msg=text, memory=memory)

    asyncio.run(chat())
    assert block.flush(10)  # the writes ran in the background
    stored = " ".join(r["metadata"]["body"] for r in index.store.records())
    assert "Biscuit" in stored  # the oldest messages were flushed to the block
    assert all(r["metadata"]["thread_id"] == "ana" for r in index.store.records())
    recalled = memory.get(input="What is my dog called?")
    text = "\n".join(str(m.content) for m in recalled)
    assert "### Part 1: What is my dog called?" in text and "Biscuit" in text
    # the last flush sent again (a retry) adds nothing
    from ctxret.ingest import thread_messages

    last = thread_messages(index.store.chroma, "ana")[-2:]
    before = index.store.count()
    again = [ChatMessage(role=m["role"], content=m["content"]) for m in last]
    asyncio.run(block.aput(again, session_id="ana"))
    assert block.flush(10) and index.store.count() == before


def test_memory_block_without_a_thread_is_an_error():
    from llama_index.core.llms import ChatMessage

    from llamaindex_ctxret import CtxretMemoryBlock

    block = CtxretMemoryBlock(index=ContextualIndex(in_memory=True, embedder=HashEmbedder()))
    with pytest.raises(InputError, match="thread"):
        asyncio.run(block.aput([ChatMessage(role="user", content="hello")]))
    with pytest.raises(ValueError, match="needs a ctxret ContextualIndex"):  # pydantic's ValidationError holds it
        CtxretMemoryBlock(index="not an index")


# -- LoCoMo, session by session, through every class -------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(not LOCOMO.exists(), reason="../shared/data/locomo-dev is not beside the repo")
def test_locomo_sessions_through_each_memory_class_hold_the_one_call_pieces(local_embedder):
    from ctxret.evaluation.datasets import load_locomo
    from ctxret.evaluation.memory import conversation_sessions
    from langchain_core.messages import convert_to_messages
    from llama_index.core.llms import ChatMessage

    from llamaindex_ctxret import CtxretMemoryBlock

    conv = load_locomo(LOCOMO)
    sessions, _ = conversation_sessions(conv)
    sessions = sessions[:6]
    one_call = ContextualIndex(in_memory=True, embedder=local_embedder)
    one_call.add_messages([m for s in sessions for m in s], thread_id=conv.id)
    reference = snapshot(one_call)

    via_history = ContextualIndex(in_memory=True, embedder=local_embedder)
    history = CtxretChatMessageHistory(via_history, conv.id)
    via_retriever = ContextualIndex(in_memory=True, embedder=local_embedder)
    retriever = ContextualRetriever(index=via_retriever)
    via_block = ContextualIndex(in_memory=True, embedder=local_embedder)
    block = CtxretMemoryBlock(index=via_block, thread_id=conv.id)
    for session in sessions:
        lc = convert_to_messages([{**m, "additional_kwargs": {"timestamp": m["timestamp"]}} for m in session])
        history.add_messages(lc)
        retriever.add_messages(lc, thread_id=conv.id)
        li = [
            ChatMessage(
                role=m["role"],
                content=m["content"],
                additional_kwargs={"timestamp": m["timestamp"], "id": m["id"], "name": m["name"]},
            )
            for m in session
        ]
        asyncio.run(block.aput(li))
    assert block.flush(60)
    for index in (via_history, via_retriever, via_block):
        got = snapshot(index)
        assert got.keys() == reference.keys()
        assert all(got[k][:2] == reference[k][:2] for k in got)
        assert max(float(np.max(np.abs(np.subtract(got[k][2], reference[k][2])))) for k in got) < 1e-4
