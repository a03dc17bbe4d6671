"""Unscoped hybrid search on a ``bench_scale.py`` store, and a paired comparison with other code.

One run: a fresh process opens the store, reads the lexical postings, runs ``--warmup`` then
``--searches`` unscoped 8-part searches from query vectors (the product's loop,
``query.deadline.run_search`` with ``QueryVectors``, as ``bench_scale.py`` times "excluding
embedding"; the same messages every run) and prints the p50 in ms (wall and process CPU time) and
a digest of the groups' hits (ids, texts and metadata), so two codes can be checked for the same
results.

``--vectors-from sqlite|memory`` is a what-if: the lexical hits' vectors are served from a SQLite
table (built once beside the store) or a dict of every vector instead of Chroma's read by id, to
measure what a local copy of the vectors would buy; results must not change.

``--vs-code DIR`` compares this checkout with the checkout in ``DIR`` (e.g. a ``git worktree`` of
an older commit), each timed by its own copy of this script (so each runs its own search path):
rounds alternate one fresh process of each (ABBA), each round's ratio is this code's p50 over
theirs, and the median ratio is printed. ``--ef-search A B`` sets the store's HNSW search
width for this code's runs (A) and for theirs (B) before each run, so each code runs on the width
it gives new collections; the store's width is put back afterwards. ``--their-store DIR``: a copy
of the store for the other code, when the two write different lexical file versions (each would
refill the other's on open).

    git worktree add /tmp/ctxret-old 5ec63d5
    python benchmarks/bench_unscoped.py /tmp/scale100k/store --vs-code /tmp/ctxret-old --ef-search 100 200 --rounds 5
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _local_vectors(s, store: str, where: str):
    """A ``fetch(ids, scope)`` for unscoped searches serving stored vectors from outside Chroma."""
    import sqlite3

    import numpy as np
    from ctxret.storage.base import DEFERRED

    col = s.chroma._col(None)
    table = Path(store).parent / "whatif-vectors.sqlite3"
    db = sqlite3.connect(table, check_same_thread=False)
    db.execute("CREATE TABLE IF NOT EXISTS v (id TEXT PRIMARY KEY, vec BLOB NOT NULL)")
    held: dict[str, np.ndarray] = {}
    if where == "memory" or db.execute("SELECT count(*) FROM v").fetchone()[0] != s.count():
        offset = 0
        while True:
            page = col.get(limit=20_000, offset=offset, include=["embeddings"])
            if not page["ids"]:
                break
            held.update(zip(page["ids"], np.asarray(page["embeddings"], dtype=np.float32), strict=True))
            offset += len(page["ids"])
        if where == "sqlite":
            db.execute("DELETE FROM v")
            db.executemany("INSERT INTO v VALUES (?, ?)", ((k, v.tobytes()) for k, v in held.items()))
            db.commit()
    if where == "memory":
        return lambda ids, scope: {i: ("", DEFERRED, held[i]) for i in ids if i in held}

    def from_table(ids, scope):
        out = {}
        for start in range(0, len(ids), 500):
            chunk = list(ids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for rid, blob in db.execute(f"SELECT id, vec FROM v WHERE id IN ({marks})", chunk):
                out[rid] = ("", DEFERRED, np.frombuffer(blob, dtype=np.float32))
        return out

    return from_table


def one_run(store: str, searches: int, warmup: int, seed: int, vectors_from: str = "chroma") -> dict:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_scale
    import numpy as np
    from ctxret.query.deadline import run_search
    from ctxret.query.executor import Backends, QueryVectors
    from ctxret.storage.pieces import open_piece_store
    from ctxret.storage.schema import Scope

    s = open_piece_store(Path(store), collection="scale")
    s.chroma.open(s.stored_config() or {})
    s.lexical.search("project meeting", 1)  # the postings are read into memory
    total = s.count()
    corpus = bench_scale.Corpus(total, max(1, total // 100))
    plan = bench_scale.search_plan()
    rng = np.random.default_rng(seed)
    messages = [corpus.query(int(t), rng) for t in rng.choice(corpus.threads, warmup + searches, replace=False)]
    local = _local_vectors(s, store, vectors_from) if vectors_from != "chroma" else None
    times, cpu, ids = [], [], []
    for parts, q in messages:
        t0, c0 = time.perf_counter(), time.process_time()
        dense, lexical = s.resolve(Scope())
        if local is not None:
            dense.fetch = local  # the what-if: the lexical hits' vectors from outside Chroma
        groups = run_search(plan, QueryVectors(parts, q), Scope(), None, Backends(dense, lexical))
        times.append((time.perf_counter() - t0) * 1000)
        cpu.append((time.process_time() - c0) * 1000)
        ids.append([[(h.id, h.text, dict(getattr(h, "stored", h.metadata))) for h in g.hits] for g in groups])
    s.close()
    digest = hashlib.sha256(json.dumps(ids[warmup:], sort_keys=True).encode()).hexdigest()[:16]
    return {
        "p50_ms": round(statistics.median(times[warmup:]), 2),
        "searches": searches,
        "results": digest,
        "vectors_from": vectors_from,
        "cpu_p50_ms": round(statistics.median(cpu[warmup:]), 2),
    }


def _child(code: str | None, store: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(Path(code) / "shared")
    script = Path(code) / "benchmarks" / Path(__file__).name if code is not None else Path(__file__)
    cmd = [
        sys.executable,
        str(script),
        store,
        "--searches",
        str(args.searches),
        "--warmup",
        str(args.warmup),
        "--seed",
        str(args.seed),
        "--vectors-from",
        args.vectors_from,
    ]
    return json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)


def _width(store: str, ef: str) -> int | None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_scale

    return bench_scale.search_width(store, None if ef == "keep" else int(ef)).get("ef_search")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="a store folder bench_scale.py built (its `store` subfolder)")
    ap.add_argument("--searches", type=int, default=55)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--vs-code", default=None, metavar="DIR", help="another checkout to compare with")
    ap.add_argument("--ef-search", nargs=2, default=None, metavar=("MINE", "THEIRS"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--their-store",
        default=None,
        metavar="DIR",
        help="a copy of the store for the other code (when its lexical file version differs)",
    )
    ap.add_argument("--vectors-from", choices=["chroma", "sqlite", "memory"], default="chroma")
    args = ap.parse_args()
    if args.vs_code is None:
        print(json.dumps(one_run(args.store, args.searches, args.warmup, args.seed, args.vectors_from)))
        return
    theirs_store = args.their_store or args.store
    before = {store: _width(store, "keep") for store in {args.store, theirs_store}}
    mine_ef, theirs_ef = args.ef_search or ("keep", "keep")
    rows = []
    try:
        for r in range(args.rounds):
            _width(args.store, mine_ef)
            mine = _child(None, args.store, args)
            _width(theirs_store, theirs_ef)
            theirs = _child(args.vs_code, theirs_store, args)
            rows.append({"mine": mine, "theirs": theirs, "ratio": round(mine["p50_ms"] / theirs["p50_ms"], 3)})
            print(
                f"round {r + 1}: this code {mine['p50_ms']} ms, {args.vs_code} {theirs['p50_ms']} ms, "
                f"ratio {rows[-1]['ratio']}",
                file=sys.stderr,
                flush=True,
            )
    finally:
        for store, width in before.items():
            if width is not None:
                _width(store, str(width))
    ratios = [row["ratio"] for row in rows]
    print(
        json.dumps(
            {
                "store": args.store,
                "rounds": rows,
                "median_ratio": statistics.median(ratios),
                "min_ratio": min(ratios),
                "max_ratio": max(ratios),
                "same_results_every_round": len({row["mine"]["results"] for row in rows}) == 1,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
