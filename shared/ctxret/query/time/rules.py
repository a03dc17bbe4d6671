"""The rules of the time expressions: one pattern and one resolver per kind of time expression, built from the
regex pieces here (:data:`RULES`)."""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from datetime import date, datetime, timedelta

from .clock import Clock, add_months, qualified, recent_date, safe_date
from .vocabulary import MONTHS, SEASONS, WEEKDAYS, parse_count

__all__ = ["RULES", "Resolver"]

#: Parts of a day: (first hour, hours long).
_PARTS_OF_DAY = {"morning": (5, 7), "afternoon": (12, 5), "evening": (17, 7), "night": (18, 12)}

#: The regex pieces the rules are built from.
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

Resolver = Callable[[re.Match[str], Clock], "tuple[datetime | None, datetime | None] | None"]


def _dmy(m: re.Match[str], c: Clock, p: str = "") -> tuple[datetime, datetime] | None:
    """A day: ``<p>d``, ``<p>m`` (a month name or number), optional ``<p>y``."""
    month_s = m.group(p + "m").lower().rstrip(".")
    month = MONTHS.get(month_s) or (int(month_s) if month_s.isdigit() else 0)
    day = int(re.sub(r"\D", "", m.group(p + "d")))
    if not 1 <= month <= 12:
        return None
    year_s = m.group(p + "y")
    d = safe_date(int(year_s), month, day) if year_s else recent_date(c, month, day)
    return None if d is None else c.days(d, d)


def _lower_may(m: re.Match[str], group: str = "m") -> bool:
    """``may`` in lower case (the verb far more often than the month) without a year."""
    return m.group(group) == "may"


