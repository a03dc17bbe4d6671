"""The documents protocol: a BEIR-layout set (or your own folder of markdown) with the peers inside the run.

``ctxret eval docs PATH`` reads either

* the BEIR layout (Thakur et al. 2021): ``corpus.jsonl`` (``{"_id", "title"?, "text"}`` a line),
  ``queries.jsonl`` (``{"_id", "text"}``) and ``qrels/<split>.tsv`` (``query-id  corpus-id  score``,
  tab-separated, with or without a header line; a score ≤ 0 is not relevant); or
* a folder of ``.md`` / ``.txt`` files (searched recursively; a document's id is its path relative
  to the folder, ``/``-separated) with a queries file (default ``queries.jsonl`` in the folder): one
  ``{"query": "...", "relevant": ["file.md", ...]}`` a line (``"id"`` optional).

Qrels or ``relevant`` entries naming a document or query that is not there are dropped and counted
(the report prints the counts); a query left with no relevant document is not scored.

Systems, all on the same embedder in the same run

* ``hybrid_default`` — the product: the corpus indexed by :class:`ctxret.ContextualIndex` (its own
  write path, each document its own scope, an embedded Chroma folder under the cache directory so a
  rerun re-embeds nothing), searched unscoped by :meth:`ctxret.ContextualIndex.search` with the
  index's own default settings and ``per="document"`` (``k`` = the depth in documents):
  exactly the per-document result a user gets, scored by the default rule of
  :func:`ctxret.query.documents.rank_documents` (printed in the report); ``--rule`` (an ablation)
  ranks the ``k`` = depth piece groups instead.
* ``peer_bm25s`` — LlamaIndex's ``BM25Retriever`` settings (bm25s, Snowball English stemmer via
  PyStemmer, English stopwords; :class:`.peers.BM25sPeer`) over whole documents (title, a blank line,
  text).
* ``peer_dense`` — one vector per document (title, a blank line, text) cut to the model's window, as
  sentence-transformers does, exact cosine against the whole query.
* ``peer_ensemble_rrf`` — LangChain ``EnsembleRetriever([bm25, dense], weights=[0.5, 0.5], c=60)``
  over each side's top ``depth``.
* ``peer_query_fusion`` — LlamaIndex ``QueryFusionRetriever`` ``mode="relative_score"``, weights
  0.5/0.5, over each side's top ``depth`` (min-max per retriever).

Metrics per query (means over scored queries): ``ndcg_at_10`` (graded gains, ``log2`` discount, the
BEIR/pytrec_eval definition), ``recall_at_10``, ``recall_at_100``, ``mrr_at_10`` and equal-budget
recall ``recall_2kb`` / ``recall_8kb``: the ranked documents are taken whole (their UTF-8 bytes,
title and text) while the running total stays within 2,000 / 8,000 bytes, stopping at the first that
does not fit, and the share of relevant documents among them is the score.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from .peers import BM25sPeer, ensemble_rrf, relative_score_fusion
from .stats import paired_diff, stratified_bootstrap

__all__ = [
    "DEPTH",
    "DocQuery",
    "DocSet",
    "Document",
    "DocsResult",
    "budget_recall_docs",
    "load_beir",
    "load_docs",
    "load_folder",
    "mrr_at",
    "ndcg_at",
    "recall_at",
    "run_docs",
]

logger = logging.getLogger(__name__)

#: Documents each system ranks per query (recall@100 needs 100).
DEPTH = 100
#: The equal-budget recall budgets, in bytes of returned documents.
BUDGETS = (2000, 8000)
PEERS = ("peer_bm25s", "peer_dense", "peer_ensemble_rrf", "peer_query_fusion")
DEFAULT_CACHE = os.path.join(tempfile.gettempdir(), "ctxret-eval-docs")


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    title: str | None = None

    @property
    def full_text(self) -> str:
        """Title, a blank line, text: what the peers index."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text

    @property
    def nbytes(self) -> int:
        return len(self.full_text.encode("utf-8"))


@dataclass(frozen=True)
class DocQuery:
    id: str
    text: str
    #: Relevant document id → graded relevance (> 0).
    relevant: Mapping[str, float]


