"""Calendar arithmetic for the time expressions on ``now``'s wall clock: days and months as windows, month
steps that clamp the day, and the early/mid/late thirds of a span."""

from __future__ import annotations

import calendar
from datetime import date, datetime, timedelta

__all__ = ["SECOND", "Clock", "add_months", "qualified", "recent_date", "safe_date"]

SECOND = timedelta(seconds=1)


class Clock:
    """``now`` and what the rules read of it: today, the zone, the cap a window never passes (``now`` + 1 s)."""

    __slots__ = ("now", "today", "tz", "cap")

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.today = now.date()
        self.tz = now.tzinfo
        self.cap = now + SECOND

    def at(self, d: date, hour: int = 0) -> datetime:
        return datetime(d.year, d.month, d.day, tzinfo=self.tz) + timedelta(hours=hour)

    def days(self, first: date, last: date) -> tuple[datetime, datetime]:
        return self.at(first), self.at(last + timedelta(days=1))

    def month(self, year: int, month: int) -> tuple[datetime, datetime]:
        first = date(year, month, 1)
        return self.at(first), self.at(add_months(first, 1))

    def year(self, year: int) -> tuple[datetime, datetime]:
        return self.at(date(year, 1, 1)), self.at(date(year + 1, 1, 1))

    def monday(self) -> date:
        return self.today - timedelta(days=self.today.weekday())


def add_months(d: date, n: int) -> date:
    y, m = divmod(d.month - 1 + n, 12)
    year, month = d.year + y, m + 1
    return date(year, month, min(d.day, calendar.monthrange(year, month)[1]))


def safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def recent_date(c: Clock, month: int, day: int) -> date | None:
    """The most recent ``day month`` not after today (Feb 29: the last leap year's)."""
    for back in range(9):
        d = safe_date(c.today.year - back, month, day)
        if d is not None and d <= c.today:
            return d
    return None


def qualified(c: Clock, start: datetime, end: datetime, qual: str | None, unit: str) -> tuple[datetime, datetime]:
    """``early`` / ``mid`` / ``late`` (and ``the beginning|middle|end of``) of a month (days 1–10, 11–20, 21–end)
    or a year (January–April, May–August, September–December)."""
    if not qual:
        return start, end
    q = qual.lower()
    third = 0 if ("early" in q or "beginning" in q or "start" in q) else 1 if ("mid" in q) else 2
    if unit == "month":
        cuts = [start, start + timedelta(days=10), start + timedelta(days=20), end]
    else:
        d0 = start.date()
        cuts = [start, c.at(add_months(d0, 4)), c.at(add_months(d0, 8)), end]
    return cuts[third], cuts[third + 1]
