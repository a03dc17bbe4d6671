"""Query splitting: a message → at most 8 search parts, one per subject.

The principle (DESIGN §4): merging two subjects into one part is the failure the split exists to fix; splitting one
subject in two costs little, since every part is blended with the whole message and searches on its own. So when
unsure, split: every question or request keeps its own part, a topic switch ("by the way", "anyway", "on another
note", "Also,"... in the languages of :mod:`.split_words`) always opens one, and a piece joins a neighbour only when
it cannot stand alone: a fragment ("Thanks!", "Or anything about them?", "And staging?"), a short statement, a
lead-in with its list or code, or a question leaning on the statement before it by a pronoun whose referent is
there ("I adopted two cats. Do you remember their names?"; "my", "I", "we" never lean).

Two halves: :func:`_units` cuts, :func:`_group_units` joins. The first rule (every piece under 24 characters joined)
is the baseline :func:`ctxret.evaluation.splitting.baseline_split_prompt_chunks`; the fixtures are
``ctxret/data/split_fixture.jsonl`` (145 agent messages) and ``split_switch_cases.jsonl`` (61 held-out topic
switches). Sentence segmenters from PyPI (pysbd, blingfire, syntok, sentencex) measured in place of the cutting
half were less often right on both, or slower (BENCHMARKS.md).
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

from ...errors import InputError
from ...text import _LINE_BREAKS, MAX_PARTS, clean_text
from .words import (
    _CLOSERS,
    _INLINE_ENUM,
    _LIST_MARKER,
    _classify,
    _clause_cuts,
    _is_question,
    _leaning_question,
    _switch_rest,
    _width,
)

__all__ = ["split_prompt_chunks", "MAX_PARTS", "LONG_PART_WORDS", "WINDOW_WORDS", "MIN_PART_CHARS"]

#: A part longer than this many words is cut into windows.
LONG_PART_WORDS = 60
#: Window size, in words, for long parts.
WINDOW_WORDS = 40
#: A part shorter than this many characters joins the part before it.
MIN_PART_CHARS = 24


def split_prompt_chunks(message: str, max_parts: int = MAX_PARTS) -> list[str]:
    """Split an incoming message into at most ``max_parts`` search parts (the principle: the module docstring).

    Returns ``[]`` for an empty or whitespace-only message. Parts are whitespace-collapsed, hold no line breaks and
    cover every non-whitespace character of the (cleaned) message, in order; a whitespace-separated word is only
    ever cut right after a sentence end that needs no space (``。！？``). The rule:

    * Units: cut at line breaks and after sentence ends (``.!?…``, ``؟``, ``।`` before whitespace, closing quotes
      kept; ``。！？`` with or without a space), not after a leading list marker, a title or abbreviation (``Dr.``,
      ``e.g.``), inside inline code or before an emoji that ends the sentence; before each item of an inline
      enumeration (``1) … 2) …``); before a topic switch after a clause mark ("..., and by the way, what ...");
      in a spoken run-on (10+ words, lower-case start or no sentence end, no punctuation inside) before every
      switch and before a joiner ("and", "also"...) opening an ask that stands alone. A closed code fence, a run
      of ``>`` quoted lines or of pasted log lines is one unit; a unit over 60 words is cut into 40-word windows.
    * A unit opening with a topic switch starts a new part, whatever follows it.
    * Asks keep their own part however short: a question (ends with ``?``/``？``/``؟``, opens with ``¿``, ends
      with ``か``, or an unpunctuated line opening with a question word) or a request (an imperative or "please"
      word in English, German, French or Spanish, not followed by "is"; a CJK request form: ``请``, ``…ください``).
    * Fragments join the unit before them (after them when nothing comes before): a unit opening with "or"
      (``oder``, ``ou``, ``还是``...); a non-ask under 24 characters (a CJK character counting 2), such as
      "Thanks!"; a one-word or elliptical question ("Why not?"); a follow-up after "and"/"also"/"but"... that
      points back or repeats the question ("And the rest?", "And for staging?"; "And the VPN host?" names a
      subject: an ask); a later sentence of a list item that is not an ask; a window after the first.
    * A question (not a request) whose first clause leans on the statement right before it by a pronoun joins
      that statement, unless it starts a new line or opens with a switch.
    * A unit ending with ``:`` (or a question right before list items) leads in: it joins the unit after it; a
      block joins the unit before it, or its lead-in (the pair stands alone when the lead-in is an ask).
    * More than ``max_parts`` parts: when fewer than ``max_parts`` parts are asks, every ask keeps its own part
      and the statements between them share the slots left (a stretch with no slot joins the ask before it);
      otherwise neighbours are joined into ``max_parts`` runs of near-equal counts, earlier runs taking the extra.
    """
    if max_parts < 1:
        raise InputError(f"max_parts must be at least 1, got {max_parts}")
    text = clean_text(message)
    units = _units(text)
    groups = _group_units(units)
    if len(groups) > max_parts:
        groups = _cap_groups(groups, max_parts)
    return [_join_units(g.units) for g in groups]


# -- query splitting: units ---------------------------------------------------------------------

#: Closing quotes and brackets that stay with the sentence end before them.
#: Sentence ends that need whitespace after them (``.!?`` plus ``…‼⁇⁈⁉`` and ``؟``/``।``).
_END_SPACED = re.compile(r"[.!?\u2026\u203c\u2047-\u2049\u061f\u0964]+[" + re.escape(_CLOSERS) + r"]*(?=\s)")
#: CJK / full-width sentence ends: a sentence may end there without a space after.
_END_CJK = re.compile(r"[\u3002\uff01\uff1f\uff61][\u3002\uff01\uff1f\uff61!?]*[" + re.escape(_CLOSERS) + r"]*")
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
#: A list marker at the start of a line: bullets (with an optional checkbox), ``1.``, ``1)``, ``(1)``, ``a)``.
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_NON_SPACE = re.compile(r"\S")
#: No sentence end after these (lower-cased, with their dot); "etc." and "a.m." often end a sentence.
_ABBREVIATIONS = frozenset(
    "mr. mrs. ms. dr. prof. st. sr. jr. mt. vs. e.g. i.e. cf. approx. z.b. d.h. bzw. u.a. ca. "
    "nr. sra. mme. mlle. p.ej. inc. ltd. co. corp. dept. fig.".split()
)


@dataclass
class _Unit:
    text: str  # whitespace-collapsed
    sep: str  # what joins it to the unit before: " " or "" (a CJK end with no space after it)
    kind: str = "text"  # "text" | "block" | "window" | "heading"
    item: str = ""  # "start": opens a list item; "inside": a later sentence of a list item
    before_list: bool = False  # the last unit of a line directly followed by list items
    role: str = ""  # set by _roles: "ask" | "stmt" | "frag" | "lead" | "block"
    line_start: bool = False  # the first unit of its line
    switch: bool = False  # set by _roles: opens with a topic switch ("By the way, ..."): always a new part


@dataclass
class _Group:
    units: list[_Unit]
    ask: bool


def _units(text: str) -> list[_Unit]:
    """Cut cleaned text into units: sentences, list items, code and quote blocks, long-text windows."""
    lines = [ln for ln in _LINE_BREAKS.split(text)]
    units: list[_Unit] = []
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
                units.append(_Unit(block, " ", "block"))
                i = closing + 1
                continue
        run = _line_run(lines, i)
        if run > i:
            units.append(_Unit(" ".join(" ".join(lines[i:run]).split()), " ", "block"))
            i = run
            continue
        if _HEADING.match(line):
            units.append(_Unit(" ".join(line.split()), " ", "heading"))
            i += 1
            continue
        marker = _LIST_MARKER.match(line)
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
                            _Unit(
                                " ".join(words[w : w + WINDOW_WORDS]),
                                seg_sep if w == 0 else " ",
                                "text" if w == 0 else "window",
                                seg_item if w == 0 else "",
                            )
                        )
                else:
                    units.append(_Unit(seg, seg_sep, "text", seg_item))
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
    return j < len(lines) and bool(_LIST_MARKER.match(lines[j])) and not _FENCE.match(lines[j])


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
    """A sentence cut before a topic switch or a spoken run-on's next ask (:func:`~.split_words._clause_cuts`)."""
    cuts = _clause_cuts(sentence)
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
    found = [(int(m.group(1)), m.start()) for m in _INLINE_ENUM.finditer(line)]
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


