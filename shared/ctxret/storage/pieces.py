"""``PieceStore``: the vector backend's collection (Chroma by default) and its lexical index, written and read as one.

Every write is announced in the write journal (:mod:`.journal`), then goes to the vector backend
(:class:`~.base.VectorBackend`: :mod:`.chroma`, or :mod:`.inprocess`), then to the
lexical index in one SQLite transaction that settles the announcement (a crash between the two is
repaired on the next open, without re-embedding: :func:`~.replay.repair_writes` and the lexical
repair from Chroma's stored texts). Deletes and clears follow the same order. One writer at a time
per store inside a process; the reads a search runs on (:meth:`PieceStore.resolve`). A rebuild is
:mod:`.rebuild`; other processes' writes come in through :func:`~.replay.replay_changes`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._faults import fault_point
from ..errors import ClosedError, CtxretError, InputError, StoreError
from . import config_copy
from .base import DEFAULT_COLLECTION, DEFERRED, Fetched, Row, StoredPieces, VectorBackend, group_parents
from .cache import DEFAULT_CACHE_PIECES, Block, ScopeView, ThreadCache, Written, read_thread
from .changes import ChangeLog
from .chroma import ChromaStore
from .claims import TurnClaims
from .compact import DELETED_KEY, CompactReport, compact, due
from .copies import as_stored
from .heal import mark_checked, open_derived
from .inprocess import InProcessBackend
from .journal import Journal
from .lexical import LexicalIndex, default_lexical_path, fts5_available
from .lexical_sync import SyncReport, lexical_text, sync_from_store
from .lock import writers_of
from .rebuild import recover
from .replay import repair_writes, replay_changes
from .schema import ParentKey, Scope
from .snapshot import Snapshot, copy_into, take_snapshot, writable
from .threads import ThreadEnd, chat_head_scan, last_stored
from .tokenize import Analysis
from .tokenize import analysis as default_analysis
from .views import ViewIndex
from .visibility import Change, Hidden, Session
from .where import Unsupported

logger = logging.getLogger(__name__)

__all__ = ["BACKENDS", "ClosedStore", "PieceStore", "SearchReads", "open_piece_store"]

#: The vector backends :func:`open_piece_store` opens by name (``chroma``: the default).
BACKENDS = ("chroma", "inprocess")

_T = TypeVar("_T")
#: Tries of a search's read that fails while a write overlaps it (each after that write is over).
_READ_ATTEMPTS = 5


def _store_fault(e: BaseException) -> bool:
    """Whether ``e`` is the store's failure (one a read beside a write may meet), not the caller's input."""
    return isinstance(e, CtxretError) and not isinstance(e, InputError)


class PieceStore:
    """A vector backend + the optional lexical index of one collection (see the module docstring)."""

    #: Whether a write or delete compacts the store when the pieces deleted since its last compaction reach the
    #: pieces left (:mod:`.compact`; ``False``: only :meth:`compact` does).
    auto_compact = True

    def __init__(
        self,
        backend: VectorBackend,
        lexical: LexicalIndex | None = None,
        *,
        analysis: Analysis | None = None,
        cache_pieces: int = DEFAULT_CACHE_PIECES,
        scoped_lexical: bool = True,
        changes: ChangeLog | None = None,
        journal: LexicalIndex | None = None,
        read_only: bool = False,
        snapshot: Snapshot | None = None,
    ) -> None:
        #: Where the pieces' vectors live (:class:`~.base.VectorBackend`; the only part that knows which store it is).
        self.backend = backend
        #: Whether writes are refused (``read_only=True``, or a folder this process cannot write: :mod:`.snapshot`).
        self.read_only = read_only
        self._snapshot = snapshot  # the private copy a read-only folder is searched in
        self.lexical = lexical
        # the SQLite file of the write journal: the lexical file, else one of the same format holding no
        # pieces (an embedded store with ``lexical=False``)
        self._journal_file = lexical if lexical is not None else journal
        #: Where writes are announced before they reach Chroma (:mod:`.journal`, :func:`~.replay.repair_writes`).
        self.journal: Journal | None = self._journal_file.journal if self._journal_file is not None else None
        self._file_identity = _file_identity(self._journal_file)  # checked before every write (_check_files)
        #: Whether a thread-scoped search gets a BM25 side (from the threads' pieces, in memory).
        self.scoped_lexical = scoped_lexical
        #: The lexical analysis of thread-scoped BM25 (the lexical file's own, when there is one).
        self.analysis = lexical.analysis if lexical is not None else (analysis or default_analysis())
        #: Other processes' writes (a Chroma server): replayed before each search (see :mod:`.changes`).
        self.changes = changes
        #: The LLM-written views' vectors (``<collection>-views``), kept in step with the pieces (:mod:`.views`).
        self.views = ViewIndex(backend)
        self._writers = writers_of(backend.writers_key, backend.collection_name)
        #: This process's changes in flight, which searches see whole (:mod:`.visibility`).
        self.inflight = self._writers.inflight
        #: Recently searched threads, read once and searched from memory (see :mod:`.cache`).
        self.cache = ThreadCache(
            self._load_thread, cache_pieces, self.inflight, analysis=self.analysis if scoped_lexical else None
        )
        self._writers.caches.add(self.cache)
        #: Turn claims for appends from several processes (a Chroma server; :mod:`.claims`), else ``None``.
        self.claims: TurnClaims | None = TurnClaims(backend) if changes is not None else None
        if getattr(backend, "newly_held", False):  # the folder just became this process's: others may have written
            self._writers.heads.clear()
            self._writers.own.clear()
        self._deleted = 0  # pieces deleted since the last compaction, where no file keeps the count

    @property
    def chroma(self) -> VectorBackend:
        """The vector backend (:attr:`backend`; the name from when Chroma was the only one)."""
        return self.backend

    # -- one writer at a time ---------------------------------------------------------------------
    def writing(self) -> contextlib.AbstractContextManager[Any]:
        """The store's write lock inside this process (re-entrant; every :class:`PieceStore` on the same
        folder or server collection shares it). Writes, deletes, clears and swaps take it; searches never do."""
        return self._writers.lock

    def appending(self, thread_id: str) -> contextlib.AbstractContextManager[Any]:
        """One append to ``thread_id`` at a time in this process (:meth:`.lock.Writers.appending`)."""
        return self._writers.appending(thread_id)

    @property
    def heads(self) -> dict[str, int]:
        """The highest chat turn number in use in each thread, as this process knows it (:meth:`thread_end`; a store
        other processes write keeps none)."""
        return self._writers.heads

    @property
    def own(self) -> dict[str, int]:
        """The turn each thread's last append in this process left awaiting a reply (:mod:`ctxret.ingest.append`)."""
        return self._writers.own

    def thread_end(self, thread_id: str) -> ThreadEnd:
        """Where the chat thread ends (:mod:`.threads`): in a store only this process writes, from the highest turn
        number this process knows (read once per thread, then kept by its writes), else from the thread's head
        record on the server (:meth:`.claims.TurnClaims.end`)."""
        if self.claims is not None:
            self.repair_thread(thread_id)  # a write a killed process left half done: whole, before it is read
            return self.claims.end(self.backend, thread_id)
        top = self.heads.get(thread_id)
        if top is None:  # first met: the lexical file's index knows it, else every turn number read from Chroma
            found = self.lexical.last_turn(thread_id) if self.lexical is not None else None
            top = self.heads[thread_id] = chat_head_scan(self.backend, thread_id) if found is None else found
            return ThreadEnd(last_stored(self.backend, thread_id, top) if found is not None else top, top)
        return ThreadEnd(last_stored(self.backend, thread_id, top), top)

    def repair_thread(self, thread_id: str) -> int:
        """On a Chroma server, before a write of ``thread_id``: finish or undo the thread's writes whose process is
        gone (announced in the claims collection, :mod:`.claims`), as :func:`~.replay.repair_writes` does on open for
        a store only this process writes: a write whose new pieces all reached Chroma is finished (its stale ones
        deleted), any other undone (its new ones deleted). Returns how many."""
        if self.claims is None:
            return 0
        done = 0
        for rid, new, stale in self.claims.abandoned(thread_id):
            present = [r["id"] for r in self.backend.get(new, include=())] if new else []
            finish = len(present) == len(new)
            gone = stale if finish else present
            logger.warning(
                "%s an interrupted write to thread %r of %r (its process is gone): %d piece(s) removed",
                "finishing" if finish else "undoing",
                thread_id,
                self.collection_name,
                len(gone),
            )
            with self.changing({thread_id}) as change:
                self.inflight.removing(change, gone)
                self._delete_ids(gone)
                self.views.delete_pieces(gone)  # views hook
                if self.changes is not None:
                    self.changes.record([], gone, {thread_id})
            self.claims.settle(rid)
            done += 1
        return done

    def set_head(self, thread_id: str, n: int) -> None:
        """The thread's chat turns now end at ``n`` exactly (a rewrite of the whole thread)."""
        if self.claims is not None:
            self.claims.set_head(thread_id, n)
        elif thread_id in self.heads or n:
            self.heads[thread_id] = n

    def _raise_heads(self, metadatas: Sequence[Mapping[str, Any]]) -> None:
        """After a write: the highest chat turn number it stored in each thread raises that thread's head."""
        written: dict[str, int] = {}
        for m in metadatas:
            if m.get("kind", "turn") == "turn" and m.get("turn_index") is not None:
                t = str(m.get("thread_id"))
                written[t] = max(written.get(t, 0), int(m["turn_index"]))
        if self.claims is not None:
            self.claims.raise_heads(written)
            return
        for t, n in written.items():
            if t in self.heads:  # a thread not known yet is read whole when an append needs its end
                self.heads[t] = max(self.heads[t], n)

    @property
    def generation(self) -> int:
        """How many writes this process made to the store: read it before reading what is stored, and a
        write that finds it unchanged (under :meth:`writing`) knows nothing was written in between."""
        return self._writers.generation

    @contextlib.contextmanager
    def changing(self, threads: Iterable[str] | None, written: list[Any] | None = None) -> Iterator[Change]:
        """One change of the pieces: under the write lock, declared to the searches beside it (the
        :class:`~.visibility.Change` it yields says what it adds and removes, so they see it whole); afterwards
        (even if it failed part-way) the changed threads leave every cache of the store in this process, or take
        their next version (``written``), and the write counter moves on. A thread cached before stays cached while
        it changes: searches see it as before.

        ``written``: a list the change fills with ``(rows by thread, stale ids, threads to drop)`` once it is stored
        whole (what :meth:`write` does); the cached threads then become their next version in place
        (:meth:`.cache.ThreadCache.update`) instead of leaving the cache. A change that fails, or fills nothing,
        drops them."""
        threads = None if threads is None else set(threads)
        with self._writers.lock:
            self.backend.check_present(writing=True)  # a folder deleted under this process, its lock file removed
            self._check_files()  # the lexical file or journal removed: a crash could not be repaired
            whole = False
            try:
                with self.inflight.change(threads) as change:
                    yield change
                whole = True
            finally:  # after the change is declared over: a thread read meanwhile is read again
                if whole and written and threads is not None:
                    rows, stale, drop = written[0]
                    self._invalidate(drop)
                    self._update(threads - drop, rows, stale)
                else:
                    self._invalidate(threads)
                self._writers.generation += 1

    def _check_files(self) -> None:
        """A :class:`StoreError` when the lexical file (or write journal) this store opened was removed or replaced
        since: the writes announced in it would be lost with it, so a crash could leave a turn in two versions."""
        f = self._journal_file
        if f is None or self._file_identity is None or _file_identity(f) == self._file_identity:
            return
        role = "lexical file" if f is self.lexical else "write journal"
        raise StoreError(
            f"the {role} {f.path} was removed or replaced while this store had it open; nothing was written (every "
            f"write is announced in it first, so that a crash part-way can be repaired). Close the index and open it "
            f"again: the {role} is made again"
            + (" and refilled from the pieces Chroma holds (no re-embedding)" if f is self.lexical else "")
        )

    def _invalidate(self, threads: Collection[str] | None) -> None:
        for cache in list(self._writers.caches):
            cache.invalidate(threads)

    def _update(self, threads: set[str], rows: Mapping[str, Written], stale: Sequence[str]) -> None:
        """The cached ``threads`` of every cache of the store, after a write stored ``rows`` and removed ``stale``."""
        touched = {t: rows.get(t) or Written([], np.zeros((0, 0), np.float32), [], []) for t in threads}
        if not touched:
            return
        for cache in list(self._writers.caches):
            cache.update(touched, stale)

    def _load_thread(self, thread_id: str) -> Block:
        block = read_thread(self.backend, self.lexical, thread_id)
        return self.views.load_thread(block, thread_id)  # views hook: the thread's views join its block

    def resolve(self, scope: Scope, *, replay: bool = True) -> tuple[Any, Any]:
        """The backends one search of ``scope`` runs on: ``(dense, lexical or None)``.

        A thread scope is served from memory (:class:`~.cache.ScopeView`: exact cosine over the
        threads' stored vectors, BM25 with the scope's own statistics, the caller's ``where``
        evaluated on the metadata); anything else goes to Chroma's index and the lexical file (a search reads them
        in one session: :meth:`searching`). ``replay=False``: other processes' writes are not taken in first.
        """
        self.backend.check_present()  # a folder deleted under this process: its data is not served
        if replay:
            replay_changes(self)
        if scope.thread_ids is not None:
            try:
                view = ScopeView([self.cache.get(t) for t in scope.thread_ids], scope.where, self.analysis)
            except Unsupported:
                pass  # a filter the evaluator does not handle: Chroma applies it
            else:
                return view, (view if self.scoped_lexical else None)
        return self, self.lexical

    def searching(self) -> contextlib.AbstractContextManager[SearchReads]:
        """One search's reads of the store (what the search drivers run a search on): a search of the whole store
        reads in one :class:`~.visibility.Session`, so that every write of this process beside it is seen from one
        side in all its reads (graph search, lexical hits, texts, parents), never neither, never both."""
        return _searching(self)

    def holds_any(self, scope: Scope) -> bool:
        """Whether any piece is inside ``scope`` (its threads, filter and time window): the thread cache's
        mask for a thread scope, one record read from Chroma otherwise."""
        dense, _ = self.resolve(scope)
        if isinstance(dense, ScopeView):
            return bool(dense.allowed.any()) if dense.allowed is not None else bool(dense.ids)
        return any(True for _ in self.backend.iter_records(scope.chroma_where(), limit=1))

    # -- identity ---------------------------------------------------------------------------------
    @property
    def location(self) -> str:
        return self.backend.location

    @property
    def collection_name(self) -> str:
        return self.backend.collection_name

    @property
    def has_lexical(self) -> bool:
        """Whether some searches get a BM25 side: thread-scoped ones (in memory) or any (the lexical file)."""
        return self.lexical is not None or self.scoped_lexical

    def close(self) -> None:
        """Close the lexical file (stamped as closed cleanly: :mod:`.heal`) and give the folder lock back (a read-only
        store: remove its copy)."""
        if self._journal_file is not None:
            self._journal_file.close()
            f = self._journal_file
            if self._snapshot is None and not any(getattr(x, "damaged", False) for x in (f, f.journal, f.copies)):
                mark_checked(f.path)  # unless it failed while open: then the next open checks it
        self.backend.close(private=self._snapshot is not None)
        if self._snapshot is not None:
            self._snapshot.remove()

    def refuse_writes(self) -> None:
        """A :class:`StoreError` when the store was opened read-only."""
        if self.read_only:
            raise StoreError(
                f"the store {self.location} (collection {self.collection_name!r}) is open read-only (read_only=True, "
                "or a folder this process cannot write); nothing was written. Open it without read_only=True, on a "
                "folder this process may write, to change it"
            )

    # -- config -----------------------------------------------------------------------------------
    def stored_config(self) -> dict[str, Any] | None:
        return self.backend.stored_config()

    def open(self, config: Mapping[str, Any]) -> None:
        """Open (or create) the collection recording ``config``, after finishing any interrupted rebuild
        (:func:`~.rebuild.recover`) and then any write a crash cut off (:func:`~.replay.repair_writes`)."""
        recover(self)
        self._check_vectors_held()
        if self.read_only and not self.backend.exists():
            raise StoreError(
                f"the store {self.location} has no collection {self.collection_name!r} to open read-only (it holds "
                f"{', '.join(map(repr, self.backend.names())) or 'none'}); name one it holds, or open it without "
                "read_only=True to create it"
            )
        self.backend.open(config)
        config_copy.record(self.lexical, self.collection_name, self.backend.stored_config())  # for `ctxret stats`
        self.views.open(config)  # views hook
        repair_writes(self)

    def _check_vectors_held(self) -> None:
        """Before the collection is opened (or made): a :class:`StoreError` when the lexical file holds pieces but
        the vector store has no collection for them (a lost or replaced Chroma database): nothing is made afresh,
        and the lexical file, the only copy of the texts left, is not emptied by the repair from Chroma."""
        if self.lexical is None or self.changes is not None or self.lexical.path == ":memory:":
            return
        if self.backend.exists():
            return
        n = self.lexical.count()
        if n:
            raise StoreError(
                f"the lexical file {self.lexical.path} holds {n:,} pieces of collection {self.collection_name!r}, "
                f"but {self.location} has no such collection (its Chroma database was lost or replaced); nothing was "
                "changed. Restore the store folder from a backup; or, to start the collection again, move the "
                "lexical file aside and index your data again"
            )

    # -- writes -----------------------------------------------------------------------------------
    def existing(
        self,
        turns: Iterable[tuple[str, str]] = (),
        documents: Iterable[tuple[str, str]] = (),
        name: str | None = None,
        threads: Iterable[str] = (),
    ) -> StoredPieces:
        """The stored piece ids (and their metadata) of the given turns (``(thread_id, turn_id)``), of every turn of
        the given documents (``(thread_id, doc_id)``) and of every chat turn of the given ``threads``: one filtered
        read per 256 turn ids, per 256 document ids and per thread. The write path's first read: a read-only store
        refuses the write here, before anything is embedded."""
        self.refuse_writes()
        metas: dict[str, Mapping[str, Any]] = {}
        out = StoredPieces(
            defaultdict(set), defaultdict(lambda: defaultdict(set)), defaultdict(lambda: defaultdict(set)), metas
        )
        if name is not None and name != self.collection_name:
            return out  # a rebuild target starts empty
        for thread in sorted(set(threads)):
            for rec in self.backend.iter_records({"thread_id": thread}):
                meta = rec["metadata"] or {}
                if meta.get("thread_id") == thread and meta.get("kind", "turn") == "turn":
                    out.threads[thread][str(meta.get("turn_id"))].add(rec["id"])
                    metas[rec["id"]] = meta
        turns, documents = set(turns), set(documents)
        for rec in self.backend.records_of("turn_id", {t for _, t in turns}):
            meta = rec["metadata"] or {}
            key = (str(meta.get("thread_id")), str(meta.get("turn_id")))
            if key in turns:
                out.turns[key].add(rec["id"])
                metas[rec["id"]] = meta
        for rec in self.backend.records_of("doc_id", {d for _, d in documents}):
            meta = rec["metadata"] or {}
            key = (str(meta.get("thread_id")), str(meta.get("doc_id")))
            if key in documents:
                out.documents[key][str(meta.get("turn_id"))].add(rec["id"])
                metas[rec["id"]] = meta
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
        on the next open (:func:`~.replay.repair_writes`). ``name`` writes another collection of the store (a
        rebuild target), Chroma only: the lexical index is refilled after the swap. ``views``
        (:class:`~.views.ViewRecords`): the written pieces' LLM-written views, stored before the pieces.
        """
        self.refuse_writes()
        main = name is None or name == self.collection_name
        lexical = self.lexical if main else None
        journal = self.journal if main else None
        threads = {str(m.get("thread_id")) for m in metadatas} if main else set()  # stale ids: the same threads
        written: list[Any] = []  # what the cached threads become once the write is whole
        with self.changing(threads, written) as change:
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
                journal.mark_pending(
                    [i for i in ids if i not in fresh], new=[i for i in ids if i in fresh], stale=stale
                )
            if main:  # searches beside it see the store before it until its new pieces are all stored
                self.inflight.adding(change, ids if fresh is None else [i for i in ids if i in fresh])
            announced = None
            if main and self.claims is not None and stale and fresh is not None and len(threads) == 1:
                # a server has no local journal: announced where the thread's next writer finds it
                announced = self.claims.announce(next(iter(threads)), [i for i in ids if i in fresh], stale)
            fault_point("write:before-chroma")
            try:
                self.views.write(views, name=name)  # views hook: before the pieces
                if len(ids):
                    self.backend.upsert(ids, vectors, documents, metadatas, name=name)
            except InputError as e:
                if getattr(e, "nothing_stored", False):  # refused whole: nothing to repair
                    if journal is not None:
                        journal.settle()
                    if announced is not None and self.claims is not None:
                        self.claims.settle(announced)
                raise
            fault_point("write:after-upsert")
            if main:  # from here, after it
                self.inflight.removing(change, stale)
            if stale:
                self.backend.delete_ids(stale, name=name)
                self.views.delete_pieces(stale, name=name)  # views hook
            fault_point("write:after-stale-delete")
            if lexical is not None:  # after Chroma, in one transaction; clears the pending marker
                stored = as_stored(self.backend, ids, documents, metadatas, again)
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
            if main:
                self._raise_heads(metadatas)
            if main and self.changes is not None:  # after the data: other processes replay it
                self.changes.record(list(ids), list(stale), threads)
            if announced is not None and self.claims is not None:
                self.claims.settle(announced)
            if main:
                written.append(self._written(ids, metadatas, stale))
        if main and stale:
            self._deleted_some(len(stale))

    def _written(
        self, ids: Sequence[str], metadatas: Sequence[Mapping[str, Any]], stale: Sequence[str]
    ) -> tuple[dict[str, Written], list[str], set[str]]:
        """A whole write's rows per thread, for :meth:`changing`: those of the threads a cache holds, read back from the
        store (one read by id, proportional to the write), so a cached thread holds exactly what a read of it would:
        the vectors as the store keeps them (Chroma normalizes them for cosine), the metadata as it merged them."""
        threads: dict[str, str] = {rid: str(m.get("thread_id")) for rid, m in zip(ids, metadatas, strict=True)}
        cached = set().union(*(c.holding(set(threads.values())) for c in list(self._writers.caches)))
        wanted = [rid for rid in ids if threads[rid] in cached]
        out: dict[str, Written] = {}
        if wanted:
            recs = self.backend.get(wanted, include=("embeddings", "documents", "metadatas"))
            by_thread: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for r in recs:
                by_thread[threads[r["id"]]].append(r)
            for t, rs in by_thread.items():
                out[t] = Written(
                    [r["id"] for r in rs],
                    np.asarray([r["embedding"] for r in rs], dtype=np.float32),
                    [r.get("document") or "" for r in rs],
                    [dict(r.get("metadata") or {}) for r in rs],
                )
            found = {r["id"] for r in recs}
            unsure = {threads[i] for i in wanted if i not in found}  # not held after writing them: read them again
            return {t: w for t, w in out.items() if t not in unsure}, list(stale), unsure
        return out, list(stale), set()

    def delete(self, scope: Scope) -> int:
        """Delete every piece inside ``scope``; returns how many."""
        self.refuse_writes()
        with self.writing():
            recs = list(self.backend.iter_records(scope.chroma_where()))
            ids = [r["id"] for r in recs]
            threads = {str((r["metadata"] or {}).get("thread_id")) for r in recs}
            for t in threads:
                self.heads.pop(t, None)  # read again: the next append goes after the last turn left
                self.own.pop(t, None)
            if self.claims is not None and scope.thread_ids is not None and not scope.where:
                for t in scope.thread_ids:  # whole threads: their head records go (a new thread starts at 1)
                    self.claims.clear(t)
            with self.changing(threads) as change:
                self.inflight.removing(change, ids)
                self._delete_ids(ids)
                self.views.delete_pieces(ids)  # views hook
                if self.changes is not None:
                    self.changes.record([], ids, threads)
            if ids:
                self._deleted_some(len(ids))
        return len(ids)

    # -- space (:mod:`.compact`) ------------------------------------------------------------------
    def compact(self) -> CompactReport:
        """Take back the space deleted pieces hold: the live pieces (vectors as stored, nothing embedded) copied into
        a new collection swapped in crash-safely, the lexical file rewritten (see :mod:`.compact`)."""
        self.refuse_writes()
        return compact(self)

    def deleted_since_compact(self) -> int:
        """Pieces deleted since the last compaction (kept in the lexical or journal file, else in this process)."""
        f = self._journal_file
        return f.meta_int(DELETED_KEY) if f is not None else self._deleted

    def set_deleted(self, n: int) -> None:
        f = self._journal_file
        if f is not None:
            f.set_meta_int(DELETED_KEY, n)
        self._deleted = n

    def _deleted_some(self, n: int) -> None:
        """After a write or delete of the main collection removed ``n`` pieces: count them; compact when due."""
        f = self._journal_file
        total = f.set_meta_int(DELETED_KEY, n, add=True) if f is not None else self._deleted + n
        self._deleted = total
        if self.auto_compact and due(total, self.count):
            self.compact()

    def clear(self) -> None:
        """Delete every piece (the collection and its config stay)."""
        self.refuse_writes()
        with self.changing(None) as change:
            self.inflight.removing(change, everything=True)
            self.heads.clear()
            self.own.clear()
            if self.claims is not None:
                self.claims.clear()
            ids = [r["id"] for r in self.backend.iter_records(None, include=())]
            if self.journal is not None:
                self.journal.mark_pending(clear=True)
            self.backend.delete_ids(ids)
            self.views.clear()  # views hook
            if self.lexical is not None:
                self.lexical.clear(settle=True)
            elif self.journal is not None:
                self.journal.settle()
            if self.changes is not None:
                self.changes.record_everything()
        if ids:
            self._deleted_some(len(ids))

    def _delete_ids(self, ids: Sequence[str]) -> None:
        if self.journal is not None:
            self.journal.mark_pending(stale=ids)  # a crash part-way is finished on the next open
        self.backend.delete_ids(ids)
        fault_point("delete:after-chroma")
        if self.lexical is not None:
            self.lexical.delete(ids, settle=True)
        elif self.journal is not None:
            self.journal.settle()

    # -- reads (the DenseBackend protocol) ---------------------------------------------------------
    def _visible(self, read: Callable[[], _T], session: Session | None = None) -> tuple[_T, Hidden]:
        """``read()`` and what it must not show of the writes in flight in this process (:mod:`.visibility`): as of
        the read, or as ``session`` sees them (one side of each write for all of a search's reads).

        A read that fails while a write overlapped it (Chroma's "Error finding id", a collection being swapped) is
        made again once the write is over; on a Chroma server, "Error finding id" (another process's delete) too. A
        session's read is made again after a pause instead: a write may be waiting for that session to end."""
        for attempt in range(_READ_ATTEMPTS):
            stamp = self.inflight.begin() if session is None else session.seq or 0
            try:
                out = read()
            except BaseException as e:
                # on a server, another process's delete can meet this read too: its own error, read again
                elsewhere = self.changes is not None and attempt < 2 and "error finding id" in str(e).lower()
                again = _store_fault(e) and (self.inflight.touched(None, stamp) or elsewhere)
                if session is None:
                    self.inflight.end(stamp)  # after touched(): ending may forget the writes it asks about
                if not again or attempt + 1 == _READ_ATTEMPTS:
                    raise
                if session is not None or not self.inflight.wait(None, timeout=30.0) or self.changes is not None:
                    time.sleep(0.05 * (attempt + 1))
                continue
            return out, (self.inflight.end(stamp) if session is None else self.inflight.seen(session))
        raise AssertionError("unreachable")  # pragma: no cover

    def dense(self, vectors: np.ndarray, n: int, scope: Scope, *, session: Session | None = None) -> list[list[Row]]:
        """Chroma's graph search inside ``scope``. Without a thread scope the rows come back
        :data:`~.base.DEFERRED` (ids and cosines): the search reads the texts and metadata of the
        hits it keeps (:meth:`complete`), not of every candidate. ``session``: the search's (:meth:`searching`), as
        for every read below."""
        rows, hidden = self._visible(
            lambda: self.backend.query(vectors, n, scope.chroma_where(), texts=scope.thread_ids is not None), session
        )
        return [[r for r in row if r[0] not in hidden] for row in rows] if hidden else rows

    def fetch(self, ids: Sequence[str], scope: Scope, *, session: Session | None = None) -> dict[str, Fetched]:
        """ONE read for the given ids: text, metadata and vector. A caller filter is checked by Chroma
        inside the read; the thread scope alone is checked here on the returned metadata (same
        result; Chroma's filtered read costs ~3x more). Without a thread scope, vectors only
        (:data:`~.base.DEFERRED`, as :meth:`dense`)."""
        if not ids:
            return {}
        texts = scope.thread_ids is not None
        include = ("documents", "metadatas", "embeddings") if texts else ("embeddings",)
        out: dict[str, Fetched] = {}
        recs, hidden = self._visible(lambda: self.backend.get(ids, include=include, where=scope.where), session)
        for rec in recs:
            if rec["id"] in hidden:
                continue  # a piece a write in flight adds or removes (the search sees it before or after)
            meta = dict(rec.get("metadata") or {}) if texts else DEFERRED
            if texts and not scope.holds(meta):
                continue  # a stale lexical row, or another thread's piece: never surfaces
            emb = rec.get("embedding")
            vec = np.asarray(emb, dtype=np.float32) if emb is not None else np.zeros(0, np.float32)
            out[rec["id"]] = ((rec.get("document") or "") if texts else "", meta, vec)
        return out

    def complete(self, ids: Sequence[str], *, session: Session | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """The texts and metadata of deferred rows (the ids that still exist): from the lexical
        file's copy when it has them and no write is in flight (:meth:`.copies.Copies.stored`), the
        rest from Chroma."""
        ids = list(dict.fromkeys(ids))

        def read() -> dict[str, tuple[str, dict[str, Any]]]:
            out = (self.lexical.copies.stored(ids) if self.lexical is not None and ids else None) or {}
            rest = [i for i in ids if i not in out]
            recs = self.backend.get(rest, include=("documents", "metadatas")) if rest else []
            out.update({r["id"]: (r.get("document") or "", dict(r.get("metadata") or {})) for r in recs})
            return out

        out, hidden = self._visible(read, session)
        return {i: v for i, v in out.items() if i not in hidden} if hidden else out

    def parents(
        self, keys: Iterable[ParentKey], *, session: Session | None = None
    ) -> dict[ParentKey, list[dict[str, Any]]]:
        by_thread: dict[str, set[str]] = defaultdict(set)
        for thread_id, parent_id in keys:
            by_thread[str(thread_id)].add(str(parent_id))

        def read() -> list[tuple[str, dict[str, Any]]]:
            recs: list[tuple[str, dict[str, Any]]] = []
            for thread_id, pids in sorted(by_thread.items()):
                wanted = sorted(pids)
                for start in range(0, len(wanted), 256):
                    chunk = wanted[start : start + 256]
                    clause = {"parent_id": chunk[0]} if len(chunk) == 1 else {"parent_id": {"$in": chunk}}
                    for rec in self.backend.iter_records({"$and": [{"thread_id": thread_id}, clause]}):
                        meta = rec["metadata"] or {}
                        if str(meta.get("thread_id")) == thread_id:
                            recs.append((rec["id"], meta))
            return recs

        recs, hidden = self._visible(read, session)
        return group_parents(meta for rid, meta in recs if rid not in hidden)  # one version of every turn

    def document_pieces(
        self, keys: Iterable[tuple[str, str]], *, session: Session | None = None
    ) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The metadata of every piece of each ``(thread_id, doc_id)`` document (all its sections)."""
        keys = list(keys)
        recs, hidden = self._visible(lambda: self.backend.document_records(keys), session)
        out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for rid, key, meta in recs:
            if rid not in hidden:
                out.setdefault(key, []).append(meta)
        return out

    def records(self, include: Sequence[str] = ("metadatas",), scope: Scope | None = None) -> Iterator[dict[str, Any]]:
        """Every stored record (inside ``scope``), page by page."""
        return self.backend.iter_records(scope.chroma_where() if scope is not None else None, include)

    def count(self) -> int:
        return self.backend.count()

    def has_thread(self, thread_id: str) -> bool:
        """Whether any piece belongs to ``thread_id``."""
        return any(True for _ in self.backend.iter_records({"thread_id": thread_id}, include=(), limit=1))

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
        self.backend.check_present()
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
    def sync_lexical(self, *, full: bool | None = None) -> SyncReport:
        """Repair the lexical index from Chroma's stored texts (``full=None``: only if cheap signals disagree)."""
        if self.lexical is None:
            return SyncReport()
        self.backend.check_present()
        with self.writing():  # no write of this process in flight: its announcement is not a crashed one
            # a store only this process writes: an empty Chroma beside a filled lexical file is a lost database
            only_here = self.changes is None and self.lexical.path != ":memory:"
            return sync_from_store(self.lexical, self.backend, full=full, guard=only_here)


class SearchReads:
    """One search's reads of a :class:`PieceStore` (:meth:`PieceStore.searching`): what the search loop runs on in
    place of the store. A search of the whole store gets this object as its dense backend, whose reads are made in
    the search's :class:`~.visibility.Session`, opened at its first :meth:`resolve`; a thread scope gets the cached
    threads, as from the store itself."""

    def __init__(self, store: PieceStore) -> None:
        self.store = store
        self.session = Session()
        self.views = store.views

    def resolve(self, scope: Scope) -> tuple[Any, Any]:
        if self.session.seq is None:
            dense, lexical = self.store.resolve(scope)
        else:  # other processes' writes are taken in once, before the session (a replay may wait for a write)
            dense, lexical = self.store.resolve(scope, replay=False)
        if dense is not self.store:
            return dense, lexical
        self.store.inflight.open(self.session)
        return self, lexical

    def holds_any(self, scope: Scope) -> bool:
        return self.store.holds_any(scope)

    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        return self.store.dense(vectors, n, scope, session=self.session)

    def fetch(self, ids: Sequence[str], scope: Scope) -> dict[str, Fetched]:
        return self.store.fetch(ids, scope, session=self.session)

    def complete(self, ids: Sequence[str]) -> dict[str, tuple[str, dict[str, Any]]]:
        return self.store.complete(ids, session=self.session)

    def parents(self, keys: Iterable[ParentKey]) -> dict[ParentKey, list[dict[str, Any]]]:
        return self.store.parents(keys, session=self.session)

    def document_pieces(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        return self.store.document_pieces(keys, session=self.session)

    def close(self) -> None:
        """End the session (the writes waiting for it go on)."""
        self.store.inflight.close(self.session)


@contextlib.contextmanager
def _searching(store: PieceStore) -> Iterator[SearchReads]:
    reads = SearchReads(store)
    try:
        yield reads
    finally:
        reads.close()


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


def _file_identity(f: LexicalIndex | None) -> tuple[int, int] | None:
    """``(device, inode)`` of a lexical or journal file (``(0, 0)``: gone), ``None`` for none or one in memory."""
    if f is None or f.path == ":memory:":
        return None
    try:
        st = os.stat(f.path)
    except OSError:
        return (0, 0)
    return st.st_dev, st.st_ino


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
    read_only: bool = False,
    backend: str = "chroma",
) -> PieceStore:
    """The store an index opens: a Chroma collection, plus a lexical (BM25) file by default for an
    embedded or in-memory store.

    ``backend="inprocess"`` (with ``in_memory=True``): the vectors in this process's memory, searched exactly with
    numpy (:mod:`.inprocess`; no chromadb at all), instead of an in-memory Chroma.

    ``read_only`` (or an embedded folder this process cannot write): writes are refused, and an embedded folder is
    searched in a private copy, without its lock (:mod:`.snapshot`).

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
    if not isinstance(read_only, bool):
        raise InputError(f"read_only must be True or False, got {read_only!r}")
    if backend not in BACKENDS:
        raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    if backend == "inprocess" and not in_memory:
        raise InputError(
            "backend='inprocess' keeps the pieces in this process's memory only: use it with in_memory=True "
            "(Store.memory(backend='inprocess')); a folder, a server or a client is Chroma's"
        )
    analysis = default_analysis()
    snapshot = None
    if host is None and client is None and not in_memory:
        folder = Path(path if path is not None else ".ctxret").expanduser()
        if not read_only and folder.is_dir() and not writable(folder):
            logger.warning("the store folder %s cannot be written by this process: it is opened read-only", folder)
            read_only = True
        if read_only:
            snapshot = take_snapshot(folder, lock_timeout)
            path, lock_timeout = snapshot.path, 0.0
            if lexical_path is not None and str(lexical_path) != ":memory:":
                lexical_path = copy_into(snapshot, lexical_path)
    vec: VectorBackend
    if backend == "inprocess":
        vec = InProcessBackend(collection=collection)
    else:
        vec = ChromaStore(
            path,
            collection=collection,
            host=host,
            port=port,
            ssl=ssl,
            headers=headers,
            client=client,
            in_memory=in_memory,
            lock_timeout=lock_timeout,
        )
    if snapshot is not None:
        vec.location = str(snapshot.source)
    index: LexicalIndex | None = None
    if lexical is False:
        pass
    elif lexical is None and lexical_path is None and not fts5_available():
        logger.warning("this Python's SQLite has no FTS5: hybrid search is off (dense search only)")
    elif lexical_path is not None:
        index = LexicalIndex(":memory:", analysis=analysis) if str(lexical_path) == ":memory:" else None
        index = index or open_derived(lexical_path, analysis=analysis)  # a damaged one is moved aside (heal.py)
    elif in_memory:
        index = LexicalIndex(":memory:", analysis=analysis)
    elif not vec.server and vec.path is not None:
        index = open_derived(default_lexical_path(vec.path, collection), analysis=analysis)
    journal = None
    if index is None and not vec.server and vec.path is not None and fts5_available():
        # no lexical file: a small one of the same format, holding no pieces, keeps the write announcements
        where = Path(vec.path) / f"ctxret-journal-{collection}.sqlite3"
        journal = open_derived(where, analysis=analysis, role="write journal")
    # A server is shared: other processes' writes come through its change log, replayed before each search.
    changes = ChangeLog(vec) if vec.server else None
    return PieceStore(
        vec,
        index,
        analysis=analysis,
        scoped_lexical=lexical is not False,
        changes=changes,
        journal=journal,
        read_only=read_only,
        snapshot=snapshot,
    )