@dataclass
class DocSet:
    source: str
    documents: list[Document]
    queries: list[DocQuery]
    #: Problems repaired on reading (``{"qrels naming a missing document": 3, ...}``).
    notes: dict[str, int] = field(default_factory=dict)


# -- reading --------------------------------------------------------------------------------------


def _jsonl(path: Path) -> Iterable[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not a JSON line ({exc.msg}); one JSON object a line") from None
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def read_qrels(path: Path) -> dict[str, dict[str, float]]:
    """``qrels/<split>.tsv``: ``query-id  corpus-id  score`` lines (a header line is skipped)."""
    out: dict[str, dict[str, float]] = {}
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            cols = line.rstrip("\r\n").split("\t")
            if not line.strip():
                continue
            if len(cols) == 4:  # TREC style: qid 0 docid score
                cols = [cols[0], cols[2], cols[3]]
            if len(cols) != 3:
                raise InputError(f"{path}:{lineno}: expected 'query-id<TAB>corpus-id<TAB>score', got {line.strip()!r}")
            try:
                score = float(cols[2])
            except ValueError:
                if lineno == 1:  # the header line BEIR ships
                    continue
                raise InputError(f"{path}:{lineno}: the score {cols[2]!r} is not a number") from None
            if score > 0:
                out.setdefault(cols[0].strip(), {})[cols[1].strip()] = score
    return out


def load_beir(path: str | os.PathLike[str], split: str = "test") -> DocSet:
    """A BEIR folder: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``."""
    root = Path(path)
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (root / name).is_file():
            raise InputError(f"{root}: no {name}; a BEIR folder holds corpus.jsonl, queries.jsonl, qrels/<split>.tsv")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        have = sorted(p.stem for p in (root / "qrels").glob("*.tsv")) if (root / "qrels").is_dir() else []
        hint = f"; this folder has --split {', '.join(have)}" if have else ""
        raise InputError(f"{root}: no qrels/{split}.tsv{hint}")
    docs: list[Document] = []
    seen: set[str] = set()
    for lineno, obj in _jsonl(root / "corpus.jsonl"):
        doc_id, text = obj.get("_id"), obj.get("text")
        if doc_id is None or not isinstance(text, str):
            raise InputError(f"{root / 'corpus.jsonl'}:{lineno}: a corpus line needs '_id' and a string 'text'")
        doc_id = str(doc_id)
        if doc_id in seen:
            raise InputError(f"{root / 'corpus.jsonl'}:{lineno}: the document id {doc_id!r} appears twice")
        seen.add(doc_id)
        title = obj.get("title")
        docs.append(Document(doc_id, text, title if isinstance(title, str) and title.strip() else None))
    texts: dict[str, str] = {}
    for lineno, obj in _jsonl(root / "queries.jsonl"):
        if obj.get("_id") is None or not isinstance(obj.get("text"), str):
            raise InputError(f"{root / 'queries.jsonl'}:{lineno}: a query line needs '_id' and a string 'text'")
        texts[str(obj["_id"])] = obj["text"]
    qrels = read_qrels(qrels_path)
    notes: dict[str, int] = {}
    queries: list[DocQuery] = []
    missing_queries = sum(1 for q in qrels if q not in texts)
    if missing_queries:
        notes["qrels naming a query not in queries.jsonl"] = missing_queries
    missing_docs = 0
    for qid, text in texts.items():  # queries.jsonl order
        if qid not in qrels:
            continue
        rel = {d: s for d, s in qrels[qid].items() if d in seen}
        missing_docs += len(qrels[qid]) - len(rel)
        if rel:
            queries.append(DocQuery(qid, text, rel))
        else:
            _count(notes, "queries left with no relevant document")
    if missing_docs:
        notes["qrels naming a document not in corpus.jsonl"] = missing_docs
    return _checked(DocSet(f"{root} ({split})", docs, queries, notes))


def load_folder(path: str | os.PathLike[str], queries: str | os.PathLike[str] | None = None) -> DocSet:
    """A folder of ``.md`` / ``.txt`` documents and a JSONL queries file (default ``PATH/queries.jsonl``)."""
    root = Path(path)
    qpath = Path(queries) if queries is not None else root / "queries.jsonl"
    if not qpath.is_file():
        raise InputError(
            f"{qpath}: no queries file; give --queries FILE (JSONL, one "
            '{"query": "...", "relevant": ["file.md", ...]} a line)'
        )
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in (".md", ".txt"))
    docs = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        docs.append(Document(p.relative_to(root).as_posix(), text, None))
    if not docs:
        raise InputError(f"{root}: no .md or .txt files")
    ids = {d.id for d in docs}
    notes: dict[str, int] = {}
    out: list[DocQuery] = []
    for lineno, obj in _jsonl(qpath):
        query, rel = obj.get("query"), obj.get("relevant")
        if not isinstance(query, str) or not isinstance(rel, list) or not all(isinstance(r, str) for r in rel):
            raise InputError(f'{qpath}:{lineno}: expected {{"query": "...", "relevant": ["file.md", ...]}}')
        keep = dict.fromkeys((Path(r).as_posix() for r in rel), 1.0)  # "./a.md" is "a.md"
        found = {r: 1.0 for r in keep if r in ids}
        if len(found) < len(keep):
            _count(notes, "relevant files not in the folder", len(keep) - len(found))
        if not found:
            _count(notes, "queries left with no relevant document")
            continue
        out.append(DocQuery(str(obj.get("id", f"q{lineno}")), query, found))
    return _checked(DocSet(str(root), docs, out, notes))


