"""The search pipeline: plan → query vectors → candidates per part → fused, floored groups → parents.

One planning function (:func:`plan_search`) turns :class:`~ctxret.config.SearchSettings` into a
:class:`SearchPlan`; this module holds the stages' building blocks, which the one loop of
:mod:`.executor` runs against the storage protocols of :mod:`ctxret.storage.base` (the product's
``PieceStore``, or the harness's exact ``ExactStore``): the product, the evaluation harness and the
benchmarks run the same schedule of the same code.

Stages, per query part (parts never mix: each keeps its own group):

1. **dense**: top ``n`` pieces by cosine inside the scope (one batched query for all parts);
   ``n = k`` for dense search, ``max(k, candidates)`` with hybrid search;
2. **lexical** (hybrid): top ``n`` BM25 pieces for the part's text, scoped by thread inside the
   lexical query (with a caller ``where`` filter, ``4 × n`` before the filter); lexical-only hits
   are fetched from the store in ONE read for all parts, which fills in their text, metadata
   and vector (for their exact cosine) and enforces the scope, so a stale lexical row never
   surfaces; the exact BM25 of the dense hits (and the IDF-weighted coverage of those the floor
   asks about) comes from the lexical index (:func:`dense_side`, while that read runs);
3. **fuse** (hybrid): :func:`ctxret.query.fusion.fuse` on the part's two lists; then the ranking steps of
   :meth:`~ctxret.query.executor.SearchRun.reranked`: a stored question's answer above it (:mod:`.answers`), the
   later of two statements of one subject first (:mod:`.latest`);
4. **floor and cut** (:mod:`.floor`): a part none of whose first ``k`` hits clears the floor comes back empty; in
   the others, hits down to half the floor are kept (with hybrid search a hit under it is kept when it holds enough
   of the part's IDF-weighted words, its ``idf_coverage``: :func:`~ctxret.query.fusion.passes_floor`), the rest cut
   to ``k``; groups are never padded;
5. **parents** (``parents=True``): each hit's whole turn or section, one hit per parent in a group.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import EllipsisType
from typing import Any, Literal

import numpy as np

from ..errors import InputError
from ..results import Group, Hit
from ..storage.base import Deferred, DenseBackend, LexicalBackend, Row
from ..storage.schema import Scope, unmatched_field_names
from .floor import hit_floor
from .fusion import WHERE_OVERFETCH, FusionSettings, fuse, passes_floor
from .mmr import MMRSettings
from .relevance import RelevanceCalibration
from .rerank import GroupStages, finish_groups
from .settings import SearchSettings

logger = logging.getLogger(__name__)

__all__ = [
    "said_empty",
    "IdfCoverageFor",
    "PartCandidates",
    "SearchPlan",
    "SearchRequest",
    "assemble",
    "check_message",
    "dense_candidates",
    "dense_side",
    "fuse_candidates",
    "hybrid_candidates",
    "lexical_lists",
    "lexical_side",
    "plan_search",
    "prepare_search",
]

#: Whose ``idf_coverage`` the candidates carry: those under the floor (what the rescue rule reads), or all.
IdfCoverageFor = Literal["below_floor", "all"]


@dataclass(frozen=True, kw_only=True)
class SearchPlan:
    """A search's settings resolved against an index: the numbers every stage reads (built by keyword only)."""

    k: int
    floor: float | None  # a raw cosine, or None (no floor)
    #: the floor a part must pass for its first hit's rank to count in that hit's relevance (``first``,
    #: :mod:`.relevance`): the search's floor, else the index's even when the caller turned the floor off, so that the
    #: first hit of a search without a floor (``score_threshold=None``) that nothing answers is not scored as an answer
    lead_floor: float | None = None
    weight: float  # blend weight of a part against its whole message
    max_parts: int
    split: bool
    hybrid: FusionSettings | None  # None: dense search only
    parents: bool
    max_message_bytes: int | None = None
    stages: GroupStages = GroupStages()  # relevance, min_relevance, rerank, MMR (query/rerank.py)
    hyde: Any = None  # fn(part) -> hypothetical answer (ctxret.query.hyde), or None
    hyde_weight: float = 0.5  # the part's share against its hypothetical answer
    views: bool = True  # search the index's LLM-written views (when it has any)
    deadline_ms: float | None = None  # ctxret.query.deadline
    lexical_required: bool = False  # lexical=True: a store without a lexical index is an error
    per: str = "piece"  # "document" / "section": groups collapsed to k of them (query/documents.py)
    per_k: int | None = None  # with per: the documents (sections) per group; k is then the pieces asked
    now: Any = None  # the search's time (None: the current time), for the parts' time words (query/time/search.py)
    since: Any = None  # time bounds for every part (datetimes or None)
    until: Any = None
    time_windows: Any = True  # a part that names a time searches inside its window ("asking": only asking parts)
    answers_first: bool = True  # a stored question's answer ranks above it (query/answers.py)
    latest_first: bool = True  # of two hits about one subject, the later ranks first (query/latest.py)
    speakers_first: bool = True  # a part naming one speaker: that speaker's hits first (query/speakers.py)
    user_first: bool = True  # an agent's memory: the user's latest statement of a fact first (query/latest.py)

    def for_backends(self, has_lexical: bool) -> SearchPlan:
        """This plan on backends with (or without) a lexical index: no hybrid search without one."""
        if has_lexical:
            return self
        if self.lexical_required:
            raise InputError(
                "lexical=True but this index has no lexical index (a Chroma server or custom client gets none by "
                "default); open it with lexical_path='<local file>.sqlite3' to add one"
            )
        return replace(self, hybrid=None) if self.hybrid is not None else self

    @property
    def n_candidates(self) -> int:
        n = max(self.k, self.hybrid.candidates) if self.hybrid is not None else self.k
        return max(n, self.stages.pool(self.k))  # a reranker or MMR needs its pool of candidates


