"""Scoring one representation's answer to one query (see :mod:`.threads` for the metrics)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .datasets import FACTS_PER_COMPOSITE, CompositeQuery, Query
from .index import ConversationIndex, Ranked, Retrieval
from .metrics import best_part, covered, evidence_recall, reciprocal_rank


# -- scoring ----------------------------------------------------------------------------------
def best_group(groups: Sequence[Ranked]) -> Ranked | None:
    """The group whose top hit scores highest (first on ties); None when every group is empty."""
    best, best_score = None, -math.inf
    for g in groups:
        if len(g.items) and g.scores[0] > best_score:
            best, best_score = g, float(g.scores[0])
    return best


def score_query(ix: ConversationIndex, ret: Retrieval, q: Query, k: int, floor: float | None) -> dict[str, float]:
    """Metrics of one fact or question (see the module docstring).

    Keys: ``top1_section``, ``top1_section_floor`` (dense cosine available and a floor set),
    ``mrr``, ``recall`` (NaN without evidence), ``top_cosine`` (the scored top hit's cosine).
    """
    g = best_group(ret.groups)
    out: dict[str, float] = {}
    if g is None:
        out.update(top1_section=0.0, mrr=0.0, recall=evidence_recall([], q.evidence))
        if floor is not None and any(gr.cosines is not None for gr in ret.groups):
            out["top1_section_floor"] = 0.0
        return out
    sections = ix.sections(ret.level)[g.items]
    units = ix.units(ret.level)
    top1 = 1.0 if sections[0] in q.gold else 0.0
    out["top1_section"] = top1
    if g.cosines is not None and floor is not None:
        kept = g.kept(floor, k)
        out["top1_section_floor"] = 1.0 if len(kept) and sections[kept[0]] in q.gold else 0.0
    out["mrr"] = reciprocal_rank(sections.tolist(), q.gold)
    out["recall"] = evidence_recall([units[i] for i in g.items[:k]], q.evidence)
    if g.cosines is not None:
        out["top_cosine"] = float(g.cosines[0])
    return out


def returns_any(ret: Retrieval, floor: float | None) -> bool:
    """Whether a search would return any hit at all under ``floor`` (the runtime's rule per group):
    what a floor is for on a message about nothing in memory."""
    return any(len(g.kept(floor)) for g in ret.groups)


def score_composite(ix: ConversationIndex, ret: Retrieval, cq: CompositeQuery, k: int) -> list[float]:
    """Coverage of each fact of a composite message (1.0 / 0.0 per fact)."""
    out = []
    sections = ix.sections(ret.level)
    parts = [g.part for g in ret.groups]
    for fact in cq.facts:
        if not ret.groups:
            out.append(0.0)
            continue
        if ret.grouped:
            items = ret.groups[best_part(parts, fact.text)].items[:k]
        else:
            items = ret.groups[0].items[: FACTS_PER_COMPOSITE * k]
        out.append(covered(sections[items].tolist(), fact.gold))
    return out
