"""``ExactStore``: pieces held in memory, searched exactly with numpy (the :class:`~ctxret.storage.base.DenseBackend` protocol).

The evaluation harness runs the runtime's own search (:mod:`ctxret.query.search`) on it, so a
number it measures is what the product's pipeline does, minus the approximate nearest-neighbour
index: exact cosine, ties broken by insertion order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InputError
from .base import Fetched, Row, group_parents
from .schema import ParentKey, Scope

__all__ = ["ExactStore"]


class ExactStore:
    """Exact search over ``(ids, vectors, documents, metadatas)``; scopes by ``thread_id`` metadata."""

    def __init__(
        self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str], metadatas: Sequence[Mapping[str, Any]]
    ) -> None:
        if not (len(ids) == len(vectors) == len(documents) == len(metadatas)):
            raise InputError("ids, vectors, documents and metadatas must have the same length")
        self.ids = list(ids)
        self.vectors = np.asarray(vectors, dtype=np.float32).reshape(len(self.ids), -1)
        self.documents = list(documents)
        self.metadatas = [dict(m) for m in metadatas]
        self._row = {rid: i for i, rid in enumerate(self.ids)}
        self._threads = np.array([str(m.get("thread_id")) for m in self.metadatas], dtype=object)

    def _rows(self, scope: Scope) -> np.ndarray:
        if scope.where:
            raise InputError("ExactStore scopes by thread only; it does not evaluate Chroma where filters")
        if scope.thread_ids is None:
            return np.arange(len(self.ids))
        return np.flatnonzero(np.isin(self._threads, list(scope.thread_ids)))

    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        rows = self._rows(scope)
        q = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        if not len(rows) or n < 1:
            return [[] for _ in range(len(q))]
        scores = self.vectors[rows] @ q.T  # (pieces in scope, parts)
        out: list[list[Row]] = []
        for j in range(q.shape[0]):
            order = np.argsort(-scores[:, j], kind="stable")[:n]
            out.append(
                [
                    (self.ids[r], self.documents[r], float(np.clip(scores[i, j], -1.0, 1.0)), dict(self.metadatas[r]))
                    for i, r in ((int(i), int(rows[i])) for i in order)
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
        grouped = group_parents(self.metadatas)
        return {k: v for k, v in grouped.items() if k in wanted}
