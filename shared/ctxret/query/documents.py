"""Grouped hits → one ranked entry per document: the rule behind a per-document result.

A search returns one :class:`~ctxret.results.Group` of pieces per query part; a documents user wants
the top documents instead, each once, with a document score. :func:`rank_documents` is that step, a
pure function of the hits (no store, no embedder), so the search can call it on its own groups::

    groups = run_search(plan, message, scope, embedder, store)        # pieces, k per part
    docs = rank_documents(groups, rule=DEFAULT_RULE, k=k)              # documents, best first

Rules (``rule=``), each giving a document's score within one group from its hits' ``score``:

* ``"max"`` — its best hit (the document ranks where its first piece does: "first appearance").
* ``"max_mean"`` — best hit plus ``alpha`` times the mean of its hits in the group.
* ``"top2"`` (the default, ``alpha`` 0.25) — best hit plus ``alpha`` times its second-best (0 when it has one hit).
* ``"sum"`` — the sum of its hits' scores.

Across groups (query parts) a document takes its best group score (``across="max"``) or the sum of them
(``across="sum"``). Ties keep first appearance (the group order, then the hit order). The key of a hit's
document is ``(thread_id, doc_id)`` for a document section (``doc_id`` in its metadata), else
``(thread_id, turn_id)``: a chat turn is its own "document".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..errors import InputError
from ..results import Group, Hit

__all__ = ["DEFAULT_RULE", "RULES", "DocumentHit", "document_key", "rank_documents"]

RULES = ("max", "max_mean", "top2", "sum")
#: The rule a per-document result uses unless told otherwise: the best piece plus a quarter of the second best.
#: Measured on SciFact dev (BENCHMARKS.md, "Documents (SciFact dev)"): +0.7 [+0.1, +1.3] nDCG@10 over the best
#: piece alone under 5-fold cross-validation over claims (alpha chosen on 4/5: 0.25 in four folds, 0.5 in one).
DEFAULT_RULE = "top2"
DEFAULT_ALPHA = 0.25


@dataclass(frozen=True)
class DocumentHit:
    """One document of a per-document result: its key, its score under the rule, and its hits best first."""

    thread_id: str
    doc_id: str
    score: float
    hits: tuple[Hit, ...]

    @property
    def best(self) -> Hit:
        return self.hits[0]


def document_key(hit: Hit) -> tuple[str, str]:
    """``(thread_id, doc_id)`` of a document section's hit, ``(thread_id, turn_id)`` of a chat turn's."""
    md = hit.metadata
    thread = str(md.get("thread_id", ""))
    doc = md.get("doc_id") or md.get("turn_id") or md.get("parent_id") or hit.id
    return thread, str(doc)


def _aggregate(scores: Sequence[float], rule: str, alpha: float) -> float:
    best = scores[0]
    if rule == "max":
        return best
    if rule == "max_mean":
        return best + alpha * (sum(scores) / len(scores))
    if rule == "top2":
        return best + alpha * (scores[1] if len(scores) > 1 else 0.0)
    return float(sum(scores))  # "sum"


def rank_documents(
    groups: Iterable[Group] | Iterable[Sequence[Hit]],
    *,
    rule: str = DEFAULT_RULE,
    alpha: float = DEFAULT_ALPHA,
    across: str = "max",
    k: int | None = None,
) -> list[DocumentHit]:
    """The documents of ``groups`` (a search's groups, or plain lists of hits best first), best first,
    at most ``k`` (``None``: all). See the module docstring for the rules."""
    if rule not in RULES:
        raise InputError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    if across not in ("max", "sum"):
        raise InputError(f"across must be 'max' or 'sum', got {across!r}")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise InputError(f"k must be a positive integer or None, got {k!r}")
    score: dict[tuple[str, str], float] = {}
    hits: dict[tuple[str, str], list[Hit]] = {}
    for group in groups:
        mine: dict[tuple[str, str], list[Hit]] = {}
        for hit in group:
            mine.setdefault(document_key(hit), []).append(hit)
        for key, its in mine.items():
            ordered = sorted(its, key=lambda h: -float(h.score))  # stable: hit order on ties
            s = _aggregate([float(h.score) for h in ordered], rule, alpha)
            if key not in score:
                score[key], hits[key] = s, list(ordered)
                continue
            score[key] = max(score[key], s) if across == "max" else score[key] + s
            known = {h.id for h in hits[key]}
            hits[key].extend(h for h in ordered if h.id not in known)
    order = sorted(score, key=lambda key: -score[key])  # stable: first appearance on ties
    if k is not None:
        order = order[:k]
    return [
        DocumentHit(key[0], key[1], score[key], tuple(sorted(hits[key], key=lambda h: -float(h.score))))
        for key in order
    ]


def describe_rule(rule: str = DEFAULT_RULE, alpha: float = DEFAULT_ALPHA, across: str = "max") -> str:
    """One line naming the rule, for reports."""
    within = {
        "max": "its best piece's score (first appearance)",
        "max_mean": f"best piece + {alpha:g} × mean of its pieces",
        "top2": f"best piece + {alpha:g} × second-best piece",
        "sum": "sum of its pieces' scores",
    }[rule]
    return f"document score = {within} in a query part's group; across parts the {across}"
