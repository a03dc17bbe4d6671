"""Recall of a store's HNSW graph, and what ``ef_search`` trades for speed.

Two measures on a store built by ``bench_scale.py`` (collection ``scale``), unscoped:

* **own-vector misses**: ``--queries`` random pieces queried with their own stored vector, top
  10, in batches of 100; a miss is a piece missing from its own results, i.e. one the graph does
  not reach from its nearest neighbour (no unscoped search can return it);
* **top-50 recall** (``--exact N``): ``N`` query vectors made as ``bench_scale.py`` makes its
  8-part messages (noisy vectors near a thread's topics), searched for 50 candidates (what hybrid
  search asks per part), against the exact top 50 over every stored vector (numpy); also the
  median time of an 8-vector query and how far above the exact 50th a missed piece's cosine is.

``--ef-search 200 100 64`` measures each setting in a fresh process (Chroma reads ``ef_search``
when it loads the index) and puts the collection's own setting back afterwards.

    python benchmarks/bench_scale.py --pieces 1000000 --threads 10000 --dir /tmp/scale1m
    python benchmarks/bench_recall.py /tmp/scale1m/store --queries 2000
    python benchmarks/bench_recall.py /tmp/scale100k/store --exact 400 --ef-search 200 100 64
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _collection(store: str):
    import chromadb

    return chromadb.PersistentClient(path=store).get_collection("scale")


def own_vector_misses(col, queries: int, seed: int) -> dict:
    total = col.count()
    picks = np.random.default_rng(seed).choice(total, size=min(queries, total), replace=False)
    got = col.get(ids=[f"p{i:08d}" for i in picks], include=["embeddings"])
    vectors = np.asarray(got["embeddings"], dtype=np.float32)
    misses = 0
    started = time.perf_counter()
    for s in range(0, len(vectors), 100):
        res = col.query(query_embeddings=vectors[s : s + 100], n_results=10, include=["distances"])
        misses += sum(want not in found for want, found in zip(got["ids"][s : s + 100], res["ids"], strict=True))
    per_vector = (time.perf_counter() - started) * 1000 / len(vectors)
    return {"queried": len(vectors), "misses": misses, "ms_per_vector": round(per_vector, 2)}


def exact_top(col, queries: np.ndarray, n: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``n`` ids and cosines of each query over every stored vector."""
    ids: list[str] = []
    best = np.full((len(queries), 0), -2.0, np.float32)
    best_ids = np.zeros((len(queries), 0), np.int64)
    offset = 0
    while True:
        page = col.get(limit=20_000, offset=offset, include=["embeddings"])
        if not page["ids"]:
            break
        v = np.asarray(page["embeddings"], dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        scores = np.concatenate([best, queries @ v.T], axis=1)
        where = np.concatenate([best_ids, np.arange(len(ids), len(ids) + len(v))[None, :].repeat(len(queries), 0)], 1)
        top = np.argpartition(-scores, n - 1, axis=1)[:, :n] if scores.shape[1] > n else np.argsort(-scores, axis=1)
        best, best_ids = np.take_along_axis(scores, top, 1), np.take_along_axis(where, top, 1)
        ids.extend(page["ids"])
        offset += len(page["ids"])
    order = np.argsort(-best, axis=1)
    return np.asarray(ids)[np.take_along_axis(best_ids, order, 1)], np.take_along_axis(best, order, 1)


def top50_recall(col, store: str, n_queries: int, seed: int) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_scale

    total = col.count()
    corpus = bench_scale.Corpus(total, max(1, total // 100))
    rng = np.random.default_rng(seed)
    picks = rng.choice(corpus.threads, size=max(1, n_queries // 8), replace=False)
    q = np.concatenate([corpus.query(int(t), rng)[1] for t in picks.tolist()])
    cache = Path(store).parent / f"exact-top50-{len(q)}-{seed}.npz"  # the exact answers do not depend on ef_search
    if cache.exists():
        z = np.load(cache)
        want, cos = z["ids"], z["cos"]
    else:
        want, cos = exact_top(col, q)
        np.savez(cache, ids=want, cos=cos)
    col.query(query_embeddings=q[:8], n_results=50, include=[])
    times = []
    for s in range(0, len(q) - 7, 8):
        t0 = time.perf_counter()
        col.query(query_embeddings=q[s : s + 8], n_results=50, include=[])
        times.append((time.perf_counter() - t0) * 1000)
    got = col.query(query_embeddings=q, n_results=50, include=[])["ids"]
    found = [len(set(g) & set(w.tolist())) / 50 for g, w in zip(got, want, strict=True)]
    found10 = [len(set(g[:10]) & set(w[:10].tolist())) / 10 for g, w in zip(got, want, strict=True)]
    above = [
        float(c - cs[-1])
        for g, w, cs in zip(got, want, cos, strict=True)
        for i, c in zip(w, cs, strict=True)
        if i not in set(g)
    ]
    return {
        "queries": len(q),
        "recall_at_50": round(float(np.mean(found)), 4),
        "recall_at_10": round(float(np.mean(found10)), 4),
        "missed_cosine_above_50th_median": round(statistics.median(above), 4) if above else None,
        "query_8_vectors_ms_p50": round(statistics.median(times), 2),
    }


def measure(args: argparse.Namespace) -> dict:
    col = _collection(args.store)
    hnsw = (col.configuration_json or {}).get("hnsw", {})
    out = {"pieces": col.count(), "hnsw": {k: hnsw.get(k) for k in ("max_neighbors", "ef_construction", "ef_search")}}
    if args.queries:
        out["own_vector"] = own_vector_misses(col, args.queries, args.seed)
    if args.exact:
        out["top50"] = top50_recall(col, args.store, args.exact, args.seed)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="the store folder bench_scale.py built (its `store` subfolder)")
    ap.add_argument("--queries", type=int, default=2000, help="own-vector queries (0: skip)")
    ap.add_argument("--exact", type=int, default=0, help="query vectors for top-50 recall against exact search")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument(
        "--ef-search", type=int, nargs="*", default=None, help="settings to measure, each in a fresh process"
    )
    args = ap.parse_args()
    if not args.ef_search:
        print(json.dumps(measure(args), indent=2))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_scale

    before = bench_scale.search_width(args.store).get("ef_search")
    rows = []
    try:
        for ef in args.ef_search:
            bench_scale.search_width(args.store, ef)
            cmd = [
                sys.executable,
                __file__,
                args.store,
                "--queries",
                str(args.queries),
                "--exact",
                str(args.exact),
                "--seed",
                str(args.seed),
            ]
            rows.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    finally:
        if before is not None:
            bench_scale.search_width(args.store, before)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
