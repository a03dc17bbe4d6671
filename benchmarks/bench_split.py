"""What splitting a message costs, and sentence segmenters from PyPI measured in place of the splitter's own cutting.

The messages: the packaged split fixture (145 agent messages), the held-out topic switches (61) and the seed's dogs
message typed and spoken (``tests/data/dogs_thread.json``). Each round splits every message once; a message's time is
the CPU time of its split (``time.process_time``: time the process waits for a CPU on a shared machine is not
counted), its median over ``--rounds``; printed: the mean, median, 95th percentile and maximum over messages.

``--vs-code DIR`` times another checkout the same way in alternating fresh processes (ABBA: this, other, other, this,
...) and prints the median of the per-pair ratios this / other.

``--segmenters`` replaces the sentence ends of the splitter's cutting half (``_line_segments``: what ends a sentence)
with each installed library's sentences (pysbd, blingfire, syntok, sentencex; English settings), keeping everything
else (code blocks, list items, inline enumerations, the joining half), and prints each one's exact-match part
accuracy on both fixtures and its time per message (sentence cutting alone, and the whole split). sentencex memoises
its results, so its time is taken on fresh text (each message with a round number appended).

    python benchmarks/bench_split.py --rounds 20
    python benchmarks/bench_split.py --vs-code /tmp/ctxret-main --pairs 4
    pip install pysbd blingfire syntok sentencex && python benchmarks/bench_split.py --segmenters
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOGS = ROOT / "tests" / "data" / "dogs_thread.json"


def messages() -> list[str]:
    """The fixture's and the held-out cases' messages, and the dogs message typed and spoken."""
    from ctxret.evaluation.splitting import load_split_fixture

    out = [r.message for r in load_split_fixture()]
    cases = ROOT / "shared" / "ctxret" / "data" / "split_switch_cases.jsonl"
    if cases.exists():  # an older checkout has no held-out cases
        out += [r.message for r in load_split_fixture(cases)]
    dogs = json.loads(DOGS.read_text(encoding="utf-8"))["message"]
    return [*out, dogs, re.sub(r"[.,?!]", "", dogs).lower()]


def time_split(rounds: int) -> dict[str, float]:
    """CPU µs per message (``time.process_time``, so a shared machine's scheduling does not count): each message's
    median over ``rounds`` rounds, then their mean, median, 95th percentile and maximum."""
    from ctxret.query.split import split_prompt_chunks

    msgs = messages()
    per_message: list[list[float]] = [[] for _ in msgs]
    for _ in range(rounds):
        for i, m in enumerate(msgs):
            t = time.process_time()
            split_prompt_chunks(m)
            per_message[i].append(time.process_time() - t)
    each = sorted(1e6 * statistics.median(ts) for ts in per_message)
    return {
        "mean_us": statistics.fmean(each),
        "median_us": statistics.median(each),
        "p95_us": each[int(0.95 * (len(each) - 1))],
        "max_us": each[-1],
        "messages": len(msgs),
    }


def _child(code: str | None, rounds: int) -> dict[str, float]:
    env = dict(os.environ)
    if code:
        env["PYTHONPATH"] = str(Path(code) / "shared")
    cmd = [sys.executable, __file__, "--child", "--rounds", str(rounds)]
    return dict(json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout))


def _segmenters() -> dict[str, Callable[[str], list[int]]]:
    """Each installed library as ``line -> [start of every sentence after the first]``."""
    found: dict[str, Callable[[str], list[int]]] = {}
    try:
        import pysbd

        seg = pysbd.Segmenter(language="en", clean=False, char_span=True)
        found["pysbd"] = lambda line: [s.start for s in seg.segment(line)][1:]
    except ImportError:
        pass
    try:
        import blingfire

        found["blingfire"] = lambda line: [a for a, _ in blingfire.text_to_sentences_and_offsets(line)[1]][1:]
    except ImportError:
        pass
    try:
        from syntok import segmenter

        def syntok(line: str) -> list[int]:
            return [s[0].offset - len(s[0].spacing) for p in segmenter.analyze(line) for s in p][1:]

        found["syntok"] = syntok
    except ImportError:
        pass
    try:
        import sentencex

        def by_text(line: str) -> list[int]:
            pos, starts = 0, []
            for s in sentencex.segment("en", line):
                k = line.find(s.strip()[:10], pos) if s.strip() else -1
                if k >= 0:
                    starts.append(k)
                    pos = k + len(s.strip())
            return starts[1:]

        found["sentencex"] = by_text
    except ImportError:
        pass
    return found


def _with_sentences(starts: Callable[[str], list[int]]) -> Callable[[str, int], list[tuple[str, str, bool]]]:
    """``_line_segments`` with the library's sentence starts in place of the splitter's own sentence ends."""
    import ctxret.query.split.units as units

    def segments(line: str, marker_end: int) -> list[tuple[str, str, bool]]:
        code = [m.span() for m in units._INLINE_CODE.finditer(line)]
        cuts: dict[int, bool] = {}
        for pos in starts(line):
            if marker_end < pos < len(line) and not any(a < pos < b for a, b in code):
                cuts[pos] = False
        for pos in units._enumeration_starts(line, marker_end):
            cuts[pos] = True
        out: list[tuple[str, str, bool]] = []
        prev = 0
        for pos in [*sorted(cuts), len(line)]:
            piece = " ".join(line[prev:pos].split())
            if piece:
                sep = " " if (not out or prev == 0 or line[prev - 1].isspace() or line[prev].isspace()) else ""
                out.append((piece, sep, cuts.get(prev, False) and bool(out)))
            prev = pos
        return out

    return segments


def compare_segmenters(rounds: int) -> list[dict[str, Any]]:
    import ctxret.query.split.units as units
    from ctxret.evaluation.splitting import SWITCH_CASES, load_split_fixture, part_accuracy
    from ctxret.query.split import split_prompt_chunks
    from ctxret.text import LINE_BREAKS, clean_text

    fixture, cases = load_split_fixture(), load_split_fixture(packaged=SWITCH_CASES)
    msgs = messages()
    own = units._line_segments
    rows = []
    for name, starts in {"ctxret": None, **_segmenters()}.items():
        units._line_segments = own if starts is None else _with_sentences(starts)  # type: ignore[assignment]
        try:
            a, b = part_accuracy(fixture), part_accuracy(cases)
            cut_times, split_times = [], []
            for r in range(rounds):
                fresh = [f"{m} r{r}" for m in msgs]  # new text each round: no library's memo answers
                lines = [ln for m in fresh for ln in LINE_BREAKS.split(clean_text(m)) if ln.strip()]
                t = time.process_time()
                for ln in lines:
                    own(ln, 0) if starts is None else starts(ln)
                cut_times.append((time.process_time() - t) / len(fresh))
                t = time.process_time()
                for m in fresh:
                    split_prompt_chunks(m)
                split_times.append((time.process_time() - t) / len(fresh))
        finally:
            units._line_segments = own  # type: ignore[assignment]
        rows.append(
            {
                "segmenter": name,
                "fixture": (round(a.exact * a.n), a.n),
                "cases": (round(b.exact * b.n), b.n),
                "cut_us": 1e6 * statistics.median(cut_times),
                "split_us": 1e6 * statistics.median(split_times),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--vs-code", default=None, metavar="DIR", help="another checkout, timed in alternating processes")
    ap.add_argument("--pairs", type=int, default=4, help="ABBA pairs of processes with --vs-code")
    ap.add_argument("--segmenters", action="store_true", help="measure installed sentence segmenters in its place")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(time_split(args.rounds)))
        return
    if args.segmenters:
        print("| sentence ends from | fixture exact | held-out cases exact | cutting µs/message | split µs/message |")
        print("|:--|--:|--:|--:|--:|")
        for r in compare_segmenters(max(3, args.rounds // 4)):
            (fa, fn), (ca, cn) = r["fixture"], r["cases"]
            print(f"| {r['segmenter']} | {fa}/{fn} | {ca}/{cn} | {r['cut_us']:.0f} | {r['split_us']:.0f} |")
        return
    if args.vs_code is None:
        r = time_split(args.rounds)
        print(
            f"{r['messages']} messages, CPU µs per message (each message's median of {args.rounds} rounds): "
            f"mean {r['mean_us']:.0f}, median {r['median_us']:.0f}, p95 {r['p95_us']:.0f}, max {r['max_us']:.0f}"
        )
        return
    ratios, mine, theirs = [], [], []
    for p in range(args.pairs):
        order = (None, args.vs_code) if p % 2 == 0 else (args.vs_code, None)
        got = {code: _child(code, args.rounds) for code in order}
        a, b = got[None]["mean_us"], got[args.vs_code]["mean_us"]
        mine.append(a)
        theirs.append(b)
        ratios.append(a / b)
        print(f"pair {p + 1}: mean CPU µs/message this {a:.0f}, other {b:.0f}, ratio {a / b:.2f}", flush=True)
    print(
        f"this / other, median of {args.pairs} pairs: {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}); this {statistics.median(mine):.0f} µs/message, "
        f"other {statistics.median(theirs):.0f} µs/message"
    )


if __name__ == "__main__":
    main()
