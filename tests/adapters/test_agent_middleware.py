"""``CtxretMemoryMiddleware`` gives a ``create_agent`` agent ctxret memory: written as it happens, recalled before
each model call, never in the agent's state.

The agents are LangChain's own ``create_agent`` with LangGraph's ``InMemorySaver`` and LangChain's fake chat model
(``GenericFakeChatModel`` with ``bind_tools``: ``agent_fakes.ScriptedChatModel``). Plumbing tests use the hash
embedder; recall is checked with the local model.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest
from agent_fakes import scripted
from ctxret import ContextualIndex, EmbeddingError, InputError, Store
from ctxret.agent_memory import AgentMemory, select_tool_calls
from ctxret.ingest.append import thread_messages
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from reliability.hash_embedder import HashEmbedder

from langchain_ctxret import CtxretMemoryMiddleware, messages_to_openai


@dataclass
class User:
    user_id: str


def snapshot(index: ContextualIndex) -> dict[str, tuple]:
    out = {}
    for rec in index.store.chroma.iter_records(None, include=("documents", "metadatas", "embeddings")):
        vec = tuple(np.round(np.asarray(rec["embedding"], dtype=np.float64), 5))
        out[rec["id"]] = (rec["document"], tuple(sorted((rec["metadata"] or {}).items())), vec)
    return out


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


@tool
def weather(city: str) -> str:
    """Today's weather in a city."""
    return f"{city}: 4 C and rain."


@tool
def clock(city: str) -> str:
    """The time in a city."""
    return f"{city}: 14:05."


# -- writes ----------------------------------------------------------------------------------------
def test_each_message_is_written_once_and_the_store_equals_one_call():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    model = scripted("Noted: Biscuit.", "Noted: Berlin.", "Noted: Ana.")
    agent = create_agent(model, middleware=[CtxretMemoryMiddleware(index)], checkpointer=InMemorySaver())
    for text in ("My dog is called Biscuit.", "I moved to Berlin in March.", "My sister Ana is a pilot."):
        agent.invoke({"messages": [HumanMessage(text)]}, config("c1"))
    assert index.flush()  # the writes ran in the background
    state = agent.get_state(config("c1")).values["messages"]
    assert len(state) == 6 and index.stats()["turns"] == 3
    # the state again, through a middleware that has written nothing in this process: the store finds it all
    again = CtxretMemoryMiddleware(index, background=False)
    assert again.memory.write(messages_to_openai(state), "c1").duplicates == 6
    one_call = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    one_call.add_messages(messages_to_openai(state), "c1", metadata={"conversation": "c1"})  # the thread, named
    # the same turns; each turn's time is when it was first written, so compare what the turns hold
    assert [(m["role"], m["content"], m["id"]) for m in thread_messages(index.store.chroma, "c1")] == [
        (m["role"], m["content"], m["id"]) for m in messages_to_openai(state)
    ]
    assert len(snapshot(index)) == len(snapshot(one_call))


def test_timed_messages_leave_exactly_the_pieces_of_one_call():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    times = [f"2026-04-0{d}T09:00:00" for d in range(1, 5)]
    answers = [AIMessage(f"Noted {i}.", id=f"a{i}", additional_kwargs={"timestamp": t}) for i, t in enumerate(times)]
    agent = create_agent(scripted(*answers), middleware=[CtxretMemoryMiddleware(index)], checkpointer=InMemorySaver())
    sent = []
    for i, t in enumerate(times[:3]):
        msg = HumanMessage(f"Fact number {i}: the code is {i * 111}.", id=f"h{i}", additional_kwargs={"timestamp": t})
        sent += [msg, answers[i]]
        agent.invoke({"messages": [msg]}, config("c1"))
    agent.invoke({"messages": [sent[0]]}, config("c1"))  # a message sent again: the state keeps one (its id)
    index.flush()
    state = agent.get_state(config("c1")).values["messages"]
    assert [m.id for m in state] == ["h0", "a0", "h1", "a1", "h2", "a2", "a3"]
    one_call = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    one_call.add_messages(messages_to_openai(state), "c1", metadata={"conversation": "c1"})  # the thread, named
    assert snapshot(index) == snapshot(one_call)