def _count(notes: dict[str, int], what: str, n: int = 1) -> None:
    notes[what] = notes.get(what, 0) + n


def _checked(ds: DocSet) -> DocSet:
    if not ds.queries:
        raise InputError(f"{ds.source}: no query has a relevant document that is in the corpus; nothing to score")
    return ds


def load_docs(path: str | os.PathLike[str], *, split: str = "test", queries: str | None = None) -> DocSet:
    """:func:`load_beir` when ``PATH/corpus.jsonl`` exists, else :func:`load_folder`."""
    root = Path(path)
    if not root.is_dir():
        raise InputError(f"{root}: not a folder (a BEIR folder, or a folder of .md/.txt files with a queries file)")
    if (root / "corpus.jsonl").is_file():
        return load_beir(root, split)
    return load_folder(root, queries)


# -- metrics --------------------------------------------------------------------------------------


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, float], k: int = 10) -> float:
    """nDCG@k with graded gains and a ``log2(rank + 1)`` discount (pytrec_eval's ``ndcg_cut``).

    >>> round(ndcg_at(["a", "b", "c"], {"b": 1}), 4)
    0.6309
    """
    dcg = sum(relevant.get(d, 0.0) / math.log2(r + 1) for r, d in enumerate(ranked[:k], start=1))
    ideal = sorted(relevant.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(r + 1) for r, g in enumerate(ideal, start=1))
    return dcg / idcg if idcg > 0 else math.nan


def recall_at(ranked: Sequence[str], relevant: Mapping[str, float], k: int) -> float:
    """Share of the relevant documents in the top ``k``.

    >>> recall_at(["a", "b", "c"], {"c": 1, "z": 1}, 3)
    0.5
    """
    return len(set(ranked[:k]) & set(relevant)) / len(relevant) if relevant else math.nan


def mrr_at(ranked: Sequence[str], relevant: Mapping[str, float], k: int = 10) -> float:
    """1 / rank of the first relevant document in the top ``k`` (0 when none is).

    >>> mrr_at(["a", "b", "c"], {"c": 1})
    0.3333333333333333
    """
    for r, d in enumerate(ranked[:k], start=1):
        if d in relevant:
            return 1.0 / r
    return 0.0


def budget_recall_docs(
    ranked: Sequence[str], relevant: Mapping[str, float], nbytes: Mapping[str, int], budget: int
) -> float:
    """Share of relevant documents among the ranked ones taken whole within ``budget`` bytes
    (stopping at the first that does not fit).

    >>> budget_recall_docs(["a", "b", "c"], {"b": 1, "c": 1}, {"a": 900, "b": 900, "c": 900}, 2000)
    0.5
    """
    used, found = 0, 0
    for d in ranked:
        used += int(nbytes[d])
        if used > budget:
            break
        found += d in relevant
    return found / len(relevant) if relevant else math.nan


METRICS = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "recall_2kb", "recall_8kb")


