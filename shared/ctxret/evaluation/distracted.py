"""The ``distracted`` query set: each question asked as agents receive it, after other talk and a switch of subject.

``ctxret eval threads PATH --query-sets distracted`` builds, for every question of a conversation (the ``qa`` set:
questions that carry evidence), one message: two long utterances of the same conversation that hold none of the
question's evidence, a topic-switch phrase and the question ("<utterance> <utterance> And by the way, when did
Caroline go to the support group?"). The utterances, the phrase and its case are drawn with a seeded generator per
question (``--seed``), so a run is repeatable; the phrases vary (:data:`SWITCH_PHRASES`).

Per question and representation (:func:`score_distracted`; the representation's own search, the runtime's for
``hybrid_default``):

* ``recall``: the evidence recall of the top ``k`` of the group holding the question (the part in which the
  question's first word lies; a representation with one ranking: that ranking);
* ``recall_alone``: the same representation's recall when the question is asked alone (the ``qa`` set's metric: its
  best group);
* ``recall_whole``: the runtime's default search of the whole message as one part (``search(split=False)``: one
  whole-message vector, and BM25 on the whole message), the same for every representation;
* ``merged``: 1 when the part holding the question also holds words of the statements before the switch phrase.

:func:`distracted_rows` gives one row per representation (``recall_at_k``, ``recall_alone``, ``recall_whole``,
``kept``: the distracted recall as a share of the recall alone, ``merged``: the share of questions merged into a
statement); :func:`distracted_comparison` pairs ``recall`` against ``recall_alone`` and ``recall_whole`` per query
(95% intervals, :mod:`.stats`).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .datasets import Conversation, Query
from .hybrid import RUNTIME_DEFAULT, hybrid_candidates
from .index import ConversationIndex, Ranked, Retrieval
from .metrics import evidence_recall, mean
from .scoring import score_query
from .stats import compare

__all__ = [
    "DISTRACTED",
    "SWITCH_PHRASES",
    "DistractedQuery",
    "distracted_comparison",
    "distracted_queries",
    "distracted_rows",
    "score_distracted",
    "unsplit_default",
]

#: The query set's name (``--query-sets distracted``).
DISTRACTED = "distracted"
#: What stands between the statements and the question, one drawn per question.
SWITCH_PHRASES = tuple(
    "And by the way,|By the way,|Anyway,|Also,|On another note,|Oh and,|Oh, and|Btw,|Quick question:|Unrelated, but|"
    "Separately,|Totally unrelated, but|One more thing:|Speaking of which,|Anyway, unrelated:".split("|")
)
#: An utterance counts as long from this many words; longer than :data:`MAX_WORDS` ones are not drawn (a window of
#: their own would be cut anyway).
MIN_WORDS, MAX_WORDS = 12, 60
_PHOTO = re.compile(r"\s*\[shares a photo:[^\]]*\]")
#: First words that lose their capital after a phrase ("Anyway, when did ..."); names keep theirs.
_LOWER_FIRST = frozenset(
    "what when where who whom whose why how which is are was were do does did has have had can could would will "
    "should may might in on at for from according".split()
)


@dataclass(frozen=True)
class DistractedQuery:
    """One question inside a distracted message; ``statements_end``: where the statements end (the switch phrase
    begins), ``question_at``: where the question begins, both counted in non-whitespace characters of ``text``."""

    id: str
    text: str
    question: Query
    statements_end: int
    question_at: int


def _nonws(text: str) -> int:
    return len("".join(text.split()))


def _sentence(text: str) -> str:
    text = " ".join(_PHOTO.sub("", text).split())
    return text if text.endswith((".", "!", "?", "…")) else text + "."


def distracted_queries(conv: Conversation, limit: int | None = None, seed: int = 0) -> list[DistractedQuery]:
    """One distracted message per question of ``conv`` (the first ``limit``), fixed by ``seed`` and the question id.

    The two statements are long utterances (:data:`MIN_WORDS`–:data:`MAX_WORDS` words) of the conversation whose
    evidence unit is none of the question's, in thread order; a conversation with fewer than two such utterances
    gives that question no message."""
    pool: list[tuple[str, str]] = []  # (evidence unit, text) in thread order
    for turn in conv.turns:
        for src in turn.sources:
            text = _sentence(src.text)
            if MIN_WORDS <= len(text.split()) <= MAX_WORDS:
                pool.append((conv.unit_of(turn.index, src.ordinal), text))
    out: list[DistractedQuery] = []
    for q in conv.questions[:limit] if limit else conv.questions:
        rng = random.Random(f"{seed}/distracted/{q.id}")
        allowed = [i for i, (unit, _) in enumerate(pool) if unit not in q.evidence]
        if len(allowed) < 2:
            continue
        first, second = sorted(rng.sample(allowed, 2))
        phrase = rng.choice(SWITCH_PHRASES)
        question = " ".join(q.text.split())
        head = question.split(" ", 1)[0]
        if head.lower() in _LOWER_FIRST and not phrase.endswith(":"):
            question = head.lower() + question[len(head) :]
        statements = f"{pool[first][1]} {pool[second][1]}"
        text = f"{statements} {phrase} {question}"
        end = _nonws(statements)
        out.append(DistractedQuery(f"{q.id}/d", text, q, end, end + _nonws(phrase)))
    return out


def _question_part(parts: Sequence[str], dq: DistractedQuery) -> tuple[int, bool]:
    """The index of the part in which the question begins, and whether that part also holds statement text (it
    starts before the statements end)."""
    start = 0
    for i, part in enumerate(parts):
        end = start + _nonws(part)
        if end > dq.question_at:
            return i, start < dq.statements_end
        start = end
    return max(len(parts) - 1, 0), True


def unsplit_default(ix: ConversationIndex, message: str) -> Retrieval:
    """The runtime's default search of ``message`` as one part (``search(split=False)``): one whole-message vector
    on the dense side and the whole message for BM25, fused as the default fuses."""
    parts, q = ix.query(message, split=False)
    if not parts:
        return Retrieval("pieces", True, [])
    cands = hybrid_candidates(
        ix.exact_store(ix.default_stored), ix.conv.id, parts, q, k=ix.k, fusion=RUNTIME_DEFAULT, embedder=ix.emb
    )
    return Retrieval("pieces", True, ix.ranked(cands, RUNTIME_DEFAULT.lexical_floor))


def _group_recall(ix: ConversationIndex, group: Ranked | None, q: Query, k: int, level: str) -> float:
    if group is None:
        return evidence_recall([], q.evidence)
    units = ix.units(level)
    return evidence_recall([units[i] for i in group.items[:k]], q.evidence)


def score_distracted(
    ix: ConversationIndex,
    fn: Callable[[ConversationIndex, str], Retrieval],
    dq: DistractedQuery,
    k: int,
    floor: float | None,
    whole: float | None = None,
) -> dict[str, float]:
    """``recall``, ``recall_alone``, ``recall_whole`` and ``merged`` of one distracted message (module docstring).
    ``whole``: the whole-message recall when already known (it is the same for every representation)."""
    parts, _ = ix.query(dq.text, split=True)
    index, merged = _question_part(parts, dq)
    ret = fn(ix, dq.text)
    if ret.grouped and len(ret.groups) == len(parts):
        group: Ranked | None = ret.groups[index]
    else:
        group = ret.groups[0] if ret.groups else None
        merged = merged or not ret.grouped
    if whole is None:
        whole_ret = unsplit_default(ix, dq.text)
        whole = _group_recall(ix, whole_ret.groups[0] if whole_ret.groups else None, dq.question, k, "pieces")
    return {
        "recall": _group_recall(ix, group, dq.question, k, ret.level),
        "recall_alone": score_query(ix, fn(ix, dq.question.text), dq.question, k, floor)["recall"],
        "recall_whole": whole,
        "merged": 1.0 if merged else 0.0,
        "parts": float(len(parts)),
    }


def distracted_rows(
    per_query: Sequence[dict[str, Any]], representations: Sequence[str], recall_key: str = "recall_at_5"
) -> list[dict[str, Any]]:
    """One row per representation that ran the set: ``recall_key`` (the question's group), ``recall_alone``,
    ``recall_whole``, ``kept`` (distracted recall / recall alone), ``merged`` (share of questions merged), ``n``."""
    rows = []
    for rep in representations:
        mine = [r for r in per_query if r["representation"] == rep and r["query_set"] == DISTRACTED]
        if not mine:
            continue
        recall, alone = mean([r["recall"] for r in mine]), mean([r["recall_alone"] for r in mine])
        rows.append(
            {
                "representation": rep,
                "query_set": DISTRACTED,
                recall_key: recall,
                "recall_alone": alone,
                "recall_whole": mean([r["recall_whole"] for r in mine]),
                "kept": recall / alone if alone else float("nan"),
                "merged": mean([r["merged"] for r in mine]),
                "n": len(mine),
            }
        )
    return rows


def distracted_comparison(per_query: Sequence[dict[str, Any]], recall_key: str = "recall_at_5") -> list[dict[str, Any]]:
    """Each representation's recall in the question's group against the question asked alone and against one
    whole-message search, paired per query (:func:`.stats.compare`)."""
    out: list[dict[str, Any]] = []
    reps = dict.fromkeys(r["representation"] for r in per_query if r["query_set"] == DISTRACTED)
    for rep in reps:
        rows = {r["query_id"]: r for r in per_query if r["representation"] == rep and r["query_set"] == DISTRACTED}
        mine = {i: {"conversation": r["conversation"], "recall": r["recall"]} for i, r in rows.items()}
        for key, name in (("recall_alone", "asked alone"), ("recall_whole", "one whole-message search")):
            theirs = {i: {"conversation": r["conversation"], "recall": r[key]} for i, r in rows.items()}
            paired = compare(mine, theirs, "recall", changed=True)
            if paired is not None:
                head = {"system": f"{rep} (distracted)", "peer": name, "query_set": DISTRACTED, "metric": recall_key}
                out.append({**head, **paired})
    return out
