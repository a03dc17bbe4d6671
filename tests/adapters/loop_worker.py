"""A subprocess for the background-write tests: an agent's turns on an embedded store, then an exit of one kind.

    python loop_worker.py STORE TURNS MODE [--sync] [--first N]

``TURNS`` turns of ``create_agent`` with ``CtxretMemoryMiddleware(index, scope="u")`` and LangChain's fake chat model
(messages with ids ``h<i>`` / ``a<i>``). The writes are made slow (0.3 s each, in the background writer only), so
writes are pending when the turns end; the worker then prints ``turns done, <n> messages pending`` and ends by
``MODE``: ``return`` (the script ends), ``exit`` (``sys.exit(0)``), ``raise`` (an uncaught exception), ``wait``
(sleeps: the test sends a signal). ``--sync``: ``background=False``. ``--first N``: the turns start at N, and the
agent's state is the conversation so far (turns 0..N-1) plus the new turn: what resuming the conversation from a
checkpointer gives the middleware.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "reliability")]

from agent_fakes import scripted  # noqa: E402
from ctxret import ContextualIndex  # noqa: E402
from hash_embedder import HashEmbedder  # noqa: E402
from langchain.agents import create_agent  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from langchain_ctxret import CtxretMemoryMiddleware  # noqa: E402


class SlowWrites(HashEmbedder):
    """The hash embedder, 0.3 s slower on the background writer's thread (a write still pending at the exit)."""

    def embed(self, texts):
        if threading.current_thread().name in ("ctxret-memory-writer", "ctxret-embed"):  # a write's embedding
            time.sleep(0.3)
        return super().embed(texts)


def said(i: int) -> tuple[HumanMessage, AIMessage]:
    return (
        HumanMessage(f"Note {i}: the locker code for gym visit {i} is {1000 + i}.", id=f"h{i}"),
        AIMessage(f"Noted: locker code {1000 + i} for visit {i}.", id=f"a{i}"),
    )


def main() -> None:
    store, turns, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    first = int(sys.argv[sys.argv.index("--first") + 1]) if "--first" in sys.argv else 0
    index = ContextualIndex(store, embedder=SlowWrites(), progress=False)
    memory = CtxretMemoryMiddleware(index, scope="u", background="--sync" not in sys.argv)
    answers = [said(i)[1] for i in range(first, first + turns)]
    agent = create_agent(scripted(*answers), middleware=[memory], checkpointer=InMemorySaver())
    before = [m for i in range(first) for m in said(i)]  # the conversation so far, as a checkpointer holds it
    for n, i in enumerate(range(first, first + turns)):
        sent = [*before, said(i)[0]] if n == 0 else [said(i)[0]]
        agent.invoke({"messages": sent}, {"configurable": {"thread_id": "c"}})
    print(f"turns done, {memory.memory.pending} messages pending", flush=True)
    if mode == "exit":
        sys.exit(0)
    if mode == "raise":
        raise RuntimeError("the agent's process fails right after a turn")
    if mode == "wait":
        time.sleep(120)


if __name__ == "__main__":
    main()
