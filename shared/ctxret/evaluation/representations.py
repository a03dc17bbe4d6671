"""The retrieval strategies ``eval threads`` compares, each ``fn(index, message) -> Retrieval``.

Representations (register more with :func:`register_representation`)

* ``whole_turn``: one vector per section — the section's text (``Turn.text``) embedded with
  :func:`ctxret.embedders.fitting.embed_fitting` (text over the model's limit → unit mean of windows that
  fit): the old indexer. The query is one unblended whole-message vector.
* ``pieces``: labelled pieces, unblended, against the unblended whole-message vector.
* ``pieces_blend`` (the default stored side): ``blend(piece, unit mean of the section's piece
  vectors)`` against the whole-message vector (no split).
* ``pieces_blend_split``: the same pieces against the split, blended query parts
  (:func:`ctxret.index.query_vectors`), one group per part: the runtime's dense search.
* ``pieces_turnctx`` / ``pieces_late`` / ``late_only``: the other context strategies of
  :mod:`ctxret.ingest.context` (stored vectors built by :func:`ctxret.ingest.context.context_vectors` and
  :func:`ctxret.blend.blend_with_context`, as :class:`ctxret.ContextualIndex` builds them), against
  the split query parts like ``pieces_blend_split``: ``turn`` (the section's text embedded whole,
  windows averaged when over the model's limit) at the run's weight; ``late`` (late chunking: each
  piece's span pooled from the token vectors of the section's text) at the run's weight; and
  ``late`` at weight 0 — the pure late-chunked vector, with query parts still blended at the run's
  weight (runtime: ``ContextualIndex(context="late", weight=0.0)`` searched with ``query_weight=0.8``). The two ``late``
  representations need an embedder with token output (``embed_tokens``: the local model); runs over the
  default set skip them otherwise.
* ``bm25``: BM25 (:class:`ctxret.storage.lexical.LexicalIndex`) over the piece texts, whole message as
  the query, one ranking.
* ``hybrid_rrf`` / ``hybrid_weighted`` / ``hybrid_convex``: per part, the top ``candidates``
  (default :data:`ctxret.query.fusion.DEFAULT_CANDIDATES`) of the ``pieces_blend_split`` dense search
  and of BM25 (the part's text) fused with :func:`ctxret.query.fusion.fuse` at the run's lexical weight,
  RRF k and lexical floor; one group per part (the runtime's hybrid search).
* ``hybrid_default``: the same with exactly the runtime's default settings
  (``ctxret.query.fusion.FusionSettings()``: convex, its lexical weight, candidates and lexical floor),
  whatever the run's fusion flags say.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..query.fusion import FusionSettings
from .hybrid import HYBRID_REPRESENTATIONS, RUNTIME_DEFAULT, fusion_for, hybrid_candidates
from .index import ConversationIndex, Ranked, Retrieval, whole_message
from .peers import ensemble_rrf, relative_score_fusion

ThreadRepresentation = Callable[[ConversationIndex, str], Retrieval]


def _rep_whole_turn(ix: ConversationIndex, message: str) -> Retrieval:
    parts, q = ix.query(message, split=False)
    return Retrieval("sections", False, [ix.dense(ix.section_vecs, p, v) for p, v in zip(parts, q, strict=False)])


def _rep_pieces(ix: ConversationIndex, message: str) -> Retrieval:
    parts, q = ix.query(message, split=False)
    return Retrieval("pieces", False, [ix.dense(ix.raw, p, v) for p, v in zip(parts, q, strict=False)])


def _rep_pieces_blend(ix: ConversationIndex, message: str) -> Retrieval:
    parts, q = ix.query(message, split=False)
    return Retrieval("pieces", False, [ix.dense(ix.blended, p, v) for p, v in zip(parts, q, strict=False)])


def _rep_pieces_blend_split(ix: ConversationIndex, message: str) -> Retrieval:
    parts, q = ix.query(message, split=True)
    return Retrieval("pieces", True, [ix.dense(ix.blended, p, v) for p, v in zip(parts, q, strict=False)])


def _context_split(context: str, weight: float | None = None) -> ThreadRepresentation:
    """Stored vectors of a context strategy (at the run's weight, or ``weight``) against the split
    query parts, blended at the run's weight (the runtime's ``query_weight``)."""

    def rep(ix: ConversationIndex, message: str) -> Retrieval:
        parts, q = ix.query(message, split=True)
        matrix = ix.stored(context, weight)
        return Retrieval("pieces", True, [ix.dense(matrix, p, v) for p, v in zip(parts, q, strict=False)])

    return rep


def _rep_dense_default(ix: ConversationIndex, message: str) -> Retrieval:
    """Dense only over the embedder's default stored side (:attr:`ConversationIndex.default_stored`)
    against the split query parts: the dense half of ``hybrid_default``."""
    parts, q = ix.query(message, split=True)
    return Retrieval("pieces", True, [ix.dense(ix.default_stored, p, v) for p, v in zip(parts, q, strict=True)])


def _rep_bm25(ix: ConversationIndex, message: str) -> Retrieval:
    whole = whole_message(message)
    if not whole:
        return Retrieval("pieces", False, [])
    hits = ix.bm25(whole)
    items = np.array([ix.index_of[i] for i, _ in hits], dtype=np.int64)
    scores = np.array([s for _, s in hits], dtype=np.float64)
    return Retrieval("pieces", False, [Ranked(whole, items, scores, None)])


def _rep_peer_bm25s(ix: ConversationIndex, message: str) -> Retrieval:
    """LlamaIndex's BM25Retriever (bm25s, Snowball, ``en`` stopwords) on the same pieces, whole message as the query."""
    whole = whole_message(message)
    if not whole:
        return Retrieval("pieces", False, [])
    hits = ix.peer_bm25s.search(whole)
    items = np.array([i for i, _ in hits], dtype=np.int64)
    return Retrieval("pieces", False, [Ranked(whole, items, np.array([s for _, s in hits]), None)])