def test_tool_calls_are_written_as_the_setting_says():
    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "c1"}
    call2 = {"name": "clock", "args": {"city": "Oslo"}, "id": "c2"}

    def run(tool_calls):
        index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
        model = scripted(AIMessage("", tool_calls=[call, call2]), "Rainy, 4 C, and it is 14:05.")
        mw = CtxretMemoryMiddleware(index, tool_calls=tool_calls)
        agent = create_agent(model, tools=[weather, clock], middleware=[mw], checkpointer=InMemorySaver())
        agent.invoke({"messages": [HumanMessage("Weather and time in Oslo?")]}, config("t"))
        mw.flush()
        return index, thread_messages(index.store.chroma, "t")

    index, stored = run(True)
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "tool", "assistant"]
    assert stored[2]["content"] == "Oslo: 4 C and rain." and index.stats()["turns"] == 1
    _, stored = run(False)
    assert [(m["role"], m["content"]) for m in stored] == [
        ("user", "Weather and time in Oslo?"),
        ("assistant", "Rainy, 4 C, and it is 14:05."),
    ]
    _, stored = run(["weather"])
    assert [m["role"] for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1]["tool_calls"][0]["function"]["name"] == "weather" and len(stored[1]["tool_calls"]) == 1


def test_a_run_that_a_tool_ends_is_written_when_it_ends():
    @tool(return_direct=True)
    def booking(city: str) -> str:
        """Book a flight."""
        return f"Booked: flight TP 541 to {city}, 9:40."

    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    call = {"name": "booking", "args": {"city": "Lisbon"}, "id": "c1"}
    agent = create_agent(
        scripted(AIMessage("", tool_calls=[call])),
        tools=[booking],
        middleware=[CtxretMemoryMiddleware(index)],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke({"messages": [HumanMessage("Book me a flight to Lisbon.")]}, config("t"))
    assert out["messages"][-1].type == "tool"  # no model call after the tool: after_agent wrote its result
    index.flush()
    stored = thread_messages(index.store.chroma, "t")
    assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
    assert stored[2]["content"] == "Booked: flight TP 541 to Lisbon, 9:40."


async def test_async_writes_each_message_once():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    agent = create_agent(
        scripted("one", "two"), middleware=[CtxretMemoryMiddleware(index)], checkpointer=InMemorySaver()
    )
    await agent.ainvoke({"messages": [HumanMessage("first")]}, config("t"))
    await agent.ainvoke({"messages": [HumanMessage("second")]}, config("t"))
    state = (await agent.aget_state(config("t"))).values["messages"]
    assert await CtxretMemoryMiddleware(index).aflush()
    assert [m["id"] for m in thread_messages(index.store.chroma, "t")] == [m.id for m in state]
    again = await CtxretMemoryMiddleware(index, background=False).memory.awrite(messages_to_openai(state), "t")
    assert again.added == 0 and again.duplicates == 4


def test_select_tool_calls_keeps_results_with_their_calls():
    msgs = messages_to_openai(
        [
            HumanMessage("q", id="h"),
            AIMessage(
                "",
                id="a",
                tool_calls=[{"name": "weather", "args": {}, "id": "c1"}, {"name": "clock", "args": {}, "id": "c2"}],
            ),
            ToolMessage("rain", tool_call_id="c1", id="t1"),
            ToolMessage("14:05", tool_call_id="c2", id="t2"),
        ]
    )
    assert [m["id"] for m in select_tool_calls(msgs, ["clock"])] == ["h", "a", "t2"]
    assert [m["id"] for m in select_tool_calls(msgs, False)] == ["h"]  # the call-only message has nothing left
    msgs[1]["content"] = "Let me look."
    assert [m["id"] for m in select_tool_calls(msgs, False)] == ["h", "a"]
    assert "tool_calls" not in select_tool_calls(msgs, False)[1]
    assert select_tool_calls(msgs, True) == msgs


def test_two_agents_writing_one_scope_at_once_lose_and_duplicate_nothing():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    mw = CtxretMemoryMiddleware(index, scope=lambda runtime: runtime.context.user_id)
    n = 6
    barrier = threading.Barrier(2)

    def converse(name: str) -> None:
        model = scripted(*[f"{name} answer {i}." for i in range(n)])
        agent = create_agent(model, middleware=[mw], checkpointer=InMemorySaver(), context_schema=User)
        barrier.wait()
        for i in range(n):
            agent.invoke({"messages": [HumanMessage(f"{name} question {i}?")]}, config(name), context=User("u1"))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(converse, ["alpha", "beta"]))
    index.flush()
    stored = thread_messages(index.store.chroma, "u1")
    texts = [m["content"] for m in stored]
    assert sorted(texts) == sorted(
        f"{w} {kind} {i}{'?' if kind == 'question' else '.'}"
        for w in ("alpha", "beta")
        for kind in ("question", "answer")
        for i in range(n)
    )
    turns = sorted({int(r["metadata"]["turn_index"]) for r in index.store.chroma.iter_records({"thread_id": "u1"})})
    assert turns == list(range(1, 2 * n + 1))  # dense, one turn per exchange
    for i in range(0, len(stored), 2):  # every answer follows its own question
        assert stored[i]["content"].replace("question", "answer").rstrip("?") == stored[i + 1]["content"].rstrip(".")


