"""Thread-scoped search from memory: a thread's pieces are read once, then searched exactly.

Chroma answers ``where={"thread_id": X}`` inside its HNSW index with an allow-list, and at 0.1–1%
selectivity that walk is as slow as reading everything (measured: 0.7–0.9 s per 8-part search at
100K pieces). A thread is small (typically tens to a few thousand pieces), so reading its pieces
once (one filtered ``get``, ~40 ms at 100K) and searching them with numpy is exact and takes
microseconds afterwards. :class:`ThreadCache` keeps recently searched threads (least recently used
out, bounded in pieces); every write, delete or rebuild through the store drops the threads it
touched, so a search never sees stale pieces. :class:`ScopeView` serves one search over the
scope's blocks: dense top-``n`` (exact cosine), fetch, parents, and BM25 with the scope's own
statistics (:class:`~ctxret.storage.bm25.BM25Corpus`), with a caller's ``where`` filter applied
on the metadata (:mod:`.where`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import CtxretError, InputError, StoreError
from .base import Fetched, Row
from .bm25 import BM25Corpus
from .schema import ParentKey, Scope
from .tokenize import Analysis
from .visibility import InFlight
from .where import compile_where

if TYPE_CHECKING:
    from .base import VectorBackend
    from .lexical import LexicalIndex

__all__ = ["Block", "ScopeView", "ThreadCache", "DEFAULT_CACHE_PIECES", "read_thread", "top_n"]

#: Pieces the cache holds at most (about 150 MB of 384-d float32 vectors, plus texts).
DEFAULT_CACHE_PIECES = 100_000
#: Reads of one thread before giving up when a write of it begins during every one.
_READ_ATTEMPTS = 50


def top_n(scores: np.ndarray, n: int) -> np.ndarray:
    """The rows of the ``n`` highest ``scores``, best first, ties in row order: exactly
    ``np.argsort(-scores, kind="stable")[:n]``, without sorting every row (a partition finds the
    ``n``-th score; only the rows at or above it are sorted)."""
    m = len(scores)
    if n >= m or n < 1:
        return np.argsort(-scores, kind="stable")[: max(n, 0)]
    kth = np.partition(scores, m - n)[m - n]  # the n-th highest
    rows = np.flatnonzero(scores >= kth)  # at least n, in row order (fewer only with NaN scores)
    if len(rows) < n:  # NaN: never with stored vectors; argsort puts it last
        return np.argsort(-scores, kind="stable")[:n]
    return rows[np.argsort(-scores[rows], kind="stable")][:n]


class Block:
    """One thread's pieces: ids, stored vectors, documents and metadata, in a fixed order."""

    __slots__ = ("ids", "vectors", "documents", "metadatas", "_tokens", "_bm25", "_row", "_parents")

    def __init__(
        self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
    ) -> None:
        self.ids = list(ids)
        self.vectors = (
            np.asarray(vectors, dtype=np.float32).reshape(len(self.ids), -1)
            if len(self.ids)
            else np.zeros((0, 0), np.float32)
        )
        self.documents = [d or "" for d in documents]
        self.metadatas = [dict(m or {}) for m in metadatas]
        self._tokens: list[list[str]] | None = None
        self._bm25: dict[str, BM25Corpus] = {}
        self._row: dict[str, int] | None = None
        self._parents: dict[ParentKey, list[int]] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def tokens(self, analysis: Analysis) -> list[list[str]]:
        """Each piece's index tokens (its text plus its LLM context line, as the lexical file indexes it)."""
        if self._tokens is None:
            from .lexical_sync import lexical_text

            self._tokens = [
                analysis.index_tokens(lexical_text(d, m)) for d, m in zip(self.documents, self.metadatas, strict=False)
            ]
        return self._tokens

    def row(self) -> dict[str, int]:
        """Each piece id's row (worked out once: a block never changes)."""
        if self._row is None:
            self._row = {rid: i for i, rid in enumerate(self.ids)}
        return self._row

    def parent_rows(self) -> dict[ParentKey, list[int]]:
        """The rows of each ``(thread_id, parent_id)``'s pieces, in row order (worked out once)."""
        if self._parents is None:
            out: dict[ParentKey, list[int]] = {}
            for i, meta in enumerate(self.metadatas):
                pid, thread = meta.get("parent_id"), meta.get("thread_id")
                if pid is not None and thread is not None:
                    out.setdefault((str(thread), str(pid)), []).append(i)
            self._parents = out
        return self._parents

    def bm25(self, analysis: Analysis) -> BM25Corpus:
        corpus = self._bm25.get(analysis.version)
        if corpus is None:
            corpus = self._bm25[analysis.version] = BM25Corpus(self.ids, self.tokens(analysis), analysis)
        return corpus


