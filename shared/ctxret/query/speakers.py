"""A named speaker's own words first: a part that names one of the thread's speakers ranks what that speaker said
above what others said, among its first candidates.

A memory is mostly said in the first person by the one it is about ("I bike to work every day", said by Tim), and a
question about it names that person in the third ("How does Tim get to work?"). The two are worded apart: the local
model scores that pair 0.09; and for "What language is John learning?" the other speaker's "I'm learning German now"
ranks above John's own "I'm learning Spanish on Duolingo every night". The search already knows who said each candidate
(the ``source_name`` a user's or assistant's message's ``name`` was stored as; tools are not speakers), so when a part
names **exactly one** of the speakers among its candidates (the whole name, as a word, in its case: "Tim", "Tim's"), the
candidates that speaker said move, in their order, above the others among the part's first :data:`DEPTH` candidates
(:func:`speakers_first`); nothing else moves, and every hit stays in the group. A part that names no speaker, or two
("Did Tim and John ..."), keeps its ranking, and so do threads whose messages carry no names (the adapters store a
message's ``name`` when it has one).

A moved hit takes the score of the first hit it passed and keeps at least its ``relevance`` (``passed``), so the
group's scores stay in order and a threshold on the relevance the adapters show keeps what it kept before, the moved
hits with it (the adapters show a group's relevance non-increasing: a moved hit shown at its own, lower relevance
would cut every hit under it). It keeps its own cosine and faces the floor on its own: unlike a stored question's
answer it does not stand or fall with the hit it passed, as a line far from the part is no answer for being the
named speaker's.

The stage runs after the answers of stored questions are lifted (:mod:`.answers`), and a lifted answer and the
question under it move as one: "When does Alice's flight leave?" keeps the assistant's booking above Alice's
request. (Run before the lift, it cost QA recall@5: the lift then reaches the named speaker's questions moved into
the first ``k`` and puts the other speaker's replies above the named speaker's statements.) It runs before the
latest fact first (:mod:`.latest`): the latest of a speaker's statements about one subject still comes first.

Only candidates whose metadata the search holds take part: a thread-scoped search (every memory search through the
adapters) always; an unscoped search over Chroma reads its candidates' metadata only for the hits it keeps.

Measured on LoCoMo dev (``ctxret eval threads ../shared/data/locomo-dev --representations
hybrid_default,hybrid_no_speakers --query-sets facts,qa,updates,updates_twice``; BENCHMARKS "A named speaker's own
words first").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..storage.base import Deferred

__all__ = ["DEPTH", "SPEAKER_KEY", "SPEAKING", "named_speaker", "speakers_first"]

#: Among how many of a part's first candidates a named speaker's hits move up (twice the default ``k``).
DEPTH = 10

#: The metadata key a message's speaker name is stored under (:mod:`ctxret.ingest.pieces`).
SPEAKER_KEY = "source_name"


#: The sources that speak: a tool's name (``search``, ``calculator``) is no speaker, and a part that says "search"
#: asks for no tool's output first.
SPEAKING = frozenset({"user", "assistant"})


def _speaker(meta: Any) -> str | None:
    if isinstance(meta, Deferred) or not hasattr(meta, "get") or meta.get("source_kind") not in SPEAKING:
        return None
    name = meta.get(SPEAKER_KEY)
    return name if isinstance(name, str) and name.strip() else None


def named_speaker(part: str, names: Iterable[str]) -> str | None:
    """The one name of ``names`` that ``part`` holds as a whole word (case-sensitive; "Tim's" holds "Tim"), or
    ``None`` when it holds none or more than one. A name inside a longer word ("Timothy", "Ann" in "Anna") or next
    to a letter or digit does not count; one name that is part of another ("Ann", "Ann Lee") counts as the longer."""
    found: list[str] = []
    for name in sorted({n.strip() for n in names if n and n.strip()}, key=len, reverse=True):
        if any(name in longer for longer in found):
            continue
        if re.search(r"(?<![\w])" + re.escape(name) + r"(?![\w])", part):
            found.append(name)
            if len(found) > 1:
                return None
    return found[0] if found else None


def speakers_first(c: Any, depth: int = DEPTH) -> Any:
    """``c`` (a part's :class:`~.search.PartCandidates`, ranked) with the hits of the one speaker its part names
    moved above the others among its first ``depth`` candidates, at the score of the first hit they passed (and at
    least its relevance: ``c.passed``); a lifted answer and the stored question right under it move as one, when
    either was said by that speaker (see the module docstring)."""
    if len(c.ranked) < 2:
        return c
    head = c.ranked[:depth]
    said = {rid: _speaker(c.info[rid][1]) if rid in c.info else None for rid, _ in head}
    name = named_speaker(c.part, (s for s in said.values() if s is not None))
    if name is None:
        return c
    units: list[list[tuple[str, float]]] = []
    for i, (rid, score) in enumerate(head):
        joined = c.lifted.get(head[i - 1][0]) == rid or c.follows.get(rid) == head[i - 1][0] if i else False
        if joined and len(units[-1]) == 1:
            units[-1].append((rid, score))  # a question and the answer lifted above it or the reply under it
        else:
            units.append([(rid, score)])
    mine = [u for u in units if any(said[rid] == name for rid, _ in u)]
    others = [u for u in units if not any(said[rid] == name for rid, _ in u)]
    if not mine or not others:
        return c
    above = others[0][0][1]
    first = units.index(others[0])
    ranked = [(rid, s) for u in mine[:first] for rid, s in u]
    ranked += [(rid, above) for u in mine[first:] for rid, _ in u]
    ranked += [hit for u in others for hit in u] + list(c.ranked[depth:])
    passed = {rid: others[0][0][0] for u in mine[first:] for rid, _ in u}
    return replace(c, ranked=ranked, passed={**c.passed, **passed})
