"""The cutting half of the splitter (:func:`cut_units`): cleaned text → units — sentences (not after a title or
abbreviation, inside inline code or before an emoji that ends the sentence), list items and the items of an inline
enumeration, code fences, runs of quoted or pasted log lines, the clauses a topic switch or a spoken run-on's next ask
opens, and 40-word windows of a long unit.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

from ...text import LINE_BREAKS
from .switches import clause_cuts
from .words import CLOSERS, INLINE_ENUM, LIST_MARKER

__all__ = ["LONG_PART_WORDS", "WINDOW_WORDS", "Unit", "cut_units"]

#: A part longer than this many words is cut into windows.
LONG_PART_WORDS = 60
#: Window size, in words, for long parts.
WINDOW_WORDS = 40

#: Sentence ends that need whitespace after them (``.!?`` plus ``…‼⁇⁈⁉`` and ``؟``/``।``).
_END_SPACED = re.compile(r"[.!?\u2026\u203c\u2047-\u2049\u061f\u0964]+[" + re.escape(CLOSERS) + r"]*(?=\s)")
#: CJK / full-width sentence ends: a sentence may end there without a space after.
_END_CJK = re.compile(r"[\u3002\uff01\uff1f\uff61][\u3002\uff01\uff1f\uff61!?]*[" + re.escape(CLOSERS) + r"]*")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_FENCE_CLOSE = re.compile(r"^\s*(`{3,}|~{3,})\s*$")
_QUOTE_LINE = re.compile(r"^\s*>")
_HEADING = re.compile(r"^\s*#{1,6}\s+\S")
#: A pasted log line: it opens with a date, a time or a level (``2024-05-02 03:14:07 ERROR …``).
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}"  # a date and time
    r"|\[?\d{2}:\d{2}:\d{2}"  # a time
    r"|\[?(?:ERROR|WARN|WARNING|INFO|DEBUG|TRACE|FATAL)\b)"  # a level
)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_NON_SPACE = re.compile(r"\S")
#: No sentence end after these (lower-cased, with their dot); "etc." and "a.m." often end a sentence.
_ABBREVIATIONS = frozenset(
    "mr. mrs. ms. dr. prof. st. sr. jr. mt. vs. e.g. i.e. cf. approx. z.b. d.h. bzw. u.a. ca. "
    "nr. sra. mme. mlle. p.ej. inc. ltd. co. corp. dept. fig.".split()
)


@dataclass
class Unit:
    """A piece of the message the splitter cuts and joins (its ``role`` and ``switch`` set by the joining half)."""

    text: str  # whitespace-collapsed
    sep: str  # what joins it to the unit before: " " or "" (a CJK end with no space after it)
    kind: str = "text"  # "text" | "block" | "window" | "heading"
    item: str = ""  # "start": opens a list item; "inside": a later sentence of a list item
    before_list: bool = False  # the last unit of a line directly followed by list items
    role: str = ""  # set by _roles: "ask" | "stmt" | "frag" | "lead" | "block"
    line_start: bool = False  # the first unit of its line
    switch: bool = False  # set by _roles: opens with a topic switch ("By the way, ..."): always a new part


def cut_units(text: str) -> list[Unit]:
    """Cut cleaned text into units: sentences, list items, code and quote blocks, long-text windows."""
    lines = [ln for ln in LINE_BREAKS.split(text)]
    units: list[Unit] = []
    fences = _Fences(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            closing = fences.closing(i, fence.group(1))
            if closing is not None:
                block = " ".join(" ".join(lines[i : closing + 1]).split())
                units.append(Unit(block, " ", "block"))
                i = closing + 1
                continue
        run = _line_run(lines, i)
        if run > i:
            units.append(Unit(" ".join(" ".join(lines[i:run]).split()), " ", "block"))
            i = run
            continue
        if _HEADING.match(line):
            units.append(Unit(" ".join(line.split()), " ", "heading"))
            i += 1
            continue
        marker = LIST_MARKER.match(line)
        segments = _line_segments(line, marker.end() if marker else 0)
        in_item = bool(marker)  # inside a list item (a line item, or an inline enumeration's)
        for n, (sentence, sep, enum_start) in enumerate(segments):
            item = "start" if (enum_start or (marker and n == 0)) else ("inside" if in_item else "")
            in_item = in_item or enum_start
            # cut where a topic switch or a spoken run-on's next ask starts (its later clauses open no list item)
            for k, seg in enumerate(_clauses(sentence)):
                seg_sep, seg_item = (sep, item) if k == 0 else (" ", "")
                words, first = seg.split(" "), len(units)
                if len(words) > LONG_PART_WORDS:
                    for w in range(0, len(words), WINDOW_WORDS):
                        units.append(
                            Unit(
                                " ".join(words[w : w + WINDOW_WORDS]),
                                seg_sep if w == 0 else " ",
                                "text" if w == 0 else "window",
                                seg_item if w == 0 else "",
                            )
                        )
                else:
                    units.append(Unit(seg, seg_sep, "text", seg_item))
                units[first].line_start = n == 0 and k == 0
        if segments and not marker and _next_is_list_item(lines, i + 1):
            units[-1].before_list = True
        i += 1
    return units


def _line_run(lines: list[str], start: int) -> int:
    """End of a block of ``>`` quoted lines (one or more) or pasted log lines (two or more); ``start`` if none."""
    for pattern, least in ((_QUOTE_LINE, 1), (_LOG_LINE, 2)):
        j = start
        while j < len(lines) and pattern.match(lines[j]):
            j += 1
        if j - start >= least:
            return j
    return start


class _Fences:
    """Finds the line that closes a code fence; repeated searches stay linear in the number of lines."""

    def __init__(self, lines: list[str]) -> None:
        self._closers = [
            (j, m.group(1)[0], len(m.group(1))) for j, line in enumerate(lines) if (m := _FENCE_CLOSE.match(line))
        ]
        self._found: dict[tuple[str, int], tuple[int, int | None]] = {}

    def closing(self, start: int, fence: str) -> int | None:
        """Index of the first line after ``start`` closing ``fence`` (same character, at least as long)."""
        key = (fence[0], len(fence))
        seen = self._found.get(key)
        if seen is not None and seen[0] < start and (seen[1] is None or seen[1] > start):
            return seen[1]  # an earlier search for this fence found the same answer
        k = bisect.bisect_right(self._closers, (start, "\uffff", 0))
        found = next((j for j, ch, n in self._closers[k:] if ch == key[0] and n >= key[1]), None)
        self._found[key] = (start, found)
        return found


def _next_is_list_item(lines: list[str], j: int) -> bool:
    while j < len(lines) and not lines[j].strip():
        j += 1
    return j < len(lines) and bool(LIST_MARKER.match(lines[j])) and not _FENCE.match(lines[j])


def _line_segments(line: str, marker_end: int) -> list[tuple[str, str, bool]]:
    """Cut one line into ``(sentence, sep, opens_an_inline_enumeration_item)``, whitespace-collapsed."""
    spans = [m.span() for m in _INLINE_CODE.finditer(line)]
    starts = [a for a, _ in spans]

    def in_code(pos: int) -> bool:
        k = bisect.bisect_left(starts, pos) - 1
        return k >= 0 and pos < spans[k][1]

    cuts: dict[int, bool] = {}  # position -> starts an inline enumeration item
    for m in _END_SPACED.finditer(line):
        end = m.end()
        if m.start() < marker_end or in_code(end) or _is_abbreviation(line, m):
            continue
        cuts[_after_trailing_emoji(line, end)] = False
    for m in _END_CJK.finditer(line):
        if m.end() < len(line) and not in_code(m.end()):
            cuts.setdefault(m.end(), False)
    for pos in _enumeration_starts(line, marker_end):
        if not in_code(pos):
            cuts[pos] = True
    out: list[tuple[str, str, bool]] = []
    prev = 0
    for pos in sorted(cuts) + [len(line)]:
        piece = " ".join(line[prev:pos].split())
        if piece:
            sep = " " if (not out or prev == 0 or line[prev - 1].isspace() or line[prev].isspace()) else ""
            out.append((piece, sep, cuts.get(prev, False) and bool(out)))
        prev = pos
    return out


def _clauses(sentence: str) -> list[str]:
    """A sentence cut before a topic switch or a spoken run-on's next ask (:func:`~.switches.clause_cuts`)."""
    cuts = clause_cuts(sentence)
    if not cuts:
        return [sentence]
    words = sentence.split(" ")
    bounds = [0, *cuts, len(words)]
    return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:], strict=False)]


