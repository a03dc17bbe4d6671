"""Memory in a live agent loop: the cost of a turn as memory grows to 10,000 exchanges in one scope, and its RSS.

An agent lives with one user: each exchange is one turn (a user message in, the model's reply out), a new conversation
every ``--conversation`` exchanges (25), all in one memory scope (the user's), on an embedded store (a folder) with
the local model. Two agents, each on its own store:

* **langchain**: ``create_agent`` with ``CtxretMemoryMiddleware(index, scope="user-1")`` and LangChain's fake chat
  model (``GenericFakeChatModel``: it answers at once, so a turn's time is the agent's plumbing plus memory);
* **llamaindex**: a ``FunctionAgent`` with LlamaIndex's ``MockFunctionCallingLLM``, its ``Memory.from_defaults``
  (default limits) holding ``CtxretMemoryBlock(index=index, thread_id="user-1")``.

Writes run in the background (the default). Between turns the writer is drained outside the clock (the user reading
the answer, or a real model's seconds: the write is done by the next turn); ``--no-gap`` runs the turns back to back.

At each checkpoint (``--exchanges``, default 100,1000,10000) the last ``--window`` turns (50) are probe turns: the
same probe messages at every checkpoint, so the recall at 100 and at 10,000 exchanges is paired per probe. Reported
per checkpoint: the recall (the memory's search, as the middleware or block calls it) p50 and p95, split into its
embedding (the model's time inside the recall) and the search itself (the rest); the turn's time; RSS and the thread
cache (rows held, estimated bytes); then the paired ratios 10,000 / 100 (median of the per-probe ratios with a
bootstrap 95% interval). Then, at the last checkpoint, ``--rounds`` rounds of the turn with background writes, with
writes in the call (``background=False``) and without memory, interleaved: what memory adds to the critical path.

    python benchmarks/bench_live_loop.py                                  # both agents, 100 / 1,000 / 10,000
    python benchmarks/bench_live_loop.py --agents langchain --exchanges 100,1000 --json out.json
    python benchmarks/bench_live_loop.py --embedder hash                   # the store's and the agent's own cost only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

WRITER_THREADS = ("ctxret-memory-writer", "ctxret-embed")


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))] if s else float("nan")


def bootstrap(ratios: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


class Clock:
    """What one recall costs: its wall time, and the embedding calls made during it off the writer's threads."""

    def __init__(self, embedder: Any) -> None:
        self.in_recall = False
        self.embed_s = 0.0
        self.recalls: list[tuple[float, float, bool]] = []  # (seconds, embedding seconds, degraded)
        self.embeds = 0
        self._lock = threading.Lock()
        inner = embedder.embed

        def embed(texts: Any) -> Any:
            t = time.perf_counter()
            try:
                return inner(texts)
            finally:
                if self.in_recall and threading.current_thread().name not in WRITER_THREADS:
                    with self._lock:
                        self.embed_s += time.perf_counter() - t
                        self.embeds += 1

        embedder.embed = embed  # the instance's own: every path of the index calls it

    def patch(self) -> None:
        from ctxret.agent_memory import AgentMemory

        clock = self
        sync, asynchronous = AgentMemory.recall, AgentMemory.arecall

        def recall(self: Any, *a: Any, **kw: Any) -> Any:
            clock.start()
            t = time.perf_counter()
            out = sync(self, *a, **kw)
            clock.stop(time.perf_counter() - t, out.degraded)
            return out

        async def arecall(self: Any, *a: Any, **kw: Any) -> Any:
            clock.start()
            t = time.perf_counter()
            out = await asynchronous(self, *a, **kw)
            clock.stop(time.perf_counter() - t, out.degraded)
            return out

        AgentMemory.recall, AgentMemory.arecall = recall, arecall  # type: ignore[method-assign]

    def start(self) -> None:
        with self._lock:
            self.in_recall, self.embed_s = True, 0.0

    def stop(self, seconds: float, degraded: bool) -> None:
        with self._lock:
            self.in_recall = False
            self.recalls.append((seconds, self.embed_s, degraded))


def said(rng: random.Random, n: int) -> tuple[str, str]:
    from bench_append import WORDS

    user = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 30))) + f" (note {n})"
    reply = "Noted: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))) + f" (note {n})."
    return user, reply


def probe(i: int) -> str:
    from bench_append import WORDS

    rng = random.Random(10_000 + i)
    return "What did I note about the " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) + "?"


