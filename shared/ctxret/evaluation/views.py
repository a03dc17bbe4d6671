"""LLM-written views and HyDE in ``eval threads``: opt-in representations, run with a deterministic fake LLM by default.

No LLM runs offline on this project's machines, so by default the views and hypothetical answers
come from :class:`FakeLLM`: deterministic rewrites of the text itself (a question naming a piece's
content words, its first sentence as the summary, a question turned into a statement as its
answer). That measures the plumbing and the cost — view vectors per piece, search through the
runtime's own merge (:func:`ctxret.query.views.merge_views`) and blend
(:func:`ctxret.query.hyde.blend_hyde`) — not what a real LLM would add. To measure that on your
data, give the harness an LLM (LangChain or LlamaIndex, or any ``fn(prompt) -> str``)::

    from ctxret.evaluation import views, threads
    views.use_llm(my_llm)   # the index's own prompts (ctxret.ingest.views, ctxret.query.hyde)
    threads.run_threads(convs, embedder, representations=["hybrid_default", "hybrid_views_both", "hybrid_hyde"])

(CLI: ``ctxret eval threads PATH --representations hybrid_default,hybrid_views_both,...``, with the fake.)

Representations (each against the runtime's default stored side for the embedder,
:attr:`~ctxret.evaluation.index.ConversationIndex.default_stored`; compare them with
``late_only`` / ``pieces_blend_split`` (dense) and ``hybrid_default``):

* ``views_questions`` / ``views_summary`` / ``views_both``: dense search, split parts, every piece
  scored by ``max(own cosine, best view cosine)`` over the whole conversation;
* ``hybrid_views_questions`` / ``hybrid_views_summary`` / ``hybrid_views_both``: the runtime's
  default hybrid search with the views merged into its dense side (BM25 over the piece texts);
* ``hybrid_views_both_bm25``: the same, with the view texts also indexed for BM25 under their piece
  (as ``context_text`` is) — the alternative the runtime did not take;
* ``hyde`` / ``hybrid_hyde``: each part blended with its hypothetical answer (``hyde_weight`` 0.5),
  dense / the runtime's default hybrid search.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ingest.pieces import piece_metadata
from ..ingest.views import llm_view_writer, write_views
from ..query.hyde import DEFAULT_HYDE_WEIGHT, blend_hyde, llm_hyde
from ..query.views import merge_views
from ..storage.base import DenseBackend, Fetched, Row
from ..storage.cache import Block
from ..storage.memory import ExactStore
from ..storage.schema import ParentKey, Scope
from ..storage.views import MemoryViews, ViewedBlock
from ..text import clean_text
from .hybrid import RUNTIME_DEFAULT, scope_candidates
from .index import ConversationIndex, Ranked, Retrieval
from .representations import register_representation

__all__ = ["FakeLLM", "VIEW_REPRESENTATIONS", "use_llm", "view_cost"]

_WORD = re.compile(r"[A-Za-z][A-Za-z'\-]{3,}")
_SKIP = frozenset(
    "that this with have from they them their there what when where which would could should about been were "
    "your yours just like also really very much some more than then into because while will shall know think "
    "going doing being said says yeah okay".split()
)
_WH = re.compile(
    r"^(what|when|where|which|who|whom|whose|why|how|did|does|do|is|are|was|were|can|could|would)\b\s*", re.I
)


class FakeLLM:
    """Deterministic stand-ins for the three LLM jobs (no model; the same text always gives the same answer).

    * ``questions``: two questions per piece, ``"What about <first content words>?"`` and
      ``"What did <speaker> say about <next content words>?"`` (content words: 4+ letters, not common);
    * ``summary``: the piece's first sentence, at most 30 words;
    * ``hyde``: the part as a statement (a leading question word dropped, ``?`` → ``.``).
    """

    @staticmethod
    def questions(passage: str, bodies: Sequence[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for body in bodies:
            words = list(dict.fromkeys(w for w in _WORD.findall(body) if w.lower() not in _SKIP))
            if not words:
                out.append([])
                continue
            qs = [f"What about {' '.join(words[:4])}?"]
            if len(words) > 4:
                qs.append(f"What was said about {' '.join(words[4:8])}?")
            out.append(qs)
        return out

    @staticmethod
    def summary(passage: str, bodies: Sequence[str]) -> list[list[str]]:
        out = []
        for body in bodies:
            first = re.split(r"(?<=[.!?])\s+", " ".join(body.split()), maxsplit=1)[0]
            out.append([" ".join(first.split()[:30])] if first else [])
        return out

    @staticmethod
    def hyde(part: str) -> str:
        text = _WH.sub("", " ".join(part.split())).rstrip("?").strip()
        return f"{text[:1].upper()}{text[1:]}." if text else ""


@dataclass
class _Setup:
    writers: dict[str, Callable[[str, Sequence[str]], Any]]
    hyde: Callable[[str], str]
    name: str


_SETUP = _Setup({"questions": FakeLLM.questions, "summary": FakeLLM.summary}, FakeLLM.hyde, "fake")


def use_llm(llm: Any | None) -> None:
    """Write the views and hypothetical answers with ``llm`` (the index's own prompts); ``None``: the fake again."""
    global _SETUP
    if llm is None:
        _SETUP = _Setup({"questions": FakeLLM.questions, "summary": FakeLLM.summary}, FakeLLM.hyde, "fake")
    else:
        _SETUP = _Setup(
            {k: llm_view_writer(llm, k) for k in ("questions", "summary")}, llm_hyde(llm), type(llm).__name__
        )


# -- per conversation: view texts and vectors, built once per writer ----------------------------------
@dataclass
class _Views:
    block: ViewedBlock
    texts: list[list[str]]  # per piece, every view text of the kinds asked (for the BM25 variant)


def _views(ix: ConversationIndex, kinds: tuple[str, ...]) -> _Views:
    cache = ix.__dict__.setdefault("_llm_views", {})
    key = (_SETUP.name, id(_SETUP.writers.get("questions")), kinds)
    if key not in cache:
        rows, kind_of, texts = [], [], []
        per_piece: list[list[str]] = []
        row = 0
        for turn, pieces in zip(ix.conv.turns, ix.turn_pieces, strict=False):
            views = write_views(
                _SETUP.writers, kinds, clean_text(turn.text), [p.body for p in pieces], f"section {turn.index}"
            )
            for v in views:
                mine = []
                for kind in kinds:
                    for t in v.get(kind, []):
                        rows.append(row)
                        kind_of.append(kind)
                        texts.append(t)
                        mine.append(t)
                per_piece.append(mine)
                row += 1
        vecs = ix.emb.embed(texts) if texts else np.zeros((0, ix.emb.dims), np.float32)
        base = Block(
            ix.piece_ids,
            np.zeros((len(ix.piece_ids), 1), np.float32),
            ["" for _ in ix.piece_ids],
            [{} for _ in ix.piece_ids],
        )
        cache[key] = _Views(ViewedBlock(base, vecs, rows, kind_of, texts), per_piece)
    return cache[key]


def view_cost(ix: ConversationIndex, kinds: tuple[str, ...] = ("questions", "summary")) -> dict[str, float]:
    """Extra vectors the views add to this conversation: total and per piece."""
    v = _views(ix, kinds)
    n = len(v.block.view_rows)
    return {"pieces": len(ix.pieces), "view_vectors": n, "per_piece": n / max(1, len(ix.pieces))}


def _bm25_store(ix: ConversationIndex, stored: np.ndarray, v: _Views) -> ExactStore:
    """The conversation's pieces with their view texts indexed for BM25 (as ``context_text`` is)."""
    cache = ix.__dict__.setdefault("_llm_views_bm25", {})
    key = (id(stored), id(v))
    if key not in cache:
        metas = [piece_metadata(t, p) for t, ps in zip(ix.conv.turns, ix.turn_pieces, strict=False) for p in ps]
        for meta, texts in zip(metas, v.texts, strict=False):
            if texts:
                meta["context_text"] = " ".join(texts)
        cache[key] = ExactStore(ix.piece_ids, stored, [p.text for p in ix.pieces], metas)
    return cache[key]


def search(
    ix: ConversationIndex,
    message: str,
    *,
    kinds: tuple[str, ...] = (),
    hybrid: bool = False,
    hyde: bool = False,
    bm25_views: bool = False,
) -> list[Ranked]:
    """One message through the runtime's stages on the conversation's thread view: dense (every piece,
    or the runtime's candidates with ``hybrid``), the views merged in, HyDE blended in."""
    parts, q = ix.query(message, split=True)
    if not parts:
        return []
    q = np.asarray(q, dtype=np.float32)
    if hyde:
        answers = [_SETUP.hyde(p) for p in parts]
        texts = [a for a in answers if a]
        answer_vecs = ix.emb.embed(texts) if texts else np.zeros((0, q.shape[1]), np.float32)
        q = blend_hyde(q, answers, answer_vecs, DEFAULT_HYDE_WEIGHT)
    stored = ix.default_stored
    v = _views(ix, kinds) if kinds else None
    store = _bm25_store(ix, stored, v) if (bm25_views and v is not None) else ix.exact_store(stored)
    scope = Scope(ix.conv.id)
    dense, lexical = store.resolve(scope)
    if v is not None:
        dense = _ViewedDense(dense, MemoryViews([v.block]))
    if hybrid:
        cands = scope_candidates(dense, lexical, scope, parts, q, k=ix.k, fusion=RUNTIME_DEFAULT, embedder=ix.emb)
        return ix.ranked(cands, RUNTIME_DEFAULT.lexical_floor)
    return ix.ranked(scope_candidates(dense, None, scope, parts, q, k=len(ix.pieces), fusion=None), None)


class _ViewedDense:
    """A dense backend whose rows have the views merged in (:func:`ctxret.query.views.merge_views`): a
    piece's cosine is max(own, best view), as the runtime's dense side with views."""

    def __init__(self, inner: DenseBackend, views: MemoryViews) -> None:
        self.inner, self.views = inner, views

    def dense(self, vectors: np.ndarray, n: int, scope: Scope) -> list[list[Row]]:
        rows = self.inner.dense(vectors, n, scope)
        return merge_views(rows, self.views.search(vectors, n, scope), vectors, self.inner, scope, n)[0]

    def fetch(self, ids: Sequence[str], scope: Scope) -> dict[str, Fetched]:
        return self.inner.fetch(ids, scope)

    def parents(self, keys: Iterable[ParentKey]) -> dict[ParentKey, list[dict[str, Any]]]:
        return self.inner.parents(keys)


def _rep(**options: Any) -> Callable[[ConversationIndex, str], Retrieval]:
    def rep(ix: ConversationIndex, message: str) -> Retrieval:
        return Retrieval("pieces", True, search(ix, message, **options))

    return rep


BOTH = ("questions", "summary")
VIEW_REPRESENTATIONS = {
    "views_questions": _rep(kinds=("questions",)),
    "views_summary": _rep(kinds=("summary",)),
    "views_both": _rep(kinds=BOTH),
    "hybrid_views_questions": _rep(kinds=("questions",), hybrid=True),
    "hybrid_views_summary": _rep(kinds=("summary",), hybrid=True),
    "hybrid_views_both": _rep(kinds=BOTH, hybrid=True),
    "hybrid_views_both_bm25": _rep(kinds=BOTH, hybrid=True, bm25_views=True),
    "hyde": _rep(hyde=True),
    "hybrid_hyde": _rep(hyde=True, hybrid=True),
}
for _name, _fn in VIEW_REPRESENTATIONS.items():
    register_representation(_name, _fn, default=False)
