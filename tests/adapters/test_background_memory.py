"""Memory in a live agent loop: writes off the model call's path and nothing lost; LlamaIndex's default wiring writes.

``CtxretMemoryMiddleware`` and ``CtxretMemoryBlock`` hand their writes to the index's background writer (the
default). With the framework's own fake models (LangChain's ``create_agent`` with ``GenericFakeChatModel``;
LlamaIndex's ``Memory`` and ``FunctionAgent`` with ``MockFunctionCallingLLM``) and a store whose writes are made slow
or failing: the agent returns before the write is stored; a recall of the scope from a new conversation sees the
exchange before it, a recall inside the conversation does not wait; a failure is logged and tried again, never raised;
a message the store refuses leaves the others stored; ``close()`` and the interpreter's exit (a script's end,
``sys.exit``, an uncaught exception, Ctrl-C) store what is pending (subprocesses, ``loop_worker.py``); a process killed
outright loses nothing with ``background=False``, and with the default what it lost comes back when the conversation
goes on. LlamaIndex: ``Memory.from_defaults`` with the block stores every exchange of every session exactly once,
with its default limits and with a limit that flushes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from agent_fakes import scripted
from ctxret import ContextualIndex, Store
from ctxret.agent_memory import AgentMemory
from ctxret.errors import StoreError
from ctxret.ingest.append import thread_messages
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from reliability.hash_embedder import HashEmbedder

from langchain_ctxret import CtxretMemoryMiddleware

HERE = Path(__file__).resolve().parent
WORKER = HERE / "loop_worker.py"


#: The threads a background write embeds on (the writer's, and the thread a write's embedding call runs in).
WRITING = ("ctxret-memory-writer", "ctxret-embed")


class GatedWrites(HashEmbedder):
    """The hash embedder; on the background writer's thread it waits for ``gate`` (a write held in flight) and may fail
    the first ``failures`` calls (a store or service having a bad minute)."""

    def __init__(self, failures: int = 0) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.failures = failures

    def embed(self, texts):
        if threading.current_thread().name in WRITING:
            assert self.gate.wait(30)
            if self.failures:
                self.failures -= 1
                raise StoreError("the store answered 503")
        return super().embed(texts)


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def stored(index: ContextualIndex, scope: str) -> list[tuple[str, str]]:
    return [(m["role"], m["content"]) for m in thread_messages(index.store.chroma, scope)]


# -- LangChain: off the path, seen by the next recall, flushed -----------------------------------------------------
def test_the_agent_returns_before_its_write_is_stored_and_a_new_conversation_recalls_it():
    embedder = GatedWrites()
    index = ContextualIndex(Store.memory(), embedder=embedder)
    model = scripted("Noted: Biscuit.", "Noted.", "Your dog is Biscuit.")
    mw = CtxretMemoryMiddleware(index, scope="ana", deadline_ms=20_000)
    agent = create_agent(model, middleware=[mw], checkpointer=InMemorySaver())
    embedder.gate.clear()  # every write waits
    agent.invoke({"messages": [HumanMessage("My dog is called Biscuit.")]}, config("c1"))
    assert mw.memory.pending == 2 and stored(index, "ana") == []  # the run is over; its write is not
    # the same conversation: everything pending is in the model's input, so the recall does not wait for it
    agent.invoke({"messages": [HumanMessage("And I live in Berlin.")]}, config("c1"))
    assert mw.memory.pending == 4 and "<memory>" not in model.system_texts()[1]
    # a new conversation of the scope: its recall waits for the writes it could miss, and finds the exchange
    threading.Timer(0.2, embedder.gate.set).start()
    agent.invoke({"messages": [HumanMessage("What is my dog called?")]}, config("c2"))
    assert "My dog is called Biscuit." in model.system_texts()[2]
    assert mw.flush(10) and mw.memory.pending == 0
    assert stored(index, "ana")[:4] == [
        ("user", "My dog is called Biscuit."),
        ("assistant", "Noted: Biscuit."),
        ("user", "And I live in Berlin."),
        ("assistant", "Noted."),
    ]


def test_a_recall_waits_at_most_half_its_deadline_and_says_so(caplog):
    embedder = GatedWrites()
    index = ContextualIndex(Store.memory(), embedder=embedder)
    memory = AgentMemory(index, deadline_ms=300)
    embedder.gate.clear()
    memory.write([{"role": "user", "content": "My dog is called Biscuit.", "id": "m1"}], "ana")
    with caplog.at_level(logging.INFO, logger="ctxret.agent_memory"):
        recall = memory.recall([{"role": "user", "content": "What is my dog called?", "id": "q"}], "ana")
    assert recall.degraded and recall.text == ""  # the write is still held: the recall went on without it
    assert any("before the scope's pending writes" in r.getMessage() for r in caplog.records)
    embedder.gate.set()
    assert memory.flush(10)
    assert "Biscuit" in memory.recall([{"role": "user", "content": "What is my dog called?", "id": "q"}], "ana").text


def test_a_recall_without_a_deadline_still_waits_a_bounded_time(monkeypatch):
    monkeypatch.setattr("ctxret.agent_memory.RECALL_WAIT_SECONDS", 0.2)
    embedder = GatedWrites()
    index = ContextualIndex(Store.memory(), embedder=embedder)
    memory = AgentMemory(index, deadline_ms=None)
    embedder.gate.clear()  # a write that never ends while the recall runs
    memory.write([{"role": "user", "content": "My dog is called Biscuit.", "id": "m1"}], "ana")
    recall = memory.recall([{"role": "user", "content": "What is my dog called?", "id": "q"}], "ana")
    assert recall.degraded and memory.pending == 1  # it went on without the write
    embedder.gate.set()
    assert memory.flush(10)


def test_a_failing_write_is_logged_and_tried_again_never_raised(caplog, monkeypatch):
    monkeypatch.setattr("ctxret.agent_memory.RETRY_FIRST_SECONDS", 0.05)
    embedder = GatedWrites(failures=3)
    index = ContextualIndex(Store.memory(), embedder=embedder)
    model = scripted("Noted.")
    agent = create_agent(model, middleware=[CtxretMemoryMiddleware(index, scope="u")], checkpointer=InMemorySaver())
    with caplog.at_level(logging.WARNING, logger="ctxret.agent_memory"):
        out = agent.invoke({"messages": [HumanMessage("My locker code is 4471.")]}, config("c"))
        assert out["messages"][-1].content == "Noted."  # the run never saw the failures
        assert index.flush(20)
    assert stored(index, "u") == [("user", "My locker code is 4471."), ("assistant", "Noted.")]
    assert any("failed (attempt 1)" in r.getMessage() and "503" in r.getMessage() for r in caplog.records)


def test_a_message_the_store_refuses_is_logged_and_the_others_are_written(caplog):
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    memory = AgentMemory(index)
    bad = {"role": "banana", "content": "x", "id": "bad"}
    good = [{"role": "user", "content": "My dog is called Biscuit.", "id": "g1"}, bad]
    good.append({"role": "assistant", "content": "Noted: Biscuit.", "id": "g2"})
    with caplog.at_level(logging.ERROR, logger="ctxret.agent_memory"):
        memory.write(good, "u")
        assert memory.flush(10)
    assert [m["id"] for m in thread_messages(index.store.chroma, "u")] == ["g1", "g2"]
    assert any("is not stored" in r.getMessage() for r in caplog.records)


def test_close_stores_what_is_pending_first(tmp_path):
    embedder = GatedWrites()
    index = ContextualIndex(tmp_path / "store", embedder=embedder)
    memory = AgentMemory(index)
    embedder.gate.clear()
    memory.write([{"role": "user", "content": "Remember the blue umbrella.", "id": "m1"}], "u")
    threading.Timer(0.2, embedder.gate.set).start()
    index.close()
    assert stored_ids(tmp_path / "store") == ["m1"]  # stored before the store was released


def test_writes_in_the_call_when_asked():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    memory = AgentMemory(index, background=False)
    result = memory.write([{"role": "user", "content": "My dog is called Biscuit.", "id": "m1"}], "u")
    assert result.added == 1 and memory.pending == 0


# -- the process ends right after a turn --------------------------------------------------------------------------
def run_worker(store: Path, *args: str, signal_to_send: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(store), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    if signal_to_send is not None:
        line = proc.stdout.readline()
        assert "turns done" in line, line + proc.stderr.read()
        pending = int(line.split(", ")[1].split()[0])
        proc.send_signal(signal_to_send)
        out, err = proc.communicate(timeout=120)
        return subprocess.CompletedProcess(proc.args, proc.returncode, line + out, err), pending
    out, err = proc.communicate(timeout=300)
    line = next(x for x in out.splitlines() if "turns done" in x)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), int(line.split(", ")[1].split()[0])


def stored_ids(store: Path, scope: str = "u") -> list[str]:
    index = ContextualIndex(store, embedder=HashEmbedder(), progress=False)
    try:
        return [m["id"] for m in thread_messages(index.store.chroma, scope)]
    finally:
        index.close()


def every(turns: int, first: int = 0) -> list[str]:
    return [x for i in range(first, first + turns) for x in (f"h{i}", f"a{i}")]


@pytest.mark.parametrize("mode", ["return", "exit", "raise", "sigint"])
def test_no_exchange_is_lost_when_the_process_ends_right_after_a_turn(tmp_path, mode):
    store = tmp_path / "store"
    if mode == "sigint":  # Ctrl-C while the writes are pending
        done, pending = run_worker(store, "4", "wait", signal_to_send=signal.SIGINT)
    else:
        done, pending = run_worker(store, "4", mode)
    assert pending > 0, done.stdout  # the process ended while writes were pending
    assert stored_ids(store) == every(4), done.stderr[-2000:]


def test_a_killed_process_loses_nothing_in_the_call_and_what_the_background_lost_comes_back(tmp_path):
    store = tmp_path / "store"
    _, pending = run_worker(store, "3", "wait", "--sync", signal_to_send=signal.SIGKILL)
    assert pending == 0 and stored_ids(store) == every(3)  # written inside each turn
    # in the background, killed outright right after the turn: the last exchange is not stored yet ...
    other = tmp_path / "other"
    _, pending = run_worker(other, "3", "wait", signal_to_send=signal.SIGKILL)
    assert pending > 0
    lost = set(every(3)) - set(stored_ids(other))
    assert lost
    # ... and the conversation going on (its state: the messages so far, then a new turn) writes it
    run_worker(other, "1", "return", "--first", "3")
    assert stored_ids(other) == every(4)


# -- LlamaIndex: Memory.from_defaults with the block writes every exchange ------------------------------------------
SESSIONS = [
    ["My dog is called Biscuit.", "ok", "I moved to Berlin in March."],
    ["ok", "My sister Ana is a pilot.", "Her plane is a red Cessna."],
    ["I changed jobs: I work at Globex now.", "ok"],
]


def reply(messages, **kwargs):
    from llama_index.core.llms import ChatMessage

    said = [m for m in messages if m.role == "user"][-1]
    return ChatMessage(role="assistant", content=f"Noted ({len(messages)}): {said.content}")


def run_sessions(index: ContextualIndex, **limits) -> list[list[tuple[str, str]]]:
    """Each session a new ``Memory`` (its own session_id) whose block writes to the user's thread; returns what each
    session's agent said, as (role, text)."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.memory import Memory

    from llamaindex_ctxret import CtxretMemoryBlock

    said: list[list[tuple[str, str]]] = []

    async def chat() -> None:
        for n, session in enumerate(SESSIONS):
            block = CtxretMemoryBlock(index=index, thread_id="ana")
            memory = Memory.from_defaults(session_id=f"session-{n}", memory_blocks=[block], **limits)
            agent = FunctionAgent(llm=MockFunctionCallingLLM(response_generator=reply), tools=[])
            for text in session:
                out = await agent.run(user_msg=text, memory=memory)
                said.append([("user", text), ("assistant", str(out.response.content))])

    asyncio.run(chat())
    return said


