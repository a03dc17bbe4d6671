"""Chroma storage: embedded (PersistentClient), a Chroma server (HttpClient) or in memory.

The only module that touches Chroma's client and collection objects. Always cosine space;
Chroma's embedding function is never used (vectors are always passed); telemetry off; writes
chunked to the client's max batch size. Collections are named, never handed out: every method
takes an optional ``name`` (default: the store's collection) so a rebuild can write beside it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shutil
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .._faults import fault_point
from ..errors import CtxretError, InputError, StoreError
from .base import CONFIG_PREFIX, DEFAULT_COLLECTION, DEFERRED, RecordQueries, Row
from .heal import database_problem, drop_stamp, mark_checked, stamp_matches
from .lock import FolderLock, check_lock_timeout

logger = logging.getLogger(__name__)

__all__ = ["ChromaStore", "DEFAULT_COLLECTION", "CONFIG_PREFIX", "Row"]

_GET_PAGE = 1000

#: The HNSW graph of a new collection: cosine space, and a denser graph than Chroma's defaults
#: (max_neighbors 16, ef_construction 100), which at 1M pieces left 2.7% of pieces unreachable
#: from their own vector (0 at 100K and 1M with these settings). ``ef_search`` 100, twice the 50
#: candidates a hybrid search asks per part: against 200 it halves the graph search (8 vectors:
#: 13 → 7 ms at 100K, 18 → 10 ms at 1M) for 0.4–0.8 points of top-50 recall, all near-ties, and
#: no own-vector miss (BENCHMARKS.md, "HNSW search width"). Thread-scoped searches do not use the
#: graph (they are exact, from memory); unscoped ones do.
HNSW = {"space": "cosine", "max_neighbors": 32, "ef_construction": 200, "ef_search": 100}
_F = TypeVar("_F", bound=Callable[..., Any])


#: A Chroma segment folder's name (a UUID).
_SEGMENT_FOLDER = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: What Chroma's errors say when its SQLite file is damaged (SQLITE_CORRUPT, SQLITE_NOTADB, a log it cannot read).
_DAMAGED = ("malformed", "not a database", "(code: 11)", "(code: 26)", "failed to pull logs")


#: What a damaged ``chroma.sqlite3`` is, and its fix.
_DAMAGED_FIX = (
    "ctxret cannot rebuild it (the vectors live only there): restore the store folder from a backup, or move it aside "
    "and index your data again"
)


def is_panic(e: BaseException) -> bool:
    """Whether ``e`` is a panic of chromadb's Rust core (``pyo3_runtime.PanicException``, which derives from
    ``BaseException``: ``except Exception`` misses it). ``KeyboardInterrupt``, ``SystemExit`` and every other
    ``BaseException`` are not."""
    return any(c.__name__ == "PanicException" and c.__module__ == "pyo3_runtime" for c in type(e).__mro__)


def chroma_failure(e: BaseException) -> bool:
    """Whether ``e``, raised by a Chroma call, is Chroma's failure to report as a ctxret error: an ``Exception``, or
    a panic of its Rust core (:func:`is_panic`); never an interrupt or an exit."""
    return isinstance(e, Exception) or is_panic(e)


def _store_error(store: ChromaStore, what: str, e: BaseException) -> CtxretError:
    """A Chroma or transport failure as a ctxret error that names the problem and the fix. On an embedded folder a
    failure that does not say what is wrong has its ``chroma.sqlite3`` checked (SQLite's ``quick_check``): a damaged
    page is named as such."""
    from chromadb.errors import DuplicateIDError, InvalidArgumentError

    raised = f"{'chromadb panicked: ' if is_panic(e) else ''}{type(e).__name__}: {e}"
    damaged = any(word in str(e).lower() for word in _DAMAGED)
    problem = None
    if not damaged and store.path is not None and not isinstance(e, (InvalidArgumentError, DuplicateIDError)):
        problem = database_problem(store.path / "chroma.sqlite3")
    if damaged or problem is not None:
        where = f"{store.path / 'chroma.sqlite3'}" if store.path is not None else f"the store at {store.location}"
        found = f"; it {problem}" if problem is not None else ""
        return StoreError(f"Chroma failed to {what}: {where} is damaged ({raised}{found}). {_DAMAGED_FIX}")
    if isinstance(e, (InvalidArgumentError, DuplicateIDError)):
        if what.startswith("write"):
            check = (
                "the pieces' metadata (keys not starting with '$' or '#', values strings, finite numbers or "
                "booleans, valid UTF-8) and vectors (the collection's dimensions, finite values)"
            )
        else:
            check = "the where filter (Chroma's filter syntax: one top-level key, $and/$or with at least two clauses)"
        return InputError(f"Chroma refused to {what}: {e}. Check {check}")
    if store.server and store._lock is None:
        fix = (
            "check that the Chroma server is running and reachable (`chroma run --path DIR --host HOST --port PORT`), "
            "then retry: pieces already stored are safe, and a write that did not finish is redone by running it again"
        )
    else:
        fix = "check that the store folder is on a writable disk with free space and that no other program changes it"
    return StoreError(f"Chroma failed to {what} at {store.location} ({raised}); {fix}")


def _calls_chroma(what: str) -> Callable[[_F], _F]:
    """Wrap a method's Chroma failures into :class:`StoreError` / :class:`InputError` (see :func:`_store_error`)."""

    def deco(fn: _F) -> _F:
        @functools.wraps(fn)
        def wrapper(self: ChromaStore, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except CtxretError:
                raise
            except BaseException as e:
                if not chroma_failure(e):
                    raise
                raise _store_error(self, what, e) from e

        return wrapper  # type: ignore[return-value]

    return deco


class ChromaStore(RecordQueries):
    """One Chroma collection holding ctxret pieces (the :class:`~.base.VectorBackend` on Chroma).

    Pick one backend: ``path`` (embedded, persistent; the default), ``host``/``port`` (a Chroma
    server; ``headers`` for auth), ``client`` (any Chroma client you made), or ``in_memory=True``.
    An embedded folder, given as ``path`` or as a ``chromadb.PersistentClient``, is locked for this
    process while the store is open (:mod:`.lock`); ``lock_timeout`` seconds to wait for another
    process that holds it (default 0: fail at once).
    """

    def __init__(
        self,
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
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        _check_store_args(path, host, port, ssl, headers, client, in_memory)
        chosen = [x for x in (path is not None, host is not None, client is not None, in_memory) if x]
        if len(chosen) > 1:
            raise InputError("choose one store: path=, host=/port=, client= or in_memory=True")
        _check_collection_name(collection)
        lock_timeout = check_lock_timeout(lock_timeout)
        settings = Settings(anonymized_telemetry=False)
        self.path: Path | None = None
        self._lock: FolderLock | None = None
        self._identity: tuple[Any, ...] | None = None  # an embedded folder's, at open (check_present)
        self.server = host is not None or client is not None
        if client is not None:
            folder = _persistent_folder(client)
            if folder is not None:  # an embedded folder all the same: one process at a time
                self._lock = FolderLock(folder).acquire(lock_timeout)
            self.client = client
            self.location = f"client {type(client).__name__}" + (f" at {folder}" if folder is not None else "")
        elif host is not None:
            self.location = f"{'https' if ssl else 'http'}://{host}:{port or 8000}"
            try:
                self.client = chromadb.HttpClient(
                    host=host, port=int(port or 8000), ssl=ssl, headers=dict(headers or {}), settings=settings
                )
            except Exception as e:
                raise _store_error(self, "connect", e) from e
        elif in_memory:
            self.client = memory_client(settings)
            self.location = "memory"
        else:
            self.path = Path(path if path is not None else ".ctxret").expanduser()
            if self.path.exists() and not self.path.is_dir():
                raise InputError(f"store path {str(self.path)!r} exists and is not a folder; pass a folder path")
            try:
                self.path.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise StoreError(
                    f"cannot make the store folder {self.path} ({e.strerror or e}); choose a folder this process may "
                    "write, or give an existing store's folder (a folder that cannot be written is opened read-only)"
                ) from e
            self._lock = FolderLock(self.path).acquire(lock_timeout)  # before Chroma touches the folder
            self.location = str(self.path)
            try:
                verify_database(self.path)  # missing, emptied or damaged: a StoreError before Chroma makes a new one
                _forget_a_ghost(self.path)
                self.client = chromadb.PersistentClient(path=str(self.path), settings=settings)
            except BaseException as e:
                self._lock.release()
                if chroma_failure(e) and not isinstance(e, CtxretError):
                    error = _store_error(self, "open the store folder", e)
                    with contextlib.suppress(ImportError, AttributeError):
                        _drop_systems(self.path.resolve())  # a system that failed to start is not served again
                    raise error from e
                raise
            self._identity = _opened[self.path.resolve()] = _folder_identity(self.path)
        self.collection_name = collection
        self._collections: dict[str, Any] = {}
        try:
            self.max_batch = int(self.client.get_max_batch_size())
        except BaseException as e:  # older servers: Chroma's documented local limit
            if not chroma_failure(e):
                raise
            self.max_batch = 5461

    @property
    def newly_held(self) -> bool:
        """Whether opening this store took its embedded folder's lock for this process (no other store of the process
        held it): what other processes wrote there before is unknown to this one (``PieceStore`` forgets it)."""
        return self._lock is not None and self._lock.newly_held

    @property
    def writers_key(self) -> str:
        if self.path is not None:
            return str(Path(self.path).resolve())
        if self.location == "memory" or self.server and self.location.startswith("client"):
            return f"{self.location}:{id(self.client)}"  # a client object is its own store
        return self.location

    def check_present(self, *, writing: bool = False) -> None:
        """A :class:`StoreError` when the embedded folder this store opened is gone (deleted, or replaced by another
        one) while it was open: this process must neither write to what is left of it nor serve what it held.
        ``writing`` (before a write): also when the folder's lock file was removed or replaced (another process may
        hold the folder now: :meth:`.lock.FolderLock.check`)."""
        if self._identity is None or self.path is None:
            return
        now = _folder_identity(self.path)
        if now == self._identity:
            if writing and self._lock is not None:
                self._lock.check()
            return
        what = "was deleted" if now[0] is None else "was replaced (its Chroma database is another one)"
        raise StoreError(
            f"the store folder {self.path} {what} while this index had it open; nothing was written or read. Open "
            "the index again to use what is there now (an empty store if the folder is gone), or restore the folder "
            "from a backup first"
        )

    def close(self, *, private: bool = False) -> None:
        """Give the folder lock back (embedded stores), free an in-memory store (and, ``private``, the client of a
        folder nothing else opens: a read-only store's copy); the store cannot be used afterwards."""
        self._collections.clear()
        if self.location == "memory" or private:
            self.client.close()
        if self._lock is not None and self._lock.release() and self.path is not None and not private:
            if _folder_identity(self.path) == self._identity:  # the last hold of the folder it opened: unchanged
                mark_checked(self.path / "chroma.sqlite3")  # from here on, not checked again on open

    # -- collections and config ------------------------------------------------------------
    def _col(self, name: str | None = None) -> Any:
        name = name or self.collection_name
        col = self._collections.get(name)
        if col is None:
            if not self.exists(name):
                raise CtxretError(f"collection {name!r} at {self.location} is not open; open it with a config first")
            col = self._collections[name] = self.client.get_collection(name, embedding_function=None)
        return col

    @_calls_chroma("list its collections")
    def names(self) -> list[str]:
        """The names of every collection in the store."""
        return sorted(_name_of(c) for c in self.client.list_collections())

    def exists(self, name: str | None = None) -> bool:
        return (name or self.collection_name) in self.names()

    @_calls_chroma("read a collection's config")
    def stored_config(self, name: str | None = None) -> dict[str, Any] | None:
        """The index config recorded on the collection, or ``None`` when it does not exist."""
        name = name or self.collection_name
        if not self.exists(name):
            return None
        col = self.client.get_collection(name, embedding_function=None)
        meta = col.metadata or {}
        return {k[len(CONFIG_PREFIX) :]: v for k, v in meta.items() if k.startswith(CONFIG_PREFIX)}

    @_calls_chroma("open or create the collection")
    def open(self, config: Mapping[str, Any], name: str | None = None) -> None:
        """Open (or create) the collection with ``config`` recorded in its metadata."""
        name = name or self.collection_name
        meta = {f"{CONFIG_PREFIX}{k}": v for k, v in config.items()}
        self._collections[name] = self.client.get_or_create_collection(
            name, configuration={"hnsw": dict(HNSW)}, metadata=meta, embedding_function=None
        )

    @_calls_chroma("open a side collection")
    def open_side(self, name: str, role: str) -> None:
        """Open or create a side collection (the change log, the turn claims): Chroma's default index."""
        self._collections[name] = self.client.get_or_create_collection(
            name, metadata={f"{CONFIG_PREFIX}{role}": True}, embedding_function=None
        )

    @_calls_chroma("drop a collection")
    def drop(self, name: str) -> None:
        self._collections.pop(name, None)
        if self.exists(name):
            self.client.delete_collection(name)

    @_calls_chroma("rename a collection")
    def rename(self, old: str, new: str) -> None:
        col = self.client.get_collection(old, embedding_function=None)
        col.modify(name=new)
        self._collections.pop(old, None)
        self._collections.pop(new, None)

    def drop_orphan_segments(self) -> int:
        """Remove the segment folders of an embedded store that no collection uses any more: chromadb 1.5 leaves a
        dropped collection's HNSW folder on disk (measured: a rebuild or compaction left the old graph behind).
        Returns how many; a folder it cannot read or remove is left (logged)."""
        if self.path is None or self.server:
            return 0
        try:
            db = sqlite3.connect(f"{(self.path / 'chroma.sqlite3').resolve().as_uri()}?mode=ro", uri=True, timeout=30)
            try:
                used = {str(r[0]) for r in db.execute("SELECT id FROM segments")}
            finally:
                db.close()
        except sqlite3.Error as e:
            logger.warning("could not read the segments of %s (%s); unused segment folders are left", self.path, e)
            return 0
        gone = 0
        for child in self.path.iterdir():
            if child.is_dir() and _SEGMENT_FOLDER.fullmatch(child.name) and child.name not in used:
                shutil.rmtree(child, ignore_errors=True)
                gone += not child.exists()
        return gone

    # -- writes ------------------------------------------------------------------------------
    @_calls_chroma("write pieces")
    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None = None,
    ) -> None:
        col = self._col(name)
        n = len(ids)
        if not (len(vectors) == len(documents) == len(metadatas) == n):
            raise InputError("ids, vectors, documents and metadatas must have the same length")
        for start in range(0, n, self.max_batch):
            end = start + self.max_batch
            try:
                col.upsert(
                    ids=list(ids[start:end]),
                    embeddings=np.asarray(vectors[start:end], dtype=np.float32),
                    documents=list(documents[start:end]),
                    metadatas=[dict(m) for m in metadatas[start:end]],
                )
            except BaseException as e:
                if not chroma_failure(e):
                    raise
                error = _store_error(self, "write pieces", e)
                # Chroma checks a request whole before applying it: a refused first request stored nothing
                error.nothing_stored = start == 0 and isinstance(error, InputError)  # type: ignore[attr-defined]
                raise error from e
            if end < n:
                fault_point("write:between-upserts")

    @_calls_chroma("add records")
    def add(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str] | None,
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None = None,
    ) -> None:
        """Insert records; a stored id keeps its first record (Chroma's ``add`` ignores it: checked on chromadb 1.5)."""
        if not ids:
            return
        self._col(name).add(
            ids=list(ids),
            embeddings=np.asarray(vectors, dtype=np.float32),
            documents=None if documents is None else list(documents),
            metadatas=[dict(m) for m in metadatas],
        )

    @_calls_chroma("delete records")
    def delete_where(self, where: Mapping[str, Any] | None, name: str | None = None) -> None:
        col = self._col(name)
        if where:
            col.delete(where=dict(where))
        else:
            ids = col.get(include=[])["ids"]
            if ids:
                col.delete(ids=ids)

    @_calls_chroma("delete pieces")
    def delete_ids(self, ids: Sequence[str], name: str | None = None) -> None:
        ids = list(ids)
        if not ids:
            return
        col = self._col(name)
        for start in range(0, len(ids), self.max_batch):
            if start:
                fault_point("delete:between-chunks")
            col.delete(ids=ids[start : start + self.max_batch])

    # -- reads -------------------------------------------------------------------------------
    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """All records matching ``where`` (at most ``limit``), page by page: dicts with ``id`` and the
        included fields (``metadata``, ``document``, ``embedding``)."""
        col = self._col(name)
        offset = 0
        page_size = _GET_PAGE if limit is None else max(1, min(_GET_PAGE, limit))
        while True:
            try:
                page = col.get(
                    where=dict(where) if where else None, include=list(include), limit=page_size, offset=offset
                )
            except CtxretError:
                raise
            except BaseException as e:
                if not chroma_failure(e):
                    raise
                raise _store_error(self, "read pieces", e) from e
            ids = page["ids"]
            if not ids:
                return
            yield from _records(page, include)
            offset += len(ids)
            if len(ids) < page_size or (limit is not None and offset >= limit):
                return

    @_calls_chroma("read pieces by id")
    def get(
        self,
        ids: Sequence[str],
        include: Sequence[str] = ("documents", "metadatas"),
        where: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        """The records of ``ids`` that exist (and match ``where``), in batches, as :meth:`iter_records` gives them."""
        ids = list(dict.fromkeys(ids))
        out: list[dict[str, Any]] = []
        step = min(self.max_batch, _GET_PAGE)
        col = self._col(name)
        for start in range(0, len(ids), step):
            page = col.get(ids=ids[start : start + step], where=dict(where) if where else None, include=list(include))
            out.extend(_records(page, include))
        return out

    @_calls_chroma("search the collection")
    def query(
        self,
        vectors: np.ndarray,
        n_results: int,
        where: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        texts: bool = True,
    ) -> list[list[Row]]:
        """One batched query: per row, ``(id, document, cosine, metadata)`` best first.

        ``texts=False``: ids and cosines only, the document ``""`` and the metadata
        :data:`~ctxret.storage.base.DEFERRED` (Chroma reads 400 records' metadata in ~25 ms at
        100K pieces, more than the graph search itself)."""
        if len(vectors) == 0 or n_results < 1:
            return [[] for _ in range(len(vectors))]
        res = self._col(name).query(
            query_embeddings=np.asarray(vectors, dtype=np.float32),
            n_results=int(n_results),
            where=dict(where) if where else None,
            include=["documents", "metadatas", "distances"] if texts else ["distances"],
        )
        if not texts:
            return [
                [(i, "", c, DEFERRED) for i, c in zip(ids, _cosines(dists), strict=True)]
                for ids, dists in zip(res["ids"], res["distances"], strict=True)
            ]
        out = []
        for row in range(len(vectors)):
            ids, docs = res["ids"][row], res["documents"][row]
            metas, dists = res["metadatas"][row], res["distances"][row]
            cos = _cosines(dists)
            out.append([(ids[j], docs[j] or "", cos[j], dict(metas[j] or {})) for j in range(len(ids))])
        return out

    @_calls_chroma("count pieces")
    def count(self, name: str | None = None) -> int:
        return int(self._col(name).count())


def memory_client(settings: Any) -> Any:
    """A Chroma client on an in-memory system of its own: a separate store for every call.

    ``chromadb.EphemeralClient`` shares one system per process among every client (keyed
    "ephemeral" in ``SharedSystemClient``): two in-memory indexes would see each other's pieces, and
    a client made with other settings (langchain-chroma's ``chromadb.Client(Settings())``, with
    telemetry on) is refused while ours lives, and ours while theirs lives. This client's system is
    never registered there, so it shares nothing and clashes with nothing; ``close()`` frees it.
    Opening one starts a Chroma system: a few milliseconds more than a collection on the shared one
    (BENCHMARKS.md, "Opening an in-memory index").
    """
    try:
        own = _memory_client_class()
    except (ImportError, AttributeError) as e:  # another chromadb layout: the shared system, as before
        import chromadb

        logger.warning("in-memory stores share one Chroma system with this chromadb version (%s)", e)
        return chromadb.EphemeralClient(settings=settings)
    return own(settings)


@functools.cache
def _memory_client_class() -> Any:
    from chromadb.api import ServerAPI
    from chromadb.api.client import Client
    from chromadb.config import DEFAULT_DATABASE, DEFAULT_TENANT, System
    from chromadb.telemetry.product import ProductTelemetryClient

    class OwnSystemClient(Client):
        """``chromadb.api.client.Client`` on a private ``System`` (its ``__init__`` would use the shared one)."""

        def __init__(self, settings: Any) -> None:  # Client.__init__ is skipped on purpose: it registers the system
            settings.is_persistent = False
            system = System(settings)
            system.instance(ProductTelemetryClient)  # type: ignore[type-abstract]  # as chromadb's own code
            self._server = system.instance(ServerAPI)  # type: ignore[type-abstract]
            system.start()
            self._own_system = system
            self.tenant, self.database = DEFAULT_TENANT, DEFAULT_DATABASE

        @property
        def _system(self) -> Any:
            return self._own_system

        def close(self) -> None:
            if not self._closed:
                self._closed = True
                self._own_system.stop()

    return OwnSystemClient


def verify_database(folder: Path) -> None:
    """Before Chroma opens an embedded ``folder``: a :class:`StoreError` naming ``chroma.sqlite3`` and the fix when
    it is damaged (SQLite's ``quick_check``; skipped for a file stamped as closed cleanly and unchanged since), or
    when it is missing or empty while the folder holds a store's data (Chroma's segment folders, a lexical file with
    pieces, a write journal with announcements): Chroma would make a new, empty database there, and the next open's
    lexical repair would empty the lexical file after it. A new folder, or one holding nothing of a store, opens.

    The check reads the whole file (SQLite's own pass over its pages); the stamp is dropped here, so a crash or any
    change means a check on the next open (as for the lexical file: :mod:`.heal`)."""
    db = folder / "chroma.sqlite3"
    try:
        size: int | None = db.stat().st_size
    except OSError:
        size = None
    if not size:
        held = _store_data(folder)
        if held:
            raise StoreError(
                f"{db} is {'missing' if size is None else 'empty'}, but the store folder {folder} holds {held}: the "
                "pieces' vectors and texts lived in that file, and ctxret cannot rebuild them from what is left "
                "(nothing was changed). Restore the folder (or its chroma.sqlite3) from a backup; or, to start "
                "again, move the folder aside and index your data again"
            )
        return
    checked = stamp_matches(db)
    drop_stamp(db)
    problem = None if checked else database_problem(db)
    if problem is not None:
        raise StoreError(f"the store's Chroma database {db} is damaged (it {problem}). {_DAMAGED_FIX}")


def _store_data(folder: Path) -> str:
    """What of a store's data ``folder`` holds besides Chroma's database ("" for nothing)."""
    found: list[str] = []
    try:
        children = list(folder.iterdir())
    except OSError:
        return ""
    segments = sum(1 for c in children if c.is_dir() and _SEGMENT_FOLDER.fullmatch(c.name))
    if segments:
        found.append(f"{segments} Chroma segment folder{'s' if segments > 1 else ''}")
    for f in sorted(c for c in children if c.name.startswith("ctxret-") and c.name.endswith(".sqlite3")):
        rows = _rows(f, "pieces" if f.name.startswith("ctxret-lexical-") else "pending_writes")
        if rows:
            found.append(f"{f.name} ({rows:,} {'pieces' if 'lexical' in f.name else 'write announcements'})")
    return ", ".join(found)


def _rows(file: Path, table: str) -> int:
    """The rows of ``table`` in the SQLite ``file`` (read only); 1 when the file cannot be read (it may hold them)."""
    try:
        db = sqlite3.connect(f"{file.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])  # noqa: S608  # a table name of ours
        finally:
            db.close()
    except sqlite3.OperationalError as e:
        return 0 if "no such table" in str(e) else 1
    except sqlite3.Error:
        return 1


#: Each embedded folder this process opened, and what it was then (:func:`_folder_identity`).
_opened: dict[Path, tuple[Any, ...]] = {}


def _folder_identity(folder: Path) -> tuple[Any, ...]:
    """``(folder's device and inode, its chroma.sqlite3's inode)``, ``None`` for what is not there."""
    try:
        st = folder.stat()
        here: tuple[int, int] | None = (st.st_dev, st.st_ino)
    except OSError:
        return (None, None)
    try:
        db: int | None = (folder / "chroma.sqlite3").stat().st_ino
    except OSError:
        db = None
    return here, db


def _forget_a_ghost(folder: Path) -> None:
    """Before opening ``folder`` again in this process: if it is not the folder opened before (deleted and made
    again, or its database replaced), drop the Chroma system chromadb keeps for that path, which still serves the
    old one's data (chromadb shares one system per path in a process)."""
    key = folder.resolve()
    before = _opened.get(key)
    if before is None or before == _folder_identity(folder):
        return
    try:
        _drop_systems(key)
    except (ImportError, AttributeError) as e:  # another chromadb layout: say what to do instead
        raise StoreError(
            f"the store folder {folder} was deleted or replaced since this process opened it, and chromadb still "
            f"serves the old one in this process ({e}); restart the process to open the folder as it is now"
        ) from e
    logger.warning("the store folder %s is not the one this process opened before: opening it afresh", folder)


def _drop_systems(folder: Path) -> None:
    """Forget the Chroma systems chromadb keeps for ``folder`` in this process (one per path): the next client on
    it starts afresh. ``ImportError`` / ``AttributeError`` from another chromadb layout."""
    from chromadb.api.shared_system_client import SharedSystemClient

    systems = SharedSystemClient._identifier_to_system
    counts = SharedSystemClient._identifier_to_refcount
    for identifier in [i for i in systems if i and _same_folder(i, folder)]:
        systems.pop(identifier, None)
        counts.pop(identifier, None)


def _same_folder(identifier: str, folder: Path) -> bool:
    try:
        return Path(identifier).resolve() == folder
    except (OSError, ValueError):
        return False


def _cosines(distances: Sequence[float]) -> list[float]:
    """Chroma's cosine distances as cosines in [-1, 1] (one array operation for a row of hits)."""
    return np.clip(1.0 - np.asarray(distances, dtype=np.float64), -1.0, 1.0).tolist()


def _records(page: Mapping[str, Any], include: Sequence[str]) -> Iterator[dict[str, Any]]:
    for i, rid in enumerate(page["ids"]):
        rec: dict[str, Any] = {"id": rid}
        for field in include:
            values = page.get(field)
            rec[field[:-1] if field.endswith("s") else field] = None if values is None else values[i]
        yield rec


def _check_store_args(path: Any, host: Any, port: Any, ssl: Any, headers: Any, client: Any, in_memory: Any) -> None:
    """The store arguments' types, so that a mistake is an InputError here, not a connection failure later."""
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise InputError(f"path must be a folder path (str or pathlib.Path), got {type(path).__name__}")
    if path is not None and not str(os.fspath(path)).strip():
        raise InputError("path is empty; pass a folder path, e.g. './memory'")
    if not isinstance(in_memory, bool):
        raise InputError(f"in_memory must be True or False, got {in_memory!r}")
    if not isinstance(ssl, bool):
        raise InputError(f"ssl must be True or False, got {ssl!r}")
    if host is not None and (not isinstance(host, str) or not host.strip()):
        raise InputError(f"host must be a host name or address such as '127.0.0.1', got {host!r}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise InputError(f"port must be a port number from 1 to 65535, got {port!r}")
    if port is not None and host is None:
        raise InputError("port= needs host= (a Chroma server)")
    if headers is not None:
        pairs = headers.items() if isinstance(headers, Mapping) else [(None, None)]
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in pairs):  # values unshown: may be a token
            raise InputError(
                "headers must be a dict of str names to str values (e.g. {'Authorization': 'Bearer ...'}), got "
                + ("one with other values" if isinstance(headers, Mapping) else f"a {type(headers).__name__}")
            )
    if client is not None and not callable(getattr(client, "get_or_create_collection", None)):
        raise InputError(
            f"client must be a Chroma client (chromadb.PersistentClient, HttpClient, EphemeralClient, ...), "
            f"got {type(client).__name__}"
        )


def _persistent_folder(client: Any) -> Path | None:
    """The folder of an embedded client (``chromadb.PersistentClient``), ``None`` for a server or in-memory one."""
    try:
        settings = client.get_settings()
    except Exception:  # a client without settings (a wrapper, a test double): nothing to lock
        return None
    folder = getattr(settings, "persist_directory", None)
    remote = "fastapi" in str(getattr(settings, "chroma_api_impl", "")).lower()
    return Path(folder) if getattr(settings, "is_persistent", False) and folder and not remote else None


def _name_of(c: Any) -> str:
    return c if isinstance(c, str) else c.name


def _check_collection_name(name: str) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]", name):
        raise InputError(
            f"collection name {name!r} is not valid for Chroma: use 3-512 characters from [a-zA-Z0-9._-], "
            "starting and ending with a letter or digit (stay within 63 for older servers)"
        )
