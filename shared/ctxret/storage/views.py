"""The vectors of LLM-written views (:mod:`ctxret.ingest.views`): a companion collection ``<collection>-views``.

A view record is one embedded view text (``document``) with ``piece_id``, ``thread_id``,
``turn_id``, ``view_kind`` and ``view_ordinal`` in its metadata; its id is
``<piece id>~<kind>~<n>``. Nothing else reads this collection: the piece collection's counts,
parents, change detection and lexical index never see a view. The texts themselves are stored
with their piece (``view_texts``), so this collection is derived data: a rebuild re-embeds it from
the pieces without calling the LLM.

:class:`ViewIndex` is attached to a :class:`~ctxret.storage.pieces.PieceStore` (``store.views``)
and follows every change the pieces go through, through these hooks (see ARCHITECTURE.md):

* ``open(config)`` — the index opened (views on when ``config["views"]`` names any);
* ``write(records, name)`` — *before* the pieces are written: the written pieces' old views are
  removed and the new ones upserted (a crash leaves views without a piece, which a search drops:
  a view only counts when its piece is fetched inside the scope — never the other way round);
* ``delete_pieces(ids, name)`` — after stale or deleted pieces are removed; ``clear()``;
* ``load_thread(block)`` — a thread's views join its cached :class:`~.cache.Block`, so they are
  dropped whenever the thread's pieces are (every write, delete and rebuild);
* ``begin_rebuild`` / ``abandon_rebuild`` / ``swap`` / ``swapped`` / ``recover(names)`` — the
  views of a rebuild are written beside it (``<collection>-rebuild-views``) and renamed with it,
  in an order that :meth:`ViewIndex.recover` can always finish from the piece collections' names.

Search (:mod:`ctxret.query.views`): a thread scope searches its cached views in memory
(:class:`MemoryViews`, exact); anything else queries this collection (:class:`ChromaViews`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import VectorBackend
from .cache import Block
from .schema import Scope

logger = logging.getLogger(__name__)

__all__ = [
    "VIEWS_SUFFIX",
    "ViewRecords",
    "ViewRow",
    "ViewedBlock",
    "MemoryViews",
    "ChromaViews",
    "ViewIndex",
    "view_id",
]

#: The views of collection ``X`` live in ``X-views``.
VIEWS_SUFFIX = "-views"
_REBUILD, _PREVIOUS = "-rebuild", "-previous"  # PieceStore's rebuild suffixes

#: One view match: ``(piece id, cosine, view kind, view text)``.
ViewRow = tuple[str, float, str, str]


def view_id(piece_id: str, kind: str, ordinal: int) -> str:
    return f"{piece_id}~{kind}~{ordinal}"


@dataclass
class ViewRecords:
    """The views of the pieces one write stores: one row per view text, and every piece they cover
    (a covered piece with no row has no views: its old ones are removed)."""

    pieces: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    documents: list[str] = field(default_factory=list)
    metadatas: list[dict[str, Any]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)


class ViewedBlock(Block):
    """A thread's :class:`~.cache.Block` with its views: vectors, the row of their piece, kinds, texts.

    Its length counts pieces and views, so the thread cache's bound is in stored vectors.
    """

    __slots__ = ("view_vectors", "view_rows", "view_kinds", "view_texts")

    def __init__(
        self, block: Block, vectors: np.ndarray, rows: Sequence[int], kinds: Sequence[str], texts: Sequence[str]
    ) -> None:
        super().__init__(block.ids, block.vectors, block.documents, block.metadatas)
        self.view_vectors = (
            np.asarray(vectors, dtype=np.float32).reshape(len(rows), -1) if len(rows) else np.zeros((0, 0), np.float32)
        )
        self.view_rows = np.asarray(rows, dtype=np.int64)
        self.view_kinds = list(kinds)
        self.view_texts = list(texts)

    def __len__(self) -> int:
        return len(self.ids) + len(self.view_rows)


class MemoryViews:
    """Exact view search over the blocks of a scope (in the scope's piece order; ``allowed``: its
    ``where`` mask over those pieces, as :class:`~.cache.ScopeView` computes it)."""

    def __init__(self, blocks: Sequence[Block], allowed: np.ndarray | None = None) -> None:
        vecs, rows, kinds, texts, ids = [], [], [], [], []
        offset = 0
        for b in blocks:
            if isinstance(b, ViewedBlock) and len(b.view_rows):
                vecs.append(b.view_vectors)
                rows.append(b.view_rows + offset)
                kinds.extend(b.view_kinds)
                texts.extend(b.view_texts)
            ids.extend(b.ids)
            offset += len(b.ids)
        self.piece_ids = ids
        self.rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        self.vectors = np.vstack(vecs) if vecs else np.zeros((0, 0), np.float32)
        self.kinds, self.texts = kinds, texts
        if allowed is not None and len(self.rows):
            keep = np.asarray(allowed, dtype=bool)[self.rows]
            self.rows, self.vectors = self.rows[keep], self.vectors[keep]
            self.kinds = [k for k, ok in zip(self.kinds, keep, strict=False) if ok]
            self.texts = [t for t, ok in zip(self.texts, keep, strict=False) if ok]

    def __len__(self) -> int:
        return len(self.rows)

    def search(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[ViewRow]]:
        """Per query vector, the ``n`` pieces whose best view is nearest: ``(piece id, cosine, kind, text)``."""
        q = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
        if not len(self.rows) or n < 1:
            return [[] for _ in range(len(q))]
        if self.vectors.shape[1] != q.shape[1]:
            return [[] for _ in range(len(q))]
        scores = self.vectors @ q.T
        return [
            _best_per_piece(scores[:, j], self.rows, self.piece_ids, self.kinds, self.texts, n)
            for j in range(q.shape[0])
        ]


def _best_per_piece(
    col: np.ndarray, rows: np.ndarray, ids: Sequence[str], kinds: Sequence[str], texts: Sequence[str], n: int
) -> list[ViewRow]:
    out: list[ViewRow] = []
    seen: set[int] = set()
    for i in np.argsort(-col, kind="stable"):
        r = int(rows[i])
        if r in seen:
            continue
        seen.add(r)
        out.append((ids[r], float(np.clip(col[i], -1.0, 1.0)), kinds[i], texts[i]))
        if len(out) == n:
            break
    return out


class ChromaViews:
    """View search through Chroma's index of the views collection (unscoped searches, or a thread
    scope with a filter the in-memory path does not evaluate). The caller's ``where`` is on piece
    metadata, which views do not hold: it is enforced when the matched pieces are fetched."""

    #: Views asked per wanted piece (a piece has several views; several may match).
    OVERFETCH = 4

    def __init__(self, backend: VectorBackend, name: str) -> None:
        self.vector_store = backend
        self.name = name

    def search(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[ViewRow]]:
        where = Scope(scope.thread_ids).chroma_where() if scope.thread_ids is not None else None
        factor = self.OVERFETCH * (4 if scope.where else 1)
        rows = self.vector_store.query(vectors, n * factor, where, name=self.name)
        out: list[list[ViewRow]] = []
        for row in rows:
            best: dict[str, ViewRow] = {}
            for _, doc, cos, meta in row:
                pid = str(meta.get("piece_id", ""))
                if pid and pid not in best:
                    best[pid] = (pid, float(cos), str(meta.get("view_kind", "")), doc or "")
            out.append(list(best.values())[:n])
        return out


class ViewIndex:
    """The views collection of a piece store (see the module docstring for its hooks)."""

    def __init__(self, backend: VectorBackend) -> None:
        self.vector_store = backend
        #: Whether the open index has views (``IndexConfig.views``); off: writes and searches skip them.
        self.enabled = False

    def name(self, pieces: str | None = None) -> str:
        return (pieces or self.vector_store.collection_name) + VIEWS_SUFFIX

    # -- lifecycle ------------------------------------------------------------------------------
    def open(self, config: Mapping[str, Any]) -> None:
        self.enabled = bool(config.get("views"))
        if self.enabled:
            self._ensure(self.vector_store.collection_name)

    def _ensure(self, pieces: str) -> str:
        name = self.name(pieces)
        if not self.vector_store.exists(name):
            self.vector_store.open({"views_of": pieces}, name=name)
        return name

    # -- writes ---------------------------------------------------------------------------------
    def write(self, records: ViewRecords | None, name: str | None = None) -> None:
        """Replace the views of ``records.pieces`` with ``records`` (before the pieces are written)."""
        if records is None or not (self.enabled or len(records)):
            return
        target = self._ensure(name or self.vector_store.collection_name)
        main = name is None or name == self.vector_store.collection_name
        if main:  # a rebuild target starts empty: nothing to replace
            self._delete_of(records.pieces, target)
        if len(records):
            self.vector_store.upsert(records.ids, records.vectors, records.documents, records.metadatas, name=target)

    def delete_pieces(self, piece_ids: Sequence[str], name: str | None = None) -> None:
        """Remove the views of these pieces (after the pieces themselves)."""
        target = self.name(name)
        if self.enabled and piece_ids and self.vector_store.exists(target):
            self._delete_of(piece_ids, target)

    def _delete_of(self, piece_ids: Iterable[str], target: str) -> None:
        ids = [r["id"] for r in self.vector_store.records_of("piece_id", piece_ids, include=(), name=target)]
        self.vector_store.delete_ids(ids, name=target)

    def clear(self) -> None:
        name = self.name()
        if self.enabled and self.vector_store.exists(name):
            ids = [r["id"] for r in self.vector_store.iter_records(None, include=(), name=name)]
            self.vector_store.delete_ids(ids, name=name)

    def count(self) -> int:
        name = self.name()
        return self.vector_store.count(name) if self.vector_store.exists(name) else 0

    # -- reads ----------------------------------------------------------------------------------
    def load_thread(self, block: Block, thread_id: str) -> Block:
        """``block`` with the thread's views (only views whose piece is in the block)."""
        if not self.enabled or not len(block):
            return block
        recs = list(
            self.vector_store.iter_records(
                {"thread_id": thread_id}, include=("embeddings", "documents", "metadatas"), name=self.name()
            )
        )
        row_of = {pid: i for i, pid in enumerate(block.ids)}
        keep = [
            (row_of[str((r.get("metadata") or {}).get("piece_id"))], r)
            for r in recs
            if str((r.get("metadata") or {}).get("piece_id")) in row_of
        ]
        if not keep:
            return block
        return ViewedBlock(
            block,
            np.asarray([r["embedding"] for _, r in keep], dtype=np.float32),
            [row for row, _ in keep],
            [str((r.get("metadata") or {}).get("view_kind", "")) for _, r in keep],
            [r.get("document") or "" for _, r in keep],
        )

    def backend(self, scope: Scope, dense: Any) -> MemoryViews | ChromaViews | None:
        """The view backend of one search: in memory when ``dense`` is a thread view over cached blocks."""
        if not self.enabled:
            return None
        blocks = getattr(dense, "blocks", None)
        if blocks is not None:
            return MemoryViews(blocks, getattr(dense, "allowed", None))
        return ChromaViews(self.vector_store, self.name())

    # -- rebuild --------------------------------------------------------------------------------
    def begin_rebuild(self, temp: str, config: Mapping[str, Any]) -> None:
        """Before a rebuild refills ``temp``: no leftovers, and ``temp``'s views collection when the new config
        has views."""
        self.vector_store.drop(self.name(temp))
        self.vector_store.drop(self.name(self.vector_store.collection_name + _PREVIOUS))
        self._rebuilt_enabled = bool(config.get("views"))
        if self._rebuilt_enabled:
            self._ensure(temp)

    def abandon_rebuild(self, temp: str) -> None:
        self.vector_store.drop(self.name(temp))

    def swap(self, temp: str) -> None:
        """Before the pieces are swapped: current views → ``-previous-views``, ``temp``'s → current."""
        name = self.vector_store.collection_name
        current, previous, rebuilt = self.name(name), self.name(name + _PREVIOUS), self.name(temp)
        self.vector_store.drop(previous)
        if self.vector_store.exists(current):
            self.vector_store.rename(current, previous)
        if self.vector_store.exists(rebuilt):
            self.vector_store.rename(rebuilt, current)

    def swapped(self) -> None:
        """After the pieces are swapped: the old views go."""
        self.vector_store.drop(self.name(self.vector_store.collection_name + _PREVIOUS))
        self.enabled = getattr(self, "_rebuilt_enabled", self.enabled)

    def recover(self, names: set[str]) -> None:
        """Bring the views in line with an interrupted rebuild, given the store's collection names
        *before* the pieces are recovered (:func:`.rebuild.recover` decides for the pieces; the views
        follow: the rebuilt pieces keep the rebuilt views, the old pieces the old ones)."""
        name = self.vector_store.collection_name
        temp, previous = name + _REBUILD, name + _PREVIOUS
        current_v, previous_v, temp_v = self.name(name), self.name(previous), self.name(temp)
        if name in names:
            rebuilt = previous in names and temp not in names  # the swap finished; only -previous was left
        else:
            rebuilt = previous in names and temp in names  # between the renames: -rebuild takes the name
        if not ({temp, previous} & names):
            rebuilt = True  # no rebuild in flight: whatever is current is right; leftovers go
        if rebuilt:
            for leftover in (previous_v, temp_v):
                if leftover in names:
                    self.vector_store.drop(leftover)
            return
        # the old pieces stay: their views are -previous-views when the swap had started, else current
        if previous_v in names:
            logger.warning("restoring %r after an interrupted rebuild of %r", current_v, name)
            self.vector_store.drop(current_v)
            self.vector_store.rename(previous_v, current_v)
        if temp_v in names:
            self.vector_store.drop(temp_v)