# -- query splitting: roles -----------------------------------------------------------------------


def _roles(units: list[_Unit]) -> None:
    for i, u in enumerate(units):
        if u.kind == "block":
            u.role = "block"
            continue
        short = _width(_LIST_MARKER.sub("", u.text, count=1)) < MIN_PART_CHARS
        if u.kind == "window":
            u.role = "frag" if short else "stmt"
            continue
        last = i == len(units) - 1
        lead = (
            u.kind == "heading" or u.text.rstrip().endswith((":", "\uff1a")) or (u.before_list and _is_question(u.text))
        )
        if lead and not last:
            u.role = "lead"
            continue
        rest = _switch_rest(u.text)
        if rest is not None:  # a topic switch opens a new part, whatever follows it
            u.switch = True
            u.role = "ask" if _is_question(u.text) or _classify(rest) == "ask" else "stmt"
            continue
        kind = _classify(u.text)
        if kind in ("or", "frag"):  # an alternative, or an elliptical follow-up that points back ("And the rest?")
            u.role = "frag"
        elif kind == "ask":
            u.role = "ask"
        elif u.item == "inside" or short:
            u.role = "frag"
        else:
            u.role = "stmt"


def _group_units(units: list[_Unit]) -> list[_Group]:
    """Join fragments, lead-ins and blocks to the asks and statements they belong to."""
    _roles(units)
    groups: list[_Group] = []
    pending: list[_Unit] = []
    i = 0
    while i < len(units):
        u = units[i]
        if u.role == "lead" and i + 1 < len(units) and units[i + 1].role == "block":
            # A lead-in and its block: they stand together when the lead-in is an ask.
            pair = [u, units[i + 1]]
            if _classify(u.text.rstrip(":\uff1a ")) == "ask" and not pending:
                groups.append(_Group(pair, True))
            else:
                pending.extend(pair)
            i += 2
            continue
        if u.role == "ask" and not pending and _leans_on(groups, units, i):
            # "I adopted two cats last spring. Do you remember their names?": the question needs the statement
            groups[-1] = _Group(groups[-1].units + [u], True)
        elif u.role in ("ask", "stmt"):
            groups.append(_Group(pending + [u], u.role == "ask"))
            pending = []
        elif u.role == "lead" or pending or not groups:
            pending.append(u)
        else:  # frag or block after a part: joins it
            groups[-1].units.append(u)
        i += 1
    if pending:
        if groups:
            groups[-1].units.extend(pending)
        else:
            groups.append(_Group(pending, any(u.role == "ask" for u in pending)))
    return groups


