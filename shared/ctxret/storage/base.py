"""The storage contracts.

What a search needs (two small read protocols): :class:`~ctxret.storage.pieces.PieceStore` (a vector
backend + the SQLite lexical index) implements both for the product; :class:`~ctxret.storage.memory.ExactStore`
implements them with exact numpy search over vectors held in memory (the evaluation harness). The search
executor (:mod:`ctxret.query.search`) only ever talks to these.

What the rest of storage needs of a vector store (:class:`VectorBackend`, reads and writes of named
collections): :class:`~ctxret.storage.chroma.ChromaStore` (embedded, server, client or in memory; the only
module that touches Chroma) and :class:`~ctxret.storage.inprocess.InProcessBackend` (dicts and exact numpy
search, in this process). ``tests/storage/test_backend_conformance.py`` holds every backend to the same answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np

from .schema import ParentKey, Scope

DEFAULT_COLLECTION = "ctxret"
#: Prefix of the index-config keys in a collection's metadata.
CONFIG_PREFIX = "ctxret:"

Row = tuple[str, str, float, dict[str, Any]]  # (id, document, cosine, metadata), best first
Fetched = tuple[str, dict[str, Any], np.ndarray]  # (document, metadata, stored vector)


class StoredPieces(NamedTuple):
    """What a write reads before it diffs (``PieceStore.existing``): the stored piece ids of turns, of every turn
    of documents, and of every chat turn of threads written whole."""

    turns: dict[tuple[str, str], set[str]]  # (thread_id, turn_id) -> piece ids
    documents: dict[tuple[str, str], dict[str, set[str]]]  # (thread_id, doc_id) -> turn_id -> piece ids
    threads: dict[str, dict[str, set[str]]]  # thread_id -> chat turn_id -> piece ids
    #: piece id -> its stored metadata (the diff compares it with the planned one: a new value, a new caller key)
    metadata: dict[str, Mapping[str, Any]] | None = None


class Deferred(dict):
    """The metadata of a row not read yet: a store may answer a search with ids, cosines and vectors
    only, and give the texts and metadata of the hits a search keeps through ``complete(ids)``
    (:func:`ctxret.query.search.assemble` asks for them). Never written to."""

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("deferred metadata is read-only")


#: The one :class:`Deferred` instance (its row's document is ``""`` until completed).
DEFERRED = Deferred()


class DenseBackend(Protocol):
    """Vector search over stored pieces."""

    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        """Per query vector, the top ``n`` pieces inside ``scope``: ``(id, document, cosine, metadata)``."""
        ...

    def fetch(self, ids: Sequence[str], scope: Scope) -> dict[str, Fetched]:
        """The pieces of ``ids`` that exist inside ``scope``, with their stored vectors."""
        ...

    def parents(self, keys: Iterable[ParentKey]) -> dict[ParentKey, list[dict[str, Any]]]:
        """The metadata of every piece of each ``(thread_id, parent_id)``."""
        ...

    # A backend whose rows may be DEFERRED also has
    #     complete(ids) -> {id: (document, metadata)}   (the ids that still exist)


class LexicalBackend(Protocol):
    """BM25 over the same pieces (see :class:`ctxret.storage.lexical.LexicalIndex`)."""

    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]: ...

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]: ...

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]: ...


class VectorBackend(Protocol):
    """A vector store of named collections of records ``(id, vector, document, metadata)``, always in cosine space.

    Every method takes an optional ``name`` (default: :attr:`collection_name`, the pieces) so that a rebuild can
    write beside the pieces and the views, the change log and the turn claims live in collections of their own.
    The semantics every backend keeps (what the conformance suite checks):

    * metadata values are strings, numbers and booleans; a ``None`` value is not stored; :meth:`upsert` of a stored
      id replaces its vector and document and *merges* its metadata into the stored one (a ``None`` value removes
      the key); :meth:`add` keeps the first record of an id and ignores later ones;
    * ``where`` is Chroma's metadata filter (``{key: value}``, ``$eq $ne $gt $gte $lt $lte $in $nin``, ``$and`` /
      ``$or``): ``$ne`` / ``$nin`` match a record without the key, the others never do, the order operators
      compare numbers only, a boolean is not a number;
    * records come back in the order first written (reads by id too); :meth:`query` best first, cosines in
      [-1, 1];
    * failures are :class:`~ctxret.errors.InputError` (a write or filter the store refuses: dimensions, reserved
      metadata keys, non-finite vectors, an id twice in one call) or :class:`~ctxret.errors.StoreError` (the
      store's own), each naming the fix; a write refused whole sets ``nothing_stored`` on its error.
    """

    #: The collection of the pieces.
    collection_name: str
    #: Where the store is, for messages (a folder, a server's address, ``memory``).
    location: str
    #: The folder of an embedded store (the lexical file and the write journal live beside it), else ``None``.
    path: Path | None
    #: Whether other processes may write the same collections (a server): then writes are logged for them
    #: (:mod:`.changes`) and appends claim their turn numbers (:mod:`.claims`).
    server: bool

    @property
    def writers_key(self) -> str:
        """What identifies this store among the stores of the process (one writer at a time each: :mod:`.lock`)."""
        ...

    def check_present(self, *, writing: bool = False) -> None:
        """A :class:`~ctxret.errors.StoreError` when the store was deleted or replaced under this process (``writing``:
        before a write, also when this process's hold on it was lost, e.g. an embedded folder's lock file removed)."""
        ...

    def close(self, *, private: bool = False) -> None: ...

    # collections
    def names(self) -> list[str]: ...

    def exists(self, name: str | None = None) -> bool: ...

    def stored_config(self, name: str | None = None) -> dict[str, Any] | None:
        """The config :meth:`open` recorded on the collection; ``None`` when it does not exist."""
        ...

    def open(self, config: Mapping[str, Any], name: str | None = None) -> None:
        """Open or create a collection of pieces (or views) recording ``config``."""
        ...

    def open_side(self, name: str, role: str) -> None:
        """Open or create a side collection (``role``: ``changes``, ``claims``): small records, any vector."""
        ...

    def drop(self, name: str) -> None: ...

    def rename(self, old: str, new: str) -> None: ...

    def drop_orphan_segments(self) -> int:
        """Space a dropped collection left behind, taken back; how many parts were removed."""
        ...

    # writes
    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None = None,
    ) -> None: ...

    def add(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str] | None,
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None = None,
    ) -> None: ...

    def delete_ids(self, ids: Sequence[str], name: str | None = None) -> None: ...

    def delete_where(self, where: Mapping[str, Any] | None, name: str | None = None) -> None:
        """Delete the records matching ``where`` (every record: ``None``)."""
        ...

    # reads
    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Records matching ``where``: dicts with ``id`` and the included fields (``metadata``, ``document``,
        ``embedding``)."""
        ...

    def get(
        self,
        ids: Sequence[str],
        include: Sequence[str] = ("documents", "metadatas"),
        where: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        """The records of ``ids`` that exist (and match ``where``), as :meth:`iter_records` gives them."""
        ...

    def records_of(
        self, key: str, values: Iterable[str], include: Sequence[str] = ("metadatas",), name: str | None = None
    ) -> Iterator[dict[str, Any]]: ...

    def document_records(self, keys: Iterable[tuple[str, str]]) -> list[tuple[str, tuple[str, str], dict[str, Any]]]:
        """``(piece id, (thread_id, doc_id), metadata)`` of every piece of each document."""
        ...

    def document_pieces(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]: ...

    def query(
        self,
        vectors: np.ndarray,
        n_results: int,
        where: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        texts: bool = True,
    ) -> list[list[Row]]:
        """Per query vector, the ``n_results`` nearest records matching ``where``, best first; ``texts=False``:
        the document ``""`` and the metadata :data:`DEFERRED`."""
        ...

    def count(self, name: str | None = None) -> int: ...


_IN_CHUNK = 256  # values per $in filter


class RecordQueries:
    """The reads a :class:`VectorBackend` builds from :meth:`VectorBackend.iter_records` (a base class of the
    backends: the same filters on every one)."""

    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def records_of(
        self, key: str, values: Iterable[str], include: Sequence[str] = ("metadatas",), name: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Records whose metadata ``key`` is one of ``values`` (filtered reads of 256 values at a time)."""
        wanted = sorted(set(values))
        for start in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[start : start + _IN_CHUNK]
            where = {key: chunk[0]} if len(chunk) == 1 else {key: {"$in": chunk}}
            yield from self.iter_records(where, include, name=name)

    def document_pieces(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The metadata of every piece of each ``(thread_id, doc_id)`` document (all its sections)."""
        out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for _, key, meta in self.document_records(keys):
            out.setdefault(key, []).append(meta)
        return out

    def document_records(self, keys: Iterable[tuple[str, str]]) -> list[tuple[str, tuple[str, str], dict[str, Any]]]:
        """``(piece id, (thread_id, doc_id), metadata)`` of every piece of each document (all its sections)."""
        by_thread: dict[str, set[str]] = {}
        for thread_id, doc_id in keys:
            by_thread.setdefault(str(thread_id), set()).add(str(doc_id))
        out: list[tuple[str, tuple[str, str], dict[str, Any]]] = []
        for thread_id, docs in sorted(by_thread.items()):
            wanted = sorted(docs)
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                clause = {"doc_id": chunk[0]} if len(chunk) == 1 else {"doc_id": {"$in": chunk}}
                for rec in self.iter_records({"$and": [{"thread_id": thread_id}, clause]}):
                    meta = rec["metadata"] or {}
                    if str(meta.get("thread_id")) == thread_id and meta.get("doc_id") is not None:
                        out.append((rec["id"], (thread_id, str(meta["doc_id"])), dict(meta)))
        return out


def group_parents(records: Iterable[Mapping[str, Any]]) -> dict[ParentKey, list[dict[str, Any]]]:
    """Piece metadata grouped by ``(thread_id, parent_id)``."""
    out: dict[ParentKey, list[dict[str, Any]]] = {}
    for meta in records:
        pid, thread = meta.get("parent_id"), meta.get("thread_id")
        if pid is not None and thread is not None:
            out.setdefault((str(thread), str(pid)), []).append(dict(meta))
    return out