def read_thread(backend: VectorBackend, lexical: LexicalIndex | None, thread_id: str) -> Block:
    """One thread's pieces as the cache holds them, read from the store."""
    include = ("embeddings", "documents", "metadatas")
    if lexical is not None and not lexical.journal.pending:
        # the thread's ids from the lexical file's index, then Chroma by id: 9 ms at 1M pieces,
        # where Chroma's own thread filter costs 80 ms (it scales with the collection); texts and
        # metadata from the file's copy when it has them (Chroma's read of those costs 3x the vectors')
        ids = sorted(lexical.ids(thread_id))
        kept = lexical.copies.stored(ids) or {}
        recs = backend.get(ids, include=("embeddings",) if kept.keys() >= set(ids) else include)
        for r in recs:
            if r["id"] in kept:
                r["document"], r["metadata"] = kept[r["id"]]
        recs = [r for r in recs if (r.get("metadata") or {}).get("thread_id") == thread_id]
    else:
        recs = list(backend.iter_records({"thread_id": thread_id}, include=include))
    vectors = np.asarray([r["embedding"] for r in recs], dtype=np.float32) if recs else np.zeros((0, 0), np.float32)
    return Block(
        [r["id"] for r in recs],
        vectors,
        [r.get("document") or "" for r in recs],
        [r.get("metadata") or {} for r in recs],
    )


class ThreadCache:
    """Blocks of recently searched threads, least recently used out beyond ``max_pieces``.

    ``load(thread_id)`` reads one thread from the store. ``max_pieces=0`` keeps nothing: every search
    reads its threads afresh (what a store shared with other writers needs without a change log).
    ``inflight``: the store's changes in flight in this process (:mod:`.visibility`): a thread is read
    while none of its changes is in flight, read again when one began meanwhile, and kept only then, so
    a block always holds one version of every write.
    """

    def __init__(
        self, load: Callable[[str], Block], max_pieces: int = DEFAULT_CACHE_PIECES, inflight: InFlight | None = None
    ) -> None:
        self._load = load
        self._inflight = inflight
        self.max_pieces = int(max_pieces)
        self._blocks: OrderedDict[str, Block] = OrderedDict()
        self._size = 0
        self._lock = threading.RLock()
        self.loads = 0  # threads read from the store (for tests and benchmarks)

    def get(self, thread_id: str) -> Block:
        with self._lock:
            block = self._blocks.get(thread_id)
            if block is not None:
                self._blocks.move_to_end(thread_id)
                return block
        if self._inflight is None:
            block = self._load(thread_id)
            with self._lock:
                self._keep(thread_id, block)
            return block
        return self._read_whole(thread_id, self._inflight)

    def _read_whole(self, thread_id: str, inflight: InFlight) -> Block:
        """One thread read while none of its changes is in flight (see :mod:`.visibility`), and kept."""
        threads = (thread_id,)
        for attempt in range(_READ_ATTEMPTS):
            inflight.wait(threads)
            stamp = inflight.begin()
            try:
                try:
                    block = self._load(thread_id)
                except CtxretError as e:  # a read that met a write (Chroma's "Error finding id"): read again after it
                    if not isinstance(e, InputError) and attempt + 1 < _READ_ATTEMPTS and inflight.touched(None, stamp):
                        inflight.wait(None)
                        continue
                    raise
                with self._lock:  # checked and kept as one step: a write that ends meanwhile drops it after
                    if not inflight.touched(threads, stamp):
                        self._keep(thread_id, block)
                        return block
            finally:
                inflight.end(stamp)
        raise StoreError(
            f"thread {thread_id!r} was rewritten during each of {_READ_ATTEMPTS} reads of it; search it again (writes "
            "to one thread that never pause leave no moment to read it whole)"
        )

    def _keep(self, thread_id: str, block: Block) -> None:
        """Under the lock: hold ``block`` (least recently used out beyond ``max_pieces``)."""
        self.loads += 1
        if self.max_pieces > 0 and len(block) <= self.max_pieces:
            old = self._blocks.pop(thread_id, None)
            self._size -= len(old) if old is not None else 0
            self._blocks[thread_id] = block
            self._size += len(block)
            while self._size > self.max_pieces and self._blocks:
                _, evicted = self._blocks.popitem(last=False)
                self._size -= len(evicted)

    def invalidate(self, thread_ids: Iterable[str] | None = None) -> None:
        """Drop these threads (``None``: every thread)."""
        with self._lock:
            if thread_ids is None:
                self._blocks.clear()
                self._size = 0
                return
            for t in thread_ids:
                old = self._blocks.pop(str(t), None)
                if old is not None:
                    self._size -= len(old)