# -- recall ----------------------------------------------------------------------------------------
def test_recall_is_in_the_model_input_and_never_in_the_state(local_embedder):
    index = ContextualIndex(Store.memory(), embedder=local_embedder)
    model = scripted("Noted.", "Noted.", "Your dog is Biscuit and your flight is at 9:40.")
    mw = CtxretMemoryMiddleware(index, scope=lambda runtime: runtime.context.user_id)
    saver = InMemorySaver()
    agent = create_agent(model, middleware=[mw], checkpointer=saver, context_schema=User, system_prompt="Be brief.")
    agent.invoke({"messages": [HumanMessage("My dog is called Biscuit.")]}, config("s1"), context=User("ana"))
    agent.invoke({"messages": [HumanMessage("My flight to Lisbon leaves at 9:40.")]}, config("s2"), context=User("ana"))
    question = "What is my dog called? When does my flight leave?"
    out = agent.invoke({"messages": [HumanMessage(question)]}, config("s3"), context=User("ana"))
    system = model.system_texts()[-1]
    assert system.startswith("Be brief.\n\n<memory>")
    assert "### Part 1: What is my dog called?" in system and "### Part 2: When does my flight leave?" in system
    assert "My dog is called Biscuit." in system and "leaves at 9:40" in system
    # the memory text is in no message of the state (the checkpointer) nor in ctxret
    for thread in ("s1", "s2", "s3"):
        for m in agent.get_state(config(thread)).values["messages"]:
            assert "<memory>" not in m.text and "### Part" not in m.text
    assert all("<memory>" not in r["document"] for r in index.store.chroma.iter_records(None, include=("documents",)))
    assert out["messages"][-1].content.startswith("Your dog is Biscuit")
    assert model.system_texts()[0] == "Be brief."  # nothing in memory yet: the system prompt as it was


def test_recall_leaves_out_what_the_model_already_sees(local_embedder):
    index = ContextualIndex(Store.memory(), embedder=local_embedder)
    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "c1"}
    model = scripted("Noted.", AIMessage("", tool_calls=[call]), "Rainy in Oslo; pack the blue umbrella.")
    agent = create_agent(
        model, tools=[weather], middleware=[CtxretMemoryMiddleware(index)], checkpointer=InMemorySaver()
    )
    agent.invoke({"messages": [HumanMessage("My umbrella for Oslo trips is the blue one.")]}, config("t"))
    agent.invoke({"messages": [HumanMessage("Which umbrella should I pack for the Oslo weather?")]}, config("t"))
    # the second run's two model calls: its question is stored after the first, yet never recalled to itself,
    # and everything of this thread is in view, so nothing is recalled at all
    assert all("<memory>" not in s for s in model.system_texts())
    other = scripted("The blue one.")
    fresh = create_agent(other, middleware=[CtxretMemoryMiddleware(index, scope="t")], checkpointer=InMemorySaver())
    fresh.invoke({"messages": [HumanMessage("Which umbrella do I take to Oslo?")]}, config("new"))
    assert "My umbrella for Oslo trips is the blue one." in other.system_texts()[0]


