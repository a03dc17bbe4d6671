"""How far can the same model go on a BEIR dev set? Every document signal the local model gives, fused, tuned, paired.

Issue 24 asks for a default that beats the best peer by +3.0 nDCG@10 on SciFact dev with the *same* MiniLM model
for everyone. This script measures the ceiling of that: it computes every document-level signal the model and
BM25 give (more than any variant of ``docs_variants.py``), fuses them by z-score with weights found by coordinate
ascent on nDCG@10, and reports each feature set twice:

* **5-fold CV over queries** (weights tuned on 4/5, scored on the 5th): what a default could honestly carry;
* **in-sample** (weights tuned on every query, scored on the same queries): an optimistic *upper bound* — no
  default chosen without seeing the test queries can expect more from these signals.

Signals (all on the local model, ``local:all-MiniLM-L6-v2-onnx-int8``; one model pass per document):

* ``bm`` — BM25 over whole documents, bm25s settings (the ``peer_bm25s`` side); ``bm_k1b`` the k1/b grid;
* ``dd`` — one vector per document cut to the model's window (the ``peer_dense`` side);
* ``dl`` — the late-chunked whole-document vector: the mean of every token's vector, the document read in
  overlapping windows (nothing cut);
* ``smax`` / ``smean`` — each sentence's late-chunked vector (pooled from the same pass): the best and the mean
  sentence cosine; ``tt`` the title's;
* ``pmax`` / ``p2`` / ``dmean`` — the product's stored piece vectors: best piece, best + 0.25 × second, and the
  unit mean of a document's pieces; ``prod`` — the product's own per-document score (its hits at ``k=100``);
* ``rm3`` (BM25 with RM3 expansion from the fused top documents) and ``graph`` (scores smoothed over each
  document's 10 nearest documents) as further rows.

Needs what ``ctxret eval docs PATH --cache DIR`` and ``docs_variants.py dump`` leave in ``DIR`` (the peers'
document vectors, the product's pieces and hits); the token pass is cached there too (``tokens-*.npz``)::

    ctxret eval docs ../shared/data/scifact-dev --split train --cache /tmp/docs-cache
    python benchmarks/docs_variants.py dump ../shared/data/scifact-dev --split train --cache /tmp/docs-cache
    python benchmarks/docs_ceiling.py ../shared/data/scifact-dev --split train --cache /tmp/docs-cache
"""

from __future__ import annotations

import argparse
import glob
import math
import pickle
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from ctxret.evaluation.docs import DocSet, corpus_key, load_docs
from ctxret.evaluation.peers import BM25sPeer, bm25s_tokens
from ctxret.evaluation.stats import paired_diff
from docs_variants import Scorer, _top, group_max, hit_scores, minmax_top, ranks, rrf, zscore

FOLDS = 5
GRID = tuple(round(0.1 * i, 1) for i in range(11))
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


