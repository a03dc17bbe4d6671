"""The search as one loop of stages on a clock: every search — sync, async, the harness's and the benchmarks'.

Stages, in order of value (what a later stage adds is worth less than what an earlier one gives):

1. ``embed`` — the parts' query vectors (one embedding request; none when the caller gives the vectors);
2. ``dense`` — the parts' dense candidates;
3. ``lexical`` — BM25 per part, fused with the dense side (:mod:`.search`);
4. ``views`` — the LLM-written views merged into the dense side (:mod:`.views`);
5. ``hyde`` — each part's vector blended with its hypothetical answer (:mod:`.hyde`), searched again;
6. ``latest`` — for a part that asks about now and whose group holds two statements of one source made at different
   times, those hits' own texts embedded (one request, only for texts the stage has not embedded before with this
   embedder) and the later of two same-subject statements moved above the earlier (:mod:`.latest`); no work at all
   for any other search;
7. ``parents`` — each hit's whole turn or section.

Each of stages 3–5 produces a complete candidate set from the stages before it; a stage that does
not finish replaces nothing, so the result is always exactly what the stages that ran found.
HyDE's LLM calls start with the search (one per part, in parallel) and overlap stages 1–4. The
lexical side (the parts' BM25 lists, then one read of their hits from the store) needs only the
parts' text, so it starts in a worker as soon as the backends are known, beside the embedding and
the dense query; once the dense rows are in, the dense hits' BM25 and ``idf_coverage`` are worked
out (:func:`~.search.dense_side`) while that worker still reads — the overlap that measured fastest.

**With ``deadline_ms``** the search returns within the budget (plus the few milliseconds of ranking
that follow the last stage):

* a stage starts only while budget is left, and one that is still running when the budget runs out
  is abandoned (``asearch`` cancels it; the sync path leaves it in a worker thread and never reads
  its result), then the stages after it are skipped;
* the embedding request gets the remaining budget as its timeout when the embedder can bound one
  (``OpenAIEmbedder.bounded``); the local model and a Chroma server are abandoned as above;
* if ``embed`` or ``dense`` does not finish in time, every part comes back as an **empty group**
  (no exception): nothing can be ranked without the part's vector. With ``dense`` done, the groups
  hold the dense results; each later stage that finished improves them;
* an error in an optional stage (``lexical``, ``views``, ``hyde``, ``latest``, ``parents``) is logged and the
  stage skipped; an error in ``embed`` or ``dense`` is raised, as without a deadline (it is not slow,
  it failed). Input errors are always raised.

The store is read (a thread loaded into the cache, say) on the clock too, beside the embedding.
Every :class:`~ctxret.results.Group` names the stages that ran (``stages``), the ones the search
would have run that did not (``skipped``), and ``degraded = bool(skipped)``; a search stopped before
it read the store knows only of ``embed``, ``dense`` and the ``hyde`` / ``parents`` it was asked for.
Without a deadline nothing is skipped and the stages run inline, as one pass.

**How it runs.** :func:`search_steps` is the loop, written once. It does no I/O: it *yields* each
piece of work (:data:`Work`: an embedding request, a store query or a stage's computation, a
background job, a wait for background jobs) with the time it may take, and is sent the result back
(or has the failure thrown in). The drivers of :mod:`.deadline` only carry the work out —
:func:`~.deadline.run_search` with threads, :func:`~.deadline.arun_search` on an event loop — so
both run the same stages in the same order and record them the same way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from ..embedders.base import Embedder, can_bound
from ..errors import InputError
from ..results import Group
from ..storage.base import Deferred, DenseBackend, LexicalBackend, Row
from ..storage.schema import Scope
from .answers import lift_answers
from .documents import collapse_groups, document_texts
from .hyde import blend_hyde
from .latest import LatestRequest, latest_first, latest_request, may_restate, own_vectors, request_ids
from .parents import expand_parents
from .search import (
    IdfCoverageFor,
    Known,
    PartCandidates,
    SearchPlan,
    assemble,
    check_message,
    dense_candidates,
    dense_side,
    hybrid_candidates,
    lexical_side,
    vector_fetcher,
)
from .speakers import speakers_first
from .split.asking import asks
from .vectors import blend_parts, embed_inputs, query_texts
from .views import ViewMatch, annotate, merge_views

logger = logging.getLogger(__name__)

__all__ = [
    "STAGES",
    "Answer",
    "Backends",
    "Call",
    "Clock",
    "Embed",
    "QueryVectors",
    "SearchRun",
    "SearchSource",
    "Start",
    "Wait",
    "Work",
    "candidate_steps",
    "search_steps",
    "store_backends",
]

#: Every stage, in the order it runs.
STAGES = ("embed", "dense", "lexical", "views", "hyde", "latest", "parents")
_T = TypeVar("_T")
#: What a driver's timeout raises (one class from Python 3.11 on).
TIMEOUTS = (TimeoutError, concurrent.futures.TimeoutError, asyncio.TimeoutError)


# -- the work the loop yields (the drivers carry it out) ----------------------------------------------
@dataclass(frozen=True)
class Call:
    """``fn(*args)``: a store query or a stage's computation. Without a ``timeout`` the sync driver runs
    it inline; with one, in a worker it waits on for at most that long. The async driver runs it in a
    thread (on the event loop when not ``blocking``)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    timeout: float | None = None
    blocking: bool = True

    def within(self, timeout: float) -> Call:
        return replace(self, timeout=timeout)


