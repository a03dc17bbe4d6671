"""Searches with a filter on the caller's metadata, this checkout against another: results and time.

The store: ``--docs`` SciFact dev abstracts (``corpus.jsonl`` of a BEIR folder), each with caller metadata
``{"kind": <one of 4>, "team": <one of 3>}`` (``kind`` is also a name ctxret uses for its own field), written once by
this checkout into ``--store`` (reused: delete it to write it again). Each checkout then opens it and runs the first
``--queries`` claims four ways: no filter, ``kind`` (a name ctxret uses itself), ``team``, and both with ``$and``. A
checkout from before the ``ctxret:`` namespace is given the stored names (``meta_kind``): the same filter, as it had
to be written there. Printed: whether every group's ids and scores are identical, and the median wall time of a
search per filter; ``--vs-code DIR`` alternates fresh processes (ABBA: this, other, other, this, ...) and prints the
median of the per-pair ratios this / other.

    git archive main | tar -x -C /tmp/ctxret-main
    python benchmarks/bench_filters.py ../shared/data/scifact-dev --store /tmp/bench-filters --vs-code /tmp/ctxret-main
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
from typing import Any

FILTERS = {
    "none": None,
    "kind": {"kind": "claim-b"},
    "team": {"team": "ops"},
    "and": {"$and": [{"kind": {"$in": ["claim-a", "claim-b"]}}, {"team": {"$ne": "home"}}]},
}
KINDS, TEAMS = ("claim-a", "claim-b", "claim-c", "claim-d"), ("ops", "home", "lab")


def _legacy(where: Any) -> Any:
    """A filter as a checkout before the namespace needed it written: a caller's ``kind`` is stored as ``meta_kind``."""
    if isinstance(where, dict):
        return {("meta_kind" if k == "kind" else k): _legacy(v) for k, v in where.items()}
    if isinstance(where, list):
        return [_legacy(v) for v in where]
    return where


def build(folder: Path, store: Path, n: int) -> None:
    from ctxret import ContextualIndex

    docs = []
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i == n:
                break
            row = json.loads(line)
            meta = {"kind": KINDS[i % 4], "team": TEAMS[i % 3]}
            docs.append(
                {"id": str(row["_id"]), "title": row.get("title") or None, "text": row["text"], "metadata": meta}
            )
    with ContextualIndex(store, progress=False) as index:
        index.add_documents(docs)


def child(folder: Path, store: Path, queries: int, rounds: int) -> dict[str, Any]:
    from ctxret import ContextualIndex
    from ctxret.storage import schema

    legacy = not hasattr(schema, "stored_where")
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(queries), f, strict=False)]
    out: dict[str, Any] = {"legacy": legacy, "ms": {}, "digest": {}}
    with ContextualIndex(store, progress=False) as index:
        vectors = {t: index.query_vectors(t) for t in texts[:1]}  # load the model and warm the store
        del vectors
        for name, where in FILTERS.items():
            w = _legacy(where) if legacy else where
            times, results = [], []
            for _ in range(rounds):
                for t in texts:
                    start = time.perf_counter()
                    groups = index.search(t, 5, None, where=w)
                    times.append(time.perf_counter() - start)
                    results.append([[(h.id, round(h.score, 6)) for h in g.hits] for g in groups])
            out["ms"][name] = 1000 * statistics.median(times)
            out["digest"][name] = hashlib.sha256(json.dumps(results).encode()).hexdigest()[:16]
            out.setdefault("hits", {})[name] = sum(len(g) for r in results for g in r)
    return out


def _run(code: str | None, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(code) / "shared"), str(Path(code))])
    cmd = [
        sys.executable,
        __file__,
        str(args.folder),
        "--store",
        str(args.store),
        "--queries",
        str(args.queries),
        "--rounds",
        str(args.rounds),
        "--child",
    ]
    return dict(json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a BEIR folder (corpus.jsonl, queries.jsonl)")
    ap.add_argument("--store", type=Path, required=True, help="the store folder (written once, then reused)")
    ap.add_argument("--docs", type=int, default=1000, help="abstracts written (default 1000)")
    ap.add_argument("--queries", type=int, default=100, help="claims searched (default 100)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the claims per process (default 2)")
    ap.add_argument("--vs-code", default=None, metavar="DIR", help="another checkout, run in alternating processes")
    ap.add_argument("--pairs", type=int, default=2, help="ABBA pairs of processes with --vs-code (default 2)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.folder, args.store, args.queries, args.rounds)))
        return
    if not args.store.exists():
        build(args.folder, args.store, args.docs)
    if args.vs_code is None:
        print(json.dumps(_run(None, args), indent=2))
        return
    ratios: dict[str, list[float]] = {name: [] for name in FILTERS}
    runs: dict[str | None, list[dict[str, Any]]] = {None: [], args.vs_code: []}
    for p in range(args.pairs):
        order = (None, args.vs_code) if p % 2 == 0 else (args.vs_code, None)
        got = {code: _run(code, args) for code in order}
        for code, r in got.items():
            runs[code].append(r)
        for name in FILTERS:
            ratios[name].append(got[None]["ms"][name] / got[args.vs_code]["ms"][name])
    this, other = runs[None][0], runs[args.vs_code][0]
    print(f"this checkout (namespace) vs {args.vs_code} (legacy names: {other['legacy']}), {args.pairs} ABBA pairs")
    print(f"{'filter':8s} {'identical':>9s} {'hits':>6s} {'this ms':>8s} {'other ms':>9s} {'ratio':>6s}")
    for name in FILTERS:
        same = this["digest"][name] == other["digest"][name]
        a = statistics.median(r["ms"][name] for r in runs[None])
        b = statistics.median(r["ms"][name] for r in runs[args.vs_code])
        ratio = statistics.median(ratios[name])
        print(f"{name:8s} {str(same):>9s} {this['hits'][name]:6d} {a:8.2f} {b:9.2f} {ratio:6.3f}")


if __name__ == "__main__":
    main()
