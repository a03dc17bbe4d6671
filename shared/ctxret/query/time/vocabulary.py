"""The vocabulary of the time expressions: month, weekday, number and season words, the counts they name
(:func:`parse_count`), and the cheap trigger check (:func:`trigger_categories`) that decides which rules a part
needs."""

from __future__ import annotations

import calendar
import re

__all__ = ["MONTHS", "SEASONS", "TRIGGER_WORDS", "WEEKDAYS", "has_time_words", "parse_count", "trigger_categories"]

MONTHS = {
    **{m.lower(): i for i, m in enumerate(calendar.month_name) if m},
    "jan": 1,
    "feb": 2,
    "mar": 3,
    "apr": 4,
    "jun": 6,
    "jul": 7,
    "aug": 8,
    "sep": 9,
    "sept": 9,
    "oct": 10,
    "nov": 11,
    "dec": 12,
}
WEEKDAYS = {
    **{d.lower(): i for i, d in enumerate(calendar.day_name)},
    "mon": 0,
    "tue": 1,
    "tues": 1,
    "wed": 2,
    "thu": 3,
    "thur": 3,
    "thurs": 3,
    "fri": 4,
    "sat": 5,
    "sun": 6,
}
_NUMBER_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
#: Fuzzy counts: (fewest, most) units back.
_FUZZY = {"couple": (1, 3), "few": (2, 5)}
SEASONS = {"spring": 3, "summer": 6, "autumn": 9, "fall": 9, "winter": 12}


#: Words without which a part names no time (a part holding none is done after one tokenising pass).
TRIGGER_WORDS = frozenset(
    {
        *MONTHS,
        *WEEKDAYS,
        *SEASONS,
        "today",
        "tonight",
        "yesterday",
        "tomorrow",
        "ago",
        "night",
        "morning",
        "afternoon",
        "evening",
        "weekend",
        "weekends",
        "week",
        "weeks",
        "fortnight",
        "days",
        "month",
        "months",
        "year",
        "years",
        "hour",
        "hours",
    }
)
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
    if w in SEASONS:
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


def parse_count(word: str) -> int | tuple[int, int] | None:
    """The count a number word names: digits or ``one``..``twelve`` / ``a`` / ``an`` → an int, ``a couple of`` /
    ``a few`` → (fewest, most); ``None`` for any other word."""
    w = " ".join(word.lower().split())
    if w.isdigit():
        return int(w)
    for key, span in _FUZZY.items():
        if key in w:
            return span
    return _NUMBER_WORDS.get(w)
