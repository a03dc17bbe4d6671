"""Own-vector recall of a store's HNSW graph: is every stored piece found by its own vector?

Queries ``--queries`` random pieces of a store built by ``bench_scale.py`` (collection ``scale``)
with their own stored vector, unscoped, top 10, in batches of 100, and counts the pieces missing
from their own results. An unscoped search can only return what the graph reaches, so a miss is a
piece that no search finds by its nearest neighbour. Thread-scoped searches do not depend on it
(they search the thread's vectors exactly).

    python benchmarks/bench_scale.py --pieces 1000000 --threads 10000 --dir /tmp/scale1m
    python benchmarks/bench_recall.py /tmp/scale1m/store --queries 2000
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", help="the store folder bench_scale.py built (its `store` subfolder)")
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()
    import chromadb

    col = chromadb.PersistentClient(path=args.store).get_collection("scale")
    total = col.count()
    picks = np.random.default_rng(args.seed).choice(total, size=min(args.queries, total), replace=False)
    got = col.get(ids=[f"p{i:08d}" for i in picks], include=["embeddings"])
    vectors = np.asarray(got["embeddings"], dtype=np.float32)
    misses = 0
    started = time.perf_counter()
    for s in range(0, len(vectors), 100):
        res = col.query(query_embeddings=vectors[s : s + 100], n_results=10, include=["distances"])
        misses += sum(want not in found for want, found in zip(got["ids"][s : s + 100], res["ids"], strict=True))
    per_vector = (time.perf_counter() - started) * 1000 / len(vectors)
    hnsw = (col.configuration_json or {}).get("hnsw", {})
    out = {"pieces": total, "queried": len(vectors), "misses": misses, "ms_per_vector": round(per_vector, 2),
           "hnsw": {k: hnsw.get(k) for k in ("max_neighbors", "ef_construction", "ef_search")}}  # fmt: skip
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
