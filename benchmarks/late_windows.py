"""Late chunking's model windows, the layout before against the one now, paired in one run on the dev sets.

A turn or section longer than the model (254 content tokens) is read in overlapping windows, each token taking its
vector from the window where it is most central. The layout before: windows of the full width sharing 64 tokens,
the last one aligned to the text's end (a text just over one window is read almost twice). The layout now
(``ctxret.embedders.local.token_windows``): the fewest windows sharing at least ``WINDOW_OVERLAP`` (40) tokens, all
of one width. The stored vectors of such turns change; this script measures what that does to retrieval with the
product's default (late chunking at weight 0, hybrid search), both layouts on the same queries in one process:

* documents: ``ctxret eval docs`` (``ctxret.evaluation.docs.run_docs``) on a BEIR folder, each layout with its own
  index cache; nDCG@10, R@10, R@100, MRR@10 paired per query (normal and bootstrap 95% intervals);
* threads: ``ctxret eval threads`` (``run_threads``, ``hybrid_default``) on LoCoMo, paired per query (intervals,
  bootstrap within conversations).

It also counts the tokens the model reads under each layout per token of the pieces (what embedding the pieces
alone reads, ``[CLS]``/``[SEP]`` included).

    python benchmarks/late_windows.py --docs ../shared/data/scifact-dev --split train \\
        --threads ../shared/data/locomo-dev --cache /tmp/late-windows --out late_windows.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


def before_windows(n: int, content: int, overlap: int = 64) -> list[tuple[int, int]]:
    """The layout before: full-width windows with a 64-token stride gap, the last aligned to the end."""
    if n <= content:
        return [(0, n)]
    overlap = min(overlap, content // 2)
    starts = list(range(0, n - content, content - overlap)) + [n - content]
    return [(a, a + content) for a in starts]


#: ``--overlap``: the tokens neighbouring windows share in the layout now (None: the library's default).
OVERLAP: int | None = None


def embedders() -> dict[str, Any]:
    from ctxret.embedders.local import LocalEmbedder, token_windows

    class BeforeWindows(LocalEmbedder):
        """The local model reading long texts in the layout before (everything else the same)."""

        def _windows(self, n: int) -> list[tuple[int, int]]:
            return before_windows(n, self.max_tokens - 2)

    class NowWindows(LocalEmbedder):
        """The layout now with another overlap (``--overlap``)."""

        def _windows(self, n: int) -> list[tuple[int, int]]:
            return token_windows(n, self.max_tokens - 2, OVERLAP) if OVERLAP is not None else super()._windows(n)

    return {"now": NowWindows(), "before": BeforeWindows()}


def tokens_read(turn_pieces: list[list[str]], embedder: Any) -> dict[str, float]:
    """Tokens the model reads per token of the pieces read alone, under each layout."""

    alone = read_now = read_before = 0
    content = embedder.max_tokens - 2
    for texts in turn_pieces:
        counts = embedder.count_tokens(texts) if texts else []
        alone += sum(counts)
        n = sum(counts) - 2 * len(counts)
        if texts:
            read_now += sum(b - a + 2 for a, b in embedder._windows(n))
            read_before += sum(b - a + 2 for a, b in before_windows(n, content))
    return {"piece_tokens": alone, "now": read_now / alone, "before": read_before / alone}


def docs_arm(path: str, split: str, cache: Path, limit: int | None) -> dict[str, Any]:
    from ctxret import ContextualIndex
    from ctxret.evaluation.docs import METRICS, load_docs, product_documents, run_docs
    from ctxret.evaluation.stats import paired_diff, stratified_bootstrap
    from ctxret.ingest.documents import read_documents

    ds = load_docs(path, split=split)
    embs = embedders()
    probe = ContextualIndex(in_memory=True, embedder=embs["now"], progress=False)
    turns, _ = read_documents(product_documents(ds))
    read = tokens_read([[p.text for p in probe.fit_pieces(t)] for t in turns], embs["now"])
    probe.close()
    results, seconds = {}, {}
    for name, emb in embs.items():
        t0 = time.perf_counter()
        folder = cache / (f"docs-{name}" if name == "before" or OVERLAP is None else f"docs-{name}-o{OVERLAP}")
        results[name] = run_docs(ds, emb, cache_dir=str(folder), limit_queries=limit, progress=True)
        seconds[name] = round(time.perf_counter() - t0, 1)
    now, before = results["now"].per_query["hybrid_default"], results["before"].per_query["hybrid_default"]
    rows = {}
    for m in METRICS:
        rows[m] = {
            "now": sum(now[m]) / len(now[m]),
            "before": sum(before[m]) / len(before[m]),
            "diff": paired_diff(now[m], before[m]).as_dict(),
            "bootstrap": stratified_bootstrap(now[m], before[m], [0] * len(now[m])).as_dict(),
            "changed": sum(a != b for a, b in zip(now[m], before[m], strict=True)),
        }
    return {
        "source": ds.source,
        "queries": len(now["ndcg_at_10"]),
        "tokens_read": read,
        "seconds": seconds,
        "metrics": rows,
    }


def threads_arm(path: str, limit: int | None) -> dict[str, Any]:
    from ctxret.evaluation.datasets import load_threads
    from ctxret.evaluation.stats import by_query, compare
    from ctxret.ingest.pieces import fit_pieces

    convs = load_threads(path)[:limit] if limit else load_threads(path)
    embs = embedders()
    read = tokens_read([[p.text for p in fit_pieces(t, embs["now"], 600)] for c in convs for t in c.turns], embs["now"])
    from ctxret.evaluation.threads import run_threads

    by = {
        name: by_query(run_threads(convs, emb, representations=["hybrid_default"]).per_query)
        for name, emb in embs.items()
    }
    rows = []
    for qs, metric in (
        ("facts", "top1_section"),
        ("facts", "mrr"),
        ("qa", "recall"),
        ("qa", "top1_section"),
        ("qa", "mrr"),
        ("composite", "coverage"),
    ):
        mine, theirs = by["now"].get(("hybrid_default", qs)), by["before"].get(("hybrid_default", qs))
        if mine and theirs:
            paired = compare(mine, theirs, metric, changed=True)
            if paired is not None:
                rows.append({"query_set": qs, "metric": metric, **paired})
    return {"conversations": len(convs), "tokens_read": read, "rows": rows}


def fmt(d: dict[str, float]) -> str:
    return f"{100 * d['mean']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", default=str(DATA / "scifact-dev"), help="a BEIR folder ('' to skip)")
    ap.add_argument("--split", default="train")
    ap.add_argument("--threads", default=str(DATA / "locomo-dev"), help="LoCoMo files ('' to skip)")
    ap.add_argument("--cache", type=Path, required=True, help="the two document indexes are kept here")
    ap.add_argument("--limit", type=int, default=None, help="queries (docs) / conversations (threads): a quick run")
    ap.add_argument("--overlap", type=int, default=None, help="the layout now with another overlap (a variant)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    global OVERLAP
    OVERLAP = args.overlap
    out: dict[str, Any] = {"command": " ".join(sys.argv), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    if args.threads:
        out["threads"] = t = threads_arm(args.threads, args.limit)
        r = t["tokens_read"]
        print(
            f"\nthreads ({t['conversations']} conversations): tokens read per piece token {r['before']:.3f} before, "
            f"{r['now']:.3f} now"
        )
        print("| query set | metric | before | now | now − before (normal) | (bootstrap) | queries changed |")
        print("|:--|:--|--:|--:|--:|--:|--:|")
        for row in t["rows"]:
            print(
                f"| {row['query_set']} | {row['metric']} | {100 * row['peer_value']:.1f} | "
                f"{100 * row['system_value']:.1f} | {fmt(row['diff'])} | {fmt(row['bootstrap'])} | "
                f"{row['changed']} of {row['diff']['n']} |"
            )
    if args.docs:
        out["docs"] = d = docs_arm(args.docs, args.split, args.cache, args.limit)
        r = d["tokens_read"]
        print(
            f"\ndocs ({d['source']}, {d['queries']} queries): tokens read per piece token {r['before']:.3f} before, "
            f"{r['now']:.3f} now; harness seconds {d['seconds']}"
        )
        print("| metric | before | now | now − before (normal) | (bootstrap) | queries changed |")
        print("|:--|--:|--:|--:|--:|--:|")
        for m, row in d["metrics"].items():
            print(
                f"| {m} | {100 * row['before']:.1f} | {100 * row['now']:.1f} | {fmt(row['diff'])} | "
                f"{fmt(row['bootstrap'])} | {row['changed']} of {row['diff']['n']} |"
            )
    if args.out:
        args.out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