def _leans_on(groups: list[_Group], units: list[_Unit], i: int) -> bool:
    """Whether the ask ``units[i]`` leans on the statement part right before it (a pronoun with its referent
    there); a part that is an ask, a list item or a block keeps the question apart."""
    u = units[i]
    # after an ask, a list item, a block, a new line (a new thought) or a topic switch: apart
    if not groups or groups[-1].ask or u.kind != "text" or u.item or u.line_start or u.switch:
        return False
    if units[i - 1] is not groups[-1].units[-1]:
        return False
    before = units[i - 1]
    return before.role == "stmt" and before.kind == "text" and not before.item and _leaning_question(u.text)


def _join_units(units: list[_Unit]) -> str:
    return "".join((u.sep if n else "") + u.text for n, u in enumerate(units))


def _cap_groups(groups: list[_Group], max_parts: int) -> list[_Group]:
    """At most ``max_parts`` groups: asks keep their own part when they can (see :func:`split_prompt_chunks`)."""
    n_ask = sum(g.ask for g in groups)
    if n_ask == 0 or n_ask >= max_parts:
        return _merge_runs(groups, max_parts)
    # Sequence of asks (single groups) and stretches (lists of consecutive statement groups).
    seq: list[_Group | list[_Group]] = []
    for g in groups:
        if g.ask:
            seq.append(g)
        elif seq and isinstance(seq[-1], list):
            seq[-1].append(g)
        else:
            seq.append([g])
    slots = max_parts - n_ask
    while sum(isinstance(x, list) for x in seq) > slots:
        # The smallest stretch (the latest on ties) joins the ask before it (after it when first).
        idx = min(
            (i for i, x in enumerate(seq) if isinstance(x, list)),
            key=lambda i: (len(seq[i]), -i),  # type: ignore[arg-type]  # only the stretches (lists) are keyed
        )
        stretch = seq.pop(idx)
        assert isinstance(stretch, list)
        units = [u for g in stretch for u in g.units]
        if idx > 0:
            seq[idx - 1].units.extend(units)  # type: ignore[union-attr]
        else:
            seq[0] = _Group(units + seq[0].units, True)  # type: ignore[union-attr]
    stretches = [x for x in seq if isinstance(x, list)]
    alloc = [1] * len(stretches)
    for _ in range(slots - len(stretches)):
        best = max(
            (i for i in range(len(stretches)) if alloc[i] < len(stretches[i])),
            key=lambda i: (len(stretches[i]) / alloc[i], -i),
            default=None,
        )
        if best is None:
            break
        alloc[best] += 1
    out: list[_Group] = []
    n = 0
    for x in seq:
        if isinstance(x, list):
            out.extend(_merge_runs(x, alloc[n]))
            n += 1
        else:
            out.append(x)
    return out


def _merge_runs(groups: list[_Group], n_runs: int) -> list[_Group]:
    """Join neighbours into ``n_runs`` contiguous runs of near-equal counts (earlier runs get the extra)."""
    size, extra = divmod(len(groups), n_runs)
    runs: list[_Group] = []
    start = 0
    for r in range(n_runs):
        end = start + size + (1 if r < extra else 0)
        chunk = groups[start:end]
        runs.append(_Group([u for g in chunk for u in g.units], any(g.ask for g in chunk)))
        start = end
    return runs
