"""Space a store takes back: the slots of deleted vectors in Chroma's graph, the lexical file's free pages.

Measured (``benchmarks/bench_space.py``, BENCHMARKS.md "Space"): rewriting documents grows Chroma's HNSW segment
without bound — chromadb 1.5 marks a deleted vector deleted and never reuses its slot (about 1.8 KB per 384-d vector
ever written) — while its SQLite file and the lexical file level off (their free pages are reused). So
:func:`compact` copies the live pieces, their vectors as stored (nothing is embedded) and their views, into a new
collection beside the old one and swaps it in with the crash-safe rebuild (:mod:`.rebuild`: a crash at any point
leaves the old or the new collection, never a mix), then rewrites the lexical file without its free pages.

Automatic: the store counts the pieces it deleted since the last compaction (in its lexical or journal file); a write
or delete that brings that count up to the number of pieces left, and to at least :data:`AUTO_COMPACT_MIN`, compacts
before it returns. Each compaction copies no more vectors than were deleted since the last one, so its cost is spread
over those writes (a constant factor per deleted piece), and the graph holds at most about twice the live pieces, plus
:data:`AUTO_COMPACT_MIN`. ``index.store.auto_compact = False`` turns it off (``index.store.compact()`` still compacts
on request).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .rebuild import RebuiltStore, rebuild

logger = logging.getLogger(__name__)

__all__ = ["AUTO_COMPACT_MIN", "CompactReport", "DELETED_KEY", "compact", "due"]

#: Deleted pieces below which a store is never compacted automatically (about 1.8 MB of a 384-d graph).
AUTO_COMPACT_MIN = 1_000
#: The lexical (or journal) file's record of the pieces deleted since the last compaction.
DELETED_KEY = "deleted_since_compact"
_PAGE = 1_000  # records copied per read and write


class CompactedStore(RebuiltStore, Protocol):
    """What a compaction needs of a store (:class:`~.pieces.PieceStore` has it)."""

    @property
    def location(self) -> str: ...

    def stored_config(self) -> dict[str, Any] | None: ...

    def writing(self) -> AbstractContextManager[Any]: ...

    def set_deleted(self, n: int) -> None: ...


@dataclass(frozen=True)
class CompactReport:
    """What :func:`compact` did: the pieces (and views) copied into the new collection, and how long it took."""

    pieces: int = 0
    views: int = 0
    seconds: float = 0.0


def due(deleted: int, live: Callable[[], int]) -> bool:
    """Whether a store that deleted ``deleted`` pieces since its last compaction, and holds ``live()`` (asked only
    past :data:`AUTO_COMPACT_MIN`), is compacted."""
    return deleted >= AUTO_COMPACT_MIN and deleted >= live()


def compact(store: CompactedStore) -> CompactReport:
    """Copy ``store``'s live pieces (and views) into a new collection, swap it in, and compact the lexical file (see
    the module docstring). Under the store's write lock: writes wait; searches go on (a search that meets the swap
    reads again after it)."""
    started = time.perf_counter()
    config = store.stored_config()
    if config is None:
        return CompactReport()
    counts: dict[str, int] = {"pieces": 0, "views": 0}
    with store.writing():

        def refill(target: str) -> int:
            counts["pieces"] = _copy(store, store.collection_name, target)
            source_views, target_views = store.views.name(), store.views.name(target)
            if config.get("views") and store.backend.exists(source_views) and store.backend.exists(target_views):
                counts["views"] = _copy(store, source_views, target_views)
            return counts["pieces"]

        rebuild(store, config, refill)
        if store.lexical is not None:
            store.lexical.compact()
        store.set_deleted(0)
    report = CompactReport(counts["pieces"], counts["views"], time.perf_counter() - started)
    logger.info(
        "compacted %r at %s: %d pieces and %d views copied into a new collection in %.1f s",
        store.collection_name,
        store.location,
        report.pieces,
        report.views,
        report.seconds,
    )
    return report


def _copy(store: CompactedStore, source: str, target: str) -> int:
    """Every record of collection ``source`` into ``target``, as stored (vector, document, metadata), page by page."""
    n = 0
    batch: list[dict[str, Any]] = []
    for rec in store.backend.iter_records(None, include=("embeddings", "documents", "metadatas"), name=source):
        batch.append(rec)
        if len(batch) >= _PAGE:
            n += _write(store, target, batch)
            batch = []
    if batch:
        n += _write(store, target, batch)
    return n


def _write(store: CompactedStore, target: str, records: list[dict[str, Any]]) -> int:
    vectors = np.asarray([r["embedding"] for r in records], dtype=np.float32)
    documents = [r.get("document") or "" for r in records]
    metadatas = [dict(r.get("metadata") or {}) for r in records]
    store.backend.upsert([r["id"] for r in records], vectors, documents, metadatas, name=target)
    return len(records)
