"""Time expressions in query parts: the rule set (``ctxret.query.time``) against ``dateparser``.

Three measurements, one run:

* **accuracy** on the hand-written expressions of ``tests/data/time_expressions.json``: the rule set's exact
  window (start and end as written there) and, for both parsers, the lenient score "finds a time and its point
  lies inside the expected window" (dateparser gives points, not windows; a case that expects no window counts
  when nothing is found); the "ordinary" texts there count false positives;
* **detections on real parts**: every part (``split_prompt_chunks``) of the LoCoMo dev facts and questions
  (``now`` = the day after the conversation's last session) and of the bundled split fixture's messages: how many
  get a window, and, with ``--list``, which (to read them for false positives);
* **cost per part**, paired and interleaved in rounds: parts without a time expression and parts with one, for the
  rule set (``find_time``) and ``dateparser.search.search_dates``.

    python benchmarks/bench_timewords.py --locomo ../shared/data/locomo-dev --out benchmarks/results/timewords.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

from ctxret.evaluation.datasets import load_threads
from ctxret.query.split import split_prompt_chunks
from ctxret.query.time import find_time, has_time_words

CASES = Path(__file__).resolve().parent.parent / "tests" / "data" / "time_expressions.json"


def expected_cases() -> tuple[list[tuple[str, datetime, Any]], list[str]]:
    data = json.loads(CASES.read_text(encoding="utf-8"))
    out = []
    for block in data["blocks"]:
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
    return out, list(data["ordinary"])


def dateparser_points(text: str, now: datetime) -> list[datetime]:
    from dateparser.search import search_dates

    found = search_dates(text, languages=["en"], settings={"RELATIVE_BASE": now, "PREFER_DATES_FROM": "past"})
    return [d for _, d in found or []]


def inside(point: datetime, want: tuple[datetime | None, datetime]) -> bool:
    lo, hi = want
    return (lo is None or lo <= point) and point < hi


def accuracy(use_dateparser: bool) -> dict[str, Any]:
    cases, ordinary = expected_cases()
    exact = lenient = 0
    misses = []
    for text, now, want in cases:
        w = find_time(text, now)
        got = None if w is None else (w.start, w.end)
        exact += got == want
        point = None if w is None else (w.start if w.start is not None else w.end - timedelta(seconds=1))
        lenient += (want is None and w is None) or (want is not None and point is not None and inside(point, want))
        if got != want:
            misses.append(text)
    out: dict[str, Any] = {"cases": len(cases), "rules_exact": exact, "rules_lenient": lenient, "rules_misses": misses}
    out["rules_false_positives"] = sum(find_time(t, datetime(2023, 5, 9, 10)) is not None for t in ordinary)
    out["ordinary"] = len(ordinary)
    if use_dateparser:
        dl = 0
        for text, now, want in cases:
            points = dateparser_points(text, now)
            dl += (want is None and not points) or (want is not None and any(inside(p, want) for p in points))
        out["dateparser_lenient"] = dl
        out["dateparser_false_positives"] = sum(bool(dateparser_points(t, datetime(2023, 5, 9, 10))) for t in ordinary)
    return out


def real_parts(locomo: str | None) -> list[tuple[str, str, datetime]]:
    """(source, part, now) for every part of the LoCoMo facts and questions and the split fixture's messages."""
    out: list[tuple[str, str, datetime]] = []
    if locomo:
        for conv in load_threads(locomo):
            stamps = [t.timestamp for t in conv.turns if t.timestamp is not None]
            now = max(stamps) + timedelta(days=1)
            for q in conv.facts + conv.questions:
                out.extend(("locomo", p, now) for p in split_prompt_chunks(q.text))
    fixture = resources.files("ctxret") / "data" / "split_fixture.jsonl"
    for line in fixture.read_text(encoding="utf-8").splitlines():
        if line.strip():
            msg = json.loads(line)["message"]
            out.extend(("split_fixture", p, datetime(2026, 10, 16, 14, 0)) for p in split_prompt_chunks(msg))
    return out