def _r_date(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    if _lower_may(m) and not m.group("y") and not m.group("prep"):
        return None
    return _dmy(m, c)


def _r_on_the(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    day = int(re.sub(r"\D", "", m.group("d")))
    for back in range(3):
        first = add_months(c.today.replace(day=1), -back)
        d = safe_date(first.year, first.month, day)
        if d is not None and d <= c.today:
            return c.days(d, d)
    return None


def _r_month(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
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
    return qualified(c, start, end, qual, "month")


def _r_year(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    start, end = c.year(int(m.group("y")))
    return qualified(c, start, end, m.group("qual"), "year")


def _season(c: Clock, first_month: int, year: int) -> tuple[datetime, datetime]:
    start = date(year, first_month, 1)
    return c.at(start), c.at(add_months(start, 3))


def _r_season(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    name, year_s, prep = m.group("s").lower(), m.group("y"), m.group("prep")
    rel = (m.group("rel") or "").lower()
    first = SEASONS[name]
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


def _r_rel_day(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
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


def _part_of_day(c: Clock, d: date, part: str) -> tuple[datetime, datetime]:
    if not part:
        return c.days(d, d)
    first, hours = _PARTS_OF_DAY[part]
    start = c.at(d, first)
    return start, start + timedelta(hours=hours)


def _r_ago(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    n = parse_count(m.group("n"))
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
        return c.days(add_months(c.today, -hi) - timedelta(days=15), add_months(c.today, -lo) + timedelta(days=15))
    first = c.year(c.today.year - hi)[0]
    return first, c.year(c.today.year - lo)[1]


def _r_rel_unit(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    rel = m.group("rel").lower()
    unit = m.group("u").lower().rstrip("s")
    n_s = m.group("n")
    n = parse_count(n_s) if n_s else None
    if n_s and n is None:
        return None
    if rel == "next":
        return None, None
    if rel in ("past", "recent") or n is not None or (rel == "last" and m.group("the")):  # rolling: back to now
        count = (n if isinstance(n, int) else n[1]) if n is not None else 1
        if unit == "hour":
            return c.now - timedelta(hours=count), c.cap
        back = {
            "day": timedelta(days=count),
            "week": timedelta(days=7 * count),
            "fortnight": timedelta(days=14 * count),
        }.get(unit)
        if back is not None:
            return c.at(c.today - back), c.cap
        if unit == "month":
            return c.at(add_months(c.today, -count)), c.cap
        if unit == "year":
            return c.at(add_months(c.today, -12 * count)), c.cap
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
        prev = add_months(c.today.replace(day=1), -1)
        return c.month(prev.year, prev.month)
    return c.year(c.today.year - 1) if unit == "year" else None


def _weekday_date(c: Clock, wd: int, rel: str) -> date | None:
    if rel == "next":
        return None
    if rel == "this":
        d = c.monday() + timedelta(days=wd)
        return d if d <= c.today else None
    back = (c.today.weekday() - wd) % 7 or 7
    return c.today - timedelta(days=back)


def _r_weekday(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
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


def _r_future(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
    return None, None


def _anchored(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
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
        n = parse_count(m.group("n"))
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


def _iso(m: re.Match[str], c: Clock, p: str = "") -> tuple[datetime, datetime] | None:
    d = safe_date(int(m.group(p + "y")), int(m.group(p + "m")), int(m.group(p + "d")))
    return None if d is None else c.days(d, d)


def _r_iso(m: re.Match[str], c: Clock) -> tuple[datetime | None, datetime | None] | None:
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
RULES: list[tuple[str, bool, frozenset[str], re.Pattern[str], Resolver]] = [
    (kind, absolute, frozenset(needs.split()), re.compile(_B + _one_line(pattern), re.IGNORECASE), fn)
    for kind, absolute, needs, pattern, fn in [
        (
            "date",
            True,
            "month year",
            rf"(?:the\s+|last\s+)?(?:(?P<n>{_NUM})\s+(?P<u>days?|weeks?)|(?P<wd>{_WEEKDAY})|(?P<w>day|week|weekend))"
            rf"\s+(?P<dir>before|after)\s+(?:{_ADMY}|{_BMDY}|{_CISO})",
            _anchored,
        ),
        ("date", True, "year", _PREP_OPT + _ISO, _r_iso),
        ("date", True, "month", _PREP_OPT + _DMY, _r_date),
        ("date", True, "month", _PREP_OPT + _MDY, _r_date),
        ("date", True, "ordinal", r"(?:on\s+)the\s+(?P<d>(?:[12]\d|3[01]|0?[1-9])(?:st|nd|rd|th))" + _END, _r_on_the),
        (
            "month",
            True,
            "month",
            _PREP_OPT + rf"(?:{_QUAL}[\s-]+)?(?:(?P<rel>last|this|past)\s+)?(?P<m>{_MONTH})"
            rf"(?:,?\s+(?P<y>{_YEAR}))?(?![\w'])(?!\s+\d)",
            _r_month,
        ),
        (
            "year",
            True,
            "year",
            rf"(?:{_YEAR_PREP}\s+(?:the\s+year\s+)?|the\s+year\s+)(?:{_QUAL}[\s-]+)?(?P<y>{_YEAR})(?![\w'/:-])",
            _r_year,
        ),
        ("year", True, "year", rf"(?P<prep>){_QUAL}[\s-]+(?P<y>{_YEAR})(?![\w'/:-])", _r_year),
        (
            "season",
            True,
            "season",
            rf"(?:(?P<prep>in|during|since|over|throughout|back\s+in)\s+)?(?:(?P<rel>last|this|past|the)\s+)?"
            rf"(?:early|mid|late)?[\s-]*(?P<s>spring|summer|autumn|fall|winter)(?:\s+(?:of\s+)?(?P<y>{_YEAR}))?(?![\w'])",
            _r_season,
        ),
        (
            "future",
            False,
            "future unit weekday month season day",
            rf"(?:tomorrow|the\s+day\s+after\s+tomorrow|next\s+(?:{_UNIT}|weekend|{_WEEKDAY}|{_MONTH}|spring|summer"
            rf"|autumn|fall|winter)|in\s+(?:{_NUM})\s+(?:{_UNIT})|later\s+(?:today|this\s+(?:week|month|year)))(?![\w'])",
            _r_future,
        ),
        (
            "day",
            False,
            "day",
            r"(?:(?P<prep>since|until|till|before|after)\s+)?(?P<w>earlier\s+today|today|tonight|yesterday"
            r"|(?:the\s+)?day\s+before\s+yesterday|last\s+night|this\s+(?:morning|afternoon|evening))"
            r"(?:\s+(?P<pod>morning|afternoon|evening|night))?" + _POSS,
            _r_rel_day,
        ),
        ("ago", False, "ago", rf"(?P<n>{_NUM})\s+(?P<u>{_UNIT})\s+(?:ago|back)(?![\w'])", _r_ago),
        (
            "rolling",
            False,
            "unit",
            rf"(?:{_PREP}\s+|(?P<earlier>earlier)\s+|over\s+)?(?P<the>the\s+)?(?P<rel>last|this|past|previous|prior|current"
            rf"|recent|next)\s+(?:(?P<n>{_NUM})\s+)?(?P<u>{_UNIT}|weekends?)" + _POSS,
            _r_rel_unit,
        ),
        (
            "weekday",
            False,
            "weekday",
            rf"(?:(?P<prep>on|since|until|till|before|after|from|by)\s+)?(?:(?P<rel>last|this\s+past|past|this|next)\s+)?"
            rf"(?P<wd>{_WEEKDAY})(?P<poss>['’]s)?(?:\s+(?P<pod>morning|afternoon|evening|night))?(?![\w']){_END}?",
            _r_weekday,
        ),
    ]
]