def test_a_system_message_of_content_blocks_gets_the_memory_as_one_more_block(local_embedder):
    from langchain_core.messages import SystemMessage

    index = ContextualIndex(Store.memory(), embedder=local_embedder)
    index.add_messages([{"role": "user", "content": "My dog is called Biscuit.", "id": "old"}], "u")
    model = scripted("Biscuit.")
    system = SystemMessage(content=[{"type": "text", "text": "Be brief."}], name="rules")
    agent = create_agent(model, middleware=[CtxretMemoryMiddleware(index, scope="u")], system_prompt=system)
    agent.invoke({"messages": [HumanMessage("What is my dog called?")]})
    given = model.inputs[0][0]
    assert (
        given.type == "system" and given.name == "rules" and given.content[0] == {"type": "text", "text": "Be brief."}
    )
    assert given.content[1]["type"] == "text" and "My dog is called Biscuit." in given.content[1]["text"]


@pytest.mark.parametrize("mode", ["invoke", "stream", "ainvoke", "astream"])
def test_sync_and_async_runs_recall_and_write_alike(local_embedder, mode):
    index = ContextualIndex(Store.memory(), embedder=local_embedder)
    index.add_messages([{"role": "user", "content": "My dog is called Biscuit.", "id": "old"}], "u")
    model = scripted("Biscuit.")
    agent = create_agent(model, middleware=[CtxretMemoryMiddleware(index, scope="u")], checkpointer=InMemorySaver())
    inputs = {"messages": [HumanMessage("What is my dog called?", id="q")]}
    if mode == "invoke":
        agent.invoke(inputs, config("t"))
    elif mode == "stream":
        list(agent.stream(inputs, config("t")))
    elif mode == "ainvoke":
        asyncio.run(agent.ainvoke(inputs, config("t")))
    else:

        async def consume() -> None:
            async for _ in agent.astream(inputs, config("t")):
                pass

        asyncio.run(consume())
    assert "My dog is called Biscuit." in model.system_texts()[0]
    index.flush()
    assert [m["id"] for m in thread_messages(index.store.chroma, "u")][:2] == ["old", "q"]
    assert index.stats()["turns"] == 2


class SlowQueries(HashEmbedder):
    """The hash embedder, slow (or failing) on one-text calls once ``armed``: a query embedding on a bad day."""

    def __init__(self, fail: bool = False) -> None:
        self.armed, self.fail = False, fail

    def embed(self, texts):
        if self.armed and len(texts) <= 2:  # a search embeds the part(s) and the whole message
            if self.fail:
                raise EmbeddingError("the embedding service answered 503 (three times)")
            threading.Event().wait(3.0)
        return super().embed(texts)


def test_a_slow_or_failing_store_never_holds_the_model(caplog):
    for fail in (False, True):
        embedder = SlowQueries(fail=fail)
        index = ContextualIndex(Store.memory(), embedder=embedder)
        index.add_messages([{"role": "user", "content": "My dog is called Biscuit."}], "u")
        model = scripted("I do not remember.")
        mw = CtxretMemoryMiddleware(index, scope="u", deadline_ms=200, write=False)
        agent = create_agent(model, middleware=[mw])
        embedder.armed = True
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="ctxret.agent_memory"):
            out = agent.invoke({"messages": [HumanMessage("What is my dog called?")]})
        assert out["messages"][-1].content == "I do not remember."
        assert model.system_texts() == [""]  # called, without memory
        expected = "recall failed" if fail else "ran out of its 200 ms"
        assert any(expected in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


# -- scope and bad input ---------------------------------------------------------------------------
def test_scope_defaults_to_the_thread_and_takes_strings_and_callables():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    agent = create_agent(scripted("a", "b"), middleware=[CtxretMemoryMiddleware(index)], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("hello")]}, config("conv-7"))
    agent2 = create_agent(scripted("c"), middleware=[CtxretMemoryMiddleware(index, scope="user-9")])
    agent2.invoke({"messages": [HumanMessage("hi")]})
    index.flush()
    assert set(index.stats()["pieces_per_thread"]) == {"conv-7", "user-9"}


