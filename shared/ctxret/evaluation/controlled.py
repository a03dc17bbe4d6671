"""The controlled test: one sentence in four contexts — does the right context come first?

Fixture (JSON)::

    {"version": 1,
     "families": [{"id": "f01", "block": "sense" | "purpose",
                   "sentence": "<the shared sentence>",
                   "contexts": [{"id": "f01c1",
                                 "passage": "<passage containing the sentence verbatim once>",
                                 "query": "<a context-specific query>",
                                 "query_message": "<a longer message: the query's intent plus unrelated sentences>"},
                                ... exactly 4 ...],
                   "generic_query": "<the sentence's meaning alone>"}],
     "distractors": ["<unrelated single sentences>", ...]}

Records: one per context. The stored piece is the shared sentence; its context is the passage
(``E(passage)``, embedded whole — not a mean of piece vectors). Blocks are
searched separately; a query ranks every record of its block and scores
:func:`~ctxret.evaluation.metrics.top1_credit` for its own context's record (``k`` records tied at
the top including the gold one = ``1/k``).

Conditions (distractors drawn from the fixture's list with a fixed seed, per context):

* ``clean``: the query as written against the passages as written.
* ``stored_noise``: five distractor sentences inserted at random sentence boundaries of every
  passage (the shared sentence stays intact).
* ``query_noise``: five distractors placed around the query; the query is the part, the noisy
  message the whole.
* ``both_noise``: both of the above.
* ``message``: the fixture's ``query_message`` through the real splitter
  (:func:`ctxret.query.split.split_prompt_chunks`, each part blended with the whole message as
  :func:`ctxret.index.query_vectors` does); the group of the part holding the query's intent (the
  part containing the query's first words, else sharing most of its words) is scored;
  ``message_any`` rows score the best of the groups.
* ``generic`` rows: the generic query succeeds when the family's four records take the top four
  places (strictly above every other record of the block); ``top1`` is the share of families.

Representations (``weight`` is the blend weight, 0.8 by default, used on both sides). The passage
is the sentence's context, so the context strategies of :mod:`ctxret.ingest.context` map as: ``turn``
(embed the context whole) = ``blend``; ``late`` = ``late`` / ``late_only`` below; ``mean`` has no
counterpart (a record is one sentence, not several pieces).

* ``isolated``: ``E(sentence)`` against ``E(part)``.
* ``whole``: ``E(passage)`` against ``E(whole message)``.
* ``blend``: ``blend(E(sentence), E(passage))`` against ``blend(E(part), E(whole))``.
* ``blend_stored_only``: blended records against the unblended ``E(part)``.
* ``late``: late chunking — the passage runs through the model once with token output
  (``embed_tokens``) and the sentence's own span is pooled from its token vectors
  (:func:`ctxret.embedders.local.pool_spans`), ``L(sentence | passage)``; stored
  ``blend(E(sentence), L(sentence | passage))`` against ``blend(E(part), E(whole))``.
* ``late_only``: ``L(sentence | passage)`` alone (weight 0) against the query blended at weight 0
  too, i.e. ``E(whole message)`` — what :class:`ctxret.ContextualIndex` with ``context="late",
  weight=0`` does (it blends queries at the collection's weight). Both ``late`` rows need an
  embedder with token output (the local model).
* ``bm25``: BM25 (:class:`ctxret.storage.lexical.LexicalIndex`) over the stored piece text — the shared
  sentence — queried with the part's text. Identical stored texts tie, so it cannot tell the four
  contexts apart: it measures what word search adds when the piece is the sentence.
* ``hybrid_rrf`` / ``hybrid_weighted`` / ``hybrid_convex``: the ``blend`` dense ranking and the
  ``bm25`` ranking fused per part with :func:`ctxret.query.fusion.fuse` over the top candidates of each
  side, as the runtime does. BM25 breaks score ties by id; record ids are seeded hashes, so ties
  among identical sentences are not broken systematically in favour of one context.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..blend import OWN_WEIGHT, blend_with_context
from ..embedders.base import Embedder
from ..embedders.fitting import embed_fitting
from ..errors import InputError
from ..query.fusion import FusionSettings
from ..query.split import split_prompt_chunks
from ..storage.lexical import LexicalIndex
from ..storage.memory import ExactStore
from ..text import clean_text
from .embedding import cached_embedder
from .hybrid import HYBRID_REPRESENTATIONS, RUNTIME_DEFAULT, fusion_for, hybrid_candidates, with_candidates
from .index import whole_message
from .metrics import best_part as intent_part
from .metrics import mean, top1_credit, top_block

REPRESENTATIONS = (
    "isolated",
    "whole",
    "blend",
    "blend_stored_only",
    "late",
    "late_only",
    "bm25",
    "hybrid_rrf",
    "hybrid_weighted",
    "hybrid_convex",
)
CONDITIONS = ("clean", "stored_noise", "query_noise", "both_noise", "message")
#: Row conditions in display order (``message_any`` and ``generic`` are derived rows).
ROW_CONDITIONS = ("clean", "stored_noise", "query_noise", "both_noise", "message", "message_any", "generic")
#: Distractor sentences added per passage / per query in the noisy conditions.
NOISE_SENTENCES = 5
CONTEXTS_PER_FAMILY = 4
#: Representations that pool token vectors (need ``embed_tokens``).
LATE_REPRESENTATIONS = ("late", "late_only")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class FixtureError(InputError):
    """The controlled fixture does not follow the documented format."""


@dataclass(frozen=True)
class Context:
    id: str
    passage: str
    query: str
    query_message: str


@dataclass(frozen=True)
class Family:
    id: str
    block: str
    sentence: str
    contexts: tuple[Context, ...]
    generic_query: str


@dataclass(frozen=True)
class Fixture:
    families: tuple[Family, ...]
    distractors: tuple[str, ...]
    source: str = "<dict>"

    @property
    def blocks(self) -> list[str]:
        return list(dict.fromkeys(f.block for f in self.families))


@dataclass
class ControlledResult:
    """Rows (see :func:`run_controlled`), the run's config, and per-query credits for inspection."""

    rows: list[dict[str, Any]]
    config: dict[str, Any]
    per_query: list[dict[str, Any]] = field(default_factory=list)


