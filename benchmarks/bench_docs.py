"""Documents: search and indexing speed of a knowledge base, next to the peers a user would build.

The corpus is SciFact's abstracts (``corpus.jsonl`` of ``../shared/data/scifact-dev`` when present: each
abstract one markdown document, ``# title`` then the text), else a synthetic corpus of the same size.
It is indexed with the product (``ContextualIndex.add_documents``, an embedded store) twice, and
the stores are kept between runs (``--store-dir``; rebuilt when the corpus or the code's config changes):

* ``one``: every document in one scope (``thread_id="kb"``), searched with ``thread_id="kb"``;
* ``each``: each document its own scope (the default), searched unscoped.

One run measures, interleaved query by query (the same ``--queries`` claims for every searcher):

* the product's ``ContextualIndex.search`` at ``k`` on both stores: **excluding the embedding** (the index's
  embedder swapped for one that returns the query's vectors, made beforehand by the same model: the search
  path is otherwise the product's own) and **warm wall time including it** (the real embedder);
* the peer hybrid: the same local model embeds the query (one vector), exact numpy dense over one vector
  per document (the document truncated to the model's 256-token window, as sentence-transformers does),
  bm25s (PyStemmer English stemmer, English stopwords) over whole documents, RRF (c = 60, weights
  0.5/0.5, LangChain's EnsembleRetriever rule) over each side's top ``--peer-candidates``, cut to ``k``;
* with ``--index-docs N``: indexing wall time of the first ``N`` documents, ABBA over ``--index-rounds``
  rounds, ctxret's ``add_documents`` against langchain-chroma's ``Chroma.add_documents`` with the same
  local model as LangChain ``Embeddings`` (``langchain_ctxret.CtxretEmbeddings``), on the same documents
  whole (truncated to the window) and on the same pieces ctxret stores (equal embedding work).

Times are milliseconds per search: p50 / p90 and mean, wall (``perf_counter``) and CPU
(``process_time``: the whole process, so the search's worker threads count). ``--check FILE`` writes
(first run) or compares (later runs) every search's hits and scores, so two versions of the code can be
checked for identical results. ``--profile FILE`` writes a cProfile (CPU time) of the one-scope searches.

    python benchmarks/bench_docs.py --queries 200 --check /tmp/docspeed-hits.json
    python benchmarks/bench_docs.py --queries 100 --index-docs 500 --index-rounds 2   # needs langchain-chroma
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "scifact-dev"
STORE_VERSION = 1  # bump when what the stores hold changes


# -- the corpus -----------------------------------------------------------------------------------
def load_corpus(data: Path, synthetic: int) -> tuple[list[dict[str, str]], list[str], str]:
    """``(documents, queries, name)``: SciFact's abstracts and claims, or a synthetic corpus of that size."""
    if synthetic == 0 and (data / "corpus.jsonl").exists():
        docs = []
        with open(data / "corpus.jsonl", encoding="utf-8") as f:
            for line in f:
                d = json.loads(line)
                docs.append({"id": str(d["_id"]), "text": f"# {d['title'].strip()}\n\n{d['text'].strip()}"})
        queries = []
        with open(data / "queries.jsonl", encoding="utf-8") as f:
            for line in f:
                queries.append(json.loads(line)["text"])
        return docs, queries, f"scifact-dev ({len(docs):,} abstracts)"
    return _synthetic(synthetic or 5183)


def _synthetic(n: int) -> tuple[list[dict[str, str]], list[str], str]:
    """``n`` abstracts of 150–300 words drawn from a Zipf vocabulary of 20K made-up words, and 809 claims."""
    rng = random.Random(24)
    syll = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qui", "bre", "dro", "fla", "gri"]
    vocab = ["".join(rng.choice(syll) for _ in range(rng.randint(2, 4))) for _ in range(20_000)]
    weights = [1.0 / (i + 1) for i in range(len(vocab))]

    def sentence(lo: int, hi: int) -> str:
        words = rng.choices(vocab, weights, k=rng.randint(lo, hi))
        return " ".join(words).capitalize() + "."

    docs = []
    for i in range(n):
        body = " ".join(sentence(12, 25) for _ in range(rng.randint(8, 14)))
        docs.append({"id": f"d{i}", "text": f"# {sentence(6, 12)}\n\n{body}"})
    return docs, [sentence(8, 16) for _ in range(809)], f"synthetic ({n:,} abstracts)"


