"""The stages inside each group after the floor: relevance, a relevance floor, rerank, MMR, the cut to ``k``.

Per query part (groups never mix), on the part's candidates that passed the hit floor, best first:

1. **relevance** (always): every hit gets ``scores["coverage"]`` (the share of the part's content
   words it holds, :func:`~.relevance.content_coverage`) and ``scores["relevance"]`` in [0, 1]
   (:mod:`ctxret.query.relevance`); then the part's floor (:mod:`.floor`): a group whose first ``k`` hits hold
   no answer (none clears the floor) comes back empty;
2. **min_relevance** (optional): hits under it are dropped;
3. **rerank** (optional): the top ``rerank_candidates`` go to ``rerank(part, hits)``, which
   returns one score per hit (higher is better) or ``None`` to drop the hit; the group is then
   ordered by that score (ties keep the earlier order), ``Hit.score`` becomes it and
   ``scores["rerank"]`` names it. Any callable works: a cross-encoder, an LLM, a rule. The
   adapters turn a LangChain ``BaseDocumentCompressor`` or a LlamaIndex ``BaseNodePostprocessor``
   into one (``langchain_ctxret.compressor_reranker``, ``llamaindex_ctxret.postprocessor_reranker``);
4. **recency** (optional, ``recency_half_life`` seconds): each hit's ``score`` times
   ``0.5 ** (age / half_life)`` (divided by it for a negative score: an older hit never moves up), age
   = ``now`` - its stored ``timestamp``, never negative; the group re-ordered by it (ties keep the
   earlier order) and ``scores["recency"]`` the factor. A hit without a timestamp is not decayed;
   :func:`recency_hits`;
5. **MMR** (optional, :mod:`.mmr`): the top ``fetch_k`` re-ordered for diversity;
6. the cut to ``k``. Groups are never padded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

import numpy as np

from ..errors import CtxretError, InputError, callable_error
from ..results import Group, Hit
from .floor import part_answered
from .mmr import MMRSettings, mmr_order
from .relevance import RelevanceCalibration, content_coverage

__all__ = [
    "DEFAULT_RERANK_CANDIDATES",
    "GroupStages",
    "Reranker",
    "check_reranker",
    "finish_groups",
    "recency_hits",
    "rerank_hits",
]

#: Candidates per part (after the floor) handed to a reranker.
DEFAULT_RERANK_CANDIDATES = 20


class Reranker(Protocol):
    """``rerank(part, hits) -> scores``: one float per hit (higher is better) or ``None`` to drop it."""

    def __call__(self, part: str, hits: Sequence[Hit]) -> Sequence[float | None]: ...


def check_reranker(value: Any) -> Any:
    if value is not None and not callable(value):
        raise InputError(
            f"rerank must be a callable (part, hits) -> scores, got {type(value).__name__}; wrap a LangChain "
            "compressor with langchain_ctxret.compressor_reranker, a LlamaIndex postprocessor with "
            "llamaindex_ctxret.postprocessor_reranker (the retrievers do it for you)"
        )
    return value


@dataclass(frozen=True)
class GroupStages:
    """What runs inside each group between the floor and the cut to ``k`` (see the module docstring)."""

    relevance: RelevanceCalibration | None = None
    min_relevance: float | None = None
    rerank: Any = None  # a Reranker
    rerank_candidates: int = DEFAULT_RERANK_CANDIDATES
    mmr: MMRSettings | None = None
    recency_half_life: float | None = None  # seconds; None: no recency
    now: Any = None  # the search's time for the recency (None: the current time)

    def pool(self, k: int) -> int:
        """How many floored hits per part the stages need."""
        n = k
        if self.rerank is not None:
            n = max(n, self.rerank_candidates)
        if self.mmr is not None:
            n = max(n, self.mmr.fetch_k)
        if self.recency_half_life is not None:  # so that a recent hit can come into the k
            n = max(n, self.rerank_candidates)
        return n


def rerank_hits(rerank: Reranker, part: str, hits: Sequence[Hit]) -> list[Hit]:
    """``hits`` re-scored by ``rerank`` and ordered by the new score; hits it drops (``None``) are gone."""
    if not hits:
        return []
    try:
        scores = list(rerank(part, list(hits)))
    except CtxretError:
        raise
    except Exception as e:
        raise callable_error("rerank callable", rerank, e) from e
    if len(scores) != len(hits):
        raise InputError(
            f"the reranker returned {len(scores)} scores for {len(hits)} hits; it must return one score "
            "(or None to drop the hit) per hit, in order"
        )
    kept: list[tuple[float, int, Hit]] = []
    for i, (hit, s) in enumerate(zip(hits, scores, strict=False)):
        if s is None:
            continue
        if (
            isinstance(s, bool)
            or not isinstance(s, (int, float, np.floating, np.integer))
            or not math.isfinite(float(s))
        ):
            raise InputError(f"the reranker's score for hit {i} is {s!r}; expected a finite number or None")
        kept.append((float(s), i, hit))
    kept.sort(key=lambda t: (-t[0], t[1]))
    return [replace(h, score=s, scores={**h.scores, "rerank": s}) for s, _, h in kept]


def _age_seconds(stamp: Any, now: datetime) -> float | None:
    """How old a stored ``timestamp`` is at ``now`` (``None``: no usable timestamp). A naive stamp is the
    store's wall clock, compared with ``now``'s wall clock; an aware one by its instant."""
    if stamp is None or stamp == "":
        return None
    from ..ingest.turns import parse_time

    try:
        ts = parse_time(stamp)
    except InputError:
        return None
    if ts is None:
        return None
    if ts.tzinfo is None:
        age = (now.replace(tzinfo=None) - ts).total_seconds()
    else:
        age = now.timestamp() - ts.timestamp()
    return max(age, 0.0)


def recency_hits(hits: Sequence[Hit], half_life: float, now: Any = None) -> list[Hit]:
    """``hits`` with their ``score`` decayed by age (see the module docstring), re-ordered by it."""
    from .time.window import resolve_now

    at = resolve_now(now)
    keyed: list[tuple[float, int, Hit]] = []
    for i, h in enumerate(hits):
        age = _age_seconds(h.stored.get("timestamp"), at)
        if age is None:
            keyed.append((float(h.score), i, h))
            continue
        factor = 0.5 ** (age / half_life)
        score = float(h.score) * factor if h.score >= 0 else float(h.score) / max(factor, 1e-300)
        keyed.append((score, i, replace(h, score=score, scores={**h.scores, "recency": factor})))
    keyed.sort(key=lambda t: (-t[0], t[1]))
    return [h for _, _, h in keyed]


def _with_relevance(
    hits: list[Hit],
    part: str,
    cal: RelevanceCalibration | None,
    best: float | None = None,
    lifted: Mapping[str, Sequence[str]] | None = None,
    candidates: Any = None,
    lead: bool = True,
) -> list[Hit]:
    """Coverage and relevance on each hit (``hits`` in the part's ranking: the first is what the search ranks first,
    a feature of the relevance); ``best``: the highest cosine among the part's candidates (the
    hit's margin under it and whether it is the part's best dense match are features of the relevance:
    :func:`.relevance.best_features`). ``lifted``: hit id -> the ids of the hits it was lifted above (a stored
    question's answer, the later of two statements of a subject) or moved above (a named speaker's hit, the user's
    statement above the assistant's words), the best of whose relevance at its place it keeps at least;
    ``candidates``: the part's candidates, for that hit's relevance when the group no longer holds it (a named
    speaker's hits can push the hit they passed out of the first ``k``). ``lead``: whether the first hit's rank
    counts (``False`` for a part the index's floor would leave empty, searched without it)."""
    if not hits:
        return hits
    if best is None:
        best = max(float(h.scores["cosine"]) for h in hits)
    out = []
    for i, (h, c) in enumerate(zip(hits, content_coverage(part, [h.text for h in hits]), strict=True)):
        scores = dict(h.scores)
        if c is not None:
            scores["coverage"] = float(c)
        if cal is not None:  # ``first``: the part's search ranks it first (the hits are in its order)
            scores["relevance"] = cal(float(h.scores["cosine"]), c, best, lead and i == 0)
        out.append(replace(h, scores=scores))
    if cal is not None and lifted:
        # the passed hits' features (cosine, coverage); their relevance is taken at the place the lifted hit now
        # holds, which they held before (the first place included)
        passed = {h.id: (float(h.scores["cosine"]), h.scores.get("coverage")) for h in out}
        gone = [rid for rid in dict.fromkeys(r for rids in lifted.values() for r in rids) if rid not in passed]
        info, cosine = getattr(candidates, "info", None) or {}, getattr(candidates, "cosine", None) or {}
        gone = [rid for rid in gone if rid in cosine and isinstance(info.get(rid, (None,))[0], str)]
        if gone:
            covered = content_coverage(part, [info[rid][0] for rid in gone])
            passed.update({rid: (float(cosine[rid]), c) for rid, c in zip(gone, covered, strict=True)})
        for i, h in enumerate(out):
            kept = max(
                (cal(passed[r][0], passed[r][1], best, lead and i == 0) for r in lifted.get(h.id, ()) if r in passed),
                default=None,
            )
            if kept is not None and kept > float(h.scores["relevance"]):
                out[i] = replace(h, scores={**h.scores, "relevance": kept})
    return out


def _answered(hits: Sequence[Hit], candidates: Any, k: int, floor: tuple[float | None, float | None] | None) -> bool:
    """Whether a part's floored hits hold an answer (:func:`.floor.part_answered` on the first ``k``)."""
    if floor is None or floor[0] is None:
        return True
    head = list(hits[:k])
    idf = getattr(candidates, "idf_coverage", None)
    hybrid = getattr(candidates, "bm25", None) is not None
    lifted = {**(getattr(candidates, "follows", None) or {}), **(getattr(candidates, "lifted", None) or {})}
    cosine = getattr(candidates, "cosine", None) or {}
    return part_answered(
        [float(cosine.get(lifted.get(h.id, h.id), h.scores["cosine"])) for h in head],  # a moved hit: its place's
        [float(idf.get(lifted.get(h.id, h.id), 0.0)) for h in head] if hybrid and idf is not None else None,
        floor[0],
        floor[1],
    )


def _best_cosine(candidates: Any) -> float | None:
    cosines = getattr(candidates, "cosine", None)
    return max((float(v) for v in cosines.values()), default=None) if cosines else None


def finish_groups(
    stages: GroupStages,
    k: int,
    candidates: Sequence[Any],
    hit_lists: Sequence[list[Hit]],
    *,
    fetch: Callable[[list[str]], Mapping[str, np.ndarray]] | None = None,
    floor: tuple[float | None, float | None] | None = None,
    lead_floor: tuple[float | None, float | None] | None = None,
) -> list[Group]:
    """Run the stages on each part's floored hits (``hit_lists[i]`` for ``candidates[i]``) and cut to ``k``.
    ``floor``: ``(cosine floor, lexical_floor)``: a part whose first ``k`` hits hold no answer comes back empty
    (:func:`.floor.part_answered`; ``None``: no floor). ``lead_floor``: the floor under which a part's first hit is
    not scored as ranked first (the index's floor when the search has none; ``None``: ``floor``)."""
    lists: list[list[Hit]] = []
    for c, hits in zip(candidates, hit_lists, strict=False):
        shares: dict[str, tuple[str, ...]] = {}
        for moved in (getattr(c, "passed", None) or {}, getattr(c, "lifted", None) or {}):
            for rid, above in moved.items():
                shares[rid] = (*shares.get(rid, ()), above)
        lead = _answered(hits, c, k, lead_floor if lead_floor is not None else floor)
        hits = _with_relevance(list(hits), c.part, stages.relevance, _best_cosine(c), shares, c, lead)
        if not _answered(hits, c, k, floor):
            hits = []
        if stages.min_relevance is not None:
            hits = [h for h in hits if h.scores.get("relevance", 0.0) >= stages.min_relevance]
        if stages.rerank is not None:
            hits = rerank_hits(stages.rerank, c.part, hits[: stages.rerank_candidates])
        if stages.recency_half_life is not None:
            hits = recency_hits(hits, stages.recency_half_life, stages.now)
        lists.append(hits)
    if stages.mmr is not None and fetch is not None:
        pools = [hits[: stages.mmr.fetch_k] for hits in lists]
        wanted = list(dict.fromkeys(h.id for hits in pools for h in hits))
        vectors = fetch(wanted) if wanted else {}
        for i, pool in enumerate(pools):
            pool = [h for h in pool if h.id in vectors]
            if pool:
                order = mmr_order(
                    [h.scores["cosine"] for h in pool],
                    np.stack([vectors[h.id] for h in pool]),
                    k,
                    stages.mmr.lambda_mult,
                )
                lists[i] = [pool[j] for j in order]
            else:
                lists[i] = []
    return [Group(i, c.part, tuple(hits[:k])) for i, (c, hits) in enumerate(zip(candidates, lists, strict=False))]
