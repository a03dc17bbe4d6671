"""What answers_first and latest_first cost a search: paired rounds in one process, on and off.

A LoCoMo conversation is written to an in-memory ``ContextualIndex`` with the local model (late chunking, the
default) as a chat (its first speaker the user, the other the assistant), its QA questions are embedded once, and
each round runs every question as a thread-scoped search from its query vectors (the product's loop,
``query.deadline.run_search`` with ``QueryVectors``: the query's embedding is not timed; the ``latest`` stage's
embedding of hits' own texts is, as it is part of the search) twice — with the defaults and with
``answers_first=False, latest_first=False`` — in ABBA order. Each round's ratio is the process CPU time of the
defaults over the time with both off; the median ratio and a bootstrap 95% interval are printed, with the share of
questions whose hits differ (the two steps change rankings: that is their job). The ``latest`` stage remembers the
own-text vectors it embedded (``query.latest.own_vectors``): "on" is timed cold (forgotten before each search, as for
memories met for the first time) and "warm" with them remembered (each search asked once before, untimed: an agent
asking about the same memories again).
Then the wall time per search as a user sees it (``index.search`` of the message, its embedding included), 3 rounds
alternating cold, warm and off, and how many questions ran the ``latest`` stage. ``--unscoped`` searches without a
thread (the store's Chroma index: an asking part's candidates' metadata is read).

    python benchmarks/bench_ranking.py ../shared/data/locomo-dev/30.json --rounds 6
    python benchmarks/bench_ranking.py ../shared/data/locomo-dev/30.json --rounds 6 --user-first

``--user-first`` compares the defaults with ``user_first=False`` instead: the cost of the latest stage's agent-memory
step alone (the chat has an assistant, so it runs for every question that asks, not for an earlier state).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("conversation", type=Path, help="a LoCoMo conversation file")
    ap.add_argument("--rounds", type=int, default=6, help="ABBA rounds (two pairs each)")
    ap.add_argument("--questions", type=int, default=None, help="the first N questions (default: all)")
    ap.add_argument("--unscoped", action="store_true", help="search without a thread scope")
    ap.add_argument(
        "--user-first",
        action="store_true",
        help="'off' is user_first=False (the agent-memory step of the latest stage alone), not both steps off",
    )
    args = ap.parse_args()

    from ctxret import ContextualIndex
    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.datasets import load_locomo
    from ctxret.query.deadline import run_search
    from ctxret.query.executor import QueryVectors
    from ctxret.query.latest import own_vectors
    from ctxret.storage.schema import Scope

    conv = load_locomo(args.conversation)
    index = ContextualIndex(in_memory=True, embedder=shared_local_embedder())
    first = conv.turns[0].sources[0].name
    messages = [
        {
            "role": "user" if s.name == first else "assistant",
            "content": f"{s.name}: {s.text}",
            "timestamp": t.timestamp.isoformat() if t.timestamp else None,
        }
        for t in conv.turns
        for s in t.sources
    ]  # one speaker as the user, the other as the assistant: a reply follows its question in a turn
    index.add_messages(messages, thread_id=conv.id)
    questions = [q.text for q in conv.questions[: args.questions]]
    vectors = [index.query_vectors(q) for q in questions]
    scope = Scope(None if args.unscoped else conv.id)
    plans = {
        "on": index.plan(k=5),
        "warm": index.plan(k=5),
        "off": index.plan(k=5, user_first=False)
        if args.user_first
        else index.plan(k=5, answers_first=False, latest_first=False),
    }
    off_options = {"user_first": False} if args.user_first else {"latest_first": False}
    memo = own_vectors(index.embedder)
    assert memo is not None

    def run(name: str) -> tuple[float, list]:
        plan, hits = plans[name], []
        if name == "warm":  # every hit's text embedded once, untimed
            for p, v in vectors:
                run_search(plan, QueryVectors(p, v), scope, index.embedder, index.store)
        start = time.process_time()
        for p, v in vectors:
            if name == "on":
                memo.clear()  # cold: memories met for the first time
            hits.append(
                [h.id for g in run_search(plan, QueryVectors(p, v), scope, index.embedder, index.store) for h in g]
            )
        return time.process_time() - start, hits

    run("on"), run("warm"), run("off")  # warm: the thread cache, the postings
    ratios, warm_ratios, on_hits, off_hits = [], [], None, None
    for r in range(args.rounds):
        order = ("on", "warm", "off", "off", "warm", "on") if r % 2 == 0 else ("off", "warm", "on", "on", "warm", "off")
        cpu: dict[str, list[float]] = {"on": [], "warm": [], "off": []}
        for name in order:
            t, hits = run(name)
            cpu[name].append(t)
            if name == "on":
                on_hits = hits
            elif name == "off":
                off_hits = hits
        ratios.append(sum(cpu["on"]) / sum(cpu["off"]))
        warm_ratios.append(sum(cpu["warm"]) / sum(cpu["off"]))
        print(
            f"round {r + 1}: on {sum(cpu['on']) / 2:.3f}s warm {sum(cpu['warm']) / 2:.3f}s off "
            f"{sum(cpu['off']) / 2:.3f}s ratio {ratios[-1]:.3f} warm {warm_ratios[-1]:.3f}",
            file=sys.stderr,
            flush=True,
        )
    # wall per search as a user sees it: the message embedded, then searched; cold, warm and off alternating
    wall: dict[str, list[float]] = {"on": [], "warm": [], "off": []}
    ran = 0
    for r in range(3):
        for q in questions:
            for name in ("on", "warm", "off") if r % 2 == 0 else ("off", "warm", "on"):
                if name == "on":
                    memo.clear()
                elif name == "warm":  # the same search asked before: its hits' texts embedded already
                    index.search(q, k=5, thread_id=None if args.unscoped else conv.id)
                start = time.perf_counter()
                groups = index.search(
                    q, k=5, thread_id=None if args.unscoped else conv.id, **(off_options if name == "off" else {})
                )
                wall[name].append(time.perf_counter() - start)
                ran += r == 0 and name == "on" and any("latest" in g.stages for g in groups)
    for name, ts in wall.items():
        ts.sort()
        print(
            f"wall per search {name}: median {1e3 * statistics.median(ts):.1f} ms, mean "
            f"{1e3 * statistics.mean(ts):.1f} ms, p90 {1e3 * ts[int(0.9 * len(ts))]:.1f} ms",
            file=sys.stderr,
        )
    print(f"the latest stage ran for {ran}/{len(questions)} questions", file=sys.stderr)
    rng = random.Random(0)
    boots = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    warm_boots = sorted(statistics.median(rng.choices(warm_ratios, k=len(warm_ratios))) for _ in range(2000))
    changed = sum(a != b for a, b in zip(on_hits or [], off_hits or [], strict=True))
    n = len(questions)
    print(
        f"{conv.id}: {n} questions, {len(index.store.thread_ids())} thread(s), "
        f"{'unscoped' if args.unscoped else 'thread-scoped'}; CPU per search on/off "
        f"{statistics.median(ratios):.3f} [{boots[50]:.3f}, {boots[1949]:.3f}], warm/off "
        f"{statistics.median(warm_ratios):.3f} [{warm_boots[50]:.3f}, {warm_boots[1949]:.3f}] "
        f"over {args.rounds} ABBA rounds; "
        f"hits differ for {changed}/{n} questions"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