def score_ranking(ranked: Sequence[str], q: DocQuery, nbytes: Mapping[str, int]) -> dict[str, float]:
    return {
        "ndcg_at_10": ndcg_at(ranked, q.relevant, 10),
        "recall_at_10": recall_at(ranked, q.relevant, 10),
        "recall_at_100": recall_at(ranked, q.relevant, 100),
        "mrr_at_10": mrr_at(ranked, q.relevant, 10),
        "recall_2kb": budget_recall_docs(ranked, q.relevant, nbytes, BUDGETS[0]),
        "recall_8kb": budget_recall_docs(ranked, q.relevant, nbytes, BUDGETS[1]),
    }


# -- the product: its write path and its search ----------------------------------------------------


def corpus_key(ds: DocSet, model_id: str) -> str:
    """A short hash of the documents (in any order) and the model: the cache folder's name."""
    h = hashlib.sha256(model_id.encode())
    for d in sorted(ds.documents, key=lambda d: d.id):  # the same documents in another order: the same cache
        h.update(f"\x00{d.id}\x01{d.title or ''}\x02{d.text}".encode("utf-8", "replace"))
    return h.hexdigest()[:16]


def product_documents(ds: DocSet) -> list[dict[str, Any]]:
    """The documents as :meth:`ctxret.ContextualIndex.add_documents` takes them (id, title, text)."""
    out = []
    for d in ds.documents:
        doc: dict[str, Any] = {"id": d.id, "text": d.text}
        if d.title:
            doc["title"] = d.title
        out.append(doc)
    return out


