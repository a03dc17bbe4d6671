"""Answers above questions: a stored question that matches a part lifts the answer that follows it.

A part that asks ("When does my flight leave?", "What did Caroline research?") is worded like the stored question
that asked the same thing ("When does the flight leave?", "What are you researching, Caroline?"), so that question
outranks the stored answer, whose words differ ("Booked TAP flight TP 541, departing at 09:40"). When a part asks,
each of its candidates that is a stored question or request (:func:`~.split.asking.asks` reads its text; a question mark
ends it) lifts the first piece of the **next source of its turn** — the reply that follows it (an assistant or
tool step after a user message; the next utterance in a conversation of speakers) — when that piece is among the
part's candidates: the answer takes the question's place and score, the question follows it, both stay in the
group (:func:`lift_answers`), and the answer's ``relevance`` is at least the question's
(:func:`~.rerank.finish_groups`). A part that states something (a fact being looked up) keeps its ranking: the
stored question may be the very statement it looks for ("Did you enjoy the concert at the Staples Center?").

**The assistant's reply to the user is not lifted above the question.** It is the agent's own words: a recollection
that may be wrong ("You work at Acme Corp", after the user said Globex) or a report of what it did. Taking the place
and the relevance of a question the user asked before, a wrong answer would be recalled as the best evidence the next
time the user asks (relevance 0.99 against its own 0.18). So it **follows** the question, right under it at its score,
standing with it against the floor but keeping the ``relevance`` of its own text (``PartCandidates.follows``); in an
agent's memory the user's statements of the same fact also rank above it (:mod:`.latest`, ``user_first``). A
tool's result, the user's answer to the assistant, and the next speaker's utterance in a conversation of people
(LoCoMo's, where every speaker is a user) are lifted as before.

Only candidates whose metadata the search holds take part: a thread-scoped search (every memory search through the
adapters) always; an unscoped search over Chroma reads its candidates' metadata only for the hits it keeps, so its
answers are not lifted.

Measured on LoCoMo dev (``ctxret eval threads ../shared/data/locomo-dev --query-sets qa,facts
--representations hybrid_default,hybrid_no_answers``; BENCHMARKS "Answers above questions and the latest fact
first"): the top hit of a QA search was a stored question while the utterance after it held the evidence for 9.3% of
the questions (0.7% with the lift); evidence recall@5 +6.7 points [+4.7, +8.6]; facts unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..storage.base import Deferred
from .split.asking import asks

__all__ = ["is_question", "lift_answers"]


def is_question(text: str) -> bool:
    """Whether a stored piece's text asks: it ends with a question mark, or reads as a question or request."""
    body = text.rstrip()
    return body.endswith(("?", "？")) or asks(body)


def _own_reply(question: Mapping[str, Any], answer: Any) -> bool:
    """Whether ``answer`` (a stored reply's metadata) is the assistant's reply to the user's ``question``: the agent's
    own words, which follow the question rather than being lifted above it."""
    return (
        isinstance(answer, Mapping)
        and answer.get("source_kind") == "assistant"
        and question.get("source_kind") == "user"
    )


def _key(meta: Mapping[str, Any]) -> tuple[Any, Any, int, int] | None:
    try:
        return meta["thread_id"], meta["turn_id"], int(meta["source_ordinal"]), int(meta["ordinal"])
    except (KeyError, TypeError, ValueError):
        return None


def lift_answers(c: Any, depth: int | None = None) -> Any:
    """``c`` (a part's :class:`~.search.PartCandidates`, ranked) with each stored question's answer moved right above
    it at the question's score (see the module docstring); ``c.lifted`` maps each lifted answer to its question. The
    assistant's reply to the user's question moves right under it instead, at its score (``c.follows``).
    ``depth``: only the questions among the first ``depth`` candidates lift (those a group can hold)."""
    if len(c.ranked) < 2 or not asks(c.part):
        return c
    where: dict[tuple[Any, Any, int, int], str] = {}
    for rid, (_, meta) in c.info.items():
        if not isinstance(meta, Deferred) and (key := _key(meta)) is not None:
            where[key] = rid
    if not where:
        return c
    rank = {rid: i for i, (rid, _) in enumerate(c.ranked)}
    out: list[tuple[str, float]] = []
    placed: set[str] = set()
    lifted: dict[str, str] = {}
    follows: dict[str, str] = {}
    for i, (rid, score) in enumerate(c.ranked):
        if rid in placed:
            continue
        doc, meta = c.info[rid]
        key = None if isinstance(meta, Deferred) or (depth is not None and i >= depth) else _key(meta)
        answer = None
        if key is not None and is_question(str(meta.get("body", doc))):
            answer = where.get((key[0], key[1], key[2] + 1, 0))
            if answer is None or answer in placed or rank[answer] < rank[rid]:
                answer = None
            elif not _own_reply(meta, c.info[answer][1]):
                out.append((answer, score))
                placed.add(answer)
                lifted[answer] = rid
                answer = None
        out.append((rid, score))
        placed.add(rid)
        if answer is not None:  # the assistant's reply to the user: right under the question, on its own relevance
            out.append((answer, score))
            placed.add(answer)
            follows[answer] = rid
    if not lifted and not follows:
        return c
    return replace(c, ranked=out, lifted={**c.lifted, **lifted}, follows={**c.follows, **follows})
