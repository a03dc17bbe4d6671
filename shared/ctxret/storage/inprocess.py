"""``InProcessBackend``: the :class:`~.base.VectorBackend` in this process's memory, searched exactly with numpy.

Named collections of records held in dicts, in the order first written; cosine search is exact (every matching
record scored, ties in that order); ``where`` is evaluated by :mod:`.where` (Chroma's reading, fractional numbers
compared as numbers). Nothing is shared with another process or kept after :meth:`InProcessBackend.close`. It opens
in microseconds and needs no chromadb: ``Store.memory(backend="inprocess")`` runs the whole product on it (tests,
notebooks). ``tests/storage/test_backend_conformance.py`` holds it to Chroma's answers.

It is not :class:`~.memory.ExactStore`: that one is a read-only *search* store built once from arrays (the
harness's, at the level of :class:`~.pieces.PieceStore`); this one is what a :class:`~.pieces.PieceStore` writes
into, one level below, with the writes, collections and filters the rest of storage uses.
"""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CtxretError, InputError, StoreError
from .base import CONFIG_PREFIX, DEFAULT_COLLECTION, DEFERRED, RecordQueries, Row
from .where import Unsupported, compile_where

__all__ = ["InProcessBackend"]

_SCALARS = (str, int, float, bool)


@dataclass
class _Record:
    vector: np.ndarray
    document: str | None
    metadata: dict[str, Any]
    seq: int  # when first written: the order reads give


@dataclass
class _Collection:
    metadata: dict[str, Any]
    records: dict[str, _Record] = field(default_factory=dict)  # in the order first written
    dim: int | None = None
    written: int = 0
    _matrix: tuple[list[str], np.ndarray] | None = None  # (ids, unit vectors), dropped on every write

    def matrix(self) -> tuple[list[str], np.ndarray]:
        if self._matrix is None:
            ids = list(self.records)
            vecs = np.stack([self.records[i].vector for i in ids]).astype(np.float64) if ids else np.zeros((0, 0))
            norms = np.linalg.norm(vecs, axis=1, keepdims=True) if ids else np.zeros((0, 1))
            self._matrix = ids, np.divide(vecs, norms, out=np.zeros_like(vecs), where=norms > 0)
        return self._matrix