@pytest.mark.parametrize("limits", [{}, {"token_limit": 60, "token_flush_size": 20}], ids=["defaults", "flushing"])
def test_memory_from_defaults_stores_every_exchange_of_every_session_once(limits):
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    said = run_sessions(index, **limits)
    assert index.flush(10)
    assert stored(index, "ana") == [m for exchange in said for m in exchange]  # each once, in order; "ok" each time


def test_the_next_session_recalls_the_last_exchange_of_the_one_before():
    from llama_index.core.memory import Memory

    from llamaindex_ctxret import CtxretMemoryBlock

    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    run_sessions(index)
    block = CtxretMemoryBlock(index=index, thread_id="ana")
    memory = Memory.from_defaults(session_id="session-next", memory_blocks=[block])
    text = "\n".join(str(m.content) for m in memory.get(input="Where do I work now?"))
    assert "Globex" in text  # the previous session's last fact, never flushed by Memory


def test_every_memory_class_has_one_default_k():
    from llamaindex_ctxret import CtxretMemoryBlock

    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    block = CtxretMemoryBlock(index=index, thread_id="u")
    assert block.k is None and block.memory.k is None  # the index's default, as the middleware's
    assert CtxretMemoryMiddleware(index).memory.k is None
    assert index.settings.k == 5


