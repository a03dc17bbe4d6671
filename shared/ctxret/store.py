"""Chroma storage: embedded (PersistentClient), a Chroma server (HttpClient) or in memory.

Always cosine space; Chroma's embedding function is never used (vectors are always passed);
telemetry off; writes chunked to the client's max batch size; metadata flattened to scalars.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CtxretError, InputError

logger = logging.getLogger(__name__)

DEFAULT_COLLECTION = "ctxret"
#: Prefix of the index-config keys in a collection's metadata.
CONFIG_PREFIX = "ctxret:"
_GET_PAGE = 1000


def flatten_metadata(meta: Mapping[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """Flatten caller metadata to Chroma's scalar values.

    Nested dicts become dotted keys (``{"a": {"b": 1}}`` → ``{"a.b": 1}``); lists, tuples and other
    values become JSON strings; ``None`` values are left out (Chroma cannot filter on them).
    """
    out: dict[str, str | int | float | bool] = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not key:
            raise InputError(f"metadata keys must be non-empty strings, got {key!r}")
        name = f"{prefix}{key}"
        if value is None:
            continue
        if isinstance(value, (bool, int, str)):
            out[name] = value
        elif isinstance(value, float):
            if value != value or value in (float("inf"), float("-inf")):
                raise InputError(f"metadata {name!r} is {value}; Chroma stores finite numbers only")
            out[name] = value
        elif isinstance(value, np.generic):
            out[name] = value.item()
        elif isinstance(value, Mapping):
            out.update(flatten_metadata(value, f"{name}."))
        else:
            try:
                out[name] = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
            except (TypeError, ValueError) as e:
                raise InputError(f"metadata {name!r} of type {type(value).__name__} cannot be stored") from e
    return out


class ChromaStore:
    """One Chroma collection holding ctxret pieces.

    Pick one backend: ``path`` (embedded, persistent; the default), ``host``/``port`` (a Chroma
    server; ``headers`` for auth), ``client`` (any Chroma client you made), or ``in_memory=True``.
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
    ) -> None:
        import chromadb
        from chromadb.config import Settings

        chosen = [x for x in (path is not None, host is not None, client is not None, in_memory) if x]
        if len(chosen) > 1:
            raise InputError("choose one store: path=, host=/port=, client= or in_memory=True")
        settings = Settings(anonymized_telemetry=False)
        self.path: Path | None = None
        if client is not None:
            self.client = client
            self.location = f"client {type(client).__name__}"
        elif host is not None:
            self.client = chromadb.HttpClient(
                host=host, port=int(port or 8000), ssl=ssl, headers=dict(headers or {}), settings=settings
            )
            self.location = f"{'https' if ssl else 'http'}://{host}:{port or 8000}"
        elif in_memory:
            self.client = chromadb.EphemeralClient(settings=settings)
            self.location = "memory"
        else:
            self.path = Path(path if path is not None else ".ctxret").expanduser()
            if self.path.exists() and not self.path.is_dir():
                raise InputError(f"store path {str(self.path)!r} exists and is not a folder; pass a folder path")
            self.path.mkdir(parents=True, exist_ok=True)
            self.client = chromadb.PersistentClient(path=str(self.path), settings=settings)
            self.location = str(self.path)
        _check_collection_name(collection)
        self.collection_name = collection
        self._collection: Any | None = None
        try:
            self.max_batch = int(self.client.get_max_batch_size())
        except Exception:  # older servers: Chroma's documented local limit
            self.max_batch = 5461

    # -- collection and config -------------------------------------------------------------
    def exists(self, name: str | None = None) -> bool:
        name = name or self.collection_name
        return any(_name_of(c) == name for c in self.client.list_collections())

    def stored_config(self, name: str | None = None) -> dict[str, Any] | None:
        """The index config recorded on the collection, or ``None`` when it does not exist."""
        name = name or self.collection_name
        if not self.exists(name):
            return None
        col = self.client.get_collection(name, embedding_function=None)
        meta = col.metadata or {}
        return {k[len(CONFIG_PREFIX) :]: v for k, v in meta.items() if k.startswith(CONFIG_PREFIX)}

    def open(self, config: Mapping[str, Any], name: str | None = None) -> Any:
        """Open (or create) the collection with ``config`` recorded in its metadata."""
        name = name or self.collection_name
        meta = {f"{CONFIG_PREFIX}{k}": v for k, v in config.items()}
        col = self.client.get_or_create_collection(
            name, configuration={"hnsw": {"space": "cosine"}}, metadata=meta, embedding_function=None
        )
        if name == self.collection_name:
            self._collection = col
        return col

    @property
    def collection(self) -> Any:
        if self._collection is None:
            raise CtxretError("the store is not open yet; open it with a config first")
        return self._collection

    def drop(self, name: str) -> None:
        if self.exists(name):
            self.client.delete_collection(name)

    def rename(self, old: str, new: str) -> None:
        col = self.client.get_collection(old, embedding_function=None)
        col.modify(name=new)
        if new == self.collection_name:
            self._collection = self.client.get_collection(new, embedding_function=None)

    # -- writes ------------------------------------------------------------------------------
    def upsert(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        collection: Any | None = None,
    ) -> None:
        col = collection if collection is not None else self.collection
        n = len(ids)
        if not (len(vectors) == len(documents) == len(metadatas) == n):
            raise InputError("ids, vectors, documents and metadatas must have the same length")
        for start in range(0, n, self.max_batch):
            end = start + self.max_batch
            col.upsert(
                ids=list(ids[start:end]),
                embeddings=np.asarray(vectors[start:end], dtype=np.float32),
                documents=list(documents[start:end]),
                metadatas=[dict(m) for m in metadatas[start:end]],
            )

    def delete_ids(self, ids: Sequence[str]) -> None:
        ids = list(ids)
        for start in range(0, len(ids), self.max_batch):
            self.collection.delete(ids=ids[start : start + self.max_batch])

    # -- reads -------------------------------------------------------------------------------
    def iter_records(
        self, where: Mapping[str, Any] | None = None, include: Sequence[str] = ("metadatas",), collection: Any | None = None
    ) -> Iterator[dict[str, Any]]:
        """All records matching ``where``, page by page: dicts with ``id`` and the included fields."""
        col = collection if collection is not None else self.collection
        offset = 0
        while True:
            page = col.get(where=dict(where) if where else None, include=list(include), limit=_GET_PAGE, offset=offset)
            ids = page["ids"]
            if not ids:
                return
            for i, rid in enumerate(ids):
                rec: dict[str, Any] = {"id": rid}
                for field in include:
                    values = page.get(field)
                    rec[field[:-1] if field.endswith("s") else field] = None if values is None else values[i]
                yield rec
            if len(ids) < _GET_PAGE:
                return
            offset += len(ids)

    def ids_where(self, where: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """``{id: metadata}`` of every record matching ``where``."""
        return {r["id"]: r["metadata"] for r in self.iter_records(where)}

    def query(
        self, vectors: np.ndarray, n_results: int, where: Mapping[str, Any] | None = None
    ) -> list[list[tuple[str, str, float, dict[str, Any]]]]:
        """One batched query: per row, ``(id, document, cosine, metadata)`` best first."""
        if len(vectors) == 0 or n_results < 1:
            return [[] for _ in range(len(vectors))]
        res = self.collection.query(
            query_embeddings=np.asarray(vectors, dtype=np.float32),
            n_results=int(n_results),
            where=dict(where) if where else None,
            include=["documents", "metadatas", "distances"],
        )
        out = []
        for row in range(len(vectors)):
            ids = res["ids"][row]
            docs = res["documents"][row]
            metas = res["metadatas"][row]
            dists = res["distances"][row]
            out.append(
                [(ids[j], docs[j], float(np.clip(1.0 - dists[j], -1.0, 1.0)), dict(metas[j] or {})) for j in range(len(ids))]
            )
        return out

    def count(self) -> int:
        return int(self.collection.count())


def _name_of(c: Any) -> str:
    return c if isinstance(c, str) else c.name


def _check_collection_name(name: str) -> None:
    import re

    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]", name):
        raise InputError(
            f"collection name {name!r} is not valid for Chroma: use 3-512 characters from [a-zA-Z0-9._-], "
            "starting and ending with a letter or digit (stay within 63 for older servers)"
        )