def timing(parts: list[tuple[str, datetime]], fn: Any, repeat: int) -> float:
    """Mean seconds per part of ``fn(part, now)`` over ``repeat`` passes."""
    start = time.perf_counter()
    for _ in range(repeat):
        for text, now in parts:
            fn(text, now)
    return (time.perf_counter() - start) / (repeat * len(parts))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", default=None, help="the LoCoMo dev folder (../shared/data/locomo-dev)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds (default 5)")
    ap.add_argument("--no-dateparser", action="store_true", help="skip dateparser (not installed)")
    ap.add_argument("--list", action="store_true", help="print every real part that gets a window")
    ap.add_argument("--out", default=None, help="write the numbers here as JSON")
    args = ap.parse_args()
    use_dp = not args.no_dateparser
    if use_dp:
        dateparser_points("warm up on 8 May 2023", datetime(2023, 5, 9))  # its first call loads its data (~0.3 s)

    acc = accuracy(use_dp)
    print(
        f"accuracy on {acc['cases']} expressions: rules exact {acc['rules_exact']}, lenient {acc['rules_lenient']}"
        + (f"; dateparser lenient {acc['dateparser_lenient']}" if use_dp else "")
    )
    print(
        f"false positives on {acc['ordinary']} ordinary texts: rules {acc['rules_false_positives']}"
        + (f", dateparser {acc['dateparser_false_positives']}" if use_dp else "")
    )

    parts = real_parts(args.locomo)
    detections: dict[str, dict[str, Any]] = {}
    with_time, without = [], []
    for source, part, now in parts:
        w = find_time(part, now)
        d = detections.setdefault(source, {"parts": 0, "rules_windows": 0, "dateparser_hits": 0})
        d["parts"] += 1
        (with_time if w is not None else without).append((part, now))
        if w is not None:
            d["rules_windows"] += 1
            if args.list:
                print(f"  [{source}] {part!r} -> {[e.text for e in w.expressions]} {w.start} .. {w.end}")
        if use_dp:
            d["dateparser_hits"] += bool(dateparser_points(part, now))
    for source, d in detections.items():
        print(
            f"{source}: {d['parts']} parts, rules give a window to {d['rules_windows']}"
            + (f", dateparser finds a date in {d['dateparser_hits']}" if use_dp else "")
        )

    cases, _ = expected_cases()
    timed_with = [(t, now) for t, now, want in cases if want is not None] + with_time
    timed_without = without
    no_trigger = [(t, now) for t, now in without if not has_time_words(t)]
    triggered = [(t, now) for t, now in without if has_time_words(t)]
    rows: dict[str, list[float]] = {
        "rules_without": [],
        "rules_no_trigger": [],
        "rules_trigger_no_window": [],
        "rules_with": [],
        "dp_without": [],
        "dp_with": [],
    }
    for _ in range(args.rounds):  # interleaved: each round times every cell once
        rows["rules_without"].append(timing(timed_without, find_time, 20))
        rows["rules_no_trigger"].append(timing(no_trigger, find_time, 20))
        rows["rules_trigger_no_window"].append(timing(triggered, find_time, 20))
        rows["rules_with"].append(timing(timed_with, find_time, 20))
        if use_dp:
            rows["dp_without"].append(timing(timed_without[:300], dateparser_points, 1))
            rows["dp_with"].append(timing(timed_with[:300], dateparser_points, 1))
    med = {k: statistics.median(v) * 1e6 for k, v in rows.items() if v}
    print(
        f"cost per part (median of {args.rounds} rounds, µs): rules without a time expression "
        f"{med['rules_without']:.1f} ({len(timed_without)} parts), with one {med['rules_with']:.1f} "
        f"({len(timed_with)} parts)"
    )
    print(
        f"  of the parts without: no trigger word {med['rules_no_trigger']:.1f} ({len(no_trigger)} parts), "
        f"a trigger word but no window {med['rules_trigger_no_window']:.1f} ({len(triggered)} parts)"
    )
    if use_dp:
        print(
            f"  dateparser: without {med['dp_without']:.0f}, with {med['dp_with']:.0f} "
            f"(ratio to the rules: {med['dp_without'] / med['rules_without']:.0f}x, "
            f"{med['dp_with'] / med['rules_with']:.0f}x)"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps(
                {
                    "accuracy": acc,
                    "detections": detections,
                    "microseconds_per_part": med,
                    "machine": platform.platform(),
                    "python": sys.version.split()[0],
                },
                indent=2,
                default=str,
            )
        )
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
