"""The search run as stages on a clock: every search, and the ``deadline_ms`` budget.

Stages, in order of value (what a later stage adds is worth less than what an earlier one gives):

1. ``embed`` — the parts' query vectors (one embedding request);
2. ``dense`` — the parts' dense candidates;
3. ``lexical`` — BM25 per part, fused with the dense side (:mod:`.search`);
4. ``views`` — the LLM-written views merged into the dense side (:mod:`.views`);
5. ``hyde`` — each part's vector blended with its hypothetical answer (:mod:`.hyde`), searched again;
6. ``parents`` — each hit's whole turn or section.

Each of stages 3–5 produces a complete candidate set from the stages before it; a stage that does
not finish replaces nothing, so the result is always exactly what the stages that ran found.
HyDE's LLM calls start with the search (one per part, in parallel) and overlap stages 1–4.

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
* an error in an optional stage (``lexical``, ``views``, ``hyde``, ``parents``) is logged and the
  stage skipped; an error in ``embed`` or ``dense`` is raised, as without a deadline (it is not slow,
  it failed). Input errors are always raised.

The store is read (a thread loaded into the cache, say) on the clock too, beside the embedding.
Every :class:`~ctxret.results.Group` names the stages that ran (``stages``), the ones the search
would have run that did not (``skipped``), and ``degraded = bool(skipped)``; a search stopped before
it read the store knows only of ``embed``, ``dense`` and the ``hyde`` / ``parents`` it was asked for.
Without a deadline nothing is skipped and the stages run inline, as one pass.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ..embedders.base import Embedder
from ..embedders.fitting import aembed_fitting, embed_fitting
from ..errors import InputError
from ..results import Group
from ..storage.base import DenseBackend, LexicalBackend, Row
from ..storage.schema import Scope
from .hyde import ahyde_answer, blend_hyde, hyde_answer
from .parents import expand_parents
from .search import (
    PartCandidates,
    SearchPlan,
    _dense_candidates,
    _fetcher,
    _hybrid_candidates,
    assemble,
    check_message,
    lexical_side,
    stage_pool,
)
from .settings import SearchSettings
from .vectors import aquery_vectors, query_texts, query_vectors
from .views import ViewMatch, annotate, merge_views

logger = logging.getLogger(__name__)

__all__ = ["STAGES", "Clock", "arun_search", "arun_staged", "prepare_search", "run_search", "run_staged"]

#: Every stage, in the order it runs.
STAGES = ("embed", "dense", "lexical", "views", "hyde", "parents")
_T = TypeVar("_T")
_pool = stage_pool


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


class _Skip(Exception):
    """A stage did not finish in time (or failed, if optional)."""


@dataclass(frozen=True)
class _State:
    """What the stages so far produced; :func:`_complete` turns it into candidates."""

    qvecs: np.ndarray
    rows: Sequence[Sequence[Row]]
    lex: Sequence[Sequence[tuple[str, float]]] | None = None
    fetched: dict[str, Any] | None = None  # the store's rows of the lexical hits (lexical_side)
    vrows: Sequence[Sequence[tuple[str, float, str, str]]] | None = None


_Result = tuple[list[PartCandidates], list[dict[str, ViewMatch]]]


class _Search:
    """One search's inputs and its record of stages (shared by the sync and async executors)."""

    def __init__(self, plan: SearchPlan, message: str, scope: Scope, embedder: Embedder) -> None:
        check_message(plan, message)
        self.plan, self.message, self.scope, self.embedder = plan, message, scope, embedder
        self.clock = Clock(plan.deadline_ms)
        self.parts, _ = query_texts(message, max_parts=plan.max_parts, split=plan.split)
        self.dense: Any = None
        self.lexical: Any = None
        self.views: Any = None
        self.lex_job: Any = None  # the lexical lists, computed in a worker beside the embedding and dense query
        self.ran: list[str] = []
        self._set_wanted()

    def _set_wanted(self) -> None:
        on = (
            True, True, self.lexical is not None, self.views is not None, self.plan.hyde is not None, self.plan.parents
        )
        self.wanted = [s for s, yes in zip(STAGES, on, strict=False) if yes]

    def bind(self, backends: tuple[Any, Any, Any], replan: Callable[[bool], SearchPlan] | None) -> None:
        """The backends this search runs on (``replan(has_lexical)``: the plan once they are known)."""
        dense, lexical, views = backends
        if replan is not None:
            self.plan = replan(lexical is not None)
        self.dense = dense
        self.lexical = lexical if self.plan.hybrid is not None else None
        self.views = views if self.plan.views else None
        self._set_wanted()

    def lexical_lists(self) -> tuple[list[list[tuple[str, float]]], dict[str, Any]]:
        """Every part's BM25 list and the store's rows of its hits (:func:`~.search.lexical_side`): it
        needs the parts' text only, so it runs in a worker from the moment the backends are known,
        beside the embedding and the dense query."""
        return lexical_side(self.dense, self.lexical, self.plan, self.parts, self.scope)

    @property
    def n(self) -> int:
        return self.plan.n_candidates

    def embedder_now(self) -> Embedder:
        """The embedder, its requests bounded by the remaining budget when it can bound them."""
        rem = self.clock.remaining()
        bounded = getattr(self.embedder, "bounded", None)
        return bounded(rem) if rem is not None and callable(bounded) else self.embedder

    def complete(self, state: _State) -> _Result:
        """Candidates from ``state``: views merged into the dense side, then fused with the lexical side."""
        rows: Sequence[Sequence[Row]] = state.rows
        won: list[dict[str, ViewMatch]] = [{} for _ in self.parts]
        if state.vrows is not None:
            rows, won = merge_views(rows, state.vrows, state.qvecs, self.dense, self.scope, self.n)
        if state.lex is not None and self.lexical is not None:
            cands = _hybrid_candidates(
                self.dense, self.lexical, self.plan, self.parts, state.qvecs, self.scope, rows, state.lex,
                prefetched=state.fetched,
            )  # fmt: skip
        else:
            cands = _dense_candidates(self.parts, rows)
        return cands, won

    def staged(self, state: _State) -> tuple[_State, _Result | None]:
        """A stage's output: its state, completed at once when a deadline may stop the next stage."""
        return state, (self.complete(state) if self.clock.bounded else None)

    def hyde_state(self, state: _State, answers: Sequence[str], answer_vecs: np.ndarray) -> _State:
        qvecs = blend_hyde(state.qvecs, answers, answer_vecs, self.plan.hyde_weight)
        rows = self.dense.dense(qvecs, self.n, self.scope)
        vrows = (
            self.views.search(qvecs, self.n, self.scope)
            if state.vrows is not None and self.views is not None
            else None
        )
        return replace(state, qvecs=qvecs, rows=rows, vrows=vrows)

    def groups(self, result: _Result | None) -> list[Group]:
        if result is None:
            groups = [Group(i, p, ()) for i, p in enumerate(self.parts)]
        else:
            fetch = _fetcher(self.dense, self.scope) if self.plan.stages.mmr is not None else None
            assembled = assemble(self.plan, result[0], fetch=fetch, complete=getattr(self.dense, "complete", None))
            groups = annotate(assembled, result[1])
        return self.finish(groups)

    def finish(self, groups: Sequence[Group]) -> list[Group]:
        skipped = tuple(s for s in self.wanted if s not in self.ran)
        return [replace(g, stages=tuple(self.ran), degraded=bool(skipped), skipped=skipped) for g in groups]

    def failed(self, name: str, exc: BaseException) -> _Skip:
        logger.warning("search stage %r failed (%s: %s); the search goes on without it", name, type(exc).__name__, exc)
        return _Skip(name)