# -- the model's signals ----------------------------------------------------------------------------
def token_pass(ds: DocSet, cache: Path) -> dict[str, np.ndarray]:
    """One late-chunked pass per document (title, blank line, text): the whole-document vector, each sentence's
    and the title's vectors, pooled from the same token vectors. Cached as ``tokens-<corpus>.npz``."""
    from ctxret.embedders.local import pool_spans, shared_local_embedder

    emb = shared_local_embedder()
    path = cache / f"tokens-{corpus_key(ds, emb.model_id)}.npz"
    if path.is_file():
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}
    dvec, tvec, svec, sowner = [], [], [], []
    t0 = time.monotonic()
    for b0 in range(0, len(ds.documents), 64):
        batch = ds.documents[b0 : b0 + 64]
        spans_of = []
        for d in batch:
            title = (d.title or "").strip()
            off = len(title) + 2 if title else 0
            spans = [(0, len(title))] if title else []
            pos = 0
            for m in _SENTENCE.finditer(d.text):
                spans.append((off + pos, off + m.start()))
                pos = m.end()
            spans.append((off + pos, off + len(d.text)))
            spans_of.append([(s, e) for s, e in spans if e > s])
        texts = [f"{(d.title or '').strip()}\n\n{d.text}" if (d.title or "").strip() else d.text for d in batch]
        for d, tokens, spans in zip(batch, emb.embed_tokens_many(texts), spans_of, strict=True):
            pooled = pool_spans(tokens, spans)
            has_title = bool((d.title or "").strip())
            dvec.append(tokens.text_vector(include_special=True))
            tvec.append(pooled[0] if has_title else np.zeros(pooled.shape[1], np.float32))
            sents = pooled[1:] if has_title else pooled
            svec.append(sents)
            sowner.extend([len(dvec) - 1] * len(sents))
        if b0 % 640 == 0:
            print(f"  token pass {b0:,}/{len(ds.documents):,} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    out = {"dvec": np.stack(dvec), "tvec": np.stack(tvec), "svec": np.concatenate(svec), "sowner": np.array(sowner)}
    np.savez(path, **out)
    return out


class Bm25Grid:
    """BM25 over whole documents with bm25s's tokens, any k1/b and weighted query terms (for RM3)."""

    def __init__(self, ds: DocSet) -> None:
        import Stemmer

        self.stemmer = Stemmer.Stemmer("english")
        self.toks = [bm25s_tokens(d.full_text, self.stemmer) for d in ds.documents]
        self.n = len(self.toks)
        self.dl = np.array([len(t) for t in self.toks], np.float64)
        post: dict[str, dict[int, int]] = defaultdict(dict)
        for i, toks in enumerate(self.toks):
            for w, c in Counter(toks).items():
                post[w][i] = c
        self.post = {w: (np.fromiter(d.keys(), np.int64), np.fromiter(d.values(), np.float64)) for w, d in post.items()}

    def scores(self, terms: Sequence[str], k1: float = 1.5, b: float = 0.75, weights: Sequence[float] | None = None):
        s = np.zeros(self.n)
        norm = k1 * (1 - b + b * self.dl / self.dl.mean())
        for j, w in enumerate(terms):
            if w not in self.post:
                continue
            rows, tf = self.post[w]
            idf = math.log(1 + (self.n - len(rows) + 0.5) / (len(rows) + 0.5))
            s[rows] += (1.0 if weights is None else weights[j]) * idf * tf / (tf + norm[rows])
        return s


# -- fusion, tuned ----------------------------------------------------------------------------------
def ndcg_rows(sc: Scorer, S: np.ndarray, rows: np.ndarray) -> np.ndarray:
    top = _top(S, 10)
    gains = np.take_along_axis(sc.R[rows], top, axis=1)
    return (gains * sc.disc[: top.shape[1]]).sum(axis=1) / sc.idcg[rows]


def coordinate_ascent(Z: Sequence[np.ndarray], objective: Callable[[np.ndarray], float], rounds: int = 3) -> np.ndarray:
    """Weights on :data:`GRID` for ``sum w_i Z_i``, one coordinate at a time, kept only when ``objective`` rises."""
    w = np.full(len(Z), 1.0 / len(Z))
    best = objective(w)
    for _ in range(rounds):
        moved = False
        for j in range(len(Z)):
            for g in GRID:
                trial = w.copy()
                trial[j] = g
                if trial.sum() == 0:
                    continue
                s = objective(trial)
                if s > best + 1e-9:
                    best, w, moved = s, trial, True
        if not moved:
            break
    return w


def fused(Z: Sequence[np.ndarray], w: np.ndarray, rows: np.ndarray | slice = slice(None)) -> np.ndarray:
    return sum(wi * z[rows] for wi, z in zip(w, Z, strict=True) if wi)  # type: ignore[return-value]


def tuned(sc: Scorer, Z: Sequence[np.ndarray], folds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(held-out per-query nDCG@10 under CV, in-sample per-query nDCG@10, in-sample weights)."""
    nq = len(folds)
    held = np.empty(nq)
    for f in range(FOLDS):
        train, test = np.flatnonzero(folds != f), np.flatnonzero(folds == f)
        w = coordinate_ascent(Z, lambda w, r=train: float(ndcg_rows(sc, fused(Z, w, r), r).mean()))
        held[test] = ndcg_rows(sc, fused(Z, w, test), test)
    rows = np.arange(nq)
    w_all = coordinate_ascent(Z, lambda w: float(ndcg_rows(sc, fused(Z, w, rows), rows).mean()))
    return held, sc.ndcg(fused(Z, w_all)), w_all


# -- the run ------------------------------------------------------------------------------------------
def run(ds: DocSet, cache: Path, sets: Sequence[Sequence[str]]) -> None:
    t0 = time.monotonic()
    sc = Scorer(ds)
    n, nq = len(sc.ids), len(ds.queries)
    dump = pickle.loads((cache / "variants-dump.pkl").read_bytes())
    Q = dump["qvec"]
    saved = glob.glob(str(cache / "peer-dense-*.npz"))
    if not saved:
        raise SystemExit(f"{cache}: no peer-dense-*.npz; run `ctxret eval docs PATH --cache {cache}` first")
    with np.load(saved[0]) as pv:
        row = {str(d): i for i, d in enumerate(pv["ids"])}
        V = np.asarray(pv["vectors"][[row[d] for d in sc.ids]], np.float32)
    DD = Q @ V.T
    peer = BM25sPeer([d.full_text for d in ds.documents])
    scored = [peer.scores(q.text) for q in ds.queries]
    BM = np.stack([s for s, _ in scored]).astype(np.float32)
    HIT = np.stack([h for _, h in scored])
    tv = token_pass(ds, cache)
    SS = Q @ tv["svec"].T
    owner = np.array([sc.col[d] for d in dump["pieces"]["doc"]])
    P = dump["pieces"]["vec"]
    SP = Q @ P.T
    P2 = second_best(SP, owner, n)
    DV = np.zeros((n, P.shape[1]), np.float32)
    np.add.at(DV, owner, P)
    DV /= np.linalg.norm(DV, axis=1, keepdims=True) + 1e-12
    prod = np.full((nq, n), np.nan, np.float32)
    for qi, per in enumerate(hit_scores(dump["groups"], sc.col)):
        for c, ss in per.items():
            prod[qi, c] = ss[0] + 0.25 * (ss[1] if len(ss) > 1 else 0.0)
    prod = np.where(np.isnan(prod), np.nanmin(prod) - 1.0, prod)
    pmax = group_max(SP, owner, n, "max")
    raw = {
        "bm": np.where(HIT, BM, 0.0),
        "dd": DD,
        "dl": Q @ tv["dvec"].T,
        "smax": group_max(SS, owner_s(tv), n, "max"),
        "smean": group_max(SS, owner_s(tv), n, "mean"),
        "tt": Q @ tv["tvec"].T,
        "pmax": pmax,
        "p2": pmax + 0.25 * P2,
        "dmean": Q @ DV.T,
        "prod": prod,
    }
    feats = {k: zscore(v) for k, v in raw.items()}
    peers = {
        "peer_bm25s": sc.ndcg(np.where(HIT, BM, -np.inf)),
        "peer_dense": sc.ndcg(DD),
        "peer_ensemble_rrf": sc.ndcg(rrf([ranks(BM), ranks(DD)], [0.5, 0.5], 60, valid=[HIT, None])),
        "peer_query_fusion": sc.ndcg(0.5 * minmax_top(DD) + 0.5 * minmax_top(np.where(HIT, BM, -np.inf))),
    }
    best_peer = max(peers, key=lambda p: peers[p].mean())
    base = peers[best_peer]
    print(f"{ds.source}: {n:,} documents, {nq} queries; signals ready ({time.monotonic() - t0:.0f} s)")
    print("\n| signal alone | nDCG@10 |\n|:--|--:|")
    for name, v in peers.items():
        print(f"| {name} | {100 * v.mean():.1f} |")
    for name, f in feats.items():
        print(f"| {name} | {100 * sc.ndcg(f).mean():.1f} |")
    print(f"\nFused by z-score, weights by coordinate ascent; differences from {best_peer} (paired, 95%):\n")
    print("| features | CV nDCG@10 | CV − best peer | in-sample nDCG@10 | in-sample − best peer | in-sample weights |")
    print("|:--|--:|--:|--:|--:|:--|")
    folds = np.random.default_rng(0).permutation(nq) % FOLDS
    for names in sets:
        held, ins, w = tuned(sc, [feats[x] for x in names], folds)
        weights = ", ".join(f"{x} {wi:g}" for x, wi in zip(names, w, strict=True) if wi)
        print(
            f"| {' + '.join(names)} | {100 * held.mean():.1f} | {paired_diff(held, base).fmt()} | "
            f"{100 * ins.mean():.1f} | {paired_diff(ins, base).fmt()} | {weights} |",
            flush=True,
        )
    extras(ds, sc, feats, base, V)
    print(f"\ndone ({time.monotonic() - t0:.0f} s)", file=sys.stderr)


def owner_s(tv: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(tv["sowner"], np.int64)


def second_best(SP: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Each document's second-best piece cosine (0 for a one-piece document)."""
    order = np.argsort(owner, kind="stable")
    o = owner[order]
    starts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
    ends = np.r_[starts[1:], len(o)]
    out = np.zeros((SP.shape[0], n), np.float32)
    S = SP[:, order]
    for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
        if e - s > 1:
            out[:, o[s]] = -np.partition(-S[:, s:e], 1, axis=1)[:, 1]
    return out


def extras(ds: DocSet, sc: Scorer, feats: dict[str, np.ndarray], base: np.ndarray, V: np.ndarray) -> None:
    """BM25's k1/b, RM3 expansion and score smoothing over near documents, each inside the bm + dd fusion
    (weights 0.2 / 0.4: that fusion's in-sample best), best setting in-sample (optimistic)."""
    grid = Bm25Grid(ds)
    qt = [bm25s_tokens(q.text, grid.stemmer) for q in ds.queries]
    dd = feats["dd"]

    def best(name: str, mats: dict[str, np.ndarray]) -> None:
        scores = {k: sc.ndcg(0.2 * zscore(m) + 0.4 * dd) for k, m in mats.items()}
        k = max(scores, key=lambda s: scores[s].mean())
        print(f"| {name} (best: {k}) | {100 * scores[k].mean():.1f} | {paired_diff(scores[k], base).fmt()} |")

    print("\n| bm + dd with (in-sample best) | nDCG@10 | − best peer |\n|:--|--:|--:|")
    best(
        "BM25 k1/b",
        {
            f"k1 {k1} b {b}": np.stack([grid.scores(t, k1, b) for t in qt])
            for k1 in (0.9, 1.2, 1.5, 2.0)
            for b in (0.5, 0.75, 0.9, 1.0)
        },
    )
    first = _top(0.2 * feats["bm"] + 0.4 * dd, 10)
    rm3 = {}
    for m in (3, 5, 10):
        for terms in (10, 20):
            for lam in (0.3, 0.5):
                rows = []
                for qi, q in enumerate(qt):
                    c: Counter[str] = Counter()
                    for d in first[qi, :m]:
                        for w, v in Counter(grid.toks[d]).items():
                            c[w] += v / max(len(grid.toks[d]), 1)
                    add = [w for w, _ in c.most_common(terms + len(q)) if w not in q][:terms]
                    total = sum(c[w] for w in add) or 1.0
                    weights = [1 - lam] * len(q) + [lam * len(q) * c[w] / total for w in add]
                    rows.append(grid.scores(q + add, weights=weights))
                rm3[f"m {m}, {terms} terms, λ {lam}"] = np.stack(rows)
    best("RM3 expansion", rm3)
    print("| (smoothing below is over the fused scores) | | |")
    fusedz = 0.2 * feats["bm"] + 0.4 * dd
    G = V @ V.T
    np.fill_diagonal(G, -1.0)
    knn = np.argpartition(-G, 10, axis=1)[:, :10]
    smooth = {lam: sc.ndcg(fusedz + lam * fusedz[:, knn].mean(axis=2)) for lam in (0.1, 0.2, 0.3)}
    lam = max(smooth, key=lambda x: smooth[x].mean())
    diff = paired_diff(smooth[lam], base).fmt()
    print(f"| graph smoothing (best: λ {lam}) | {100 * smooth[lam].mean():.1f} | {diff} |")


SETS = (
    "bm,dd",
    "bm,dl",
    "bm,smax",
    "bm,pmax",
    "bm,p2",
    "bm,dl,smax",
    "bm,p2,dd",
    "bm,prod,dd",
    "bm,dd,dl,smax,smean,tt",
    "bm,dd,dl,smax,smean,p2,dmean,prod,tt",
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--split", default="test")
    ap.add_argument("--cache", default="/tmp/docs-cache")
    ap.add_argument("--sets", default=";".join(SETS), help="feature sets: comma-separated names, ';' between sets")
    args = ap.parse_args(argv)
    ds = load_docs(args.path, split=args.split)
    run(ds, Path(args.cache), [s.split(",") for s in args.sets.split(";")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
