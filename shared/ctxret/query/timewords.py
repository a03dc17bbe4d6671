"""Time expressions in a query part → the half-open window ``[start, end)`` they name, resolved against ``now``.

:func:`find_time` reads one part ("What did Anna say yesterday?") and returns a :class:`TimeWindow` (its
``start`` and ``end``, the expressions it came from and their character spans, so a caller can take the
words out of the text it embeds) or ``None``. It is a small rule set, not a general date parser: it knows the
expressions people put in questions to a memory, and it never raises on text. A part without a time word
costs one tokenising pass and set lookups (:func:`trigger_categories`, a few microseconds), and the rules run only
for the kinds of time word a part holds; see BENCHMARKS.md.

What it reads (English; case-insensitive; ``now`` = the search's time)

* **days**: ``today``, ``tonight``, ``this morning|afternoon|evening``, ``earlier today``, ``yesterday`` (also
  ``yesterday evening``), ``last night``, ``the day before yesterday``, ``N days ago`` (digits, ``one``..``twelve``,
  ``a``/``an``; ``a couple of`` = 1–3 days ago, ``a few`` = 2–5 days ago);
* **weekdays**: ``on Tuesday``, ``last Tuesday``, ``this past Tuesday``, ``Tuesday morning``, a bare ``Tuesday``
  only at the end of a clause ("What did she say Tuesday?", never "Sunday roast"): the most recent Tuesday before
  today (said on a Tuesday: a week ago); ``this Tuesday``: this week's, if it is not after today;
* **weeks**: ``last week`` / ``the previous week`` (the calendar week before this one), ``this week`` / ``earlier
  this week``, ``last weekend`` (Saturday and Sunday of last week), ``this weekend``, ``a week ago`` / ``N weeks
  ago`` (the 7 days around the day N weeks back: from 3 days before it to 3 days after);
* **months and years**: ``last month``, ``this month``, ``N months ago`` (the 31 days around the same day N months
  back), ``last year``, ``this year``, ``N years ago`` (that calendar year); ``in June`` / ``in June 2023`` /
  ``June 2023`` / ``early|mid|late June`` / ``the end of June`` (days 1–10, 11–20, 21–end), ``last June`` (the
  most recent June before this month), ``in 2023``;
* **dates**: ``8 May 2023``, ``on 8 May, 2023``, ``May 8``, ``May 8th, 2023``, ``the 8th of May``, ``Oct 16``,
  ``2023-05-08``; a date without a year is the most recent one not after today;
* **rolling spans**: ``the past week``, ``in the last 3 days``, ``over the past two months``, ``the last 24
  hours`` (from that far back to now);
* **seasons** (meteorological, northern hemisphere: spring = March–May, summer = June–August, autumn/fall =
  September–November, winter = December–February, ``winter 2023`` = December 2022–February 2023): ``last
  summer`` (the most recent summer that is over), ``this summer``, ``in the summer``, ``summer 2023`` (a bare ``in
  winter`` is a habit, not a time);
* **bounds and anchors**: ``since X`` (X's start to now), ``after X`` (X's end to now), ``before X``
  (everything before X's start), ``until X`` / ``by X`` (everything to X's end), ``between X and Y`` / ``X to Y``;
  ``the week before X`` (the 7 days before), ``the day before|after X``, ``the Sunday before X``, ``the weekend
  before X``, ``two weeks before X`` (X an explicit date: "the week before 9 June 2023").

Rules

* The week starts on **Monday** (ISO 8601).
* A window never reaches past ``now``: one that would ends one second after ``now`` (a search never sees what was
  stored after its time). An expression that names only the future ("tomorrow", "next week", "on 3 May 2030",
  "this Friday" said on a Wednesday) gives no window: what was said about the future was said before now, so its
  date names an event, not the time of the conversation.
* Several expressions in one part: the explicit (absolute) ones win over relative ones ("last week, as mentioned
  on 6 November 2023" → 6 November), and the window is the hull of those that remain.
* **Time zones.** Windows are computed on ``now``'s wall clock: an aware ``now`` gives aware bounds in its zone,
  a naive ``now`` naive bounds (:func:`resolve_now` makes the default ``now`` aware, in the machine's zone). A
  stored timestamp without a zone is the store's own local time: it is compared by its wall clock with the
  window's wall clock (:meth:`TimeWindow.contains`); an aware one by its instant (a naive window read in the
  machine's zone). ``ts_epoch`` stores a naive timestamp as its wall clock read as UTC (``storage.schema``), so
  :meth:`TimeWindow.epoch_bounds` gives both scales.
* **Other languages** get no window, cleanly: the trigger words are English, so a German or Chinese part costs the
  same scan as an English part without time words and returns ``None`` (an English date inside it, such as
  "2023-05-08" or "8 May 2023", is still read).
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from ..errors import InputError

__all__ = [
    "TimeExpression", "TimeWindow", "find_time", "has_time_words", "resolve_now", "strip_time", "time_expressions",
    "trigger_categories",
]  # fmt: skip

_EPOCH = datetime(1970, 1, 1)
_SECOND = timedelta(seconds=1)

MONTHS = {
    **{m.lower(): i for i, m in enumerate(calendar.month_name) if m},
    "jan": 1, "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "oct": 10,
    "nov": 11, "dec": 12,
}  # fmt: skip
WEEKDAYS = {
    **{d.lower(): i for i, d in enumerate(calendar.day_name)},
    "mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6,
}  # fmt: skip
_NUMBER_WORDS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
}  # fmt: skip
#: Fuzzy counts: (fewest, most) units back.
_FUZZY = {"couple": (1, 3), "few": (2, 5)}
#: Parts of a day: (first hour, hours long).
_PARTS_OF_DAY = {"morning": (5, 7), "afternoon": (12, 5), "evening": (17, 7), "night": (18, 12)}
_SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}

_B = r"(?<![\w'])"  # no word character (or apostrophe) before
_MONTH = (
    r"(?:january|february|march|april|may|june|july|august|september|october|november|december"
    r"|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec)\.?"
)
_WEEKDAY = r"(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|mon|tues|tue|wed|thurs|thur|thu|fri|sat|sun)"
_DOM = r"(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th)?"
_YEAR = r"(?:19|20)\d\d"
_NUM = (
    r"(?:\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve"
    r"|(?:a\s+)?couple(?:\s+of)?|(?:a\s+)?few)"
)
_UNIT = r"(?:hour|day|week|fortnight|month|year)s?"
_PREP = r"(?P<prep>since|from|after|before|until|till|by|in|on|during|throughout|around|back\s+in|as\s+of)"
_YEAR_PREP = r"(?P<prep>since|from|after|before|until|till|by|in|during|throughout|back\s+in)"
_QUAL = r"(?P<qual>early|mid|late|(?:the\s+)?(?:beginning|start|middle|end)\s+of)"

#: Words without which a part names no time (a part holding none is done after one tokenising pass).
TRIGGER_WORDS = frozenset(
    {*MONTHS, *WEEKDAYS, *_SEASONS, "today", "tonight", "yesterday", "tomorrow", "ago", "night", "morning",
     "afternoon", "evening", "weekend", "weekends", "week", "weeks", "fortnight", "days", "month", "months", "year",
     "years", "hour", "hours"}
)  # fmt: skip
_TOKENS = re.compile(r"[a-z]+|\d+(?:st|nd|rd|th)?")
_NUMERIC_TRIGGER = re.compile(r"(?:19|20)\d\d|\d+(?:st|nd|rd|th)")


def trigger_categories(text: str) -> set[str]:
    """The kinds of time word in ``text`` (month, weekday, year, season, day, unit, ago, future, ordinal): empty
    for most text, which is then done (the fast pre-check: one tokenising pass and set lookups)."""
    out: set[str] = set()
    for w in _TOKENS.findall(text.lower()):
        if w in TRIGGER_WORDS or (w[0].isdigit() and _NUMERIC_TRIGGER.fullmatch(w)):
            out.add(_category(w))
    return out


def has_time_words(text: str) -> bool:
    """Whether ``text`` holds any word a time expression needs (see :func:`trigger_categories`)."""
    return bool(trigger_categories(text))


_DAY_WORDS = frozenset({"today", "tonight", "yesterday", "night", "morning", "afternoon", "evening"})
_UNIT_WORDS = frozenset(
    {"weekend", "weekends", "week", "weeks", "fortnight", "days", "months", "years", "hour", "hours"}
)


def _category(word: str) -> str:
    """What a trigger word can start: a month, weekday, year, season, day word, unit, "ago", an ordinal."""
    w = word.lower()
    if w in ("month", "year"):
        return "unit"
    if w in MONTHS:
        return "month"
    if w in WEEKDAYS:
        return "weekday"
    if w in _SEASONS:
        return "season"
    if w in _DAY_WORDS:
        return "day"
    if w in _UNIT_WORDS:
        return "unit"
    if w == "ago":
        return "ago"
    if w == "tomorrow":
        return "future"
    return "year" if w.isdigit() else "ordinal"


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
        end = max(self.end, min(self.end + tolerance, self.now + _SECOND))
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
        from ..ingest.turns import parse_time

        parsed = parse_time(now, "now")
        assert parsed is not None  # a non-empty string parses or raises
        return parsed
    raise InputError(f"now must be a datetime or an ISO-8601 string (e.g. '2026-10-16T14:02:00'), got {now!r}")


# -- calendar arithmetic on now's wall clock ------------------------------------------------------------------
class _Clock:
    __slots__ = ("now", "today", "tz", "cap")

    def __init__(self, now: datetime) -> None:
        self.now = now
        self.today = now.date()
        self.tz = now.tzinfo
        self.cap = now + _SECOND

    def at(self, d: date, hour: int = 0) -> datetime:
        return datetime(d.year, d.month, d.day, tzinfo=self.tz) + timedelta(hours=hour)

    def days(self, first: date, last: date) -> tuple[datetime, datetime]:
        return self.at(first), self.at(last + timedelta(days=1))

    def month(self, year: int, month: int) -> tuple[datetime, datetime]:
        first = date(year, month, 1)
        return self.at(first), self.at(_add_months(first, 1))

    def year(self, year: int) -> tuple[datetime, datetime]:
        return self.at(date(year, 1, 1)), self.at(date(year + 1, 1, 1))

    def monday(self) -> date:
        return self.today - timedelta(days=self.today.weekday())


def _add_months(d: date, n: int) -> date:
    y, m = divmod(d.month - 1 + n, 12)
    year, month = d.year + y, m + 1
    return date(year, month, min(d.day, calendar.monthrange(year, month)[1]))


def _number(word: str) -> int | tuple[int, int] | None:
    w = " ".join(word.lower().split())
    if w.isdigit():
        return int(w)
    for key, span in _FUZZY.items():
        if key in w:
            return span
    return _NUMBER_WORDS.get(w)


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _recent_date(c: _Clock, month: int, day: int) -> date | None:
    """The most recent ``day month`` not after today (Feb 29: the last leap year's)."""
    for back in range(9):
        d = _safe_date(c.today.year - back, month, day)
        if d is not None and d <= c.today:
            return d
    return None


def _qualified(c: _Clock, start: datetime, end: datetime, qual: str | None, unit: str) -> tuple[datetime, datetime]:
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
        cuts = [start, c.at(_add_months(d0, 4)), c.at(_add_months(d0, 8)), end]
    return cuts[third], cuts[third + 1]


# -- the rules --------------------------------------------------------------------------------------------------
_Resolver = Callable[[re.Match[str], _Clock], "tuple[datetime | None, datetime | None] | None"]


def _dmy(m: re.Match[str], c: _Clock, p: str = "") -> tuple[datetime, datetime] | None:
    """A day: ``<p>d``, ``<p>m`` (a month name or number), optional ``<p>y``."""
    month_s = m.group(p + "m").lower().rstrip(".")
    month = MONTHS.get(month_s) or (int(month_s) if month_s.isdigit() else 0)
    day = int(re.sub(r"\D", "", m.group(p + "d")))
    if not 1 <= month <= 12:
        return None
    year_s = m.group(p + "y")
    d = _safe_date(int(year_s), month, day) if year_s else _recent_date(c, month, day)
    return None if d is None else c.days(d, d)


def _lower_may(m: re.Match[str], group: str = "m") -> bool:
    """``may`` in lower case (the verb far more often than the month) without a year."""
    return m.group(group) == "may"


def _r_date(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    if _lower_may(m) and not m.group("y") and not m.group("prep"):
        return None
    return _dmy(m, c)


def _r_on_the(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    day = int(re.sub(r"\D", "", m.group("d")))
    for back in range(3):
        first = _add_months(c.today.replace(day=1), -back)
        d = _safe_date(first.year, first.month, day)
        if d is not None and d <= c.today:
            return c.days(d, d)
    return None


def _r_month(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    word = m.group("m").lower().rstrip(".")
    month, year_s, prep, qual, rel = MONTHS[word], m.group("y"), m.group("prep"), m.group("qual"), m.group("rel")
    if not (year_s or prep or qual or rel):
        return None  # a bare month name: "March on", "June said", "may I"
    if m.group("m") == "may" and not (year_s or qual or rel or (prep and prep.lower() in ("in", "during"))):
        return None  # "it may", "by may": the verb
    if len(word) <= 4 and word not in ("may", "june", "july") and not (year_s or qual or rel):
        if (prep or "").lower() not in ("in", "during"):
            return None  # "from Jan", "to Mar": names more often than months
    if year_s:
        year = int(year_s)
    else:
        this_month = c.today.replace(day=1)
        year = c.today.year if month <= c.today.month else c.today.year - 1
        if rel and rel.lower() == "last" and date(year, month, 1) == this_month:
            year -= 1  # "last June" said in June: a year ago
        if rel and rel.lower() == "this":
            year = c.today.year
    start, end = c.month(year, month)
    return _qualified(c, start, end, qual, "month")


def _r_year(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    start, end = c.year(int(m.group("y")))
    return _qualified(c, start, end, m.group("qual"), "year")


def _season(c: _Clock, first_month: int, year: int) -> tuple[datetime, datetime]:
    start = date(year, first_month, 1)
    return c.at(start), c.at(_add_months(start, 3))


def _r_season(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    name, year_s, prep = m.group("s").lower(), m.group("y"), m.group("prep")
    rel = (m.group("rel") or "").lower()
    first = _SEASONS[name]
    if not (year_s or rel):
        return None  # bare "summer", "in winter": a habit ("prices fall in winter") more often than a time
    if name == "fall" and not (year_s or rel in ("last", "this", "past") or (prep and rel == "the")):
        return None  # "the fall of Rome", "in fall prices"
    if year_s:
        y = int(year_s)
        return _season(c, first, y - 1 if first == 12 else y)
    # the most recent occurrence that has begun (winter begins in the December before)
    y = c.today.year if first <= c.today.month else c.today.year - 1
    start, end = _season(c, first, y)
    if rel in ("last", "past") and end > c.now:
        return _season(c, first, y - 1)  # "last summer" during the summer: the one before
    if rel == "this" and end <= c.now and start.year != c.today.year:
        return None, None  # "this winter" said in October: the coming one
    return start, end


def _r_rel_day(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    w = " ".join(m.group("w").lower().split())
    pod = (m.group("pod") or "").lower()
    if w in ("today", "earlier today"):
        d, part = c.today, pod
    elif w == "tonight":
        d, part = c.today, "night"
    elif w.startswith("this "):
        d, part = c.today, w.split()[1]
    elif w == "yesterday":
        d, part = c.today - timedelta(days=1), pod
    elif w == "last night":
        d, part = c.today - timedelta(days=1), "night"
    else:  # the day before yesterday
        d, part = c.today - timedelta(days=2), pod
    return _part_of_day(c, d, part)


def _part_of_day(c: _Clock, d: date, part: str) -> tuple[datetime, datetime]:
    if not part:
        return c.days(d, d)
    first, hours = _PARTS_OF_DAY[part]
    start = c.at(d, first)
    return start, start + timedelta(hours=hours)


def _r_ago(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    n = _number(m.group("n"))
    unit = m.group("u").lower().rstrip("s")
    if n is None or n == 0:
        return None
    lo, hi = (n, n) if isinstance(n, int) else n
    if unit == "hour":
        return c.now - timedelta(hours=hi + 1), c.now - timedelta(hours=max(lo - 1, 0))
    if unit == "day":
        return c.days(c.today - timedelta(days=hi), c.today - timedelta(days=lo))
    if unit in ("week", "fortnight"):
        k = 2 if unit == "fortnight" else 1
        return c.days(c.today - timedelta(days=7 * k * hi + 3), c.today - timedelta(days=7 * k * lo - 3))
    if unit == "month":
        return c.days(_add_months(c.today, -hi) - timedelta(days=15), _add_months(c.today, -lo) + timedelta(days=15))
    first = c.year(c.today.year - hi)[0]
    return first, c.year(c.today.year - lo)[1]


def _r_rel_unit(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    rel = m.group("rel").lower()
    unit = m.group("u").lower().rstrip("s")
    n_s = m.group("n")
    n = _number(n_s) if n_s else None
    if n_s and n is None:
        return None
    if rel == "next":
        return None, None
    if rel in ("past", "recent") or n is not None or (rel == "last" and m.group("the")):  # rolling: back to now
        count = (n if isinstance(n, int) else n[1]) if n is not None else 1
        if unit == "hour":
            return c.now - timedelta(hours=count), c.cap
        back = {
            "day": timedelta(days=count), "week": timedelta(days=7 * count), "fortnight": timedelta(days=14 * count),
        }.get(unit)  # fmt: skip
        if back is not None:
            return c.at(c.today - back), c.cap
        if unit == "month":
            return c.at(_add_months(c.today, -count)), c.cap
        if unit == "year":
            return c.at(_add_months(c.today, -12 * count)), c.cap
        return c.at(c.today - timedelta(days=14)), c.cap  # weekend with a count: not meaningful, two weeks
    monday = c.monday()
    if rel in ("this", "current"):
        if unit == "day":
            return c.days(c.today, c.today)
        if unit == "week":
            return c.days(monday, monday + timedelta(days=6))
        if unit == "fortnight":
            return c.days(c.today - timedelta(days=13), c.today)
        if unit == "weekend":
            sat = monday + timedelta(days=5)
            return c.days(sat, sat + timedelta(days=1))
        if unit == "month":
            return c.month(c.today.year, c.today.month)
        return c.year(c.today.year) if unit == "year" else None
    # last / previous / prior: the calendar unit before this one
    if unit == "day":
        y = c.today - timedelta(days=1)
        return c.days(y, y)
    if unit == "week":
        return c.days(monday - timedelta(days=7), monday - timedelta(days=1))
    if unit == "fortnight":
        return c.days(monday - timedelta(days=14), monday - timedelta(days=1))
    if unit == "weekend":
        sat = monday - timedelta(days=2)
        return c.days(sat, sat + timedelta(days=1))
    if unit == "month":
        prev = _add_months(c.today.replace(day=1), -1)
        return c.month(prev.year, prev.month)
    return c.year(c.today.year - 1) if unit == "year" else None


def _weekday_date(c: _Clock, wd: int, rel: str) -> date | None:
    if rel == "next":
        return None
    if rel == "this":
        d = c.monday() + timedelta(days=wd)
        return d if d <= c.today else None
    back = (c.today.weekday() - wd) % 7 or 7
    return c.today - timedelta(days=back)


def _r_weekday(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    word = m.group("wd")
    prep, rel, pod = m.group("prep"), " ".join((m.group("rel") or "").lower().split()), (m.group("pod") or "").lower()
    abbreviated = word.lower() not in [d.lower() for d in calendar.day_name]
    if abbreviated and not ((prep or rel) and word[0].isupper()):
        return None  # "I sat", "the sun", "we wed"
    if not (prep or rel or pod or m.group("poss")) and m.group("end") is None:
        return None  # a bare weekday inside a clause: "Sunday roast"
    if _EVERY.search(m.string, 0, m.start()):
        return None  # "every Monday", "each Friday": a habit, not a time
    d = _weekday_date(c, WEEKDAYS[word.lower()], "this" if rel == "this" else "next" if rel == "next" else "last")
    if d is None:
        return None, None
    return _part_of_day(c, d, pod)


_EVERY = re.compile(r"(?:every|each|most|all)\s+$", re.IGNORECASE)


def _r_future(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    return None, None


def _anchored(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    """``the week before <date>``, ``the Sunday before <date>``, ``two weeks before <date>``, ``the day after
    <date>``."""
    anchor = None
    for p in ("a", "b", "c"):
        if m.group(p + "d"):
            anchor = _dmy(m, c, p) if p != "c" else _iso(m, c, p)
            break
    if anchor is None or anchor[0] is None:
        return None
    x = anchor[0].date()
    after = m.group("dir").lower() == "after"
    sign = 1 if after else -1
    if m.group("wd"):
        wd = WEEKDAYS[m.group("wd").lower()]
        step = ((wd - x.weekday()) % 7 or 7) if after else -((x.weekday() - wd) % 7 or 7)
        d = x + timedelta(days=step)
        return c.days(d, d)
    if m.group("n"):
        n = _number(m.group("n"))
        if not isinstance(n, int) or n == 0:
            return None
        if m.group("u").lower().startswith("day"):
            d = x + timedelta(days=sign * n)
            return c.days(d, d)
        d = x + timedelta(days=sign * 7 * n)
        return c.days(d - timedelta(days=3), d + timedelta(days=3))
    w = m.group("w").lower()
    if w == "day":
        d = x + timedelta(days=sign)
        return c.days(d, d)
    if w == "week":
        if after:
            return c.days(x + timedelta(days=1), x + timedelta(days=7))
        return c.days(x - timedelta(days=7), x - timedelta(days=1))
    # weekend: the Saturday–Sunday just before (after) the date
    if after:
        sat = x + timedelta(days=(5 - x.weekday()) % 7 or 7)
    else:
        sat = x - timedelta(days=(x.weekday() - 5) % 7 or 7)
        if sat + timedelta(days=1) >= x:
            sat -= timedelta(days=7)
    return c.days(sat, sat + timedelta(days=1))


def _iso(m: re.Match[str], c: _Clock, p: str = "") -> tuple[datetime, datetime] | None:
    d = _safe_date(int(m.group(p + "y")), int(m.group(p + "m")), int(m.group(p + "d")))
    return None if d is None else c.days(d, d)


def _r_iso(m: re.Match[str], c: _Clock) -> tuple[datetime | None, datetime | None] | None:
    if _CLOCK.match(m.string, m.end()):
        return None  # "2024-05-02 03:14:07 ERROR ...": a pasted log line's timestamp, not a time asked about
    return _iso(m, c)


_CLOCK = re.compile(r"[T ]\d{1,2}:\d\d")


def _day_patterns(p: str) -> tuple[str, str, str]:
    """The explicit-day forms with group names prefixed by ``p`` (for reuse inside the anchored rule)."""
    dmy = rf"(?:the\s+)?(?P<{p}d>{_DOM})(?:\s+of)?\s+(?P<{p}m>{_MONTH})(?:,?\s+(?P<{p}y>{_YEAR}))?(?![\w'])"
    mdy = rf"(?P<{p}m>{_MONTH})\s+(?:the\s+)?(?P<{p}d>{_DOM})(?![\w:']|\.\d)(?:,?\s*(?P<{p}y>{_YEAR})(?![\w']))?"
    iso = rf"(?P<{p}y>{_YEAR})[-/](?P<{p}m>0?[1-9]|1[0-2])[-/](?P<{p}d>0?[1-9]|[12]\d|3[01])(?![\d/-])"
    return dmy, mdy, iso


_DMY, _MDY, _ISO = _day_patterns("")
_ADMY, _BMDY, _CISO = (_day_patterns(p)[i] for i, p in enumerate("abc"))
_PREP_OPT = rf"(?:{_PREP}\s+)?"
_END = r"(?P<end>\s*(?:[.,;:!?)]|$))"
_POSS = r"(?:['’]s)?(?![\w'’])"

def _one_line(pattern: str) -> str:
    """``pattern`` with its whitespace classes kept on one line (an expression never spans a line break:
    "December\n3) book flights" is a month and a list item)."""
    return pattern.replace(r"[\s-]", r"(?:[^\S\n]|-)").replace(r"\s", r"[^\S\n]")


#: (kind, absolute, the trigger categories it needs, pattern, resolver), in order of precedence for matches of the
#: same length. A rule runs only when the part holds a trigger word of one of its categories.
_RULES: list[tuple[str, bool, frozenset[str], re.Pattern[str], _Resolver]] = [
    (kind, absolute, frozenset(needs.split()), re.compile(_B + _one_line(pattern), re.IGNORECASE), fn)
    for kind, absolute, needs, pattern, fn in [
        ("date", True, "month year",
         rf"(?:the\s+|last\s+)?(?:(?P<n>{_NUM})\s+(?P<u>days?|weeks?)|(?P<wd>{_WEEKDAY})|(?P<w>day|week|weekend))"
         rf"\s+(?P<dir>before|after)\s+(?:{_ADMY}|{_BMDY}|{_CISO})", _anchored),
        ("date", True, "year", _PREP_OPT + _ISO, _r_iso),
        ("date", True, "month", _PREP_OPT + _DMY, _r_date),
        ("date", True, "month", _PREP_OPT + _MDY, _r_date),
        ("date", True, "ordinal", r"(?:on\s+)the\s+(?P<d>(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th))" + _END, _r_on_the),
        ("month", True, "month",
         _PREP_OPT + rf"(?:{_QUAL}[\s-]+)?(?:(?P<rel>last|this|past)\s+)?(?P<m>{_MONTH})"
         rf"(?:,?\s+(?P<y>{_YEAR}))?(?![\w'])(?!\s+\d)", _r_month),
        ("year", True, "year",
         rf"(?:{_YEAR_PREP}\s+(?:the\s+year\s+)?|the\s+year\s+)(?:{_QUAL}[\s-]+)?(?P<y>{_YEAR})(?![\w'/:-])", _r_year),
        ("year", True, "year", rf"(?P<prep>){_QUAL}[\s-]+(?P<y>{_YEAR})(?![\w'/:-])", _r_year),
        ("season", True, "season",
         rf"(?:(?P<prep>in|during|since|over|throughout|back\s+in)\s+)?(?:(?P<rel>last|this|past|the)\s+)?"
         rf"(?:early|mid|late)?[\s-]*(?P<s>spring|summer|autumn|fall|winter)(?:\s+(?:of\s+)?(?P<y>{_YEAR}))?(?![\w'])",
         _r_season),
        ("future", False, "future unit weekday month season day",
         rf"(?:tomorrow|the\s+day\s+after\s+tomorrow|next\s+(?:{_UNIT}|weekend|{_WEEKDAY}|{_MONTH}|spring|summer"
         rf"|autumn|fall|winter)|in\s+(?:{_NUM})\s+(?:{_UNIT})|later\s+(?:today|this\s+(?:week|month|year)))(?![\w'])",
         _r_future),
        ("day", False, "day",
         r"(?:(?P<prep>since|until|till|before|after)\s+)?(?P<w>earlier\s+today|today|tonight|yesterday"
         r"|(?:the\s+)?day\s+before\s+yesterday|last\s+night|this\s+(?:morning|afternoon|evening))"
         r"(?:\s+(?P<pod>morning|afternoon|evening|night))?" + _POSS, _r_rel_day),
        ("ago", False, "ago", rf"(?P<n>{_NUM})\s+(?P<u>{_UNIT})\s+(?:ago|back)(?![\w'])", _r_ago),
        ("rolling", False, "unit",
         rf"(?:{_PREP}\s+|(?P<earlier>earlier)\s+|over\s+)?(?P<the>the\s+)?(?P<rel>last|this|past|previous|prior|current"
         rf"|recent|next)\s+(?:(?P<n>{_NUM})\s+)?(?P<u>{_UNIT}|weekends?)" + _POSS, _r_rel_unit),
        ("weekday", False, "weekday",
         rf"(?:(?P<prep>on|since|until|till|before|after|from|by)\s+)?(?:(?P<rel>last|this\s+past|past|this|next)\s+)?"
         rf"(?P<wd>{_WEEKDAY})(?P<poss>['’]s)?(?:\s+(?P<pod>morning|afternoon|evening|night))?(?![\w']){_END}?",
         _r_weekday),
    ]
]  # fmt: skip


#: Words that put a sentence in the past ("did", "was", "sent", "-ed" not after "is"/"are"/"be").
_PAST = re.compile(
    r"\b(?:arose|awoke|became|began|bent|bit|bled|blew|broke|brought|built|burnt|bought|caught|chose|came|crept|"
    r"dealt|dug|did|didn't|drew|drank|drove|ate|fell|fed|felt|fought|found|fled|flew|forgot|forgave|froze|got|"
    r"gave|went|grew|hung|had|hadn't|heard|hid|held|kept|knelt|knew|laid|led|learnt|left|lent|lit|lost|made|"
    r"meant|met|paid|rode|rang|rose|ran|said|saw|sought|sold|sent|shook|shone|shot|showed|sang|sank|sat|slept|"
    r"slid|spoke|spent|spun|stood|stole|stuck|struck|swore|swept|swam|swung|took|taught|tore|told|thought|threw|"
    r"understood|woke|wore|won|wept|wrote|was|wasn't|were|weren't|been|ago|yesterday|earlier|previously|recently)\b"
    r"|(?<!\bis )(?<!\bare )(?<!\bam )(?<!\bbe )(?<!\bget )\b(?!(?:ne|spe|fe|se|proce|inde|bre|succe|exce)ed\b)"
    r"(?!(?:hundr|sacr|nak|wick|embed|shed|bed|red|wed)\b)\w{2,}ed\b",
    re.IGNORECASE,
)


def _needs_past(kind: str, m: re.Match[str]) -> bool:
    """Whether a match names the past only in a past-tense sentence: "on Friday", "today", "this week", "in May",
    "March 3" are the coming Friday and the present in "Is the party still on Friday?", "Can you do it today?",
    "Who is on call this week?", "Can we move the launch to March 3?"; "last Friday", "yesterday", "N days ago",
    "since X" and anything with a year are past whatever the verb."""
    g = m.groupdict()
    prep = " ".join((g.get("prep") or "").lower().split())
    if prep == "since" or g.get("earlier"):
        return False
    if kind == "day":
        w = " ".join(m.group("w").lower().split())
        return w in ("today", "tonight") or w.startswith("this ")
    if kind == "rolling":
        return (g.get("rel") or "").lower() in ("this", "current") and not g.get("n")
    if kind == "weekday":
        rel = " ".join((g.get("rel") or "").lower().split())
        return rel in ("", "this")
    if kind in ("date", "month", "season"):
        return not (g.get("y") or g.get("ay") or g.get("by") or g.get("cy")) and (g.get("rel") or "").lower() != "last"
    return False


def _bounded(prep: str | None, start: datetime, end: datetime, c: _Clock) -> tuple[datetime | None, datetime]:
    """A preposition's effect on a window: since (its start to now), after (its end to now), before
    (everything before it), until/till/by (everything to its end); any other (in, on, during, from: "the email from
    yesterday") leaves it."""
    p = " ".join((prep or "").lower().split())
    if p == "since":
        return start, c.cap
    if p == "after":
        return end, c.cap
    if p == "before":
        return None, start
    if p in ("until", "till", "by", "as of"):
        return None, end
    return start, end


def _kind(rule_kind: str, m: re.Match[str]) -> str:
    if rule_kind == "rolling":
        rel = (m.group("rel") or "").lower()
        unit = m.group("u").lower().rstrip("s")
        return "rolling" if (rel in ("past", "recent") or m.group("n") or (rel == "last" and m.group("the"))) else unit
    return rule_kind


def time_expressions(text: str, now: datetime) -> list[TimeExpression]:
    """Every time expression in ``text`` (non-overlapping, the longest first), each resolved against ``now``
    (future-only ones have no window). Empty for a text without a trigger word (the fast path)."""
    if not isinstance(text, str):
        return []
    categories = trigger_categories(text)
    if not categories:
        return []
    c = _Clock(now)
    found: list[tuple[int, int, int, str, bool, re.Match[str], _Resolver]] = []
    for order, (kind, absolute, needs, pattern, fn) in enumerate(_RULES):
        if needs.isdisjoint(categories):
            continue
        for m in pattern.finditer(text):
            if m.group(0).strip():
                found.append((m.start(), _trimmed_end(text, m.start(), m.end()), order, kind, absolute, m, fn))
    found.sort(key=lambda f: (-(f[1] - f[0]), f[2], f[0]))
    taken: list[tuple[int, int]] = []
    out: list[TimeExpression] = []
    for start, end, _, kind, absolute, m, fn in found:
        if any(start < b and a < end for a, b in taken):
            continue
        try:
            window = fn(m, c)
        except (ValueError, OverflowError, KeyError):
            window = None
        if window is None or (_needs_past(kind, m) and not _PAST.search(text)):
            continue  # not a time after all ("may I", "Sunday roast"): its words stay free for other rules
        taken.append((start, end))
        lo, hi = window
        if hi is not None and lo is not None:
            prep = m.groupdict().get("prep")
            lo, hi = _bounded(prep, lo, hi, c)
        if hi is not None:
            hi = min(hi, c.cap)
            if lo is not None and lo >= hi:
                lo, hi = None, None  # entirely after now: the future
        out.append(TimeExpression(text[start:end], (start, end), _kind(kind, m), lo, hi, absolute))
    out.sort(key=lambda e: e.span)
    return _ranges(text, out)


def _trimmed_end(text: str, start: int, end: int) -> int:
    """The end of a match without the clause punctuation the bare-weekday rule looked at."""
    while end > start and (text[end - 1].isspace() or text[end - 1] in ".,;:!?)"):
        end -= 1
    return end


_BETWEEN = re.compile(r"\s*(?:-|–|—|to|through|and)\s*$", re.IGNORECASE)
_UNTIL = re.compile(r"(?:until|till)\s", re.IGNORECASE)


def _ranges(text: str, exprs: list[TimeExpression]) -> list[TimeExpression]:
    """``between X and Y``, ``from X to Y``, ``X – Y`` (X and Y explicit) → one expression spanning both."""
    out: list[TimeExpression] = []
    for e in exprs:
        prev = out[-1] if out else None
        if prev is not None and prev.absolute and e.absolute and prev.start is not None and e.end is not None:
            gap = text[prev.span[1] : e.span[0]]
            lead = re.search(r"(?:between|from)\s+$", text[: prev.span[0]], re.IGNORECASE)
            word = gap.strip().lower()
            joined = _BETWEEN.fullmatch(gap) or (not word and _UNTIL.match(e.text))
            if joined and (word != "and" or lead) and prev.start <= e.end:
                span = (lead.start() if lead else prev.span[0], e.span[1])
                out[-1] = TimeExpression(text[span[0] : span[1]], span, "range", prev.start, e.end, True)
                continue
        out.append(e)
    return out


def find_time(text: str, now: datetime) -> TimeWindow | None:
    """The window ``text`` names, resolved against ``now`` (see the module docstring), or ``None``: no time words,
    only future ones, or words that are not a time. Never raises on text."""
    exprs = [e for e in time_expressions(text, now) if e.end is not None]
    if not exprs:
        return None
    absolute = [e for e in exprs if e.absolute]
    used = absolute or exprs
    starts = [e.start for e in used]
    start = None if any(s is None for s in starts) else min(s for s in starts if s is not None)
    end = max(e.end for e in used if e.end is not None)
    return TimeWindow(start, end, tuple(used), now)


_SPACE = re.compile(r"\s+")
_PUNCT = re.compile(r"\s+([,.;:!?])")
_DOUBLE = re.compile(r"([,;:])\s*(?=[,.;:!?])")


def strip_time(text: str, spans: tuple[tuple[int, int], ...] | list[tuple[int, int]]) -> str:
    """``text`` without the given spans (a window's :attr:`TimeWindow.spans`), its spacing and punctuation tidied:
    ``"Yesterday, what did Anna say?"`` → ``"what did Anna say?"``. Falls back to ``text`` when nothing but
    punctuation would be left."""
    out, last = [], 0
    for a, b in sorted(spans):
        if a < last:
            continue
        out.append(text[last:a])
        last = b
    out.append(text[last:])
    s = _SPACE.sub(" ", " ".join(out)).strip()
    s = _DOUBLE.sub("", _PUNCT.sub(r"\1", s))
    s = re.sub(r"^[\s,;:]+", "", s).strip()
    return s if any(ch.isalnum() for ch in s) else text
