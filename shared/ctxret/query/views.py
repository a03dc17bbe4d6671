"""LLM-written views on the dense side of a search: a piece scores by the better of its own vector and its best view.

Per part, the dense candidates (top ``n`` pieces by their own vector) and the view candidates (top
``n`` pieces by their best view, :mod:`ctxret.storage.views`) are merged: a piece's cosine is
``max(own cosine, best view cosine)``, the union is ranked by it and cut to ``n``. A piece found
only through a view is fetched (one read for all parts), which enforces the scope and the caller's
``where`` and gives its own vector's cosine: a view never surfaces a piece outside the search's
scope, a view whose piece is gone never surfaces at all, and a hit is always the piece, never the
view. The rest of the search (lexical fusion, the floor, the cut to ``k``) sees the merged cosine.

A hit that its view won carries ``scores["view"]`` (the view's cosine) and ``view_kind`` /
``view_text`` in its metadata (:func:`annotate`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..results import Group
from ..storage.base import DenseBackend, Row
from ..storage.schema import Scope
from .search import exact_cosine

__all__ = ["ViewMatch", "merge_views", "annotate"]

#: The view that won a piece's dense score for a part: ``(kind, cosine, text)``.
ViewMatch = tuple[str, float, str]


def merge_views(
    dense_rows: Sequence[Sequence[Row]],
    view_rows: Sequence[Sequence[tuple[str, float, str, str]]],
    qvecs: np.ndarray,
    backend: DenseBackend,
    scope: Scope,
    n: int,
) -> tuple[list[list[Row]], list[dict[str, ViewMatch]]]:
    """Each part's dense rows with its view matches merged in (see the module docstring), and per part
    the pieces a view won: ``{piece id: (kind, cosine, text)}``."""
    wanted: dict[str, None] = {}
    for rows, vrows in zip(dense_rows, view_rows, strict=False):
        have = {r[0] for r in rows}
        wanted.update((v[0], None) for v in vrows if v[0] not in have)
    fetched = backend.fetch(list(wanted), scope) if wanted else {}
    out_rows: list[list[Row]] = []
    out_won: list[dict[str, ViewMatch]] = []
    for i, (rows, vrows) in enumerate(zip(dense_rows, view_rows, strict=False)):
        q = np.asarray(qvecs[i], dtype=np.float32)
        merged: dict[str, list] = {r[0]: [r[0], r[1], float(r[2]), r[3]] for r in rows}
        won: dict[str, ViewMatch] = {}
        for pid, vcos, kind, text in vrows:
            row = merged.get(pid)
            if row is None:
                got = fetched.get(pid)
                if got is None:
                    continue  # outside the scope or the where filter, or a view of a deleted piece
                doc, meta, vec = got
                row = merged[pid] = [pid, doc, exact_cosine(vec, q), meta]
            if vcos > row[2]:
                row[2] = float(vcos)
                won[pid] = (kind, float(vcos), text)
        ranked = sorted(merged.values(), key=lambda r: -r[2])[:n]  # stable: ties keep the dense order
        out_rows.append([(r[0], r[1], r[2], r[3]) for r in ranked])
        kept = {r[0] for r in ranked}
        out_won.append({pid: m for pid, m in won.items() if pid in kept})
    return out_rows, out_won


def annotate(groups: Sequence[Group], won: Sequence[dict[str, ViewMatch]]) -> list[Group]:
    """Mark the hits a view won: ``scores["view"]``, and ``view_kind`` / ``view_text`` in the metadata."""
    out: list[Group] = []
    for g in groups:
        matches = won[g.part_index] if g.part_index < len(won) else {}
        if not matches or not any(h.id in matches for h in g.hits):
            out.append(g)
            continue
        hits = []
        for h in g.hits:
            m = matches.get(h.id)
            if m is None:
                hits.append(h)
                continue
            kind, cos, text = m
            hits.append(
                replace(h, scores={**h.scores, "view": cos}, stored={**h.stored, "view_kind": kind, "view_text": text})
            )
        out.append(replace(g, hits=tuple(hits)))
    return out
