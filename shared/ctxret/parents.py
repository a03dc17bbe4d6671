"""Parent-document (small-to-big) retrieval: search small pieces, hand back their whole turn or section.

The vector store already holds every piece of a turn, so the parent text is re-assembled from
its pieces (in source and piece order, headers once per source) with one filtered read for all
the parents a search returned: nothing is kept in memory and nothing is stored twice.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .results import Group

_IN_CHUNK = 256


def parent_texts(store: Any, parent_ids: Sequence[str]) -> dict[str, str]:
    """``{parent_id: text}`` for turns/sections, re-assembled from their stored pieces."""
    wanted = sorted(set(parent_ids))
    by_parent: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = wanted[start : start + _IN_CHUNK]
        where = {"parent_id": chunk[0]} if len(chunk) == 1 else {"parent_id": {"$in": chunk}}
        for rec in store.iter_records(where):
            meta = rec["metadata"] or {}
            by_parent[str(meta.get("parent_id"))].append(meta)
    texts: dict[str, str] = {}
    for pid, metas in by_parent.items():
        metas.sort(key=lambda m: (int(m.get("source_ordinal", 0)), int(m.get("ordinal", 0))))
        lines: list[str] = []
        last_source = None
        for m in metas:
            if m.get("source_ordinal") != last_source:
                lines.append(str(m.get("header", "")))
                last_source = m.get("source_ordinal")
            lines.append(str(m.get("body", "")))
        texts[pid] = "\n".join(lines)
    return texts


def expand_parents(store: Any, groups: Sequence[Group], *, dedupe: bool = True) -> list[Group]:
    """Attach each hit's parent text (``Hit.parent_text``); with ``dedupe`` keep one hit per parent in a group.

    De-duplication is inside a group only (its best-scoring hit per parent is kept); the same
    parent may still appear in two groups, as pieces do.
    """
    ids = [str(h.metadata.get("parent_id")) for g in groups for h in g.hits if h.metadata.get("parent_id") is not None]
    texts = parent_texts(store, ids) if ids else {}
    out = []
    for g in groups:
        seen: set[str] = set()
        hits = []
        for h in g.hits:
            pid = h.metadata.get("parent_id")
            if dedupe and pid is not None:
                if pid in seen:
                    continue
                seen.add(pid)
            hits.append(replace(h, parent_text=texts.get(str(pid)) if pid is not None else None))
        out.append(replace(g, hits=tuple(hits)))
    return out
