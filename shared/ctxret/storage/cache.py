"""Thread-scoped search from memory: a thread's pieces are read once, then searched exactly.

Chroma answers ``where={"thread_id": X}`` inside its HNSW index with an allow-list, and at 0.1–1%
selectivity that walk is as slow as reading everything (measured: 0.7–0.9 s per 8-part search at
100K pieces). A thread is small (typically tens to a few thousand pieces), so reading its pieces
once (one filtered ``get``, ~40 ms at 100K) and searching them with numpy is exact and takes
microseconds afterwards. :class:`ThreadCache` keeps recently searched threads (least recently used
out, bounded in pieces). A write through the store makes each cached thread it touched its next
version (:meth:`Block.updated`: the new rows appended, the rows it removed or wrote again marked
dead, the derived structures carried over), in time proportional to what it wrote, so an agent that
writes after every model call never reads its memory again; a delete, a clear, a rebuild, a write
that failed part-way and another process's write drop the threads instead. Either way a search
never sees stale pieces, nor half a write: the new version takes the old one's place in one step
when the write has ended (:mod:`.visibility`). :class:`ScopeView` serves one search over the
scope's blocks: dense top-``n`` (exact cosine), fetch, parents, and BM25 with the scope's own
statistics (:class:`~ctxret.storage.bm25.BM25Corpus`), with a caller's ``where`` filter applied
on the metadata (:mod:`.where`; a condition on strings from the block's column of the key).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from ..errors import CtxretError, InputError, StoreError
from .base import Fetched, Row
from .bm25 import BM25Corpus
from .schema import ParentKey, Scope
from .tokenize import Analysis
from .visibility import InFlight
from .where import compile_where

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .base import VectorBackend
    from .lexical import LexicalIndex

__all__ = ["Block", "ScopeView", "ThreadCache", "Written", "DEFAULT_CACHE_PIECES", "read_thread", "top_n", "where_mask"]

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


class _Vectors:
    """A float32 array of rows the versions of one block share: rows are only appended (each version reads its own
    first rows), growing by doubling, so a write costs what it adds on average."""

    __slots__ = ("array", "rows")

    def __init__(self, vectors: np.ndarray, extra: int) -> None:
        n, dims = vectors.shape
        self.array = np.empty((max(2 * (n + extra), 16), dims), np.float32)
        self.array[:n] = vectors
        self.rows = n

    def extend(self, vectors: np.ndarray) -> np.ndarray:
        """Append ``vectors``; the rows written so far, as a view (the new version's)."""
        n, k = self.rows, len(vectors)
        if n + k > len(self.array):
            grown = np.empty((2 * (n + k), self.array.shape[1]), np.float32)
            grown[:n] = self.array[:n]
            self.array = grown  # older versions keep their views of the old array
        self.array[n : n + k] = vectors
        self.rows = n + k
        return self.array[: n + k]


#: A block whose removed rows outnumber this and half its live rows is built again from its live rows.
COMPACT_DEAD = 256


class Block:
    """One thread's pieces: ids, stored vectors, documents and metadata, in a fixed order. A block never changes.

    A write to a cached thread makes the next version (:meth:`updated`): its new pieces appended as rows, the rows of
    the pieces it removed or wrote again marked dead in :attr:`live` (``None``: every row is live). The derived
    structures (index tokens, BM25, the row of each id, parents, the string columns a ``where`` reads) are carried
    over in time proportional to what the write adds, not built again; the vectors live in an array the versions
    share, only ever appended to."""

    __slots__ = (
        "ids",
        "vectors",
        "documents",
        "metadatas",
        "live",
        "_vecs",
        "_tokens",
        "_bm25",
        "_row",
        "_parents",
        "_columns",
        "_numbers",
        "_lock",
    )

    def __init__(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        live: np.ndarray | None = None,
    ) -> None:
        self.ids = list(ids)
        self.vectors = (
            np.asarray(vectors, dtype=np.float32).reshape(len(self.ids), -1)
            if len(self.ids)
            else np.zeros((0, 0), np.float32)
        )
        self.documents = [d or "" for d in documents]
        self.metadatas = [_held(m) for m in metadatas]
        #: Which rows are the thread's pieces (``None``: all); the others were removed or written again since.
        self.live: np.ndarray | None = None if live is None or bool(np.all(live)) else np.asarray(live, dtype=bool)
        self._vecs: _Vectors | None = None
        self._tokens: dict[str, tuple[Analysis, list[list[str]]]] = {}
        self._bm25: dict[str, BM25Corpus] = {}
        self._row: dict[str, int] | None = None
        self._parents: dict[ParentKey, list[int]] | None = None
        self._columns: dict[str, dict[str, tuple[int, ...]]] = {}
        self._numbers: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Rows held (live or not): what the cache counts."""
        return len(self.ids)

    @property
    def n_live(self) -> int:
        """The thread's pieces (live rows)."""
        return len(self.ids) if self.live is None else int(np.count_nonzero(self.live))

    def live_rows(self) -> Iterable[int]:
        return range(len(self.ids)) if self.live is None else np.flatnonzero(self.live).tolist()

    def tokens(self, analysis: Analysis) -> list[list[str]]:
        """Each row's index tokens (its text plus its LLM context line, as the lexical file indexes it)."""
        held = self._tokens.get(analysis.version)
        if held is None:
            held = self._tokens[analysis.version] = (analysis, _index_tokens(analysis, self.documents, self.metadatas))
        return held[1]

    def row(self) -> dict[str, int]:
        """Each live piece id's row (worked out once: a block never changes)."""
        if self._row is None:
            self._row = {self.ids[i]: i for i in self.live_rows()}
        return self._row

    def parent_rows(self) -> dict[ParentKey, list[int]]:
        """The live rows of each ``(thread_id, parent_id)``'s pieces, in row order (worked out once)."""
        if self._parents is None:
            out: dict[ParentKey, list[int]] = {}
            for i in self.live_rows():
                key = _parent_key(self.metadatas[i])
                if key is not None:
                    out.setdefault(key, []).append(i)
            self._parents = out
        return self._parents

    def column(self, key: str) -> dict[str, tuple[int, ...]]:
        """The live rows holding each string value of metadata ``key`` (worked out once; what a ``where`` on the
        key reads instead of every row's metadata)."""
        col = self._columns.get(key)
        if col is None:
            found: dict[str, list[int]] = {}
            for i in self.live_rows():
                v = self.metadatas[i].get(key)
                if type(v) is str:
                    found.setdefault(v, []).append(i)
            col = self._columns[key] = {v: tuple(r) for v, r in found.items()}
        return col

    def numbers(self, key: str) -> np.ndarray:
        """Each row's value of metadata ``key`` as a float (NaN when it is not a number: missing, text or a boolean;
        worked out once): what an order condition (``$gt`` ...) on the key reads, as Chroma compares numbers."""
        col = self._numbers.get(key)
        if col is None:
            col = self._numbers[key] = _numbers_of(self.metadatas, key)
        return col

    def bm25(self, analysis: Analysis) -> BM25Corpus:
        corpus = self._bm25.get(analysis.version)
        if corpus is None:
            with self._lock:  # one build, however many stages of a search ask for it at once
                corpus = self._bm25.get(analysis.version)
                if corpus is None:
                    corpus = self._bm25[analysis.version] = BM25Corpus(
                        self.ids, self.tokens(analysis), analysis, live=self.live, row=self.row()
                    )
        return corpus

    def nbytes(self) -> int:
        """About what the block holds in memory: its vector rows (the shared array's capacity, for the latest version),
        texts, metadata and derived structures (an estimate: Python objects counted at typical sizes)."""
        vec = self._vecs.array.nbytes if self._vecs is not None else self.vectors.nbytes
        text = sum(len(d) for d in self.documents)
        meta = sum(100 + len(k) + (len(v) if isinstance(v, str) else 8) for m in self.metadatas for k, v in m.items())
        return vec + text + meta + 120 * len(self.ids) * (1 + len(self._tokens) + len(self._bm25))

    def updated(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        stale: Collection[str] = (),
    ) -> Block | None:
        """The block after a write of the thread: ``ids`` written (new, or written again: the old row dies, the new
        one is appended), ``stale`` removed (ids the block does not hold are ignored). ``documents`` and
        ``metadatas`` as the store now holds them. ``None``: the block cannot be carried over (it holds views, or
        vectors of another size): read the thread again."""
        if type(self) is not Block:
            return None  # views (``storage/views.py``): the thread is read again with them
        k = len(ids)
        vectors = np.asarray(vectors, dtype=np.float32).reshape(k, -1) if k else np.zeros((0, 0), np.float32)
        if not len(self.ids) or (self.live is not None and not self.live.any()):
            return Block(ids, vectors, documents, metadatas)
        if k and vectors.shape[1] != self.vectors.shape[1]:
            return None
        row = self.row()
        dead = sorted({row[i] for i in (*stale, *ids) if i in row})
        if not k and not dead:
            return self
        n = len(self.ids)
        live = np.ones(n + k, dtype=bool)
        if self.live is not None:
            live[:n] = self.live
        live[dead] = False
        n_dead = n + k - int(np.count_nonzero(live))
        if n_dead > max(COMPACT_DEAD, (n + k - n_dead) // 2):
            return self._compacted(ids, vectors, documents, metadatas, live)
        out = Block.__new__(Block)
        out.ids = [*self.ids, *ids]
        out.documents = [*self.documents, *(d or "" for d in documents)]
        out.metadatas = [*self.metadatas, *(_held(m) for m in metadatas)]
        out.live = live
        if self._vecs is None or self._vecs.rows != n:
            self._vecs = _Vectors(self.vectors, k)  # the first write to a block read whole (or a second branch)
        out._vecs = self._vecs
        out.vectors = self._vecs.extend(vectors) if k else self.vectors
        new_rows = range(n, n + k)
        out_row = dict(row)
        for i in dead:
            out_row.pop(self.ids[i], None)
        out_row.update(zip(ids, new_rows, strict=True))
        out._row = out_row
        out._parents = None
        if self._parents is not None:
            out._parents = _moved(self._parents, dead, new_rows, lambda i: _parent_key(out.metadatas[i]), list)
        columns = list(self._columns.items())
        out._columns = {key: _moved_column(col, key, dead, new_rows, out.metadatas) for key, col in columns}
        out._numbers = {
            key: np.concatenate([col, _numbers_of(out.metadatas[n:], key)]) for key, col in list(self._numbers.items())
        }
        out._lock = threading.Lock()
        out._tokens = {}
        out._bm25 = {}
        for version, (analysis, toks) in list(self._tokens.items()):
            added = _index_tokens(analysis, out.documents[n:], out.metadatas[n:])
            out._tokens[version] = (analysis, [*toks, *added])
            corpus = self._bm25.get(version)
            if corpus is not None:
                out._bm25[version] = corpus.extended(ids, added, dead, all_ids=out.ids, row=out_row)
        return out

    def _compacted(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        live: np.ndarray,
    ) -> Block:
        """:meth:`updated` as a block built again from its live rows (when the dead ones are many): what it had
        worked out is worked out again now, by the writer, not by the next search."""
        keep = np.flatnonzero(live[: len(self.ids)]).tolist()
        out = Block(
            [*(self.ids[i] for i in keep), *ids],
            np.concatenate([self.vectors[keep], vectors]) if len(ids) else self.vectors[keep],
            [*(self.documents[i] for i in keep), *documents],
            [*(self.metadatas[i] for i in keep), *metadatas],
        )
        for version, (analysis, toks) in list(self._tokens.items()):
            added = _index_tokens(analysis, out.documents[len(keep) :], out.metadatas[len(keep) :])
            out._tokens[version] = (analysis, [*(toks[i] for i in keep), *added])
            if version in self._bm25:
                out.bm25(analysis)
        out.row()
        if self._parents is not None:
            out.parent_rows()
        for key in list(self._columns):
            out.column(key)
        for key in list(self._numbers):
            out.numbers(key)
        return out


def _moved_column(
    col: Mapping[str, tuple[int, ...]],
    key: str,
    dead: Sequence[int],
    new_rows: Iterable[int],
    metadatas: Sequence[Mapping[str, Any]],
) -> dict[str, tuple[int, ...]]:
    return _moved(col, dead, new_rows, lambda i: _string(metadatas[i].get(key)), tuple)


def _index_tokens(
    analysis: Analysis, documents: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
) -> list[list[str]]:
    from .lexical_sync import lexical_text

    return [analysis.index_tokens(lexical_text(d, m)) for d, m in zip(documents, metadatas, strict=False)]


def _held(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """A piece's metadata as a block holds it: a copy whose keys are interned (every piece has the same few dozen
    keys; as read from the store each is a string of its own, ~1.5 KB a piece)."""
    return {sys.intern(k) if type(k) is str else k: v for k, v in (meta or {}).items()}


def _numbers_of(metadatas: Sequence[Mapping[str, Any]], key: str) -> np.ndarray:
    out = np.full(len(metadatas), np.nan)
    for i, m in enumerate(metadatas):
        v = m.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[i] = float(v)
    return out


def _parent_key(meta: Mapping[str, Any]) -> ParentKey | None:
    pid, thread = meta.get("parent_id"), meta.get("thread_id")
    return (str(thread), str(pid)) if pid is not None and thread is not None else None


def _string(value: Any) -> str | None:
    return value if type(value) is str else None


_K = TypeVar("_K")


def _moved(
    held: Mapping[_K, Any],
    dead: Sequence[int],
    new_rows: Iterable[int],
    key_of: Callable[[int], _K | None],
    make: Callable[[Iterable[int]], Any],
) -> dict[_K, Any]:
    """A copy of ``held`` (key -> rows, as ``make`` builds them) without the ``dead`` rows and with the ``new_rows``
    (their key: ``key_of``); the rows of the keys it touches are new, the others shared (never changed in place)."""
    out: dict[_K, Any] = dict(held)
    for i in dead:
        key = key_of(i)
        rows = out.get(key) if key is not None else None
        if rows is not None and key is not None:
            kept = make(r for r in rows if r != i)
            if kept:
                out[key] = kept
            else:
                del out[key]
    for i in new_rows:
        key = key_of(i)
        if key is not None:
            out[key] = make((*out.get(key, ()), i))
    return out


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

    ``load(thread_id)`` reads one thread from the store; a write of this process updates the cached threads it touches
    in place (:meth:`update`), a delete, a clear or another process's write drops them. ``max_pieces=0`` keeps
    nothing: every search reads its threads afresh (what a store shared with other writers needs without a change
    log).
    ``inflight``: the store's changes in flight in this process (:mod:`.visibility`): a thread is read
    while none of its changes is in flight, read again when one began meanwhile, and kept only then, so
    a block always holds one version of every write.
    """

    def __init__(
        self,
        load: Callable[[str], Block],
        max_pieces: int = DEFAULT_CACHE_PIECES,
        inflight: InFlight | None = None,
        *,
        analysis: Analysis | None = None,
    ) -> None:
        self._load = load
        self._inflight = inflight
        #: The lexical analysis the scoped searches use: an updated thread gets its BM25 at once, from the writer.
        self.analysis = analysis
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

    def update(self, written: Mapping[str, Written], stale: Collection[str] = ()) -> None:
        """After a write that ended whole: each cached thread of ``written`` becomes its next version
        (:meth:`Block.updated`: the thread's written rows, ``stale`` removed) instead of leaving the cache, so the
        next search of it costs what the write added, not a read of the whole thread. A thread that cannot be carried
        over leaves the cache. The new version is worked out beside the searches (they keep the one they hold) and
        put in its place in one step."""
        for thread_id, rows in written.items():
            with self._lock:
                old = self._blocks.get(thread_id)
            if old is None:
                continue
            try:
                new = old.updated(rows.ids, rows.vectors, rows.documents, rows.metadatas, stale)
                if new is not None and self.analysis is not None:
                    new.bm25(self.analysis)  # carried over, or (once) built now by the writer, not by the next search
            except Exception:  # never fails the write: the thread is read again instead
                logger.debug("thread %r could not be updated in the cache; it is read again", thread_id, exc_info=True)
                new = None
            with self._lock:
                if self._blocks.get(thread_id) is not old:
                    continue  # dropped or read again meanwhile (a read that began after the write holds it)
                self._size -= len(old)
                if new is None or self.max_pieces <= 0 or len(new) > self.max_pieces:
                    del self._blocks[thread_id]
                    continue
                self._blocks[thread_id] = new  # its place in the order of use is kept
                self._size += len(new)
                while self._size > self.max_pieces and self._blocks:
                    _, evicted = self._blocks.popitem(last=False)
                    self._size -= len(evicted)

    def holding(self, thread_ids: Iterable[str]) -> set[str]:
        """Which of ``thread_ids`` are cached."""
        with self._lock:
            return {t for t in thread_ids if t in self._blocks}

    @property
    def size(self) -> int:
        """Rows held, in every thread (live or not): what ``max_pieces`` bounds."""
        return self._size

    def nbytes(self) -> int:
        """About what the cached threads hold in memory (:meth:`Block.nbytes`; for benchmarks and reports)."""
        with self._lock:
            blocks = list(self._blocks.values())
        return sum(b.nbytes() for b in blocks)


class Written:
    """The rows one write stored in one thread, as the store holds them: ids, vectors, documents, metadata."""

    __slots__ = ("ids", "vectors", "documents", "metadatas")

    def __init__(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
    ) -> None:
        self.ids, self.vectors, self.documents, self.metadatas = ids, vectors, documents, metadatas


class ScopeView:
    """One search's pieces: the scope's thread blocks, with the caller's ``where`` applied."""

    def __init__(self, blocks: Sequence[Block], where: Mapping[str, Any] | None, analysis: Analysis) -> None:
        self.analysis = analysis
        if where:
            compile_where(where)  # raises Unsupported for the caller to fall back on
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
            live = b.live
        else:
            self.ids = [rid for b in self._blocks for rid in b.ids]
            self.documents = [d for b in self._blocks for d in b.documents]
            self.metadatas = [m for b in self._blocks for m in b.metadatas]
            self.vectors = (
                np.vstack([b.vectors for b in self._blocks if len(b)]) if sizes else np.zeros((0, 1), np.float32)
            )
            live = (
                np.concatenate([b.live if b.live is not None else np.ones(len(b.ids), bool) for b in self._blocks])
                if any(b.live is not None for b in self._blocks)
                else None
            )
            alive = range(len(self.ids)) if live is None else np.flatnonzero(live).tolist()
            self._row = {self.ids[i]: i for i in alive}
        self._live = live
        allowed = live
        if where:
            mask = np.concatenate([where_mask(where, b) for b in self._blocks]) if self._blocks else np.zeros(0, bool)
            allowed = mask if live is None else mask & live
        #: The rows a search may return (the live rows inside the caller's ``where``; ``None``: every row).
        self.allowed: np.ndarray | None = allowed
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
        if rows is not None and 2 * len(rows) >= len(self.ids):
            # most rows allowed: every row scored, the others put last (a copy of the allowed rows' vectors
            # would cost more than the product over all of them)
            scores = _products(self.vectors, q)
            scores[~self.allowed] = -np.inf  # type: ignore[operator]
            n = min(n, len(rows))
            rows = None
        else:
            scores = _products(self.vectors if rows is None else self.vectors[rows], q)
        out: list[list[Row]] = []
        for j in range(q.shape[0]):
            col = scores[:, j]
            top = top_n(col, n)
            cosines = np.clip(col[top], -1.0, 1.0).tolist()  # one call, not one a row
            at = top.tolist() if rows is None else rows[top].tolist()
            out.append(
                [
                    (self.ids[r], self.documents[r], float(c), dict(self.metadatas[r]))
                    for r, c in zip(at, cosines, strict=True)
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
            for m in (b.metadatas[i] for i in b.live_rows()):
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
                self._corpus = BM25Corpus(self.ids, tokens, self.analysis, live=self._live, row=self._row)
        return self._corpus

    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
        return self.corpus.search(query, k, allowed=self.allowed)

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        return self.corpus.scores(query, ids)

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        return self.corpus.coverage(query, ids)


def _products(vectors: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``vectors @ q.T``, as float32. One or two query vectors (most searches: a message of one part) go through
    numpy's own loops, which read the rows once without BLAS threads: measured 1.7-4x faster than the BLAS product at
    20K rows of 384 dims on two shared cores, where BLAS's threads wait for each other."""
    if len(q) <= 2 and len(vectors):
        return np.einsum("ij,kj->ik", vectors, q)
    return vectors @ q.T


_ORDER: dict[str, Callable[[np.ndarray, float], np.ndarray]] = {
    "$gt": np.greater,
    "$gte": np.greater_equal,
    "$lt": np.less,
    "$lte": np.less_equal,
}


def where_mask(where: Mapping[str, Any], block: Block) -> np.ndarray:
    """Which rows of ``block`` (live or not) Chroma's reading of ``where`` keeps (:func:`.where.compile_where`). A
    condition on strings (``$eq`` / ``$ne`` / ``$in`` / ``$nin`` of strings, or a string) reads the block's column
    of the key (:meth:`Block.column`): its cost is the values it names, not the thread's rows (an agent's recall
    leaves out the messages in view by key at every search); an order condition (``$gt`` ...) on a number compares
    the block's numbers of the key at once (a time window: ``ts_epoch``); any other condition is evaluated on each
    row."""
    ((key, value),) = where.items()
    n = len(block.ids)  # its pieces' rows (a block with views counts those too in its length)
    if key in ("$and", "$or"):
        masks = [where_mask(c, block) for c in value]
        out = masks[0].copy()
        for m in masks[1:]:
            if key == "$and":
                out &= m
            else:
                out |= m
        return out
    op, operand = next(iter(value.items())) if isinstance(value, Mapping) else ("$eq", value)
    names: list[str] | None = None
    if op in ("$eq", "$ne") and type(operand) is str:
        names = [operand]
    elif op in ("$in", "$nin") and isinstance(operand, list) and operand and all(type(v) is str for v in operand):
        names = operand
    if names is None:
        if op in _ORDER and isinstance(operand, (int, float)) and not isinstance(operand, bool):
            with np.errstate(invalid="ignore"):  # NaN (not a number) compares false, as Chroma's reading does
                return np.asarray(_ORDER[op](block.numbers(key), float(operand)), dtype=bool)
        ok = compile_where(where)
        return np.fromiter((ok(m) for m in block.metadatas), dtype=bool, count=n)
    col = block.column(key)
    out = np.zeros(n, dtype=bool)
    for name in set(names):
        rows = col.get(name)
        if rows:
            out[list(rows)] = True
    if op in ("$ne", "$nin"):
        out = ~out
        if block.live is not None:  # a dead row's value is not in the column: it is left out anyway
            out &= block.live
    return out