def load_fixture(source: str | os.PathLike[str] | Mapping[str, Any]) -> Fixture:
    """Read and validate a fixture (a path to JSON or an already-parsed dict)."""
    if isinstance(source, Mapping):
        data, where = source, "<dict>"
    else:
        where = str(source)
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FixtureError(f"fixture {where} does not exist") from None
        except json.JSONDecodeError as exc:
            raise FixtureError(f"fixture {where} is not valid JSON: {exc}") from None
    if not isinstance(data, Mapping) or data.get("version") != 1:
        raise FixtureError(f'fixture {where}: expected a JSON object with "version": 1')
    fams = data.get("families")
    if not isinstance(fams, list) or not fams:
        raise FixtureError(f'fixture {where}: "families" must be a non-empty list')
    distractors = data.get("distractors") or []
    if not isinstance(distractors, list) or not all(isinstance(d, str) and d.strip() for d in distractors):
        raise FixtureError(f'fixture {where}: "distractors" must be a list of non-empty sentences')
    if len(distractors) < NOISE_SENTENCES:
        raise FixtureError(f"fixture {where}: needs at least {NOISE_SENTENCES} distractors, has {len(distractors)}")
    families: list[Family] = []
    seen: set[str] = set()
    for i, f in enumerate(fams):
        at = f"fixture {where}, family {i}"
        try:
            fid, block, sentence, generic = str(f["id"]), str(f["block"]), str(f["sentence"]), str(f["generic_query"])
            raw_contexts = f["contexts"]
        except (KeyError, TypeError):
            raise FixtureError(f"{at}: needs id, block, sentence, contexts and generic_query") from None
        if fid in seen:
            raise FixtureError(f"{at}: duplicate family id {fid!r}")
        seen.add(fid)
        if not isinstance(raw_contexts, list) or len(raw_contexts) != CONTEXTS_PER_FAMILY:
            raise FixtureError(f"{at} ({fid}): needs exactly {CONTEXTS_PER_FAMILY} contexts")
        contexts = []
        for j, c in enumerate(raw_contexts):
            try:
                ctx = Context(str(c["id"]), str(c["passage"]), str(c["query"]), str(c["query_message"]))
            except (KeyError, TypeError):
                raise FixtureError(f"{at} ({fid}), context {j}: needs id, passage, query and query_message") from None
            count = ctx.passage.count(sentence)
            if count != 1:
                raise FixtureError(
                    f"{at} ({fid}), context {ctx.id}: the passage must contain the shared sentence verbatim "
                    f"exactly once (found {count} times)"
                )
            if ctx.id in seen:
                raise FixtureError(f"{at}: duplicate context id {ctx.id!r}")
            seen.add(ctx.id)
            contexts.append(ctx)
        families.append(Family(fid, block, sentence, tuple(contexts), generic))
    return Fixture(tuple(families), tuple(distractors), where)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def noisy_passage(
    passage: str, sentence: str, distractors: Sequence[str], rng: random.Random, n: int = NOISE_SENTENCES
) -> str:
    """``passage`` with ``n`` distractors inserted at random sentence boundaries; ``sentence`` stays intact."""
    at = passage.index(sentence)
    units = _sentences(passage[:at]) + [sentence] + _sentences(passage[at + len(sentence) :])
    for d in rng.sample(list(distractors), n):
        units.insert(rng.randint(0, len(units)), d)
    return " ".join(units)


