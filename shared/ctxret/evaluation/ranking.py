"""A named speaker's words first, answers above questions and the latest fact first, measured: opt-in
representations with each turned off, the metrics that show them, and their paired comparison with the default.

Representations (opt-in: name them in ``--representations``), each the runtime's default hybrid search with
one ranking step of :meth:`ctxret.query.executor.SearchRun.reranked` off:

* ``hybrid_no_answers``: ``answers_first=False`` (:mod:`ctxret.query.answers`);
* ``hybrid_no_latest``: ``latest_first=False`` (:mod:`ctxret.query.latest`);
* ``hybrid_no_speakers``: ``speakers_first=False`` (:mod:`ctxret.query.speakers`);
* ``hybrid_no_user``: ``user_first=False`` (:mod:`ctxret.query.latest`: in an agent's memory, the user's latest
  statement first; a thread of speakers without an assistant, LoCoMo's, is unchanged by it);
* ``hybrid_before``: answers and latest off (the ranking before either);
* ``hybrid_no_latest_speakers``: latest and speakers off (the ranking before the two).

Metrics (``facts`` and ``qa``; the best group, as for the other metrics):

* ``top1_evidence``: the top hit holds one of the query's evidence units (stricter than ``top1_section``: the
  right utterance, not only its session);
* ``question_top``: the top hit is a stored question (:func:`ctxret.query.answers.is_question`) that holds none of
  the evidence, while the utterance right after it in its section does: the case ``answers_first`` is for.

:func:`ranking_comparison` pairs ``hybrid_default`` with each of them per query (95% intervals) on these, on
``top1_section`` / ``recall`` / composite ``coverage``, and on the ``updates`` set (:mod:`.updates`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..query.answers import is_question
from .hybrid import RUNTIME_DEFAULT
from .index import ConversationIndex, Retrieval
from .representations import hybrid_groups, register_representation
from .scoring import best_group
from .stats import by_query, compare

__all__ = ["RANKING_REPRESENTATIONS", "answer_metrics", "ranking_comparison"]


def _without(
    *, answers_first: bool = True, latest_first: bool = True, speakers_first: bool = True, user_first: bool = True
) -> Any:
    def rep(ix: ConversationIndex, message: str) -> Retrieval:
        groups = hybrid_groups(
            ix,
            message,
            RUNTIME_DEFAULT,
            answers_first=answers_first,
            latest_first=latest_first,
            speakers_first=speakers_first,
            user_first=user_first,
        )
        return Retrieval("pieces", True, groups)

    return rep


RANKING_REPRESENTATIONS = {
    "hybrid_no_answers": _without(answers_first=False),
    "hybrid_no_latest": _without(latest_first=False),
    "hybrid_no_speakers": _without(speakers_first=False),
    "hybrid_no_user": _without(user_first=False),
    "hybrid_before": _without(answers_first=False, latest_first=False),
    "hybrid_no_latest_speakers": _without(latest_first=False, speakers_first=False),
}
for _name, _rep in RANKING_REPRESENTATIONS.items():
    register_representation(_name, _rep, default=False)


def answer_metrics(ix: ConversationIndex, ret: Retrieval, q: Any) -> dict[str, float]:
    """``top1_evidence`` and ``question_top`` of one query (see the module docstring)."""
    if ret.level != "pieces" or not q.evidence:
        return {}
    g = best_group(ret.groups)
    if g is None:
        return {"top1_evidence": 0.0, "question_top": 0.0}
    top = ix.pieces[int(g.items[0])]
    holds = bool(ix.piece_units[int(g.items[0])] & q.evidence)
    after = ix.conv.unit_of(top.turn_index, top.source_ordinal + 1)
    asked = not holds and after in q.evidence and is_question(top.body)
    return {"top1_evidence": 1.0 if holds else 0.0, "question_top": 1.0 if asked else 0.0}


#: (query set, metric) pairs compared.
RANKING_METRICS = (
    ("facts", "top1_section"),
    ("facts", "top1_evidence"),
    ("qa", "top1_section"),
    ("qa", "top1_evidence"),
    ("qa", "question_top"),
    ("qa", "recall"),
    ("qa", "mrr"),
    ("composite", "coverage"),
    ("updates", "latest_first"),
    ("updates", "latest_top1"),
    ("updates", "both_kept"),
    ("updates_twice", "latest_first"),
    ("updates_twice", "latest_top1"),
    ("updates_twice", "first_top1"),
)


def ranking_comparison(
    per_query: Sequence[dict[str, Any]], recall_key: str = "recall_at_5", system: str = "hybrid_default"
) -> list[dict[str, Any]]:
    """``system`` against each representation of :data:`RANKING_REPRESENTATIONS` in the run, paired per query."""
    by = by_query(per_query)
    out: list[dict[str, Any]] = []
    for peer in RANKING_REPRESENTATIONS:
        for qs, metric in RANKING_METRICS:
            mine, theirs = by.get((system, qs)), by.get((peer, qs))
            if not mine or not theirs:
                continue
            paired = compare(mine, theirs, metric, changed=True)
            if paired is not None:
                name = recall_key if metric == "recall" else metric
                out.append({"system": system, "peer": peer, "query_set": qs, "metric": name, **paired})
    return out
