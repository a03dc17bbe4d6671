"""``ExactStore``: pieces held in memory, searched exactly with numpy (the storage protocols of :mod:`.base`).

The evaluation harness runs the runtime's own search (:mod:`ctxret.query.search`) on it. A thread
scope is served by the same :class:`~.cache.ScopeView` the product uses for thread-scoped searches
(exact cosine, BM25 with the scope's statistics), so a number the harness measures is what the
product computes; an unscoped search is exact cosine over everything, without a lexical side.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .base import Fetched, Row, group_parents
from .cache import Block, ScopeView
from .schema import ParentKey, Scope
from .tokenize import Analysis, analysis

__all__ = ["ExactStore"]


class ExactStore:
    """Exact search over ``(ids, vectors, documents, metadatas)``; scopes by ``thread_id`` metadata."""

    def __init__(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        analysis: Analysis | None = None,
    ) -> None:
        if not (len(ids) == len(vectors) == len(documents) == len(metadatas)):
            raise InputError("ids, vectors, documents and metadatas must have the same length")
        self.analysis = analysis if analysis is not None else _default()
        self.ids = list(ids)
        self.vectors = np.asarray(vectors, dtype=np.float32).reshape(len(self.ids), -1)
        self.documents = list(documents)
        self.metadatas = [dict(m) for m in metadatas]
        rows: dict[str, list[int]] = defaultdict(list)
        for i, m in enumerate(self.metadatas):
            rows[str(m.get("thread_id"))].append(i)
        self._blocks = {
            t: Block(
                [self.ids[i] for i in r],
                self.vectors[r],
                [self.documents[i] for i in r],
                [self.metadatas[i] for i in r],
            )
            for t, r in rows.items()
        }
        self._row = {rid: i for i, rid in enumerate(self.ids)}

    def resolve(self, scope: Scope) -> tuple[Any, Any]:
        """``(dense, lexical or None)`` backends for one search of ``scope`` (see ``PieceStore.resolve``)."""
        if scope.thread_ids is None:
            if scope.where:
                raise InputError("ExactStore evaluates where filters inside a thread scope only")
            return self, None
        empty = Block([], np.zeros((0, self.vectors.shape[1]), np.float32), [], [])
        view = ScopeView([self._blocks.get(t, empty) for t in scope.thread_ids], scope.where, self.analysis)
        return view, view

    # the DenseBackend protocol, unscoped: exact cosine over everything
    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        dense, _ = self.resolve(scope)
        if dense is not self:
            return dense.dense(vectors, n, scope)
        q = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        if not self.ids or n < 1:
            return [[] for _ in range(len(q))]
        scores = self.vectors @ q.T
        out: list[list[Row]] = []
        for j in range(q.shape[0]):
            top = np.argsort(-scores[:, j], kind="stable")[:n]
            out.append(
                [
                    (self.ids[r], self.documents[r], float(np.clip(scores[r, j], -1.0, 1.0)), dict(self.metadatas[r]))
                    for r in map(int, top)
                ]
            )
        return out

    def fetch(self, ids: Sequence[str], scope: Scope) -> dict[str, Fetched]:
        out: dict[str, Fetched] = {}
        for rid in ids:
            r = self._row.get(rid)
            if r is None or not scope.holds(self.metadatas[r]):
                continue
            out[rid] = (self.documents[r], dict(self.metadatas[r]), self.vectors[r])
        return out

    def parents(self, keys: Iterable[ParentKey]) -> dict[ParentKey, list[dict[str, Any]]]:
        wanted = set(keys)
        return {k: v for k, v in group_parents(self.metadatas).items() if k in wanted}

    def document_pieces(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
        """The metadata of every piece of each ``(thread_id, doc_id)`` document."""
        wanted = set(keys)
        out: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for m in self.metadatas:
            key = (str(m.get("thread_id")), str(m.get("doc_id")))
            if m.get("doc_id") is not None and key in wanted:
                out.setdefault(key, []).append(dict(m))
        return out


def _default() -> Analysis:
    return analysis("english")