def plan_search(
    settings: SearchSettings,
    *,
    default_floor: float | None,
    stored_weight: float,
    has_lexical: bool,
    relevance: RelevanceCalibration | None = None,
) -> SearchPlan:
    """Resolve ``settings`` against an index: its default floor, its blend weight, whether it has a lexical index
    (``has_lexical=True`` for a store whose backends say so per search: :meth:`SearchPlan.for_backends`)."""
    hybrid = settings.hybrid.for_per(settings.per) if settings.lexical is not False else None
    floor = default_floor if settings.cosine_floor == "auto" else settings.cosine_floor
    weight = stored_weight if settings.query_weight is None else settings.query_weight
    stages = GroupStages(
        relevance=settings.relevance or relevance,
        min_relevance=settings.min_relevance,
        rerank=settings.rerank,
        rerank_candidates=settings.rerank_candidates,
        mmr=MMRSettings(fetch_k=settings.fetch_k, lambda_mult=settings.lambda_mult) if settings.mmr else None,
        recency_half_life=settings.recency_half_life,
        now=settings.now,
    )
    per = per_document(settings.k, settings.per)
    return SearchPlan(
        k=per.pop("k", settings.k),
        floor=floor,
        lead_floor=floor if floor is not None else default_floor,
        weight=float(weight),
        max_parts=settings.max_parts,
        split=settings.split,
        hybrid=hybrid,
        parents=settings.parents,
        max_message_bytes=settings.max_message_bytes,
        stages=stages,
        hyde=settings.hyde,
        hyde_weight=settings.hyde_weight,
        views=settings.views,
        deadline_ms=settings.deadline_ms,
        lexical_required=settings.lexical is True,
        now=settings.now,
        since=settings.since,
        until=settings.until,
        time_windows=settings.time_windows,
        answers_first=settings.answers_first,
        latest_first=settings.latest_first,
        speakers_first=settings.speakers_first,
        user_first=settings.user_first,
        **per,
    ).for_backends(has_lexical)


def per_document(k: int, per: str) -> dict[str, Any]:
    """The plan fields of ``per=``: a per-document (section) search asks for ``PIECES_PER_DOCUMENT × k`` pieces
    (at least; the candidates a part asks for count too) so that ``k`` distinct documents are found."""
    if per == "piece":
        return {}
    from .documents import PIECES_PER_DOCUMENT

    return {"k": PIECES_PER_DOCUMENT * k, "per": per, "per_k": k}


