"""What Chroma's own write costs, by what a piece carries: vectors, documents, metadata keys.

Indexing's overhead beyond the model (BENCHMARKS.md, "Indexing overhead") is mostly Chroma's
upsert. This times ``collection.upsert`` of ``--pieces`` pieces shaped like ``bench_scale.py``'s
(384-d unit vectors, the 12 metadata keys a chat piece gets, ``header + body`` as the document) on
a fresh embedded collection with ctxret's HNSW settings, in 500-piece calls, for each variant;
every variant once per round on a new collection, rounds interleaved; the median over rounds of
the wall time and of the process's CPU time.

    python benchmarks/bench_chroma_write.py --pieces 1245 --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scale import Corpus, chat_pieces  # noqa: E402

SLIM = ("body", "header")  # the two long keys (the document holds both)
FEW = ("thread_id", "turn_id", "parent_id", "kind")
VARIANTS = {
    "vectors": (None, False),
    "vectors + documents": (None, True),
    "vectors + 12 metadata keys": ("all", False),
    "vectors + 10 keys (no body, header)": ("slim", False),
    "vectors + 4 keys + documents": ("few", True),
    "everything (as ctxret writes)": ("all", True),
}


def pieces(n: int) -> tuple[list[str], np.ndarray, list[str], list[dict]]:
    c = Corpus(max(n, 1000), max(10, n // 100))
    docs, metas = chat_pieces(c, 0, n, np.random.default_rng(5), np.zeros(c.threads, np.int64))
    return [f"p{i:08d}" for i in range(n)], c.vectors(0, n), docs, metas


def one_write(folder: Path, data: tuple, meta_kind: str | None, with_docs: bool) -> tuple[float, float]:
    """``(wall s, CPU s)`` of the upserts (the CPU time is the whole process's: Chroma's own threads too)."""
    import chromadb
    from ctxret.storage.chroma import HNSW

    ids, vectors, docs, metas = data
    if meta_kind == "slim":
        metas = [{k: v for k, v in m.items() if k not in SLIM} for m in metas]
    elif meta_kind == "few":
        metas = [{k: m[k] for k in FEW} for m in metas]
    client = chromadb.PersistentClient(str(folder / uuid.uuid4().hex[:8]))
    col = client.create_collection(f"w{uuid.uuid4().hex[:8]}", configuration={"hnsw": dict(HNSW)})
    started, cpu = time.perf_counter(), time.process_time()
    for s in range(0, len(ids), 500):
        kw: dict = {"ids": ids[s : s + 500], "embeddings": vectors[s : s + 500]}
        if meta_kind is not None:
            kw["metadatas"] = metas[s : s + 500]
        if with_docs:
            kw["documents"] = docs[s : s + 500]
        col.upsert(**kw)
    return time.perf_counter() - started, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pieces", type=int, default=1245)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    data = pieces(args.pieces)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in VARIANTS}
    names = list(VARIANTS)
    with tempfile.TemporaryDirectory() as tmp:
        one_write(Path(tmp), data, "all", True)  # warm-up
        for r in range(args.repeat):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotated order
                times[name].append(one_write(Path(tmp), data, *VARIANTS[name]))

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    out = {
        name: {"wall_s": median([w for w, _ in ts]), "cpu_s": median([c for _, c in ts])} for name, ts in times.items()
    }
    for name, t in out.items():
        print(f"{name:40s} {t['wall_s']:.3f} s wall, {t['cpu_s']:.3f} s CPU", file=sys.stderr)
    print(json.dumps({"pieces": args.pieces, "repeat": args.repeat, "median": out}, indent=2))


if __name__ == "__main__":
    main()
