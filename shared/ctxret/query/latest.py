"""The latest fact first: when a group holds two statements of one subject made at different times, the later ranks
above the earlier; both stay in the group, each with its timestamp, so the model sees the change.

Facts change ("the cutover is planned for November 14" ... "we moved the cutover to November 21"), and the first
statement, worded like the question, usually outranks the correction. A global recency decay would fix that and bury
every old fact that never changed (``recency_half_life``, docs/time.md); this rule moves only a hit that restates
another hit of the same group, and only for a part that asks how things are **now**:

* **the part asks in the present tense** (:func:`asks_now`: a question or request, "What car does Caroline drive?",
  "When is the cutover?", "Where's the key?", with no past-tense auxiliary such as "did" or "was"). A question about
  what happened ("When did Caroline go camping?") wants the event, and a statement (a fact being looked up) its own
  source: they keep their ranking;
* **two of the group's first ``k`` hits are about the same subject** (:func:`same_subject`): each is the other's
  nearest neighbour among those hits, and their similarity — the cosine of their stored vectors after the mean
  vector of the part's first :data:`CONTEXT` candidates is taken away (what the part's candidates all share: the
  thread's people, its tone), plus the mean of how much of each hit's IDF-weighted words the other holds (the
  lexical index's ``coverage``; 0 without a lexical index) — is at least :data:`SAME_SUBJECT`;
* **the later one ranks directly above the earlier** (by the stored ``ts_epoch``; a hit without a time never moves),
  with the earlier one's score when that is higher, and a ``relevance`` at least the earlier one's (it restates it).

Nothing enters or leaves the group: the first ``k`` candidates only change places, so a fact never restated keeps its
place whatever its age. Measured on the ``updates`` query set (:mod:`ctxret.evaluation.updates`: 150 controlled
update threads on LoCoMo dev) and on LoCoMo's facts and questions (BENCHMARKS, "The latest fact first").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from ..storage.base import Deferred
from .split.asking import asks

__all__ = ["CONTEXT", "SAME_SUBJECT", "asks_now", "latest_first", "same_subject"]

#: The part's first candidates whose mean stored vector is taken away before two hits are compared.
CONTEXT = 20
#: Two hits are about the same subject when their similarity (centred cosine + mean lexical containment) is at
#: least this, and each is the other's nearest neighbour among the group's hits.
SAME_SUBJECT = 0.4

#: Auxiliaries and markers of a question about the present ("does", "is", "what's", "will", "now").
_PRESENT = re.compile(
    r"\b(?:does|do|is|are|am|doesn't|don't|isn't|aren't|will|won't|can|now|currently|these days|still)\b|"
    r"\b(?:what|who|where|when|how|which|that|there|it|he|she|they|you|we)'(?:s|re|ll)\b"
)
#: Markers of a question about the past ("did", "was", "used to").
_PAST = re.compile(r"\b(?:did|didn't|was|wasn't|were|weren't|had|hadn't|used to|ago|last)\b")


def asks_now(part: str) -> bool:
    """Whether ``part`` asks about the present: a question or request (:func:`~.split.asking.asks`) with a present-tense
    marker and no past-tense one."""
    text = " ".join(part.lower().replace("\u2019", "'").split())
    return bool(_PRESENT.search(text)) and not _PAST.search(text) and asks(part)


def same_subject(vectors: np.ndarray, context: np.ndarray, containment: np.ndarray | None = None) -> np.ndarray:
    """The pairwise same-subject similarity of a group's hits (see the module docstring): the cosine of their
    ``vectors`` once ``context``'s mean is taken away, plus the mean of ``containment[a, b]`` and ``[b, a]`` (the
    share of hit ``a``'s IDF-weighted words hit ``b`` holds). The diagonal is ``-inf``."""
    v = np.asarray(vectors, dtype=np.float64) - np.asarray(context, dtype=np.float64).mean(axis=0)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms > 0, norms, 1.0)
    sim = v @ v.T
    if containment is not None:
        sim = sim + (containment + containment.T) / 2.0
    np.fill_diagonal(sim, -np.inf)
    return sim


def _epoch(meta: Any) -> float | None:
    if isinstance(meta, Deferred) or not isinstance(meta, Mapping):
        return None
    value = meta.get("ts_epoch")
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def latest_first(
    c: Any,
    k: int,
    fetch: Callable[[list[str]], Mapping[str, tuple[str, Mapping[str, Any], Any]]],
    coverage: Callable[[str, list[str]], Mapping[str, float]] | None = None,
) -> Any:
    """``c`` (a part's ranked :class:`~.search.PartCandidates`) with, among its first ``k`` candidates, each later
    statement of a subject moved directly above the earlier one (see the module docstring). ``fetch(ids)`` gives
    stored ``(document, metadata, vector)`` rows; ``coverage(text, ids)`` the share of ``text``'s IDF-weighted words
    each of ``ids`` holds (``None``: no lexical index)."""
    if len(c.ranked) < 2 or k < 2 or not asks_now(c.part):
        return c
    top = [rid for rid, _ in c.ranked[: max(k, CONTEXT)]]
    pool = top[:k]
    stamps = [_epoch(c.info[rid][1]) if rid in c.info else None for rid in pool]
    known = {rid: s for rid, s in zip(pool, stamps, strict=True) if s is not None}
    deferred = any(rid in c.info and isinstance(c.info[rid][1], Deferred) for rid in pool)
    if not deferred and len(set(known.values())) < 2:
        return c  # no two hits of the group were said at different times
    rows = fetch(top)
    pool = [rid for rid in pool if rid in rows]
    stamp = {rid: _epoch(rows[rid][1]) for rid in pool}
    if len({s for s in stamp.values() if s is not None}) < 2:
        return c
    vectors = np.stack([np.asarray(rows[rid][2], dtype=np.float64) for rid in pool])
    context = np.stack([np.asarray(rows[rid][2], dtype=np.float64) for rid in top if rid in rows])
    containment = None
    if coverage is not None:
        containment = np.zeros((len(pool), len(pool)))
        for a, rid in enumerate(pool):
            body = str(rows[rid][1].get("body", rows[rid][0]))
            got = coverage(body, pool)
            containment[a] = [float(got.get(other, 0.0)) for other in pool]
    sim = same_subject(vectors, context, containment)
    nearest = sim.argmax(axis=1)
    order = list(pool)
    moved: set[str] = set()
    shares: dict[str, str] = {}
    lifted = getattr(c, "lifted", {}) or {}
    for a, rid in enumerate(pool):
        b = int(nearest[a])
        other = pool[b]
        if b <= a or rid in moved or other in moved or int(nearest[b]) != a or sim[a, b] < SAME_SUBJECT:
            continue
        ta, tb = stamp[rid], stamp[other]
        if ta is None or tb is None or not tb > ta:
            continue
        order.remove(other)
        at = order.index(rid)
        if at > 0 and lifted.get(order[at - 1]) == rid:  # keep a lifted answer right above its question
            at -= 1
        order.insert(at, other)
        moved.update((rid, other))
        shares[other] = rid
    if not shares:
        return c
    score = dict(c.ranked)
    for later, earlier in shares.items():
        score[later] = max(score[later], score[earlier])
    head = [(rid, score[rid]) for rid in order]
    kept = set(order)
    return replace(c, ranked=head + [(rid, s) for rid, s in c.ranked if rid not in kept], lifted={**lifted, **shares})
