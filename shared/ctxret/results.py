"""Result types: a search returns one :class:`Group` per query part, each holding :class:`Hit` s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .metanames import RETRIEVAL_KEYS, public_metadata


@dataclass(frozen=True)
class Hit:
    """One retrieved piece.

    ``score`` is the ranking score of the hit's group: the raw cosine for dense search, the fused
    score with hybrid search, the reranker's score when a reranker ran. ``scores`` names every
    score the hit has: ``cosine`` (dense, raw cosine in [-1, 1]); with hybrid search ``bm25`` and
    ``fused``; ``coverage`` (the share of the part's distinct content words the piece holds, not
    weighted — the floor's rescue reads another number, the IDF-weighted ``idf_coverage`` of
    :class:`~ctxret.query.search.PartCandidates`); ``relevance`` (the calibrated score in [0, 1],
    independent of the other candidates: :mod:`ctxret.query.relevance`);
    ``rerank`` when a reranker ran. With LLM-written views, ``cosine`` is the better of the piece's
    own vector and its best view, and ``view`` is that view's cosine when the view won (its kind and
    text are in the metadata, ``view_kind`` and ``view_text``).

    :attr:`metadata` is the piece's metadata as the caller reads it (the names the caller gave, ctxret's own fields
    as ``ctxret:<field>``); :attr:`stored` is the same metadata under the names it is stored by, what every stage
    of the search reads.
    """

    id: str
    text: str
    score: float
    #: The piece's metadata under its stored names (:mod:`ctxret.storage.schema`): a caller key ctxret uses itself
    #: stored as ``meta_<key>``, ctxret's fields by their plain names (``kind``, ``header``, ``source_kind``), the
    #: bookkeeping ``caller_keys``. What the search stages read; :attr:`metadata` is the caller's view of it.
    stored: Mapping[str, Any] = field(default_factory=dict)
    scores: Mapping[str, float] = field(default_factory=dict)
    #: The whole turn or section the piece came from, when the search asked for parents.
    parent_text: str | None = None
    # per-document results (search per="document" / "section", ctxret.query.documents)
    #: The pieces that made a document hit's score, best first (a piece hit: empty).
    pieces: tuple[Hit, ...] = field(default=(), repr=False)

    @property
    def score_scale(self) -> str:
        """What :attr:`score` is: ``"rerank"`` (a reranker ran), ``"fused"`` (hybrid search) or ``"cosine"``."""
        if "rerank" in self.scores:
            return "rerank"
        return "fused" if "fused" in self.scores else "cosine"

    @property
    def relevance(self) -> float | None:
        """``scores["relevance"]``: in [0, 1], thresholdable, independent of the other candidates (or None)."""
        value = self.scores.get("relevance")
        return None if value is None else float(value)

    @cached_property
    def metadata(self) -> Mapping[str, Any]:
        """The piece's metadata as the caller reads it, exactly as the adapters' results show it: the caller's keys
        under the names the caller gave (``kind``, ``timestamp``, ...), ``thread_id`` and ``doc_id``, ctxret's own
        fields as ``ctxret:<field>`` (``ctxret:kind``, ``ctxret:header``, ``ctxret:source_kind``, ...), and
        ``view_kind`` / ``view_text`` when a view won (a caller key of one of those names then keeps its stored
        name, ``meta_view_kind``); bookkeeping (``caller_keys``, ``exact_patch``) never.
        Computed once per hit from :attr:`stored` (:func:`~ctxret.metanames.public_metadata`); read-only."""
        return public_metadata(self.stored, own=RETRIEVAL_KEYS.intersection(self.stored))

    @property
    def body(self) -> str:
        """The piece's text without its header."""
        return str(self.stored.get("body", self.text))


@dataclass(frozen=True)
class Group:
    """The results of one query part: at most k hits, best first, none below the floor.

    ``stages`` names the search stages that ran for it, in order (``embed``, ``dense``,
    ``lexical``, ``views``, ``hyde``, ``parents``); ``degraded`` is ``True`` when a stage the
    search asked for was skipped or abandoned to meet ``deadline_ms`` (``skipped`` names them):
    the hits are what the stages that ran found, never a partial stage's.

    ``window`` is the time window the part searched inside, ``(start, end)`` (``start <= timestamp < end``;
    either ``None``: unbounded), from the time the part names (widened by the tolerance) and the search's
    ``since`` / ``until``; ``None``: no window. ``window_note`` says why a window the part named was not
    applied (it held no piece of the scope, or the scope has no timestamps); ``""`` otherwise.
    """

    part_index: int
    part: str
    hits: tuple[Hit, ...]
    stages: tuple[str, ...] = ()
    degraded: bool = False
    skipped: tuple[str, ...] = ()
    window: tuple[Any, Any] | None = None
    window_note: str = ""

    def __iter__(self):  # unpack as ``for hit in group``
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)


@dataclass(frozen=True)
class IndexResult:
    """What one indexing call did, counted in pieces."""

    added: int = 0  # pieces written that were not stored before (or were, with other metadata: rewritten)
    unchanged: int = 0  # pieces already stored with the same text, context and metadata (nothing written)
    replaced: int = 0  # stored pieces removed because their turn changed or their section is gone
    turns: int = 0  # turns (or sections) seen
    turns_changed: int = 0  # turns written (new or changed)
    #: What was written or removed: ``(thread_id, doc_id)`` of each document, ``(thread_id, turn_id)`` of each turn.
    changed: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    #: Messages an append found already stored (a retry, or the part of a chat export indexed before): not added again.
    duplicates: int = 0

    def __add__(self, other: IndexResult) -> IndexResult:
        counts = (a + b for a, b in zip(_vals(self), _vals(other), strict=True))
        added, unchanged, replaced, turns, turns_changed, duplicates = counts
        return IndexResult(added, unchanged, replaced, turns, turns_changed, self.changed + other.changed, duplicates)


def _vals(r: IndexResult) -> tuple[int, ...]:
    return (r.added, r.unchanged, r.replaced, r.turns, r.turns_changed, r.duplicates)


def cosine_to_distance(cosine: float) -> float:
    """Chroma's cosine-space distance: ``1 - cosine``."""
    return 1.0 - cosine


def distance_to_cosine(distance: float) -> float:
    """Raw cosine from Chroma's cosine-space distance."""
    return 1.0 - distance


def cosine_to_unit_interval(cosine: float) -> float:
    """A cosine mapped onto [0, 1] as ``(1 + cosine) / 2`` (a scale some indexes report; a floor of 0.75
    on it is cosine 0.5). Not ``Hit.scores["relevance"]``, which is calibrated (:mod:`ctxret.query.relevance`)."""
    return (1.0 + cosine) / 2.0


def unit_interval_to_cosine(relevance: float) -> float:
    """Raw cosine from the ``(1 + cosine) / 2`` relevance scale."""
    return 2.0 * relevance - 1.0