@dataclass(frozen=True)
class Embed:
    """One embedding request for ``texts`` (the async driver awaits the embedder's async path); with a
    ``timeout`` the embedder is asked to bound its request by it when it can (``bounded``)."""

    embedder: Embedder
    texts: list[str]
    timeout: float | None = None

    def within(self, timeout: float) -> Embed:
        return replace(self, timeout=timeout)


@dataclass(frozen=True)
class Start:
    """``fn(*args)`` started in a worker; its handle is sent back at once (a background job)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Answer:
    """HyDE's LLM call for each part started at once (sync: ``hyde_answer`` in workers; async:
    ``ahyde_answer`` tasks); their handles are sent back."""

    hyde: Any
    parts: list[str]


@dataclass(frozen=True)
class Wait:
    """The results of background jobs, in order: a timeout error when they are not all done in ``timeout``."""

    handles: tuple[Any, ...]
    timeout: float | None = None

    def within(self, timeout: float) -> Wait:
        return replace(self, timeout=timeout)


Work = Call | Embed | Start | Answer | Wait
Timed = Call | Embed | Wait  # the work a stage's clock bounds
Steps = Generator[Work, Any, _T]


def bounded_embedder(embedder: Embedder, timeout: float | None) -> Embedder:
    """``embedder`` with its requests bounded by ``timeout`` when it can bound them (``OpenAIEmbedder.bounded``)."""
    return embedder.bounded(timeout) if timeout is not None and can_bound(embedder) else embedder


# -- what a search runs on ------------------------------------------------------------------------------
class Backends(NamedTuple):
    """The backends one search runs on: dense, lexical (``None``: dense search only), views (``None``: none)."""

    dense: DenseBackend
    lexical: LexicalBackend | None = None
    views: Any = None  # a storage.views MemoryViews / ChromaViews


class SearchSource(Protocol):
    """A store that resolves a scope's backends (``storage.pieces.PieceStore``)."""

    views: Any  # a storage.views.ViewIndex: backend(scope, dense)

    def resolve(self, scope: Scope) -> tuple[Any, Any]: ...


@contextlib.contextmanager
def reading(source: Any) -> Iterator[Any]:
    """``source`` as one search reads it: a store's ``searching()`` (its reads in one session, so that a write beside
    the search is seen from one side in all of them: ``storage.visibility``), closed when the search ends; anything
    else as it is (:class:`Backends`, a store without sessions)."""
    searching = getattr(source, "searching", None)
    if searching is None:
        yield source
        return
    with searching() as reads:
        yield reads


def store_backends(store: SearchSource, scope: Scope) -> Backends:
    """``store``'s backends for ``scope`` (reading a thread into the cache, say: it runs on the clock)."""
    dense, lexical = store.resolve(scope)
    return Backends(dense, lexical, store.views.backend(scope, dense))


@dataclass(frozen=True)
class QueryVectors:
    """Parts and their query vectors made already (the harness's, a benchmark's): the search starts at ``dense``."""

    parts: Sequence[str]
    vectors: np.ndarray