def _rep_peer_ensemble_rrf(ix: ConversationIndex, message: str) -> Retrieval:
    """LangChain's EnsembleRetriever([bm25, dense], weights 0.5/0.5, c = 60), 5 per side: its RRF
    over the peer BM25's top 5 and plain dense's top 5 (unblended pieces, whole message)."""
    whole = whole_message(message)
    if not whole:
        return Retrieval("pieces", False, [])
    lexical = [i for i, _ in ix.peer_bm25s.search(whole, 5)]
    _, q = ix.query(message, split=False)
    dense = [int(i) for i in np.argsort(-(ix.raw @ q[0]), kind="stable")[:5]]
    fused = ensemble_rrf([lexical, dense])
    items = np.array([i for i, _ in fused], dtype=np.int64)
    return Retrieval("pieces", False, [Ranked(whole, items, np.array([s for _, s in fused]), None)])


def _rep_peer_query_fusion(ix: ConversationIndex, message: str) -> Retrieval:
    """LlamaIndex's QueryFusionRetriever([dense, bm25], mode="relative_score", weights 0.6/0.4,
    num_queries=1), 5 per side: the same two sides as the ensemble, fused by relative score."""
    whole = whole_message(message)
    if not whole:
        return Retrieval("pieces", False, [])
    lexical = ix.peer_bm25s.search(whole, 5)
    _, q = ix.query(message, split=False)
    cos = ix.raw @ q[0]
    dense = [(int(i), float(cos[i])) for i in np.argsort(-cos, kind="stable")[:5]]
    fused = relative_score_fusion([dense, lexical])
    items = np.array([i for i, _ in fused], dtype=np.int64)
    return Retrieval("pieces", False, [Ranked(whole, items, np.array([s for _, s in fused]), None)])


