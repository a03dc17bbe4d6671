"""``PieceStore``: the Chroma collection and its lexical index, written and read as one.

Every write goes Chroma first, then the lexical index in one SQLite transaction, with the
lexical file's *pending* marker set in between (a crash between the two is repaired from
Chroma's stored texts on the next open, without re-embedding). Deletes and clears follow the
same order. A rebuild writes a new collection beside the old one and swaps it in only when
complete, in steps that a crash at any point leaves recoverable (:meth:`PieceStore.recover`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import weakref
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._faults import fault_point
from ..errors import ClosedError, InputError
from .base import DEFERRED, Fetched, Row, StoredPieces, group_parents
from .cache import DEFAULT_CACHE_PIECES, Block, ScopeView, ThreadCache
from .changes import ChangeLog
from .chroma import DEFAULT_COLLECTION, ChromaStore
from .copies import as_stored
from .journal import Journal
from .lexical import LexicalIndex, default_lexical_path, fts5_available
from .lexical_sync import SyncReport, lexical_text, sync_from_store
from .schema import ParentKey, Scope
from .tokenize import Analysis
from .tokenize import analysis as default_analysis
from .views import ViewIndex
from .where import Unsupported

logger = logging.getLogger(__name__)

__all__ = ["ClosedStore", "PieceStore", "REBUILD_SUFFIX", "PREVIOUS_SUFFIX", "open_piece_store"]

#: A rebuild writes ``<collection>-rebuild`` and keeps the old one as ``<collection>-previous``
#: while the two are swapped.
REBUILD_SUFFIX = "-rebuild"
PREVIOUS_SUFFIX = "-previous"
_T = TypeVar("_T")


class _Writers:
    """The one write lock and write counter of a store inside this process, shared by every
    :class:`PieceStore` open on it (two indexes on one folder, or one server collection)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.generation = 0
        self.stores: weakref.WeakSet[PieceStore] = weakref.WeakSet()


_writers: weakref.WeakValueDictionary[tuple[str, str], _Writers] = weakref.WeakValueDictionary()
_writers_guard = threading.Lock()


def _writers_of(chroma: ChromaStore) -> _Writers:
    if chroma.path is not None:
        where = str(Path(chroma.path).resolve())
    elif chroma.location == "memory" or chroma.server and chroma.location.startswith("client"):
        where = f"{chroma.location}:{id(chroma.client)}"  # a client object is its own store
    else:
        where = chroma.location
    key = (where, chroma.collection_name)
    with _writers_guard:
        found = _writers.get(key)
        if found is None:
            found = _writers[key] = _Writers()
        return found


