"""The production-thread protocol, on LoCoMo conversations and on your own JSONL threads.

Per conversation (every search is scoped to it): a session (LoCoMo) or turn (JSONL) is a
*section*; its pieces are made by the real pipeline (:func:`ctxret.index.fit_pieces`: labelled,
packed to the piece byte budget, re-packed to the model's token limit) and every search is exact
cosine with numpy (no ANN).

Query sets

* ``facts``: stored facts about what happened (LoCoMo ``session_N_observation``; JSONL ``facts``).
  Right answer: a hit inside the section the fact's evidence came from. A fact whose evidence
  spans several sessions has several gold sections and any of them counts. A LoCoMo fact with no
  parsable evidence id falls back to the session its observation list belongs to.
* ``qa``: LoCoMo QA questions of categories 1–4 that carry evidence (JSONL ``questions``).
* ``composite``: messages made by joining three facts from three different sections of the same
  conversation (fixed seed). Measures what query splitting is for.
* ``time`` and ``time_qa`` (not run unless named): questions that name a time ("What did Caroline say
  yesterday?", with the search's now after the section) and the data's own dated questions; their
  metrics (``top1_window``, ``top5_window``) and the time-aware representations are in :mod:`.timeset`.

Metrics (means over queries, pooled over conversations; fractions 0–1)

* ``top1_section``: the top hit lies in a gold section.
* ``top1_section_floor``: the top hit that survives the floor (``--threshold``, a cosine, default
  the embedder's ``default_score_threshold``) lies in a gold section. For dense rows that is "the
  top hit is right and its cosine is at least the floor"; hybrid rows use the runtime's rule
  (:func:`.hybrid.floor_mask`): a hit under the cosine floor is kept only if it holds at least
  ``lexical_floor`` (default :data:`ctxret.query.fusion.DEFAULT_LEXICAL_FLOOR`) of its part's
  IDF-weighted words and its cosine is at least half the floor. Omitted for ``bm25`` (no cosine).
* ``mrr``: sections ranked by first appearance in the hit ranking; 1/rank of the first gold
  section, 0 if no gold section appears (hybrid rankings hold only the fused candidates).
* ``recall_at_5`` (``recall_at_{k}``): for each query, the share of its evidence units that lie
  inside one of its top-k hits, averaged over queries. A LoCoMo unit is an utterance (``dia_id``);
  every piece comes from exactly one utterance (one source per utterance), and a ``whole_turn``
  hit holds all utterances of its session (so that row is not an equal text budget). A JSONL
  unit is a turn (the format has no finer evidence).
* ``coverage`` (composite only): the share of facts whose gold section appears among the results
  at an equal budget — the top k of the fact's own part's group (the part holding the fact's
  first words) for grouped representations, the top 3·k of the single ranking otherwise. Not
  reported for ``whole_turn`` (3·k whole sessions is most of a conversation).

For grouped representations on ``facts`` and ``qa`` the scored group is the best group: the one
whose top hit scores highest.

Representations (register more with :func:`register_representation`)

* ``whole_turn``: one vector per section — the section's text (``Turn.text``) embedded with
  :func:`ctxret.index.embed_fitting` (text over the model's limit → unit mean of windows that
  fit): the old indexer. The query is one unblended whole-message vector.
* ``pieces``: labelled pieces, unblended, against the unblended whole-message vector.
* ``pieces_blend`` (the default stored side): ``blend(piece, unit mean of the section's piece
  vectors)`` against the whole-message vector (no split).
* ``pieces_blend_split``: the same pieces against the split, blended query parts
  (:func:`ctxret.index.query_vectors`), one group per part: the runtime's dense search.
* ``pieces_turnctx`` / ``pieces_late`` / ``late_only``: the other context strategies of
  :mod:`ctxret.context` (stored vectors built by :func:`ctxret.context.context_vectors` and
  :func:`ctxret.blend.chunk_search_vector`, as :class:`ctxret.ContextualIndex` builds them), against
  the split query parts like ``pieces_blend_split``: ``turn`` (the section's text embedded whole,
  windows averaged when over the model's limit) at the run's weight; ``late`` (late chunking: each
  piece's span pooled from the token vectors of the section's text) at the run's weight; and
  ``late`` at weight 0 — the pure late-chunked vector, with query parts still blended at the run's
  weight (runtime: ``ContextualIndex(context="late", weight=0.0, query_weight=0.8)``). The two ``late``
  representations need an embedder with token output (``embed_tokens``: the local model); runs over the
  default set skip them otherwise.
* ``bm25``: BM25 (:class:`ctxret.lexical.LexicalIndex`) over the piece texts, whole message as
  the query, one ranking.
* ``hybrid_rrf`` / ``hybrid_weighted`` / ``hybrid_convex``: per part, the top ``candidates``
  (default :data:`ctxret.fusion.DEFAULT_CANDIDATES`) of the ``pieces_blend_split`` dense search
  and of BM25 (the part's text) fused with :func:`ctxret.fusion.fuse` at the run's lexical weight,
  RRF k and lexical floor; one group per part (the runtime's hybrid search).
* ``hybrid_default``: the same with exactly the runtime's default settings
  (``ctxret.fusion.FusionSettings()``: convex, its lexical weight, candidates and lexical floor),
  whatever the run's fusion flags say.

JSONL thread format (one thread per line)::

    {"thread_id": "t1",
     "messages": [{"role": "user", "content": "...", "timestamp": "2026-10-03T09:14:00"}, ...],
     "facts": [{"text": "The user's dogs are Biscuit and Pepper.", "turn": 2},
               {"text": "...", "turns": [3, 4]}],
     "questions": [{"question": "What are the dogs called?", "turns": [2]}]}

``messages`` are OpenAI chat-completions dicts; turns are numbered from 1 exactly as
:func:`ctxret.turns.turns_from_messages` numbers them (a turn = a user message and everything up to
the next user message). ``facts`` and ``questions`` are optional; a fact's ``turn`` (or
``turns``) is its gold section, a question's ``turns`` both its gold sections and its evidence.
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..blend import CHUNK_FOCUS_WEIGHT, chunk_search_vector
from ..embedders.base import Embedder
from ..embedders.fitting import embed_fitting, fit_pieces
from ..errors import InputError
from ..ingest.context import context_vectors
from ..ingest.messages import turns_from_messages
from ..ingest.turns import Piece, Source, Turn
from ..query.fusion import FusionSettings
from ..query.search import PartCandidates
from ..query.split import split_prompt_chunks
from ..query.vectors import query_texts, query_vectors
from ..storage.memory import ExactStore
from ..storage.schema import Scope, piece_metadata
from ..text import clean_text
from .embedding import CachedEmbedder, cached_embedder
from .hybrid import HYBRID_REPRESENTATIONS, RUNTIME_DEFAULT, floor_mask, fusion_for, hybrid_candidates
from .metrics import best_part, budget_recall, covered, evidence_recall, mean, reciprocal_rank
from .peers import BM25sPeer, ensemble_rrf, relative_score_fusion
from .stats import paired_diff, per_cluster, stratified_bootstrap
from .timeset import (
    TIME_QUERY_SETS,
    TIME_REPRESENTATIONS,
    TimeAware,
    dated_questions,
    score_time,
    time_breakdown,
    time_comparison,
)
from .timeset import time_queries as _time_queries

#: What ``--query-sets`` accepts; :data:`DEFAULT_QUERY_SETS` run when none are named.
QUERY_SETS = ("facts", "qa", "composite", *TIME_QUERY_SETS)
DEFAULT_QUERY_SETS = ("facts", "qa", "composite")
QA_CATEGORIES = (1, 2, 3, 4)
FACTS_PER_COMPOSITE = 3


# -- data -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """One query with its gold sections (section numbers) and evidence units."""

    id: str
    text: str
    gold: frozenset[int]
    evidence: frozenset[str]
    category: int | None = None


@dataclass(frozen=True)
class CompositeQuery:
    """A message joining facts from different sections; each fact is scored on its own."""

    id: str
    text: str
    facts: tuple[Query, ...]


@dataclass
class Conversation:
    """A thread to evaluate: its sections (turns), evidence-unit map and query sets."""

    id: str
    source: str
    turns: list[Turn]
    facts: list[Query]
    questions: list[Query]
    #: (section number, source ordinal) → evidence unit id; missing → the section ("T<n>").
    units: dict[tuple[int, int], str] = field(default_factory=dict)
    #: Counts of data repairs made while loading (malformed evidence ids and the like).
    notes: Counter = field(default_factory=Counter)

    def unit_of(self, section: int, source_ordinal: int) -> str:
        return self.units.get((section, source_ordinal), f"T{section}")


_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_SESSION = re.compile(r"session_(\d+)")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.IGNORECASE)
_MONTH_NAMES = "january february march april may june july august september october november december".split()
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}


def parse_evidence(value: Any) -> list[str]:
    """Normalised dia_ids in a LoCoMo evidence value: ``"D8:6; D9:17"`` → ``["D8:6", "D9:17"]``,
    ``"D30:05"`` → ``["D30:5"]``, ``"D:11:26"`` → ``["D11:26"]``, ``"D"`` → ``[]``; lists are flattened."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in parse_evidence(v)]
    return [f"D{int(a)}:{int(b)}" for a, b in _DIA.findall(str(value))]


