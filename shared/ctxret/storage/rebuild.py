"""A crash-safe rebuild of a :class:`~.pieces.PieceStore`'s collection: build a new one beside it,
swap it in when complete, and finish or undo a swap a crash interrupted.

A rebuild writes ``<collection>-rebuild`` (and its views) and keeps the old collection as
``<collection>-previous`` while the two are swapped, in steps that a crash at any point leaves
recoverable: :func:`recover`, on the next open, tells from the collections' names alone how far the
swap got. The lexical file is refilled from the new collection's stored texts after the swap, its
journal announcing it first.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

from .._faults import fault_point
from . import config_copy
from .base import VectorBackend
from .changes import ChangeLog
from .lexical import LexicalIndex
from .lexical_sync import sync_from_store
from .views import ViewIndex

logger = logging.getLogger(__name__)

__all__ = ["PREVIOUS_SUFFIX", "REBUILD_SUFFIX", "rebuild", "recover", "swap_in"]

#: A rebuild writes ``<collection>-rebuild`` and keeps the old one as ``<collection>-previous``
#: while the two are swapped.
REBUILD_SUFFIX = "-rebuild"
PREVIOUS_SUFFIX = "-previous"
_T = TypeVar("_T")


class RebuiltStore(Protocol):
    """What a rebuild needs of a store (:class:`~.pieces.PieceStore` has it)."""

    backend: VectorBackend
    lexical: LexicalIndex | None
    views: ViewIndex
    changes: ChangeLog | None

    @property
    def collection_name(self) -> str: ...

    def changing(self, threads: Iterable[str] | None) -> AbstractContextManager[Any]: ...


def rebuild(store: RebuiltStore, config: Mapping[str, Any], refill: Callable[[str], _T]) -> _T:
    """Build a new collection under ``config`` with ``refill(target_name)`` and swap it in when complete.

    A failure or a crash while refilling leaves the old collection untouched; a crash during
    the swap is finished by :func:`recover` on the next open.
    """
    temp = store.collection_name + REBUILD_SUFFIX
    store.views.begin_rebuild(temp, config)  # views hook
    store.backend.drop(temp)
    store.backend.open(config, name=temp)
    try:
        result = refill(temp)
    except BaseException:
        store.backend.drop(temp)
        store.views.abandon_rebuild(temp)  # views hook
        raise
    fault_point("rebuild:before-swap")
    swap_in(store, temp)
    return result


def swap_in(store: RebuiltStore, temp: str) -> None:
    """Replace the collection with the complete ``temp``: old → previous, temp → name, drop previous."""
    with store.changing(None):
        name = store.collection_name
        previous = name + PREVIOUS_SUFFIX
        if store.lexical is not None:
            store.lexical.journal.mark_pending()  # a crash from here on is repaired on open
        store.views.swap(temp)  # views hook: the rebuilt views take the name first
        fault_point("swap:after-views")
        store.backend.drop(previous)
        if store.backend.exists(name):
            store.backend.rename(name, previous)
        fault_point("swap:after-rename-old")
        store.backend.rename(temp, name)
        fault_point("swap:after-rename-new")
        store.backend.drop(previous)
        store.views.swapped()  # views hook
        store.backend.drop_orphan_segments()  # the old collections' graphs, which chromadb leaves on disk
        fault_point("swap:before-lexical")
        if store.changes is not None:
            store.changes.record_everything()
        if store.lexical is not None:  # the new pieces' stored texts, in one transaction
            sync_from_store(store.lexical, store.backend, full=True, rebuild=True)
        config_copy.record(store.lexical, name, store.backend.stored_config())  # the rebuilt config, for stats


def recover(store: RebuiltStore) -> bool:
    """Finish or undo a rebuild that a crash interrupted; ``True`` when something was done.

    * the collection exists: a leftover ``-rebuild`` was never swapped in (dropped); a leftover
      ``-previous`` is the old collection after a finished swap (dropped);
    * it does not, but ``-previous`` does: the crash came between the two renames; the
      ``-rebuild`` collection is complete (it is renamed only once complete) and takes the name
      (without it, ``-previous`` gets its name back).
    """
    name = store.collection_name
    temp, previous = name + REBUILD_SUFFIX, name + PREVIOUS_SUFFIX
    names = set(store.backend.names())
    store.views.recover(names)  # views hook: before the pieces decide
    if not ({temp, previous} & names):
        return False
    if name in names:
        for leftover in (temp, previous):
            if leftover in names:
                logger.warning("dropping %r left by an interrupted rebuild of %r", leftover, name)
                store.backend.drop(leftover)
    elif previous in names:
        source = temp if temp in names else previous
        logger.warning("finishing an interrupted rebuild of %r: %r takes its name", name, source)
        store.backend.rename(source, name)
        store.backend.drop(previous)
    else:
        logger.warning("dropping %r left by an interrupted rebuild (no collection %r)", temp, name)
        store.backend.drop(temp)
    if store.lexical is not None:
        store.lexical.journal.mark_pending()
    return True
