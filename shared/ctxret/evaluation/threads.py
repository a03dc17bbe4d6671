"""The production-thread protocol, on LoCoMo conversations and on your own JSONL threads.

Per conversation (every search is scoped to it): a session (LoCoMo) or turn (JSONL) is a
*section*; its pieces are made by the real pipeline (:func:`ctxret.index.fit_pieces`: labelled,
packed to the piece byte budget, re-packed to the model's token limit) and every search is exact
cosine with numpy (no ANN).

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

The data and query sets are in :mod:`.datasets`, the index in :mod:`.index`, the representations in
:mod:`.representations`, the scoring of one answer in :mod:`.scoring`, the paired statistics in
:mod:`.stats`.
"""

from __future__ import annotations

import math
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..blend import OWN_WEIGHT
from ..embedders.base import Embedder
from ..embedders.fitting import embed_fitting
from ..errors import InputError
from ..query.fusion import FusionSettings
from ..query.split import split_prompt_chunks
from . import views  # noqa: F401  (importing it registers the opt-in LLM-views and HyDE representations)
from .datasets import (
    DEFAULT_QUERY_SETS,
    QUERY_SETS,
    Conversation,
    load_jsonl,
    load_locomo,
    load_threads,
    select_queries,
)
from .distracted import DISTRACTED, distracted_comparison, distracted_queries, distracted_rows, score_distracted
from .embedding import CachedEmbedder, cached_embedder
from .floorset import FOREIGN, floor_metrics, floor_report, foreign_metrics, foreign_queries, time_floor_metrics
from .hybrid import RUNTIME_DEFAULT
from .index import ConversationIndex, whole_message
from .metrics import budget_recall, mean
from .ranking import RANKING_REPRESENTATIONS, answer_metrics, ranking_comparison
from .representations import NEEDS_TOKENS, OPT_IN, PEERS, THREAD_REPRESENTATIONS, register_representation
from .scoring import score_composite, score_query
from .stats import by_query, compare
from .timequeries import TIME_QUERY_SETS
from .timeset import TIME_REPRESENTATIONS, TimeAware, score_time, time_breakdown, time_comparison
from .updates import run_updates

__all__ = [
    "ThreadsResult",
    "peer_comparison",
    "prewarm",
    "run_threads",
    # where they lived before the harness was split (:mod:`.datasets`, :mod:`.index`, :mod:`.representations`)
    "Conversation",
    "ConversationIndex",
    "THREAD_REPRESENTATIONS",
    "load_jsonl",
    "load_locomo",
    "load_threads",
    "register_representation",
]

#: Byte budgets of the equal-budget recall columns (``recall_1000b``, ``recall_4000b``).
BUDGETS = (1000, 4000)


_WINDOW_METRICS = ("top1_window", "top5_window", "window_has_evidence")
_AGGREGATED = (
    "top1_section",
    "top1_section_floor",
    "mrr",
    "recall",
    *(f"recall_{b}b" for b in BUDGETS),
    *_WINDOW_METRICS,
)


