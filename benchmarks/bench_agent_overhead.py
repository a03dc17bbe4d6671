"""What ``CtxretMemoryMiddleware`` adds to an agent turn: the same ``create_agent`` turn with and without it, paired.

Two agents share everything but the middleware: LangChain's ``create_agent``, LangGraph's ``InMemorySaver``, LangChain's
fake chat model (it answers at once, so the turn's time is the agent's own plumbing plus the memory's work, the worst
case for the ratio: a real model call takes 0.5-5 s). The memory's scope is filled first with ``--turns`` exchanges
(a user's history). Then ``--rounds`` rounds of ABBA: one new turn (a user message, the model's answer) on the agent
without memory, two on the one with memory, one more without. Reported: the median wall time of each, the median of
the pairwise ratios with a bootstrap 95% interval, the time added per turn, and the searches and appends the memory
made per model call (the promise: at most one of each). ``--tools`` makes every turn a tool turn (the model calls a
tool, then answers: two model calls). The middleware writes in the background (its default; each write is done
before the next turn, off the clock); ``--in-call`` writes inside the call. ``benchmarks/bench_live_loop.py`` measures
the same as memory grows to 10,000 exchanges.

    python benchmarks/bench_agent_overhead.py --turns 500 --rounds 30
    python benchmarks/bench_agent_overhead.py --turns 500 --rounds 30 --tools
    python benchmarks/bench_agent_overhead.py --embedder hash --rounds 30   # the plumbing alone, no model
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "adapters"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def bootstrap(ratios: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=500, help="exchanges in the memory's scope first (default 500)")
    ap.add_argument("--rounds", type=int, default=30, help="ABBA rounds (default 30)")
    ap.add_argument("--tools", action="store_true", help="every turn calls a tool, then answers")
    ap.add_argument("--embedder", choices=("local", "hash"), default="local")
    ap.add_argument("--in-call", action="store_true", help="the middleware writes inside the call (background=False)")
    args = ap.parse_args()

    from agent_fakes import ScriptedChatModel
    from bench_append import WORDS, exchange
    from ctxret import ContextualIndex, Store
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_ctxret import CtxretMemoryMiddleware

    if args.embedder == "hash":
        sys.path.insert(0, str(ROOT / "tests" / "reliability"))
        from hash_embedder import HashEmbedder

        embedder: Any = HashEmbedder()
    else:
        from ctxret.embedders.local import shared_local_embedder

        embedder = shared_local_embedder()
    index = ContextualIndex(Store.memory(), embedder=embedder, progress=False)
    rng = random.Random(0)
    index.add_messages([m for n in range(args.turns) for m in exchange(rng, n)], thread_id="user-1")
    calls: Counter = Counter()
    for name in ("search", "add_messages"):
        inner = getattr(index, name)

        def wrapper(*a: Any, _inner: Any = inner, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _inner(*a, **kw)

        setattr(index, name, wrapper)

    @tool
    def lookup(topic: str) -> str:
        """Look a topic up."""
        return f"{topic}: found three notes, the latest from Monday."

    def answers() -> Any:
        n = 0
        while True:
            n += 1
            if args.tools:
                yield AIMessage("", tool_calls=[{"name": "lookup", "args": {"topic": f"note {n}"}, "id": f"c{n}"}])
            yield AIMessage(f"Here is what I found about note {n}.")

    def agent(memory: bool) -> tuple[Any, ScriptedChatModel]:
        model = ScriptedChatModel(messages=answers())
        middleware = [CtxretMemoryMiddleware(index, scope="user-1", background=not args.in_call)] if memory else []
        tools = [lookup] if args.tools else []
        return create_agent(model, tools=tools, middleware=middleware, checkpointer=InMemorySaver()), model

    (plain, _), (memory, memory_model) = agent(False), agent(True)

    def turn(a: Any, thread: str, n: int) -> float:
        text = "What did I note about the " + " ".join(rng.choice(WORDS) for _ in range(6)) + "?"
        started = time.perf_counter()
        a.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": thread}})
        took = time.perf_counter() - started
        index.flush()  # a background write is done before the next turn (a real model's seconds), off the clock
        return took

    turn(plain, "a", 0), turn(memory, "b", 0)  # warm-up
    calls.clear()
    memory_model.inputs.clear()
    without, with_, ratios = [], [], []
    for r in range(args.rounds):
        a1 = turn(plain, "a", r)
        b1 = turn(memory, "b", r)
        b2 = turn(memory, "b", r)
        a2 = turn(plain, "a", r)
        without += [a1, a2]
        with_ += [b1, b2]
        ratios.append((b1 + b2) / (a1 + a2))
    lo, hi = bootstrap(ratios)
    model_calls = len(memory_model.inputs)
    added = statistics.median(b - a for a, b in zip(without, with_, strict=True))
    print(
        f"{'tool turns' if args.tools else 'turns'}, embedder {args.embedder}, scope of {args.turns} exchanges, "
        f"{args.rounds} ABBA rounds"
    )
    print(f"  without memory: median {statistics.median(without) * 1000:.1f} ms per turn")
    print(f"  with memory:    median {statistics.median(with_) * 1000:.1f} ms per turn (+{added * 1000:.1f} ms)")
    print(f"  ratio with / without: median {statistics.median(ratios):.2f} [{lo:.2f}, {hi:.2f}]")
    print(
        f"  per model call: {calls['search'] / model_calls:.2f} searches, {calls['add_messages'] / model_calls:.2f} "
        f"appends ({model_calls} model calls)"
    )


if __name__ == "__main__":
    main()
