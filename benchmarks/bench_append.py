"""Appending one exchange to a long thread costs what appending it to an empty thread costs.

An append reads only the thread's end (its highest turn number, kept by the process once read, and its last turns),
never the whole thread, and embeds only the new messages. This benchmark fills one thread with ``--turns``
turns (default 10,000) in an embedded store, then appends one new exchange at a time, alternately to that long thread
and to a new empty thread (ABAB, ``--rounds`` pairs), and reports the median wall time of each and the median of the
pairwise ratios long / empty with a bootstrap 95% interval. ``--cold`` forgets the turn numbers the process knows
before every append (what a new process, e.g. a serverless function, meets: the number read again, from the lexical
file's index).

    python benchmarks/bench_append.py --turns 10000 --rounds 30            # the local model (the default)
    python benchmarks/bench_append.py --embedder hash --turns 10000 --cold  # the store's own cost only
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = (
    "parking garage level car dentist appointment thursday lisbon flight hotel code locker gym birthday sister "
    "quote plumber release priya invoice budget meeting monday recipe garden bike repair train ticket museum "
    "password router printer vacation passport insurance doctor blood test report deadline project launch"
).split()
T0 = datetime(2025, 1, 1, 9, 0)


def exchange(rng: random.Random, n: int) -> list[dict[str, str]]:
    at = (T0 + timedelta(minutes=n)).isoformat()
    return [
        {
            "role": role,
            "content": " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 30))) + f" (note {n})",
            "timestamp": at,
        }
        for role in ("user", "assistant")
    ]


def bootstrap(ratios: list[float], reps: int = 2000, seed: int = 0) -> tuple[float, float]:
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(reps))
    return meds[int(0.025 * reps)], meds[int(0.975 * reps) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--turns", type=int, default=10_000, help="turns of the long thread (default 10,000)")
    ap.add_argument("--rounds", type=int, default=30, help="pairs of appends (default 30)")
    ap.add_argument("--embedder", choices=("local", "hash"), default="local")
    ap.add_argument("--cold", action="store_true", help="forget the last turn number before every append")
    ap.add_argument("--store", default=None, help="the store folder (default: a temporary one)")
    args = ap.parse_args()

    from ctxret import ContextualIndex

    if args.embedder == "hash":
        sys.path.insert(0, str(ROOT / "tests" / "reliability"))
        from hash_embedder import HashEmbedder

        embedder = HashEmbedder()
    else:
        from ctxret.embedders.local import shared_local_embedder

        embedder = shared_local_embedder()
    folder = Path(args.store or tempfile.mkdtemp(prefix="ctxret-bench-append-"))
    index = ContextualIndex(folder / "store", embedder=embedder, progress=False)
    rng = random.Random(0)
    started = time.perf_counter()
    messages = [m for n in range(args.turns) for m in exchange(rng, n)]
    index.add_messages(messages, thread_id="long")
    fill = time.perf_counter() - started
    print(f"filled thread 'long' with {args.turns:,} turns ({index.store.count():,} pieces) in {fill:.0f} s")

    def append(thread: str, n: int) -> float:
        msgs = exchange(rng, n)
        if args.cold:
            index.store.heads.clear()
        t = time.perf_counter()
        result = index.add_messages(msgs, thread_id=thread)
        took = time.perf_counter() - t
        assert result.turns_changed == 1 and result.added >= 2, result
        return took

    append("long", args.turns)  # warm-up: the model and Chroma's first write
    long_t, empty_t, ratios = [], [], []
    for r in range(args.rounds):
        n = args.turns + 1 + r
        a = append("long", n)
        b = append(f"empty-{r}", n)
        long_t.append(a)
        empty_t.append(b)
        ratios.append(a / b)
    lo, hi = bootstrap(ratios)
    last = max(
        int(r["metadata"]["turn_index"])
        for r in index.store.records(scope=None)
        if r["metadata"]["thread_id"] == "long"
    )
    print(
        f"embedder {embedder.model_id}; {'cold (no remembered head)' if args.cold else 'warm'}; "
        f"{args.rounds} rounds ABAB"
    )
    print(f"append one exchange to the {args.turns:,}-turn thread: median {statistics.median(long_t) * 1e3:.1f} ms")
    print(f"append one exchange to an empty thread:            median {statistics.median(empty_t) * 1e3:.1f} ms")
    print(f"ratio long / empty: median {statistics.median(ratios):.2f} [95% {lo:.2f}, {hi:.2f}]")
    print(f"the long thread's last turn: {last} (expected {args.turns + 1 + args.rounds})")
    index.close()


if __name__ == "__main__":
    main()
