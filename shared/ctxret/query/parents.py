"""Parent-document (small-to-big) retrieval: search small pieces, hand back their whole turn or section.

The vector store already holds every piece of a turn, so the parent text is re-assembled from
its pieces (in source and piece order, headers once per source) with one filtered read for all
the parents a search returned: nothing is kept in memory and nothing is stored twice. A parent
is always read inside its own thread (keyed by ``(thread_id, parent_id)``): two threads may hold
the same document id, and one thread's search never sees another thread's text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..results import Group
from ..storage.base import DenseBackend
from ..storage.schema import ParentKey, parent_key

__all__ = ["expand_parents", "parent_texts", "assemble_parent"]


def assemble_parent(metas: Iterable[Mapping[str, Any]]) -> str:
    """A turn or section's text from its pieces' metadata: in source and piece order, headers once per source."""
    ordered = sorted(metas, key=lambda m: (int(m.get("source_ordinal", 0)), int(m.get("ordinal", 0))))
    lines: list[str] = []
    last_source = None
    for m in ordered:
        if m.get("source_ordinal") != last_source:
            lines.append(str(m.get("header", "")))
            last_source = m.get("source_ordinal")
        lines.append(str(m.get("body", "")))
    return "\n".join(lines)


def parent_texts(backend: DenseBackend, parents: Sequence[ParentKey]) -> dict[ParentKey, str]:
    """``{(thread_id, parent_id): text}`` for turns/sections, re-assembled from their stored pieces."""
    return {key: assemble_parent(metas) for key, metas in backend.parents(set(parents)).items()}


def piece_place(meta: Mapping[str, Any]) -> tuple[str, str, str]:
    """Where a piece sits in its turn and what it says: ``(source_ordinal, ordinal, body)``."""
    return str(meta.get("source_ordinal", 0)), str(meta.get("ordinal", 0)), str(meta.get("body", ""))


def expand_parents(backend: DenseBackend, groups: Sequence[Group], *, dedupe: bool = True) -> list[Group]:
    """Attach each hit's parent text (``Hit.parent_text``); with ``dedupe`` keep one hit per parent in a group.

    De-duplication is inside a group only (its best-scoring hit per parent is kept); the same
    parent may still appear in two groups, as pieces do. The parent is read after the hits: a hit whose
    own piece its parent no longer holds (the turn was rewritten or deleted in between) is gone from its
    group, as a piece deleted since the search began is, so a hit and its parent are one version.
    """
    keys = [parent_key(h.stored) for g in groups for h in g.hits]
    wanted = [key for key in keys if key is not None]
    pieces = backend.parents(set(wanted)) if wanted else {}
    texts = {key: assemble_parent(metas) for key, metas in pieces.items()}
    places = {key: {piece_place(m) for m in metas} for key, metas in pieces.items()}
    out = []
    for g in groups:
        seen: set[ParentKey] = set()
        hits = []
        for h in g.hits:
            key = parent_key(h.stored)
            if key is not None and piece_place(h.stored) not in places.get(key, ()):
                continue  # its turn changed since the hit was read
            if dedupe and key is not None:
                if key in seen:
                    continue
                seen.add(key)
            hits.append(replace(h, parent_text=texts.get(key) if key is not None else None))
        out.append(replace(g, hits=tuple(hits)))
    return out
