"""Document-ranking variants on a BEIR dev set, each paired against the best peer, with 5-fold CV over queries.

Reads what ``ctxret eval docs`` cached (the product's index, the peers' document vectors) through a dump made
by :func:`dump` (the product's own search results at ``k=100`` per query, every stored piece with its vector),
then scores every variant on whole score matrices (numpy): no model call after the dump.

    python benchmarks/docs_variants.py subset ../shared/data/scifact-dev --split train --out /tmp/docs-subset
    python benchmarks/docs_variants.py dump ../shared/data/scifact-dev --split train --cache /tmp/docs-cache
    python benchmarks/docs_variants.py run ../shared/data/scifact-dev --split train --cache /tmp/docs-cache

Every tuned knob is chosen by 5-fold cross-validation over queries (tune on 4/5, score the 5th; the
concatenated held-out scores are paired against the best peer); the "dev" column is the best setting on all
queries (optimistic, shown for reference only).
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from ctxret.evaluation.docs import DocSet, build_peers, load_docs, open_product_index
from ctxret.evaluation.stats import paired_diff, stratified_bootstrap

FOLDS = 5
DEPTH = 100


def subset(src: Path, split: str, out: Path, head: int = 900, tail: int = 400) -> None:
    """A BEIR folder with every document a query cites, the first ``head`` and the last ``tail`` of the corpus
    (all queries and qrels kept): a smaller corpus when embedding all of it is out of reach (BENCHMARKS.md)."""
    import shutil

    ds = load_docs(src, split=split)
    keep = {d for q in ds.queries for d in q.relevant}
    keep |= {d.id for d in ds.documents[:head]} | {d.id for d in ds.documents[len(ds.documents) - tail :]}
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(src / "corpus.jsonl", encoding="utf-8") as fin, open(out / "corpus.jsonl", "w", encoding="utf-8") as fout:
        for line in fin:
            if line.strip() and str(json.loads(line)["_id"]) in keep:
                fout.write(line)
    shutil.copy(src / "queries.jsonl", out / "queries.jsonl")
    shutil.copy(src / "qrels" / f"{split}.tsv", out / "qrels" / f"{split}.tsv")
    print(f"{out}: {len(keep):,} documents", file=sys.stderr)


def dump(ds: DocSet, cache: str, out: Path) -> None:
    from ctxret.embedders.local import shared_local_embedder

    emb = shared_local_embedder()
    index = open_product_index(ds, emb, cache, progress=True)
    try:
        recs = list(index.store.records(include=("metadatas", "documents", "embeddings")))
        pieces = {
            "doc": [r["metadata"]["doc_id"] for r in recs],
            "text": [r["document"] for r in recs],
            "vec": np.asarray([r["embedding"] for r in recs], dtype=np.float32),
        }
        groups = []
        for i, q in enumerate(ds.queries):
            gs = index.search(q.text, k=DEPTH)
            groups.append([[(h.metadata.get("doc_id"), float(h.score), dict(h.scores)) for h in g.hits] for g in gs])
            if i % 200 == 0:
                print(f"  searched {i}", file=sys.stderr)
    finally:
        index.close()
    qvec = np.asarray(emb.embed([q.text for q in ds.queries]), dtype=np.float32)
    with open(out, "wb") as fh:
        pickle.dump({"pieces": pieces, "groups": groups, "qvec": qvec}, fh)


# -- scoring on matrices --------------------------------------------------------------------------


class Scorer:
    def __init__(self, ds: DocSet) -> None:
        self.ids = [d.id for d in ds.documents]
        col = {d: i for i, d in enumerate(self.ids)}
        self.col = col
        self.R = np.zeros((len(ds.queries), len(self.ids)), np.float32)
        for qi, q in enumerate(ds.queries):
            for d, g in q.relevant.items():
                self.R[qi, col[d]] = g
        disc = 1.0 / np.log2(np.arange(2, 12))
        ideal = -np.sort(-self.R, axis=1)[:, :10]
        self.idcg = (ideal * disc[: ideal.shape[1]]).sum(axis=1)
        self.disc = disc

    def ndcg(self, S: np.ndarray) -> np.ndarray:
        top = _top(S, 10)
        gains = np.take_along_axis(self.R, top, axis=1)
        return (gains * self.disc[: top.shape[1]]).sum(axis=1) / self.idcg

    def recall100(self, S: np.ndarray) -> np.ndarray:
        top = _top(S, DEPTH)
        hit = (np.take_along_axis(self.R, top, axis=1) > 0).sum(axis=1)
        return hit / (self.R > 0).sum(axis=1)


def _top(S: np.ndarray, k: int) -> np.ndarray:
    """Columns of the ``k`` best scores per row, best first (ties: column order)."""
    if S.shape[1] <= k:
        return np.argsort(-S, axis=1, kind="stable")
    part = np.argpartition(-S, k, axis=1)[:, :k]
    part.sort(axis=1)  # column order first, so the stable sort breaks ties by column
    order = np.argsort(-np.take_along_axis(S, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1)


def ranks(S: np.ndarray) -> np.ndarray:
    """1-based rank of every column per row (ties: column order); -inf scores rank after everything."""
    order = np.argsort(-S, axis=1, kind="stable")
    r = np.empty_like(order)
    np.put_along_axis(r, order, np.arange(1, S.shape[1] + 1)[None, :].repeat(S.shape[0], 0), axis=1)
    return r


def rrf(
    rank_mats: Sequence[np.ndarray],
    weights: Sequence[float],
    k: float,
    depth: int = DEPTH,
    valid: Sequence[np.ndarray | None] | None = None,
) -> np.ndarray:
    out = np.zeros(rank_mats[0].shape, np.float64)
    for i, (r, w) in enumerate(zip(rank_mats, weights, strict=True)):
        keep = r <= depth
        if valid is not None and valid[i] is not None:
            keep &= valid[i]
        out += np.where(keep, w / (k + r), 0.0)
    return out + 1e-12 * -rank_mats[0]  # ties: the first list's order


def zscore(S: np.ndarray) -> np.ndarray:
    finite = np.where(np.isfinite(S), S, np.nan)
    mu = np.nanmean(finite, axis=1, keepdims=True)
    sd = np.nanstd(finite, axis=1, keepdims=True) + 1e-9
    return np.where(np.isfinite(S), (S - mu) / sd, np.nanmin((finite - mu) / sd, axis=1, keepdims=True))


def minmax_top(S: np.ndarray, depth: int = DEPTH) -> np.ndarray:
    """LlamaIndex relative_score: min-max over the top ``depth``; outside the top, 0."""
    depth = min(depth, S.shape[1])
    top = -np.partition(-S, depth - 1, axis=1)[:, :depth]
    top = np.where(np.isfinite(top), top, np.nan)
    lo, hi = np.nanmin(top, axis=1, keepdims=True), np.nanmax(top, axis=1, keepdims=True)
    finite = np.isfinite(S) & (S >= lo)
    scaled = (np.where(finite, S, 0.0) - lo) / np.maximum(hi - lo, 1e-12)
    return np.where(finite, scaled, 0.0)


def group_max(S: np.ndarray, owner: np.ndarray, n: int, how: str = "max") -> np.ndarray:
    """Per-document aggregate of piece scores (columns of S are pieces, ``owner`` their document)."""
    order = np.argsort(owner, kind="stable")
    o = owner[order]
    starts = np.flatnonzero(np.r_[True, o[1:] != o[:-1]])
    docs = o[starts]
    Ss = S[:, order]
    out = np.full((S.shape[0], n), -np.inf, np.float32)
    if how == "max":
        out[:, docs] = np.maximum.reduceat(Ss, starts, axis=1)
    elif how == "mean":
        counts = np.diff(np.r_[starts, len(o)])
        out[:, docs] = np.add.reduceat(Ss, starts, axis=1) / counts
    return out


def hit_scores(groups_per_query: Sequence[Any], col: dict[str, int]) -> list[dict[int, list[float]]]:
    """Per query, each document's (column's) hit scores in the dumped product groups, best first."""
    out = []
    for groups in groups_per_query:
        per_doc: dict[int, list[float]] = {}
        for g in groups:
            for doc, score, _ in g:
                per_doc.setdefault(col[doc], []).append(score)
        out.append({c: sorted(ss, reverse=True) for c, ss in per_doc.items()})
    return out


# -- cross-validation -------------------------------------------------------------------------------


def cv(per_config: np.ndarray, folds: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Per-query held-out scores: for each fold, the config best on the other folds. ``per_config``: C × Q."""
    out = np.empty(per_config.shape[1])
    chosen = []
    for f in range(FOLDS):
        test = folds == f
        best = int(np.argmax(per_config[:, ~test].mean(axis=1)))
        chosen.append(best)
        out[test] = per_config[best, test]
    return out, chosen


