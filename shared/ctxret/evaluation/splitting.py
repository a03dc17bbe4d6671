"""How well the query splitter finds the asks of a message: part accuracy on a labelled fixture.

Fixture (JSONL, one object per line; the packaged one is ``ctxret/data/split_fixture.jsonl``)::

    {"id": "q-vpn-runbook-billing",
     "message": "Is the VPN down? Where is the runbook? Who owns billing?",
     "parts": ["Is the VPN down?", "Where is the runbook?", "Who owns billing?"],
     "note": "three short questions, each its own ask"}

``parts`` are what a careful reader calls the separate asks and statements of ``message``, in
order; together they hold every non-whitespace character of the message.

Scores (:func:`part_accuracy`)

* ``exact``: the share of messages whose part list matches exactly after whitespace
  normalisation. Parts are contiguous and in order, so two part lists match exactly when they cut
  the message at the same places; whitespace is ignored when comparing (a CJK sentence end needs no
  space, so "？它" and "？ 它" are the same cut).
* ``precision`` / ``recall`` / ``f1``: per-boundary scores pooled over all messages. A boundary
  is the position (counted in non-whitespace characters) where a part starts, the first part
  excepted; a message with one expected and one predicted part has no boundaries and adds nothing.

:func:`baseline_split_prompt_chunks` is the first splitting rule (line breaks and ``.!?``, 60/40-word windows,
under 24 characters joined), kept as the baseline.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..query.split import LONG_PART_WORDS, MIN_PART_CHARS, WINDOW_WORDS, split_prompt_chunks
from ..text import MAX_PARTS, clean_text

__all__ = [
    "FIXTURE",
    "SWITCH_CASES",
    "SplitRecord",
    "SplitScore",
    "load_split_fixture",
    "part_accuracy",
    "part_boundaries",
    "baseline_split_prompt_chunks",
]

Splitter = Callable[[str], Sequence[str]]
#: The packaged fixtures: 145 hand-labelled agent messages, and 61 held-out topic switches (agent chats, support
#: tickets, voice run-ons, Slack-style messages; English, German, French, Spanish, Japanese, Chinese) written before
#: the switch rule and labelled by DESIGN §4's principle.
FIXTURE, SWITCH_CASES = "split_fixture.jsonl", "split_switch_cases.jsonl"


@dataclass(frozen=True)
class SplitRecord:
    """One labelled message of the split fixture."""

    id: str
    message: str
    parts: tuple[str, ...]
    note: str = ""


@dataclass(frozen=True)
class SplitScore:
    """Part accuracy of a splitter on a fixture (fractions 0–1)."""

    n: int
    exact: float
    precision: float
    recall: float
    f1: float
    #: ``(id, expected parts, predicted parts)`` of every message not matched exactly.
    misses: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = field(default=(), repr=False)


def _nonws(text: str) -> str:
    return "".join(text.split())


def load_split_fixture(path: str | Path | None = None, *, packaged: str = FIXTURE) -> list[SplitRecord]:
    """Read a split fixture (JSONL); ``None`` reads the packaged file ``packaged`` (:data:`FIXTURE`, the 145 agent
    messages, or :data:`SWITCH_CASES`, the held-out topic switches). Every record is checked."""
    if path is None:
        text = (resources.files("ctxret") / "data" / packaged).read_text("utf-8")
        where = packaged
    else:
        path = Path(path)
        if not path.is_file():
            raise InputError(f"split fixture {str(path)!r} does not exist; pass a JSONL file")
        text = path.read_text("utf-8")
        where = path.name
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise InputError(f"{where} line {n}: not JSON ({e}); write one JSON object per line") from None
        records.append(_record(obj, f"{where} line {n}"))
    return records


def _record(obj: Any, where: str) -> SplitRecord:
    if isinstance(obj, SplitRecord):
        return obj
    if not isinstance(obj, Mapping):
        raise InputError(f"{where}: expected an object with 'id', 'message' and 'parts', got {type(obj).__name__}")
    missing = [k for k in ("id", "message", "parts") if k not in obj]
    if missing:
        raise InputError(
            f"{where}: missing {', '.join(map(repr, missing))}; each record needs 'id', 'message' and 'parts'"
        )
    message, parts = obj["message"], obj["parts"]
    if (
        not isinstance(message, str)
        or not isinstance(parts, list)
        or not all(isinstance(p, str) and p.strip() for p in parts)
    ):
        raise InputError(f"{where}: 'message' must be a string and 'parts' a list of non-empty strings")
    if _nonws("".join(parts)) != _nonws(clean_text(message)):
        raise InputError(
            f"{where} ({obj['id']!r}): the parts do not cover the message; together they must hold every "
            "non-whitespace character of the message, in order"
        )
    return SplitRecord(str(obj["id"]), message, tuple(" ".join(p.split()) for p in parts), str(obj.get("note", "")))


def part_boundaries(parts: Sequence[str]) -> frozenset[int]:
    """Where parts 2, 3, … start, counted in non-whitespace characters from the message start."""
    out, pos = set(), 0
    for p in parts[:-1]:
        pos += len(_nonws(p))
        out.add(pos)
    return frozenset(out)


def part_accuracy(
    fixture: Iterable[SplitRecord | Mapping[str, Any]] | str | Path | None = None,
    splitter: Splitter = split_prompt_chunks,
) -> SplitScore:
    """Exact-match part accuracy and pooled per-boundary precision, recall and F1 of ``splitter``.

    ``fixture``: records (or dicts with ``id``/``message``/``parts``), a JSONL path, or ``None`` for
    the packaged fixture. ``splitter`` takes a message and returns its parts (default: the runtime's
    :func:`ctxret.query.split.split_prompt_chunks`).
    """
    if fixture is None or isinstance(fixture, (str, Path)):
        records = load_split_fixture(fixture)
    else:
        records = [_record(r, f"record {i}") for i, r in enumerate(fixture)]
    if not records:
        raise InputError("the split fixture has no records; add at least one message with its parts")
    exact = tp = fp = fn = 0
    misses = []
    for r in records:
        got = [" ".join(p.split()) for p in splitter(r.message)]
        want, have = part_boundaries(r.parts), part_boundaries(got)
        if [_nonws(p) for p in got] == [_nonws(p) for p in r.parts]:
            exact += 1
        else:
            misses.append((r.id, r.parts, tuple(got)))
        tp += len(want & have)
        fp += len(have - want)
        fn += len(want - have)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return SplitScore(len(records), exact / len(records), precision, recall, f1, tuple(misses))


# -- the first rule (baseline) --------------------------------------------------------------------
_BASELINE_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x1c\x1d\x1e\x85]+")
_BASELINE_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def baseline_split_prompt_chunks(message: str, max_parts: int = MAX_PARTS) -> list[str]:
    """The baseline splitter: line breaks and ``.!?``; 60/40-word windows; under 24 characters joins; 8 runs."""
    if max_parts < 1:
        raise InputError(f"max_parts must be at least 1, got {max_parts}")
    pieces: list[str] = []
    for line in _BASELINE_LINE_BREAKS.split(clean_text(message)):
        for raw in _BASELINE_SENTENCE_END.split(line):
            sentence = " ".join(raw.split())
            if not sentence:
                continue
            words = sentence.split(" ")
            if len(words) > LONG_PART_WORDS:
                pieces.extend(" ".join(words[i : i + WINDOW_WORDS]) for i in range(0, len(words), WINDOW_WORDS))
            else:
                pieces.append(sentence)
    joined: list[str] = []
    for piece in pieces:
        if joined and len(piece) < MIN_PART_CHARS:
            joined[-1] = f"{joined[-1]} {piece}"
        else:
            joined.append(piece)
    if len(joined) > 1 and len(joined[0]) < MIN_PART_CHARS:
        joined[1] = f"{joined[0]} {joined[1]}"
        del joined[0]
    if len(joined) > max_parts:
        size, extra = divmod(len(joined), max_parts)
        runs, start = [], 0
        for r in range(max_parts):
            end = start + size + (1 if r < extra else 0)
            runs.append(" ".join(joined[start:end]))
            start = end
        joined = runs
    return joined