def _is_abbreviation(line: str, m: re.Match[str]) -> bool:
    if m.group(0) != ".":
        return False
    start = m.start()
    while start > 0 and not line[start - 1].isspace():
        start -= 1
    token = line[start : m.end()].lstrip("(\"'\u201c\u00ab").lower()
    if token == "no.":
        rest = line[m.end() :].lstrip()
        return bool(rest) and rest[0].isdigit()
    return token in _ABBREVIATIONS


def _is_emoji(ch: str) -> bool:
    return unicodedata.category(ch) in ("So", "Sk", "Mn", "Cf") or ch == "\ufe0f"


def _after_trailing_emoji(line: str, end: int) -> int:
    """Keep an emoji that follows a sentence end (``Saturday? 🎉 Can …``) with that sentence."""
    pos = end
    while pos < len(line) and line[pos].isspace():
        pos += 1
    start = pos
    while pos < len(line) and not line[pos].isspace():
        if not _is_emoji(line[pos]):
            return end
        pos += 1
    if pos == start or not _NON_SPACE.search(line, pos):
        return end
    return pos


def _enumeration_starts(line: str, marker_end: int) -> list[int]:
    """Starts of items 2, 3, … of an inline enumeration ``1) … 2) … 3) …`` (consecutive numbers)."""
    found = [(int(m.group(1)), m.start()) for m in INLINE_ENUM.finditer(line)]
    starts: list[int] = []
    expected = 1
    for number, pos in found:
        if number == expected:
            if number > 1:
                starts.append(pos)
            expected += 1
        elif number == 1:
            expected = 2
    return starts if starts else []
