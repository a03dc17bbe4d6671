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
  a naive ``now`` naive bounds (:func:`~.window.resolve_now` makes the default ``now`` aware, in the machine's zone). A
  stored timestamp without a zone is the store's own local time: it is compared by its wall clock with the
  window's wall clock (:meth:`TimeWindow.contains`); an aware one by its instant (a naive window read in the
  machine's zone). ``ts_epoch`` stores a naive timestamp as its wall clock read as UTC (``storage.schema``), so
  :meth:`TimeWindow.epoch_bounds` gives both scales.
* **Other languages** get no window, cleanly: the trigger words are English, so a German or Chinese part costs the
  same scan as an English part without time words and returns ``None`` (an English date inside it, such as
  "2023-05-08" or "8 May 2023", is still read).
"""

from __future__ import annotations

import re
from datetime import datetime

from .clock import Clock
from .rules import RULES, Resolver
from .vocabulary import trigger_categories
from .window import TimeExpression, TimeWindow

__all__ = ["find_time", "strip_time", "time_expressions"]


def time_expressions(text: str, now: datetime) -> list[TimeExpression]:
    """Every time expression in ``text`` (non-overlapping, the longest first), each resolved against ``now``
    (future-only ones have no window). Empty for a text without a trigger word (the fast path)."""
    if not isinstance(text, str):
        return []
    categories = trigger_categories(text)
    if not categories:
        return []
    c = Clock(now)
    found: list[tuple[int, int, int, str, bool, re.Match[str], Resolver]] = []
    for order, (kind, absolute, needs, pattern, fn) in enumerate(RULES):
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


# -- a match becomes a window: past-only kinds, since/before bounds ------------------------------------

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


def _bounded(prep: str | None, start: datetime, end: datetime, c: Clock) -> tuple[datetime | None, datetime]:
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