# -- the product's stores -------------------------------------------------------------------------
def _digest(docs: Sequence[dict[str, str]], scoped: bool, model: str = "") -> str:
    h = hashlib.sha256(f"v{STORE_VERSION} scoped={scoped} model={model}".encode())
    for d in docs:
        h.update(d["id"].encode() + b"\0" + d["text"].encode() + b"\0")
    return h.hexdigest()[:16]


def _add(index: Any, docs: Sequence[dict[str, str]], thread_id: str | None, batch: int = 500) -> None:
    for i in range(0, len(docs), batch):
        index.add_documents(list(docs[i : i + batch]), thread_id=thread_id)


def open_store(root: Path, docs: Sequence[dict[str, str]], scoped: bool, embedder: Any) -> tuple[Any, float | None]:
    """The product's index of ``docs`` under ``root`` (built when missing or stale), and the build's wall seconds."""
    from ctxret import ContextualIndex
    from ctxret.errors import ConfigMismatchError

    path = root / (("one" if scoped else "each") + ("-hash" if isinstance(embedder, HashEmbedder) else ""))
    marker = path / "bench-docs.json"
    digest = _digest(docs, scoped, embedder.model_id)
    if marker.exists() and json.loads(marker.read_text()).get("digest") == digest:
        try:
            return ContextualIndex(path, embedder=embedder, progress=False), None
        except ConfigMismatchError as e:  # a config this code no longer opens: build again (never on a lock)
            print(f"  rebuilding {path.name}: {e}", file=sys.stderr)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    print(f"  building the {'one-scope' if scoped else 'one-scope-per-document'} store in {path} ...", file=sys.stderr)
    index = ContextualIndex(path, embedder=embedder, progress=False)
    t0 = time.perf_counter()
    _add(index, docs, "kb" if scoped else None)
    seconds = time.perf_counter() - t0
    marker.write_text(json.dumps({"digest": digest, "seconds": seconds, "pieces": index.stats().get("pieces")}))
    return index, seconds


class HashEmbedder:
    """A fast stand-in for the local model when there is no time to embed the corpus (``--embedder hash``).

    The same pieces as the local model (its tokenizer counts, window, piece budget and floor), the same
    384 dimensions, but each vector is the unit sum of its words' hashed signs: what a search costs
    does not depend on what the vectors mean, only on their number and size (the context is the ``mean``
    of a section's pieces, not ``late``: the search reads the stored vectors the same way). A different ``model_id``,
    so a store built with it is never searched with the real model's vectors."""

    def __init__(self, inner: Any) -> None:
        from dataclasses import replace

        from ctxret.embedders.base import capabilities_of

        self.inner = inner
        self.dims = int(inner.dims)
        # late chunking would run the local model over every section: the mean context (the rest as the local model)
        self.capabilities = replace(capabilities_of(inner), context="mean")

    model_id = "bench-hash-384"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dims] += 1.0 if (h >> 32) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


class Charged:
    """``stand_in``'s vectors at the local model's cost: the model embeds the texts too (its answer unused)."""

    def __init__(self, model: Any, stand_in: Any) -> None:
        self.model, self.stand_in = model, stand_in

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stand_in, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.model.embed(list(texts))
        return self.stand_in.embed(texts)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