@dataclass(frozen=True)
class SearchRequest:
    """One call's search settings (the index's defaults with the call's options applied) and its scope."""

    settings: SearchSettings
    scope: Scope


def prepare_search(
    settings: SearchSettings,
    *,
    k: int | None = None,
    score_threshold: float | None | Literal["auto"] | EllipsisType = ...,
    thread_id: str | Sequence[str] | None = None,
    where: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> SearchRequest:
    """A search call's arguments checked and resolved (``score_threshold=...``: not given). Bad options
    fail here, before any work."""
    if not isinstance(settings, SearchSettings):
        raise InputError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    given = dict(options or {})
    if k is not None:
        given["k"] = k
    if score_threshold is not ...:
        given["score_threshold"] = score_threshold
    scope = Scope(thread_id, where)
    return SearchRequest(settings.with_options(**given), scope)


@dataclass
class PartCandidates:
    """One part's candidates with every score exact, and their ranking, before the floor and the cut to ``k``."""

    part: str
    ranked: list[tuple[str, float]]  # (id, ranking score) best first: fused, or the cosine (dense)
    info: dict[str, tuple[str, dict[str, Any]]]  # id -> (document, metadata)
    cosine: dict[str, float]
    bm25: dict[str, float] | None = None  # hybrid only
    #: hybrid: the share of the part's IDF-weighted words a candidate holds (the floor's rescue rule reads it;
    #: ``Hit.scores["coverage"]`` is another number: the unweighted share of content words, :mod:`.relevance`)
    idf_coverage: dict[str, float] = field(default_factory=dict)
    dense: list[tuple[str, float]] = field(default_factory=list)  # (id, cosine) best first
    lexical: list[tuple[str, float]] = field(default_factory=list)  # hybrid: (id, bm25) best first, in scope
    #: hits moved above another, each to that hit's place (a stored question's answer, the later of two statements
    #: of one subject): id -> the id whose score, floor and relevance it shares (query/answers.py, query/latest.py)
    lifted: dict[str, str] = field(default_factory=dict)
    #: hits moved above another that share only its relevance, not its floor (a named speaker's hits,
    #: query/speakers.py): id -> the id of the first hit it passed
    passed: dict[str, str] = field(default_factory=dict)
    #: the assistant's replies placed right under the user's question they answer (query/answers.py): id -> the
    #: question's id, whose floor (not its relevance) they share
    follows: dict[str, str] = field(default_factory=dict)


def fuse_candidates(c: PartCandidates, fusion: FusionSettings) -> PartCandidates:
    """``c`` ranked by ``fusion`` (the candidates and their scores do not depend on the fusion settings)."""
    ranked = fuse(
        c.dense,
        c.lexical,
        fusion.method,
        lexical_weight=fusion.lexical_weight,
        rrf_k=fusion.rrf_k,
        cosine=c.cosine,
        bm25=c.bm25,
    )
    return replace(c, ranked=ranked)


# -- the stages' building blocks (run by .executor) ---------------------------------------------
def dense_candidates(parts: Sequence[str], rows: Sequence[Sequence[Row]]) -> list[PartCandidates]:
    out = []
    for part, row in zip(parts, rows, strict=False):
        dense = [(r[0], float(r[2])) for r in row]
        out.append(PartCandidates(part, dense, {r[0]: (r[1] or "", r[3]) for r in row}, dict(dense), dense=dense))
    return out


def lexical_lists(
    lexical: LexicalBackend, plan: SearchPlan, parts: Sequence[str], scope: Scope
) -> list[list[tuple[str, float]]]:
    n = plan.n_candidates * WHERE_OVERFETCH if scope.where else plan.n_candidates
    thread_ids = list(scope.thread_ids) if scope.thread_ids is not None else None
    return [lexical.search(part, n, thread_ids) for part in parts]


def lexical_side(
    backend: DenseBackend, lexical: LexicalBackend, plan: SearchPlan, parts: Sequence[str], scope: Scope
) -> tuple[list[list[tuple[str, float]]], dict[str, Any]]:
    """Stage 2's lexical half, which needs no query vector: every part's BM25 list and ONE read of
    all their hits from the store (text, metadata, vector; inside the scope), so that it runs in a
    worker beside the embedding and the dense query. Hits the dense side also found are read too:
    it is not known yet which, and the one read costs about the same."""
    lists = lexical_lists(lexical, plan, parts, scope)
    ids = list(dict.fromkeys(i for hits in lists for i, _ in hits))
    return lists, (backend.fetch(ids, scope) if ids else {})


#: Per part, what :func:`dense_side` worked out for the dense hits: their BM25, and the IDF-weighted
#: coverage of those the floor asks about.
Known = Sequence[tuple[Mapping[str, float], Mapping[str, float]]]


def hybrid_candidates(
    backend: DenseBackend,
    lexical: LexicalBackend,
    plan: SearchPlan,
    parts: Sequence[str],
    qvecs: np.ndarray,
    scope: Scope,
    dense_rows: Sequence[Sequence[Row]],
    lexical_rows: Sequence[Sequence[tuple[str, float]]],
    *,
    idf_coverage_for: IdfCoverageFor = "below_floor",
    prefetched: Mapping[str, Any] | None = None,
    known: Known | None = None,
) -> list[PartCandidates]:
    """Complete every part's candidates and fuse them: one fetch for all lexical-only hits (which
    enforces the scope and gives their exact cosine; ``prefetched``: :func:`lexical_side` read them
    already), the exact BM25 of dense-only hits, and the ``idf_coverage`` of candidates under the
    floor (``idf_coverage_for="all"``: of every candidate). ``known``: :func:`dense_side`'s numbers,
    worked out already; they are looked up by id for the candidates that need them (a piece's BM25
    and coverage for a part do not depend on the other candidates), so the result is the same with
    or without them, whatever views or HyDE changed in the dense rows since."""
    assert plan.hybrid is not None
    s = plan.hybrid
    wanted: dict[str, None] = {}
    for rows, lex in zip(dense_rows, lexical_rows, strict=False):
        dense_ids = {r[0] for r in rows}
        wanted.update((i, None) for i, _ in lex if i not in dense_ids)
    if prefetched is not None:
        fetched = {i: prefetched[i] for i in wanted if i in prefetched}
    else:
        fetched = backend.fetch(list(wanted), scope)
    thread_ids = list(scope.thread_ids) if scope.thread_ids is not None else None
    out: list[PartCandidates] = []
    for i, (part, rows, lex) in enumerate(zip(parts, dense_rows, lexical_rows, strict=False)):
        q = np.asarray(qvecs[i], dtype=np.float32)
        info = {r[0]: (r[1] or "", r[3]) for r in rows}
        cosine = {r[0]: float(r[2]) for r in rows}
        # lexical hits the store does not return inside the scope (or at all) are dropped here
        kept = [(rid, sc) for rid, sc in lex if rid in info or rid in fetched][: plan.n_candidates]
        new = [rid for rid, _ in kept if rid not in info]
        for rid, cos in zip(new, _cosines([fetched[rid][2] for rid in new], q), strict=True):
            doc, meta, _ = fetched[rid]
            info[rid] = (doc, meta)
            cosine[rid] = cos
        listed = dict(kept)
        known_bm25, known_coverage = known[i] if known is not None else ({}, {})
        bm25 = dict.fromkeys(cosine, 0.0)
        only_dense = [r[0] for r in rows if r[0] not in listed]
        if known_bm25.keys() <= bm25.keys():  # the dense rows dense_side saw (no views or HyDE since)
            missing = [rid for rid in only_dense if rid not in known_bm25]
            bm25.update(known_bm25)
            if missing:
                bm25.update(lexical.scores(part, missing, thread_ids))
        else:
            bm25.update(_looked_up(known_bm25, only_dense, lexical.scores, part, thread_ids))
        bm25.update(listed)
        asked = _idf_coverage_asked(plan, idf_coverage_for, cosine)
        if not asked:
            idf_coverage: dict[str, float] = {}
        elif known_coverage.keys() <= set(asked):  # as above: the floor asks about what it asked dense_side
            missing = [rid for rid in asked if rid not in known_coverage]
            idf_coverage = {**known_coverage, **(lexical.coverage(part, missing) if missing else {})}
        else:
            idf_coverage = _looked_up(known_coverage, asked, lexical.coverage, part)
        dense_list = [(r[0], float(r[2])) for r in rows]
        pool = PartCandidates(part, [], info, cosine, bm25, idf_coverage, dense_list, kept)
        out.append(fuse_candidates(pool, s))
    return out


def _looked_up(known: Mapping[str, float], ids: list[str], compute: Any, part: str, *args: Any) -> dict[str, float]:
    """``compute(part, ids, *args)`` for the ids ``known`` lacks, in ``ids``' order with the known ones."""
    missing = [rid for rid in ids if rid not in known]
    got = compute(part, missing, *args) if missing else {}
    return {rid: (known[rid] if rid in known else got[rid]) for rid in ids if rid in known or rid in got}


def _idf_coverage_asked(plan: SearchPlan, idf_coverage_for: IdfCoverageFor, cosine: dict[str, float]) -> list[str]:
    """The candidates whose ``idf_coverage`` is needed: under the floor (the rescue rule), or all."""
    assert plan.hybrid is not None
    if idf_coverage_for == "all":
        return list(cosine)
    if plan.floor is not None and plan.hybrid.lexical_floor is not None:
        return [rid for rid, c in cosine.items() if not c >= plan.floor]
    return []


def dense_side(
    lexical: LexicalBackend,
    plan: SearchPlan,
    parts: Sequence[str],
    scope: Scope,
    dense_rows: Sequence[Sequence[Row]],
    idf_coverage_for: IdfCoverageFor = "below_floor",
) -> list[tuple[dict[str, float], dict[str, float]]]:
    """Per part, what the dense hits need from the lexical index and no lexical list gives: the
    exact BM25 of every dense hit and the ``idf_coverage`` of those the floor asks about. The
    executor runs it while the lexical worker still reads its hits' vectors (:func:`lexical_side`):
    the overlap that measured fastest."""
    thread_ids = list(scope.thread_ids) if scope.thread_ids is not None else None
    out = []
    for part, rows in zip(parts, dense_rows, strict=False):
        cosine = {r[0]: float(r[2]) for r in rows}
        asked = _idf_coverage_asked(plan, idf_coverage_for, cosine)
        out.append(
            (
                lexical.scores(part, list(cosine), thread_ids) if cosine else {},
                lexical.coverage(part, asked) if asked else {},
            )
        )
    return out


def exact_cosine(vec: np.ndarray, q: np.ndarray) -> float:
    """The cosine of a stored vector and a query vector (-1.0 for a size mismatch: never NaN in a sort)."""
    if vec.size != q.size or vec.size == 0:  # unreachable with one collection; never let NaN into a sort
        return -1.0
    denom = float(np.linalg.norm(vec) * np.linalg.norm(q))
    return float(np.clip(float(vec @ q) / denom, -1.0, 1.0)) if denom > 0 else 0.0


def _cosines(vecs: Sequence[Any], q: np.ndarray) -> list[float]:
    """:func:`exact_cosine` of each vector against ``q``, in one product when they all have ``q``'s size."""
    arrays = [np.asarray(v, dtype=np.float32).ravel() for v in vecs]
    if not arrays or any(a.size != q.size for a in arrays) or q.size == 0:
        return [exact_cosine(a, q) for a in arrays]
    m = np.stack(arrays)
    denom = np.linalg.norm(m, axis=1) * np.float32(np.linalg.norm(q))
    dots = m @ q
    safe = np.where(denom > 0, denom, 1.0)
    return [float(c) if d > 0 else 0.0 for c, d in zip(np.clip(dots / safe, -1.0, 1.0).tolist(), denom, strict=True)]


def assemble(
    plan: SearchPlan, candidates: Sequence[PartCandidates], *, fetch: Any = None, complete: Any = None
) -> list[Group]:
    """The floor, the group stages (relevance, rerank, MMR: :mod:`.rerank`) and the cut to ``k``: one
    group per part, never padded. ``fetch(ids)`` gives stored vectors (MMR); ``complete(ids)`` the
    texts and metadata of :data:`~ctxret.storage.base.DEFERRED` rows, read for the kept hits only."""
    lexical_floor = plan.hybrid.lexical_floor if plan.hybrid is not None else None
    floor = hit_floor(plan.floor)  # a hit's own floor; whether the part has an answer at all: finish_groups
    pool = plan.stages.pool(plan.k)
    lists: list[list[Hit]] = []
    for c in candidates:
        hits: list[Hit] = []
        for rid, score in c.ranked:
            cos = c.cosine[rid]
            # a lifted hit stands or falls with the hit it was lifted above, a reply with the question it follows
            rid_floor = c.lifted.get(rid) or c.follows.get(rid, rid)
            if c.bm25 is None:
                if floor is not None and not c.cosine[rid_floor] >= floor:
                    continue
                scores = {"cosine": cos}
            else:
                if not passes_floor(c.cosine[rid_floor], c.idf_coverage.get(rid_floor, 0.0), floor, lexical_floor):
                    continue  # under the hit floor and not rescued by the part's words
                scores = {"cosine": cos, "bm25": float(c.bm25[rid]), "fused": float(score)}
            doc, meta = c.info[rid]
            hits.append(Hit(rid, doc, float(score), meta, scores))
            if len(hits) == pool:
                break
        lists.append(hits)
    deferred = list(dict.fromkeys(h.id for hits in lists for h in hits if isinstance(h.stored, Deferred)))
    if deferred:
        if complete is None:
            raise TypeError("deferred rows need the backend's complete(ids)")
        got = complete(deferred)  # a piece deleted since the search began is gone from its group
        lists = [
            [
                replace(h, text=got[h.id][0], stored=got[h.id][1]) if isinstance(h.stored, Deferred) else h
                for h in hits
                if not isinstance(h.stored, Deferred) or h.id in got
            ]
            for hits in lists
        ]
    return finish_groups(
        plan.stages,
        plan.k,
        candidates,
        lists,
        fetch=fetch,
        floor=(plan.floor, lexical_floor),
        lead_floor=(plan.lead_floor, lexical_floor),
    )


def vector_fetcher(backend: DenseBackend, scope: Scope) -> Any:
    """``fetch(ids)`` for :func:`assemble`: the stored vectors of ``ids`` inside ``scope`` (MMR)."""
    return lambda ids: {rid: np.asarray(v[2], dtype=np.float32) for rid, v in backend.fetch(ids, scope).items()}


def check_message(plan: SearchPlan, message: Any) -> None:
    """Refuse a message that is not text, or longer than the plan allows."""
    if not isinstance(message, str):
        raise InputError(f"message must be a string, got {type(message).__name__}")
    if plan.max_message_bytes is not None:
        size = len(message.encode("utf-8", "surrogatepass"))
        if size > plan.max_message_bytes:
            raise InputError(
                f"the message is {size:,} bytes, over the {plan.max_message_bytes:,}-byte search limit; search a "
                "shorter message (its parts are what is searched), or raise the limit with max_message_bytes=N "
                "(None for no limit)"
            )


def said_empty(groups: list[Group], where: Mapping[str, Any] | None) -> list[Group]:
    """``groups``; when a filter found nothing and names a key that is also one of ctxret's fields (``kind``,
    ``source_kind``, ...), a warning says which meaning it had: the caller's key (``ctxret:<field>`` is ctxret's)."""
    if where and not any(g.hits for g in groups):
        names = unmatched_field_names(where)
        if names:
            mine, theirs = ", ".join(map(repr, names)), ", ".join(repr("ctxret:" + n) for n in names)
            logger.warning(
                "the filter found nothing; it names %s, read as your own metadata key(s) of that name (ctxret's "
                "field(s) of that name: %s)",
                mine,
                theirs,
            )
    return groups