class Clock:
    """A search's budget: ``deadline_ms`` from its start (``None``: unbounded)."""

    def __init__(self, deadline_ms: float | None) -> None:
        self.start = time.monotonic()
        self.end = None if deadline_ms is None else self.start + float(deadline_ms) / 1000.0

    @property
    def bounded(self) -> bool:
        return self.end is not None

    def remaining(self) -> float | None:
        """Seconds left (``None``: unbounded; never negative)."""
        return None if self.end is None else max(0.0, self.end - time.monotonic())


#: Budget left (seconds) under which a stage's error counts as its deadline: a request given the rest of the budget
#: as its timeout raises its own timeout error at about the moment the stage's wait would have.
SPENT_SECONDS = 0.01


class _Skip(Exception):
    """A stage did not finish in time (or failed, if optional)."""


@dataclass(frozen=True)
class _State:
    """What the stages so far produced; :meth:`SearchRun.complete` turns it into candidates."""

    qvecs: np.ndarray
    rows: Sequence[Sequence[Row]]
    lex: Sequence[Sequence[tuple[str, float]]] | None = None
    fetched: dict[str, Any] | None = None  # the store's rows of the lexical hits (lexical_side)
    known: Known | None = None  # the dense hits' BM25 and idf_coverage (dense_side)
    vrows: Sequence[Sequence[tuple[str, float, str, str]]] | None = None


_Result = tuple[list[PartCandidates], list[dict[str, ViewMatch]]]


