"""The time query sets of ``eval threads`` (``--query-sets time,time_qa``) and the time-aware representations.

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
written independently of :mod:`ctxret.query.timewords`; a test holds the two to the same answer), and always holds
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

Time-aware representations (opt-in: name them in ``--representations``)
-----------------------------------------------------------------------
All are the runtime's default hybrid search (:data:`.hybrid.RUNTIME_DEFAULT` over the default stored side), each
part searched inside its own scope: ``Scope(thread, where=ts_epoch window)`` — the thread's pieces filtered before
ranking (dense and BM25), never after the cut to k. Every one also stops at ``now`` (a search never sees what was
stored after its time), which the plain ``hybrid_default`` does not:

* ``hybrid_asof``: no time handling, only the store as of now (the product today, where nothing is stored after now);
* ``hybrid_time``: each part's window (:func:`ctxret.query.timewords.find_time`), the time words kept in the text;
* ``hybrid_time_strip``: the same, the time words taken out of the embedded and matched text (part and whole);
* ``hybrid_time_pm1d``: the window widened by a day on each side;
* ``hybrid_time_fallback``: the window, but a part whose window holds no piece searches as of now;
  ``hybrid_time_pm1d_fallback``: both;
* ``hybrid_recency_7d`` / ``_30d`` / ``_90d``: no window; each part's candidates re-ranked by their fused score times
  ``0.5 ** (age / half_life)`` (age = now − the piece's time).

For ``facts`` / ``qa`` / ``composite`` the time-aware representations use now = the day after the conversation's last
section (at 12:00), so a query without a time word searches exactly as ``hybrid_default`` does.
"""

from __future__ import annotations

import calendar
import math
import random
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np

from ..blend import chunk_search_vector
from ..embedders.fitting import embed_fitting
from ..query.search import PartCandidates
from ..query.timewords import TimeWindow, find_time, has_time_words, strip_time, time_expressions
from ..query.vectors import query_texts
from ..text import clean_text
from .hybrid import RUNTIME_DEFAULT, hybrid_candidates
from .metrics import evidence_recall, mean, reciprocal_rank
from .stats import paired_diff, per_cluster, stratified_bootstrap

__all__ = [
    "TIME_QUERY_SETS",
    "TIME_REPRESENTATIONS",
    "TimeAware",
    "TimeQuery",
    "dated_questions",
    "time_breakdown",
    "default_now",
    "score_time",
    "time_comparison",
    "time_queries",
]

TIME_QUERY_SETS = ("time", "time_qa")
_EPOCH = datetime(1970, 1, 1)


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
        return "in the past week", now, (datetime(now.year, now.month, now.day) - timedelta(days=7),
                                         now + timedelta(seconds=1))  # fmt: skip
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


PHRASE_KINDS = ("date", "month", "yesterday", "today", "days_ago", "weekday", "last_week", "week_ago", "past_week",
                "last_month", "last_year")  # fmt: skip
#: Phrase kinds tried per section (of PHRASE_KINDS, in a seeded order; the first that fit are used).
KINDS_PER_SECTION = 3


def _compose(base: str, phrase: str, rng: random.Random) -> str:
    text = " ".join(base.split())
    if rng.random() < 0.5:
        first = text[0].lower() + text[1:] if text.split()[0] in _QUESTION_WORDS else text
        return f"{phrase[0].upper()}{phrase[1:]}, {first}"
    end = text[-1] if text[-1] in ".?!" else "."
    return f"{text.rstrip('.?!')} {phrase}{end}"


_QUESTION_WORDS = {"What", "Who", "Whose", "Whom", "Where", "When", "Why", "How", "Which", "Did", "Does", "Do", "Is",
                   "Was", "Were", "Has", "Have", "Had", "Can", "Could", "Would", "Will", "Are"}  # fmt: skip
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
                    ["What did {who} talk about {phrase}?", "Remind me what {who} said {phrase}.",
                     "What did {who} and {other} discuss {phrase}?", "What did {who} tell {other} {phrase}?"]
                    if other else ["What did {who} talk about {phrase}?", "Remind me what {who} said {phrase}."]
                )  # fmt: skip
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
                TimeQuery(f"{conv.id}/t{len(out)}", _compose(text, phrase, rng), now, start, end, gold, evidence,
                          kind, base)
            )  # fmt: skip
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


# -- the time-aware search ------------------------------------------------------------------------------------------
def _floating(dt: datetime) -> float:
    """``ts_epoch`` of a naive timestamp (its wall clock read as UTC; ``storage.schema``)."""
    return (dt.replace(tzinfo=None) - _EPOCH).total_seconds()


