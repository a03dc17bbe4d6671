"""Time-aware search: each part searches the time it names, and ``since`` / ``until`` bound every part.

:func:`timed_search_steps` wraps the one search loop (:func:`~ctxret.query.executor.search_steps`); the drivers of
:mod:`ctxret.query.deadline` run it, so sync and async search alike.

* A part's time words ("what did Anna say yesterday?", "in June", "on 8 May 2023") are read with
  :func:`~.expressions.find_time` against the search's ``now`` (default: the current time). A part that names a
  time searches only inside its window widened by :data:`TOLERANCE` on each side (the window becomes part of
  the part's :class:`~ctxret.storage.schema.Scope`: Chroma's ``where`` on ``ts_epoch``, the thread cache's
  mask, the lexical side's reads — never a filter after the cut to ``k``). The time words stay in the text
  that is embedded and matched (measured: taking them out lost more than it gained).
* **No floor inside a named window.** A part that searches the window it names returns the best pieces inside
  it, whatever their cosine ("what did we decide yesterday?" has no words to match: every turn of yesterday is an
  answer, ranked); ``since`` / ``until`` alone keep the floor (they bound the search, they do not say what is
  relevant). :mod:`ctxret.query.floor` has the floor's other rules.
* **Fallback.** A window that holds no piece of the scope is dropped (the part searches as if it named no
  time) and the group says so in ``window_note``; so does a scope whose pieces have no timestamps.
* ``since`` / ``until`` (``since <= timestamp < until``) bound every part; on a scope with no timestamps they
  are an :class:`~ctxret.errors.InputError`. A part's own window is intersected with them.
* Parts that share a window search in one run (one batched store query); with several windows the message
  is embedded once and each window's parts search with their vectors. A message none of whose parts names a
  time, with no ``since`` / ``until``, runs the loop exactly as before (the same hits and scores).

Each :class:`~ctxret.results.Group` carries the ``window`` it searched (``(start, end)``, ``None``: none).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from ...embedders.base import Embedder
from ...errors import InputError
from ...results import Group
from ...storage.schema import Scope
from ..executor import TIMEOUTS, Backends, Call, Embed, QueryVectors, SearchRun, SearchSource, Steps, search_steps
from ..search import SearchPlan, check_message
from ..split.asking import asks
from ..vectors import blend_parts, embed_inputs, query_texts
from .expressions import find_time
from .window import TimeWindow, resolve_now

__all__ = ["TOLERANCE", "decide_windows", "part_windows", "timed_search_steps", "window_steps"]

#: How far a part's window is widened on each side (measured on the dev time set: ±1 day; BENCHMARKS.md).
TOLERANCE = timedelta(days=1)

Window = tuple[Any, Any]


def _show(window: Window) -> str:
    a, b = window
    return f"[{'…' if a is None else a.isoformat()}, {'…' if b is None else b.isoformat()})"


def _intersect(a: Window | None, b: Window | None) -> Window | None:
    """Two windows' overlap (``None``: unbounded); an empty overlap is ``(x, x)``."""
    if a is None or b is None:
        return a if b is None else b
    starts = [s for s in (a[0], b[0]) if s is not None]
    ends = [e for e in (a[1], b[1]) if e is not None]
    start = max(starts, key=_instant) if starts else None
    end = min(ends, key=_instant) if ends else None
    if start is not None and end is not None and _instant(start) >= _instant(end):
        end = start
    return start, end


def _instant(dt: datetime) -> float:
    return dt.timestamp()


def part_windows(
    parts: Sequence[str], now: datetime | str | None, *, tolerance: timedelta = TOLERANCE, asking: bool = False
) -> list[TimeWindow | None]:
    """Each part's own window (widened by ``tolerance``), or ``None`` for a part that names no time (``asking``:
    also for a part that does not ask — a statement that names its own time is not a search for that time)."""
    at = resolve_now(now)
    out: list[TimeWindow | None] = []
    for p in parts:
        if asking and not asks(p):
            out.append(None)
            continue
        w = find_time(p, at)
        out.append(None if w is None else w.widened(tolerance))
    return out


