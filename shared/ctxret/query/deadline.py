"""The two drivers of the one search loop (:mod:`.executor`): threads, or an event loop.

They carry out the work :func:`~.executor.search_steps` yields and nothing else: the stages, their
order, the ``deadline_ms`` budget and the record of ``Group.stages/degraded/skipped`` are the
loop's (see :mod:`.executor`). :func:`run_search` runs a step inline when it has no timeout, else
in a worker it waits on for at most that long (an abandoned step keeps its worker until it ends);
:func:`arun_search` awaits the embedder's and HyDE's async paths and runs store reads in threads,
cancelling what the budget abandons. Both start background jobs (the lexical side, HyDE's LLM
calls) at the loop's request and cancel what is left when the search ends.

:func:`run_search` is what ``ContextualIndex.search`` calls, and what the benchmarks time (with a
message, or with :class:`~.executor.QueryVectors` made already); :func:`run_candidates` runs the
same loop up to the fused candidates, before the floor (the evaluation harness's sweeps apply the
floor themselves).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np

from ..embedders.base import Embedder
from ..embedders.fitting import aembed_fitting, embed_fitting
from ..results import Group
from ..storage.schema import Scope
from .executor import (
    Answer,
    Backends,
    Call,
    Embed,
    QueryVectors,
    SearchRun,
    SearchSource,
    Start,
    Steps,
    Work,
    bounded_embedder,
    candidate_steps,
    reading,
)
from .hyde import ahyde_answer, hyde_answer
from .search import IdfCoverageFor, PartCandidates, SearchPlan
from .time.search import timed_search_steps

__all__ = ["POOL_WORKERS", "arun_search", "run_candidates", "run_search", "stage_pool"]

_T = TypeVar("_T")
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
#: Worker threads of the search stages (a lexical search beside the dense query; a bounded search's
#: stages; an abandoned stage holds one until it ends).
POOL_WORKERS = 32


def stage_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The process's pool of search-stage workers (made on first use)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(POOL_WORKERS, thread_name_prefix="ctxret-stage")
        return _POOL


def run_search(
    plan: SearchPlan,
    query: str | QueryVectors,
    scope: Scope,
    embedder: Embedder | None,
    source: Backends | SearchSource,
) -> list[Group]:
    """The whole search, synchronously: one group per part of ``query`` (a message, or parts and their
    vectors), on ``source`` (a store whose backends are resolved on the clock, or :class:`Backends`; a store's reads
    are made in one session: :func:`~.executor.reading`)."""
    with reading(source) as reads:
        return _drive(timed_search_steps(plan, query, scope, embedder, reads))


async def arun_search(
    plan: SearchPlan,
    query: str | QueryVectors,
    scope: Scope,
    embedder: Embedder | None,
    source: Backends | SearchSource,
) -> list[Group]:
    """:func:`run_search` on the event loop: the embedding and HyDE await their async paths (a deadline
    cancels them), store reads run in threads."""
    with reading(source) as reads:
        return await _adrive(timed_search_steps(plan, query, scope, embedder, reads))


def run_candidates(
    plan: SearchPlan,
    parts: Sequence[str],
    vectors: np.ndarray,
    scope: Scope,
    backends: Backends,
    *,
    idf_coverage_for: IdfCoverageFor = "below_floor",
    embedder: Embedder | None = None,
) -> list[PartCandidates]:
    """The same loop up to every part's fused candidates with their exact scores, before the floor and
    the cut to ``k`` (``idf_coverage_for="all"``: every candidate's ``idf_coverage``, for any floor). ``embedder``:
    what the ``latest`` stage embeds hits' texts with (``None``: the stage does not run)."""
    run = SearchRun(plan, scope, embedder, idf_coverage_for=idf_coverage_for)
    best = _drive(candidate_steps(run, QueryVectors(parts, vectors), backends))
    return [] if best is None else best[0]


# -- threads ----------------------------------------------------------------------------------------------
def _drive(steps: Steps[_T]) -> _T:
    started: list[concurrent.futures.Future[Any]] = []
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                work = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = _do(work, started)
            except Exception as e:
                error = e
    finally:
        steps.close()
        for job in started:
            job.cancel()


def _do(work: Work, started: list[concurrent.futures.Future[Any]]) -> Any:
    if isinstance(work, Embed):
        work = Call(embed_fitting, (bounded_embedder(work.embedder, work.timeout), work.texts), work.timeout)
    if isinstance(work, Call):
        if work.timeout is None:
            return work.fn(*work.args)
        job = stage_pool().submit(work.fn, *work.args)
        try:
            return job.result(timeout=work.timeout)
        except concurrent.futures.TimeoutError:
            job.cancel()
            raise
    if isinstance(work, Start):
        started.append(stage_pool().submit(work.fn, *work.args))
        return started[-1]
    if isinstance(work, Answer):
        jobs = [stage_pool().submit(hyde_answer, work.hyde, p) for p in work.parts]
        started.extend(jobs)
        return jobs
    if len(work.handles) == 1:
        return [work.handles[0].result(timeout=work.timeout)]
    _, pending = concurrent.futures.wait(work.handles, timeout=work.timeout)
    if pending:
        raise concurrent.futures.TimeoutError()
    return [job.result() for job in work.handles]


# -- an event loop ----------------------------------------------------------------------------------------
async def _adrive(steps: Steps[_T]) -> _T:
    started: list[Any] = []  # concurrent futures (workers) and asyncio tasks (HyDE)
    value: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                work = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                return stop.value
            value, error = None, None
            try:
                value = await _ado(work, started)
            except Exception as e:
                error = e
    finally:
        steps.close()
        for job in started:
            if isinstance(job, asyncio.Future) and job.done() and not job.cancelled():
                job.exception()  # retrieved: an unused failure is not logged as "never retrieved"
            job.cancel()


async def _ado(work: Work, started: list[Any]) -> Any:
    if isinstance(work, (Call, Embed)):
        if isinstance(work, Embed):
            aw: Any = aembed_fitting(bounded_embedder(work.embedder, work.timeout), work.texts)
        elif work.blocking:
            aw = asyncio.to_thread(work.fn, *work.args)
        else:
            return work.fn(*work.args)
        return await (aw if work.timeout is None else asyncio.wait_for(aw, work.timeout))
    if isinstance(work, Start):
        started.append(stage_pool().submit(work.fn, *work.args))
        return started[-1]
    if isinstance(work, Answer):
        tasks = [asyncio.ensure_future(ahyde_answer(work.hyde, p)) for p in work.parts]
        started.extend(tasks)
        return tasks
    if all(job.done() for job in work.handles):
        return [job.result() for job in work.handles]
    waiting = asyncio.gather(
        *(asyncio.wrap_future(j) if isinstance(j, concurrent.futures.Future) else j for j in work.handles)
    )
    return list(await (waiting if work.timeout is None else asyncio.wait_for(waiting, work.timeout)))