def _where(window: TimeWindow | None, now: datetime, latest: float) -> dict[str, Any] | None:
    """The part's filter: its window (naive timestamps: the wall-clock scale), else the store as of now (None when
    that holds every piece, so a part without a time word searches exactly as ``hybrid_default``)."""
    if window is None:
        window = TimeWindow(None, now + timedelta(seconds=1), (), now)
        if latest < window.epoch_bounds(naive=True)[1]:
            return None
    return window.where(naive=True)


@dataclass(frozen=True)
class TimeAware:
    """A time-aware hybrid representation (see the module docstring): ``rep(ix, message, now=None)``."""

    windows: bool = True
    strip: bool = False
    tolerance: timedelta | None = None
    fallback: bool = False
    half_life: timedelta | None = None

    def __call__(self, ix: Any, message: str, now: datetime | None = None) -> Any:
        from .threads import Retrieval

        now = now if now is not None else default_now(ix.conv)
        return Retrieval("pieces", True, self.groups(ix, message, now))

    def groups(self, ix: Any, message: str, now: datetime | None) -> list[Any]:
        parts, whole = query_texts(message)
        if not parts:
            return []
        if now is None:  # no timestamps: nothing to filter on
            return _groups_plain(ix, message)
        found = [find_time(p, now) if self.windows else None for p in parts]
        if self.tolerance is not None:
            found = [w.widened(self.tolerance) if w is not None else None for w in found]
        texts, qvecs = self._vectors(ix, message, parts, whole, found, now)
        latest = max((float(m.get("ts_epoch", -math.inf)) for m in ix.exact_store().metadatas), default=-math.inf)
        store = ix.exact_store(ix.default_stored)
        fusion = RUNTIME_DEFAULT
        wheres = [_where(w, now, latest) for w in found]
        cands: list[PartCandidates | None] = [None] * len(parts)
        for where in [w for i, w in enumerate(wheres) if w not in wheres[:i]]:  # parts sharing a scope: one search
            idx = [i for i, w in enumerate(wheres) if w == where]
            got = hybrid_candidates(store, ix.conv.id, [texts[i] for i in idx], qvecs[idx], k=ix.k, fusion=fusion,
                                    where=where)  # fmt: skip
            for i, c in zip(idx, got, strict=True):
                if self.fallback and found[i] is not None and not c.ranked:
                    c = hybrid_candidates(store, ix.conv.id, [texts[i]], qvecs[i : i + 1], k=ix.k, fusion=fusion,
                                          where=_where(None, now, latest))[0]  # fmt: skip
                cands[i] = _recency(c, now, self.half_life) if self.half_life is not None else c
        groups = ix.ranked([c for c in cands if c is not None], fusion.lexical_floor)
        for g, part in zip(groups, parts, strict=True):
            g.part = part  # the part as written (composite scoring finds a fact's part by its words)
        return groups

    def _vectors(
        self, ix: Any, message: str, parts: list[str], whole: str, found: list[TimeWindow | None], now: datetime
    ) -> tuple[list[str], np.ndarray]:
        """The parts' texts and blended vectors: the runtime's (``ix.query``) unless time words are stripped."""
        if not self.strip or all(w is None for w in found):
            return parts, ix.query(message, split=True)[1]
        texts = [strip_time(p, w.spans) if w is not None else p for p, w in zip(parts, found, strict=True)]
        stripped_whole = strip_time(whole, [e.span for e in time_expressions(whole, now) if e.end is not None])
        if len(parts) == 1 and clean_text(parts[0]) == clean_text(whole):
            return texts, embed_fitting(ix.emb, texts)
        vecs = embed_fitting(ix.emb, [*texts, stripped_whole])
        return texts, chunk_search_vector(vecs[:-1], vecs[-1], ix.weight).astype(np.float32)


def _groups_plain(ix: Any, message: str) -> list[Any]:
    from .threads import hybrid_groups

    return hybrid_groups(ix, message, RUNTIME_DEFAULT)


def _recency(c: PartCandidates, now: datetime, half_life: timedelta) -> PartCandidates:
    """``c`` re-ranked by fused score × 0.5 ** (age / half_life) (a piece without a time keeps its score)."""
    h = half_life.total_seconds()
    t_now = _floating(now)
    rescored = []
    for rid, score in c.ranked:
        ts = c.info[rid][1].get("ts_epoch")
        decay = 1.0 if ts is None else 0.5 ** (max(0.0, t_now - float(ts)) / h)
        rescored.append((rid, float(score) * decay))
    rescored.sort(key=lambda x: -x[1])
    c.ranked = rescored
    return c