def timed_search_steps(
    plan: SearchPlan,
    query: str | QueryVectors,
    scope: Scope,
    embedder: Embedder | None,
    source: Backends | SearchSource,
) -> Steps[list[Group]]:
    """The search with time windows (see the module docstring); without any, exactly :func:`search_steps`."""
    bounds: Window | None = (plan.since, plan.until) if plan.since is not None or plan.until is not None else None
    holds_any = getattr(source, "holds_any", None)
    if isinstance(query, QueryVectors) or holds_any is None:  # the harness's and benchmarks' runs
        scoped = scope if bounds is None else scope.with_window(_intersect(scope.window, bounds))
        return (yield from search_steps(SearchRun(plan, scoped, embedder), query, source))
    check_message(plan, query)
    parts, whole = query_texts(query, max_parts=plan.max_parts, split=plan.split)
    asking = plan.time_windows == "asking"
    named = part_windows(parts, plan.now, asking=asking) if plan.time_windows and parts else [None] * len(parts)
    if bounds is None and not any(w is not None for w in named):
        return (yield from search_steps(SearchRun(plan, scope, embedder), query, source, (parts, whole)))
    started = time.monotonic()
    keys, notes = yield from window_steps(named, bounds, scope, holds_any)
    # a part searching the window it names has no floor: the window is its relevance (query/floor.py)
    runs = [(key, named[i] is not None and not notes[i]) for i, key in enumerate(keys)]
    order = list(dict.fromkeys(runs))
    if len(order) == 1:  # every part searches one window: the loop as it is, from the message
        run = SearchRun(_floorless(plan) if order[0][1] else plan, scope.with_window(order[0][0]), embedder)
        groups = yield from search_steps(run, query, source, (parts, whole))
        return [replace(g, window=keys[g.part_index], window_note=notes[g.part_index]) for g in groups]
    if embedder is None:
        raise InputError("a search from a message needs an embedder")
    remaining = _remaining(plan, started)
    try:
        work = Embed(embedder, embed_inputs(parts, whole, plan.split))
        vecs = yield (work if remaining is None else work.within(remaining))
    except TIMEOUTS:
        if remaining is None:
            raise
        return [Group(i, p, (), degraded=True, skipped=("embed", "dense")) for i, p in enumerate(parts)]
    qvecs = np.asarray(blend_parts(vecs, len(parts), plan.weight), dtype=np.float32)
    out: list[Group] = []
    for key, own in order:
        idx = [i for i, r in enumerate(runs) if r == (key, own)]
        left = _remaining(plan, started)
        sub = _floorless(plan) if own else plan
        sub = sub if left is None else replace(sub, deadline_ms=max(left * 1000.0, 0.001))
        run = SearchRun(sub, scope.with_window(key), embedder)
        groups = yield from search_steps(run, QueryVectors([parts[i] for i in idx], qvecs[idx]), source)
        for g in groups:
            i = idx[g.part_index]
            out.append(replace(g, part_index=i, stages=("embed", *g.stages), window=key, window_note=notes[i]))
    return sorted(out, key=lambda g: g.part_index)


def _floorless(plan: SearchPlan) -> SearchPlan:
    """``plan`` for parts that search the window they name: no cosine floor (the window is the relevance)."""
    return replace(plan, floor=None)


def window_steps(
    named: Sequence[TimeWindow | None], bounds: Window | None, scope: Scope, holds_any: Any
) -> Steps[tuple[list[Window | None], list[str]]]:
    """Each part's window (``None``: unbounded) and note, from its own window (``named``, widened already) and the
    search's ``since`` / ``until`` (``bounds``): the fallback and no-timestamp rules of the module docstring. Yields
    ``Call(holds_any, (scope,))`` for each scope it asks about (:func:`decide_windows` runs it without a driver)."""
    base = scope.window
    stamped: bool | None = None
    if bounds is not None:
        stamped = bool((yield Call(holds_any, (scope.stamped(),))))
        if not stamped:
            raise InputError(
                f"since/until bound the search to {_show(bounds)}, but no piece in this scope has a timestamp; "
                "index turns with timestamp= (or drop since/until)"
            )
        base = _intersect(base, bounds)
    keys: list[Window | None] = []
    notes: list[str] = []
    for w in named:
        if w is None:
            keys.append(base)
            notes.append("")
            continue
        own: Window = (w.start, w.end)
        if stamped is None:
            stamped = bool((yield Call(holds_any, (scope.stamped(),))))
        if not stamped:
            keys.append(base)
            notes.append(f"the part names {_show(own)}, but no piece in this scope has a timestamp: not applied")
            continue
        win = _intersect(base, own)
        if win is not None and win[0] is not None and win[0] == win[1]:
            held = False
        else:
            held = bool((yield Call(holds_any, (scope.with_window(win),))))
        if held:
            keys.append(win)
            notes.append("")
        else:
            keys.append(base)
            notes.append(f"the window {_show(own)} holds no piece of this scope: searched without it")
    return keys, notes


def decide_windows(
    named: Sequence[TimeWindow | None], bounds: Window | None, scope: Scope, holds_any: Any
) -> tuple[list[Window | None], list[str]]:
    """:func:`window_steps` run inline (the evaluation harness's time-aware representation uses it)."""
    steps = window_steps(named, bounds, scope, holds_any)
    value: Any = None
    try:
        while True:
            work = steps.send(value)
            assert isinstance(work, Call)
            value = work.fn(*work.args)
    except StopIteration as stop:
        return stop.value


def _remaining(plan: SearchPlan, started: float) -> float | None:
    if plan.deadline_ms is None:
        return None
    return max(0.0, plan.deadline_ms / 1000.0 - (time.monotonic() - started))