# -- the two agents --------------------------------------------------------------------------------------------------
class LangChainAgent:
    name = "langchain"

    def __init__(self, index: Any, replies: list[str]) -> None:
        from langchain.agents import create_agent
        from langchain.agents.middleware import AgentMiddleware
        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage
        from langgraph.checkpoint.memory import InMemorySaver

        from langchain_ctxret import CtxretMemoryMiddleware

        def model() -> Any:  # LangChain's fake chat model (it keeps no record of its inputs)
            return GenericFakeChatModel(messages=iter(AIMessage(r) for r in _forever(replies)))

        class Hooks(AgentMiddleware):  # the middleware's hooks doing nothing: what LangGraph's nodes cost
            def wrap_model_call(self, request: Any, handler: Any) -> Any:
                return handler(request)

            def after_model(self, state: Any, runtime: Any) -> None:
                return None

            def after_agent(self, state: Any, runtime: Any) -> None:
                return None

        self.middleware = CtxretMemoryMiddleware(index, scope="user-1")
        self.memory = self.middleware.memory
        self.savers = [InMemorySaver() for _ in range(3)]
        self.agents = {
            "memory": create_agent(model(), middleware=[self.middleware], checkpointer=self.savers[0]),
            "none": create_agent(model(), checkpointer=self.savers[1]),
            "hooks": create_agent(model(), middleware=[Hooks()], checkpointer=self.savers[2]),
        }
        self.conversation = -1

    def set_background(self, on: bool) -> None:
        self.memory.background = on

    def turn(self, text: str, conversation: int, *, memory: bool | str = True) -> float:
        from langchain_core.messages import HumanMessage

        if conversation != self.conversation:  # a conversation over: its checkpoints go (a database keeps them)
            for saver in self.savers:
                saver.delete_thread(f"conv-{self.conversation}")
            self.conversation = conversation
        agent = self.agents["memory" if memory is True else "none" if memory is False else memory]
        t = time.perf_counter()
        agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": f"conv-{conversation}"}})
        return time.perf_counter() - t


class LlamaIndexAgent:
    name = "llamaindex"

    def __init__(self, index: Any, replies: list[str]) -> None:
        from llama_index.core.agent.workflow import FunctionAgent
        from llama_index.core.llms import ChatMessage
        from llama_index.core.llms.mock import MockFunctionCallingLLM

        from llamaindex_ctxret import CtxretMemoryBlock

        answers = _forever(replies)

        def reply(messages: Any, **kwargs: Any) -> Any:
            return ChatMessage(role="assistant", content=next(answers))

        self.index = index
        self.agent = FunctionAgent(llm=MockFunctionCallingLLM(response_generator=reply), tools=[])
        self.block_type = CtxretMemoryBlock
        self.memories: dict[tuple[int, bool], Any] = {}
        self.background = True
        self.memory = CtxretMemoryBlock(index=index, thread_id="user-1").memory
        self.loop = asyncio.new_event_loop()

    def set_background(self, on: bool) -> None:
        self.background = on
        self.memory.background = on

    def _memory(self, conversation: int, memory: bool | str) -> Any:
        from llama_index.core.memory import BaseMemoryBlock, Memory

        class Idle(BaseMemoryBlock[str]):  # a block doing nothing: what Memory's block machinery costs
            name: str = "idle"

            async def _aget(self, messages: Any = None, **kwargs: Any) -> str:
                return ""

            async def _aput(self, messages: Any) -> None:
                return None

        key = (conversation, memory)
        if key not in self.memories:
            if any(c != conversation for c, _ in self.memories):
                self.memories.clear()  # a conversation over: a new Memory, as a new session has
            block = self.block_type(index=self.index, thread_id="user-1", background=self.background)
            blocks = [block] if memory is True else [Idle()] if memory == "hooks" else []
            self.memories[key] = Memory.from_defaults(session_id=f"conv-{conversation}-{memory}", memory_blocks=blocks)
            if memory is True:
                self.memory = blocks[0].memory
        return self.memories[key]

    def turn(self, text: str, conversation: int, *, memory: bool | str = True) -> float:
        mem = self._memory(conversation, memory)

        async def run() -> float:  # the workflow starts inside the running loop
            t = time.perf_counter()
            await self.agent.run(user_msg=text, memory=mem)
            return time.perf_counter() - t

        return self.loop.run_until_complete(run())


def _forever(items: list[str]) -> Any:
    while True:
        yield from items