@dataclass
class ThreadsResult:
    rows: list[dict[str, Any]]
    config: dict[str, Any]
    #: Per-query metric dicts: {"conversation", "representation", "query_set", "query_id", metrics...}.
    per_query: list[dict[str, Any]] = field(default_factory=list)


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
    weight: float = OWN_WEIGHT,
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
        if FOREIGN in query_sets:
            sets[FOREIGN] = foreign_queries(conv, convs, limit_queries)
        sets = {s: sets[s] for s in query_sets if s in sets and s != DISTRACTED}
        distracted = distracted_queries(conv, limit_queries, seed) if DISTRACTED in query_sets else []
        messages = (
            [q.text for s in ("facts", "qa", *TIME_QUERY_SETS, FOREIGN) for q in sets.get(s, [])]
            + [c.text for c in sets.get("composite", [])]
            + [t for d in distracted for t in (d.text, d.question.text)]
        )
        prewarm(emb, messages)
        ix = ConversationIndex(conv, emb, piece_bytes=piece_bytes, weight=weight, fusion=fusion, k=k)
        counts["conversations"] += 1
        counts["sections"] += len(conv.turns)
        counts["pieces"] += len(ix.pieces)
        counts["facts"] += len(sets.get("facts", []))
        counts["qa"] += len(sets.get("qa", []))
        counts["composite_messages"] += len(sets.get("composite", []))
        counts["composite_facts"] += sum(len(c.facts) for c in sets.get("composite", []))
        if DISTRACTED in query_sets:
            counts[DISTRACTED] += len(distracted)
        for qs in (*TIME_QUERY_SETS, FOREIGN):
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
                + "".join(f", {len(sets[s])} {s}" for s in TIME_QUERY_SETS if s in sets)
                + (f", {len(distracted)} distracted" if DISTRACTED in query_sets else ""),
                file=sys.stderr,
                flush=True,
            )
        whole: dict[str, float] = {}  # the whole-message search of a distracted message: one per message
        for rep in representations:
            fn = THREAD_REPRESENTATIONS[rep]
            for qs in ("facts", "qa"):
                for q in sets.get(qs, []):
                    ret = fn(ix, q.text)
                    m = score_query(ix, ret, q, k, floor)
                    m.update(floor_metrics(ix, ret, q, k, floor))
                    m.update(answer_metrics(ix, ret, q))
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
                    floored = time_floor_metrics(ix, ret, tq, k, floor)
                    for key, val in m.items():
                        acc[(rep, qs)][key].append(val)
                    per_query.append(
                        {
                            "conversation": conv.id,
                            "representation": rep,
                            "query_set": qs,
                            "query_id": tq.id,
                            "kind": tq.kind,
                            "base": tq.base,
                            **m,
                            **floored,
                        }
                    )
            for d in distracted:
                m = score_distracted(ix, fn, d, k, floor, whole.get(d.id))
                whole[d.id] = m["recall_whole"]
                ids = {"conversation": conv.id, "representation": rep, "query_set": DISTRACTED, "query_id": d.id}
                per_query.append({**ids, **m})
            for fq in sets.get(FOREIGN, []):
                per_query.append(
                    {
                        "conversation": conv.id,
                        "representation": rep,
                        "query_set": FOREIGN,
                        "query_id": fq.id,
                        **foreign_metrics(fn(ix, fq.text), k, floor),
                    }
                )
            if "composite" in sets and rep != "whole_turn":
                for cq in sets["composite"]:
                    cov = score_composite(ix, fn(ix, cq.text), cq, k)
                    acc[(rep, "composite")]["coverage"].extend(cov)
                    for fact, c in zip(cq.facts, cov, strict=False):
                        per_query.append(
                            {
                                "conversation": conv.id,
                                "representation": rep,
                                "query_set": "composite",
                                "query_id": f"{cq.id}/{fact.id}",
                                "coverage": c,
                            }
                        )
        ix.close()
    for name in ("updates", "updates_twice"):
        if name not in query_sets:
            continue
        per_query.extend(
            run_updates(
                convs,
                emb,
                representations,
                k=k,
                seed=seed,
                limit=limit_queries,
                twice=name == "updates_twice",
                piece_bytes=piece_bytes,
                weight=weight,
                fusion=fusion,
            )
        )
        counts[name] = len({r["query_id"] for r in per_query if r["query_set"] == name})
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
    if DISTRACTED in query_sets:
        rows.extend(distracted_rows(per_query, representations, recall_key))
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
        "runtime_default_fusion": {
            **RUNTIME_DEFAULT.fusion_dict(),
            "candidates": RUNTIME_DEFAULT.candidates,
            "lexical_floor": RUNTIME_DEFAULT.lexical_floor,
        },
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
    if DISTRACTED in query_sets:
        config["distracted_comparison"] = distracted_comparison(per_query, recall_key)
    config["floor_report"] = floor_report(per_query)
    if any(r in RANKING_REPRESENTATIONS for r in representations):
        config["ranking_comparison"] = ranking_comparison(per_query, recall_key)
    return ThreadsResult(rows, config, per_query)


#: What the peer comparison compares: (query set, metric key).
COMPARED_METRICS = (
    ("facts", "top1_section"),
    ("qa", "recall"),
    ("qa", "top1_section"),
    *(("qa", f"recall_{b}b") for b in BUDGETS),
    ("composite", "coverage"),
)


def peer_comparison(
    per_query: Sequence[dict[str, Any]], recall_key: str = "recall_at_5", system: str = "hybrid_default"
) -> list[dict[str, Any]]:
    """The runtime default against each peer, paired per query: mean difference with a 95% interval.

    One row per (peer, query set, metric): ``diff`` (normal interval on the per-query
    differences), ``bootstrap`` (queries resampled within conversations) and ``per_conversation``.
    """
    by = by_query(per_query)
    out: list[dict[str, Any]] = []
    for peer in PEERS:
        for qs, metric in COMPARED_METRICS:
            mine, theirs = by.get((system, qs)), by.get((peer, qs))
            paired = compare(mine, theirs, metric) if mine and theirs else None
            if paired is not None:
                name = recall_key if metric == "recall" else metric
                out.append({"system": system, "peer": peer, "query_set": qs, "metric": name, **paired})
    return out