def noisy_query(query: str, distractors: Sequence[str], rng: random.Random, n: int = NOISE_SENTENCES) -> str:
    """``query`` with ``n`` distractors around it (a random number of them before it)."""
    chosen = rng.sample(list(distractors), n)
    before = rng.randint(0, n)
    return " ".join(chosen[:before] + [query] + chosen[before:])


def late_sentence_vector(embedder: Any, passage: str, sentence: str) -> np.ndarray:
    """``L(sentence | passage)``: the sentence's span pooled from the token vectors of the whole
    passage (late chunking; :meth:`LocalEmbedder.embed_tokens` + :func:`pool_spans`)."""
    if not hasattr(embedder, "embed_tokens"):
        raise InputError(
            f"the late-chunking representations {', '.join(LATE_REPRESENTATIONS)} need token-level output, which "
            f"{type(getattr(embedder, 'inner', embedder)).__name__} does not give; "
            "use the local embedder or leave them out"
        )
    from ..embedders.local import pool_spans

    text, target = clean_text(passage), clean_text(sentence)
    start = text.find(target)
    if start < 0:  # cleaning changed the sentence's surroundings: pool over the raw passage
        text, target = passage, sentence
        start = text.index(target)
    return pool_spans(embedder.embed_tokens(text), [(start, start + len(target))])[0]


@dataclass
class _Record:
    family: int  # index into the block's families
    context: Context
    sentence: str
    noisy_passage: str


