"""What opening an in-memory index costs: a Chroma system of its own against the process's shared one.

``ContextualIndex(in_memory=True)`` opens its own in-memory Chroma system (``storage.chroma.memory_client``),
so that two in-memory indexes are separate stores and live beside the frameworks' in-memory Chroma. Before,
every in-memory index shared ``chromadb.EphemeralClient``'s process-wide system: after the first, opening
one only created a collection. This times, interleaved in one process (``--repeat`` rounds; the median and
90th percentile of the wall time, and the median of the process's CPU time, all its threads: the figure a
loaded machine disturbs least):

* ``shared system``: ``chromadb.EphemeralClient(settings)`` + a new collection (what ``in_memory=True`` was);
* ``own system``: ``memory_client(settings)`` + a new collection, then ``close()`` (what it is now);
* ``ContextualIndex(in_memory=True)``: the whole open (collection with its config, the lexical ``:memory:``
  file, the views hook) and ``close()``, with a small embedder (no model is loaded).

    python benchmarks/bench_memory_open.py --repeat 200
    python benchmarks/bench_memory_open.py --cases index --repeat 150                        # before / after:
    PYTHONPATH=../main/shared python benchmarks/bench_memory_open.py --cases index --repeat 150  # another tree

``--cases index`` alone is the fair before/after: with the other cases in the process, the old shared
system also holds their collections, and every open lists them all.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np


class _Embedder:
    model_id, dims, max_tokens, default_piece_bytes, default_score_threshold = "bench-8", 8, 512, 600, 0.0

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]

    def embed(self, texts):
        return np.ones((len(texts), 8), np.float32) / np.sqrt(8)

    async def aembed(self, texts):
        return self.embed(texts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--cases", default="shared,own,index", help="comma-separated: shared, own, index")
    args = ap.parse_args()
    import chromadb
    from chromadb.config import Settings
    from ctxret import ContextualIndex
    from ctxret.storage.chroma import HNSW

    try:
        from ctxret.storage.chroma import memory_client
    except ImportError:  # a tree from before in-memory stores had a system of their own
        memory_client = None

    settings = Settings(anonymized_telemetry=False)

    def shared() -> None:
        client = chromadb.EphemeralClient(settings=settings)
        client.get_or_create_collection(f"b{uuid.uuid4().hex[:12]}", configuration={"hnsw": dict(HNSW)})

    def own() -> None:
        client = memory_client(Settings(anonymized_telemetry=False))
        client.get_or_create_collection(f"b{uuid.uuid4().hex[:12]}", configuration={"hnsw": dict(HNSW)})
        client.close()

    def index() -> None:
        ContextualIndex(in_memory=True, embedder=_Embedder()).close()

    every = {
        "shared": ("shared system", shared),
        "own": ("own system", own),
        "index": ("ContextualIndex(in_memory=True)", index),
    }
    wanted = [c for c in args.cases.split(",") if c and not (c == "own" and memory_client is None)]
    cases = dict(every[c] for c in wanted)
    for fn in cases.values():  # warm up: imports, the shared system's first start
        fn()
    times: dict[str, list[float]] = {name: [] for name in cases}
    cpu: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.repeat):
        for name, fn in cases.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times[name].append((time.perf_counter() - t0) * 1000)
            cpu[name].append((time.process_time() - c0) * 1000)
    print(f"{'open':34s} {'median ms':>10s} {'p90 ms':>8s} {'CPU ms':>8s}  ({args.repeat} rounds, interleaved)")
    for name, ms in times.items():
        q = statistics.quantiles(ms, n=10)
        print(f"{name:34s} {statistics.median(ms):10.2f} {q[-1]:8.2f} {statistics.median(cpu[name]):8.2f}")


if __name__ == "__main__":
    main()
