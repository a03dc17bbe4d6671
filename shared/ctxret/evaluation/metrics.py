"""Metric functions of the evaluation harness, each small enough to check by hand.

Conventions: scores are "higher is better"; a candidate a representation did not return at all
has score ``-inf``. Two scores within :data:`TIE_TOLERANCE` of each other are a tie (identical
vectors can give last-bit differences in a matrix product, so exact equality is not used).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Sequence

import numpy as np

#: Scores closer than this are tied.
TIE_TOLERANCE = 1e-6


def top1_credit(scores: Sequence[float] | np.ndarray, gold: int, tol: float = TIE_TOLERANCE) -> float:
    """Credit for "the gold candidate is first", ties counted fractionally.

    If ``k`` candidates tie at the top score (within ``tol``) and the gold one is among them the
    credit is ``1/k``; if the gold one is not at the top it is 0. All candidates at ``-inf``
    (nothing returned) gives 0.

    >>> top1_credit([0.9, 0.9, 0.9, 0.9, 0.1], 2)
    0.25
    >>> top1_credit([0.5, 0.9], 0)
    0.0
    """
    arr = np.asarray(scores, dtype=np.float64)
    if arr.size == 0:
        return 0.0
    top = arr.max()
    if not np.isfinite(top) or not np.isfinite(arr[gold]):
        return 0.0
    tied = arr >= top - tol
    if not tied[gold]:
        return 0.0
    return 1.0 / float(tied.sum())


def top_block(scores: Sequence[float] | np.ndarray, members: Collection[int], tol: float = TIE_TOLERANCE) -> bool:
    """True when every one of ``members`` scores strictly above every other candidate.

    Used for generic queries: the family's four records must take the top four places. A tie
    between the last member and an outsider (within ``tol``) is a failure.

    >>> top_block([0.8, 0.8, 0.8, 0.8, 0.5], [0, 1, 2, 3])
    True
    >>> top_block([0.8, 0.8, 0.8, 0.6, 0.7], [0, 1, 2, 3])
    False
    """
    arr = np.asarray(scores, dtype=np.float64)
    mask = np.zeros(arr.shape[0], dtype=bool)
    mask[list(members)] = True
    if mask.all():
        return True
    inside = arr[mask]
    if not np.all(np.isfinite(inside)):
        return False
    return bool(inside.min() > arr[~mask].max() + tol)


def first_appearance(seq: Iterable[Hashable]) -> list[Hashable]:
    """Distinct values of ``seq`` in order of first appearance (sections ranked by their best piece)."""
    return list(dict.fromkeys(seq))


def reciprocal_rank(ranked_sections: Iterable[Hashable], gold: Collection[Hashable]) -> float:
    """1 / rank of the first gold section among sections ranked by first appearance; 0 if absent.

    ``ranked_sections`` is the section of each hit in ranking order (repeats allowed: a section
    ranks where its first piece does).

    >>> reciprocal_rank([3, 3, 1, 2], {2})
    0.3333333333333333
    >>> reciprocal_rank([3, 1], {7})
    0.0
    """
    for rank, section in enumerate(first_appearance(ranked_sections), start=1):
        if section in gold:
            return 1.0 / rank
    return 0.0


def evidence_recall(top_units: Iterable[Collection[Hashable]], evidence: Collection[Hashable]) -> float:
    """Share of ``evidence`` units lying inside one of the retrieved items.

    ``top_units`` holds, per retrieved item (e.g. each of the top-5 pieces), the evidence units it
    contains (for LoCoMo: the dia_id of the utterance a piece comes from; for a whole-session
    item, every dia_id of the session). Returns NaN for empty evidence (the caller skips it).

    >>> evidence_recall([{"D1:1"}, {"D1:2"}], {"D1:2", "D4:7"})
    0.5
    """
    evidence = set(evidence)
    if not evidence:
        return math.nan
    found: set[Hashable] = set()
    for units in top_units:
        found.update(units)
    return len(evidence & found) / len(evidence)


def covered(sections: Iterable[Hashable], gold: Collection[Hashable]) -> float:
    """1.0 if any of the retrieved items' ``sections`` is a gold section, else 0.0 (composite coverage)."""
    return 1.0 if any(s in gold for s in sections) else 0.0


def mean(values: Iterable[float]) -> float:
    """Mean of the non-NaN values; NaN when there are none."""
    vals = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return float(sum(vals) / len(vals)) if vals else math.nan


def best_part(parts: Sequence[str], text: str) -> int:
    """Index of the query part that holds ``text``: the part containing ``text``'s first five words,
    else the part sharing the largest share of its words (first on ties).

    >>> best_part(["The train was late.", "When is the lock swapped on the storage door?"], "When is the lock swapped?")
    1
    """
    from ..storage.tokenize import tokenize

    head = " ".join(text.split()[:5])
    for i, part in enumerate(parts):
        if head and head in " ".join(part.split()):
            return i
    want = set(tokenize(text))
    best, best_score = 0, -1.0
    for i, part in enumerate(parts):
        score = len(want & set(tokenize(part))) / max(1, len(want))
        if score > best_score:
            best, best_score = i, score
    return best


def round_robin(groups: Sequence[Sequence[int]]) -> list[int]:
    """Item ids of all groups interleaved by rank (rank 1 of every group, then rank 2, ...); repeats skipped.

    >>> round_robin([[1, 2, 3], [4, 1], [5]])
    [1, 4, 5, 2, 3]
    """
    out: list[int] = []
    seen: set[int] = set()
    for r in range(max((len(g) for g in groups), default=0)):
        for g in groups:
            if r < len(g) and g[r] not in seen:
                seen.add(g[r])
                out.append(g[r])
    return out


def budget_recall(
    groups: Sequence[Sequence[int]],
    nbytes: Sequence[int],
    units: Sequence[Collection[Hashable]],
    evidence: Collection[Hashable],
    budget: int,
) -> float:
    """Evidence recall of what a caller gets within ``budget`` bytes of returned text (NaN without evidence).

    The hits of every group are interleaved by rank (:func:`round_robin`); each hit is taken whole
    while the running total of returned text (``nbytes[i]``, UTF-8) stays within the budget, and the
    walk stops at the first that does not fit. So a technique that returns more (longer, more
    groups, duplicates) cannot look better: every system is cut at the same byte count.

    >>> budget_recall([[0, 1], [2]], [400, 400, 400], [{"a"}, {"b"}, {"c"}], {"a", "b", "c"}, 1000)
    0.6666666666666666
    """
    want = set(evidence)
    if not want:
        return math.nan
    found: set[Hashable] = set()
    used = 0
    for i in round_robin(groups):
        size = int(nbytes[i])
        if used + size > budget:
            break
        used += size
        found.update(units[i])
    return len(found & want) / len(want)