class InProcessBackend(RecordQueries):
    """Collections of records in this process's memory (see the module docstring)."""

    path: Path | None = None
    server: bool = False

    def __init__(self, *, collection: str = DEFAULT_COLLECTION) -> None:
        if not isinstance(collection, str) or not collection.strip():
            raise InputError(f"collection must be a non-empty name, got {collection!r}")
        self.collection_name = collection
        self.location = "memory"
        self._collections: dict[str, _Collection] = {}
        self._lock = threading.RLock()
        self._closed = False

    @property
    def writers_key(self) -> str:
        return f"inprocess:{id(self)}"

    def check_present(self, *, writing: bool = False) -> None:
        if self._closed:
            raise StoreError("this in-process store was closed and its pieces freed; open a new index to use one")

    def close(self, *, private: bool = False) -> None:
        with self._lock:
            self._collections.clear()
            self._closed = True

    # -- collections -------------------------------------------------------------------------
    def _col(self, name: str | None) -> _Collection:
        self.check_present()
        name = name or self.collection_name
        col = self._collections.get(name)
        if col is None:
            raise CtxretError(f"collection {name!r} at {self.location} is not open; open it with a config first")
        return col

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._collections)

    def exists(self, name: str | None = None) -> bool:
        return (name or self.collection_name) in self._collections

    def stored_config(self, name: str | None = None) -> dict[str, Any] | None:
        col = self._collections.get(name or self.collection_name)
        if col is None:
            return None
        meta = copy.deepcopy(col.metadata)
        return {k[len(CONFIG_PREFIX) :]: v for k, v in meta.items() if k.startswith(CONFIG_PREFIX)}

    def open(self, config: Mapping[str, Any], name: str | None = None) -> None:
        """Open or create a collection; an existing one keeps the config it was created with (as Chroma's
        ``get_or_create_collection``)."""
        self._create(name or self.collection_name, {f"{CONFIG_PREFIX}{k}": v for k, v in config.items()})

    def open_side(self, name: str, role: str) -> None:
        self._create(name, {f"{CONFIG_PREFIX}{role}": True})

    def _create(self, name: str, metadata: dict[str, Any]) -> None:
        if not isinstance(name, str) or not name:
            raise InputError(f"collection name must be a non-empty string, got {name!r}")
        self.check_present()
        with self._lock:
            self._collections.setdefault(name, _Collection(copy.deepcopy(metadata)))

    def drop(self, name: str) -> None:
        with self._lock:
            self._collections.pop(name, None)

    def rename(self, old: str, new: str) -> None:
        with self._lock:
            if old == new:
                self._col(old)
                return
            if new in self._collections:
                raise StoreError(f"cannot rename collection {old!r} to {new!r}: {new!r} exists; drop it first")
            self._collections[new] = self._col(old)
            del self._collections[old]

    def drop_orphan_segments(self) -> int:
        return 0  # a dropped collection's memory goes with it

    # -- writes ------------------------------------------------------------------------------
    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None = None,
    ) -> None:
        self._write(ids, vectors, documents, metadatas, name, replace=True)

    def add(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str] | None,
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None = None,
    ) -> None:
        self._write(ids, vectors, documents, metadatas, name, replace=False)

    def _write(
        self,
        ids: Sequence[str],
        vectors: Any,
        documents: Sequence[str] | None,
        metadatas: Sequence[Mapping[str, Any]],
        name: str | None,
        *,
        replace: bool,
    ) -> None:
        ids = list(ids)
        if not ids:
            return
        col = self._col(name)
        vecs = _vectors(vectors, len(ids))
        docs = list(documents) if documents is not None else [None] * len(ids)
        if not (len(vecs) == len(docs) == len(metadatas) == len(ids)):
            raise _refused("ids, vectors, documents and metadatas must have the same length")
        _check_ids(ids)
        metas = [_metadata(m, i) for i, m in enumerate(metadatas)]
        for d in docs:
            if d is not None and not isinstance(d, str):
                raise _refused(f"a document must be a string, got {type(d).__name__}")
        with self._lock:
            if col.dim is not None and vecs.shape[1] != col.dim:
                raise _refused(f"the collection's vectors have {col.dim} dimensions, got {vecs.shape[1]}")
            col.dim = vecs.shape[1]
            for rid, vec, doc, meta in zip(ids, vecs, docs, metas, strict=True):
                old = col.records.get(rid)
                if old is None:
                    col.written += 1
                    col.records[rid] = _Record(
                        vec.copy(), doc, {k: v for k, v in meta.items() if v is not None}, col.written
                    )
                elif replace:  # Chroma's upsert: the metadata merged into the stored one, None removes a key
                    merged = dict(old.metadata)
                    for k, v in meta.items():
                        if v is None:
                            merged.pop(k, None)
                        else:
                            merged[k] = v
                    document = doc if documents is not None else old.document
                    col.records[rid] = _Record(vec.copy(), document, merged, old.seq)
            col._matrix = None

    def delete_ids(self, ids: Sequence[str], name: str | None = None) -> None:
        with self._lock:
            col = self._col(name)
            for rid in ids:
                col.records.pop(rid, None)
            col._matrix = None

    def delete_where(self, where: Mapping[str, Any] | None, name: str | None = None) -> None:
        with self._lock:
            col = self._col(name)
            keep = _predicate(where)
            for rid in [r for r, rec in col.records.items() if keep(rec.metadata)]:
                del col.records[rid]
            col._matrix = None

    # -- reads -------------------------------------------------------------------------------
    def iter_records(
        self,
        where: Mapping[str, Any] | None = None,
        include: Sequence[str] = ("metadatas",),
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[dict[str, Any]]:
        match = _predicate(where)
        with self._lock:
            found = [(rid, rec) for rid, rec in self._col(name).records.items() if match(rec.metadata)]
        if limit is not None:
            found = found[: max(0, limit)]
        return iter([_out(rid, rec, include) for rid, rec in found])

    def get(
        self,
        ids: Sequence[str],
        include: Sequence[str] = ("documents", "metadatas"),
        where: Mapping[str, Any] | None = None,
        name: str | None = None,
    ) -> list[dict[str, Any]]:
        match = _predicate(where)
        wanted = set(ids)
        with self._lock:
            records = self._col(name).records
            found = sorted(((rid, records[rid]) for rid in wanted if rid in records), key=lambda x: x[1].seq)
        return [_out(rid, rec, include) for rid, rec in found if match(rec.metadata)]

    def query(
        self,
        vectors: np.ndarray,
        n_results: int,
        where: Mapping[str, Any] | None = None,
        name: str | None = None,
        *,
        texts: bool = True,
    ) -> list[list[Row]]:
        if len(vectors) == 0 or n_results < 1:
            return [[] for _ in range(len(vectors))]
        match = _predicate(where)
        with self._lock:
            col = self._col(name)
            q = _vectors(vectors, len(vectors))
            if col.dim is not None and q.shape[1] != col.dim:
                raise InputError(
                    f"the query vectors have {q.shape[1]} dimensions, the collection's {col.dim}: embed the query "
                    "with the model the collection was written with"
                )
            ids, unit = col.matrix()
            rows = [r for r, rid in enumerate(ids) if match(col.records[rid].metadata)]
            records = col.records
        if not rows:
            return [[] for _ in range(len(q))]
        qn = q.astype(np.float64)
        qn = np.divide(
            qn,
            np.linalg.norm(qn, axis=1, keepdims=True),
            out=np.zeros_like(qn),
            where=np.linalg.norm(qn, axis=1, keepdims=True) > 0,
        )
        scores = unit[rows] @ qn.T
        out: list[list[Row]] = []
        for j in range(len(q)):
            order = np.argsort(-scores[:, j], kind="stable")[:n_results]
            row: list[Row] = []
            for r in map(int, order):
                rid = ids[rows[r]]
                cos = float(np.clip(scores[r, j], -1.0, 1.0))
                if texts:
                    rec = records[rid]
                    row.append((rid, rec.document or "", cos, dict(rec.metadata)))
                else:
                    row.append((rid, "", cos, DEFERRED))
            out.append(row)
        return out

    def count(self, name: str | None = None) -> int:
        return len(self._col(name).records)


def _refused(message: str) -> InputError:
    error = InputError(f"the in-process store refused to write records: {message}")
    error.nothing_stored = True  # type: ignore[attr-defined]  # checked whole before anything is applied
    return error


def _vectors(vectors: Any, n: int) -> np.ndarray:
    try:
        vecs = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise _refused(f"vectors must be numbers, one row per record ({e})") from e
    if vecs.ndim != 2 or len(vecs) != n:
        raise _refused(f"vectors must be {n} row(s) of numbers, got an array of shape {vecs.shape}")
    if not np.isfinite(vecs).all():
        raise _refused("vectors must not contain NaN or infinite values")
    return vecs


def _check_ids(ids: list[str]) -> None:
    for rid in ids:
        if not isinstance(rid, str) or not rid:
            raise _refused(f"an id must be a non-empty string, got {rid!r}")
    if len(set(ids)) != len(ids):
        twice = sorted({i for i in ids if ids.count(i) > 1})
        raise _refused(f"ids must be unique within one call; given twice: {twice[:5]}")


def _metadata(meta: Any, index: int) -> dict[str, Any]:
    if not isinstance(meta, Mapping) or not meta:
        raise _refused(f"metadata {index} must be a non-empty dict, got {meta!r}")
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if not isinstance(key, str) or key.startswith(("$", "#", "chroma:")):
            raise _refused(
                f"metadata key {key!r} is reserved or not a string (keys may not start with $, # or chroma:)"
            )
        if isinstance(value, list):
            if not all(isinstance(v, _SCALARS) for v in value):
                raise _refused(f"metadata {key!r}: a list holds strings, numbers or booleans only")
            value = list(value)
        elif value is not None and not isinstance(value, _SCALARS):
            raise _refused(f"metadata {key!r} must be a string, number, boolean or None, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _refused(f"metadata {key!r} must be a finite number, got {value!r}")
        out[key] = value
    return out


def _predicate(where: Mapping[str, Any] | None) -> Any:
    if not where:
        return lambda meta: True
    try:
        return compile_where(where, exact=True)
    except Unsupported as e:
        raise InputError(
            f"the in-process store cannot evaluate the where filter {dict(where)!r} ({e}); use Chroma's metadata "
            "operators $eq $ne $gt $gte $lt $lte $in $nin on strings, numbers and booleans, one key or one "
            "$and/$or of at least two clauses per filter"
        ) from e


def _out(rid: str, rec: _Record, include: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": rid}
    for fieldname in include:
        if fieldname == "metadatas":
            out["metadata"] = dict(rec.metadata) if rec.metadata else None
        elif fieldname == "documents":
            out["document"] = rec.document
        elif fieldname == "embeddings":
            out["embedding"] = rec.vector.copy()
        else:
            raise InputError(f"include takes 'documents', 'metadatas' and 'embeddings', got {fieldname!r}")
    return out
