"""Time expressions → windows (ctxret.query.time): every expression kind against hand-written windows, month and
year edges, time zones, other languages, and properties on arbitrary text."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from ctxret.errors import InputError
from ctxret.query.time import (
    TimeWindow,
    find_time,
    has_time_words,
    resolve_now,
    strip_time,
    time_expressions,
)
from hypothesis import given, settings
from hypothesis import strategies as st

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "time_expressions.json").read_text(encoding="utf-8"))
NOW = datetime(2023, 5, 9, 10, 0)  # a Tuesday


def _cases() -> list[tuple[str, datetime, object]]:
    out = []
    for block in DATA["blocks"]:
        now = datetime.fromisoformat(block["now"])
        cap = now + timedelta(seconds=1)
        for text, start, end in block["cases"]:
            want = None
            if not (start is None and end is None):
                want = (
                    None if start is None else datetime.fromisoformat(start),
                    cap if end == "cap" else datetime.fromisoformat(end),
                )
            out.append((text, now, want))
    return out


@pytest.mark.parametrize(("text", "now", "want"), _cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_each_expression_gives_its_window(text, now, want):
    w = find_time(text, now)
    assert (None if w is None else (w.start, w.end)) == want


@pytest.mark.parametrize("text", DATA["ordinary"])
def test_ordinary_text_names_no_time(text):
    assert find_time(text, NOW) is None


def test_the_expression_and_its_span_are_reported():
    text = "What did Anna say yesterday about the budget?"
    w = find_time(text, NOW)
    assert w is not None and w.kind == "day"
    ((a, b),) = w.spans
    assert text[a:b] == "yesterday"
    assert strip_time(text, w.spans) == "What did Anna say about the budget?"


def test_strip_tidies_punctuation_and_keeps_text_when_nothing_else_is_left():
    text = "Yesterday, what did Anna say?"
    w = find_time(text, NOW)
    assert strip_time(text, w.spans) == "what did Anna say?"
    only = "Yesterday?"
    assert strip_time(only, find_time(only, NOW).spans) == only


def test_explicit_dates_win_over_relative_words_and_future_words_give_no_window():
    exprs = time_expressions("What did we decide last week about next month's launch?", NOW)
    assert [(e.text, e.future) for e in exprs] == [("last week", False), ("next month's", True)]
    w = find_time("What was the issue last week, as mentioned on 6 May 2023?", NOW)
    assert (w.start, w.end) == (datetime(2023, 5, 6), datetime(2023, 5, 7))
    assert find_time("What is planned for tomorrow?", NOW) is None


def test_a_window_never_reaches_past_now():
    w = find_time("What did we ship this year?", NOW)
    assert w.end == NOW + timedelta(seconds=1)
    assert w.widened(timedelta(days=1)).end == NOW + timedelta(seconds=1)
    assert w.widened(timedelta(days=1)).start == datetime(2022, 12, 31)


# -- month and year edges -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("now", "text", "want"),
    [
        (datetime(2024, 1, 1, 9), "yesterday", (datetime(2023, 12, 31), datetime(2024, 1, 1))),
        (datetime(2024, 1, 1, 9), "last month", (datetime(2023, 12, 1), datetime(2024, 1, 1))),
        (datetime(2024, 1, 15, 9), "What did we buy in December?", (datetime(2023, 12, 1), datetime(2024, 1, 1))),
        (datetime(2024, 3, 10, 9), "last month", (datetime(2024, 2, 1), datetime(2024, 3, 1))),  # 29 days
        (datetime(2023, 3, 10, 9), "last month", (datetime(2023, 2, 1), datetime(2023, 3, 1))),  # 28 days
        (datetime(2024, 3, 1, 9), "yesterday", (datetime(2024, 2, 29), datetime(2024, 3, 1))),
        (datetime(2025, 3, 1, 9), "What happened on 29 Feb?", (datetime(2024, 2, 29), datetime(2024, 3, 1))),
        (datetime(2023, 1, 2, 9), "last week", (datetime(2022, 12, 26), datetime(2023, 1, 2))),  # a Monday
        (datetime(2023, 1, 1, 9), "last week", (datetime(2022, 12, 19), datetime(2022, 12, 26))),  # a Sunday
        (datetime(2024, 12, 31, 9), "last year", (datetime(2023, 1, 1), datetime(2024, 1, 1))),
    ],
)
def test_month_and_year_edges(now, text, want):
    w = find_time(text, now)
    assert (w.start, w.end) == want


def test_the_week_starts_on_monday():
    monday = datetime(2023, 5, 8, 9)
    w = find_time("What did we ship this week?", monday)
    assert w.start == datetime(2023, 5, 8)
    sunday = datetime(2023, 5, 14, 20)
    assert find_time("What did we ship this week?", sunday).start == datetime(2023, 5, 8)


# -- time zones -------------------------------------------------------------------------------------------------
def test_an_aware_now_gives_bounds_on_its_own_wall_clock():
    tz = timezone(timedelta(hours=2))
    now = datetime(2023, 5, 9, 1, 30, tzinfo=tz)  # still 8 May in UTC
    w = find_time("What did Anna say yesterday?", now)
    assert (w.start, w.end) == (datetime(2023, 5, 8, tzinfo=tz), datetime(2023, 5, 9, tzinfo=tz))
    assert w.epoch_bounds(naive=False) == (int(w.start.timestamp()), int(w.end.timestamp()))


def test_a_day_across_a_daylight_saving_change_is_23_hours():
    berlin = ZoneInfo("Europe/Berlin")
    w = find_time("What did we decide yesterday?", datetime(2023, 3, 27, 10, tzinfo=berlin))
    assert w.start.utcoffset() == timedelta(hours=1) and w.end.utcoffset() == timedelta(hours=2)
    assert w.end.timestamp() - w.start.timestamp() == 23 * 3600


def test_naive_stored_times_are_the_stores_own_and_compare_by_wall_clock():
    tz = timezone(timedelta(hours=-5))
    w = find_time("What did Anna say yesterday?", datetime(2023, 5, 9, 10, tzinfo=tz))
    assert w.contains(datetime(2023, 5, 8, 23, 30))  # naive: its wall clock is yesterday's
    assert not w.contains(datetime(2023, 5, 9, 0, 30))
    assert w.contains(datetime(2023, 5, 9, 4, 30, tzinfo=timezone.utc))  # aware: 23:30 on 8 May at -05:00
    assert not w.contains(datetime(2023, 5, 9, 5, 30, tzinfo=timezone.utc))
    # ts_epoch of a naive timestamp is its wall clock read as UTC (storage.schema): the naive scale
    lo, hi = w.epoch_bounds(naive=True)
    assert (lo, hi) == (int((datetime(2023, 5, 8) - datetime(1970, 1, 1)).total_seconds()), lo + 86400)
    assert w.where(naive=True) == {"$and": [{"ts_epoch": {"$gte": lo}}, {"ts_epoch": {"$lt": hi}}]}


def test_open_windows_filter_on_one_side():
    w = find_time("What did we spend until 3 May?", NOW)
    assert w.start is None
    assert w.where() == {"ts_epoch": {"$lt": w.epoch_bounds()[1]}}


def test_resolve_now():
    now = resolve_now(None)
    assert now.tzinfo is not None
    assert resolve_now("2023-05-09T10:00:00Z") == datetime(2023, 5, 9, 10, tzinfo=timezone.utc)
    assert resolve_now(NOW) is NOW
    with pytest.raises(InputError, match="ISO-8601"):
        resolve_now(12)
    with pytest.raises(InputError, match="now"):
        resolve_now("next Tuesday")


# -- other languages: nothing, cleanly -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "Was hat Anna gestern über das Budget gesagt?",
        "¿Qué dijo Ana ayer sobre el presupuesto?",
        "Qu'a dit Anna hier à propos du budget ?",
        "安娜昨天关于预算说了什么？",
        "アンナは昨日予算について何と言いましたか？",
    ],
)
def test_other_languages_get_no_window(text):
    assert not has_time_words(text)
    assert find_time(text, NOW) is None


def test_an_english_date_inside_other_text_is_still_read():
    w = find_time("Was hat Anna am 2023-05-08 gesagt?", NOW)
    assert (w.start, w.end) == (datetime(2023, 5, 8), datetime(2023, 5, 9))


# -- properties --------------------------------------------------------------------------------------------------
_nows = st.datetimes(min_value=datetime(1995, 1, 1), max_value=datetime(2090, 12, 31))
_time_alphabet = st.sampled_from(
    "yesterday today tonight last this past since before after until week weekend month year ago two 3 a few "
    "Monday Friday May June Oct 8 16th 2023 1999 summer winter morning night the on in of and between , . ? - "
    "did was said spring 29 Feb 31 2024-02-30 2023-05-08".split()
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), _nows)
def test_never_raises_on_arbitrary_text(text, now):
    w = find_time(text, now)
    if w is not None:
        assert w.start is None or w.start < w.end
        assert all(text[a:b] == e.text for e, (a, b) in zip(w.expressions, w.spans, strict=True))


@settings(max_examples=400, deadline=None)
@given(st.lists(_time_alphabet, max_size=12).map(" ".join), _nows)
def test_windows_are_never_empty_and_never_past_now(text, now):
    w = find_time(text, now)
    if w is not None:
        assert w.start is None or w.start < w.end
        assert w.end <= now + timedelta(seconds=1)


_ANCHORED = [
    ("yesterday", lambda now: now - timedelta(days=1)),
    ("the day before yesterday", lambda now: now - timedelta(days=2)),
    ("{n} days ago", lambda now, n: now - timedelta(days=n)),
    ("{n} weeks ago", lambda now, n: now - timedelta(weeks=n)),
    ("last week", lambda now: now - timedelta(days=7)),
    ("last month", lambda now: now.replace(day=1) - timedelta(days=1)),
    ("last year", lambda now: now.replace(year=now.year - 1, month=6, day=1)),
    ("in the past {n} days", lambda now, n: now - timedelta(days=n)),
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(_ANCHORED))), st.integers(1, 12), _nows)
def test_relative_windows_hold_their_anchor_day(which, n, now):
    phrase, anchor = _ANCHORED[which]
    text = phrase.format(n=n)
    day = (anchor(now, n) if "{n}" in phrase else anchor(now)).replace(hour=12, minute=0, second=0, microsecond=0)
    w = find_time(f"What did we say {text}?", now)
    assert w is not None and w.start is not None
    assert w.start <= day < w.end or (w.start <= day and w.end == now + timedelta(seconds=1))


_NEUTRAL = st.lists(
    st.sampled_from("apple blue report Anna budget server green quickly notes please".split()), min_size=0, max_size=6
).map(" ".join)
#: "on the 3rd" counts only at the end of a clause ("on the 3rd floor" is no time), so it is left out here.
_WITH_WINDOWS = [(t, now, want) for t, now, want in _cases() if want is not None and "on the 3rd" not in t]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(_WITH_WINDOWS))), _NEUTRAL, _NEUTRAL)
def test_parsing_is_invariant_to_surrounding_text(which, before, after):
    text, now, want = _WITH_WINDOWS[which]
    w = find_time(f"{before} {text} {after}".strip(), now)
    assert w is not None and (w.start, w.end) == want


def test_window_type_is_frozen():
    w = find_time("What did Anna say yesterday?", NOW)
    assert isinstance(w, TimeWindow)
    with pytest.raises(AttributeError):
        w.start = NOW  # type: ignore[misc]