# -- the sync executor ------------------------------------------------------------------------
def _run(s: _Search, name: str, fn: Callable[..., _T], *args: Any, optional: bool = True) -> _T:
    """``fn(*args)`` as stage ``name``: inline without a deadline, else in a worker for at most the budget left."""
    if not s.clock.bounded:
        out = fn(*args)
    else:
        rem = s.clock.remaining() or 0.0
        if rem <= 0.0:
            raise _Skip(name)
        fut = _pool().submit(fn, *args)
        try:
            out = fut.result(timeout=rem)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise _Skip(name) from None
        except InputError:
            raise
        except Exception as e:
            if not optional:
                raise
            raise s.failed(name, e) from e
    s.ran.append(name)
    return out


Backends = tuple[DenseBackend, "LexicalBackend | None", Any]  # (dense, lexical or None, views or None)


def run_staged(
    plan: SearchPlan, message: str, scope: Scope, embedder: Embedder, backends: Backends | Callable[[], Backends],
    *, replan: Callable[[bool], SearchPlan] | None = None,
) -> list[Group]:  # fmt: skip
    """The whole search, synchronously (see the module docstring).

    ``backends``: ``(dense, lexical, views)``, or a function resolving them (reading a thread into the
    cache, say), which then runs on the clock beside the embedding; ``replan(has_lexical)`` gives the
    plan once they are known.
    """
    s = _Search(plan, message, scope, embedder)
    if not s.parts:
        return []
    hyde_jobs = [_pool().submit(hyde_answer, plan.hyde, p) for p in s.parts] if plan.hyde is not None else None
    resolving = None
    if not callable(backends):
        s.bind(backends, replan)
    elif s.clock.bounded:
        resolving = _pool().submit(backends)
    else:
        s.bind(backends(), replan)
    if s.lexical is not None:
        s.lex_job = _pool().submit(s.lexical_lists)
    try:
        try:
            _, qvecs = _run(s, "embed", lambda: query_vectors(s.embedder_now(), message, weight=plan.weight,
                                                               max_parts=plan.max_parts, split=plan.split),
                            optional=False)  # fmt: skip
            if resolving is not None:
                try:
                    s.bind(resolving.result(timeout=s.clock.remaining()), replan)
                except concurrent.futures.TimeoutError:
                    raise _Skip("dense") from None
                if s.lexical is not None:
                    s.lex_job = _pool().submit(s.lexical_lists)
            plan = s.plan
            rows = _run(s, "dense", s.dense.dense, np.asarray(qvecs, dtype=np.float32), s.n, scope, optional=False)
        except _Skip:
            return s.groups(None)
        dense = s.dense
        state = _State(np.asarray(qvecs, dtype=np.float32), rows)
        best: _Result | None = s.complete(state) if s.clock.bounded else None  # dense only: no reads
        if s.lex_job is not None:
            lex_job = s.lex_job

            def lexical_stage() -> tuple[_State, _Result | None]:
                lex, fetched = lex_job.result()
                return s.staged(replace(state, lex=lex, fetched=fetched))

            try:
                state, done = _run(s, "lexical", lexical_stage)
                best = done or best
            except _Skip:
                pass
        if s.views is not None:
            view_backend = s.views
            try:
                state, done = _run(
                    s, "views", lambda: s.staged(replace(state, vrows=view_backend.search(state.qvecs, s.n, scope)))
                )
                best = done or best
            except _Skip:
                pass
        if hyde_jobs is not None:
            try:
                answers = _wait_answers(s, hyde_jobs)

                def hyde_stage() -> tuple[_State, _Result | None]:
                    texts = [a for a in answers if a]
                    vecs = (
                        embed_fitting(s.embedder_now(), texts)
                        if texts
                        else np.zeros((0, state.qvecs.shape[1]), np.float32)
                    )
                    return s.staged(s.hyde_state(state, answers, vecs))

                state, done = _run(s, "hyde", hyde_stage)
                best = done or best
            except _Skip:
                pass
        if not s.clock.bounded:
            best = s.complete(state)
        groups = s.groups(best)
        if plan.parents and groups:
            try:
                groups = s.finish(_run(s, "parents", expand_parents, dense, groups))
            except _Skip:
                pass
        return groups
    finally:
        for job in [*(hyde_jobs or ()), *([s.lex_job] if s.lex_job is not None else [])]:
            job.cancel()


