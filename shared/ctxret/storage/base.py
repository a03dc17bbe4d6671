"""What a search needs from storage: two small protocols.

:class:`~ctxret.storage.pieces.PieceStore` (Chroma + the SQLite lexical index) implements both
for the product; :class:`~ctxret.storage.memory.ExactStore` implements them with exact numpy
search over vectors held in memory (the evaluation harness, tests). The search executor
(:mod:`ctxret.query.search`) only ever talks to these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from .schema import ParentKey, Scope

Row = tuple[str, str, float, dict[str, Any]]  # (id, document, cosine, metadata), best first
Fetched = tuple[str, dict[str, Any], np.ndarray]  # (document, metadata, stored vector)


class StoredPieces(NamedTuple):
    """What a write reads before it diffs (``PieceStore.existing``): the stored piece ids of turns, and
    of every turn of documents."""

    turns: dict[tuple[str, str], set[str]]  # (thread_id, turn_id) -> piece ids
    documents: dict[tuple[str, str], dict[str, set[str]]]  # (thread_id, doc_id) -> turn_id -> piece ids


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


def group_parents(records: Iterable[Mapping[str, Any]]) -> dict[ParentKey, list[dict[str, Any]]]:
    """Piece metadata grouped by ``(thread_id, parent_id)``."""
    out: dict[ParentKey, list[dict[str, Any]]] = {}
    for meta in records:
        pid, thread = meta.get("parent_id"), meta.get("thread_id")
        if pid is not None and thread is not None:
            out.setdefault((str(thread), str(pid)), []).append(dict(meta))
    return out
