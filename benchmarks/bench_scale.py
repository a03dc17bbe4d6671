"""Scale benchmark: thread-scoped and unscoped hybrid search at 100K-1M pieces, on the product's own store.

A synthetic corpus (deterministic from a seed) is written through ``PieceStore.write`` -- Chroma and
the SQLite lexical file together, exactly as indexing writes them -- and searched with the
product's search loop (``query.deadline.run_search``, what ``ContextualIndex.search`` calls: dense and
BM25 candidates per part, fusion, the floor, groups):

* ``n`` pieces in ``threads`` threads; thread sizes log-normal (sigma 0.8), so a few threads are
  several times the mean, as in real memory;
* vectors: 384-d unit vectors, clustered (``n / 100`` topic centres, 4 topics per thread, a piece =
  centre + noise, cosine to its centre ~0.78); an 8-part query message is 8 noisy vectors near the
  thread's topics;
* text: 15-30-word utterances, 70% of the words from a Zipf vocabulary whose top ranks are real
  English words (so stopwords are as frequent as in chat), 30% from the thread's own topic words;
  query parts are 12-25-word utterances of the same kind;
* metadata as ``piece_metadata`` writes it.

"Excluding embedding" times that loop from query vectors made already (``QueryVectors``: the same
stages and overlap as a product search, without ``embed``), backends resolved per search;
"including" runs it from a real 8-part message on the store itself, as ``ContextualIndex.search``
does (the local model embeds the message while the lexical side runs beside it). Reported: p50/p95 of thread-scoped
searches (the first search of a thread, which reads it from the store, and later ones), unscoped
searches, the time to open the store, its size on disk, the process RSS, and the build rate.

    python benchmarks/bench_scale.py --pieces 100000 --threads 1000
    python benchmarks/bench_scale.py --pieces 1000000 --threads 10000 --searches 40
    python benchmarks/bench_scale.py --pieces 100000 --threads 1000 --server   # through `chroma run`
    python benchmarks/bench_scale.py --pieces 100000 --threads 1000 --real ../shared/data/locomo-dev
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

DIMS = 384
COMMON = (
    "the to i you and a it of is that in for be my on have this do with not can what was we at are but so if just "
    "me your about like all get or know from think one will an as would there they how no yes go out up time when did "
    "he she want need make good day see then now some more could well work also going really people because which "
    "their them been has had thing new way here back over right only very much where even any should into first two "
    "after still last tell why help look use find give try call next week home meeting project code file data plan "
    "team email phone car house money book trip flight hotel dinner doctor appointment birthday school kids order"
).split()
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tas",
    "vel",
    "dor",
    "pi",
    "sun",
    "gar",
    "be",
    "ti",
    "no",
    "ra",
    "sel",
    "mon",
    "que",
    "bri",
    "zan",
    "ho",
    "fe",
    "lu",
    "cor",
    "din",
    "pa",
    "ve",
    "ste",
    "ar",
    "il",
    "om",
]


class Corpus:
    """Thread sizes, clustered vectors and Zipfian text (see the module docstring)."""

    def __init__(self, n: int, threads: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        sizes = rng.lognormal(0.0, 0.8, threads)
        sizes = np.maximum(1, np.round(sizes / sizes.sum() * n)).astype(np.int64)
        while sizes.sum() != n:  # fix the rounding on the largest threads
            i = int(np.argmax(sizes))
            sizes[i] += 1 if sizes.sum() < n else -1
        self.n, self.threads, self.sizes = n, threads, sizes
        self.thread_of = np.repeat(np.arange(threads, dtype=np.int64), sizes)
        n_topics = max(10, n // 100)
        self.centres = rng.standard_normal((n_topics, DIMS)).astype(np.float32)
        self.topics = rng.integers(0, n_topics, (threads, 4))
        self._seed = seed
        vocab = list(dict.fromkeys(COMMON))
        seen = set(vocab)
        vr = np.random.default_rng(seed + 1)
        while len(vocab) < 40_000:
            w = "".join(SYLLABLES[j] for j in vr.integers(0, len(SYLLABLES), vr.integers(2, 5)))
            if w not in seen:
                seen.add(w)
                vocab.append(w)
        self.vocab = np.array(vocab)
        p = np.arange(1, len(vocab) + 1, dtype=np.float64) ** -1.07
        self.cdf = np.cumsum(p / p.sum())

    def vectors(self, start: int, end: int) -> np.ndarray:
        rng = np.random.default_rng((self._seed, start))
        t = self.thread_of[start:end]
        pick = self.topics[t, rng.integers(0, 4, end - start)]
        v = self.centres[pick] + rng.standard_normal((end - start, DIMS)).astype(np.float32) * 0.8
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)

    def texts(self, threads: np.ndarray, rng: np.random.Generator, lo: int = 15, hi: int = 30) -> list[str]:
        out = []
        for t in threads.tolist():
            words = np.searchsorted(self.cdf, rng.random(int(rng.integers(lo, hi + 1))))
            topical = rng.random(len(words)) < 0.3
            own = np.random.default_rng(10_000 + t).integers(500, 20_000, 30)
            words[topical] = own[rng.integers(0, 30, int(topical.sum()))]
            out.append(" ".join(self.vocab[words].tolist()).capitalize() + ".")
        return out

    def query(self, t: int, rng: np.random.Generator, parts: int = 8) -> tuple[list[str], np.ndarray]:
        topics = self.topics[t, rng.integers(0, 4, parts)]
        q = self.centres[topics] + rng.standard_normal((parts, DIMS)).astype(np.float32)
        unit = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
        return self.texts(np.full(parts, t), rng, 12, 25), unit


def thread_name(t: int) -> str:
    return f"thread-{t:05d}"


def metadata(c: Corpus, i: int, t: int, k: int, body: str) -> dict:
    turn = k // 2
    who = "User" if k % 2 == 0 else "Assistant"
    header = f"[Turn {turn + 1} · {who}]"
    return {
        "thread_id": thread_name(t),
        "turn_id": f"{thread_name(t)}#{turn + 1}",
        "parent_id": f"{thread_name(t)}#{turn + 1}",
        "turn_index": turn + 1,
        "turn_label": f"Turn {turn + 1}",
        "kind": "turn",
        "source_kind": who.lower(),
        "source_label": who,
        "source_ordinal": k % 2,
        "ordinal": 0,
        "header": header,
        "body": body,
    }


def chat_pieces(
    c: Corpus, start: int, end: int, rng: np.random.Generator, counter: np.ndarray
) -> tuple[list[str], list[dict]]:
    """The documents and metadata of pieces ``start:end`` as a chat turn's pieces are stored
    (``counter``: pieces so far per thread, advanced here)."""
    threads = c.thread_of[start:end]
    metas = []
    for i, (t, body) in enumerate(zip(threads.tolist(), c.texts(threads, rng), strict=True)):
        metas.append(metadata(c, start + i, t, int(counter[t]), body))
        counter[t] += 1
    return [f"{m['header']}\n{m['body']}" for m in metas], metas


def build(c: Corpus, path: Path, batch: int = 5000) -> dict:
    from ctxret.config import IndexConfig
    from ctxret.storage.pieces import open_piece_store

    store = open_piece_store(path, collection="scale")
    store.open(IndexConfig(model_id="synthetic", dims=DIMS, context="mean", weight=0.8, piece_bytes=600).as_dict())
    rng = np.random.default_rng(7)
    counter = np.zeros(c.threads, np.int64)
    started = time.perf_counter()
    for s in range(0, c.n, batch):
        e = min(c.n, s + batch)
        docs, metas = chat_pieces(c, s, e, rng, counter)
        store.write([f"p{s + i:08d}" for i in range(e - s)], c.vectors(s, e), docs, metas)
        if (s // batch) % 20 == 0:
            print(f"  built {e:,}/{c.n:,} ({time.perf_counter() - started:.0f}s)", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    store.close()
    return {"pieces": c.n, "seconds": round(seconds, 1), "pieces_per_s": round(c.n / seconds, 1)}


def pct(xs: list[float]) -> dict:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]
    return {"p50": round(statistics.median(xs), 2), "p95": round(p95, 2), "n": len(xs)}


def search_timings(c: Corpus, store, searches: int, seed: int = 11) -> dict:
    from ctxret.query.deadline import run_search
    from ctxret.query.executor import QueryVectors, store_backends
    from ctxret.storage.schema import Scope

    plan = search_plan()
    rng = np.random.default_rng(seed)
    picks = rng.choice(c.threads, size=searches, replace=False)
    cold, warm, unscoped, identical = [], [], [], 0

    def run(scope: Scope, parts: list[str], q: np.ndarray) -> tuple[float, list]:
        t0 = time.perf_counter()
        groups = run_search(plan, QueryVectors(parts, q), scope, None, store_backends(store, scope))
        return (time.perf_counter() - t0) * 1000, groups

    for t in picks.tolist():
        parts, q = c.query(t, rng)
        scope = Scope(thread_name(t))
        ms, first = run(scope, parts, q)
        cold.append(ms)
        for _ in range(3):
            ms, again = run(scope, parts, q)
            warm.append(ms)
        identical += int([[h.id for h in g.hits] for g in first] == [[h.id for h in g.hits] for g in again])
    for t in picks[: max(5, searches // 4)].tolist():
        parts, q = c.query(int(t), rng)
        unscoped.append(run(Scope(), parts, q)[0])
    return {
        "scoped_first": pct(cold),
        "scoped_later": pct(warm),
        "unscoped": pct(unscoped),
        "scoped_first_equals_later": f"{identical}/{len(picks)}",
    }


MESSAGE = " ".join(
    [
        "Where did I park the car yesterday?",
        "What is the locker code at the gym?",
        "Who owns the billing service?",
        "When is the dentist appointment?",
        "Which hotel did we book in Lisbon?",
        "What did Priya say about the release?",
        "How much was the plumber's quote?",
        "Remind me of my sister's birthday.",
    ]
)


def search_with_embedding(c: Corpus, store, searches: int, seed: int = 13) -> dict:
    """The product's whole search (``run_search`` on the store, as ``ContextualIndex.search`` calls it:
    the local model embeds the 8-part message, the lexical side runs beside the embedding and the
    dense query) on the store: thread-scoped (after
    the thread's first search) and unscoped. The message is real text; the stored vectors are
    synthetic, so the hits mean nothing, but the work is the same."""
    from ctxret.embedders.local import LocalEmbedder
    from ctxret.query.deadline import run_search
    from ctxret.storage.schema import Scope

    emb = LocalEmbedder()
    plan = search_plan()
    rng = np.random.default_rng(seed)
    scoped, unscoped = [], []

    def run(scope: Scope) -> float:
        t0 = time.perf_counter()
        groups = run_search(plan, MESSAGE, scope, emb, store)
        assert len(groups) == 8
        return (time.perf_counter() - t0) * 1000

    run(Scope())
    for t in rng.choice(c.threads, size=searches, replace=False).tolist():
        run(Scope(thread_name(t)))  # the thread's first search reads it into the cache
        scoped += [run(Scope(thread_name(t))) for _ in range(2)]
    unscoped = [run(Scope()) for _ in range(max(5, searches // 2))]
    return {"scoped_later": pct(scoped), "unscoped": pct(unscoped)}


def real_threads(store, folder: Path, questions: int = 20) -> dict:
    """Real conversations among the synthetic ones: the LoCoMo threads in ``folder`` are embedded
    by the local model (its default stored side) and written into the big store and into a store of
    their own; each conversation's first ``questions`` questions are searched thread-scoped in both
    (``run_search``, embedding included). A scoped search must not depend on what else is stored:
    the hits must be the same, in the same order, with the same scores. The real threads are
    deleted from the big store afterwards."""
    from ctxret.config import IndexConfig
    from ctxret.embedders.local import LocalEmbedder
    from ctxret.evaluation.datasets import load_threads
    from ctxret.ingest.writer import write_turns
    from ctxret.query.deadline import run_search
    from ctxret.storage.pieces import open_piece_store
    from ctxret.storage.schema import Scope

    emb = LocalEmbedder()
    config = IndexConfig.resolve(emb, None)
    convs = load_threads(folder)
    turns = [t for c in convs for t in c.turns]
    alone = open_piece_store(in_memory=True, collection="alone")
    alone.open(config.as_dict())
    started = time.perf_counter()
    written = write_turns(store, emb, config, turns)
    seconds = time.perf_counter() - started
    write_turns(alone, emb, config, turns)
    plan = search_plan(config.weight)
    times, same, asked = [], 0, 0
    threads = sorted({t.thread_id for t in turns})
    for conv in convs:
        scope = Scope(conv.turns[0].thread_id)
        for q in conv.questions[:questions]:
            big = run_search(plan, q.text, scope, emb, store)
            t0 = time.perf_counter()
            big = run_search(plan, q.text, scope, emb, store)
            times.append((time.perf_counter() - t0) * 1000)
            small = run_search(plan, q.text, scope, emb, alone)
            asked += 1
            hits = [[(h.id, h.score) for h in g.hits] for g in big]
            same += hits == [[(h.id, h.score) for h in g.hits] for g in small]
    store.delete(Scope(threads))
    alone.close()
    return {
        "threads": len(threads),
        "pieces": written.added,
        "embed_and_write_s": round(seconds, 1),
        "scoped_with_embedding_ms": pct(times),
        "same_hits_as_alone": f"{same}/{asked}",
    }


def embed_timing(repeat: int = 10) -> dict:
    """The local model's embedding of an 8-part message (the part of a search that is not the store's)."""
    from ctxret.embedders.local import LocalEmbedder
    from ctxret.query.vectors import query_vectors

    emb = LocalEmbedder()
    message = MESSAGE
    assert len(query_vectors(emb, message)[0]) == 8
    times = []
    for _ in range(repeat + 1):
        t0 = time.perf_counter()
        query_vectors(emb, message)
        times.append((time.perf_counter() - t0) * 1000)
    return pct(times[1:])


def rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def dir_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6, 1)


#: Run in a separate process: Chroma reads ``ef_search`` when it loads the index, so a width set by
#: a process that has already searched the store would not be the width it searches with.
_WIDTH = (
    "import json, sys, chromadb\n"
    "col = chromadb.PersistentClient(path=sys.argv[1]).get_collection('scale')\n"
    "now = (col.configuration_json or {}).get('hnsw', {}).get('ef_search')\n"
    "if sys.argv[2] != 'keep' and now != int(sys.argv[2]):\n"
    "    col.modify(configuration={'hnsw': {'ef_search': int(sys.argv[2])}})\n"
    "    col = chromadb.PersistentClient(path=sys.argv[1]).get_collection('scale')\n"
    "h = (col.configuration_json or {}).get('hnsw', {})\n"
    "print(json.dumps({k: h.get(k) for k in ('max_neighbors', 'ef_construction', 'ef_search')}))\n"
)


def search_width(path: Path | str, ef_search: int | None = None) -> dict:
    """A ``scale`` store's HNSW settings, its ``ef_search`` set first when given (the graph does not
    depend on it, so a store built earlier can be searched at another width)."""
    import subprocess as sp

    arg = "keep" if ef_search is None else str(int(ef_search))
    done = sp.run([sys.executable, "-c", _WIDTH, str(path), arg], check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def search_plan(weight: float = 0.8):
    """The benchmarks' search: 8 parts, k 5, the default hybrid fusion, floor 0.3, no parents."""
    from ctxret.query.fusion import FusionSettings
    from ctxret.query.search import SearchPlan

    return SearchPlan(k=5, floor=0.3, weight=weight, max_parts=8, split=True, hybrid=FusionSettings(), parents=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pieces", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=1_000)
    ap.add_argument("--searches", type=int, default=60, help="threads searched (each: 1 first + 3 later searches)")
    ap.add_argument("--server", action="store_true", help="search through `chroma run` on the built folder")
    ap.add_argument("--dir", default=None, help="keep the store here (default: a temporary folder, removed)")
    ap.add_argument("--json", dest="json_out", default=None)
    ap.add_argument(
        "--real",
        default=None,
        metavar="DIR",
        help="also write the LoCoMo threads in DIR (e.g. ../shared/data/locomo-dev) among the synthetic "
        "ones and check that their scoped searches equal those of a store holding only them",
    )
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    from ctxret.storage.pieces import open_piece_store

    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="ctxret-scale-"))
    path = base / "store"
    c = Corpus(args.pieces, args.threads)
    out: dict = {
        "pieces": args.pieces,
        "threads": args.threads,
        "mode": "server" if args.server else "embedded",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    if not (path / "chroma.sqlite3").exists():
        out["build"] = build(c, path)
    from ctxret.storage.chroma import HNSW

    out["hnsw"] = search_width(path, HNSW["ef_search"])  # what new collections get now
    out["disk_mb"] = dir_mb(path)
    server = None
    try:
        t0 = time.perf_counter()
        if args.server:
            from chroma_server import run_chroma  # tests/chroma_server.py: `chroma run` on a free port

            server = run_chroma(path)
            srv = server.__enter__()
            t0 = time.perf_counter()
            store = open_piece_store(
                host=srv.host, port=srv.port, collection="scale", lexical_path=path / "ctxret-lexical-scale.sqlite3"
            )
        else:
            store = open_piece_store(path, collection="scale")
        store.chroma.open(store.stored_config() or {})
        store.sync_lexical()
        out["open_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        t0 = time.perf_counter()
        store.lexical.search("project meeting", 1)  # the first unscoped BM25 reads the lexical file's postings
        out["postings_load_ms"] = round((time.perf_counter() - t0) * 1000, 1)
        out["search_ms_excluding_embedding"] = search_timings(c, store, args.searches)
        out["search_ms_including_embedding"] = search_with_embedding(c, store, max(10, args.searches // 3))
        if args.real:
            out["real_threads"] = real_threads(store, Path(args.real))
        out["rss_mb"] = rss_mb()
        store.close()
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    out["embed_8_parts_ms"] = embed_timing()
    print(json.dumps(out, indent=2))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=2))
    if not args.dir:
        shutil.rmtree(base, ignore_errors=True)
    gc.collect()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    del subprocess
    main()