def test_bad_input_gets_a_clear_error_and_nothing_is_lost():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    index.add_messages([{"role": "user", "content": "kept", "id": "k"}], "u1")
    before = snapshot(index)

    def broken(runtime):
        raise KeyError("user_id")

    agent = create_agent(
        scripted("x"), middleware=[CtxretMemoryMiddleware(index, scope=broken)], checkpointer=InMemorySaver()
    )
    with pytest.raises(InputError, match="scope callable 'broken' raised KeyError"):
        agent.invoke({"messages": [HumanMessage("hello")]}, config("t"))
    nothread = create_agent(scripted("x"), middleware=[CtxretMemoryMiddleware(index)])
    with pytest.raises(InputError, match="has no scope"):
        nothread.invoke({"messages": [HumanMessage("hello")]})
    empty = create_agent(scripted("x"), middleware=[CtxretMemoryMiddleware(index, scope=lambda runtime: "")])
    with pytest.raises(InputError, match="must return a non-empty string"):
        empty.invoke({"messages": [HumanMessage("hello")]})
    assert snapshot(index) == before
    with pytest.raises(InputError, match="ContextualIndex"):
        CtxretMemoryMiddleware(object())
    with pytest.raises(InputError, match="scope"):
        CtxretMemoryMiddleware(index, scope="")
    with pytest.raises(InputError, match="tool_calls"):
        CtxretMemoryMiddleware(index, tool_calls="weather")
    with pytest.raises(InputError, match="max_chars"):
        CtxretMemoryMiddleware(index, max_chars=0)
    with pytest.raises(InputError, match="memory's own argument"):
        CtxretMemoryMiddleware(index, search_kwargs={"thread_id": "x"})
    with pytest.raises(InputError):
        CtxretMemoryMiddleware(index, search_kwargs={"fusoin": "rrf"})


def test_agent_memory_recall_budget_and_template(local_embedder):
    index = ContextualIndex(Store.memory(), embedder=local_embedder)
    index.add_messages(
        [{"role": "user", "content": f"My dog Biscuit did trick number {i} today."} for i in range(6)], "u"
    )
    memory = AgentMemory(index, k=5, max_chars=300, template="MEMORY:\n{memory}")
    recall = memory.recall([{"role": "user", "content": "What tricks did my dog do?"}], "u")
    assert recall.text.startswith("MEMORY:\n### Part 1") and len(recall.text) <= 300 + len("MEMORY:\n")
    assert recall.groups and recall.groups[0].hits
    assert memory.recall([{"role": "assistant", "content": "no user message"}], "u").text == ""


def test_a_tool_turn_searches_memory_once_and_every_model_call_gets_it(local_embedder, monkeypatch):
    """A turn whose model calls a tool and then answers makes two model calls: the second is given the memory the
    first was, without a second search (what the turn wrote since is in the model's view, which the search leaves out
    anyway). Before: one search per model call. A new turn, even with the same words, searches again."""
    index = ContextualIndex(Store.memory(), embedder=local_embedder)
    index.add_messages([{"role": "user", "content": "I cycle to work every day, so rain means I get soaked."}], "ana")
    searches: list[str] = []
    search = index.search

    def counted(query, **kwargs):
        searches.append(query)
        return search(query, **kwargs)

    monkeypatch.setattr(index, "search", counted)
    call = {"name": "weather", "args": {"city": "Oslo"}, "id": "c1"}
    call2 = {"name": "weather", "args": {"city": "Oslo"}, "id": "c2"}
    model = scripted(AIMessage("", tool_calls=[call]), "Rain in Oslo.", AIMessage("", tool_calls=[call2]), "Rain.")
    mw = CtxretMemoryMiddleware(index, scope="ana")
    agent = create_agent(model, tools=[weather], middleware=[mw], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("Will I get wet on my way to work?")]}, config("t1"))
    assert searches == ["Will I get wet on my way to work?"]  # two model calls, one search
    first, second = model.system_texts()
    assert "I cycle to work" in first and second == first
    agent.invoke({"messages": [HumanMessage("Will I get wet on my way to work?")]}, config("t1"))
    assert len(searches) == 2  # a new turn with the same words: searched again
    assert len(model.system_texts()) == 4 and "I cycle to work" in model.system_texts()[2]