class SearchRun:
    """One search's inputs, backends and record of stages; its methods are the stages' computations."""

    def __init__(
        self,
        plan: SearchPlan,
        scope: Scope,
        embedder: Embedder | None,
        *,
        idf_coverage_for: IdfCoverageFor = "below_floor",
    ) -> None:
        self.plan, self.scope, self.embedder, self.idf_coverage_for = plan, scope, embedder, idf_coverage_for
        self.clock = Clock(plan.deadline_ms)
        self.parts: list[str] = []
        self.embeds = True
        self.dense: Any = None
        self.lexical: LexicalBackend | None = None
        self.views: Any = None
        self.ran: list[str] = []
        self.restated = False  # a group may hold a changed fact: the ``latest`` stage has work
        self._set_wanted()

    def _set_wanted(self) -> None:
        on = (
            self.embeds,
            True,
            self.lexical is not None,
            self.views is not None,
            self.plan.hyde is not None,
            self.restated,
            self.plan.parents,
        )
        self.wanted = [s for s, yes in zip(STAGES, on, strict=True) if yes]

    def bind(self, backends: Backends) -> None:
        """The backends this search runs on; the plan becomes the plan for them (no lexical index: dense only)."""
        dense, lexical, views = backends
        self.plan = self.plan.for_backends(lexical is not None)
        self.dense = dense
        self.lexical = lexical if self.plan.hybrid is not None else None
        self.views = views if self.plan.views else None
        self._set_wanted()

    @property
    def n(self) -> int:
        return self.plan.n_candidates

    def stage(self, name: str, work: Timed, *, optional: bool = True, gate: bool = True) -> Steps[Any]:
        """``yield from`` it: ``work`` as (a step of) stage ``name`` on the clock. With a deadline the step
        starts only while budget is left (``gate``) and gets the rest as its timeout; running out, or an
        optional stage's error, is a skip (raised as :class:`_Skip`). Input errors always raise."""
        bounded = self.clock.bounded
        if bounded:
            rem = self.clock.remaining() or 0.0
            if gate and rem <= 0.0:
                raise _Skip(name)
            work = work.within(rem)
        try:
            return (yield work)
        except InputError:
            raise
        except TIMEOUTS:
            if not bounded:
                raise
            raise _Skip(name) from None
        except Exception as e:
            if bounded and (self.clock.remaining() or 0.0) <= SPENT_SECONDS:
                # it failed as the budget ran out: a request bounded by the deadline timed out on its own (its
                # timeout fired before the stage's wait did); that is the deadline, not a failure
                raise _Skip(name) from e
            if not optional or not bounded:
                raise
            logger.warning("search stage %r failed (%s: %s); the search goes on without it", name, type(e).__name__, e)
            raise _Skip(name) from e

    # -- the stages' computations (pure but for the store reads they name) -----------------------------
    def lexical_side(self) -> tuple[list[list[tuple[str, float]]], dict[str, Any]]:
        assert self.lexical is not None
        return lexical_side(self.dense, self.lexical, self.plan, self.parts, self.scope)

    def dense_side(self, rows: Sequence[Sequence[Row]]) -> Known:
        assert self.lexical is not None
        return dense_side(self.lexical, self.plan, self.parts, self.scope, rows, self.idf_coverage_for)

    def complete(self, state: _State) -> _Result:
        """Candidates from ``state``: views merged into the dense side, then fused with the lexical side."""
        rows: Sequence[Sequence[Row]] = state.rows
        won: list[dict[str, ViewMatch]] = [{} for _ in self.parts]
        if state.vrows is not None:
            rows, won = merge_views(rows, state.vrows, state.qvecs, self.dense, self.scope, self.n)
        if state.lex is not None and self.lexical is not None:
            cands = hybrid_candidates(
                self.dense,
                self.lexical,
                self.plan,
                self.parts,
                state.qvecs,
                self.scope,
                rows,
                state.lex,
                idf_coverage_for=self.idf_coverage_for,
                prefetched=state.fetched,
                known=state.known,
            )
        else:
            cands = dense_candidates(self.parts, rows)
        return self.reranked(cands), won

    def reranked(self, cands: list[PartCandidates]) -> list[PartCandidates]:
        """The candidates' ranking after fusion: stored questions' answers lifted (:mod:`.answers`), then a named
        speaker's own words first (:mod:`.speakers`). The latest fact first is the ``latest`` stage
        (:meth:`latest_requests`, :meth:`with_latest`)."""
        plan = self.plan
        if plan.answers_first:
            cands = self._known(cands)
            depth = plan.stages.pool(plan.k)
            cands = [lift_answers(c, depth) for c in cands]
        if plan.speakers_first:
            cands = [speakers_first(c) for c in cands]
        return cands

    def latest_requests(self, cands: list[PartCandidates]) -> list[LatestRequest | None]:
        """Each part's :class:`~.latest.LatestRequest` (``None``: nothing to move). The rows of every part that asks
        about now and whose first hits' metadata is deferred or shows a restated fact are read in one store read."""
        k, mine = self.plan.k, self.plan.user_first
        ids = list(dict.fromkeys(rid for c in cands if may_restate(c, k, mine) for rid in request_ids(c, k, mine)))
        rows = self.dense.fetch(ids, self.scope) if ids else {}
        return [latest_request(c, k, lambda _ids: rows, mine) for c in cands]

    def with_latest(self, result: _Result, requests: Sequence[LatestRequest | None], own: np.ndarray) -> _Result:
        """``result`` with the latest fact first in each group that has a request; ``own``: the embeddings of
        :func:`latest_texts`'s texts."""
        lexical = self.lexical
        coverage = (lambda text, ids: lexical.coverage(text, ids)) if lexical is not None else None
        row = {text: i for i, text in enumerate(latest_texts(requests))}
        cands = [
            c if req is None else latest_first(c, self.plan.k, req, own[[row[t] for t in req.texts]], coverage)
            for c, req in zip(result[0], requests, strict=True)
        ]
        return cands, result[1]

    def _known(self, cands: list[PartCandidates]) -> list[PartCandidates]:
        """The candidates of parts that ask with their metadata read (an unscoped store defers it), so that a
        stored question's answer can be found among them (:mod:`.answers`); one read for all parts."""
        complete = getattr(self.dense, "complete", None)
        if complete is None:
            return cands
        asking = {i for i, c in enumerate(cands) if asks(c.part)}
        wanted = list(
            dict.fromkeys(rid for i in asking for rid, (_, meta) in cands[i].info.items() if isinstance(meta, Deferred))
        )
        if not wanted:
            return cands
        got = complete(wanted)  # a piece deleted since the search began keeps its deferred row
        out = []
        for i, c in enumerate(cands):
            if i in asking:
                c = replace(
                    c,
                    info={
                        rid: got.get(rid, row) if isinstance(row[1], Deferred) else row for rid, row in c.info.items()
                    },
                )
            out.append(c)
        return out

    def staged(self, state: _State) -> tuple[_State, _Result | None]:
        """A stage's output: its state, completed at once when a deadline may stop the next stage."""
        return state, (self.complete(state) if self.clock.bounded else None)

    def with_views(self, state: _State) -> tuple[_State, _Result | None]:
        return self.staged(replace(state, vrows=self.views.search(state.qvecs, self.n, self.scope)))

    def with_hyde(
        self, state: _State, answers: Sequence[str], answer_vecs: np.ndarray
    ) -> tuple[_State, _Result | None]:
        qvecs = blend_hyde(state.qvecs, answers, answer_vecs, self.plan.hyde_weight)
        rows = self.dense.dense(qvecs, self.n, self.scope)
        vrows = self.views.search(qvecs, self.n, self.scope) if state.vrows is not None and self.views else None
        return self.staged(replace(state, qvecs=qvecs, rows=rows, vrows=vrows))

    def groups(self, result: _Result | None) -> list[Group]:
        if result is None:
            groups = [Group(i, p, ()) for i, p in enumerate(self.parts)]
        else:
            fetch = vector_fetcher(self.dense, self.scope) if self.plan.stages.mmr is not None else None
            assembled = assemble(self.plan, result[0], fetch=fetch, complete=getattr(self.dense, "complete", None))
            groups = annotate(assembled, result[1])
        return self.finish(groups)

    def finish(self, groups: Sequence[Group]) -> list[Group]:
        skipped = tuple(s for s in self.wanted if s not in self.ran)
        return [replace(g, stages=tuple(self.ran), degraded=bool(skipped), skipped=skipped) for g in groups]


