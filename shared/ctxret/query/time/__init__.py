"""Time in a query: the time expressions a part holds → the window ``[start, end)`` they name, and the search
inside those windows.

* :mod:`.vocabulary` — the words (months, weekdays, seasons, counts) and the cheap trigger check;
* :mod:`.clock` — calendar arithmetic on ``now``'s wall clock;
* :mod:`.rules` — one pattern and one resolver per kind of expression;
* :mod:`.window` — :class:`TimeExpression`, :class:`TimeWindow` (its wall-clock and ``ts_epoch`` scales), the
  search's ``now`` (:func:`resolve_now`);
* :mod:`.expressions` — a part's expressions and the window they name (:func:`find_time`), the words taken out
  (:func:`strip_time`);
* :mod:`.search` — the time-aware search: each part searches the window it names, ``since`` / ``until`` bound
  every part (:func:`timed_search_steps`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_dir, lazy_getattr

if TYPE_CHECKING:
    from .expressions import find_time, strip_time, time_expressions
    from .search import TOLERANCE, decide_windows, part_windows, timed_search_steps, window_steps
    from .vocabulary import has_time_words, trigger_categories
    from .window import TimeExpression, TimeWindow, resolve_now

_NAMES = {
    "TimeExpression": ".window",
    "TimeWindow": ".window",
    "resolve_now": ".window",
    "find_time": ".expressions",
    "strip_time": ".expressions",
    "time_expressions": ".expressions",
    "TOLERANCE": ".search",
    "decide_windows": ".search",
    "part_windows": ".search",
    "timed_search_steps": ".search",
    "window_steps": ".search",
    "has_time_words": ".vocabulary",
    "trigger_categories": ".vocabulary",
}
__getattr__ = lazy_getattr(__name__, _NAMES)
__dir__ = lazy_dir(globals(), _NAMES)
__all__ = [
    "TOLERANCE",
    "TimeExpression",
    "TimeWindow",
    "decide_windows",
    "find_time",
    "has_time_words",
    "part_windows",
    "resolve_now",
    "strip_time",
    "time_expressions",
    "timed_search_steps",
    "trigger_categories",
    "window_steps",
]
