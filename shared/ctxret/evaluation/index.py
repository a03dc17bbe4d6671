"""One conversation's pieces, vectors and BM25 index for exact search: what every representation searches.

Its pieces are made by the real pipeline (:func:`ctxret.index.fit_pieces`: labelled, packed to the piece
byte budget, re-packed to the model's token limit); every search is exact cosine with numpy (no ANN),
and the hybrid ones run the runtime's own stages on an :class:`~ctxret.storage.memory.ExactStore`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..blend import OWN_WEIGHT, blend_with_context
from ..embedders.base import Embedder, capabilities_of, gives_tokens
from ..embedders.fitting import embed_fitting
from ..ingest.context import context_vectors
from ..ingest.pieces import fit_pieces, piece_metadata
from ..ingest.turns import Piece
from ..query.fusion import FusionSettings
from ..query.search import PartCandidates
from ..query.vectors import query_texts, query_vectors
from ..storage.memory import ExactStore
from ..storage.schema import Scope
from ..text import clean_text
from .datasets import Conversation
from .embedding import CachedEmbedder, cached_embedder
from .hybrid import RUNTIME_DEFAULT, group_floor_mask
from .peers import BM25sPeer


# -- search -----------------------------------------------------------------------------------
@dataclass
class Ranked:
    """One group: a query part and its ranked items (indices), scores and dense cosines (or None)."""

    part: str
    items: np.ndarray
    scores: np.ndarray
    cosines: np.ndarray | None
    #: Hybrid only: each ranked hit's ``idf_coverage``, the share of the part's IDF-weighted words it holds.
    idf_coverage: np.ndarray | None = None
    #: Hybrid only: the idf_coverage that lets a hit under the cosine floor through (None: none does).
    lexical_floor: float | None = None
    #: Positions lifted above another hit (a stored question's answer, a later statement): position -> that hit's.
    lifted: dict[int, int] | None = None
    #: The part searched the time window it names: no floor (ctxret.query.time.search).
    windowed: bool = False

    def kept(self, floor: float | None, k: int = 5) -> np.ndarray:
        """Positions (into ``items``) of the hits that survive ``floor``, by the runtime's rule
        (:func:`.hybrid.group_floor_mask`: the part's floor over its first ``k`` hits, then each hit's)."""
        if self.cosines is None:
            return np.arange(len(self.items))
        if self.windowed:
            floor = None
        mask = group_floor_mask(self.cosines, self.idf_coverage, floor, self.lexical_floor, k, self.lifted)
        return np.flatnonzero(mask)


@dataclass
class Retrieval:
    """What a representation returns for one message: item level, whether groups are per part, the groups."""

    level: str  # "pieces" | "sections"
    grouped: bool
    groups: list[Ranked]


def whole_message(message: str) -> str:
    """The whole-message text the runtime embeds and matches (capped, the end kept; ``""`` when empty)."""
    return query_texts(message, split=False)[1]


class ConversationIndex:
    """One conversation's pieces, vectors (raw, blended, per section) and BM25 index, for exact search."""

    def __init__(
        self,
        conv: Conversation,
        embedder: Embedder,
        *,
        piece_bytes: int | None = None,
        weight: float = OWN_WEIGHT,
        fusion: FusionSettings = RUNTIME_DEFAULT,
        k: int = 5,
    ) -> None:
        self.conv = conv
        #: The run's hybrid settings: the lexical weight and RRF k of ``hybrid_rrf`` / ``hybrid_weighted`` /
        #: ``hybrid_convex`` (each its own method), the candidates and lexical floor of those three.
        self.fusion = fusion
        self.k = int(k)
        self.emb: CachedEmbedder = cached_embedder(embedder)
        self.weight = float(weight)
        self.piece_bytes = int(piece_bytes or self.emb.default_piece_bytes)
        self.turn_pieces: list[list[Piece]] = [fit_pieces(t, self.emb, self.piece_bytes) for t in conv.turns]
        self.pieces: list[Piece] = [p for ps in self.turn_pieces for p in ps]
        self.piece_ids = [p.id for p in self.pieces]  # the runtime's ids (BM25 breaks score ties by id)
        self.index_of = {pid: i for i, pid in enumerate(self.piece_ids)}
        dims = self.emb.dims
        self.piece_section = np.array([p.turn_index for p in self.pieces], dtype=np.int64)
        self.piece_units = [frozenset({conv.unit_of(p.turn_index, p.source_ordinal)}) for p in self.pieces]
        self.raw = self.emb.embed([p.text for p in self.pieces]) if self.pieces else np.zeros((0, dims), np.float32)
        self._contexts: dict[str, list[np.ndarray]] = {}
        self._stored: dict[tuple[str, float], np.ndarray] = {}
        #: The blended stored side: each piece blended with the unit mean of its section's pieces.
        self.blended = self.stored("mean")
        self.section_ids = np.array([t.index for t in conv.turns], dtype=np.int64)
        self.section_units = [frozenset(conv.unit_of(t.index, s.ordinal) for s in t.sources) for t in conv.turns]
        self._section_vecs: np.ndarray | None = None
        self._lexical: Any = None
        self._exact: dict[int, ExactStore] = {}
        self._peer: BM25sPeer | None = None
        self._qcache: dict[tuple[str, bool, float], tuple[list[str], np.ndarray]] = {}

    def stored(self, context: str = "mean", weight: float | None = None) -> np.ndarray:
        """Stored vectors (one row per piece) under a context strategy of :mod:`ctxret.ingest.context` and a
        blend weight (default: the run's), built as :class:`ctxret.ContextualIndex` builds them:
        :func:`ctxret.ingest.context.context_vectors` per section, then
        :func:`ctxret.blend.blend_with_context`. Memoised."""
        w = self.weight if weight is None else float(weight)
        key = (context, w)
        if key not in self._stored:
            if context not in self._contexts:
                texts = [clean_text(t.text) for t in self.conv.turns]
                self._contexts[context] = context_vectors(context, self.emb, self.turn_pieces, self.raw, texts)
            out = np.zeros_like(self.raw)
            row = 0
            for pieces, ctx in zip(self.turn_pieces, self._contexts[context], strict=False):
                n = len(pieces)
                if n:
                    out[row : row + n] = blend_with_context(self.raw[row : row + n], ctx, w)
                row += n
            self._stored[key] = out
        return self._stored[key]

    @functools.cached_property
    def piece_nbytes(self) -> list[int]:
        """Each piece's returned text size in UTF-8 bytes (header included): the equal-budget currency."""
        return [len(p.text.encode("utf-8", "surrogatepass")) for p in self.pieces]

    @property
    def peer_bm25s(self) -> BM25sPeer:
        """LlamaIndex's BM25Retriever over the pieces' texts (built once)."""
        if self._peer is None:
            self._peer = BM25sPeer([p.text for p in self.pieces])
        return self._peer

    @property
    def default_stored(self) -> np.ndarray:
        """The stored side a new collection gets with this embedder (``IndexConfig.resolve``'s
        defaults: late chunking at weight 0 for the local model, the ``mean`` blend otherwise)."""
        capabilities = capabilities_of(self.emb.inner)
        context = str(capabilities.context)
        weight = float(self.weight if capabilities.weight is None else capabilities.weight)
        if context == "late" and not gives_tokens(self.emb):
            context, weight = "mean", self.weight
        return self.stored(context, weight)

    def exact_store(self, matrix: np.ndarray | None = None) -> ExactStore:
        """The conversation's pieces with ``matrix`` (default: the blended vectors) as their stored
        vectors, for the runtime's search code. Memoised per matrix."""
        matrix = self.blended if matrix is None else matrix
        key = id(matrix)
        if key not in self._exact:
            metas = [piece_metadata(t, p) for t, ps in zip(self.conv.turns, self.turn_pieces, strict=False) for p in ps]
            self._exact[key] = ExactStore(self.piece_ids, matrix, [p.text for p in self.pieces], metas)
        return self._exact[key]

    def ranked(self, candidates: Sequence[PartCandidates], lexical_floor: float | None) -> list[Ranked]:
        """The runtime's per-part candidates as the harness's groups (item indices, scores, cosines, coverage)."""
        out = []
        for c in candidates:
            ids = [rid for rid, _ in c.ranked]
            at = {rid: n for n, rid in enumerate(ids)}
            out.append(
                Ranked(
                    c.part,
                    np.fromiter((self.index_of[i] for i in ids), dtype=np.int64, count=len(ids)),
                    np.fromiter((sc for _, sc in c.ranked), dtype=np.float64, count=len(ids)),
                    np.fromiter((c.cosine[i] for i in ids), dtype=np.float64, count=len(ids)),
                    np.fromiter((c.idf_coverage.get(i, 0.0) for i in ids), dtype=np.float64, count=len(ids)),
                    lexical_floor,
                    lifted={at[a]: at[b] for a, b in {**c.follows, **c.lifted}.items() if a in at and b in at},
                )
            )
        return out

    # lazily built parts
    @property
    def section_vecs(self) -> np.ndarray:
        if self._section_vecs is None:
            texts = [clean_text(t.text) for t in self.conv.turns]
            self._section_vecs = embed_fitting(self.emb, texts) if texts else np.zeros((0, self.emb.dims), np.float32)
        return self._section_vecs

    @property
    def lexical(self) -> Any:
        """BM25 over the conversation's pieces: the thread view a scoped product search ranks with."""
        if self._lexical is None:
            self._lexical = self.exact_store().resolve(Scope(self.conv.id))[1]
        return self._lexical

    def close(self) -> None:
        self._lexical = None
        self._exact.clear()

    def sections(self, level: str) -> np.ndarray:
        return self.piece_section if level == "pieces" else self.section_ids

    def units(self, level: str) -> list[frozenset[str]]:
        return self.piece_units if level == "pieces" else self.section_units

    def query(self, message: str, split: bool, weight: float | None = None) -> tuple[list[str], np.ndarray]:
        """The real query pipeline (:func:`ctxret.index.query_vectors`) at the run's weight (or
        ``weight``), memoised per message."""
        w = self.weight if weight is None else float(weight)
        key = (message, split, w)
        if key not in self._qcache:
            self._qcache[key] = query_vectors(self.emb, message, weight=w, split=split)
        return self._qcache[key]

    def dense(self, matrix: np.ndarray, part: str, qvec: np.ndarray) -> Ranked:
        scores = matrix @ qvec
        order = np.argsort(-scores, kind="stable")
        return Ranked(part, order, scores[order], scores[order])

    def bm25(self, text: str, limit: int | None = None) -> list[tuple[str, float]]:
        """BM25 ``(piece id, score)`` of ``text`` scoped to this conversation, best first."""
        return self.lexical.search(text, limit or len(self.pieces), [self.conv.id]) if self.pieces else []