# -- the loop ---------------------------------------------------------------------------------------------
def candidate_steps(
    run: SearchRun,
    query: str | QueryVectors,
    source: Backends | SearchSource,
    split: tuple[list[str], str] | None = None,
) -> Steps[_Result | None]:
    """Stages 1–5 (``embed`` to ``hyde``): every part's candidates, or ``None`` when there are no parts
    (``run.parts`` empty) or ``embed`` / ``dense`` did not finish in time. ``split``: the message's parts and
    whole text when the caller split it already (:mod:`.time.search`), so a message is split once."""
    plan = run.plan
    if isinstance(query, QueryVectors):
        parts, whole = list(query.parts), None
        run.embeds = False
        run._set_wanted()
    else:
        if split is None:
            check_message(plan, query)
        parts, whole = split or query_texts(query, max_parts=plan.max_parts, split=plan.split)  # the one split
    run.parts = parts
    if not parts:
        return None
    answers = (yield Answer(plan.hyde, parts)) if plan.hyde is not None else None
    resolving = None
    if isinstance(source, Backends):
        run.bind(source)
    elif run.clock.bounded:
        resolving = yield Start(store_backends, (source, run.scope))  # on the clock, beside the embedding
    else:
        run.bind((yield Call(store_backends, (source, run.scope))))
    lex_job = (yield Start(run.lexical_side)) if run.lexical is not None else None
    try:
        if whole is None:
            assert isinstance(query, QueryVectors)
            qvecs = np.asarray(query.vectors, dtype=np.float32)
        else:
            if run.embedder is None:
                raise InputError("a search from a message needs an embedder")
            inputs = embed_inputs(parts, whole, plan.split)
            vecs = yield from run.stage("embed", Embed(run.embedder, inputs), optional=False)
            qvecs = np.asarray(blend_parts(vecs, len(parts), plan.weight), dtype=np.float32)
            run.ran.append("embed")
        if resolving is not None:
            (backends,) = yield from run.stage("dense", Wait((resolving,)), optional=False, gate=False)
            run.bind(backends)
            lex_job = (yield Start(run.lexical_side)) if run.lexical is not None else None
        rows = yield from run.stage("dense", Call(run.dense.dense, (qvecs, run.n, run.scope)), optional=False)
        run.ran.append("dense")
    except _Skip:
        return None
    state = _State(qvecs, rows)
    best = run.complete(state) if run.clock.bounded else None  # dense only: no reads
    if lex_job is not None:
        try:
            known = yield from run.stage("lexical", Call(run.dense_side, (rows,)))  # while the worker reads
            ((lex, fetched),) = yield from run.stage("lexical", Wait((lex_job,)))
            state, done = yield from run.stage(
                "lexical", Call(run.staged, (replace(state, lex=lex, fetched=fetched, known=known),))
            )
            run.ran.append("lexical")
            best = done or best
        except _Skip:
            pass
    if run.views is not None:
        try:
            state, done = yield from run.stage("views", Call(run.with_views, (state,)))
            run.ran.append("views")
            best = done or best
        except _Skip:
            pass
    if answers is not None:
        try:
            said = list((yield from run.stage("hyde", Wait(tuple(answers)))))
            texts = [a for a in said if a]
            if texts:
                if run.embedder is None:
                    raise InputError("HyDE embeds its answers: a search with hyde needs an embedder")
                answer_vecs = yield from run.stage("hyde", Embed(run.embedder, texts))
            else:
                answer_vecs = np.zeros((0, state.qvecs.shape[1]), np.float32)
            state, done = yield from run.stage("hyde", Call(run.with_hyde, (state, said, answer_vecs)))
            run.ran.append("hyde")
            best = done or best
        except _Skip:
            pass
    if not run.clock.bounded:
        best = yield Call(run.complete, (state,))
    if best is not None and run.plan.latest_first and run.embedder is not None:
        if any(may_restate(c, run.plan.k, run.plan.user_first) for c in best[0]):  # most searches: no work, no read
            best = yield from latest_steps(run, best)
    return best


