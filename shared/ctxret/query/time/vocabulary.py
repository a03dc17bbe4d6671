"""The vocabulary of :mod:`.timewords`: month, weekday, number and season words, the regex pieces the rules are
built from, and the cheap trigger check (:func:`trigger_categories`) that decides which rules a part needs."""

from __future__ import annotations

import calendar
import re

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
