"""The values a part's time words give: one :class:`TimeExpression` per expression, the :class:`TimeWindow` they
name together (its wall-clock and ``ts_epoch`` scales, its Chroma ``where``), and the search's ``now``
(:func:`resolve_now`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ...errors import InputError
from .clock import SECOND

__all__ = ["TimeExpression", "TimeWindow", "resolve_now"]

_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class TimeExpression:
    """One time expression found in a text: its words, where they are, and the window it names
    (``start``/``end`` both ``None`` when it names only the future)."""

    text: str
    span: tuple[int, int]
    kind: str  # "day", "weekday", "week", "weekend", "month", "season", "year", "date", "rolling", "range", ...
    start: datetime | None
    end: datetime | None
    absolute: bool  # names a date, month, season or year (not only a time relative to now)

    @property
    def future(self) -> bool:
        return self.end is None


@dataclass(frozen=True)
class TimeWindow:
    """The window a part names: ``[start, end)`` on ``now``'s wall clock (``start`` ``None``: from the
    beginning), and the expressions it came from."""

    start: datetime | None
    end: datetime
    expressions: tuple[TimeExpression, ...]
    now: datetime

    @property
    def spans(self) -> tuple[tuple[int, int], ...]:
        return tuple(e.span for e in self.expressions)

    @property
    def kind(self) -> str:
        return "+".join(dict.fromkeys(e.kind for e in self.expressions))

    def widened(self, tolerance: timedelta) -> TimeWindow:
        """The window with ``tolerance`` added on both sides (its end still never past ``now``)."""
        start = None if self.start is None else self.start - tolerance
        end = max(self.end, min(self.end + tolerance, self.now + SECOND))
        return TimeWindow(start, end, self.expressions, self.now)

    def contains(self, ts: datetime) -> bool:
        """Whether a stored timestamp is inside: a naive one by its wall clock, an aware one by its instant."""
        start, end = self.start, self.end
        if (ts.tzinfo is None) == (end.tzinfo is None):
            return (start is None or start <= ts) and ts < end
        if ts.tzinfo is None:  # the store's own local time, read on the window's wall clock
            return (start is None or start.replace(tzinfo=None) <= ts) and ts < end.replace(tzinfo=None)
        lo = None if start is None else start.astimezone()  # a naive window: the machine's zone
        return (lo is None or lo <= ts) and ts < end.astimezone()

    def epoch_bounds(self, *, naive: bool = True) -> tuple[int | None, int]:
        """``(lo, hi)`` on the ``ts_epoch`` scale for ``lo <= ts_epoch < hi`` (whole seconds; ``lo`` ``None``: no
        lower bound). ``naive=True``: for pieces stored with naive timestamps (``ts_epoch`` = their wall clock read
        as UTC), so the window's wall clock is used; ``False``: for aware ones (real epoch seconds)."""

        def scale(dt: datetime) -> float:
            if naive:
                return (dt.replace(tzinfo=None) - _EPOCH).total_seconds()
            return dt.timestamp()  # a naive window is read in the machine's zone

        lo = None if self.start is None else int(scale(self.start) // 1)
        hi = scale(self.end)
        return lo, int(hi) if hi == int(hi) else int(hi) + 1

    def where(self, *, naive: bool = True) -> dict[str, Any]:
        """The window as a Chroma ``where`` on ``ts_epoch`` (see :meth:`epoch_bounds`)."""
        lo, hi = self.epoch_bounds(naive=naive)
        upper = {"ts_epoch": {"$lt": hi}}
        return upper if lo is None else {"$and": [{"ts_epoch": {"$gte": lo}}, upper]}


def resolve_now(now: datetime | str | None = None) -> datetime:
    """The search's ``now``: a datetime as given, an ISO-8601 string read like stored timestamps, ``None`` → the
    current time, aware in the machine's zone."""
    if now is None:
        return datetime.now().astimezone()
    if isinstance(now, datetime):
        return now
    if isinstance(now, str):
        from ...ingest.turns import parse_time

        parsed = parse_time(now, "now")
        assert parsed is not None  # a non-empty string parses or raises
        return parsed
    raise InputError(f"now must be a datetime or an ISO-8601 string (e.g. '2026-10-16T14:02:00'), got {now!r}")
