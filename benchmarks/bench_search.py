"""Search latency and indexing overhead of ContextualIndex.

1. Query latency, excluding embedding, for an 8-part message over N stored pieces (synthetic
   clustered unit vectors, 384 dims, embedded Chroma, 100 threads): one batched Chroma query for
   all 8 parts vs 8 separate queries vs exact numpy search (brute-force cosine over all vectors).
2. Indexing overhead: ContextualIndex.add_messages (pack, label, embed, blend, upsert) vs the raw
   LocalEmbedder.embed of the same piece texts.

    python benchmarks/bench_search.py --sizes 10000 100000 --out benchmarks/results/search.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np


def _median_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _query_each_part(store, queries: np.ndarray, k: int) -> list:
    return [store.query(q[None, :], k) for q in queries]


def _exact_top_k(queries: np.ndarray, vecs: np.ndarray, k: int) -> np.ndarray:
    sims = queries @ vecs.T
    top = np.argpartition(-sims, k, axis=1)[:, :k]
    return np.take_along_axis(sims, top, 1)


def bench_query(sizes: list[int], dims: int, k: int, repeat: int, seed: int) -> list[dict]:
    from ctxret.storage.chroma import ChromaStore

    rng = np.random.default_rng(seed)
    rows = []
    for n in sizes:
        # clustered unit vectors (topics), closer to real embeddings than uniform noise
        centers = rng.standard_normal((max(10, n // 100), dims)).astype(np.float32)
        vecs = centers[rng.integers(0, len(centers), n)] + rng.standard_normal((n, dims)).astype(np.float32) * 0.8
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        with tempfile.TemporaryDirectory() as tmp:
            store = ChromaStore(Path(tmp) / "store", collection="bench")
            store.open({"model_id": "bench", "dims": dims})
            t = time.perf_counter()
            ids = [f"p{i}" for i in range(n)]
            metas = [{"thread_id": f"t{i % 100}"} for i in range(n)]
            store.upsert(ids, vecs, [""] * n, metas)
            insert_s = time.perf_counter() - t
            picked = vecs[rng.choice(n, 8, replace=False)]  # rng draws: the picks, then the noise
            queries = picked + rng.standard_normal((8, dims)).astype(np.float32) * (0.5 / np.sqrt(dims))
            queries /= np.linalg.norm(queries, axis=1, keepdims=True)
            batched = _median_ms(partial(store.query, queries, k), repeat)
            separate = _median_ms(partial(_query_each_part, store, queries, k), repeat)
            scoped = _median_ms(partial(store.query, queries, k, {"thread_id": "t7"}), repeat)
            numpy_ms = _median_ms(partial(_exact_top_k, queries, vecs, k), repeat)
            # recall of HNSW against the exact top-k
            got = store.query(queries, k)
            exact_top = np.argsort(-(queries @ vecs.T), axis=1)[:, :k]
            recall = np.mean([len({int(h[0][1:]) for h in got[i]} & set(exact_top[i].tolist())) / k for i in range(8)])
        rows.append(
            {
                "pieces": n,
                "insert_s": round(insert_s, 2),
                "batched_8_parts_ms": round(batched, 2),
                "separate_8_queries_ms": round(separate, 2),
                "batched_scoped_thread_ms": round(scoped, 2),
                "exact_numpy_ms": round(numpy_ms, 2),
                "separate_over_batched": round(separate / batched, 2),
                "hnsw_recall_at_k": round(float(recall), 3),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def bench_indexing(repeat_threads: int) -> dict:
    from ctxret import ContextualIndex
    from ctxret.embedders.local import LocalEmbedder
    from ctxret.ingest.messages import turns_from_messages
    from ctxret.ingest.pieces import fit_pieces

    data = Path(__file__).resolve().parents[1] / "shared" / "ctxret" / "data" / "demo_threads.jsonl"
    threads = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    embedder = LocalEmbedder()
    work = [(f"{t['thread_id']}-{r}", t["messages"]) for r in range(repeat_threads) for t in threads]
    # make each copy's text distinct so nothing is de-duplicated
    work = [(tid, [{**m, "content": f"{m.get('content') or ''} (copy {tid})"} for m in msgs]) for tid, msgs in work]
    per_thread = [
        [p.text for t in turns_from_messages(msgs, tid) for p in fit_pieces(t, embedder, 600)] for tid, msgs in work
    ]
    texts = [x for batch in per_thread for x in batch]
    embedder.embed(texts[:32])  # warm-up
    t = time.perf_counter()
    embedder.embed(texts)
    raw_all = time.perf_counter() - t
    t = time.perf_counter()
    for batch in per_thread:  # the same calls add_messages makes: one embed per thread
        embedder.embed(batch)
    raw = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        index = ContextualIndex(Path(tmp) / "store", embedder=embedder, progress=False, lexical=False)
        t = time.perf_counter()
        for tid, msgs in work:
            index.add_messages(msgs, thread_id=tid)
        full = time.perf_counter() - t
        n = index.store.count()
        t = time.perf_counter()
        for tid, msgs in work:
            index.add_messages(msgs, thread_id=tid)
        again = time.perf_counter() - t
    row = {
        "pieces": n,
        "raw_embed_all_at_once_s": round(raw_all, 2),
        "raw_embed_s": round(raw, 2),
        "add_messages_s": round(full, 2),
        "overhead_ratio": round(full / raw, 3),
        "re_add_unchanged_s": round(again, 2),
    }
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--dims", type=int, default=384)
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--index-copies", type=int, default=20, help="copies of the demo threads to index")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="benchmarks/results/search.json")
    args = ap.parse_args()
    query_rows = bench_query(args.sizes, args.dims, args.k, args.repeat, args.seed)
    index_row = bench_indexing(args.index_copies)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"query": query_rows, "indexing": index_row, "python": platform.python_version()}, indent=2)
    )
    print(
        "\n| pieces | 1 batched query, 8 parts (ms) | 8 separate queries (ms) | ratio "
        "| batched + thread filter (ms) | exact numpy (ms) | HNSW recall@k |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in query_rows:
        print(
            f"| {r['pieces']:,} | {r['batched_8_parts_ms']} | {r['separate_8_queries_ms']} "
            f"| {r['separate_over_batched']}× | "
            f"{r['batched_scoped_thread_ms']} | {r['exact_numpy_ms']} | {r['hnsw_recall_at_k']} |"
        )
    r = index_row
    print(
        f"\nindexing {r['pieces']:,} pieces thread by thread: raw embed of the same batches {r['raw_embed_s']} s "
        f"(all at once: {r['raw_embed_all_at_once_s']} s), add_messages {r['add_messages_s']} s "
        f"(overhead ×{r['overhead_ratio']}), re-adding unchanged threads {r['re_add_unchanged_s']} s"
    )


if __name__ == "__main__":
    main()
