"""The time query sets of ``eval threads`` (``--query-sets time,time_qa``): questions that name a time.

``time``: questions that name a time, made from a conversation's dated sections
-------------------------------------------------------------------------------
For each dated section (a LoCoMo session; every utterance carries its session's time) a few queries are made, each
from three things chosen with a fixed seed (``random.Random(f"{seed}/time/{conversation id}")``):

* a **base**: a stored fact (LoCoMo observation) or a QA question (categories 1–4) whose evidence lies in that one
  section and whose text holds no time word at all; or an **open** question about the section's speakers ("What did
  Caroline talk about yesterday?", evidence: everything they said in the window);
* a **time phrase** of one kind, with the search's **now** chosen so that the phrase names the section: ``date``
  ("on 8 May 2023", "on May 8, 2023", "on May 8" / "on the 8th of May" with now under a year later), ``month`` ("in
  May 2023", "during May 2023", "in May"), ``yesterday`` (now = the next day, 08:00–21:59; a section before 05:00
  gets ``last night`` with now the same morning), ``today`` ("this morning|afternoon|evening", "earlier today": now 1–3
  hours after the section, the same day), ``days_ago`` ("3 days ago", "two days ago"; 2–6 days), ``weekday`` ("last
  Tuesday", "on Tuesday"; now 1–7 days later and in the next calendar week, so that "last Tuesday" cannot mean two
  different days), ``last_week`` (now in the calendar week after; weeks start on Monday), ``week_ago`` ("a week ago",
  "two weeks ago": now exactly 7 or 14 days later), ``past_week`` ("in the past week": now 1–6 days later),
  ``last_month`` (now in the next calendar month), ``last_year`` (now in the next year; only for conversations that
  span two years);
* a **form**: the phrase before the base ("Yesterday, what did ...") or at its end ("What did ... yesterday?").

The ground-truth **window** is computed here from the section's date and the phrase's meaning (calendar arithmetic
written independently of :mod:`ctxret.query.time`; a test holds the two to the same answer), and always holds
the evidence section. Several sections may share a window (two sessions in one week): any of them counts as inside.
Time is naive wall-clock time, the store's own. A conversation without timestamps gets no time queries
(``data_notes`` says so).

Metrics: ``top1_window`` (the top hit of the best group lies inside the window), ``top5_window`` (the share of the
best group's first five hits inside it), and the usual ``top1_section`` / ``mrr`` / ``recall_at_5`` against the
evidence.

``time_qa``: the data's own questions that name a time
------------------------------------------------------
LoCoMo questions (categories 1–4) whose text names a time the parser reads ("What did Maria share on 16 June,
2023?", "What did John attend in March 2023?"), searched with now = the day after the conversation's last session.
Their window is the parser's, so it is not ground truth: these rows report the evidence metrics (``top1_section``,
``recall_at_5``) and ``window_has_evidence`` (the share of questions whose window holds a gold section: a date in a
question can be the date of the event rather than of the conversation).
"""

from __future__ import annotations

import calendar
import random
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from ..query.time import find_time, has_time_words

__all__ = ["TIME_QUERY_SETS", "TimeQuery", "dated_questions", "default_now", "time_queries"]

TIME_QUERY_SETS = ("time", "time_qa")


@dataclass(frozen=True)
class TimeQuery:
    """A query that names a time: its text, the search's now, the window it names and the evidence inside."""

    id: str
    text: str
    now: datetime
    start: datetime | None
    end: datetime
    gold: frozenset[int]
    evidence: frozenset[str]
    kind: str  # the phrase kind ("date", "yesterday", ...; "qa" for time_qa)
    base: str  # "fact", "question", "open" ("qa" for time_qa)

    def holds(self, ts: datetime | None) -> bool:
        return ts is not None and (self.start is None or self.start <= ts) and ts < self.end


def default_now(conv: Any) -> datetime | None:
    """Noon of the day after the conversation's last dated section (None: no timestamps)."""
    stamps = [t.timestamp for t in conv.turns if t.timestamp is not None]
    if not stamps:
        return None
    last = max(stamps)
    return datetime(last.year, last.month, last.day, 12) + timedelta(days=1)


# -- the generator ------------------------------------------------------------------------------------------------
_NUMBER = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
_ORDINAL = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}


def _day(d: date) -> tuple[datetime, datetime]:
    start = datetime(d.year, d.month, d.day)
    return start, start + timedelta(days=1)


def _month_window(y: int, m: int) -> tuple[datetime, datetime]:
    return datetime(y, m, 1), datetime(y + (m == 12), m % 12 + 1, 1)


def _cap(window: tuple[datetime, datetime], now: datetime) -> tuple[datetime, datetime]:
    return window[0], min(window[1], now + timedelta(seconds=1))