def open_product_index(
    ds: DocSet, embedder: Any, cache_dir: str | None, *, batch: int = 250, progress: bool = False
) -> Any:
    """The corpus in a :class:`ctxret.ContextualIndex`, written by its own write path (each document
    its own scope). ``cache_dir``: an embedded Chroma folder there is reused (unchanged documents cost
    nothing); ``None``: an in-memory store."""
    from ..index import ContextualIndex

    if cache_dir is None:
        index = ContextualIndex(in_memory=True, embedder=embedder)
    else:
        folder = Path(cache_dir) / f"index-{corpus_key(ds, embedder.model_id)}"
        folder.parent.mkdir(parents=True, exist_ok=True)
        index = ContextualIndex(folder, embedder=embedder)
    docs = product_documents(ds)
    if cache_dir is not None and index.stats().get("threads", 0) == len({d["id"] for d in docs}):
        return index  # complete from an earlier run
    t0 = time.monotonic()
    for start in range(0, len(docs), batch):
        index.add_documents(docs[start : start + batch])
        if progress:
            done = min(start + batch, len(docs))
            print(f"  indexed {done:,}/{len(docs):,} documents ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
    return index


def product_groups(index: Any, query: str, depth: int = DEPTH) -> list[Any]:
    """The product's groups for one query: :meth:`ctxret.ContextualIndex.search`, unscoped, ``k=depth``,
    the index's own default settings."""
    return index.search(query, k=depth)


def product_document_ranking(index: Any, query: str, depth: int = DEPTH) -> list[str]:
    """The product's document ranking for one query, exactly as search returns it:
    ``search(query, k=depth, per="document")`` (one hit per document in each part's group, scored by
    :data:`ctxret.query.documents.DEFAULT_RULE`); a document found by two parts ranks by its better score."""
    from ..query.documents import rank_documents

    groups = index.search(query, k=depth, per="document")
    return [d.doc_id for d in rank_documents(groups, rule="max", k=depth)]


def product_ranking(groups: Sequence[Any], *, rule: str | None = None, depth: int = DEPTH, **kw: Any) -> list[str]:
    """Document ids of the product's groups, ranked by :func:`ctxret.query.documents.rank_documents`."""
    from ..query.documents import DEFAULT_RULE, rank_documents

    return [d.doc_id for d in rank_documents(groups, rule=rule or DEFAULT_RULE, k=depth, **kw)]


# -- the peers ------------------------------------------------------------------------------------


def truncating(embedder: Any) -> Any:
    """The embedder cutting each text to the model's window (keeping the start), as sentence-transformers
    does; an embedder without a ``truncate`` switch is returned as it is (a hosted model's window is wide)."""
    if hasattr(embedder, "truncate"):
        cut = copy.copy(embedder)  # shares the loaded model
        cut.truncate = True
        return cut
    inner = getattr(embedder, "inner", None)
    return truncating(inner) if inner is not None else embedder


def peer_document_vectors(ds: DocSet, embedder: Any, cache_dir: str | None) -> np.ndarray:
    """One unit vector per document (title and text, cut to the model's window), in ``ds.documents`` order;
    cached as ``.npz`` (ids and vectors) under ``cache_dir``."""
    path = None
    ids = [d.id for d in ds.documents]
    if cache_dir is not None:
        path = Path(cache_dir) / f"peer-dense-{corpus_key(ds, embedder.model_id)}.npz"
        if path.is_file():
            with np.load(path) as saved:
                row = {str(d): i for i, d in enumerate(saved["ids"])}
                if set(row) == set(ids) and saved["vectors"].shape[1] == int(embedder.dims):
                    return np.asarray(saved["vectors"][[row[d] for d in ids]], dtype=np.float32)
    cut = truncating(embedder)
    quiet = logging.getLogger("ctxret.embedders.local")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # one truncation warning per batch otherwise
    try:
        vecs = np.asarray(cut.embed([d.full_text for d in ds.documents]), dtype=np.float32)
    finally:
        quiet.setLevel(level)
    if path is not None:
        np.savez(path, ids=np.array(ids), vectors=vecs)
    return vecs


@dataclass
class Peers:
    """The peers' sides over whole documents: BM25 (bm25s settings) and one vector per document."""

    ids: list[str]
    bm25: BM25sPeer
    vectors: np.ndarray

    def bm25_top(self, query: str, depth: int = DEPTH) -> list[tuple[int, float]]:
        return self.bm25.search(query, depth)

    def dense_top(self, qvec: np.ndarray, depth: int = DEPTH) -> list[tuple[int, float]]:
        sims = self.vectors @ qvec
        top = np.argsort(-sims, kind="stable")[:depth]
        return [(int(i), float(sims[i])) for i in top]

    def rankings(self, query: str, qvec: np.ndarray, depth: int = DEPTH) -> dict[str, list[str]]:
        lex = self.bm25_top(query, depth)
        den = self.dense_top(qvec, depth)
        rrf = ensemble_rrf([[i for i, _ in lex], [i for i, _ in den]], (0.5, 0.5), 60.0)
        rel = relative_score_fusion([den, lex], (0.5, 0.5))
        name = self.ids.__getitem__
        return {
            "peer_bm25s": [name(i) for i, _ in lex],
            "peer_dense": [name(i) for i, _ in den],
            "peer_ensemble_rrf": [name(i) for i, _ in rrf[:depth]],
            "peer_query_fusion": [name(i) for i, _ in rel[:depth]],
        }


def build_peers(ds: DocSet, embedder: Any, cache_dir: str | None) -> Peers:
    return Peers(
        [d.id for d in ds.documents],
        BM25sPeer([d.full_text for d in ds.documents]),
        peer_document_vectors(ds, embedder, cache_dir),
    )


# -- the run --------------------------------------------------------------------------------------


@dataclass
class DocsResult:
    rows: list[dict[str, Any]]
    config: dict[str, Any]
    #: System → metric → per-query values (queries in ``config["query_ids"]`` order).
    per_query: dict[str, dict[str, list[float]]]
    #: System → per-query ranked document ids.
    rankings: dict[str, list[list[str]]]


def peer_comparison(
    per_query: Mapping[str, Mapping[str, Sequence[float]]], system: str = "hybrid_default", *, reps: int = 2000
) -> list[dict[str, Any]]:
    """``system`` against each peer, paired per query: mean difference with normal and bootstrap 95% intervals."""
    out = []
    for peer in PEERS:
        if peer not in per_query or system not in per_query:
            continue
        row: dict[str, Any] = {"peer": peer}
        for m in METRICS:
            a, b = per_query[system][m], per_query[peer][m]
            row[m] = {
                "normal": paired_diff(a, b).as_dict(),
                "bootstrap": stratified_bootstrap(a, b, [0] * len(a), reps=reps).as_dict(),
            }
        out.append(row)
    return out


def run_docs(
    ds: DocSet,
    embedder: Any,
    *,
    cache_dir: str | None = DEFAULT_CACHE,
    depth: int = DEPTH,
    rule: str | None = None,
    limit_queries: int | None = None,
    progress: bool = False,
    extra: Mapping[str, Callable[[Any, DocQuery, list[Any]], list[str]]] | None = None,
) -> DocsResult:
    """Every system on every query of ``ds``; ``extra``: more systems ``(index, query, groups) → ranked ids``."""
    from ..query.documents import DEFAULT_RULE, describe_rule

    queries = ds.queries[:limit_queries] if limit_queries else ds.queries
    t0 = time.monotonic()
    index = open_product_index(ds, embedder, cache_dir, progress=progress)
    try:
        if progress:
            print(f"  product index ready ({time.monotonic() - t0:.0f} s); peers...", file=sys.stderr)
        peers = build_peers(ds, embedder, cache_dir)
        qvecs = np.asarray(embedder.embed([q.text for q in queries]), dtype=np.float32)  # the whole query, unsplit
        nbytes = {d.id: d.nbytes for d in ds.documents}
        systems = ["hybrid_default", *PEERS, *(extra or {})]
        per_query: dict[str, dict[str, list[float]]] = {s: {m: [] for m in METRICS} for s in systems}
        rankings: dict[str, list[list[str]]] = {s: [] for s in systems}
        for n, (q, qv) in enumerate(zip(queries, qvecs, strict=True), start=1):
            # the default rule: the product's own per-document result; another rule (an ablation), or extra systems,
            # read the piece groups
            groups = product_groups(index, q.text, depth) if rule is not None or extra else []
            if rule is None:
                ranked = {"hybrid_default": product_document_ranking(index, q.text, depth)}
            else:
                ranked = {"hybrid_default": product_ranking(groups, rule=rule, depth=depth)}
            ranked.update(peers.rankings(q.text, qv, depth))
            for name, fn in (extra or {}).items():
                ranked[name] = fn(index, q, groups)[:depth]
            for name in systems:
                rankings[name].append(ranked[name])
                for m, v in score_ranking(ranked[name], q, nbytes).items():
                    per_query[name][m].append(v)
            if progress and n % 100 == 0:
                print(f"  {n}/{len(queries)} queries ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        stats = index.stats()
    finally:
        index.close()
    rows = [{"system": s, **{m: float(np.nanmean(per_query[s][m])) for m in METRICS}} for s in systems]
    config = {
        "source": ds.source,
        "embedder": getattr(embedder, "model_id", type(embedder).__name__),
        "documents": len(ds.documents),
        "queries": len(queries),
        "pieces": stats.get("pieces"),
        "depth": depth,
        "notes": dict(ds.notes),
        "index_config": stats.get("config"),
        "document_rule": describe_rule(rule or DEFAULT_RULE),
        "fusion": index.settings.hybrid.for_per("piece" if rule is not None else "document").label,
        "query_ids": [q.id for q in queries],
        "peer_comparison": peer_comparison(per_query),
    }
    return DocsResult(rows, config, per_query, rankings)


def docs_table(rows: Sequence[Mapping[str, Any]]) -> str:
    from .report import markdown_table

    heads = ["system", "nDCG@10", "R@10", "R@100", "MRR@10", "R (2 KB)", "R (8 KB)"]
    body = [[r["system"], *(f"{100 * r[m]:.1f}" for m in METRICS)] for r in rows]
    return markdown_table(heads, body, ["l"] + ["r"] * 6)


def docs_peer_table(comparison: Sequence[Mapping[str, Any]]) -> str:
    from .report import markdown_table
    from .stats import Diff

    heads = [
        "hybrid_default − peer",
        "nDCG@10 (normal)",
        "nDCG@10 (bootstrap)",
        "R@100 (normal)",
        "MRR@10 (normal)",
        "R 8 KB (normal)",
    ]
    body = []
    cols = (
        ("ndcg_at_10", "normal"),
        ("ndcg_at_10", "bootstrap"),
        ("recall_at_100", "normal"),
        ("mrr_at_10", "normal"),
        ("recall_8kb", "normal"),
    )
    for row in comparison:
        body.append([row["peer"], *(Diff(**row[m][kind]).fmt() for m, kind in cols)])
    return markdown_table(heads, body, ["l"] + ["r"] * 5)
