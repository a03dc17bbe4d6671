"""Writes a :class:`~.pieces.PieceStore` did not see complete, replayed into it.

* :func:`replay_changes` — other processes' writes to a Chroma server, from its change log
  (:mod:`.changes`), before each search: their threads leave the cache, the lexical file takes
  their new texts from Chroma and drops their deleted ids;
* :func:`repair_writes` — a write of this store that a crash cut off, from its announcement in the
  write journal (:mod:`.journal`), on open: finished or undone, so that every turn holds one version.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import Any, Protocol

from .base import VectorBackend
from .cache import ThreadCache
from .changes import ChangeLog
from .journal import Journal
from .lexical import LexicalIndex
from .lexical_sync import SyncReport, lexical_text
from .views import ViewIndex

logger = logging.getLogger(__name__)

__all__ = ["repair_writes", "replay_changes"]


class ReplayedStore(Protocol):
    """What a replay needs of a store (:class:`~.pieces.PieceStore` has it)."""

    backend: VectorBackend
    lexical: LexicalIndex | None
    journal: Journal | None
    views: ViewIndex
    changes: ChangeLog | None
    cache: ThreadCache

    @property
    def collection_name(self) -> str: ...

    def changing(self, threads: Iterable[str] | None) -> AbstractContextManager[Any]: ...

    def sync_lexical(self, *, full: bool | None = None) -> SyncReport: ...


def replay_changes(store: ReplayedStore) -> None:
    """Take in what other processes wrote since the last look (a store shared through a server).

    Their threads leave the cache; the lexical file takes their new texts from Chroma and drops
    their deleted ids. A no-op for a store only this process writes.
    """
    if store.changes is None:
        return
    records, check, resync = store.changes.poll()
    if resync:
        store.cache.invalidate()
        store.sync_lexical(full=True)
        return
    upserted: list[str] = []
    deleted: list[str] = []
    for rec in records:
        store.cache.invalidate(rec.get("threads", ()))
        upserted += rec.get("up", [])
        deleted += rec.get("del", [])
    if store.lexical is not None and (upserted or deleted):
        gone = set(deleted) - set(upserted)
        stored = store.backend.get(upserted, include=("documents", "metadatas")) if upserted else []
        found = {r["id"]: r for r in stored}
        rows = [(rid, found[rid]) for rid in dict.fromkeys(upserted) if rid in found]
        store.lexical.write(
            [rid for rid, _ in rows],
            [lexical_text(r.get("document") or "", r.get("metadata")) for _, r in rows],
            [str((r.get("metadata") or {}).get("thread_id", "")) for _, r in rows],
            [str((r.get("metadata") or {}).get("turn_id", "")) for _, r in rows],
            delete=sorted(gone | (set(upserted) - set(found))),
            stored=[(r.get("document") or "", dict(r.get("metadata") or {})) for _, r in rows],
        )
    if check:
        store.sync_lexical()


def repair_writes(store: ReplayedStore) -> int:
    """Finish or undo the writes a crash cut off (their announcements in the store's journal), so that
    every turn holds exactly one version; returns how many were repaired.

    A write whose every new piece reached Chroma is finished (its stale pieces are deleted; the
    pieces it wrote again went to Chroma before the new ones); any other is undone (the new
    pieces that reached Chroma are deleted, with their views). A delete or clear is finished.
    The lexical file is then repaired from Chroma (``PieceStore.sync_lexical``). Only for a store this
    process alone writes (an embedded folder, or memory, whose announcements stay in the
    lexical file or, with ``lexical=False``, in a journal file beside Chroma's): on a Chroma
    server another process may have written the same pieces since, so nothing is repaired there,
    and a turn a crash cut off between its two Chroma steps keeps both versions until it is
    written again (the write removes the other version's pieces). The same holds for a write of
    several Chroma calls whose pieces share ids with the old version: their vectors may be old
    or new (their texts are the same).
    """
    journal = store.journal
    if journal is None or store.changes is not None or not journal.pending:
        return 0
    n = 0
    with store.changing(None):
        for found in journal.abandoned_writes():
            if found.get("clear"):
                gone = [r["id"] for r in store.backend.iter_records(None, include=())]
                store.backend.delete_ids(gone)
                store.views.clear()  # views hook
            elif "new" in found:
                new = list(found["new"])
                present = [r["id"] for r in store.backend.get(new, include=())] if new else []
                finish = len(present) == len(new)
                gone = list(found["stale"]) if finish else present
                logger.warning(
                    "%s an interrupted write to %r: %d piece(s) removed",
                    "finishing" if finish else "undoing",
                    store.collection_name,
                    len(gone),
                )
                store.backend.delete_ids(gone)
                store.views.delete_pieces(gone)  # views hook
            else:
                continue  # an older announcement that does not say which pieces are new: the lexical repair
            n += 1
        if store.lexical is None:
            journal.settle_all()  # with a lexical file, its repair from Chroma settles them
    return n
