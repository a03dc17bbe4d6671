"""Keeping the lexical file in step with its Chroma collection: what BM25 indexes for a piece, and the
repair that copies missing pieces' stored texts from Chroma (no re-embedding) and drops ids Chroma
does not have (:func:`sync_from_store`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from .base import VectorBackend
from .lexical import LexicalIndex

logger = logging.getLogger(__name__)

__all__ = ["SyncReport", "lexical_text", "sync_from_store", "write_records"]


# -- keeping the index in step with a Chroma collection -----------------------------------------
@dataclass(frozen=True)
class SyncReport:
    """What :func:`sync_from_store` changed in the lexical index."""

    added: int = 0
    removed: int = 0
    checked: int = 0  # pieces in the vector store

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed)


def lexical_text(document: str, metadata: Mapping[str, Any] | None) -> str:
    """What BM25 indexes for a piece: its stored text, plus its LLM-written context line if any."""
    context = (metadata or {}).get("context_text")
    return f"{document}\n{context}" if context else document


Record = tuple[str, str, str, str, str, dict[str, Any]]


def _records(store: VectorBackend, ids: Sequence[str]) -> Iterator[Record]:
    """``(id, lexical text, thread_id, turn_id, document, metadata)`` of ``ids`` from the store, in batches."""
    for start in range(0, len(ids), 1000):
        for rec in store.get(list(ids[start : start + 1000]), include=("documents", "metadatas")):
            meta = dict(rec.get("metadata") or {})
            doc = rec.get("document") or ""
            thread, turn = str(meta.get("thread_id", "")), str(meta.get("turn_id", ""))
            yield rec["id"], lexical_text(doc, meta), thread, turn, doc, meta


def write_records(lexical: LexicalIndex, records: Sequence[Record], delete: Sequence[str] = ()) -> None:
    """One :meth:`LexicalIndex.write` of records as :func:`_records` gives them."""
    lexical.write(
        [r[0] for r in records],
        [r[1] for r in records],
        [r[2] for r in records],
        [r[3] for r in records],
        delete=list(delete),
        stored=[(r[4], r[5]) for r in records],
    )


def sync_from_store(
    lexical: LexicalIndex, store: VectorBackend, *, full: bool | None = None, rebuild: bool = False, guard: bool = False
) -> SyncReport:
    """Make ``lexical`` hold exactly the pieces of ``store`` (a :class:`~.base.VectorBackend`).

    Compares id sets and copies the missing pieces' stored documents from Chroma (no embedding),
    deleting ids Chroma does not have. ``full=None`` (on open) does the id comparison only when
    cheap signals disagree: the pending marker is set, the file is fresh, or the counts differ.
    ``rebuild=True`` re-reads every stored piece and replaces the whole content in one transaction.

    ``guard`` (a store only this process writes): a vector store holding no piece while the lexical file holds some,
    with no clear announced, is a :class:`~ctxret.errors.StoreError` naming both and the fix; nothing is removed
    (the lexical file is then the only copy of the texts left, and an empty Chroma is a lost database, not a repair).
    """
    if rebuild:
        store_ids = [r["id"] for r in store.iter_records(None, include=())]
        before = lexical.ids()
        lexical.replace_all(_records(store, store_ids))
        lexical.fresh = False
        return SyncReport(
            added=len(set(store_ids) - before), removed=len(before - set(store_ids)), checked=len(store_ids)
        )
    n_store = store.count()
    if guard and n_store == 0 and not lexical.fresh:
        n_lexical = lexical.count()
        if n_lexical and lexical.journal.abandoned() is not None:  # ``None``: a clear cut off by a crash
            raise StoreError(
                f"{store.location} holds no piece of collection {store.collection_name!r}, but the lexical file "
                f"{lexical.path} holds {n_lexical:,}: the vector store was emptied or replaced outside ctxret, and "
                "repairing the lexical file from it would delete the only copy of the texts left; nothing was "
                "changed. Restore the store folder from a backup; or, if the collection was emptied on purpose, "
                "delete the lexical file (it is made again, empty)"
            )
    if full is None:
        full = lexical.fresh or lexical.journal.pending or lexical.count() != n_store
    if not full:
        return SyncReport(checked=n_store)
    # Pieces a gone writer announced may hold older content here than in the store (the same id
    # written again with other metadata): read again, with the missing ones. Read before the id
    # comparison, so that a writer that finishes meanwhile is not mistaken for a gone one.
    abandoned = lexical.journal.abandoned()
    store_ids = [r["id"] for r in store.iter_records(None, include=())]
    have = lexical.ids()
    missing = [i for i in store_ids if i not in have]
    extra = have - set(store_ids)
    again = [i for i in store_ids if i in have and (abandoned is None or i in abandoned)]
    if not have and missing:
        lexical.replace_all(_records(store, missing))
    else:
        # In batches, so a large repair never holds the whole corpus in memory.
        batch: list[Record] = []
        for rec in _records(store, missing + again):
            batch.append(rec)
            if len(batch) >= 1000:
                write_records(lexical, batch)
                batch = []
        if batch:
            write_records(lexical, batch)
        lexical.write(delete=sorted(extra))
    lexical.journal.settle_all()
    lexical.fresh = False
    if missing or extra or again:
        logger.info(
            "lexical index %s repaired from the vector store: %d added, %d removed, %d read again",
            lexical.path,
            len(missing),
            len(extra),
            len(again),
        )
    return SyncReport(added=len(missing), removed=len(extra), checked=len(store_ids))
