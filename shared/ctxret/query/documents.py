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

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InputError
from ..results import Group, Hit
from .parents import assemble_parent, parent_texts, piece_place

__all__ = [
    "DEFAULT_RULE",
    "PIECES_PER_DOCUMENT",
    "RULES",
    "DocumentHit",
    "collapse_groups",
    "document_key",
    "document_texts",
    "rank_documents",
    "section_key",
]

#: A per-document search (``per="document"``) asks the executor for this many pieces per document wanted (at
#: least: a part's hybrid candidates count too), so that ``k`` distinct documents are found.
PIECES_PER_DOCUMENT = 4

RULES = ("max", "max_mean", "top2", "sum")
#: The rule a per-document result uses unless told otherwise: the best piece plus a quarter of the second best.
#: Measured on a SciFact dev subset (benchmarks/HISTORY.md, "Documents (SciFact dev)"): +0.7 [+0.1, +1.3] nDCG@10
#: over the best piece alone under 5-fold cross-validation over claims (alpha chosen on 4/5: 0.25 in four folds,
#: 0.5 in one).
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
    md = hit.stored
    thread = str(md.get("thread_id", ""))
    doc = md.get("doc_id") or md.get("turn_id") or md.get("parent_id") or hit.id
    return thread, str(doc)


def section_key(hit: Hit) -> tuple[str, str]:
    """``(thread_id, turn_id)``: a document's section (its turn), or a chat turn."""
    md = hit.stored
    return str(md.get("thread_id", "")), str(md.get("turn_id") or md.get("parent_id") or hit.id)


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
    key: Callable[[Hit], tuple[str, str]] = document_key,
) -> list[DocumentHit]:
    """The documents of ``groups`` (a search's groups, or plain lists of hits best first), best first,
    at most ``k`` (``None``: all). See the module docstring for the rules. ``key``: what a "document" is
    (:func:`document_key`; :func:`section_key` for sections)."""
    key_of = key
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
            mine.setdefault(key_of(hit), []).append(hit)
        for doc, its in mine.items():
            ordered = sorted(its, key=lambda h: -float(h.score))  # stable: hit order on ties
            s = _aggregate([float(h.score) for h in ordered], rule, alpha)
            if doc not in score:
                score[doc], hits[doc] = s, list(ordered)
                continue
            score[doc] = max(score[doc], s) if across == "max" else score[doc] + s
            known = {h.id for h in hits[doc]}
            hits[doc].extend(h for h in ordered if h.id not in known)
    order = sorted(score, key=lambda d: -score[d])  # stable: first appearance on ties
    if k is not None:
        order = order[:k]
    return [DocumentHit(d[0], d[1], score[d], tuple(sorted(hits[d], key=lambda h: -float(h.score)))) for d in order]


# -- the search's per-document result (SearchSettings.per) ----------------------------------------------------
def document_hit(doc: DocumentHit, per: str) -> Hit:
    """One :class:`DocumentHit` as the search's :class:`Hit`: the best piece's text and metadata, ``score`` the
    document score (the rule over its pieces' scores, on the group's scale: :attr:`Hit.score_scale`), ``id`` the
    document's id (a section's or chat turn's: its turn id), ``pieces`` the pieces that made the score."""
    best = doc.best
    meta = dict(best.stored)
    meta.update(per=per, piece_id=best.id, piece_ids=[h.id for h in doc.hits])
    scores = dict(best.scores)
    scores.update(document=float(doc.score), piece=float(best.score))
    return replace(best, id=doc.doc_id, score=float(doc.score), stored=meta, scores=scores, pieces=doc.hits)


def collapse_groups(groups: Sequence[Group], *, per: str, k: int) -> list[Group]:
    """Each group's hits as one hit per document (``per="document"``) or section (``"section"``), best first by
    :data:`DEFAULT_RULE`, at most ``k``: the step after the search's groups when it runs with ``per=``."""
    if per == "piece":
        return list(groups)
    key = document_key if per == "document" else section_key
    return [replace(g, hits=tuple(document_hit(d, per) for d in rank_documents([g], k=k, key=key))) for g in groups]


def document_texts(backend: Any, groups: Sequence[Group], per: str) -> list[Group]:
    """``parents=True`` of a per-document result: each hit's whole document (its sections in order, one blank
    line apart; a chat turn: the turn) or, ``per="section"``, its section, as :attr:`Hit.parent_text`."""
    hits = [h for g in groups for h in g.hits]
    docs = {document_key(h) for h in hits if h.stored.get("doc_id") is not None} if per == "document" else set()
    read = getattr(backend, "document_pieces", None)
    texts: dict[tuple[str, str], str] = {}
    held: dict[tuple[str, str], set[tuple[str, str, str, str]]] = {}  # the pieces each document holds now
    if docs and callable(read):
        for d, metas in read(docs).items():
            held[d] = {(str(m.get("parent_id")), *piece_place(m)) for m in metas}
            sections: dict[str, list[Any]] = {}
            for m in metas:
                sections.setdefault(str(m.get("parent_id")), []).append(m)
            ordered = sorted(sections.values(), key=lambda ms: int(ms[0].get("turn_index", 0)))
            texts[d] = "\n\n".join(assemble_parent(ms) for ms in ordered)
    turns = {section_key(h) for h in hits if document_key(h) not in texts and h.stored.get("parent_id")}
    texts.update(parent_texts(backend, sorted(turns)) if turns else {})
    out = []
    for g in groups:
        kept = [h for h in g.hits if _unchanged(h, held.get(document_key(h)))]
        got = [replace(h, parent_text=texts.get(document_key(h), texts.get(section_key(h)))) for h in kept]
        out.append(replace(g, hits=tuple(got)))
    return out


def _unchanged(hit: Hit, held: set[tuple[str, str, str, str]] | None) -> bool:
    """Whether the document read for ``hit`` (``held``: its pieces now; ``None``: not read) still holds the
    pieces that made the hit: a document rewritten or deleted after its hits were read is gone from the group."""
    if held is None:
        return True
    return all((str(p.stored.get("parent_id")), *piece_place(p.stored)) in held for p in hit.pieces or (hit,))


def describe_rule(rule: str = DEFAULT_RULE, alpha: float = DEFAULT_ALPHA, across: str = "max") -> str:
    """One line naming the rule, for reports."""
    within = {
        "max": "its best piece's score (first appearance)",
        "max_mean": f"best piece + {alpha:g} × mean of its pieces",
        "top2": f"best piece + {alpha:g} × second-best piece",
        "sum": "sum of its pieces' scores",
    }[rule]
    return f"document score = {within} in a query part's group; across parts the {across}"