def parse_locomo_time(value: Any) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` → ``datetime(2023, 5, 8, 13, 56)``; ``None`` when unreadable."""
    m = _DATE.search(str(value or ""))
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    month_n = _MONTHS.get(month.lower()) or next(
        (v for k, v in _MONTHS.items() if k.startswith(month.lower()[:3])), None
    )
    if month_n is None:
        return None
    h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        return datetime(int(year), month_n, int(day), h, int(minute))
    except ValueError:
        return None


def load_locomo(path: str | os.PathLike[str]) -> Conversation:
    """One LoCoMo conversation file → a :class:`Conversation` (see the module docstring for the mapping).

    A session is a section (``Turn(index=N, label="Session N", timestamp=session_N_date_time)``),
    each utterance one source (kind ``"user"``, label = speaker), its text plus
    ``" [shares a photo: <blip_caption>]"`` when it shares an image.
    """
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data) if isinstance(data, dict) else None
    if not isinstance(conv, dict) or not any(_SESSION.fullmatch(k) for k in conv):
        raise InputError(f"{path} is not a LoCoMo conversation (no session_N lists)")
    cid = str(data.get("sample_id") or path.stem)
    notes: Counter = Counter()
    turns: list[Turn] = []
    units: dict[tuple[int, int], str] = {}
    unit_session: dict[str, int] = {}
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k)) and isinstance(conv[k], list))
    for n in numbers:
        sources = []
        for j, utt in enumerate(conv[f"session_{n}"]):
            text = str(utt.get("text") or "")
            caption = utt.get("blip_caption")
            if caption:
                text = f"{text} [shares a photo: {caption}]"
            speaker = str(utt.get("speaker") or "Speaker")
            sources.append(Source(kind="user", label=speaker, text=text, ordinal=j, name=speaker))
            ids = parse_evidence(utt.get("dia_id"))
            dia = ids[0] if ids else f"D{n}:{j + 1}"
            if not ids:
                notes["utterance without dia_id"] += 1
            units[(n, j)] = dia
            unit_session[dia] = n
        ts = parse_locomo_time(conv.get(f"session_{n}_date_time"))
        if ts is None:
            notes["session without a readable date"] += 1
        turns.append(Turn(thread_id=cid, index=n, sources=tuple(sources), label=f"Session {n}", timestamp=ts))

    def evidence(raw: Any) -> tuple[list[str], int]:
        flat = [str(x) for x in (raw if isinstance(raw, (list, tuple)) else [raw])]
        ids = parse_evidence(raw)
        if any(not re.fullmatch(r"D\d+:\d+", s.strip()) for s in flat):
            notes["malformed evidence strings repaired or dropped"] += 1
        known = [d for d in dict.fromkeys(ids) if d in unit_session]
        if len(known) < len(set(ids)):
            notes["evidence ids not in the conversation (dropped)"] += len(set(ids)) - len(known)
        return known, len(ids)

    facts: list[Query] = []
    for n in numbers:
        obs = data.get(f"session_{n}_observation", conv.get(f"session_{n}_observation")) or {}
        for speaker, items in sorted(obs.items()) if isinstance(obs, dict) else []:
            for i, item in enumerate(items or []):
                if not isinstance(item, (list, tuple)) or not item:
                    continue
                text = str(item[0]).strip()
                if not text:
                    continue
                ids, _ = evidence(item[1] if len(item) > 1 else None)
                gold = frozenset(unit_session[d] for d in ids)
                if not gold:
                    notes["facts without usable evidence (gold = observation session)"] += 1
                    gold = frozenset({n})
                facts.append(Query(f"{cid}/s{n}/{speaker}/{i}", text, gold, frozenset(ids)))
    questions: list[Query] = []
    for i, qa in enumerate(data.get("qa") or []):
        cat = qa.get("category")
        if cat not in QA_CATEGORIES:
            continue
        ids, _ = evidence(qa.get("evidence"))
        if not ids:
            notes["qa (cat 1-4) without usable evidence (skipped)"] += 1
            continue
        questions.append(
            Query(
                f"{cid}/qa{i}", str(qa["question"]), frozenset(unit_session[d] for d in ids), frozenset(ids), int(cat)
            )
        )
    return Conversation(cid, str(path), turns, facts, questions, units, notes)


def load_jsonl(path: str | os.PathLike[str]) -> list[Conversation]:
    """Threads in our JSONL format (one per line; see the module docstring).

    The form ``ctxret index`` also reads — one OpenAI message per line, the file being one thread
    named by the file — is read too, as one thread without facts or questions.
    """
    path = Path(path)
    out: list[Conversation] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((line for line in lines if line.strip()), "")
    try:
        head = json.loads(first) if first else None
    except json.JSONDecodeError:
        head = None
    if isinstance(head, dict) and "role" in head and "messages" not in head:
        try:
            messages = [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        return [Conversation(path.stem, str(path), turns_from_messages(messages, path.stem), [], [])]
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict) or "thread_id" not in obj or "messages" not in obj:
            raise InputError(f"{where}: each line needs \"thread_id\" and \"messages\"")
        tid = str(obj["thread_id"])
        turns = turns_from_messages(obj["messages"], tid)
        known = {t.index for t in turns}

        def gold_of(
            item: dict,
            key_one: str,
            key_many: str,
            what: str,
            where: str = where,
            known: set[int] = known,
            n: int = len(turns),
        ) -> frozenset[int]:
            raw = item.get(key_many, item.get(key_one))
            nums = raw if isinstance(raw, list) else [raw]
            try:
                gold = frozenset(int(x) for x in nums)  # type: ignore[arg-type]  # bad values raise below
            except (TypeError, ValueError):
                raise InputError(
                    f"{where}: {what} needs \"{key_one}\" (a turn number) or \"{key_many}\" (a list)"
                ) from None
            missing = sorted(gold - known)
            if missing or not gold:
                raise InputError(f"{where}: {what} points at turn(s) {missing or '[]'}; the thread has turns 1..{n}")
            return gold

        facts = []
        for i, f in enumerate(obj.get("facts") or []):
            gold = gold_of(f, "turn", "turns", f"fact {i}")
            facts.append(Query(f"{tid}/f{i}", str(f["text"]), gold, frozenset(f"T{n}" for n in gold)))
        questions = []
        for i, q in enumerate(obj.get("questions") or []):
            gold = gold_of(q, "turn", "turns", f"question {i}")
            questions.append(Query(f"{tid}/q{i}", str(q["question"]), gold, frozenset(f"T{n}" for n in gold)))
        out.append(Conversation(tid, str(path), turns, facts, questions))
    return out


def load_threads(path: str | os.PathLike[str]) -> list[Conversation]:
    """A folder (every ``*.json`` LoCoMo file and ``*.jsonl`` thread file in it, sorted) or one file."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
        if not files:
            raise InputError(f"{path} holds no *.json (LoCoMo) or *.jsonl (threads) files")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(f"{path} does not exist; pass a LoCoMo .json file, a .jsonl threads file or a folder of them")
    out: list[Conversation] = []
    for f in files:
        out.extend(load_jsonl(f) if f.suffix == ".jsonl" else [load_locomo(f)])
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise InputError(f"duplicate thread ids in {path}: {sorted(k for k, v in Counter(ids).items() if v > 1)}")
    return out


def _terminated(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def composite_queries(conv: Conversation, seed: int = 0, limit: int | None = None) -> list[CompositeQuery]:
    """Messages of three facts from three different sections (disjoint gold sets), fixed by the seed."""
    rng = random.Random(f"{seed}/composite/{conv.id}")
    pool = list(conv.facts)
    rng.shuffle(pool)
    out: list[CompositeQuery] = []
    while len(pool) >= FACTS_PER_COMPOSITE and (limit is None or len(out) < limit):
        first = pool.pop(0)
        chosen, used = [first], set(first.gold)
        for f in pool:
            if not (f.gold & used):
                chosen.append(f)
                used |= f.gold
                if len(chosen) == FACTS_PER_COMPOSITE:
                    break
        if len(chosen) < FACTS_PER_COMPOSITE:
            continue
        for f in chosen[1:]:
            pool.remove(f)
        text = " ".join(_terminated(f.text) for f in chosen)
        out.append(CompositeQuery(f"{conv.id}/c{len(out)}", text, tuple(chosen)))
    return out


# -- search -----------------------------------------------------------------------------------
@dataclass
class Ranked:
    """One group: a query part and its ranked items (indices), scores and dense cosines (or None)."""

    part: str
    items: np.ndarray
    scores: np.ndarray
    cosines: np.ndarray | None
    #: Hybrid only: each ranked hit's share of the part's term weight (``LexicalIndex.coverage``).
    coverage: np.ndarray | None = None
    #: Hybrid only: the coverage that lets a hit under the cosine floor through (None: none does).
    lexical_floor: float | None = None

    def kept(self, floor: float | None) -> np.ndarray:
        """Positions (into ``items``) of the hits that survive ``floor``, by the runtime's rule."""
        if self.cosines is None:
            return np.arange(len(self.items))
        return np.flatnonzero(floor_mask(self.cosines, self.coverage, floor, self.lexical_floor))


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
        weight: float = CHUNK_FOCUS_WEIGHT,
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
        self.section_units = [
            frozenset(conv.unit_of(t.index, s.ordinal) for s in t.sources) for t in conv.turns
        ]
        self._section_vecs: np.ndarray | None = None
        self._lexical: Any = None
        self._exact: dict[int, ExactStore] = {}
        self._peer: BM25sPeer | None = None
        self._qcache: dict[tuple[str, bool, float], tuple[list[str], np.ndarray]] = {}

    def stored(self, context: str = "mean", weight: float | None = None) -> np.ndarray:
        """Stored vectors (one row per piece) under a context strategy of :mod:`ctxret.context` and a
        blend weight (default: the run's), built as :class:`ctxret.ContextualIndex` builds them:
        :func:`ctxret.context.context_vectors` per section, then
        :func:`ctxret.blend.chunk_search_vector`. Memoised."""
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
                    out[row : row + n] = chunk_search_vector(self.raw[row : row + n], ctx, w)
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
        context = str(getattr(self.emb.inner, "default_context", "mean"))
        weight = float(getattr(self.emb.inner, "default_weight", self.weight))
        if context == "late" and not hasattr(self.emb, "embed_tokens"):
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
            out.append(
                Ranked(
                    c.part,
                    np.fromiter((self.index_of[i] for i in ids), dtype=np.int64, count=len(ids)),
                    np.fromiter((sc for _, sc in c.ranked), dtype=np.float64, count=len(ids)),
                    np.fromiter((c.cosine[i] for i in ids), dtype=np.float64, count=len(ids)),
                    np.fromiter((c.coverage.get(i, 0.0) for i in ids), dtype=np.float64, count=len(ids)),
                    lexical_floor,
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
    ix: ConversationIndex, message: str, fusion: FusionSettings, *, stored: np.ndarray | None = None
) -> list[Ranked]:
    """The runtime's hybrid search of each part (:func:`.hybrid.hybrid_candidates`) under ``fusion``
    (its rule, its candidates per side — the runtime takes ``max(k, candidates)`` — and its lexical
    floor) as ranked groups; each hit carries its cosine and lexical coverage for the floor rule.

    ``stored``: the stored vectors searched (default: the runtime's default stored side for this
    embedder, :attr:`ConversationIndex.default_stored`)."""
    parts, q = ix.query(message, split=True)
    if not parts:
        return []
    cands = hybrid_candidates(
        ix.exact_store(ix.default_stored if stored is None else stored), ix.conv.id, parts, q, k=ix.k, fusion=fusion
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
#: (:func:`peer_comparison`).
PEERS = ("peer_bm25s", "peer_ensemble_rrf", "peer_query_fusion", "peer_dense")
#: Byte budgets of the equal-budget recall columns (``recall_1000b``, ``recall_4000b``).
BUDGETS = (1000, 4000)
DEFAULT_REPRESENTATIONS = tuple(THREAD_REPRESENTATIONS)
#: Representations that need token-level output from the embedder (``embed_tokens``).
NEEDS_TOKENS = frozenset({"pieces_late", "late_only"})


#: Registered representations that run only when named (``default=False``: e.g. the LLM views, :mod:`.views`).
OPT_IN: set[str] = set(TIME_REPRESENTATIONS)
THREAD_REPRESENTATIONS.update(TIME_REPRESENTATIONS)  # the time-aware ones (:mod:`.timeset`), opt-in


def register_representation(name: str, fn: ThreadRepresentation, *, default: bool = True) -> None:
    """Add a strategy to ``eval threads``: ``fn(index, message) -> Retrieval`` over the index's pieces
    (``level="pieces"``, item i = ``index.pieces[i]``) or sections (``level="sections"``).
    ``default=False``: it runs only when named in ``representations``."""
    THREAD_REPRESENTATIONS[name] = fn
    if not default:
        OPT_IN.add(name)


# -- scoring ----------------------------------------------------------------------------------
def best_group(groups: Sequence[Ranked]) -> Ranked | None:
    """The group whose top hit scores highest (first on ties); None when every group is empty."""
    best, best_score = None, -math.inf
    for g in groups:
        if len(g.items) and g.scores[0] > best_score:
            best, best_score = g, float(g.scores[0])
    return best


def score_query(ix: ConversationIndex, ret: Retrieval, q: Query, k: int, floor: float | None) -> dict[str, float]:
    """Metrics of one fact or question (see the module docstring).

    Keys: ``top1_section``, ``top1_section_floor`` (dense cosine available and a floor set),
    ``mrr``, ``recall`` (NaN without evidence), ``top_cosine`` (the scored top hit's cosine).
    """
    g = best_group(ret.groups)
    out: dict[str, float] = {}
    if g is None:
        out.update(top1_section=0.0, mrr=0.0, recall=evidence_recall([], q.evidence))
        if floor is not None and any(gr.cosines is not None for gr in ret.groups):
            out["top1_section_floor"] = 0.0
        return out
    sections = ix.sections(ret.level)[g.items]
    units = ix.units(ret.level)
    top1 = 1.0 if sections[0] in q.gold else 0.0
    out["top1_section"] = top1
    if g.cosines is not None and floor is not None:
        kept = g.kept(floor)
        out["top1_section_floor"] = 1.0 if len(kept) and sections[kept[0]] in q.gold else 0.0
    out["mrr"] = reciprocal_rank(sections.tolist(), q.gold)
    out["recall"] = evidence_recall([units[i] for i in g.items[:k]], q.evidence)
    if g.cosines is not None:
        out["top_cosine"] = float(g.cosines[0])
    return out


def returns_any(ret: Retrieval, floor: float | None) -> bool:
    """Whether a search would return any hit at all under ``floor`` (the runtime's rule per group):
    what a floor is for on a message about nothing in memory."""
    return any(len(g.kept(floor)) for g in ret.groups)


def score_composite(ix: ConversationIndex, ret: Retrieval, cq: CompositeQuery, k: int) -> list[float]:
    """Coverage of each fact of a composite message (1.0 / 0.0 per fact)."""
    out = []
    sections = ix.sections(ret.level)
    parts = [g.part for g in ret.groups]
    for fact in cq.facts:
        if not ret.groups:
            out.append(0.0)
            continue
        if ret.grouped:
            items = ret.groups[best_part(parts, fact.text)].items[:k]
        else:
            items = ret.groups[0].items[: FACTS_PER_COMPOSITE * k]
        out.append(covered(sections[items].tolist(), fact.gold))
    return out


_WINDOW_METRICS = ("top1_window", "top5_window", "window_has_evidence")
_AGGREGATED = ("top1_section", "top1_section_floor", "mrr", "recall", *(f"recall_{b}b" for b in BUDGETS),
               *_WINDOW_METRICS)  # fmt: skip


@dataclass
class ThreadsResult:
    rows: list[dict[str, Any]]
    config: dict[str, Any]
    #: Per-query metric dicts: {"conversation", "representation", "query_set", "query_id", metrics...}.
    per_query: list[dict[str, Any]] = field(default_factory=list)


def select_queries(conv: Conversation, limit: int | None, seed: int) -> dict[str, list[Any]]:
    """The query sets of one conversation: the first ``limit`` facts and questions, and
    ``ceil(limit / 3)`` composite messages (all of them when ``limit`` is None); the first ``limit`` of
    the time sets (:mod:`.timeset`)."""
    facts = conv.facts[:limit] if limit else list(conv.facts)
    qa = conv.questions[:limit] if limit else list(conv.questions)
    comp = composite_queries(conv, seed, limit=math.ceil(limit / FACTS_PER_COMPOSITE) if limit else None)
    return {"facts": facts, "qa": qa, "composite": comp, "time": _time_queries(conv, seed, limit),
            "time_qa": dated_questions(conv, limit)}  # fmt: skip


def prewarm(emb: CachedEmbedder, messages: Iterable[str]) -> None:
    """Embed every query text, part and whole message in one batch."""
    texts: list[str] = []
    for m in messages:
        texts.append(whole_message(m))
        texts.extend(split_prompt_chunks(m))
    texts = [t for t in dict.fromkeys(texts) if t]
    if texts:
        embed_fitting(emb, texts)


def run_threads(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    representations: Sequence[str] | None = None,
    query_sets: Sequence[str] = DEFAULT_QUERY_SETS,
    k: int = 5,
    weight: float = CHUNK_FOCUS_WEIGHT,
    piece_bytes: int | None = None,
    threshold: float | None = None,
    fusion: FusionSettings = RUNTIME_DEFAULT,
    limit_conversations: int | None = None,
    limit_queries: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> ThreadsResult:
    """Run the thread protocol; one row per (representation, query set).

    Row: ``{"representation", "query_set", "top1_section", "top1_section_floor", "mrr",
    "recall_at_5", "coverage", "n"}`` — keys that do not apply are omitted (``coverage`` is only
    for ``composite``, which has only ``coverage``; ``top1_section_floor`` is omitted for ``bm25``).

    ``fusion``: the lexical weight and RRF k of ``hybrid_rrf`` / ``hybrid_weighted`` / ``hybrid_convex``
    (each runs its own method) and their candidates per side and lexical floor; ``hybrid_default`` and
    the other runtime-default rows ignore it.

    ``representations=None`` runs every registered representation the embedder can run (the
    late-chunking ones need ``embed_tokens``; skipped ones are listed in
    ``config["skipped_representations"]``); named ones always run (or raise).
    """
    from . import views as _views  # noqa: F401  (registers the opt-in LLM-views and HyDE representations)

    skipped: list[str] = []
    if representations is None:
        representations = [r for r in THREAD_REPRESENTATIONS if r not in OPT_IN]
        if not hasattr(embedder, "embed_tokens"):
            skipped = [r for r in representations if r in NEEDS_TOKENS]
            representations = [r for r in representations if r not in NEEDS_TOKENS]
    unknown = [r for r in representations if r not in THREAD_REPRESENTATIONS]
    if unknown:
        raise InputError(f"unknown thread representation(s) {unknown}; choose from {', '.join(THREAD_REPRESENTATIONS)}")
    bad = [s for s in query_sets if s not in QUERY_SETS]
    if bad:
        raise InputError(f"unknown query set(s) {bad}; choose from {', '.join(QUERY_SETS)}")
    if k < 1:
        raise InputError(f"k must be a positive integer, got {k}")
    emb = cached_embedder(embedder)
    floor = emb.default_score_threshold if threshold is None else float(threshold)
    convs = list(conversations[:limit_conversations] if limit_conversations else conversations)
    recall_key = f"recall_at_{k}"
    acc: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    per_query: list[dict[str, Any]] = []
    counts: Counter = Counter()
    notes: Counter = Counter()
    for ci, conv in enumerate(convs):
        sets = select_queries(conv, limit_queries, seed)
        sets = {s: sets[s] for s in query_sets}
        messages = [q.text for s in ("facts", "qa", *TIME_QUERY_SETS) for q in sets.get(s, [])] + [
            c.text for c in sets.get("composite", [])
        ]
        prewarm(emb, messages)
        ix = ConversationIndex(conv, emb, piece_bytes=piece_bytes, weight=weight, fusion=fusion, k=k)
        counts["conversations"] += 1
        counts["sections"] += len(conv.turns)
        counts["pieces"] += len(ix.pieces)
        counts["facts"] += len(sets.get("facts", []))
        counts["qa"] += len(sets.get("qa", []))
        counts["composite_messages"] += len(sets.get("composite", []))
        counts["composite_facts"] += sum(len(c.facts) for c in sets.get("composite", []))
        for qs in TIME_QUERY_SETS:
            if qs in sets:
                counts[qs] += len(sets[qs])
        if any(s in sets for s in TIME_QUERY_SETS) and all(t.timestamp is None for t in conv.turns):
            notes["threads without timestamps (no time queries)"] += 1
        notes.update(conv.notes)
        if progress:
            print(
                f"[eval threads] {ci + 1}/{len(convs)} {conv.id}: {len(conv.turns)} sections, {len(ix.pieces)} pieces, "
                f"{len(sets.get('facts', []))} facts, {len(sets.get('qa', []))} qa, "
                f"{len(sets.get('composite', []))} composite"
                + "".join(f", {len(sets[s])} {s}" for s in TIME_QUERY_SETS if s in sets),
                file=sys.stderr,
                flush=True,
            )
        for rep in representations:
            fn = THREAD_REPRESENTATIONS[rep]
            for qs in ("facts", "qa"):
                for q in sets.get(qs, []):
                    ret = fn(ix, q.text)
                    m = score_query(ix, ret, q, k, floor)
                    if ret.level == "pieces":
                        groups = [g.items.tolist() for g in ret.groups]
                        for budget in BUDGETS:
                            m[f"recall_{budget}b"] = budget_recall(
                                groups, ix.piece_nbytes, ix.piece_units, q.evidence, budget
                            )
                    for key, val in m.items():
                        if key in _AGGREGATED:
                            acc[(rep, qs)][key].append(val)
                    per_query.append(
                        {"conversation": conv.id, "representation": rep, "query_set": qs, "query_id": q.id, **m}
                    )
            for qs in TIME_QUERY_SETS:
                for tq in sets.get(qs, []):
                    ret = fn(ix, tq.text, now=tq.now) if isinstance(fn, TimeAware) else fn(ix, tq.text)
                    m = score_time(ix, ret, tq, k)
                    for key, val in m.items():
                        acc[(rep, qs)][key].append(val)
                    per_query.append(
                        {"conversation": conv.id, "representation": rep, "query_set": qs, "query_id": tq.id,
                         "kind": tq.kind, "base": tq.base, **m}
                    )  # fmt: skip
            if "composite" in sets and rep != "whole_turn":
                for cq in sets["composite"]:
                    cov = score_composite(ix, fn(ix, cq.text), cq, k)
                    acc[(rep, "composite")]["coverage"].extend(cov)
                    for fact, c in zip(cq.facts, cov, strict=False):
                        per_query.append(
                            {"conversation": conv.id, "representation": rep, "query_set": "composite",
                             "query_id": f"{cq.id}/{fact.id}", "coverage": c}
                        )
        ix.close()
    rows: list[dict[str, Any]] = []
    for rep in representations:
        for qs in query_sets:
            vals = acc.get((rep, qs))
            if not vals:
                continue
            row: dict[str, Any] = {"representation": rep, "query_set": qs}
            if qs == "composite":
                row["coverage"] = mean(vals["coverage"])
                row["n"] = len(vals["coverage"])
            else:
                row["top1_section"] = mean(vals["top1_section"])
                for key in _WINDOW_METRICS:
                    if vals.get(key):
                        row[key] = mean(vals[key])
                if vals.get("top1_section_floor"):
                    row["top1_section_floor"] = mean(vals["top1_section_floor"])
                row["mrr"] = mean(vals["mrr"])
                r = mean(vals["recall"])
                if not math.isnan(r):
                    row[recall_key] = r
                for budget in BUDGETS:
                    rb = mean(vals.get(f"recall_{budget}b", []))
                    if vals.get(f"recall_{budget}b") and not math.isnan(rb):
                        row[f"recall_{budget}b"] = rb
                row["n"] = len(vals["top1_section"])
            rows.append(row)
    config = {
        "harness": "threads",
        "sources": sorted({c.source for c in convs}),
        "embedder": emb.model_id,
        "dims": emb.dims,
        "k": k,
        "weight": weight,
        "piece_bytes": int(piece_bytes or emb.default_piece_bytes),
        "threshold": floor,
        "lexical_weight": fusion.lexical_weight,
        "rrf_k": fusion.rrf_k,
        "candidates": fusion.candidates,
        "lexical_floor": fusion.lexical_floor,
        "runtime_default_fusion": {**RUNTIME_DEFAULT.fusion_dict(),
                                   "candidates": RUNTIME_DEFAULT.candidates,
                                   "lexical_floor": RUNTIME_DEFAULT.lexical_floor},
        "seed": seed,
        "limit_conversations": limit_conversations,
        "limit_queries": limit_queries,
        "representations": list(representations),
        "skipped_representations": skipped,
        "query_sets": list(query_sets),
        "counts": dict(counts),
        "data_notes": dict(notes),
    }
    if "hybrid_default" in representations and any(p in representations for p in PEERS):
        config["peer_comparison"] = peer_comparison(per_query, recall_key)
    if any(r in TIME_REPRESENTATIONS for r in representations):
        config["time_comparison"] = time_comparison(per_query, recall_key)
    if "time" in query_sets:
        config["time_breakdown"] = time_breakdown(per_query)
    return ThreadsResult(rows, config, per_query)


#: What the peer comparison compares: (query set, metric key).
COMPARED_METRICS = (("facts", "top1_section"), ("qa", "recall"), ("qa", "top1_section"),
                    *(("qa", f"recall_{b}b") for b in BUDGETS), ("composite", "coverage"))  # fmt: skip


def peer_comparison(
    per_query: Sequence[dict[str, Any]], recall_key: str = "recall_at_5", system: str = "hybrid_default"
) -> list[dict[str, Any]]:
    """The runtime default against each peer, paired per query: mean difference with a 95% interval.

    One row per (peer, query set, metric): ``diff`` (normal interval on the per-query
    differences), ``bootstrap`` (queries resampled within conversations) and ``per_conversation``.
    """
    by: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for row in per_query:
        by[(row["representation"], row["query_set"])][row["query_id"]] = row
    out: list[dict[str, Any]] = []
    for peer in PEERS:
        for qs, metric in COMPARED_METRICS:
            mine, theirs = by.get((system, qs)), by.get((peer, qs))
            if not mine or not theirs:
                continue
            ids = [i for i in mine if i in theirs and metric in mine[i] and metric in theirs[i]]
            if not ids:
                continue
            a = [float(mine[i][metric]) for i in ids]
            b = [float(theirs[i][metric]) for i in ids]
            convs = [mine[i]["conversation"] for i in ids]
            name = recall_key if metric == "recall" else metric
            out.append(
                {
                    "system": system,
                    "peer": peer,
                    "query_set": qs,
                    "metric": name,
                    "system_value": mean(a),
                    "peer_value": mean(b),
                    "diff": paired_diff(a, b).as_dict(),
                    "bootstrap": stratified_bootstrap(a, b, convs).as_dict(),
                    "per_conversation": per_cluster(a, b, convs),
                }
            )
    return out