class Recorded:
    """An embedder that answers from vectors made beforehand by ``inner`` (the search minus the embedding).

    Every other attribute is ``inner``'s, so the index plans and checks exactly as with ``inner``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.held: dict[tuple[str, ...], np.ndarray] = {}
        self.misses = 0  # searches whose vectors were not made beforehand (should stay 0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def record(self, texts: Sequence[str]) -> None:
        self.held[tuple(texts)] = self.inner.embed(list(texts))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        key = tuple(texts)
        if key not in self.held:
            self.misses += 1
            self.record(texts)
        return self.held[key].copy()

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


# -- the peer hybrid ------------------------------------------------------------------------------
class PeerHybrid:
    """Query embedding + exact dense (one vector per document) + bm25s + RRF (c=60, 0.5/0.5)."""

    def __init__(self, docs: Sequence[dict[str, str]], embedder: Any, vectors: np.ndarray, candidates: int) -> None:
        import bm25s
        import Stemmer

        self.ids = [d["id"] for d in docs]
        self.embedder = embedder
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.candidates = candidates
        self.stemmer = Stemmer.Stemmer("english")
        self.bm25 = bm25s.BM25()
        self.bm25.index(
            bm25s.tokenize([d["text"] for d in docs], stopwords="en", stemmer=self.stemmer, show_progress=False),
            show_progress=False,
        )
        self._tokenize = bm25s.tokenize

    def search(self, query: str, k: int, qvec: np.ndarray | None = None) -> list[tuple[str, float]]:
        q = self.embedder.embed([query])[0] if qvec is None else qvec
        n = min(self.candidates, len(self.ids))
        scores = self.vectors @ q
        top = np.argpartition(-scores, n - 1)[:n]
        dense = top[np.argsort(-scores[top], kind="stable")]
        toks = self._tokenize([query], stopwords="en", stemmer=self.stemmer, show_progress=False)
        docs, _ = self.bm25.retrieve(toks, k=n, show_progress=False, n_threads=1)
        fused: dict[int, float] = {}
        for ranked in (dense.tolist(), docs[0].tolist()):
            for rank, i in enumerate(ranked):
                fused[i] = fused.get(i, 0.0) + 0.5 / (60 + rank + 1)
        best = sorted(fused.items(), key=lambda kv: -kv[1])[:k]
        return [(self.ids[i], s) for i, s in best]


def peer_vectors(root: Path, docs: Sequence[dict[str, str]], embedder: Any) -> np.ndarray:
    """One vector per whole document, truncated to the model's window (cached beside the stores)."""
    path = root / f"peer-vectors-{_digest(docs, False, embedder.model_id)}.npy"
    if path.exists():
        return np.load(path)
    from ctxret.embedders.local import LocalEmbedder

    trunc = LocalEmbedder(truncate=True) if not isinstance(embedder, HashEmbedder) else embedder
    vecs = trunc.embed([d["text"] for d in docs])
    np.save(path, vecs)
    return vecs


# -- measuring ------------------------------------------------------------------------------------
def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - w0) * 1e3, (time.process_time() - c0) * 1e3


def summary(xs: Sequence[float]) -> str:
    a = np.asarray(xs)
    return f"{np.percentile(a, 50):7.2f} {np.percentile(a, 90):7.2f} {a.mean():7.2f}"


