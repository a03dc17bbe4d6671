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


ParentKey = tuple[str, str]  # (thread_id, parent_id): a parent id alone is not unique across threads


def parent_texts(store: Any, parents: Sequence[ParentKey]) -> dict[ParentKey, str]:
    """``{(thread_id, parent_id): text}`` for turns/sections, re-assembled from their stored pieces.

    A parent is always read inside its own thread: two threads may hold the same document id (and
    so the same parent id), and one thread's search must never see another thread's text.
    """
    by_thread: dict[str, set[str]] = defaultdict(set)
    for thread_id, parent_id in parents:
        by_thread[str(thread_id)].add(str(parent_id))
    by_parent: dict[ParentKey, list[dict[str, Any]]] = defaultdict(list)
    for thread_id, ids in sorted(by_thread.items()):
        wanted = sorted(ids)
        for start in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[start : start + _IN_CHUNK]
            pid_clause = {"parent_id": chunk[0]} if len(chunk) == 1 else {"parent_id": {"$in": chunk}}
            for rec in store.iter_records({"$and": [{"thread_id": thread_id}, pid_clause]}):
                meta = rec["metadata"] or {}
                if str(meta.get("thread_id")) == thread_id:
                    by_parent[(thread_id, str(meta.get("parent_id")))].append(meta)
    texts: dict[ParentKey, str] = {}
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
    keys = [_key(h.metadata) for g in groups for h in g.hits]
    wanted = [key for key in keys if key is not None]
    texts = parent_texts(store, wanted) if wanted else {}
    out = []
    for g in groups:
        seen: set[ParentKey] = set()
        hits = []
        for h in g.hits:
            key = _key(h.metadata)
            if dedupe and key is not None:
                if key in seen:
                    continue
                seen.add(key)
            hits.append(replace(h, parent_text=texts.get(key) if key is not None else None))
        out.append(replace(g, hits=tuple(hits)))
    return out


def _key(meta: Any) -> ParentKey | None:
    pid, thread = meta.get("parent_id"), meta.get("thread_id")
    return None if pid is None or thread is None else (str(thread), str(pid))