def _wait_answers(s: _Search, jobs: Sequence[concurrent.futures.Future[str]]) -> list[str]:
    done, pending = concurrent.futures.wait(jobs, timeout=s.clock.remaining())
    if pending:
        raise _Skip("hyde")
    try:
        return [job.result() for job in jobs]
    except InputError:
        raise
    except Exception as e:
        if not s.clock.bounded:
            raise
        raise s.failed("hyde", e) from e


# -- the async executor -----------------------------------------------------------------------
async def _arun(s: _Search, name: str, make: Callable[[], Awaitable[_T]], *, optional: bool = True) -> _T:
    """Await ``make()`` as stage ``name``, cancelled when the budget runs out."""
    try:
        if not s.clock.bounded:
            out = await make()
        else:
            rem = s.clock.remaining() or 0.0
            if rem <= 0.0:
                raise _Skip(name)
            out = await asyncio.wait_for(make(), rem)
    except (asyncio.TimeoutError, _Skip):
        if not s.clock.bounded:
            raise
        raise _Skip(name) from None
    except InputError:
        raise
    except Exception as e:
        if not optional or not s.clock.bounded:
            raise
        raise s.failed(name, e) from e
    s.ran.append(name)
    return out


async def arun_staged(
    plan: SearchPlan, message: str, scope: Scope, embedder: Embedder, backends: Backends | Callable[[], Backends],
    *, replan: Callable[[bool], SearchPlan] | None = None,
) -> list[Group]:  # fmt: skip
    """The whole search, asynchronously: the embedding and HyDE await their async paths (a deadline cancels
    them), store reads run off the event loop."""
    s = _Search(plan, message, scope, embedder)
    if not s.parts:
        return []
    hyde = plan.hyde
    hyde_tasks = [asyncio.ensure_future(ahyde_answer(hyde, p)) for p in s.parts] if hyde is not None else None
    resolving = asyncio.ensure_future(asyncio.to_thread(backends)) if callable(backends) else None
    if resolving is None:
        s.bind(backends, replan)  # type: ignore[arg-type]
        if s.lexical is not None:
            s.lex_job = asyncio.ensure_future(asyncio.to_thread(s.lexical_lists))
    try:
        try:
            _, qvecs = await _arun(s, "embed", lambda: aquery_vectors(s.embedder_now(), message, weight=plan.weight,
                                                                      max_parts=plan.max_parts, split=plan.split),
                                   optional=False)  # fmt: skip
            qvecs = np.asarray(qvecs, dtype=np.float32)
            if resolving is not None:
                rem = s.clock.remaining()
                try:
                    s.bind(await (asyncio.wait_for(resolving, rem) if rem is not None else resolving), replan)
                except asyncio.TimeoutError:
                    raise _Skip("dense") from None
                if s.lexical is not None:
                    s.lex_job = asyncio.ensure_future(asyncio.to_thread(s.lexical_lists))
            plan = s.plan
            dense = s.dense
            rows = await _arun(s, "dense", lambda: asyncio.to_thread(dense.dense, qvecs, s.n, scope), optional=False)
        except _Skip:
            return s.groups(None)
        state = _State(qvecs, rows)
        best: _Result | None = s.complete(state) if s.clock.bounded else None
        if s.lex_job is not None:
            lex_task = s.lex_job

            async def lexical_stage() -> tuple[_State, _Result | None]:
                lex, fetched = await asyncio.shield(lex_task)  # a deadline abandons the wait, not the shared task
                return await asyncio.to_thread(lambda: s.staged(replace(state, lex=lex, fetched=fetched)))

            try:
                state, done = await _arun(s, "lexical", lexical_stage)
                best = done or best
            except _Skip:
                pass
        if s.views is not None:
            view_backend = s.views
            try:
                state, done = await _arun(s, "views", lambda: asyncio.to_thread(
                    lambda: s.staged(replace(state, vrows=view_backend.search(state.qvecs, s.n, scope)))))  # fmt: skip
                best = done or best
            except _Skip:
                pass
        if hyde_tasks is not None:
            tasks = hyde_tasks

            async def hyde_stage() -> tuple[_State, _Result | None]:
                answers = list(await asyncio.gather(*tasks))
                texts = [a for a in answers if a]
                vecs = (
                    await aembed_fitting(s.embedder_now(), texts)
                    if texts
                    else np.zeros((0, state.qvecs.shape[1]), np.float32)
                )
                return await asyncio.to_thread(lambda: s.staged(s.hyde_state(state, answers, vecs)))

            try:
                state, done = await _arun(s, "hyde", hyde_stage)
                best = done or best
            except _Skip:
                pass
        if not s.clock.bounded:
            best = await asyncio.to_thread(s.complete, state)
        # a reranker or MMR may call out (a compressor, the store's vectors): off the event loop
        heavy = plan.stages.rerank is not None or plan.stages.mmr is not None
        groups = await asyncio.to_thread(s.groups, best) if heavy else s.groups(best)
        if plan.parents and groups:
            try:
                groups = s.finish(await _arun(s, "parents", lambda: asyncio.to_thread(expand_parents, dense, groups)))
            except _Skip:
                pass
        return groups
    finally:
        for task in hyde_tasks or ():
            task.cancel()
        if resolving is not None:
            resolving.cancel()
        if s.lex_job is not None:
            if s.lex_job.done() and not s.lex_job.cancelled():
                s.lex_job.exception()  # retrieved: an unused failure is not logged as "never retrieved"
            s.lex_job.cancel()


def prepare_search(
    store: Any, settings: Any, plan: Callable[..., SearchPlan], k: Any, score_threshold: Any, thread_id: Any,
    where: Any, options: dict[str, Any],
) -> tuple[SearchPlan, Scope, Callable[[], tuple[Any, Any, Any]], Callable[[bool], SearchPlan]]:  # fmt: skip
    """A search's provisional plan, its scope, a function resolving its backends from ``store`` (run
    on the search's clock: reading a thread may be the slow part) and the plan once they are known.
    Bad options fail here, before any work."""
    if k is not None:
        options["k"] = k
    if score_threshold is not ...:
        options["score_threshold"] = score_threshold
    if not isinstance(settings, SearchSettings):
        raise InputError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    scope = Scope(thread_id, where)
    resolved = settings.with_options(**options)

    def backends() -> tuple[Any, Any, Any]:
        dense, lexical = store.resolve(scope)
        return dense, lexical, store.views.backend(scope, dense)

    return (
        plan(resolved, has_lexical=True),
        scope,
        backends,
        lambda has_lexical: plan(resolved, has_lexical=has_lexical),
    )


#: The product's executors under their public names (``ctxret.query.run_search`` / ``arun_search``).
run_search = run_staged
arun_search = arun_staged