def _phrases(kind: str, ts: datetime, rng: random.Random, years: set[int]) -> tuple[str, datetime, tuple] | None:
    """(phrase, now, window) naming the day of ``ts`` for one phrase kind, or None when the kind does not fit."""
    d = ts.date()
    month = calendar.month_name[d.month]
    hour = rng.randint(8, 21)
    if kind == "date":
        form = rng.randrange(4)
        if form < 2:
            now = datetime(d.year, d.month, d.day, 12) + timedelta(days=rng.randint(20, 90))
            text = f"on {d.day} {month} {d.year}" if form == 0 else f"on {month} {d.day}, {d.year}"
        else:
            now = datetime(d.year, d.month, d.day, 12) + timedelta(days=rng.randint(2, 200))
            ordinal = f"{d.day}{_ORDINAL.get(d.day, 'th')}"
            text = f"on {month} {d.day}" if form == 2 else f"on the {ordinal} of {month}"
        return text, now, _day(d)
    if kind == "month":
        form = rng.randrange(3)
        now = datetime(d.year, d.month, 1) + timedelta(days=rng.randint(32, 200), hours=hour)
        text = (f"in {month} {d.year}", f"during {month} {d.year}", f"in {month}")[form]
        return text, now, _month_window(d.year, d.month)
    if kind == "yesterday":
        if ts.hour < 5:
            now = datetime(d.year, d.month, d.day, rng.randint(8, 11))
            night = datetime(d.year, d.month, d.day) - timedelta(hours=6)
            return "last night", now, (night, night + timedelta(hours=12))
        now = datetime(d.year, d.month, d.day, hour) + timedelta(days=1)
        return "yesterday", now, _day(d)
    if kind == "today":
        now = ts + timedelta(hours=rng.randint(1, 3), minutes=rng.randint(0, 59))
        if now.date() != d or ts.hour < 5:
            return None
        part = "morning" if ts.hour < 12 else "afternoon" if ts.hour < 17 else "evening"
        first, hours = {"morning": (5, 7), "afternoon": (12, 5), "evening": (17, 7)}[part]
        if rng.random() < 0.5:
            start = datetime(d.year, d.month, d.day, first)
            return f"this {part}", now, _cap((start, start + timedelta(hours=hours)), now)
        return "earlier today", now, _cap(_day(d), now)
    if kind == "days_ago":
        n = rng.randint(2, 6)
        now = datetime(d.year, d.month, d.day, hour) + timedelta(days=n)
        return (f"{_NUMBER[n]} days ago" if rng.random() < 0.5 else f"{n} days ago"), now, _day(d)
    if kind == "weekday":
        # now in the next calendar week and at most 7 days later: "last <weekday>" is d under every reading
        options = [k for k in range(1, 8) if (d + timedelta(days=k)).weekday() < d.weekday() or k == 7]
        k = rng.choice(options)
        now = datetime(d.year, d.month, d.day, hour) + timedelta(days=k)
        name = calendar.day_name[d.weekday()]
        return (f"last {name}" if rng.random() < 0.5 else f"on {name}"), now, _day(d)
    if kind == "last_week":
        monday = d - timedelta(days=d.weekday())
        start = datetime(monday.year, monday.month, monday.day)
        now = start + timedelta(days=7 + rng.randint(0, 6), hours=hour)
        return "last week", now, (start, start + timedelta(days=7))
    if kind == "week_ago":
        n = rng.choice((1, 2))
        now = datetime(d.year, d.month, d.day, hour) + timedelta(days=7 * n)
        start = datetime(d.year, d.month, d.day) - timedelta(days=3)
        return ("a week ago" if n == 1 else "two weeks ago"), now, (start, start + timedelta(days=7))
    if kind == "past_week":
        k = rng.randint(1, 6)
        now = datetime(d.year, d.month, d.day, hour) + timedelta(days=k)
        return (
            "in the past week",
            now,
            (datetime(now.year, now.month, now.day) - timedelta(days=7), now + timedelta(seconds=1)),
        )
    if kind == "last_month":
        y, m = (d.year + 1, 1) if d.month == 12 else (d.year, d.month + 1)
        now = datetime(y, m, rng.randint(1, 28), hour)
        return "last month", now, _month_window(d.year, d.month)
    if kind == "last_year":
        if d.year + 1 not in years:
            return None
        now = datetime(d.year + 1, rng.randint(1, 2), rng.randint(1, 28), hour)
        return "last year", now, (datetime(d.year, 1, 1), datetime(d.year + 1, 1, 1))
    raise ValueError(kind)


PHRASE_KINDS = (
    "date",
    "month",
    "yesterday",
    "today",
    "days_ago",
    "weekday",
    "last_week",
    "week_ago",
    "past_week",
    "last_month",
    "last_year",
)
#: Phrase kinds tried per section (of PHRASE_KINDS, in a seeded order; the first that fit are used).
KINDS_PER_SECTION = 3


