"""The floor: which parts come back empty, and which hits a group keeps.

A floor has two jobs, and one cosine cannot do both. A part that nothing in memory answers must come back empty
(the seed: "we don't pad a group with weak results"); a part that memory does answer must not lose its answers
(a floor that drops answers that exist is worse than none). So the floor is decided per part, then per hit:

1. **Does the part have an answer?** (:func:`part_answered`) Its group is kept when one of its first ``k`` hits
   clears the floor: cosine ≥ ``floor``, or — with hybrid search — it holds ``lexical_floor`` of the part's
   IDF-weighted words and its cosine is at least half the floor (:func:`~.fusion.passes_floor`, the rescue of exact
   names and codes the model embeds poorly). Otherwise the whole group is empty. Only the first ``k`` count: a part
   whose best matches are weak and whose only strong cosine sits deep among the lexical candidates has no answer a
   group could show first.
2. **Which hits stay?** In a group that has an answer, a hit is kept down to **half the floor**
   (:data:`HIT_SHARE`; the same lexical rescue below that): the part is about something in memory, so its
   ranking, not one cosine, decides what comes next.

A part that names a time window has no floor at all (:mod:`.time.search`): the window is its relevance ("what did we
decide yesterday?" has no words to match, and every turn of yesterday is an answer).

Measured on LoCoMo dev (``ctxret eval threads ../shared/data/locomo-dev --query-sets facts,qa,time,foreign
--representations hybrid_default,hybrid_time_product``, BENCHMARKS "The floor, per part"): with the time windows on,
the per-hit cut it replaced cost 3.0% of QA recall@5, emptied 48.8% of the questions asked in another conversation and
put 92.7% of the time questions' top hits in their window; this floor costs 0.7%, empties 58.9% of those questions and
1.4% of the answerable ones (0.1% of the facts), and time questions are as right as with no floor (99.5%).
Measured and not shipped: asking the first hits to hold a fifth of the part's content words (it empties paraphrases:
"what is the painting of?" against "the watercolor of the harbour") or one of the names it gives (it empties a
question naming a user whom memory calls "User"). ``floor=None`` keeps everything; ``lexical_floor=None`` applies both
cosine floors without the lexical rescue.
"""

from __future__ import annotations

from collections.abc import Sequence

from .fusion import passes_floor

__all__ = ["HIT_SHARE", "hit_floor", "part_answered"]

#: In a group that has an answer, hits are kept down to this share of the floor.
HIT_SHARE = 0.5


def hit_floor(floor: float | None) -> float | None:
    """The cosine floor a single hit meets inside a group that has an answer (``None``: no floor)."""
    return None if floor is None else floor * HIT_SHARE


def part_answered(
    cosines: Sequence[float], idf_coverages: Sequence[float] | None, floor: float | None, lexical_floor: float | None
) -> bool:
    """Whether a part's group has an answer (see the module docstring), from its first ``k`` hits: their cosines and
    their ``idf_coverage`` (``None``: dense search, no rescue). ``floor=None``: always."""
    if floor is None:
        return True
    idf = [None] * len(cosines) if idf_coverages is None else list(idf_coverages)
    return any(bool(passes_floor(c, i, floor, lexical_floor)) for c, i in zip(cosines, idf, strict=True))