# -- one agent's run -------------------------------------------------------------------------------------------------
def run_agent(kind: str, args: argparse.Namespace, embedder: Any, clock: Clock) -> dict[str, Any]:
    from ctxret import ContextualIndex

    folder = Path(args.store or tempfile.mkdtemp(prefix="ctxret-live-loop-")) / kind
    index = ContextualIndex(folder, embedder=embedder, progress=False)
    rng = random.Random(0)
    checkpoints = sorted(int(x) for x in args.exchanges.split(","))
    total = checkpoints[-1]
    exchanges = [said(rng, n) for n in range(total + args.rounds * 3 + 2)]
    replies = [r for _, r in exchanges]
    agent: Any = (LangChainAgent if kind == "langchain" else LlamaIndexAgent)(index, replies)
    started = time.perf_counter()
    rss0 = rss_mb()
    out: dict[str, Any] = {"agent": kind, "store": str(folder), "rss_start_mb": round(rss0, 1), "checkpoints": []}
    print(f"[{kind}] store {folder}; RSS at start {rss0:.0f} MB", flush=True)
    window: list[dict[str, float]] = []
    n = 0
    for checkpoint in checkpoints:
        while n < checkpoint:
            probe_index = n - (checkpoint - args.window)
            text = probe(probe_index) if probe_index >= 0 else exchanges[n][0]
            before = len(clock.recalls)
            turn_s = agent.turn(text, n // args.conversation)
            if not args.no_gap:
                agent.memory.flush()  # the user reading the answer: the write is done before the next turn
            recalls = clock.recalls[before:]
            if probe_index >= 0:
                window.append(
                    {
                        "turn_ms": turn_s * 1e3,
                        "recall_ms": sum(r[0] for r in recalls) * 1e3,
                        "embed_ms": sum(r[1] for r in recalls) * 1e3,
                        "recalls": len(recalls),
                        "degraded": sum(r[2] for r in recalls),
                    }
                )
            n += 1
            if n % 500 == 0:
                print(
                    f"[{kind}] {n:,} exchanges, {time.perf_counter() - started:.0f} s, RSS {rss_mb():.0f} MB",
                    flush=True,
                )
        agent.memory.flush()
        cache = index.store.cache
        point = summarize(window)
        point.update(
            exchanges=checkpoint,
            pieces=index.store.count(),
            rss_mb=round(rss_mb(), 1),
            cache_rows=cache.size,
            cache_mb=round(cache.nbytes() / 2**20, 1),
            cache_loads=cache.loads,
            per_probe=window,
        )
        out["checkpoints"].append(point)
        report(kind, point)
        window = []
    out["critical_path"] = critical_path(agent, args, n, total)
    out["seconds"] = round(time.perf_counter() - started, 1)
    out["ratios"] = ratios(out["checkpoints"])
    index.close()
    return out


def summarize(window: list[dict[str, float]]) -> dict[str, Any]:
    rec = [w["recall_ms"] for w in window]
    emb = [w["embed_ms"] for w in window]
    search = [w["recall_ms"] - w["embed_ms"] for w in window]
    turn = [w["turn_ms"] for w in window]
    return {
        "recall_p50": pct(rec, 0.5),
        "recall_p95": pct(rec, 0.95),
        "embed_p50": pct(emb, 0.5),
        "embed_p95": pct(emb, 0.95),
        "search_p50": pct(search, 0.5),
        "search_p95": pct(search, 0.95),
        "turn_p50": pct(turn, 0.5),
        "turn_p95": pct(turn, 0.95),
        "recalls_per_turn": statistics.mean(w["recalls"] for w in window) if window else 0.0,
        "degraded": sum(w["degraded"] for w in window),
    }


def report(kind: str, p: dict[str, Any]) -> None:
    print(
        f"[{kind}] at {p['exchanges']:,} exchanges ({p['pieces']:,} pieces): recall p50 {p['recall_p50']:.1f} / p95 "
        f"{p['recall_p95']:.1f} ms (embedding {p['embed_p50']:.1f} / {p['embed_p95']:.1f}, search {p['search_p50']:.1f}"
        f" / {p['search_p95']:.1f}); turn p50 {p['turn_p50']:.1f} / p95 {p['turn_p95']:.1f} ms; "
        f"{p['recalls_per_turn']:.1f} recalls a turn, {p['degraded']} degraded; RSS {p['rss_mb']:.0f} MB, cache "
        f"{p['cache_rows']:,} rows ~{p['cache_mb']:.0f} MB, {p['cache_loads']} thread read(s)",
        flush=True,
    )


def ratios(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The last checkpoint against the first: per-quantile ratios, and per probe (paired) with a 95% interval."""
    first, last = points[0], points[-1]
    out: dict[str, Any] = {"from": first["exchanges"], "to": last["exchanges"]}
    for key in ("recall", "search", "embed", "turn"):
        for q in ("p50", "p95"):
            out[f"{key}_{q}"] = last[f"{key}_{q}"] / first[f"{key}_{q}"] if first[f"{key}_{q}"] else float("nan")
    pairs = [
        b["recall_ms"] / a["recall_ms"]
        for a, b in zip(first["per_probe"], last["per_probe"], strict=False)
        if a["recall_ms"] > 0
    ]
    if pairs:
        out["recall_per_probe_median"] = statistics.median(pairs)
        out["recall_per_probe_ci"] = bootstrap(pairs)
    if len(points) > 1 and last["exchanges"] > points[-2]["exchanges"]:
        a, b = points[-2], last
        out["rss_mb_per_1000"] = (b["rss_mb"] - a["rss_mb"]) / (b["exchanges"] - a["exchanges"]) * 1000
        out["cache_mb_per_1000"] = (b["cache_mb"] - a["cache_mb"]) / (b["exchanges"] - a["exchanges"]) * 1000
    return out


def critical_path(agent: Any, args: argparse.Namespace, n: int, at: int) -> dict[str, Any]:
    """Rounds of a turn without memory, with background writes, with writes in the call: the time each takes, and
    the recall of the memory turns (what background writes should cost at most)."""
    times: dict[str, list[float]] = {"none": [], "hooks": [], "background": [], "in_call": []}
    recalls: list[float] = []
    clock = CLOCK
    for r in range(args.rounds):
        order = ["none", "hooks", "background", "in_call"]
        order = order if r % 2 == 0 else order[::-1]
        for how in order:
            text = probe(1_000 + 4 * r + order.index(how))
            agent.set_background(how != "in_call")
            before = len(clock.recalls)
            memory = {"none": False, "hooks": "hooks"}.get(how, True)
            t = agent.turn(text, n // args.conversation, memory=memory)
            agent.memory.flush()
            n += 1
            times[how].append(t * 1e3)
            if how == "background":  # a turn's recall: every read of memory it made (a later one reuses the first)
                recalls.append(sum(x[0] for x in clock.recalls[before:]) * 1e3)
    agent.set_background(True)
    out: dict[str, Any] = {k: {"p50": pct(v, 0.5), "p95": pct(v, 0.95)} for k, v in times.items()}
    out["recall_p50"] = pct(recalls, 0.5)

    def added(how: str, base: str) -> float:
        return statistics.median(b - a for a, b in zip(times[base], times[how], strict=True))

    out["hooks_added_p50"] = added("hooks", "none")
    out["background_added_p50"] = added("background", "hooks")
    out["in_call_added_p50"] = added("in_call", "hooks")
    out["at_exchanges"] = at
    print(
        f"[{agent.name}] critical path at {at:,} exchanges ({args.rounds} rounds ABCD/DCBA), turn p50: without memory "
        f"{out['none']['p50']:.1f} ms; the hooks alone {out['hooks']['p50']:.1f} ms (+{out['hooks_added_p50']:.1f}); "
        f"background writes {out['background']['p50']:.1f} ms (+{out['background_added_p50']:.1f} over the hooks; "
        f"the recalls {out['recall_p50']:.1f}); writes in the call {out['in_call']['p50']:.1f} ms "
        f"(+{out['in_call_added_p50']:.1f})",
        flush=True,
    )
    return out


CLOCK: Clock


def main() -> None:
    global CLOCK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", default="langchain,llamaindex", help="langchain, llamaindex or both (default)")
    ap.add_argument("--exchanges", default="100,1000,10000", help="the checkpoints (default 100,1000,10000)")
    ap.add_argument("--window", type=int, default=50, help="probe turns before each checkpoint (default 50)")
    ap.add_argument("--conversation", type=int, default=25, help="exchanges per conversation (default 25)")
    ap.add_argument("--rounds", type=int, default=30, help="critical-path rounds at the end (default 30)")
    ap.add_argument("--no-gap", action="store_true", help="turns back to back (the writer not drained between)")
    ap.add_argument("--embedder", choices=("local", "hash"), default="local")
    ap.add_argument("--store", default=None, help="the folder for the stores (default: a temporary one)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    if args.embedder == "hash":
        sys.path.insert(0, str(ROOT / "tests" / "reliability"))
        from hash_embedder import HashEmbedder

        embedder: Any = HashEmbedder()
    else:
        from ctxret.embedders.local import shared_local_embedder

        embedder = shared_local_embedder()
        embedder.embed(["warm the model up"])
    CLOCK = Clock(embedder)
    CLOCK.patch()
    results = []
    for kind in args.agents.split(","):
        results.append(run_agent(kind.strip(), args, embedder, CLOCK))
        r = results[-1]["ratios"]
        print(
            f"[{kind}] {r['to']:,} / {r['from']:,} exchanges: recall p50 x{r['recall_p50']:.2f}, p95 "
            f"x{r['recall_p95']:.2f} (per probe: median x{r.get('recall_per_probe_median', float('nan')):.2f} "
            f"[{', '.join(f'{x:.2f}' for x in r.get('recall_per_probe_ci', (float('nan'),) * 2))}]); search p50 "
            f"x{r['search_p50']:.2f}, p95 x{r['search_p95']:.2f}; embedding p50 x{r['embed_p50']:.2f}; RSS "
            f"{r.get('rss_mb_per_1000', float('nan')):+.1f} MB per 1,000 exchanges (cache "
            f"{r.get('cache_mb_per_1000', float('nan')):+.1f} MB)",
            flush=True,
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"args": vars(args), "results": results}, indent=1))


if __name__ == "__main__":
    main()
