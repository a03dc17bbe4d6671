"""Quality of this checkout against another (``--vs-code DIR``), paired per query on the harness's own sets.

Each checkout runs in its own process (``PYTHONPATH=DIR/shared`` for the other), on the same data, embedder and
seed: ``eval threads`` (``run_threads``: the given representations and query sets) and ``eval controlled``
(``run_controlled``). Each run's per-query metrics are written to ``--out`` and reused by the next call with the
same arguments (delete the file to run it again). Then every (representation, query set, metric) is paired per
query (``ctxret.evaluation.stats.compare``: mean difference, normal 95% interval, bootstrap within conversations,
the number of queries whose value changed); rows where nothing changed print as ``=``.

    git archive main | tar -x -C /tmp/ctxret-main
    python benchmarks/eval_paired.py ../shared/data/locomo-dev --vs-code /tmp/ctxret-main --out /tmp/paired
    python benchmarks/eval_paired.py ../shared/data/locomo-dev --vs-code /tmp/ctxret-main --out /tmp/paired \
        --query-sets qa --representations hybrid_default --no-controlled --distracted

``--distracted`` adds the ``distracted`` set (``ctxret.evaluation.distracted``) for ``hybrid_default``, scored by each
checkout's own splitter and search; a checkout without the module borrows this one's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = "hybrid_default,peer_bm25s,peer_ensemble_rrf,peer_query_fusion,peer_dense"
THREAD_METRICS = {"facts": ("top1_section", "mrr"), "qa": ("recall", "top1_section"), "composite": ("coverage",)}


def _child(args: argparse.Namespace) -> None:
    """Run in the checkout on ``sys.path``: write ``{"threads": [...], "controlled": [...]}`` per-query rows."""
    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.controlled import run_controlled
    from ctxret.evaluation.datasets import load_threads
    from ctxret.evaluation.threads import run_threads

    emb = shared_local_embedder()
    out: dict[str, Any] = {"code": os.path.dirname(os.path.dirname(__import__("ctxret").__file__))}
    res = run_threads(
        load_threads(args.path),
        emb,
        representations=args.representations.split(","),
        query_sets=args.query_sets.split(","),
        seed=args.seed,
        limit_queries=args.limit_queries,
    )
    out["threads"] = res.per_query
    out["threads_rows"] = res.rows
    if args.distracted:
        out["distracted"] = _distracted(args, emb)
    if not args.no_controlled:
        from importlib import resources

        fixture = str(resources.files("ctxret") / "data" / "controlled_fixture.json")
        out["controlled"] = run_controlled(fixture, emb, seed=args.seed).per_query
    Path(args.child).write_text(json.dumps(out), encoding="utf-8")


def _distracted(args: argparse.Namespace, emb: Any) -> list[dict[str, Any]]:
    """The ``distracted`` set scored for ``hybrid_default`` by the checkout's own splitter and search; a checkout
    without :mod:`ctxret.evaluation.distracted` borrows this checkout's module (the set's construction and scoring)."""
    import importlib.util

    try:
        from ctxret.evaluation import distracted
    except ImportError:
        spec = importlib.util.spec_from_file_location(
            "ctxret.evaluation.distracted", ROOT / "shared" / "ctxret" / "evaluation" / "distracted.py"
        )
        assert spec is not None and spec.loader is not None
        distracted = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = distracted
        spec.loader.exec_module(distracted)
    from ctxret.evaluation.datasets import load_threads
    from ctxret.evaluation.embedding import cached_embedder
    from ctxret.evaluation.index import ConversationIndex
    from ctxret.evaluation.representations import THREAD_REPRESENTATIONS
    from ctxret.evaluation.threads import prewarm

    emb = cached_embedder(emb)
    rows = []
    for conv in load_threads(args.path):
        made = distracted.distracted_queries(conv, args.limit_queries, args.seed)
        prewarm(emb, [t for d in made for t in (d.text, d.question.text)])
        ix = ConversationIndex(conv, emb)
        fn = THREAD_REPRESENTATIONS["hybrid_default"]
        for d in made:
            m = distracted.score_distracted(ix, fn, d, 5, emb.default_score_threshold)
            rows.append(
                {
                    "conversation": conv.id,
                    "representation": "hybrid_default",
                    "query_set": "distracted",
                    "query_id": d.id,
                    **m,
                }
            )
        ix.close()
    return rows


def _run(code: Path | None, args: argparse.Namespace, out_dir: Path) -> dict[str, Any]:
    key = json.dumps(
        [
            str(code or ROOT),
            args.path,
            args.representations,
            args.query_sets,
            args.seed,
            args.limit_queries,
            args.no_controlled,
            args.distracted,
        ]
    )
    path = out_dir / f"run-{hashlib.sha1(key.encode()).hexdigest()[:12]}.json"
    if not path.exists():
        env = dict(os.environ)
        if code is not None:
            env["PYTHONPATH"] = str(code / "shared")
        cmd = [
            sys.executable,
            __file__,
            args.path,
            "--child",
            str(path),
            "--representations",
            args.representations,
            "--query-sets",
            args.query_sets,
            "--seed",
            str(args.seed),
        ]
        if args.limit_queries:
            cmd += ["--limit-queries", str(args.limit_queries)]
        for flag in ("no_controlled", "distracted"):
            if getattr(args, flag):
                cmd.append("--" + flag.replace("_", "-"))
        print(f"running {code or ROOT} -> {path}", file=sys.stderr, flush=True)
        subprocess.run(cmd, env=env, check=True)
    return dict(json.loads(path.read_text(encoding="utf-8")))


def _pair(mine: list[dict[str, Any]], theirs: list[dict[str, Any]], keys: tuple[str, ...]) -> dict[tuple, dict]:
    def index(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, dict[str, Any]]]:
        out: dict[tuple, dict[str, dict[str, Any]]] = {}
        for r in rows:
            r = {**r, "conversation": r.get("conversation", r.get("block", ""))}
            out.setdefault(tuple(r[k] for k in keys), {})[r["query_id"]] = r
        return out

    a, b = index(mine), index(theirs)
    return {group: (a[group], b[group]) for group in a if group in b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="the threads data (a LoCoMo folder, or JSONL threads)")
    ap.add_argument("--vs-code", default=None, metavar="DIR", help="the other checkout (required unless --child)")
    ap.add_argument("--out", default="/tmp/ctxret-eval-paired", help="where per-query results are kept")
    ap.add_argument("--representations", default=PEERS)
    ap.add_argument("--query-sets", default="facts,qa,composite")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit-queries", type=int, default=None)
    ap.add_argument("--no-controlled", action="store_true", help="threads only")
    ap.add_argument("--distracted", action="store_true", help="also the distracted set (hybrid_default)")
    ap.add_argument("--other-only", action="store_true", help="run (and keep) the other checkout's results only")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    if not args.vs_code:
        ap.error("--vs-code DIR is required")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    theirs = _run(Path(args.vs_code).resolve(), args, out_dir)
    if args.other_only:
        return
    mine = _run(None, args, out_dir)
    from ctxret.evaluation.stats import compare

    print(f"this checkout ({ROOT}) against {args.vs_code}, paired per query (points; 95% intervals)\n")
    print("| representation | query set | metric | this | other | Δ (95% CI) | changed |")
    print("|:--|:--|:--|--:|--:|--:|--:|")
    for (rep, qs), (a, b) in _pair(mine["threads"], theirs["threads"], ("representation", "query_set")).items():
        for metric in THREAD_METRICS.get(qs, ()):
            c = compare(a, b, metric, changed=True)
            if c is None:
                continue
            d = c["diff"]
            delta = "=" if not c["changed"] else f"{100 * d['mean']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"
            print(
                f"| {rep} | {qs} | {metric} | {100 * c['system_value']:.1f}% | {100 * c['peer_value']:.1f}% | "
                f"{delta} | {c['changed']}/{len(a)} |"
            )
    if "distracted" in mine and "distracted" in theirs:
        print("\n| distracted (hybrid_default) | this | other | Δ (95% CI) | changed |")
        print("|:--|--:|--:|--:|--:|")
        a, b = ({r["query_id"]: r for r in run["distracted"]} for run in (mine, theirs))
        for metric in ("recall", "recall_alone", "merged", "parts"):
            c = compare(a, b, metric, changed=True)
            if c is None:
                continue
            d, scale = c["diff"], (1 if metric == "parts" else 100)
            delta = (
                "="
                if not c["changed"]
                else f"{scale * d['mean']:+.2f} [{scale * d['lo']:+.2f}, {scale * d['hi']:+.2f}]"
            )
            print(
                f"| {metric} | {scale * c['system_value']:.2f} | {scale * c['peer_value']:.2f} | {delta} | "
                f"{c['changed']}/{len(a)} |"
            )
    if "controlled" in mine and "controlled" in theirs:
        print("\n| controlled representation | condition | top-1 this | other | Δ (95% CI) | changed |")
        print("|:--|:--|--:|--:|--:|--:|")
        pairs = _pair(mine["controlled"], theirs["controlled"], ("representation", "condition"))
        for (rep, cond), (a, b) in pairs.items():
            c = compare(a, b, "top1", changed=True)
            if c is None:
                continue
            d = c["diff"]
            delta = "=" if not c["changed"] else f"{100 * d['mean']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"
            print(
                f"| {rep} | {cond} | {100 * c['system_value']:.1f}% | {100 * c['peer_value']:.1f}% | {delta} | "
                f"{c['changed']}/{len(a)} |"
            )


if __name__ == "__main__":
    main()