TIME_REPRESENTATIONS: dict[str, TimeAware] = {
    "hybrid_asof": TimeAware(windows=False),
    "hybrid_time": TimeAware(),
    "hybrid_time_strip": TimeAware(strip=True),
    "hybrid_time_pm1d": TimeAware(tolerance=timedelta(days=1)),
    "hybrid_time_fallback": TimeAware(fallback=True),
    "hybrid_time_pm1d_fallback": TimeAware(tolerance=timedelta(days=1), fallback=True),
    "hybrid_recency_7d": TimeAware(windows=False, half_life=timedelta(days=7)),
    "hybrid_recency_30d": TimeAware(windows=False, half_life=timedelta(days=30)),
    "hybrid_recency_90d": TimeAware(windows=False, half_life=timedelta(days=90)),
}


# -- scoring -------------------------------------------------------------------------------------------------------
def score_time(ix: Any, ret: Any, q: TimeQuery, k: int) -> dict[str, float]:
    """``top1_window``, ``top5_window`` (time set), ``window_has_evidence`` (time_qa), ``top1_section``, ``mrr``,
    ``recall``."""
    from .threads import best_group

    stamp = {t.index: t.timestamp for t in ix.conv.turns}
    g = best_group(ret.groups)
    out: dict[str, float] = {}
    if q.base == "qa":
        out["window_has_evidence"] = 1.0 if any(q.holds(stamp.get(s)) for s in q.gold) else 0.0
    if g is None:
        if q.base != "qa":
            out.update(top1_window=0.0, top5_window=0.0)
        out.update(top1_section=0.0, mrr=0.0, recall=evidence_recall([], q.evidence))
        return out
    sections = ix.sections(ret.level)[g.items]
    if q.base != "qa":
        inside = [1.0 if q.holds(stamp.get(int(s))) else 0.0 for s in sections[:5]]
        out["top1_window"] = inside[0]
        out["top5_window"] = mean(inside)
    out["top1_section"] = 1.0 if sections[0] in q.gold else 0.0
    out["mrr"] = reciprocal_rank(sections.tolist(), q.gold)
    units = ix.units(ret.level)
    out["recall"] = evidence_recall([units[i] for i in g.items[:k]], q.evidence)
    return out


#: Baselines each time-aware representation is compared with (``hybrid_time``: for its variants
#: ``hybrid_time_*`` only), and the metrics compared.
TIME_BASELINES = ("hybrid_default", "hybrid_asof", "hybrid_time")
TIME_METRICS = {
    "time": ("top1_window", "top5_window", "top1_section"),
    "time_qa": ("top1_section", "recall"),
    "facts": ("top1_section",),
    "qa": ("top1_section", "recall"),
    "composite": ("coverage",),
}


def time_breakdown(per_query: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``time`` set's window metrics per representation and per base (fact, question, open) and phrase kind."""
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in per_query:
        if row["query_set"] == "time":
            cells[(row["representation"], "base", row["base"])].append(row)
            cells[(row["representation"], "kind", row["kind"])].append(row)
    return [
        {"representation": rep, "by": by, "value": value, "n": len(rows),
         "top1_window": mean(r["top1_window"] for r in rows), "top5_window": mean(r["top5_window"] for r in rows)}
        for (rep, by, value), rows in sorted(cells.items())
    ]  # fmt: skip


def time_comparison(per_query: Sequence[dict[str, Any]], recall_key: str = "recall_at_5") -> list[dict[str, Any]]:
    """Each time-aware representation against :data:`TIME_BASELINES`, paired per query (mean difference, 95%
    interval, bootstrap within conversations, per conversation), on the metrics of :data:`TIME_METRICS`."""
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in per_query:
        by[(row["representation"], row["query_set"])][row["query_id"]] = row
    reps = [r for r in TIME_REPRESENTATIONS if any(key[0] == r for key in by)]
    out: list[dict[str, Any]] = []
    for rep in reps:
        for base in TIME_BASELINES:
            if rep == base or (base == "hybrid_time" and not rep.startswith("hybrid_time_")):
                continue
            for qs, metrics in TIME_METRICS.items():
                mine, theirs = by.get((rep, qs)), by.get((base, qs))
                if not mine or not theirs:
                    continue
                for metric in metrics:
                    ids = [i for i in mine if i in theirs and metric in mine[i] and metric in theirs[i]]
                    if not ids:
                        continue
                    a = [float(mine[i][metric]) for i in ids]
                    b = [float(theirs[i][metric]) for i in ids]
                    convs = [mine[i]["conversation"] for i in ids]
                    out.append({
                        "system": rep, "peer": base, "query_set": qs,
                        "metric": recall_key if metric == "recall" else metric,
                        "system_value": mean(a), "peer_value": mean(b), "diff": paired_diff(a, b).as_dict(),
                        "bootstrap": stratified_bootstrap(a, b, convs).as_dict(),
                        "per_conversation": per_cluster(a, b, convs),
                        "changed": sum(x != y for x, y in zip(a, b, strict=True)),
                    })  # fmt: skip
    return out