def run(ds: DocSet, cache: str, dump_path: Path) -> None:
    t0 = time.monotonic()
    with open(dump_path, "rb") as fh:
        dmp = pickle.load(fh)
    sc = Scorer(ds)
    n = len(sc.ids)
    emb_model = None
    peers = build_peers(ds, _Model(dmp), cache)
    Q = dmp["qvec"]
    BM = np.stack([peers.bm25.scores(q.text)[0] for q in ds.queries]).astype(np.float32)
    BM_hit = BM > 0
    DD = Q @ peers.vectors.T
    from ctxret.evaluation.peers import BM25sPeer

    title_peer = BM25sPeer([d.title or "" for d in ds.documents])
    BT = np.stack([title_peer.scores(q.text)[0] for q in ds.queries]).astype(np.float32)
    owner = np.array([sc.col[d] for d in dmp["pieces"]["doc"]])
    P = dmp["pieces"]["vec"]
    SP = Q @ P.T
    PMAX = group_max(SP, owner, n, "max")
    PMEAN = group_max(SP, owner, n, "mean")
    piece_peer = BM25sPeer(dmp["pieces"]["text"])
    BMP = group_max(np.stack([piece_peer.scores(q.text)[0] for q in ds.queries]).astype(np.float32), owner, n)
    # a document vector the product could hold without another model pass: the unit mean of its pieces
    DV = np.zeros((n, P.shape[1]), np.float32)
    np.add.at(DV, owner, P)
    DV /= np.linalg.norm(DV, axis=1, keepdims=True) + 1e-12
    DMEAN = Q @ DV.T
    # the product's own hits: document scores under its rules
    prod = {rule: np.full((len(ds.queries), n), -np.inf, np.float32) for rule in ("max", "sum", "top2", "mean")}
    for qi, per_doc in enumerate(hit_scores(dmp["groups"], sc.col)):
        for c, ss in per_doc.items():
            prod["max"][qi, c] = ss[0]
            prod["sum"][qi, c] = sum(ss)
            prod["top2"][qi, c] = ss[1] if len(ss) > 1 else 0.0
            prod["mean"][qi, c] = sum(ss) / len(ss)
    print(f"signals ready ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    del emb_model

    folds = np.random.default_rng(0).permutation(len(ds.queries)) % FOLDS
    R_BM, R_DD, R_PMAX, R_DMEAN, R_PROD = ranks(BM), ranks(DD), ranks(PMAX), ranks(DMEAN), ranks(prod["max"])
    prod_valid = np.isfinite(prod["max"])
    peer = {
        "peer_bm25s": sc.ndcg(np.where(BM_hit, BM, -np.inf)),
        "peer_dense": sc.ndcg(DD),
        "peer_ensemble_rrf": sc.ndcg(rrf([R_BM, R_DD], [0.5, 0.5], 60, valid=[BM_hit, None])),
        "peer_query_fusion": sc.ndcg(0.5 * minmax_top(DD) + 0.5 * minmax_top(np.where(BM_hit, BM, -np.inf))),
    }
    best_peer = max(peer, key=lambda p: peer[p].mean())
    base = peer[best_peer]
    rows: list[dict[str, Any]] = []

    def family(name: str, configs: list[tuple[str, Callable[[], np.ndarray]]]) -> None:
        mats = np.stack([sc.ndcg(fn()) for _, fn in configs])
        held, chosen = cv(mats, folds)
        dev = int(np.argmax(mats.mean(axis=1)))
        d = paired_diff(held, base)
        b = stratified_bootstrap(held, base, [0] * len(held))
        dd = paired_diff(mats[dev], base)
        rows.append(
            {
                "variant": name,
                "configs": len(configs),
                "dev_best": configs[dev][0],
                "dev_ndcg": mats[dev].mean(),
                "dev_diff": dd.fmt(),
                "cv_ndcg": held.mean(),
                "cv_diff": d.fmt(),
                "cv_boot": b.fmt(),
                "cv_choice": sorted({configs[c][0] for c in chosen}),
            }
        )
        r = rows[-1]
        print(
            f"{name:34s} dev {100 * r['dev_ndcg']:.1f} {r['dev_diff']:>22s} | CV {100 * r['cv_ndcg']:.1f} "
            f"{r['cv_diff']:>22s} boot {r['cv_boot']:>22s}  [{r['dev_best']}] cv-picks {r['cv_choice']}",
            flush=True,
        )

    for p, v in peer.items():
        print(f"{p:34s} {100 * v.mean():.1f}")
    print(f"best peer: {best_peer}")
    family("hybrid_default (max, product)", [("max", lambda: prod["max"])])
    family(
        "product rule: sum / top2 / mean",
        [
            (f"max+{a}*{r}", (lambda a=a, r=r: prod["max"] + a * np.where(np.isfinite(prod[r]), prod[r], 0)))
            for r in ("sum", "top2", "mean")
            for a in (0.1, 0.25, 0.5, 1.0)
        ],
    )
    family("dense piece-max", [("pmax", lambda: PMAX)])
    family("dense piece-max + a*mean", [(f"a={a}", lambda a=a: PMAX + a * PMEAN) for a in (0.1, 0.25, 0.5, 1.0)])
    family("dense doc-mean vector", [("dmean", lambda: DMEAN)])
    ks = (10, 20, 40, 60, 100)
    ws = (0.3, 0.4, 0.5, 0.6, 0.7)
    family(
        "RRF product + doc BM25",
        [
            (f"wlex={w},k={k}", lambda w=w, k=k: rrf([R_PROD, R_BM], [1 - w, w], k, valid=[prod_valid, BM_hit]))
            for w in ws
            for k in ks
        ],
    )
    family(
        "RRF piece-max dense + doc BM25",
        [
            (f"wlex={w},k={k}", lambda w=w, k=k: rrf([R_PMAX, R_BM], [1 - w, w], k, valid=[None, BM_hit]))
            for w in ws
            for k in ks
        ],
    )
    family(
        "RRF pmax + whole-doc dense + BM25",
        [
            (f"w={w},k={k}", lambda w=w, k=k: rrf([R_PMAX, R_DD, R_BM], list(w), k, valid=[None, None, BM_hit]))
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4) for b in (0.1, 0.2, 0.3)]
            for k in ks
        ],
    )
    family(
        "RRF pmax + doc-mean + BM25",
        [
            (f"w={w},k={k}", lambda w=w, k=k: rrf([R_PMAX, R_DMEAN, R_BM], list(w), k, valid=[None, None, BM_hit]))
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4) for b in (0.1, 0.2, 0.3)]
            for k in ks
        ],
    )
    family(
        "RRF product + whole-doc dense + BM25",
        [
            (f"w={w},k={k}", lambda w=w, k=k: rrf([R_PROD, R_DD, R_BM], list(w), k, valid=[prod_valid, None, BM_hit]))
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4) for b in (0.1, 0.2, 0.3)]
            for k in ks
        ],
    )
    zb, zp, zd, zm = zscore(np.where(BM_hit, BM, 0)), zscore(PMAX), zscore(DD), zscore(DMEAN)
    family("z-score pmax + BM25", [(f"wlex={w}", lambda w=w: (1 - w) * zp + w * zb) for w in (0.2, 0.3, 0.4, 0.5, 0.6)])
    family(
        "z-score pmax + doc dense + BM25",
        [
            (f"w={w}", lambda w=w: w[0] * zp + w[1] * zd + w[2] * zb)
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4, 0.5) for b in (0.1, 0.2, 0.3)]
        ],
    )
    family(
        "z-score pmax + doc-mean + BM25",
        [
            (f"w={w}", lambda w=w: w[0] * zp + w[1] * zm + w[2] * zb)
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4, 0.5) for b in (0.1, 0.2, 0.3)]
        ],
    )
    zt, zbp = zscore(BT), zscore(BMP)
    family(
        "z-score pmax + piece-BM25 max",
        [(f"wlex={w}", lambda w=w: (1 - w) * zp + w * zbp) for w in (0.2, 0.3, 0.4, 0.5, 0.6)],
    )
    family(
        "z-score pmax + BM25 + title BM25",
        [
            (f"w={w}", lambda w=w: w[0] * zp + w[1] * zb + w[2] * zt)
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.4, 0.5, 0.6) for b in (0.2, 0.3, 0.4)]
            if w[2] >= 0
        ],
    )
    family(
        "z-score pmax + doc dense + BM25 + title",
        [
            (f"w={w}", lambda w=w: w[0] * zp + w[1] * zd + w[2] * zb + w[3] * zt)
            for w in [
                (a, b, c, round(1 - a - b - c, 2)) for a in (0.3, 0.4, 0.5) for b in (0.1, 0.2) for c in (0.2, 0.3)
            ]
            if w[3] >= 0
        ],
    )
    family(
        "convex min-max pmax + BM25",
        [
            (f"wlex={w}", lambda w=w: (1 - w) * minmax_top(PMAX) + w * minmax_top(np.where(BM_hit, BM, -np.inf)))
            for w in (0.2, 0.3, 0.4, 0.5, 0.6)
        ],
    )

    small_ks = (1, 2, 3, 5, 10)
    family(
        "RRF pmax + whole-doc dense + BM25, small k",
        [
            (f"w={w},k={k}", lambda w=w, k=k: rrf([R_PMAX, R_DD, R_BM], list(w), k, valid=[None, None, BM_hit]))
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4) for b in (0.1, 0.2, 0.3)]
            for k in small_ks
        ],
    )
    family(
        "RRF product + whole-doc dense + BM25, small k",
        [
            (f"w={w},k={k}", lambda w=w, k=k: rrf([R_PROD, R_DD, R_BM], list(w), k, valid=[prod_valid, None, BM_hit]))
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.2, 0.3, 0.4) for b in (0.1, 0.2, 0.3)]
            for k in small_ks
        ],
    )
    zprod = zscore(prod["max"])
    family(
        "z-score product + whole-doc dense + BM25",
        [
            (f"w={w}", lambda w=w: w[0] * zprod + w[1] * zd + w[2] * zb)
            for w in [(a, b, round(1 - a - b, 2)) for a in (0.3, 0.4, 0.5, 0.6) for b in (0.1, 0.2, 0.3)]
        ],
    )
    family(
        "z-score pmax + whole-doc dense + BM25, fine",
        [
            (f"w={w}", lambda w=w: w[0] * zp + w[1] * zd + w[2] * zb)
            for w in [
                (a, b, round(1 - a - b, 2)) for a in (0.35, 0.4, 0.45, 0.5, 0.55, 0.6) for b in (0.1, 0.15, 0.2, 0.25)
            ]
        ],
    )

    # dense PRF (Rocchio on the query vector from the top documents of a first-pass fusion)
    first = 0.7 * zp + 0.3 * zb
    top = _top(first, 10)

    def rocchio(beta: float, m: int, wlex: float) -> np.ndarray:
        centroid = DV[top[:, :m]].mean(axis=1)
        q2 = Q + beta * centroid
        q2 /= np.linalg.norm(q2, axis=1, keepdims=True)
        pm = group_max(q2 @ P.T, owner, n, "max")
        return (1 - wlex) * zscore(pm) + wlex * zb

    family(
        "z-score pmax(Rocchio q) + BM25",
        [
            (f"beta={b},m={m},wlex={w}", lambda b=b, m=m, w=w: rocchio(b, m, w))
            for b in (0.25, 0.5, 1.0)
            for m in (3, 5, 10)
            for w in (0.3, 0.4)
        ],
    )

    out = dump_path.with_name("variants-rows.pkl")
    with open(out, "wb") as fh:
        pickle.dump({"rows": rows, "peer": {k: float(v.mean()) for k, v in peer.items()}}, fh)
    print(f"done ({time.monotonic() - t0:.0f} s); rows in {out}", file=sys.stderr)


class _Model:
    """Stands in for the embedder when the peers' vectors are already cached (model id and dims only)."""

    def __init__(self, dmp: dict[str, Any]) -> None:
        self.model_id = "local:all-MiniLM-L6-v2-onnx-int8"
        self.dims = int(dmp["qvec"].shape[1])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        raise RuntimeError("the peers' document vectors are not cached: run `ctxret eval docs` first")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("subset", "dump", "run"))
    ap.add_argument("path")
    ap.add_argument("--split", default="test")
    ap.add_argument("--cache", default="/tmp/docs-cache")
    ap.add_argument("--out", default="/tmp/docs-subset", help="subset: the folder to write")
    args = ap.parse_args(argv)
    if args.command == "subset":
        subset(Path(args.path), args.split, Path(args.out))
        return 0
    ds = load_docs(args.path, split=args.split)
    dump_path = Path(args.cache) / "variants-dump.pkl"
    if args.command == "dump":
        dump(ds, args.cache, dump_path)
    else:
        run(ds, args.cache, dump_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