class RecordingEmbedder(HashEmbedder):
    """The hash embedder, recording the texts embedded off the background writer's thread (a search's)."""

    def __init__(self) -> None:
        self.searched: list[str] = []

    def embed(self, texts):
        if threading.current_thread().name not in WRITING:
            self.searched.extend(texts)
        return super().embed(texts)


def test_the_background_writer_embeds_ahead_what_the_latest_stage_reads():
    """The ``latest`` stage (the user's latest statement first) embeds its hits' stored texts alone. Written in the
    background, an agent's memory embeds them ahead (``warm_latest``), so a recall embeds only its own message however
    large memory grows. Before: every hit the stage met for the first time was embedded inside the recall."""
    from ctxret.evaluation.agent_history import MAYA
    from ctxret.query.latest import own_vectors

    embedder = RecordingEmbedder()
    index = ContextualIndex(Store.memory(), embedder=embedder)
    memory = AgentMemory(index, deadline_ms=None)
    for messages in MAYA.messages():
        memory.write(messages, "maya")
    assert index.flush(60)
    documents = [r["document"] for r in index.store.chroma.iter_records({"thread_id": "maya"}, include=("documents",))]
    assert len(set(own_vectors(index.embedder).get(documents))) == len(set(documents))  # every stored text, ahead
    embedder.searched.clear()
    recall = memory.recall([{"role": "user", "content": "Where do I work now?", "id": "q"}], "maya")
    assert any("latest" in g.stages for g in recall.groups)  # the stage ran
    assert not set(embedder.searched) & set(documents), embedder.searched  # and embedded no stored text
    # written inside the call, nothing is embedded ahead: the stage embeds the hits it meets (as before)
    cold = ContextualIndex(Store.memory(), embedder=RecordingEmbedder())
    AgentMemory(cold, background=False).write([m for ms in MAYA.messages() for m in ms], "maya")
    assert not own_vectors(cold.embedder).get(documents)


def test_a_llamaindex_agent_turn_searches_memory_once(monkeypatch):
    """LlamaIndex's agent reads its memory when a run starts and again once it has answered: the block searches once a
    turn (the second read is given the first's memory). Before: two searches a turn."""
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    searches: list[str] = []
    asearch = index.asearch

    async def counted(query, **kwargs):
        searches.append(query)
        return await asearch(query, **kwargs)

    monkeypatch.setattr(index, "asearch", counted)
    said = run_sessions(index)
    assert len(searches) == len(said)  # one search a turn
    assert index.flush(10) and stored(index, "ana") == [m for exchange in said for m in exchange]