def hybrid_groups(
    ix: ConversationIndex,
    message: str,
    fusion: FusionSettings,
    *,
    stored: np.ndarray | None = None,
    answers_first: bool = True,
    latest_first: bool = True,
    speakers_first: bool = True,
    user_first: bool = True,
) -> list[Ranked]:
    """The runtime's hybrid search of each part (:func:`.hybrid.hybrid_candidates`) under ``fusion``
    (its rule, its candidates per side — the runtime takes ``max(k, candidates)`` — and its lexical
    floor) as ranked groups; each hit carries its cosine and lexical coverage for the floor rule.

    ``stored``: the stored vectors searched (default: the runtime's default stored side for this
    embedder, :attr:`ConversationIndex.default_stored`). ``answers_first`` / ``latest_first`` /
    ``speakers_first`` / ``user_first``: the search options of the same names (:func:`.hybrid.hybrid_candidates`)."""
    parts, q = ix.query(message, split=True)
    if not parts:
        return []
    store = ix.exact_store(ix.default_stored if stored is None else stored)
    cands = hybrid_candidates(
        store,
        ix.conv.id,
        parts,
        q,
        k=ix.k,
        fusion=fusion,
        answers_first=answers_first,
        latest_first=latest_first,
        speakers_first=speakers_first,
        embedder=ix.emb,
        user_first=user_first,
    )
    return ix.ranked(cands, fusion.lexical_floor)


def _hybrid(name: str) -> ThreadRepresentation:
    def rep(ix: ConversationIndex, message: str) -> Retrieval:
        return Retrieval("pieces", True, hybrid_groups(ix, message, fusion_for(name, ix.fusion)))

    rep.__name__ = f"_rep_{name}"
    return rep


def _rep_hybrid_default(ix: ConversationIndex, message: str) -> Retrieval:
    """The runtime's default hybrid search (``FusionSettings()`` over the embedder's default stored
    side), whatever the run's fusion flags."""
    return Retrieval("pieces", True, hybrid_groups(ix, message, RUNTIME_DEFAULT))


def _rep_hybrid_mean(ix: ConversationIndex, message: str) -> Retrieval:
    """The default fusion over the ``mean`` blend stored side (what an embedder without token output gets)."""
    return Retrieval("pieces", True, hybrid_groups(ix, message, RUNTIME_DEFAULT, stored=ix.blended))


THREAD_REPRESENTATIONS: dict[str, ThreadRepresentation] = {
    "whole_turn": _rep_whole_turn,
    "pieces": _rep_pieces,
    "pieces_blend": _rep_pieces_blend,
    "pieces_blend_split": _rep_pieces_blend_split,
    "pieces_turnctx": _context_split("turn"),
    "pieces_late": _context_split("late"),
    "late_only": _context_split("late", 0.0),
    "dense_default": _rep_dense_default,
    "bm25": _rep_bm25,
    **{name: _hybrid(name) for name in HYBRID_REPRESENTATIONS},
    "hybrid_mean": _rep_hybrid_mean,
    "hybrid_default": _rep_hybrid_default,
    "peer_bm25s": _rep_peer_bm25s,
    "peer_ensemble_rrf": _rep_peer_ensemble_rrf,
    "peer_query_fusion": _rep_peer_query_fusion,
    "peer_dense": _rep_pieces,
}
#: The peers a user would pick instead (BM25 done well, LangChain's ensemble, LlamaIndex's query
#: fusion, plain dense): every report compares the runtime default with each, paired per query
#: (:func:`.threads.peer_comparison`).
PEERS = ("peer_bm25s", "peer_ensemble_rrf", "peer_query_fusion", "peer_dense")
DEFAULT_REPRESENTATIONS = tuple(THREAD_REPRESENTATIONS)
#: Representations that need token-level output from the embedder (``embed_tokens``).
NEEDS_TOKENS = frozenset({"pieces_late", "late_only"})


#: Registered representations that run only when named (``default=False``: the time-aware ones of
#: :mod:`.timeset`, the LLM views and HyDE of :mod:`.views`; each module registers its own).
OPT_IN: set[str] = set()


def register_representation(name: str, fn: ThreadRepresentation, *, default: bool = True) -> None:
    """Add a strategy to ``eval threads``: ``fn(index, message) -> Retrieval`` over the index's pieces
    (``level="pieces"``, item i = ``index.pieces[i]``) or sections (``level="sections"``).
    ``default=False``: it runs only when named in ``representations``."""
    THREAD_REPRESENTATIONS[name] = fn
    if not default:
        OPT_IN.add(name)
