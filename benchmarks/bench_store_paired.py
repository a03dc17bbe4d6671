"""The store's own CPU cost, this checkout against another (``--vs-code DIR``), in paired rounds.

Two workloads, each one fresh process per run, with a word-hash embedder (no model: what is timed
is the write path and the store, Chroma and the lexical file):

* ``index`` — a new embedded store, ``--threads`` chat threads of ``--turns`` turns added (two
  pieces a turn), then every thread's last turn rewritten and one thread deleted: the plan, the
  diff, the batches, the journal, Chroma, the lexical file and its copies;
* ``search`` — ``--searches`` hybrid searches on a store of ``--store-pieces`` pieces built once
  (by this checkout; the other opens the same files): half unscoped (Chroma's index, the postings,
  the copies' texts), half inside one thread (the thread cache).

Each run prints the process CPU time (``time.process_time``, every thread) of the timed part and a
digest of what it stored or found, so the two codes are checked for the same results. Rounds go
ABBA (this, other, other, this, ...); each pair's ratio is this code's CPU time over the other's;
the median ratio and a bootstrap 95% interval are printed.

    git archive main | tar -x -C /tmp/ctxret-main
    python benchmarks/bench_store_paired.py --vs-code /tmp/ctxret-main --rounds 5 --threads 20 --store-pieces 10000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = (
    "parking garage level car dentist appointment thursday lisbon flight hotel code locker gym birthday sister "
    "quote plumber release priya invoice budget meeting monday recipe garden bike repair train ticket museum "
    "password router printer vacation passport insurance doctor blood test report deadline project launch"
).split()


def _messages(thread: int, turns: int, salt: str = "") -> list[dict[str, str]]:
    rng = random.Random(f"{thread}-{salt}")
    out = []
    for t in range(turns):
        for role in ("user", "assistant"):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30)))
            out.append({"role": role, "content": f"{words} (note {thread}.{t}{salt})"})
    return out


def _embedder():
    sys.path.insert(0, str(ROOT / "tests" / "reliability"))
    from hash_embedder import HashEmbedder

    return HashEmbedder()


def run_index(folder: Path, threads: int, turns: int) -> dict:
    from ctxret import ContextualIndex

    start = time.process_time()
    index = ContextualIndex(folder, embedder=_embedder(), progress=False)
    for t in range(threads):
        index.add_messages(_messages(t, turns), f"t{t}")
    for t in range(threads):  # each thread's last turn rewritten: the stale pieces go
        msgs = _messages(t, turns)
        msgs[-2:] = _messages(t, 1, salt="x")
        index.replace_messages(msgs, f"t{t}")  # add_messages appends since Dec 4: a rewrite is explicit
    index.delete(thread_id="t0")
    cpu = time.process_time() - start
    stats = index.store.stats()
    ids = sorted(r["id"] for r in index.store.records(include=()))
    index.close()
    digest = hashlib.sha256(json.dumps([stats["pieces"], stats["turns"], ids]).encode()).hexdigest()[:16]
    return {"cpu": cpu, "digest": digest, "pieces": stats["pieces"]}


def build_store(folder: Path, pieces: int) -> None:
    from ctxret import ContextualIndex

    index = ContextualIndex(folder, embedder=_embedder(), progress=False)
    threads = max(1, pieces // 100)  # a 50-turn thread is 100 pieces (one a message)
    for t in range(threads):
        index.add_messages(_messages(t, 50), f"t{t}")
    index.close()


def run_search(folder: Path, searches: int) -> dict:
    from ctxret import ContextualIndex

    index = ContextualIndex(folder, embedder=_embedder(), progress=False)
    threads = sorted({str(r["metadata"]["thread_id"]) for r in index.store.records()})
    rng = random.Random(7)
    queries = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) for _ in range(searches)]
    scopes = [None if i % 2 == 0 else rng.choice(threads) for i in range(searches)]
    for q in queries[:5]:  # warm: the postings read, the model-free path loaded
        index.search(q)
    start = time.process_time()
    found = []
    for q, scope in zip(queries, scopes, strict=True):
        groups = index.search(q, thread_id=scope) if scope is not None else index.search(q)
        found.append([[h.id for h in g.hits] for g in groups])
    cpu = time.process_time() - start
    pieces = index.store.count()
    index.close()
    return {"cpu": cpu, "digest": hashlib.sha256(json.dumps(found).encode()).hexdigest()[:16], "pieces": pieces}


def _child(code: Path, args: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{code / 'shared'}{os.pathsep}{code}")
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", *args],
        env=env,
        capture_output=True,
        text=True,
        cwd=code,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({code}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _interval(ratios: list[float], n: int = 4000) -> tuple[float, float]:
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vs-code", type=Path, required="--child" not in sys.argv, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=8, help="ABBA rounds (two pairs each)")
    ap.add_argument("--threads", type=int, default=20)
    ap.add_argument("--turns", type=int, default=50, help="turns per thread (two pieces or more each)")
    ap.add_argument("--store-pieces", type=int, default=10_000)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--workloads", nargs="+", default=["index", "search"], choices=["index", "search"])
    ap.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, folder, *rest = args.child
        out = run_index(Path(folder), *map(int, rest)) if kind == "index" else run_search(Path(folder), int(rest[0]))
        import ctxret

        print(json.dumps({**out, "code": ctxret.__file__}))
        return
    mine, theirs = ROOT, args.vs_code.resolve()
    work = Path(tempfile.mkdtemp(prefix="ctxret-paired-"))
    try:
        if "search" in args.workloads:
            t = time.monotonic()
            build_store(work / "search-store", args.store_pieces)
            print(f"search store built in {time.monotonic() - t:.0f} s", file=sys.stderr)
        for kind in args.workloads:
            ratios, cpus = [], {"this": [], "other": []}
            digests, pieces = set(), set()
            for r in range(args.rounds):
                order = [("this", mine), ("other", theirs), ("other", theirs), ("this", mine)]
                got = {}
                for i, (who, code) in enumerate(order):
                    if kind == "index":
                        folder = work / f"index-{r}-{i}"
                        res = _child(code, ["index", str(folder), str(args.threads), str(args.turns)])
                        shutil.rmtree(folder, ignore_errors=True)
                    else:
                        res = _child(code, ["search", str(work / "search-store"), str(args.searches)])
                    assert res["code"].startswith(str(code)), (res["code"], code)  # the code meant ran
                    cpus[who].append(res["cpu"])
                    digests.add(res["digest"])
                    pieces.add(res.get("pieces"))
                    got.setdefault(who, []).append(res["cpu"])
                ratios += [got["this"][0] / got["other"][0], got["this"][1] / got["other"][1]]  # pairs (A,B), (B,A)
                print(f"{kind} round {r + 1}: this {got['this']} other {got['other']}", file=sys.stderr)
            lo, hi = _interval(ratios)
            print(
                json.dumps(
                    {
                        "workload": kind,
                        "pieces": sorted(pieces)[0],
                        "pairs": len(ratios),
                        "median_ratio": round(statistics.median(ratios), 4),
                        "interval_95": [round(lo, 4), round(hi, 4)],
                        "cpu_s_median": {k: round(statistics.median(v), 3) for k, v in cpus.items()},
                        "same_results": len(digests) == 1,
                    }
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