def latest_texts(requests: Sequence[LatestRequest | None]) -> list[str]:
    """The texts the ``latest`` stage embeds: every request's, each once."""
    return list(dict.fromkeys(t for req in requests if req is not None for t in req.texts))


def latest_steps(run: SearchRun, best: _Result) -> Steps[_Result]:
    """Stage 6, ``latest`` (:mod:`.latest`): ``best`` with the later of two same-subject statements first in each
    group that may hold a changed fact; ``best`` unchanged when no group can, or when the stage does not finish."""
    try:
        requests = yield from run.stage("latest", Call(run.latest_requests, (best[0],)))
        texts = latest_texts(requests)
        if not texts:
            return best
        run.restated = True
        run._set_wanted()
        assert run.embedder is not None  # candidate_steps runs this stage only with an embedder
        memo = own_vectors(run.embedder)
        known = memo.get(texts) if memo is not None else {}
        missing = [t for t in texts if t not in known]
        if missing:  # an agent asking about the same memories again embeds nothing
            fresh = np.asarray((yield from run.stage("latest", Embed(run.embedder, missing))), dtype=np.float32)
            if memo is not None:
                memo.put(missing, fresh)
            known = {**known, **dict(zip(missing, fresh, strict=True))}
        own = np.stack([known[t] for t in texts])
        done = yield from run.stage("latest", Call(run.with_latest, (best, requests, own)))
        run.ran.append("latest")
        return done
    except _Skip:
        return best


def search_steps(
    run: SearchRun,
    query: str | QueryVectors,
    source: Backends | SearchSource,
    split: tuple[list[str], str] | None = None,
) -> Steps[list[Group]]:
    """The whole search (see the module docstring): the candidates, the groups, then ``parents``."""
    best = yield from candidate_steps(run, query, source, split)
    if not run.parts:
        return []
    # a reranker or MMR may call out (a compressor, the store's vectors): the async driver runs them off the loop
    heavy = run.plan.stages.rerank is not None or run.plan.stages.mmr is not None
    groups: list[Group] = yield Call(run.groups, (best,), blocking=heavy and best is not None)
    per = run.plan.per  # per="document" / "section": one hit per document (query/documents.py)
    if per != "piece":
        groups = collapse_groups(groups, per=per, k=run.plan.per_k or run.plan.k)
    if run.plan.parents and groups and best is not None:
        expand = (
            Call(expand_parents, (run.dense, groups))
            if per == "piece"
            else Call(document_texts, (run.dense, groups, per))
        )
        try:
            expanded = yield from run.stage("parents", expand)
            run.ran.append("parents")
            groups = run.finish(expanded)
        except _Skip:
            pass
    return groups