class ScopeView:
    """One search's pieces: the scope's thread blocks, with the caller's ``where`` applied."""

    def __init__(self, blocks: Sequence[Block], where: Mapping[str, Any] | None, analysis: Analysis) -> None:
        self.analysis = analysis
        ok = compile_where(where) if where else None  # raises Unsupported for the caller to fall back on
        self._blocks = list(blocks)
        sizes = {b.vectors.shape[1] for b in self._blocks if len(b)}
        if len(sizes) > 1:
            raise ValueError(f"pieces of different vector sizes {sorted(sizes)} in one scope")
        if len(self._blocks) == 1:
            # one thread (a knowledge base in one scope): the block's own lists, vectors and row index,
            # never copied (a copy of 20K pieces' vectors costs more than the search over them)
            b = self._blocks[0]
            self.ids, self.documents, self.metadatas = b.ids, b.documents, b.metadatas
            self.vectors = b.vectors if sizes else np.zeros((0, 1), np.float32)
            self._row = b.row()
        else:
            self.ids = [rid for b in self._blocks for rid in b.ids]
            self.documents = [d for b in self._blocks for d in b.documents]
            self.metadatas = [m for b in self._blocks for m in b.metadatas]
            self.vectors = (
                np.vstack([b.vectors for b in self._blocks if len(b)]) if sizes else np.zeros((0, 1), np.float32)
            )
            self._row = {rid: i for i, rid in enumerate(self.ids)}
        self.allowed = np.array([ok(m) for m in self.metadatas], dtype=bool) if ok is not None else None
        self._corpus: BM25Corpus | None = None

    @property
    def blocks(self) -> list[Block]:
        """The scope's thread blocks, in the order of :attr:`ids` (their views: :mod:`.views`)."""
        return self._blocks

    # the DenseBackend protocol
    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        q = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        rows = None if self.allowed is None else np.flatnonzero(self.allowed)
        if not len(self.ids) or (rows is not None and not len(rows)) or n < 1:
            return [[] for _ in range(len(q))]
        scores = (self.vectors if rows is None else self.vectors[rows]) @ q.T
        out: list[list[Row]] = []
        for j in range(q.shape[0]):
            col = scores[:, j]
            top = top_n(col, n)
            out.append(
                [
                    (self.ids[r], self.documents[r], float(np.clip(col[i], -1.0, 1.0)), dict(self.metadatas[r]))
                    for i, r in ((int(i), int(i) if rows is None else int(rows[i])) for i in top)
                ]
            )
        return out

    def fetch(self, ids: Sequence[str], scope: Scope) -> dict[str, Fetched]:
        out: dict[str, Fetched] = {}
        for rid in ids:
            r = self._row.get(rid)
            if r is None or (self.allowed is not None and not self.allowed[r]):
                continue
            out[rid] = (self.documents[r], dict(self.metadatas[r]), self.vectors[r])
        return out

    def parents(self, keys: Iterable[ParentKey]) -> dict[ParentKey, list[dict[str, Any]]]:
        wanted = set(keys)
        out: dict[ParentKey, list[dict[str, Any]]] = {}
        for b in self._blocks:  # a parent's pieces are in its own thread's block
            held = b.parent_rows()
            for key in wanted:
                rows = held.get(key)
                if rows:
                    out.setdefault(key, []).extend(dict(b.metadatas[i]) for i in rows)
        return out

    def document_pieces(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The metadata of every piece of each ``(thread_id, doc_id)`` document (a scan of the held blocks)."""
        wanted = set(keys)
        threads = {t for t, _ in wanted}
        out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for b in self._blocks:
            for m in b.metadatas:
                if m.get("doc_id") is None or str(m.get("thread_id")) not in threads:
                    continue
                key = (str(m.get("thread_id")), str(m["doc_id"]))
                if key in wanted:
                    out.setdefault(key, []).append(dict(m))
        return out

    # the LexicalBackend protocol, with the scope's own statistics
    @property
    def corpus(self) -> BM25Corpus:
        if self._corpus is None:
            if len(self._blocks) == 1:
                self._corpus = self._blocks[0].bm25(self.analysis)
            else:
                tokens = [t for b in self._blocks for t in b.tokens(self.analysis)]
                self._corpus = BM25Corpus(self.ids, tokens, self.analysis)
        return self._corpus

    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
        return self.corpus.search(query, k, allowed=self.allowed)

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        return self.corpus.scores(query, ids)

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        return self.corpus.coverage(query, ids)