def hits_of(groups: Sequence[Any]) -> list[list[Any]]:
    return [
        [[h.id, round(float(h.score), 9), {k: round(float(v), 9) for k, v in sorted(h.scores.items())}] for h in g.hits]
        for g in groups
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--synthetic", type=int, default=0, help="a synthetic corpus of N documents instead of SciFact")
    ap.add_argument("--store-dir", type=Path, default=Path("/tmp/docspeed-stores"))
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument(
        "--per",
        default="piece",
        choices=("piece", "document"),
        help="what the product returns: k pieces (default) or k documents (per='document')",
    )
    ap.add_argument("--peer-candidates", type=int, default=100)
    ap.add_argument("--modes", default="one,each,peer", help="which searchers: one, each, peer (comma-separated)")
    ap.add_argument("--check", type=Path, help="write (first run) or compare every search's hits and scores")
    ap.add_argument("--profile", type=Path, help="cProfile of the one-scope searches (excluding the embedding)")
    ap.add_argument("--index-docs", type=int, default=0, help="time indexing of the first N documents (0: not)")
    ap.add_argument("--index-rounds", type=int, default=1, help="ABBA rounds of the indexing comparison")
    ap.add_argument("--json", type=Path, help="write the per-query times here")
    ap.add_argument(
        "--embedder",
        choices=("local", "hash"),
        default="local",
        help="hash: the stores and the peer's document vectors from HashEmbedder (fast to build); the searches "
        "including the embedding then add the local model's own query embedding, measured in the same run",
    )
    args = ap.parse_args(argv)

    from ctxret.embedders.local import LocalEmbedder

    docs, claims, name = load_corpus(args.data, args.synthetic)
    args.store_dir.mkdir(parents=True, exist_ok=True)
    model = LocalEmbedder()
    embedder: Any = HashEmbedder(model) if args.embedder == "hash" else model
    live: Any = Charged(model, embedder) if embedder is not model else model  # what "incl" searches embed with
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    print(f"corpus: {name}; machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; python {platform.python_version()}")
    stand_in = " (stand-in; the query embedding by the local model)" if model is not embedder else ""
    print(f"vectors: {embedder.model_id}{stand_in}")

    indexes: dict[str, Any] = {}
    for mode in ("one", "each"):
        if mode in modes:
            index, built = open_store(args.store_dir, docs, mode == "one", embedder)
            indexes[mode] = index
            pieces = index.stats().get("pieces")
            print(f"store {mode}: {pieces} pieces" + (f", built in {built:.0f} s" if built is not None else ""))
    peer = None
    if "peer" in modes:
        peer = PeerHybrid(docs, live, peer_vectors(args.store_dir, docs, embedder), args.peer_candidates)

    rng = random.Random(7)
    queries = rng.sample(claims, min(args.queries, len(claims)))
    recorded = Recorded(embedder)
    peer_q: dict[str, np.ndarray] = {}
    from ctxret.query.vectors import embed_inputs, query_texts

    for q in queries:  # every query's vectors made once, before anything is timed
        ps, whole = query_texts(q)
        recorded.record(embed_inputs(ps, whole, True))
        peer_q[q] = embedder.embed([q])[0]

    def product(mode: str, q: str, record: bool) -> Any:
        index = indexes[mode]
        index.embedder = recorded if record else live
        try:
            if mode == "one":
                return index.search(q, k=args.k, thread_id="kb", per=args.per)
            return index.search(q, k=args.k, per=args.per)
        finally:
            index.embedder = embedder

    searchers: list[tuple[str, Callable[[str], Any]]] = []
    for mode in ("one", "each"):
        if mode in indexes:
            searchers.append((f"ctxret {mode} excl", lambda q, m=mode: product(m, q, True)))
            searchers.append((f"ctxret {mode} incl", lambda q, m=mode: product(m, q, False)))
    if peer is not None:
        searchers.append(("peer excl", lambda q: peer.search(q, args.k, peer_q[q])))
        searchers.append(("peer incl", lambda q: peer.search(q, args.k)))

    for q in queries[: args.warmup]:
        for _, fn in searchers:
            fn(q)
    wall: dict[str, list[float]] = {n: [] for n, _ in searchers}
    cpu: dict[str, list[float]] = {n: [] for n, _ in searchers}
    results: dict[str, list[Any]] = {n: [] for n, _ in searchers if n.startswith("ctxret")}
    for i, q in enumerate(queries):
        order = searchers if i % 2 == 0 else searchers[::-1]  # ABBA: no searcher always goes first
        for n, fn in order:
            out, w, c = timed(lambda fn=fn, q=q: fn(q))
            wall[n].append(w)
            cpu[n].append(c)
            if n in results:
                results[n].append(hits_of(out))

    print(f"\nsearch at k={args.k} (per={args.per!r}), {len(queries)} claims ({args.warmup} warm-up), ms per search")
    print(f"(excl: query vectors made beforehand; searches that had to embed: {recorded.misses})")
    print(f"{'searcher':22s} {'wall p50':>7s} {'p90':>7s} {'mean':>7s}   {'CPU p50':>7s} {'p90':>7s} {'mean':>7s}")
    for n, _ in searchers:
        print(f"{n:22s} {summary(wall[n])}   {summary(cpu[n])}")
    if peer is not None:
        for mode in ("one", "each"):
            if mode in indexes:
                r = np.asarray(wall[f"ctxret {mode} incl"]) / np.asarray(wall["peer incl"])
                lo, hi = np.percentile(_boot_medians(r), [2.5, 97.5])
                med = np.median(r)
                print(f"paired wall ratio ctxret {mode} incl / peer incl: median {med:.2f} [{lo:.2f}, {hi:.2f}]")

    if args.check is not None:
        same = {n: v for n, v in results.items() if n.endswith("excl")}
        if args.check.exists():
            old = json.loads(args.check.read_text())
            for n, v in same.items():
                if n in old:
                    bad = sum(1 for a, b in zip(old[n]["hits"], v, strict=True) if a != b)
                    ok = old[n]["queries"] == queries
                    verdict = "IDENTICAL" if ok and not bad else f"{bad} searches differ"
                    print(f"check {n}: {verdict} ({len(v)} searches)")
        else:
            args.check.write_text(json.dumps({n: {"queries": queries, "hits": v} for n, v in same.items()}))
            print(f"check: wrote {args.check}")
    if args.profile is not None and "one" in indexes:
        import cProfile
        import pstats

        prof = cProfile.Profile(time.process_time)  # CPU time: on a shared machine wall time is mostly waiting
        prof.enable()
        for q in queries:
            product("one", q, True)
        prof.disable()
        prof.dump_stats(str(args.profile))
        print(f"profile (CPU seconds over {len(queries)} one-scope searches): {args.profile}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    if args.json is not None:
        args.json.write_text(json.dumps({"wall": wall, "cpu": cpu}))
    if args.index_docs:
        index_speed(docs[: args.index_docs], args.index_rounds, embedder)
    return 0


def _boot_medians(r: np.ndarray, n: int = 2000) -> np.ndarray:
    rng = np.random.default_rng(0)
    return np.median(rng.choice(r, size=(n, len(r)), replace=True), axis=1)


# -- indexing: ctxret against langchain-chroma ----------------------------------------------------
def index_speed(docs: Sequence[dict[str, str]], rounds: int, embedder: Any) -> None:
    import tempfile

    import chromadb
    from chromadb.config import Settings
    from ctxret import ContextualIndex
    from ctxret.embedders.local import LocalEmbedder
    from langchain_chroma import Chroma
    from langchain_core.documents import Document

    from langchain_ctxret import CtxretEmbeddings

    # the same pieces ctxret stores (their bodies, without the label), and the whole documents
    probe = ContextualIndex(in_memory=True, embedder=embedder, progress=False)
    from ctxret.ingest.documents import read_documents

    turns, _ = read_documents(list(docs))
    bodies = [p.text for t in turns for p in probe.fit_pieces(t)]
    probe.close()
    whole = [Document(page_content=d["text"], id=d["id"]) for d in docs]
    pieces = [Document(page_content=b, id=f"p{i}") for i, b in enumerate(bodies)]
    lc_whole = CtxretEmbeddings(LocalEmbedder(truncate=True))
    lc_pieces = CtxretEmbeddings(embedder)

    def run_ctxret() -> float:
        with tempfile.TemporaryDirectory(prefix="docspeed-idx-", dir="/tmp") as d:
            index = ContextualIndex(d, embedder=embedder, progress=False)
            t0 = time.perf_counter()
            _add(index, docs, "kb")
            s = time.perf_counter() - t0
            index.close()
            return s

    def run_lc(documents: list[Any], emb: Any) -> Callable[[], float]:
        def go() -> float:
            with tempfile.TemporaryDirectory(prefix="docspeed-lc-", dir="/tmp") as d:
                client = chromadb.PersistentClient(d, settings=Settings(anonymized_telemetry=False))
                store = Chroma(
                    "bench", embedding_function=emb, client=client, collection_metadata={"hnsw:space": "cosine"}
                )
                t0 = time.perf_counter()
                store.add_documents(documents)
                return time.perf_counter() - t0

        return go

    runners = {"ctxret": run_ctxret, "lc whole": run_lc(whole, lc_whole), "lc pieces": run_lc(pieces, lc_pieces)}
    times: dict[str, list[float]] = {n: [] for n in runners}
    for r in range(rounds):
        order = list(runners) + list(runners)[::-1]  # A B C C B A
        for n in order:
            times[n].append(runners[n]())
            print(f"  round {r + 1}: {n} {times[n][-1]:.1f} s", file=sys.stderr)
    print(f"\nindexing {len(docs):,} documents ({len(bodies):,} pieces), wall seconds, {rounds} ABBA round(s)")
    for n, ts in times.items():
        print(f"{n:12s} median {statistics.median(ts):7.1f} s  ({', '.join(f'{t:.1f}' for t in ts)})")
    for n in ("lc whole", "lc pieces"):
        ratios = [a / b for a, b in zip(times["ctxret"], times[n], strict=True)]
        med, lo, hi = statistics.median(ratios), min(ratios), max(ratios)
        print(f"ratio ctxret / {n}: median {med:.2f} (min {lo:.2f}, max {hi:.2f})")


if __name__ == "__main__":
    sys.exit(main())