def run_controlled(
    fixture: Fixture | str | os.PathLike[str] | Mapping[str, Any],
    embedder: Embedder,
    *,
    representations: Sequence[str] = REPRESENTATIONS,
    conditions: Sequence[str] = CONDITIONS,
    weight: float = OWN_WEIGHT,
    seed: int = 0,
    fusion: FusionSettings = RUNTIME_DEFAULT,
    generic: bool = True,
    limit_families: int | None = None,
) -> ControlledResult:
    """Run the controlled test; one row per (representation, condition, block) plus ``block="all"``.

    Row: ``{"representation", "condition", "block", "top1", "n"}`` with ``top1`` the mean credit
    (0–1) over ``n`` queries; ``generic`` rows count families instead. Deterministic for a seed.
    ``fusion``: the lexical weight, RRF k and candidates per side of the hybrid representations (each
    runs its own method; no floor here, so its lexical floor is not used).
    """
    fx = fixture if isinstance(fixture, Fixture) else load_fixture(fixture)
    unknown = [r for r in representations if r not in REPRESENTATIONS]
    if unknown:
        raise InputError(f"unknown controlled representation(s) {unknown}; choose from {', '.join(REPRESENTATIONS)}")
    bad = [c for c in conditions if c not in CONDITIONS]
    if bad:
        raise InputError(f"unknown condition(s) {bad}; choose from {', '.join(CONDITIONS)}")
    families = list(fx.families[:limit_families] if limit_families else fx.families)
    emb = cached_embedder(embedder)

    # Noisy texts, fixed by the seed and the context id (independent of run order and filters).
    stored_noisy: dict[str, str] = {}
    query_noisy: dict[str, str] = {}
    for fam in families:
        for ctx in fam.contexts:
            rng = random.Random(f"{seed}/stored/{ctx.id}")
            stored_noisy[ctx.id] = noisy_passage(ctx.passage, fam.sentence, fx.distractors, rng)
            query_noisy[ctx.id] = noisy_query(ctx.query, fx.distractors, random.Random(f"{seed}/query/{ctx.id}"))

    # Embed every distinct text once, in one batch.
    texts: list[str] = []
    for fam in families:
        texts += [fam.sentence, whole_message(fam.generic_query)]
        for ctx in fam.contexts:
            texts += [ctx.passage, stored_noisy[ctx.id], whole_message(ctx.query), whole_message(query_noisy[ctx.id])]
            texts += split_prompt_chunks(ctx.query_message) + [whole_message(ctx.query_message)]
    embed_fitting(emb, list(dict.fromkeys(t for t in texts if t)))

    def vec(text: str) -> np.ndarray:
        return embed_fitting(emb, [text])[0]

    credits: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    per_query: list[dict[str, Any]] = []

    def record(rep: str, cond: str, block: str, query_id: str, credit: float) -> None:
        credits[(rep, cond, block)].append(credit)
        per_query.append(
            {"representation": rep, "condition": cond, "block": block, "query_id": query_id, "top1": credit}
        )

    blocks = list(dict.fromkeys(f.block for f in families))
    for block in blocks:
        fams = [f for f in families if f.block == block]
        records = [
            _Record(fi, ctx, fam.sentence, stored_noisy[ctx.id]) for fi, fam in enumerate(fams) for ctx in fam.contexts
        ]
        n = len(records)
        sent = np.vstack([vec(r.sentence) for r in records])
        stored = {
            "clean": np.vstack([vec(r.context.passage) for r in records]),
            "noisy": np.vstack([vec(r.noisy_passage) for r in records]),
        }
        blended = {k: blend_with_context(sent, v, weight) for k, v in stored.items()}
        late: dict[str, np.ndarray] = {}
        late_only: dict[str, np.ndarray] = {}
        if any(r in LATE_REPRESENTATIONS for r in representations):
            pooled = {
                "clean": np.vstack([late_sentence_vector(emb, r.context.passage, r.sentence) for r in records]),
                "noisy": np.vstack([late_sentence_vector(emb, r.noisy_passage, r.sentence) for r in records]),
            }
            late = {k: blend_with_context(sent, v, weight) for k, v in pooled.items()}
            late_only = {k: blend_with_context(sent, v, 0.0) for k, v in pooled.items()}  # = unit(pooled)
        # Record ids are seeded hashes: BM25 breaks score ties by id, and identical stored sentences
        # tie, so ids must not favour one context systematically.
        ids = [hashlib.sha256(f"{seed}/{block}/{r.context.id}".encode()).hexdigest()[:16] for r in records]
        index_of = {rid: i for i, rid in enumerate(ids)}
        lexical = _lexical_index(block, records, ids) if _needs_lexical(representations) else None

        stores: dict[str, ExactStore] = {}

        def exact(
            side: str, records: Sequence[_Record] = records, ids: Sequence[str] = ids, block: str = block
        ) -> ExactStore:
            """The block's records with their blended vectors, for the runtime's hybrid search."""
            if side not in stores:
                metas = [{"thread_id": block, "turn_id": r.context.id} for r in records]
                stores[side] = ExactStore(ids, blended[side], [r.sentence for r in records], metas)
            return stores[side]

        def group_scores(rep: str, part: str, whole: str, side: str) -> np.ndarray:
            """Scores of every record of the block for one query part (``whole`` = its message)."""
            if rep == "isolated":
                return sent @ vec(whole_message(part))
            if rep == "whole":
                return stored[side] @ vec(whole)
            p = vec(whole_message(part))
            if rep == "blend_stored_only":
                return blended[side] @ p
            if rep == "late":
                return late[side] @ blend_with_context(p, vec(whole), weight)
            if rep == "late_only":  # weight 0 on both sides, as the runtime blends queries at the stored weight
                return late_only[side] @ blend_with_context(p, vec(whole), 0.0)
            dense = blended[side] @ blend_with_context(p, vec(whole), weight)
            if rep == "blend":
                return dense
            lex = lexical.search(part, n, [block]) if lexical is not None else []
            lex_scores = np.full(n, -np.inf)
            for rid, s in lex:
                lex_scores[index_of[rid]] = s
            if rep == "bm25":
                return lex_scores
            rule = with_candidates(fusion_for(rep, fusion), fusion.candidates, None)
            qvec = blend_with_context(p, vec(whole), weight)[None, :]
            assert lexical is not None
            (cand,) = hybrid_candidates(exact(side), block, [part], qvec, k=1, fusion=rule)
            out = np.full(n, -np.inf)
            for rid, score in cand.ranked:
                out[index_of[rid]] = score
            return out

        for gi, rec in enumerate(records):
            ctx = rec.context
            for cond in conditions:
                side = "noisy" if cond in ("stored_noise", "both_noise") else "clean"
                if cond == "message":
                    parts = split_prompt_chunks(ctx.query_message)
                    whole = whole_message(ctx.query_message)
                    intent = intent_part(parts, ctx.query)
                else:
                    whole = whole_message(query_noisy[ctx.id] if cond in ("query_noise", "both_noise") else ctx.query)
                    parts, intent = [ctx.query], 0
                for rep in representations:
                    if rep == "whole":  # one vector for the whole message: a single group
                        groups = [group_scores(rep, whole, whole, side)]
                        rep_intent = 0
                    else:
                        groups = [group_scores(rep, part, whole, side) for part in parts]
                        rep_intent = intent
                    got = [top1_credit(g, gi) for g in groups]
                    record(rep, cond, block, ctx.id, got[rep_intent])
                    if cond == "message":
                        record(rep, "message_any", block, ctx.id, max(got))
        if generic:
            for fi, fam in enumerate(fams):
                members = [i for i, r in enumerate(records) if r.family == fi]
                g = whole_message(fam.generic_query)
                for rep in representations:
                    ok = top_block(group_scores(rep, g, g, "clean"), members)
                    record(rep, "generic", block, fam.id, 1.0 if ok else 0.0)
        if lexical is not None:
            lexical.close()

    rows: list[dict[str, Any]] = []
    for rep in representations:
        for cond in ROW_CONDITIONS:
            every: list[float] = []
            for block in blocks:
                vals = credits.get((rep, cond, block))
                if vals is None:
                    continue
                every += vals
                rows.append(
                    {"representation": rep, "condition": cond, "block": block, "top1": mean(vals), "n": len(vals)}
                )
            if every:
                rows.append(
                    {"representation": rep, "condition": cond, "block": "all", "top1": mean(every), "n": len(every)}
                )
    config = {
        "harness": "controlled",
        "fixture": fx.source,
        "embedder": emb.model_id,
        "dims": emb.dims,
        "weight": weight,
        "seed": seed,
        "noise_sentences": NOISE_SENTENCES,
        "lexical_weight": fusion.lexical_weight,
        "rrf_k": fusion.rrf_k,
        "candidates": fusion.candidates,
        "representations": list(representations),
        "conditions": list(conditions),
        "counts": {
            "families": len(families),
            "records": sum(len(f.contexts) for f in families),
            "blocks": {b: sum(1 for f in families if f.block == b) for b in blocks},
        },
    }
    return ControlledResult(rows, config, per_query)


def _needs_lexical(representations: Sequence[str]) -> bool:
    return any(r == "bm25" or r in HYBRID_REPRESENTATIONS for r in representations)


def _lexical_index(block: str, records: Sequence[_Record], ids: Sequence[str]) -> LexicalIndex:
    """BM25 over the records' stored text (the shared sentence)."""
    index = LexicalIndex(":memory:")
    index.upsert(list(ids), [r.sentence for r in records], [block] * len(records), [r.context.id for r in records])
    return index
