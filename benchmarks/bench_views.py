"""The cost of LLM-written views and HyDE: extra vectors, index size, indexing and query time.

The LoCoMo dev conversations (one thread each) are indexed by ``ContextualIndex`` in an embedded
store (local model) three times: without views, with question views, and with questions and
summaries — written by the harness's deterministic fake LLM (:class:`ctxret.evaluation.views.FakeLLM`:
no LLM time is counted, only ctxret's own). Then thread-scoped and unscoped searches of the dev
questions, warm (the thread cache loaded), with and without views and HyDE (the fake's answer:
what the search itself costs on top of the LLM's latency), and with ``deadline_ms``.

    python benchmarks/bench_views.py --data ../shared/data/locomo-dev --out benchmarks/results/views.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def search_scoped(index, m, **options):
    """Search message ``m`` (a ``(thread_id, text)`` pair) within its own thread."""
    return index.search(m[1], thread_id=m[0], **options)


def search_unscoped(index, m, **options):
    """Search message ``m`` (a ``(thread_id, text)`` pair) over every thread."""
    return index.search(m[1], **options)


def median_ms(fn, messages: list[str]) -> float:
    fn(messages[0])  # warm
    times = []
    for m in messages:
        t = time.perf_counter()
        fn(m)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev"))
    parser.add_argument("--queries", type=int, default=60, help="questions per conversation searched")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from ctxret import ContextualIndex
    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.datasets import load_threads
    from ctxret.evaluation.views import FakeLLM

    emb = shared_local_embedder()
    convs = load_threads(args.data)
    messages = [(c.id, q.text) for c in convs for q in c.questions[: args.queries]]
    writers = {"questions": FakeLLM.questions, "summary": FakeLLM.summary}
    out: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "configs": []}
    for views in ((), ("questions",), ("questions", "summary")):
        with tempfile.TemporaryDirectory() as tmp:
            store = Path(tmp) / "store"
            index = ContextualIndex(
                store, embedder=emb, views=list(views), view_writer={k: writers[k] for k in views} or None
            )
            t = time.perf_counter()
            for conv in convs:
                index.add_turns(conv.turns)
            index_s = time.perf_counter() - t
            stats = index.stats()
            row: dict = {
                "views": ",".join(views) or "none",
                "pieces": stats["pieces"],
                "view_vectors": stats.get("views", 0),
                "view_vectors_per_piece": stats.get("views", 0) / stats["pieces"],
                "index_seconds": round(index_s, 1),
                "store_bytes": folder_bytes(store),
            }
            scoped = partial(search_scoped, index)
            unscoped = partial(search_unscoped, index)
            row["search_ms"] = {
                "scoped": median_ms(scoped, messages),
                "scoped_hyde": median_ms(partial(scoped, hyde=FakeLLM.hyde), messages),
                "scoped_deadline_500": median_ms(partial(scoped, deadline_ms=500), messages),
                "unscoped": median_ms(unscoped, messages),
                "unscoped_hyde": median_ms(partial(unscoped, hyde=FakeLLM.hyde), messages),
            }
            if views:
                row["search_ms"]["scoped_views_off"] = median_ms(partial(scoped, views=False), messages)
                row["search_ms"]["unscoped_views_off"] = median_ms(partial(unscoped, views=False), messages)
            index.close()
        out["configs"].append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