def _compose(base: str, phrase: str, rng: random.Random) -> str:
    text = " ".join(base.split())
    if rng.random() < 0.5:
        first = text[0].lower() + text[1:] if text.split()[0] in _QUESTION_WORDS else text
        return f"{phrase[0].upper()}{phrase[1:]}, {first}"
    end = text[-1] if text[-1] in ".?!" else "."
    return f"{text.rstrip('.?!')} {phrase}{end}"


_QUESTION_WORDS = {
    "What",
    "Who",
    "Whose",
    "Whom",
    "Where",
    "When",
    "Why",
    "How",
    "Which",
    "Did",
    "Does",
    "Do",
    "Is",
    "Was",
    "Were",
    "Has",
    "Have",
    "Had",
    "Can",
    "Could",
    "Would",
    "Will",
    "Are",
}
#: A question in the past tense by its auxiliary ("What did ...", "Where was ...", "Did ...").
_PAST_QUESTION = re.compile(r"^(?:\w+\s+){0,2}(?:did|was|were|had)\b", re.IGNORECASE)
#: Phrases that name the past only in a past-tense sentence ("on Thursday", "in June", "on June 16", "this
#: morning": "Gina values her store on Thursday" could be next Thursday): these go with past-tense bases only.
_TENSE_BOUND = re.compile(r"^(?:on (?:the \d+\w\w of )?[A-Z][a-z]+(?: \d+)?|in [A-Z][a-z]+|this \w+)$")


def time_queries(conv: Any, seed: int = 0, limit: int | None = None) -> list[TimeQuery]:
    """The ``time`` query set of one conversation (see the module docstring); ``limit``: the first ``limit``."""
    dated = sorted((t for t in conv.turns if t.timestamp is not None), key=lambda t: (t.timestamp, t.index))
    if not dated:
        return []
    rng = random.Random(f"{seed}/time/{conv.id}")
    years = {t.timestamp.year for t in dated}
    bases: dict[int, list[tuple[str, str, frozenset[str]]]] = defaultdict(list)
    for q in conv.facts:
        if len(q.gold) == 1 and not has_time_words(q.text):
            bases[next(iter(q.gold))].append(("fact", q.text, q.evidence))
    for q in conv.questions:
        if len(q.gold) == 1 and not has_time_words(q.text):
            bases[next(iter(q.gold))].append(("question", q.text, q.evidence))
    out: list[TimeQuery] = []
    for turn in dated:
        kinds = list(PHRASE_KINDS)
        rng.shuffle(kinds)
        made = 0
        for kind in kinds:
            if made == KINDS_PER_SECTION:
                break
            found = _phrases(kind, turn.timestamp, rng, years)
            if found is None:
                continue
            phrase, now, (start, end) = found
            inside = [t for t in dated if start <= t.timestamp < end and t.timestamp <= now]
            assert turn in inside, (conv.id, turn.index, kind, phrase)
            choice = rng.random()
            pool = bases.get(turn.index, [])
            if _TENSE_BOUND.match(phrase):
                pool = [b for b in pool if b[0] == "question" and _PAST_QUESTION.match(b[1])]
            speakers = sorted({s.name for s in turn.sources if s.name})
            if pool and (choice < 0.7 or not speakers):
                base, text, evidence = rng.choice(pool)
                gold = frozenset({turn.index})
            elif speakers:
                who = rng.choice(speakers)
                other = [s for s in speakers if s != who]
                template = rng.choice(
                    [
                        "What did {who} talk about {phrase}?",
                        "Remind me what {who} said {phrase}.",
                        "What did {who} and {other} discuss {phrase}?",
                        "What did {who} tell {other} {phrase}?",
                    ]
                    if other
                    else ["What did {who} talk about {phrase}?", "Remind me what {who} said {phrase}."]
                )
                text = template.format(who=who, other=other[0] if other else "", phrase=phrase)
                gold = frozenset(t.index for t in inside)
                evidence = frozenset(
                    conv.unit_of(t.index, s.ordinal) for t in inside for s in t.sources if s.name == who
                )
                out.append(TimeQuery(f"{conv.id}/t{len(out)}", text, now, start, end, gold, evidence, kind, "open"))
                made += 1
                continue
            else:
                continue
            out.append(
                TimeQuery(
                    f"{conv.id}/t{len(out)}", _compose(text, phrase, rng), now, start, end, gold, evidence, kind, base
                )
            )
            made += 1
    return out[:limit] if limit else out


def dated_questions(conv: Any, limit: int | None = None) -> list[TimeQuery]:
    """The ``time_qa`` set: the conversation's questions whose text names a time (the parser's window, now = the
    day after the last section)."""
    now = default_now(conv)
    if now is None:
        return []
    out = []
    for q in conv.questions:
        w = find_time(q.text, now)
        if w is not None:
            out.append(TimeQuery(f"{q.id}/time", q.text, now, w.start, w.end, q.gold, q.evidence, "qa", "qa"))
    return out[:limit] if limit else out