class PieceStore:
    """Chroma + the optional lexical index of one collection (see the module docstring)."""

    def __init__(
        self,
        chroma: ChromaStore,
        lexical: LexicalIndex | None = None,
        *,
        analysis: Analysis | None = None,
        cache_pieces: int = DEFAULT_CACHE_PIECES,
        scoped_lexical: bool = True,
        changes: ChangeLog | None = None,
        journal: LexicalIndex | None = None,
    ) -> None:
        self.chroma = chroma
        self.lexical = lexical
        # the SQLite file of the write journal: the lexical file, else one of the same format holding no
        # pieces (an embedded store with ``lexical=False``)
        self._journal_file = lexical if lexical is not None else journal
        #: Where writes are announced before they reach Chroma (:mod:`.journal`, :meth:`repair_writes`).
        self.journal: Journal | None = self._journal_file.journal if self._journal_file is not None else None
        #: Whether a thread-scoped search gets a BM25 side (from the threads' pieces, in memory).
        self.scoped_lexical = scoped_lexical
        #: The lexical analysis of thread-scoped BM25 (the lexical file's own, when there is one).
        self.analysis = lexical.analysis if lexical is not None else (analysis or default_analysis())
        #: Recently searched threads, read once and searched from memory (see :mod:`.cache`).
        self.cache = ThreadCache(self._load_thread, cache_pieces)
        #: Other processes' writes (a Chroma server): replayed before each search (see :mod:`.changes`).
        self.changes = changes
        #: The LLM-written views' vectors (``<collection>-views``), kept in step with the pieces (:mod:`.views`).
        self.views = ViewIndex(chroma)
        self._writers = _writers_of(chroma)
        self._writers.stores.add(self)

    # -- one writer at a time ---------------------------------------------------------------------
    def writing(self) -> contextlib.AbstractContextManager[Any]:
        """The store's write lock inside this process (re-entrant; every :class:`PieceStore` on the same
        folder or server collection shares it). Writes, deletes, clears and swaps take it; searches never do."""
        return self._writers.lock

    @property
    def generation(self) -> int:
        """How many writes this process made to the store: read it before reading what is stored, and a
        write that finds it unchanged (under :meth:`writing`) knows nothing was written in between."""
        return self._writers.generation

    @contextlib.contextmanager
    def _write(self, threads: Iterable[str] | None) -> Iterator[None]:
        """One change of the pieces: under the write lock; afterwards (even if it failed part-way) the
        changed threads leave every cache of the store in this process and the write counter moves on."""
        threads = None if threads is None else set(threads)
        with self._writers.lock:
            self._invalidate(threads)
            try:
                yield
            finally:  # a read between the two stores' writes may have cached the half-written thread
                self._invalidate(threads)
                self._writers.generation += 1

    def _invalidate(self, threads: set[str] | None) -> None:
        for store in list(self._writers.stores):
            store.cache.invalidate(threads)

    def _load_thread(self, thread_id: str) -> Block:
        include = ("embeddings", "documents", "metadatas")
        if self.lexical is not None and not self.lexical.journal.pending:
            # the thread's ids from the lexical file's index, then Chroma by id: 9 ms at 1M pieces,
            # where Chroma's own thread filter costs 80 ms (it scales with the collection); texts and
            # metadata from the file's copy when it has them (Chroma's read of those costs 3x the vectors')
            ids = sorted(self.lexical.ids(thread_id))
            kept = self.lexical.copies.stored(ids) or {}
            recs = self.chroma.get(ids, include=("embeddings",) if kept.keys() >= set(ids) else include)
            for r in recs:
                if r["id"] in kept:
                    r["document"], r["metadata"] = kept[r["id"]]
            recs = [r for r in recs if (r.get("metadata") or {}).get("thread_id") == thread_id]
        else:
            recs = list(self.chroma.iter_records({"thread_id": thread_id}, include=include))
        vectors = np.asarray([r["embedding"] for r in recs], dtype=np.float32) if recs else np.zeros((0, 0), np.float32)
        block = Block(
            [r["id"] for r in recs],
            vectors,
            [r.get("document") or "" for r in recs],
            [r.get("metadata") or {} for r in recs],
        )
        return self.views.load_thread(block, thread_id)  # views hook: the thread's views join its block

    def resolve(self, scope: Scope) -> tuple[Any, Any]:
        """The backends one search of ``scope`` runs on: ``(dense, lexical or None)``.

        A thread scope is served from memory (:class:`~.cache.ScopeView`: exact cosine over the
        threads' stored vectors, BM25 with the scope's own statistics, the caller's ``where``
        evaluated on the metadata); anything else goes to Chroma's index and the lexical file.
        """
        self.refresh()
        if scope.thread_ids is not None:
            try:
                view = ScopeView([self.cache.get(t) for t in scope.thread_ids], scope.where, self.analysis)
            except Unsupported:
                pass  # a filter the evaluator does not handle: Chroma applies it
            else:
                return view, (view if self.scoped_lexical else None)
        return self, self.lexical

    # -- identity ---------------------------------------------------------------------------------
    @property
    def location(self) -> str:
        return self.chroma.location

    @property
    def collection_name(self) -> str:
        return self.chroma.collection_name

    @property
    def has_lexical(self) -> bool:
        """Whether some searches get a BM25 side: thread-scoped ones (in memory) or any (the lexical file)."""
        return self.lexical is not None or self.scoped_lexical

    def close(self) -> None:
        """Close the lexical file and give the folder lock back."""
        if self._journal_file is not None:
            self._journal_file.close()
        self.chroma.close()

    # -- config -----------------------------------------------------------------------------------
    def stored_config(self) -> dict[str, Any] | None:
        return self.chroma.stored_config()

    def open(self, config: Mapping[str, Any]) -> None:
        """Open (or create) the collection recording ``config``, after finishing any interrupted rebuild."""
        self.recover()
        self.chroma.open(config)
        self.views.open(config)  # views hook
        self.repair_writes()

    # -- writes -----------------------------------------------------------------------------------
    def existing(
        self,
        turns: Iterable[tuple[str, str]] = (),
        documents: Iterable[tuple[str, str]] = (),
        name: str | None = None,
    ) -> StoredPieces:
        """The stored piece ids of the given turns (``(thread_id, turn_id)``) and of every turn of the given
        documents (``(thread_id, doc_id)``): one filtered read per 256 turn ids and per 256 document ids."""
        out = StoredPieces(defaultdict(set), defaultdict(lambda: defaultdict(set)))
        if name is not None and name != self.collection_name:
            return out  # a rebuild target starts empty
        turns, documents = set(turns), set(documents)
        for rec in self.chroma.records_of("turn_id", {t for _, t in turns}):
            meta = rec["metadata"] or {}
            key = (str(meta.get("thread_id")), str(meta.get("turn_id")))
            if key in turns:
                out.turns[key].add(rec["id"])
        for rec in self.chroma.records_of("doc_id", {d for _, d in documents}):
            meta = rec["metadata"] or {}
            key = (str(meta.get("thread_id")), str(meta.get("doc_id")))
            if key in documents:
                out.documents[key][str(meta.get("turn_id"))].add(rec["id"])
        return out

    def write(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        stale: Sequence[str] = (),
        new: Collection[str] | None = None,
        name: str | None = None,
        views: Any = None,
    ) -> None:
        """Upsert pieces and delete ``stale`` ids: Chroma, then the lexical index in one transaction.

        ``new``: which of ``ids`` were not stored before (default: those the lexical file does not
        hold). The announcement in the lexical file lists the new, rewritten and stale ids, and the
        pieces written again go to Chroma before the new ones, so that a crash is finished or undone
        on the next open (:meth:`repair_writes`). ``name`` writes another collection of the store (a
        rebuild target), Chroma only: the lexical index is refilled after the swap. ``views``
        (:class:`~.views.ViewRecords`): the written pieces' LLM-written views, stored before the pieces.
        """
        main = name is None or name == self.collection_name
        lexical = self.lexical if main else None
        journal = self.journal if main else None
        threads = {str(m.get("thread_id")) for m in metadatas} if main else set()  # stale ids: the same threads
        with self._write(threads):
            again = lexical.known(ids) if lexical is not None else set()  # written before: Chroma merges their metadata
            fresh = set(new) if new is not None else set(ids) - again if lexical is not None else None
            if journal is not None and fresh is None:
                journal.mark_pending([*ids, *stale])  # which are new is not known: not repaired, only announced
            elif journal is not None and fresh is not None:
                order = sorted(range(len(ids)), key=lambda i: ids[i] in fresh)  # rewritten first, new last
                if order != list(range(len(ids))):
                    ids = [ids[i] for i in order]
                    vectors = np.asarray(vectors)[order]
                    documents = [documents[i] for i in order]
                    metadatas = [metadatas[i] for i in order]
                journal.mark_pending([i for i in ids if i not in fresh], new=[i for i in ids if i in fresh],
                                     stale=stale)  # fmt: skip
            fault_point("write:before-chroma")
            try:
                self.views.write(views, name=name)  # views hook: before the pieces
                if len(ids):
                    self.chroma.upsert(ids, vectors, documents, metadatas, name=name)
            except InputError as e:
                if journal is not None and getattr(e, "nothing_stored", False):
                    journal.settle()  # refused whole: nothing to repair
                raise
            fault_point("write:after-upsert")
            if stale:
                self.chroma.delete_ids(stale, name=name)
                self.views.delete_pieces(stale, name=name)  # views hook
            fault_point("write:after-stale-delete")
            if lexical is not None:  # after Chroma, in one transaction; clears the pending marker
                stored = as_stored(self.chroma, ids, documents, metadatas, again)
                lexical.write(
                    list(ids),
                    [lexical_text(d, m) for d, m in zip(documents, metadatas, strict=False)],
                    [str(m["thread_id"]) for m in metadatas],
                    [str(m["turn_id"]) for m in metadatas],
                    delete=list(stale),
                    settle=True,
                    stored=stored,
                )
            elif journal is not None:
                journal.settle()  # the announcement goes
            fault_point("write:after-lexical")
            if main and self.changes is not None:  # after the data: other processes replay it
                self.changes.record(list(ids), list(stale), threads)

    def delete(self, scope: Scope) -> int:
        """Delete every piece inside ``scope``; returns how many."""
        with self.writing():
            recs = list(self.chroma.iter_records(scope.chroma_where()))
            ids = [r["id"] for r in recs]
            threads = {str((r["metadata"] or {}).get("thread_id")) for r in recs}
            with self._write(threads):
                self._delete_ids(ids)
                self.views.delete_pieces(ids)  # views hook
                if self.changes is not None:
                    self.changes.record([], ids, threads)
        return len(ids)

    def clear(self) -> None:
        """Delete every piece (the collection and its config stay)."""
        with self._write(None):
            ids = [r["id"] for r in self.chroma.iter_records(None, include=())]
            if self.journal is not None:
                self.journal.mark_pending(clear=True)
            self.chroma.delete_ids(ids)
            self.views.clear()  # views hook
            if self.lexical is not None:
                self.lexical.clear(settle=True)
            elif self.journal is not None:
                self.journal.settle()
            if self.changes is not None:
                self.changes.record_everything()

    def _delete_ids(self, ids: Sequence[str]) -> None:
        if self.journal is not None:
            self.journal.mark_pending(stale=ids)  # a crash part-way is finished on the next open
        self.chroma.delete_ids(ids)
        fault_point("delete:after-chroma")
        if self.lexical is not None:
            self.lexical.delete(ids, settle=True)
        elif self.journal is not None:
            self.journal.settle()

    def repair_writes(self) -> int:
        """Finish or undo the writes a crash cut off (their announcements in :attr:`journal`), so that
        every turn holds exactly one version; returns how many were repaired.

        A write whose every new piece reached Chroma is finished (its stale pieces are deleted; the
        pieces it wrote again went to Chroma before the new ones); any other is undone (the new
        pieces that reached Chroma are deleted, with their views). A delete or clear is finished.
        The lexical file is then repaired from Chroma (:meth:`sync_lexical`). Only for a store this
        process alone writes (an embedded folder, or memory, whose announcements stay in the
        lexical file or, with ``lexical=False``, in a journal file beside Chroma's): on a Chroma
        server another process may have written the same pieces since, so nothing is repaired there,
        and a turn a crash cut off between its two Chroma steps keeps both versions until it is
        written again (the write removes the other version's pieces). The same holds for a write of
        several Chroma calls whose pieces share ids with the old version: their vectors may be old
        or new (their texts are the same).
        """
        journal = self.journal
        if journal is None or self.changes is not None or not journal.pending:
            return 0
        n = 0
        with self._write(None):
            for found in journal.abandoned_writes():
                if found.get("clear"):
                    gone = [r["id"] for r in self.chroma.iter_records(None, include=())]
                    self.chroma.delete_ids(gone)
                    self.views.clear()  # views hook
                elif "new" in found:
                    new = list(found["new"])
                    present = [r["id"] for r in self.chroma.get(new, include=())] if new else []
                    finish = len(present) == len(new)
                    gone = list(found["stale"]) if finish else present
                    logger.warning(
                        "%s an interrupted write to %r: %d piece(s) removed",
                        "finishing" if finish else "undoing", self.collection_name, len(gone),
                    )  # fmt: skip
                    self.chroma.delete_ids(gone)
                    self.views.delete_pieces(gone)  # views hook
                else:
                    continue  # an older announcement that does not say which pieces are new: the lexical repair
                n += 1
            if self.lexical is None:
                journal.settle_all()  # with a lexical file, its repair from Chroma settles them
        return n

    # -- reads (the DenseBackend protocol) ---------------------------------------------------------
    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        """Chroma's graph search inside ``scope``. Without a thread scope the rows come back
        :data:`~.base.DEFERRED` (ids and cosines): the search reads the texts and metadata of the
        hits it keeps (:meth:`complete`), not of every candidate."""
        return self.chroma.query(vectors, n, scope.chroma_where(), texts=scope.thread_ids is not None)

    def fetch(self, ids: Sequence[str], scope: Scope) -> dict[str, Fetched]:
        """ONE read for the given ids: text, metadata and vector. A caller filter is checked by Chroma
        inside the read; the thread scope alone is checked here on the returned metadata (same
        result; Chroma's filtered read costs ~3x more). Without a thread scope, vectors only
        (:data:`~.base.DEFERRED`, as :meth:`dense`)."""
        if not ids:
            return {}
        texts = scope.thread_ids is not None
        include = ("documents", "metadatas", "embeddings") if texts else ("embeddings",)
        out: dict[str, Fetched] = {}
        for rec in self.chroma.get(ids, include=include, where=scope.where):
            meta = dict(rec.get("metadata") or {}) if texts else DEFERRED
            if texts and not scope.holds(meta):
                continue  # a stale lexical row, or another thread's piece: never surfaces
            emb = rec.get("embedding")
            vec = np.asarray(emb, dtype=np.float32) if emb is not None else np.zeros(0, np.float32)
            out[rec["id"]] = ((rec.get("document") or "") if texts else "", meta, vec)
        return out

    def complete(self, ids: Sequence[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        """The texts and metadata of deferred rows (the ids that still exist): from the lexical
        file's copy when it has them and no write is in flight (:meth:`.copies.Copies.stored`), the
        rest from Chroma."""
        ids = list(dict.fromkeys(ids))
        out = (self.lexical.copies.stored(ids) if self.lexical is not None and ids else None) or {}
        rest = [i for i in ids if i not in out]
        recs = self.chroma.get(rest, include=("documents", "metadatas")) if rest else []
        out.update({r["id"]: (r.get("document") or "", dict(r.get("metadata") or {})) for r in recs})
        return out

    def parents(self, keys: Iterable[ParentKey]) -> dict[ParentKey, list[dict[str, Any]]]:
        by_thread: dict[str, set[str]] = defaultdict(set)
        for thread_id, parent_id in keys:
            by_thread[str(thread_id)].add(str(parent_id))
        metas: list[dict[str, Any]] = []
        for thread_id, pids in sorted(by_thread.items()):
            wanted = sorted(pids)
            for start in range(0, len(wanted), 256):
                chunk = wanted[start : start + 256]
                clause = {"parent_id": chunk[0]} if len(chunk) == 1 else {"parent_id": {"$in": chunk}}
                for rec in self.chroma.iter_records({"$and": [{"thread_id": thread_id}, clause]}):
                    meta = rec["metadata"] or {}
                    if str(meta.get("thread_id")) == thread_id:
                        metas.append(meta)
        return group_parents(metas)

    def records(self, include: Sequence[str] = ("metadatas",), scope: Scope | None = None) -> Iterator[dict[str, Any]]:
        """Every stored record (inside ``scope``), page by page."""
        return self.chroma.iter_records(scope.chroma_where() if scope is not None else None, include)

    def count(self) -> int:
        return self.chroma.count()

    def has_thread(self, thread_id: str) -> bool:
        """Whether any piece belongs to ``thread_id``."""
        return any(True for _ in self.chroma.iter_records({"thread_id": thread_id}, include=(), limit=1))

    def thread_ids(self, limit: int | None = None) -> list[str]:
        """Thread ids in the store (the first ``limit`` found, sorted)."""
        found: set[str] = set()
        for rec in self.records():
            found.add(str((rec["metadata"] or {}).get("thread_id")))
            if limit is not None and len(found) >= limit:
                break
        return sorted(found)

    def stats(self) -> dict[str, Any]:
        """Counts (pieces, turns, threads, pieces per thread) and where the store and its lexical file are.

        From the lexical file's index when it is in step (filled, no write announced: the rule under which
        searches take texts from its copy; a millisecond, and Chroma's segments are not even loaded), else from
        every record's metadata in Chroma (~0.25 ms a piece)."""
        per_thread: dict[str, int] = {}
        n = n_turns = 0
        usable = self.lexical is not None and not self.lexical.fresh
        counts = self.lexical.thread_counts() if usable and self.lexical is not None else None
        if counts is not None:
            per_thread = {t: c for t, (c, _) in counts.items()}
            n, n_turns = sum(per_thread.values()), sum(t for _, t in counts.values())
        else:
            turns: set[tuple[str, str]] = set()
            for rec in self.records():
                meta = rec["metadata"] or {}
                thread = str(meta.get("thread_id"))
                per_thread[thread] = per_thread.get(thread, 0) + 1
                turns.add((thread, str(meta.get("turn_id"))))
                n += 1
            n_turns = len(turns)
        return {
            "pieces": n,
            "turns": n_turns,
            "threads": len(per_thread),
            "pieces_per_thread": dict(sorted(per_thread.items())),
            "collection": self.collection_name,
            "store": self.location,
            "lexical": self.lexical.path if self.lexical is not None else None,
        }

    # -- maintenance ------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Take in what other processes wrote since the last look (a store shared through a server).

        Their threads leave the cache; the lexical file takes their new texts from Chroma and drops
        their deleted ids. A no-op for a store only this process writes.
        """
        if self.changes is None:
            return
        records, check, resync = self.changes.poll()
        if resync:
            self.cache.invalidate()
            self.sync_lexical(full=True)
            return
        upserted: list[str] = []
        deleted: list[str] = []
        for rec in records:
            self.cache.invalidate(rec.get("threads", ()))
            upserted += rec.get("up", [])
            deleted += rec.get("del", [])
        if self.lexical is not None and (upserted or deleted):
            gone = set(deleted) - set(upserted)
            found = (
                {r["id"]: r for r in self.chroma.get(upserted, include=("documents", "metadatas"))} if upserted else {}
            )
            rows = [(rid, found[rid]) for rid in dict.fromkeys(upserted) if rid in found]
            self.lexical.write(
                [rid for rid, _ in rows],
                [lexical_text(r.get("document") or "", r.get("metadata")) for _, r in rows],
                [str((r.get("metadata") or {}).get("thread_id", "")) for _, r in rows],
                [str((r.get("metadata") or {}).get("turn_id", "")) for _, r in rows],
                delete=sorted(gone | (set(upserted) - set(found))),
                stored=[(r.get("document") or "", dict(r.get("metadata") or {})) for _, r in rows],
            )
        if check:
            self.sync_lexical()

    def sync_lexical(self, *, full: bool | None = None) -> SyncReport:
        """Repair the lexical index from Chroma's stored texts (``full=None``: only if cheap signals disagree)."""
        if self.lexical is None:
            return SyncReport()
        with self.writing():  # no write of this process in flight: its announcement is not a crashed one
            return sync_from_store(self.lexical, self.chroma, full=full)

    def rebuild(self, config: Mapping[str, Any], refill: Callable[[str], _T]) -> _T:
        """Build a new collection under ``config`` with ``refill(target_name)`` and swap it in when complete.

        A failure or a crash while refilling leaves the old collection untouched; a crash during
        the swap is finished by :meth:`recover` on the next open.
        """
        name = self.collection_name
        temp = name + REBUILD_SUFFIX
        self.views.begin_rebuild(temp, config)  # views hook
        self.chroma.drop(temp)
        self.chroma.open(config, name=temp)
        try:
            result = refill(temp)
        except BaseException:
            self.chroma.drop(temp)
            self.views.abandon_rebuild(temp)  # views hook
            raise
        fault_point("rebuild:before-swap")
        self.swap_in(temp)
        return result

    def swap_in(self, temp: str) -> None:
        """Replace the collection with the complete ``temp``: old → previous, temp → name, drop previous."""
        with self._write(None):
            self._swap_in(temp)

    def _swap_in(self, temp: str) -> None:
        name = self.collection_name
        previous = name + PREVIOUS_SUFFIX
        if self.lexical is not None:
            self.lexical.journal.mark_pending()  # a crash from here on is repaired on open
        self.views.swap(temp)  # views hook: the rebuilt views take the name first
        fault_point("swap:after-views")
        self.chroma.drop(previous)
        if self.chroma.exists(name):
            self.chroma.rename(name, previous)
        fault_point("swap:after-rename-old")
        self.chroma.rename(temp, name)
        fault_point("swap:after-rename-new")
        self.chroma.drop(previous)
        self.views.swapped()  # views hook
        fault_point("swap:before-lexical")
        if self.changes is not None:
            self.changes.record_everything()
        if self.lexical is not None:  # the new pieces' stored texts, in one transaction
            sync_from_store(self.lexical, self.chroma, full=True, rebuild=True)

    def recover(self) -> bool:
        """Finish or undo a rebuild that a crash interrupted; ``True`` when something was done.

        * the collection exists: a leftover ``-rebuild`` was never swapped in (dropped); a leftover
          ``-previous`` is the old collection after a finished swap (dropped);
        * it does not, but ``-previous`` does: the crash came between the two renames; the
          ``-rebuild`` collection is complete (it is renamed only once complete) and takes the name
          (without it, ``-previous`` gets its name back).
        """
        name = self.collection_name
        temp, previous = name + REBUILD_SUFFIX, name + PREVIOUS_SUFFIX
        names = set(self.chroma.names())
        self.views.recover(names)  # views hook: before the pieces decide
        if not ({temp, previous} & names):
            return False
        if name in names:
            for leftover in (temp, previous):
                if leftover in names:
                    logger.warning("dropping %r left by an interrupted rebuild of %r", leftover, name)
                    self.chroma.drop(leftover)
        elif previous in names:
            source = temp if temp in names else previous
            logger.warning("finishing an interrupted rebuild of %r: %r takes its name", name, source)
            self.chroma.rename(source, name)
            self.chroma.drop(previous)
        else:
            logger.warning("dropping %r left by an interrupted rebuild (no collection %r)", temp, name)
            self.chroma.drop(temp)
        if self.lexical is not None:
            self.lexical.journal.mark_pending()
        return True


class ClosedStore:
    """What an index holds in place of its :class:`PieceStore` after ``close()``: every use raises
    :class:`~ctxret.errors.ClosedError` (the lexical file and Chroma are released; a call would
    otherwise fail deep inside them, e.g. SQLite's "Cannot operate on a closed database")."""

    def __init__(self, location: str, collection: str) -> None:
        self._where = f"collection {collection!r} at {location}"

    def __getattr__(self, name: str) -> Any:
        raise ClosedError(
            f"this index ({self._where}) is closed; open a new ContextualIndex (or adapter) on the store to use it"
        )


def open_piece_store(
    path: str | os.PathLike[str] | None = None,
    *,
    collection: str = DEFAULT_COLLECTION,
    host: str | None = None,
    port: int | None = None,
    ssl: bool = False,
    headers: Mapping[str, str] | None = None,
    client: Any | None = None,
    in_memory: bool = False,
    lock_timeout: float = 0.0,
    lexical: bool | None = None,
    lexical_path: str | os.PathLike[str] | None = None,
    lexical_language: str | None = "english",
    cache_pieces: int | None = None,
) -> PieceStore:
    """The store an index opens: a Chroma collection, plus a lexical (BM25) file by default for an
    embedded or in-memory store.

    Thread-scoped searches get their BM25 side in memory from the threads' pieces, on any store;
    the file serves unscoped searches. A Chroma server or custom client gets no file unless
    ``lexical_path`` names a local one (the SQLite file lives on one machine, while a server's
    clients may be anywhere): its unscoped searches are dense. ``lexical=False`` turns BM25 off.
    """
    if lexical is not None and not isinstance(lexical, bool):
        raise InputError(f"lexical must be True, False or None, got {lexical!r}")
    if lexical_path is not None and (
        not isinstance(lexical_path, (str, os.PathLike)) or not str(os.fspath(lexical_path)).strip()
    ):
        raise InputError(f"lexical_path must be a file path (or ':memory:'), got {lexical_path!r}")
    analysis = default_analysis(lexical_language)
    chroma = ChromaStore(
        path, collection=collection, host=host, port=port, ssl=ssl, headers=headers, client=client, in_memory=in_memory,
        lock_timeout=lock_timeout,
    )  # fmt: skip
    index: LexicalIndex | None = None
    if lexical is False:
        pass
    elif lexical is None and lexical_path is None and not fts5_available():
        logger.warning("this Python's SQLite has no FTS5: hybrid search is off (dense search only)")
    elif lexical_path is not None:
        index = LexicalIndex(lexical_path, analysis=analysis)
    elif in_memory:
        index = LexicalIndex(":memory:", analysis=analysis)
    elif not chroma.server and chroma.path is not None:
        index = LexicalIndex(default_lexical_path(chroma.path, collection), analysis=analysis)
    journal = None
    if index is None and not chroma.server and chroma.path is not None and fts5_available():
        # no lexical file: a small one of the same format, holding no pieces, keeps the write announcements
        journal = LexicalIndex(Path(chroma.path) / f"ctxret-journal-{collection}.sqlite3", analysis=analysis)
    # A server is shared: other processes' writes come through its change log, replayed before each search.
    changes = ChangeLog(chroma) if chroma.server else None
    return PieceStore(
        chroma, index, analysis=analysis, cache_pieces=DEFAULT_CACHE_PIECES if cache_pieces is None else cache_pieces,
        scoped_lexical=lexical is not False, changes=changes, journal=journal,
    )  # fmt: skip
