"""Memory you can trust under faults: appends with kills on a Chroma server, kills during rewrites, searches beside
rewrites. Three parts, each with what it counts (every count should be 0 but the totals):

``appends`` — ``--writers`` processes (default 3) append to one thread of a Chroma server (``chroma run``, started
here) as an agent writes memory: each exchange is two calls, the question, then the reply alone (message ids, no
times). Meanwhile ``--kills`` times (default 60) a random writer is killed with SIGKILL at a random moment of a call
(up to ``--kill-within`` seconds after it starts) and started again; a restarted writer sends its interrupted call
again (a reply whose question an earlier process sent goes with its question, known by its id, as an at-least-once
queue delivers the exchange again). At the end every writer finishes its exchanges and the thread is
read: messages **lost** (an exchange a writer finished, not stored), **duplicated** (a message in two turns, or
twice), **misattached** replies (not in their question's turn), **out of order** (a writer's exchanges not in the
order it sent them); calls that **failed** (an error other than the kill); the longest call (no call may wait for a
killed writer longer than the claims' takeover, 60 s: :mod:`ctxret.storage.claims`), and the turn numbers left
unused by killed claims.

``rewrites`` — ``--rewrite-kills`` times (default 20) a process rewrites a 12-turn thread of an embedded folder to 6
new turns (``replace_messages``) and is killed at a random step of the write (``CTXRET_FAULT_AT``, a point drawn at
random among the write's steps); the folder is opened again (which repairs) and the thread read: **mixed** threads
(turns of both versions, or the new turns beside old ones) must be 0.

``rewrites-server`` — the same kills on a Chroma server (the rewriting process on the hashing embedder, 3 pieces a
Chroma call): what a kill leaves (``mixed_as_left``: a server has no local journal, so nothing is repaired on open),
then after the repair the thread's next writer runs first (``PieceStore.repair_thread``, from the write's
announcement in the claims collection): **mixed** must be 0; and whether the call sent again ends whole.

``searches`` — ``--searches`` unscoped searches (default 1,000) beside a thread rewritten without pause between 12
turns of one version and 6 of another, in one process on an embedded folder: answers **empty** of that thread and
answers **mixing** its two versions.

    python benchmarks/bench_faults.py                       # all three parts
    python benchmarks/bench_faults.py --parts appends --kills 60 --writers 3
    python benchmarks/bench_faults.py --parts searches --searches 1000

The writers and the searches use the hashing embedder (``tests/reliability/hash_embedder.py``; what is measured is
the store, not the model); the rewrites' process uses the local model (what ``tests/reliability/faults_worker.py``
runs). Results: printed, and written as JSON to ``benchmarks/results/faults-<part>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
RESULTS = ROOT / "benchmarks" / "results"
THREAD = "shared"


def message(writer: int, n: int, role: str) -> dict[str, str]:
    if role == "user":
        text = f"writer {writer} question {n}: what is the status of task {writer}-{n}?"
    else:
        text = f"writer {writer} answer {n}: task {writer}-{n} is done and reviewed."
    return {"role": role, "content": text, "id": f"w{writer}-{n}-{'q' if role == 'user' else 'a'}"}


# -- part 1: appends with kills ---------------------------------------------------------------------------------
def writer_main(host: str, port: int, collection: str, writer: int, exchanges: int, log: str) -> None:
    """One writer process: its exchanges in order, each as two calls; a call interrupted by a kill sent again."""
    sys.path.insert(0, str(TESTS / "reliability"))
    from ctxret import ContextualIndex, Store
    from hash_embedder import HashEmbedder

    done: set[tuple[int, str]] = set()  # by the processes before this one (killed)
    if os.path.exists(log):
        for line in Path(log).read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("ok"):
                done.add((rec["n"], rec["part"]))
    index = ContextualIndex(Store.server(host, port, collection=collection), embedder=HashEmbedder(), progress=False)
    with open(log, "a", encoding="utf-8") as out:

        def note(rec: dict) -> None:
            out.write(json.dumps(rec) + "\n")
            out.flush()
            os.fsync(out.fileno())

        for n in range(exchanges):
            for part in ("q", "a"):
                if (n, part) in done:
                    continue
                msgs = [message(writer, n, "user" if part == "q" else "assistant")]
                if part == "a" and (n, "q") in done:  # its question was sent by the process before a kill: the
                    msgs.insert(0, message(writer, n, "user"))  # reply goes with it (known by its id: not added)
                while True:
                    note({"n": n, "part": part, "start": time.time(), "pid": os.getpid()})
                    t0 = time.monotonic()
                    try:
                        index.add_messages(msgs, thread_id=THREAD)
                    except Exception as e:  # noqa: BLE001  # counted: the call is sent again
                        note(
                            {
                                "n": n,
                                "part": part,
                                "error": f"{type(e).__name__}: {e}"[:500],
                                "secs": time.monotonic() - t0,
                            }
                        )
                        continue
                    note({"n": n, "part": part, "ok": True, "secs": time.monotonic() - t0})
                    break
    index.close()


def run_appends(args: argparse.Namespace, work: Path) -> dict:
    sys.path.insert(0, str(TESTS))
    from chroma_server import run_chroma

    rng = random.Random(args.seed)
    collection = f"faults-{rng.randrange(16**8):08x}"
    logs = [work / f"writer-{w}.jsonl" for w in range(args.writers)]

    def start(w: int) -> subprocess.Popen:
        return subprocess.Popen(
            [
                sys.executable,
                __file__,
                "_writer",
                server.host,
                str(server.port),
                collection,
                str(w),
                str(args.exchanges),
                str(logs[w]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(work / f"writer-{w}.err", "ab"),  # noqa: SIM115
        )

    t_start = time.monotonic()
    with run_chroma(work / "chroma") as server:
        procs = [start(w) for w in range(args.writers)]
        kills = 0
        while kills < args.kills:
            w = rng.randrange(args.writers)
            if procs[w].poll() is not None:  # it finished all its exchanges: another one
                if all(p.poll() is not None for p in procs):
                    break
                continue
            size = logs[w].stat().st_size if logs[w].exists() else 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and procs[w].poll() is None:  # until it starts its next call
                if logs[w].exists() and logs[w].stat().st_size > size:
                    break
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, args.kill_within))  # then at a random moment of that call (or just after)
            if procs[w].poll() is not None:
                continue
            procs[w].send_signal(signal.SIGKILL)
            procs[w].wait()
            kills += 1
            procs[w] = start(w)
        for w, p in enumerate(procs):  # no more kills: every writer finishes
            if p.wait(timeout=3600) != 0:
                raise SystemExit(f"writer {w} failed; see {work / f'writer-{w}.err'}")
        elapsed = time.monotonic() - t_start
        return {**check_appends(server, collection, args, logs), "kills": kills, "seconds": round(elapsed)}


def check_appends(server, collection: str, args: argparse.Namespace, logs: list[Path]) -> dict:
    sys.path.insert(0, str(TESTS / "reliability"))
    from ctxret import ContextualIndex, Store
    from hash_embedder import HashEmbedder

    index = ContextualIndex(
        Store.server(server.host, server.port, collection=collection), embedder=HashEmbedder(), progress=False
    )
    where: dict[str, set[int]] = {}
    copies: Counter[tuple[int, str]] = Counter()
    for rec in index.store.records():
        m = rec["metadata"]
        if m["thread_id"] != THREAD:
            continue
        key = str(m.get("message_key", ""))[3:]
        where.setdefault(key, set()).add(int(m["turn_index"]))
        copies[(int(m["turn_index"]), key)] += 1
    claims_left = index.store.backend.count(index.store.claims.collection())
    index.close()
    lost = duplicated = misattached = disorder = 0
    for w in range(args.writers):
        turns = []
        for n in range(args.exchanges):
            q, a = f"w{w}-{n}-q", f"w{w}-{n}-a"
            lost += (q not in where) + (a not in where)
            duplicated += (len(where.get(q, ())) > 1) + (len(where.get(a, ())) > 1)
            if q in where and a in where and where[q] != where[a]:
                misattached += 1
            if q in where:
                turns.append(min(where[q]))
        disorder += sum(1 for x, y in zip(turns, turns[1:], strict=False) if y <= x)
    duplicated += sum(1 for c in copies.values() if c > 1)
    secs, failed, errors = [], 0, Counter()
    for log in logs:
        for line in log.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec.get("ok"):
                secs.append(rec["secs"])
            elif "error" in rec:
                failed += 1
                errors[rec["error"][:120]] += 1
    numbers = sorted({t for ts in where.values() for t in ts})
    secs.sort()
    return {
        "writers": args.writers,
        "exchanges_per_writer": args.exchanges,
        "messages": 2 * args.writers * args.exchanges,
        "lost": lost,
        "duplicated": duplicated,
        "misattached": misattached,
        "out_of_order": disorder,
        "failed_calls": failed,
        "errors": dict(errors.most_common(5)),
        "calls": len(secs),
        "call_p50_s": round(secs[len(secs) // 2], 3) if secs else None,
        "call_p99_s": round(secs[int(len(secs) * 0.99)], 3) if secs else None,
        "call_max_s": round(secs[-1], 3) if secs else None,
        "turns": len(numbers),
        "unused_numbers": (numbers[-1] - len(numbers)) if numbers else 0,
        "claims_left": claims_left,
    }


# -- part 2: kills during rewrites ------------------------------------------------------------------------------
REWRITE_POINTS = (
    "write:before-chroma",
    "write:between-upserts",
    "write:after-upsert",
    "delete:between-chunks",
    "write:after-stale-delete",
    "write:after-lexical",
)
VERSION = re.compile(r"\bv(\d) turn (\d+):")


def rewriter_main(host: str, port: int, collection: str, op: str) -> None:
    """A process rewriting (or first writing) thread ``long`` on a Chroma server (``CTXRET_FAULT_AT`` kills it)."""
    sys.path.insert(0, str(TESTS / "reliability"))
    from ctxret import ContextualIndex, Store
    from hash_embedder import HashEmbedder

    index = ContextualIndex(Store.server(host, port, collection=collection), embedder=HashEmbedder(), progress=False)
    index.store.chroma.max_batch = 3  # several Chroma calls per write: a kill can fall between two of them
    if op == "long":
        index.add_messages(long_thread(0, 12), thread_id="long")
    else:
        index.replace_messages(long_thread(1, 6), thread_id="long")
    index.close()


def thread_versions(index) -> dict[int, set[str]]:
    versions: dict[int, set[str]] = {}
    for r in index.store.records(include=("documents", "metadatas")):
        if r["metadata"]["thread_id"] == "long":
            versions.setdefault(int(r["metadata"]["turn_index"]), set()).update(
                m.group(1) for m in VERSION.finditer(r["document"])
            )
    return versions


def outcome_of(versions: dict[int, set[str]]) -> str:
    if versions == {t: {"0"} for t in range(1, 13)}:
        return "old"
    if versions == {t: {"1"} for t in range(1, 7)}:
        return "new"
    return "mixed"


def run_rewrites_server(args: argparse.Namespace, work: Path) -> dict:
    """The same kills on a Chroma server, where no crash repair runs (another process may have written since): what a
    kill leaves until the thread is written again."""
    sys.path.insert(0, str(TESTS))
    sys.path.insert(0, str(TESTS / "reliability"))
    from chroma_server import run_chroma
    from ctxret import ContextualIndex, Store
    from hash_embedder import HashEmbedder

    rng = random.Random(args.seed + 3)
    env = {**os.environ}
    env.pop("CTXRET_FAULT_AT", None)
    outcomes: Counter[str] = Counter()
    per_point: dict[str, Counter[str]] = {}
    healed = left_mixed = 0
    with run_chroma(work / "chroma") as server:
        for i in range(args.rewrite_kills):
            point = rng.choice(REWRITE_POINTS)
            collection = f"rewrite-{i}"
            base = [sys.executable, __file__, "_rewriter", server.host, str(server.port), collection]
            subprocess.run([*base, "long"], env=env, check=True, capture_output=True)
            proc = subprocess.run([*base, "replace"], env={**env, "CTXRET_FAULT_AT": point}, capture_output=True)
            if proc.returncode != -signal.SIGKILL:
                raise SystemExit(f"the rewrite did not reach {point}: {proc.stderr[-800:]!r}")
            store = Store.server(server.host, server.port, collection=collection)
            with ContextualIndex(store, embedder=HashEmbedder(), progress=False) as index:
                left = outcome_of(thread_versions(index))  # as the kill left it: no repair has run yet
                index.store.repair_thread("long")  # what the thread's next writer does first
                outcome = outcome_of(thread_versions(index))
                index.replace_messages(long_thread(1, 6), thread_id="long")  # the call again
                healed += outcome_of(thread_versions(index)) == "new"
            left_mixed += left == "mixed"
            outcomes[outcome] += 1
            per_point.setdefault(point, Counter())[outcome] += 1
    return {
        "kills": args.rewrite_kills,
        "mixed_as_left": left_mixed,
        "mixed": outcomes["mixed"],
        "old": outcomes["old"],
        "new": outcomes["new"],
        "whole_after_the_call_again": healed,
        "by_point": {p: dict(c) for p, c in sorted(per_point.items())},
    }


def run_rewrites(args: argparse.Namespace, work: Path) -> dict:
    from ctxret import ContextualIndex

    worker = TESTS / "reliability" / "faults_worker.py"
    rng = random.Random(args.seed + 1)
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("CTXRET_FAULT_AT", None)
    base = work / "long"
    subprocess.run([sys.executable, str(worker), str(base), "long"], env=env, check=True, capture_output=True)
    outcomes: Counter[str] = Counter()
    per_point: dict[str, Counter[str]] = {}
    mixed = 0
    for i in range(args.rewrite_kills):
        point = rng.choice(REWRITE_POINTS)
        store = work / f"rewrite-{i}"
        shutil.copytree(base, store)
        proc = subprocess.run(
            [sys.executable, str(worker), str(store), "replace"],
            env={**env, "CTXRET_FAULT_AT": point},
            capture_output=True,
            text=True,
        )
        if proc.returncode != -signal.SIGKILL:
            raise SystemExit(f"the rewrite did not reach {point}: {proc.stderr[-800:]}")
        with ContextualIndex(store, progress=False) as index:  # opening repairs (the worker's local model)
            outcome = outcome_of(thread_versions(index))
        mixed += outcome == "mixed"
        outcomes[outcome] += 1
        per_point.setdefault(point, Counter())[outcome] += 1
        shutil.rmtree(store, ignore_errors=True)
    return {
        "kills": args.rewrite_kills,
        "mixed": mixed,
        "old": outcomes["old"],
        "new": outcomes["new"],
        "by_point": {p: dict(c) for p, c in sorted(per_point.items())},
    }


# -- part 3: searches beside rewrites ---------------------------------------------------------------------------
def long_thread(version: int, turns: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"v{version} turn {i}: the deploy window of week {i} is {version + i} o'clock."}
        for i in range(1, turns + 1)
    ]


def run_searches(args: argparse.Namespace, work: Path) -> dict:
    sys.path.insert(0, str(TESTS / "reliability"))
    from ctxret import ContextualIndex
    from hash_embedder import HashEmbedder

    index = ContextualIndex(work / "searches", embedder=HashEmbedder(), progress=False)
    index.add_messages(long_thread(0, 12), thread_id="long")
    for t in range(3):
        index.add_messages(long_thread(5 + t, 3), thread_id=f"other-{t}")
    stop = threading.Event()
    rewrites = [0]

    def rewriter() -> None:
        while not stop.is_set():
            rewrites[0] += 1
            n = rewrites[0]
            index.replace_messages(long_thread(n % 2, 6 if n % 2 else 12), thread_id="long")

    writer = threading.Thread(target=rewriter)
    writer.start()
    empty = mixed = 0
    kinds: Counter[str] = Counter()
    rng = random.Random(args.seed + 2)
    t0 = time.monotonic()
    try:
        for i in range(args.searches):
            parents = i % 4 == 3
            words = rng.sample(["deploy", "window", "week", "turn", "o'clock"], 3)
            groups = index.search(" ".join(words), k=40, score_threshold=None, parents=parents)
            found: set[str] = set()
            for g in groups:
                for h in g.hits:
                    if h.metadata.get("thread_id") == "long":
                        found.update(m.group(1) for m in VERSION.finditer(h.text + (h.parent_text or "")))
            empty += not found
            mixed += len(found) > 1
            kinds["parents" if parents else "plain"] += 1
    finally:
        stop.set()
        writer.join()
    elapsed = time.monotonic() - t0
    index.close()
    return {
        "searches": args.searches,
        "empty": empty,
        "mixed": mixed,
        "rewrites_beside": rewrites[0],
        "kinds": dict(kinds),
        "seconds": round(elapsed, 1),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_writer":
        host, port, collection, writer, exchanges, log = sys.argv[2:8]
        writer_main(host, int(port), collection, int(writer), int(exchanges), log)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_rewriter":
        host, port, collection, op = sys.argv[2:6]
        rewriter_main(host, int(port), collection, op)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="appends,rewrites,rewrites-server,searches", help="which parts, comma-separated")
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--exchanges", type=int, default=40, help="exchanges per writer (default 40)")
    ap.add_argument("--kills", type=int, default=60)
    ap.add_argument(
        "--kill-within", type=float, default=0.5, help="a kill falls this many seconds at most after a call starts"
    )
    ap.add_argument("--rewrite-kills", type=int, default=20)
    ap.add_argument("--searches", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    import ctxret

    print(f"ctxret from {Path(ctxret.__file__).parent}")
    runs = {
        "appends": run_appends,
        "rewrites": run_rewrites,
        "rewrites-server": run_rewrites_server,
        "searches": run_searches,
    }
    for part in [p.strip() for p in args.parts.split(",") if p.strip()]:
        work = Path(tempfile.mkdtemp(prefix=f"ctxret-faults-{part}-"))
        try:
            out = runs[part](args, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        print(f"{part}: {json.dumps(out)}")
        (RESULTS / f"faults-{part}.json").write_text(json.dumps(out, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
