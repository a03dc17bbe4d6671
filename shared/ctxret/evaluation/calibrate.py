"""``ctxret eval calibrate``: pick the blend weight, piece budget, floor and fusion on your own threads.

Each sweep varies one setting and keeps the others at the values given (defaults: weight 0.8,
the embedder's piece budget and floor), on the thread protocol of :mod:`.threads`:

* ``weight`` (0.6–1.0; 1.0 = no blend) and ``piece_bytes`` (0.5–2× the embedder's default): the
  runtime's dense search (``pieces_blend_split``) on every query set. Best: the highest facts
  ``top1_section`` (ties: higher MRR, then the value nearest the current one); recommended only
  when it beats the current value by more than one binomial standard error — otherwise the
  current value is kept (the note says so).
* ``threshold`` (cosine floor): from the top hits of the dense search ``floor_representation``
  (default ``pieces_blend``). For each floor, the share of correct top hits kept and of wrong top
  hits rejected, on the facts (``correct_kept``, ``wrong_rejected``; the questions when there are
  no facts) and on the questions (``qa_correct_kept``, ``qa_wrong_rejected``); and the share of
  :data:`OFF_TOPIC_QUESTIONS` (40 questions about things a personal conversation does not hold,
  each asked in every conversation) that still return any hit — dense
  (``offtopic_any_<floor_representation>``) and with the runtime's default hybrid search
  (``offtopic_any_hybrid_default``: its floor rule lets a hit under the cosine floor through on
  lexical evidence); and the QA evidence recall of what each of the two searches returns once the
  floor has dropped hits (``qa_recall_at_5_floor_<representation>``). Recommended: the highest
  floor that still keeps :data:`KEEP_CORRECT` (95%) of the correct top hits of the facts and of
  the questions — a floor drops memories, so it is set conservatively; it is an upper bound: the
  other columns show what that floor buys and costs.
* ``fusion``: every method × ``lexical_weight`` × ``rrf_k`` of the hybrid search (per part,
  ``DEFAULT_CANDIDATES`` of each side, :func:`ctxret.query.fusion.fuse`), against dense-only
  over the same stored side (``dense_default``: the embedder's default, e.g. late chunking for the
  local model) and BM25-only. Criterion (the hybrid issue's): at least as good as the
  better single side on facts ``top1_section`` and on QA ``recall_at_k``. ``margin`` = the smaller
  of the two differences to that better side; recommended: the largest margin (ties: the larger
  sum). Facts alone are used when there are no questions, and vice versa.
* ``relevance``: fits the coefficients of ``relevance`` (:mod:`ctxret.query.relevance`) on every
  candidate among the top :data:`~ctxret.query.relevance.CALIBRATION_POOL` of each query part's
  runtime hybrid ranking over the embedder's default stored side (facts and questions), labelled
  right when the piece holds one of the query's evidence units; reports how well it separates
  right from wrong (AUC, log loss; the same for the cosine and the fused score), a reliability
  table (predicted vs observed share right), and with two or more conversations the same measured
  on each conversation with the coefficients fitted on the others. Recommended: the coefficients,
  printed ready to paste.

The sweep chooses on the same queries it reports, so its best number is optimistic. With two or
more conversations a leave-one-conversation-out estimate is reported too: for each conversation,
the configuration is chosen on the others and scored on it.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..blend import OWN_WEIGHT
from ..embedders.base import Embedder
from ..errors import InputError
from ..ingest.turns import MIN_BODY_BYTES
from ..query.fusion import FusionMethod, FusionSettings
from ..query.search import fuse_candidates
from .datasets import Conversation, select_queries
from .embedding import cached_embedder
from .hybrid import RUNTIME_DEFAULT, hybrid_candidates, with_candidates
from .index import ConversationIndex, Retrieval
from .metrics import evidence_recall, mean
from .representations import THREAD_REPRESENTATIONS
from .scoring import best_group, returns_any, score_query
from .threads import prewarm, run_threads

WEIGHT_GRID = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
PIECE_BYTES_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0)
THRESHOLD_GRID = tuple(round(x, 2) for x in np.arange(0.0, 0.85, 0.05))
LEXICAL_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
RRF_KS = (10.0, 30.0, 60.0, 100.0)
#: The recommended floor keeps at least this share of the correct top hits.
KEEP_CORRECT = 0.95
DENSE = "pieces_blend_split"
#: The dense baseline of the fusion sweep: dense only over the stored side the hybrid ranks (the
#: embedder's default, as at runtime).
FUSION_DENSE = "dense_default"
#: The dense search whose top hits the floor sweep scores (one whole-message vector per query).
FLOOR_REPRESENTATION = "pieces_blend"
#: The hybrid search the floor sweep asks the off-topic questions of: the runtime's default.
OFFTOPIC_HYBRID = "hybrid_default"

#: Questions about things absent from personal conversations (LoCoMo's, or an assistant's chats
#: about home and work): a good floor returns nothing for them. Each is asked in every
#: conversation. Written for this harness; fixed, so runs compare.
OFF_TOPIC_QUESTIONS = (
    "What is the boiling point of tungsten?",
    "How does TCP congestion control react to packet loss?",
    "What is the Chandrasekhar limit for white dwarfs?",
    "Which enzyme unwinds DNA during replication?",
    "How is the Black-Scholes formula used to price options?",
    "What is the time complexity of Dijkstra's algorithm with a binary heap?",
    "What does the Higgs boson mass imply for vacuum stability?",
    "How do you compute the eigenvalues of a 3x3 matrix?",
    "How are Treasury bond coupons taxed?",
    "Which amino acid does the codon AUG encode?",
    "What is the melting point of gallium?",
    "How does a Kalman filter estimate the state of a system?",
    "What causes the Meissner effect in superconductors?",
    "How many neutrons are in uranium-238?",
    "What is the Nyquist frequency of a 44.1 kHz audio signal?",
    "Which Roman emperor built the wall across northern Britain?",
    "What is the torque specification for cylinder head bolts on a diesel engine?",
    "How does lattice QCD compute hadron masses?",
    "What is the half-life of carbon-14?",
    "How do you configure BGP route reflectors?",
    "At what Reynolds number does pipe flow stop being laminar?",
    "Which treaty ended the Thirty Years' War?",
    "How many ATP molecules does the Krebs cycle yield per glucose?",
    "What is the atomic number of molybdenum?",
    "How is the Gini coefficient calculated?",
    "What does the Schwarzschild radius of a black hole depend on?",
    "How do you tune a PID controller with the Ziegler-Nichols method?",
    "What is the speed of sound in seawater?",
    "How does Kerberos issue a ticket-granting ticket?",
    "What does the Riemann hypothesis state about the zeta function?",
    "How is sulfuric acid produced by the contact process?",
    "What is the yield strength of 316 stainless steel?",
    "How does CRISPR-Cas9 cut a DNA strand?",
    "What is the orbital period of Neptune?",
    "How do you normalize a relational database to third normal form?",
    "What is the dielectric constant of silicon dioxide?",
    "Which court decided Marbury v. Madison?",
    "How does a Stirling engine convert heat into work?",
    "What is the ionization energy of hydrogen?",
    "How does quantitative easing affect bond yields?",
)


def fusion_grid(
    lexical_weights: Sequence[float] = LEXICAL_WEIGHTS, rrf_ks: Sequence[float] = RRF_KS
) -> list[FusionSettings]:
    """Equal RRF at every k, weighted RRF at every weight × k, convex at every weight."""
    grid = [FusionSettings(FusionMethod.RRF, 0.5, k) for k in rrf_ks]
    grid += [FusionSettings(FusionMethod.WEIGHTED_RRF, w, k) for w in lexical_weights for k in rrf_ks]
    grid += [FusionSettings(FusionMethod.CONVEX, w, 60.0) for w in lexical_weights]
    return grid


@dataclass
class CalibrationResult:
    recommended: dict[str, Any]
    curves: dict[str, list[dict[str, Any]]]
    config: dict[str, Any]
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every curve point as a flat row (``{"sweep": name, ...}``), for ``--json``."""
        return [{"sweep": name, **row} for name, rows in self.curves.items() for row in rows]


def _metrics(rows: Sequence[dict[str, Any]], k: int) -> dict[str, float]:
    by = {r["query_set"]: r for r in rows}
    out: dict[str, float] = {}
    if "facts" in by:
        out["facts_top1_section"] = by["facts"]["top1_section"]
        out["facts_mrr"] = by["facts"]["mrr"]
    if "qa" in by:
        out["qa_top1_section"] = by["qa"]["top1_section"]
        out[f"qa_recall_at_{k}"] = by["qa"].get(f"recall_at_{k}", math.nan)
    if "composite" in by:
        out["composite_coverage"] = by["composite"]["coverage"]
    return out


def _pick(curve: list[dict[str, Any]], key: str, current: float, n: int) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(best row, recommended row, note). The best row maximises the main metric (facts
    ``top1_section``; ties: MRR, then nearness to ``current``); it is recommended only when it beats
    the current value by more than one binomial standard error, else the current value stays."""
    main = "facts_top1_section" if any("facts_top1_section" in r for r in curve) else "qa_top1_section"
    tie = "facts_mrr" if main == "facts_top1_section" else "qa_top1_section"
    best = max(curve, key=lambda r: (round(r.get(main, 0.0), 9), round(r.get(tie, 0.0), 9), -abs(r[key] - current)))
    here = min(curve, key=lambda r: abs(r[key] - current))
    p = here.get(main, 0.0)
    se = math.sqrt(max(p * (1 - p), 1e-12) / max(n, 1))
    gain = best.get(main, 0.0) - p
    if best is here or gain <= se:
        note = (
            f"{key}: best {best[key]:g} ({main} {best.get(main, 0.0) * 100:.1f}%) gains {gain * 100:+.1f} points over "
            f"{here[key]:g}, within one standard error (±{se * 100:.1f} points, n={n}): keep {here[key]:g}"
        )
        return best, here, note
    note = (
        f"{key}: {best[key]:g} gains {gain * 100:+.1f} points of {main} over {here[key]:g} "
        f"(one standard error ±{se * 100:.1f} points, n={n})"
    )
    return best, best, note


def _main_n(rows: Sequence[dict[str, Any]]) -> int:
    by = {r["query_set"]: r for r in rows}
    return int((by.get("facts") or by.get("qa") or {"n": 0})["n"])


def run_calibrate(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    k: int = 5,
    weight: float = OWN_WEIGHT,
    piece_bytes: int | None = None,
    threshold: float | None = None,
    weights: Sequence[float] = WEIGHT_GRID,
    piece_bytes_grid: Sequence[int] | None = None,
    thresholds: Sequence[float] = THRESHOLD_GRID,
    fusion_configs: Sequence[FusionSettings] | None = None,
    fusion: FusionSettings = RUNTIME_DEFAULT,
    limit_conversations: int | None = None,
    limit_queries: int | None = None,
    seed: int = 0,
    sweeps: Sequence[str] = ("weight", "piece_bytes", "threshold", "fusion", "relevance"),
    floor_representation: str = FLOOR_REPRESENTATION,
    off_topic: Sequence[str] | None = OFF_TOPIC_QUESTIONS,
    progress: bool = False,
    docs: Sequence[DocsSet] = (),
) -> CalibrationResult:
    """Run the sweeps (see the module docstring) and return the curves and recommended values.

    ``fusion``: the candidates per side and the lexical floor of every hybrid search (the fusion
    rule is what the fusion sweep varies; the other sweeps rank by the runtime default's)."""
    emb = cached_embedder(embedder)
    convs = list(conversations[:limit_conversations] if limit_conversations else conversations)
    if not any(c.facts or c.questions for c in convs):
        sources = ", ".join(sorted({c.source for c in convs})) or "the input"
        raise InputError(
            f"{sources} holds no labelled facts or questions, so there is nothing to calibrate against (every "
            'number would be 0/0). Add them to the threads: one JSON object per line with "thread_id", '
            '"messages", and "facts" ([{"text": ..., "turn": N}]) and/or "questions" '
            '([{"question": ..., "turns": [N]}]) — see `ctxret eval threads --help`'
        )
    base_bytes = int(piece_bytes or emb.default_piece_bytes)
    floor = emb.default_score_threshold if threshold is None else float(threshold)
    common: dict[str, Any] = dict(k=k, limit_queries=limit_queries, seed=seed, fusion=fusion)
    curves: dict[str, list[dict[str, Any]]] = {}
    recommended: dict[str, Any] = {}
    notes: list[str] = []

    def say(msg: str) -> None:
        if progress:
            print(f"[eval calibrate] {msg}", file=sys.stderr, flush=True)

    if "weight" in sweeps:
        curve = []
        for w in weights:
            say(f"weight {w:g}")
            res = run_threads(
                convs, emb, representations=[DENSE], weight=w, piece_bytes=base_bytes, threshold=floor, **common
            )
            curve.append({"weight": w, **_metrics(res.rows, k)})
            n_main = _main_n(res.rows)
        curves["weight"] = curve
        _, rec, note = _pick(curve, "weight", weight, n_main)
        recommended["weight"] = rec["weight"]
        notes.append(note)
    if "piece_bytes" in sweeps:
        grid = piece_bytes_grid or sorted({int(emb.default_piece_bytes * f) for f in PIECE_BYTES_FACTORS})
        grid = [b for b in grid if b >= MIN_BODY_BYTES + 96]
        curve = []
        for b in grid:
            say(f"piece_bytes {b}")
            res = run_threads(
                convs, emb, representations=[DENSE], weight=weight, piece_bytes=b, threshold=floor, **common
            )
            curve.append({"piece_bytes": b, "pieces": res.config["counts"].get("pieces", 0), **_metrics(res.rows, k)})
            n_main = _main_n(res.rows)
        curves["piece_bytes"] = curve
        _, rec, note = _pick(curve, "piece_bytes", base_bytes, n_main)
        recommended["piece_bytes"] = rec["piece_bytes"]
        notes.append(note)
    if "threshold" in sweeps:
        say("threshold")
        res = run_threads(
            convs,
            emb,
            representations=[floor_representation],
            query_sets=("facts", "qa"),
            weight=weight,
            piece_bytes=base_bytes,
            threshold=floor,
            **common,
        )
        tops = {
            qs: [
                (q["top_cosine"], q["top1_section"])
                for q in res.per_query
                if q["query_set"] == qs and "top_cosine" in q
            ]
            for qs in ("facts", "qa")
        }
        main = tops["facts"] or tops["qa"]
        say(
            f"threshold: recall after the floor, {len(off_topic or ())} off-topic questions x "
            f"{len(convs)} conversations"
        )
        effects = floor_effects(
            convs,
            emb,
            thresholds,
            questions=off_topic,
            representations=(floor_representation, OFFTOPIC_HYBRID),
            k=k,
            weight=weight,
            piece_bytes=base_bytes,
            fusion=fusion,
            limit_queries=limit_queries,
            seed=seed,
        )
        curve = []
        for i, t in enumerate(thresholds):
            row: dict[str, Any] = {"threshold": float(t)}
            shares = _floor_shares(main, t, "")
            row["top1_section_floor"] = shares.pop("kept_share")
            row.update(shares)
            if tops["facts"] and tops["qa"]:
                qa = _floor_shares(tops["qa"], t, "qa_")
                qa.pop("qa_kept_share")
                row.update(qa)
            row.update(effects[i])
            curve.append(row)
        curves["threshold"] = curve
        kept_keys = [key for key in ("correct_kept", "qa_correct_kept") if key in curve[0]]
        ok = [
            r["threshold"] for r in curve if all(not math.isnan(r[key]) and r[key] >= KEEP_CORRECT for key in kept_keys)
        ]
        recommended["threshold"] = max(ok) if ok else min(thresholds)
        chosen = next(r for r in curve if r["threshold"] == recommended["threshold"])
        note = (
            f"threshold: {recommended['threshold']:.2f} keeps {chosen['correct_kept'] * 100:.1f}% of correct top hits "
            f"and rejects {chosen['wrong_rejected'] * 100:.1f}% of wrong ones ({floor_representation})"
        )
        if "qa_correct_kept" in chosen:
            note += (
                f"; questions: keeps {chosen['qa_correct_kept'] * 100:.1f}%, "
                f"rejects {chosen['qa_wrong_rejected'] * 100:.1f}%"
            )
        offtopic = [key for key in chosen if key.startswith("offtopic_any_")]
        if offtopic:
            note += "; off-topic questions still answered: " + ", ".join(
                f"{key.removeprefix('offtopic_any_')} {chosen[key] * 100:.1f}%" for key in offtopic
            )
        notes.append(note)
    if "fusion" in sweeps:
        say("fusion")
        swept = fusion_sweep(
            convs,
            emb,
            configs=fusion_configs or fusion_grid(),
            k=k,
            weight=weight,
            piece_bytes=base_bytes,
            floor=floor,
            fusion=fusion,
            limit_queries=limit_queries,
            seed=seed,
        )
        curves["fusion"] = swept["curve"]
        curves["fusion_baselines"] = swept["baselines"]
        recommended["fusion"] = swept["recommended"]
        if "leave_one_out" in swept:
            curves["fusion_leave_one_out"] = [swept["leave_one_out"]]
        notes.extend(swept["notes"])
    if "relevance" in sweeps:
        say("relevance")
        rel = relevance_sweep(
            convs,
            emb,
            docs=docs,
            k=k,
            weight=weight,
            piece_bytes=base_bytes,
            fusion=fusion,
            limit_queries=limit_queries,
            seed=seed,
        )
        curves["relevance"] = rel["reliability"]
        curves["relevance_separation"] = rel["separation"]
        recommended["relevance"] = rel["recommended"]
        notes.extend(rel["notes"])
    config = {
        "harness": "calibrate",
        "floor_representation": floor_representation,
        "off_topic_questions": len(off_topic or ()),
        "sources": sorted({c.source for c in convs}),
        "embedder": emb.model_id,
        "dims": emb.dims,
        "k": k,
        "weight": weight,
        "piece_bytes": base_bytes,
        "threshold": floor,
        "seed": seed,
        "limit_conversations": limit_conversations,
        "limit_queries": limit_queries,
        "keep_correct": KEEP_CORRECT,
        "dense_representation": DENSE,
        "docs": [f"{d.name}: {d.note}" for d in docs],
    }
    return CalibrationResult(recommended, curves, config, notes)


def _floor_shares(tops: Sequence[tuple[float, float]], t: float, prefix: str) -> dict[str, float]:
    """Of ``(top cosine, top hit right)`` pairs: correct top hits kept and wrong ones rejected by floor ``t``."""
    n_right = sum(1 for _, ok in tops if ok)
    n_wrong = len(tops) - n_right
    kept = sum(1 for c, ok in tops if ok and c >= t)
    rejected = sum(1 for c, ok in tops if not ok and c < t)
    return {
        f"{prefix}kept_share": kept / len(tops) if tops else math.nan,
        f"{prefix}correct_kept": kept / n_right if n_right else math.nan,
        f"{prefix}wrong_rejected": rejected / n_wrong if n_wrong else math.nan,
    }


def floor_effects(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    floors: Sequence[float | None],
    *,
    questions: Sequence[str] | None = OFF_TOPIC_QUESTIONS,
    representations: Sequence[str] = (FLOOR_REPRESENTATION, OFFTOPIC_HYBRID),
    k: int = 5,
    weight: float = OWN_WEIGHT,
    piece_bytes: int | None = None,
    fusion: FusionSettings = RUNTIME_DEFAULT,
    limit_queries: int | None = None,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """What each floor does to what a search returns, by the runtime's floor rule, per representation:

    * ``qa_recall_at_<k>_floor_<rep>``: evidence recall of the hits the search returns — the top
      ``k`` of the scored group that survive the floor (a floor also drops lower hits that hold
      evidence, which the top-hit shares do not show);
    * ``offtopic_any_<rep>``: the share of ``questions`` × conversations that return any hit
      (:func:`.scoring.returns_any`).

    One row per floor: ``{"threshold", ...}``; keys whose query set is empty are left out."""
    emb = cached_embedder(embedder)
    questions = list(questions or ())
    prewarm(emb, questions)
    recall: dict[str, list[list[float]]] = {rep: [[] for _ in floors] for rep in representations}
    hits = {rep: [0] * len(floors) for rep in representations}
    n_off = 0
    for conv in conversations:
        qa = select_queries(conv, limit_queries, seed)["qa"]
        prewarm(emb, [q.text for q in qa])
        ix = ConversationIndex(conv, emb, piece_bytes=piece_bytes, weight=weight, fusion=fusion, k=k)
        for q in qa:
            for rep in representations:
                g = best_group(THREAD_REPRESENTATIONS[rep](ix, q.text).groups)
                for i, f in enumerate(floors):
                    items = g.items[g.kept(f)[:k]] if g is not None else []
                    recall[rep][i].append(evidence_recall([ix.piece_units[j] for j in items], q.evidence))
        for text in questions:
            n_off += 1
            for rep in representations:
                ret = THREAD_REPRESENTATIONS[rep](ix, text)
                for i, f in enumerate(floors):
                    hits[rep][i] += returns_any(ret, f)
        ix.close()
    rows = []
    for i, f in enumerate(floors):
        row: dict[str, Any] = {"threshold": f}
        for rep in representations:
            if recall[rep][i]:
                row[f"qa_recall_at_{k}_floor_{rep}"] = mean(recall[rep][i])
        for rep in representations:
            if n_off:
                row[f"offtopic_any_{rep}"] = hits[rep][i] / n_off
        rows.append(row)
    return rows


def _indexed(
    conversations: Sequence[Conversation],
    emb: Any,
    piece_bytes: int | None,
    weight: float,
    fusion: FusionSettings,
    k: int,
    limit_queries: int | None,
    seed: int,
) -> Iterator[tuple[Conversation, dict[str, list[Any]], ConversationIndex]]:
    """Each conversation with its selected facts and questions (their texts embedded ahead) and its
    index, closed when the caller moves on."""
    for conv in conversations:
        sets = select_queries(conv, limit_queries, seed)
        prewarm(emb, [q.text for s in ("facts", "qa") for q in sets[s]])
        ix = ConversationIndex(conv, emb, piece_bytes=piece_bytes, weight=weight, fusion=fusion, k=k)
        try:
            yield conv, sets, ix
        finally:
            ix.close()


def fusion_sweep(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    configs: Sequence[FusionSettings],
    k: int = 5,
    weight: float = OWN_WEIGHT,
    piece_bytes: int | None = None,
    floor: float | None = None,
    fusion: FusionSettings = RUNTIME_DEFAULT,
    limit_queries: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Score every fusion config and the two single sides on facts and QA (see the module docstring)."""
    emb = cached_embedder(embedder)
    rkey = f"recall_at_{k}"
    pool_fusion = with_candidates(RUNTIME_DEFAULT, fusion.candidates, fusion.lexical_floor)
    # per (label, conversation, query set) → metric lists
    vals: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    indexed = _indexed(conversations, emb, piece_bytes, weight, fusion, k, limit_queries, seed)
    for conv, sets, ix in indexed:
        for qs in ("facts", "qa"):
            for q in sets[qs]:
                for name in (FUSION_DENSE, "bm25"):
                    m = score_query(ix, THREAD_REPRESENTATIONS[name](ix, q.text), q, k, floor)
                    _add(vals[(name, conv.id, qs)], m)
                parts, qv = ix.query(q.text, split=True)
                # the runtime's candidates once (they do not depend on the fusion rule), re-ranked per config
                pool = (
                    hybrid_candidates(
                        ix.exact_store(ix.default_stored),
                        conv.id,
                        parts,
                        qv,
                        k=k,
                        fusion=pool_fusion,
                    )
                    if parts
                    else []
                )
                for cfg in configs:
                    groups = ix.ranked([fuse_candidates(c, cfg) for c in pool], fusion.lexical_floor)
                    m = score_query(ix, Retrieval("pieces", True, groups), q, k, floor)
                    _add(vals[(cfg.label, conv.id, qs)], m)
    conv_ids = [c.id for c in conversations]

    def pooled(label: str, convs: Sequence[str]) -> dict[str, float]:
        out = {}
        for qs in ("facts", "qa"):
            lists = [vals[(label, c, qs)] for c in convs if (label, c, qs) in vals]
            n = sum(len(x.get("top1_section", [])) for x in lists)
            if not n:
                continue

            def cat(key: str, lists: list[dict] = lists) -> list[float]:
                return [v for x in lists for v in x.get(key, [])]

            out[f"{qs}_top1_section"] = mean(cat("top1_section"))
            out[f"{qs}_mrr"] = mean(cat("mrr"))
            out[f"{qs}_{rkey}"] = mean(cat("recall"))
            out[f"{qs}_n"] = n
        return out

    def targets(convs: Sequence[str]) -> dict[str, float]:
        d, b = pooled(FUSION_DENSE, convs), pooled("bm25", convs)
        out = {}
        for key in ("facts_top1_section", f"qa_{rkey}"):
            if key in d and not math.isnan(d[key]):
                out[key] = max(d[key], b.get(key, -math.inf))
        return out

    def margin(m: dict[str, float], tgt: dict[str, float]) -> float:
        diffs = [m[key] - t for key, t in tgt.items() if key in m and not math.isnan(m[key])]
        return min(diffs) if diffs else math.nan

    def choose(convs: Sequence[str]) -> tuple[FusionSettings, dict[str, float], float]:
        tgt = targets(convs)
        scored = []
        for cfg in configs:
            m = pooled(cfg.label, convs)
            mg = margin(m, tgt)
            scored.append((mg, sum(m.get(key, 0.0) for key in tgt), cfg, m))
        mg, _, cfg, m = max(scored, key=lambda x: (round(x[0], 9), round(x[1], 9)))
        return cfg, m, mg

    tgt_all = targets(conv_ids)
    curve: list[dict[str, Any]] = []
    for cfg in configs:
        m = pooled(cfg.label, conv_ids)
        curve.append(
            {
                "config": cfg.label,
                "method": cfg.method.value,
                "lexical_weight": None if cfg.method is FusionMethod.RRF else cfg.lexical_weight,
                "rrf_k": None if cfg.method is FusionMethod.CONVEX else cfg.rrf_k,
                **m,
                "margin": margin(m, tgt_all),
            }
        )
    baselines = [{"config": name, **pooled(name, conv_ids)} for name in (FUSION_DENSE, "bm25")]
    best, best_m, best_margin = choose(conv_ids)
    recommended = {
        **best.fusion_dict(),
        "label": best.label,
        "margin": best_margin,
        "meets_criterion": bool(best_margin >= 0),
        **{key: best_m[key] for key in best_m},
        "targets": tgt_all,
    }
    notes = [
        f"fusion: best {best.label}: margin {best_margin * 100:+.1f} points against the better single side "
        f"({', '.join(f'{k_} {v * 100:.1f}%' for k_, v in tgt_all.items())}) — "
        + ("meets" if best_margin >= 0 else "does not meet")
        + " the criterion (chosen and scored on the same queries)"
    ]
    for method in FusionMethod:
        sub = [r for r in curve if r["method"] == method.value and not math.isnan(r["margin"])]
        if sub:
            top = max(sub, key=lambda r: r["margin"])
            notes.append(f"fusion: best {method.value}: {top['config']} margin {top['margin'] * 100:+.1f} points")
    out: dict[str, Any] = {"curve": curve, "baselines": baselines, "recommended": recommended, "notes": notes}
    if len(conv_ids) >= 2:
        held: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        picks = []
        for c in conv_ids:
            others = [x for x in conv_ids if x != c]
            cfg, _, _ = choose(others)
            picks.append(cfg.label)
            for qs in ("facts", "qa"):
                for label, name in ((cfg.label, "fused"), (FUSION_DENSE, FUSION_DENSE), ("bm25", "bm25")):
                    for key, v in vals.get((label, c, qs), {}).items():
                        held[(name, qs)][key].extend(v)
        loo: dict[str, Any] = {"config": "leave-one-conversation-out", "picks": picks}
        for name in ("fused", FUSION_DENSE, "bm25"):
            for qs in ("facts", "qa"):
                if (name, qs) in held:
                    loo[f"{name}_{qs}_top1_section"] = mean(held[(name, qs)]["top1_section"])
                    loo[f"{name}_{qs}_{rkey}"] = mean(held[(name, qs)]["recall"])
        out["leave_one_out"] = loo
        fused_f = loo.get("fused_facts_top1_section", math.nan)
        fused_r = loo.get(f"fused_qa_{rkey}", math.nan)
        dense_f = loo.get(f"{FUSION_DENSE}_facts_top1_section", math.nan)
        notes.append(
            "fusion, leave-one-conversation-out (config chosen on the other conversations): "
            f"facts top1_section {fused_f * 100:.1f}% (dense {dense_f * 100:.1f}%, "
            f"bm25 {loo.get('bm25_facts_top1_section', math.nan) * 100:.1f}%), QA {rkey} {fused_r * 100:.1f}% "
            f"(dense {loo.get(f'{FUSION_DENSE}_qa_{rkey}', math.nan) * 100:.1f}%, "
            f"bm25 {loo.get(f'bm25_qa_{rkey}', math.nan) * 100:.1f}%); "
            f"picks: {', '.join(dict.fromkeys(picks))}"
        )
    return out


def _add(acc: dict[str, list[float]], m: dict[str, float]) -> None:
    for key in ("top1_section", "top1_section_floor", "mrr", "recall"):
        if key in m:
            acc[key].append(m[key])


def dataset_name(conversations: Sequence[Conversation]) -> str:
    """One name for conversations loaded together: the file's stem, or the folder the files share (LoCoMo's
    five files are one dataset, ``locomo-dev``, in a fit where every dataset weighs the same)."""
    import os

    paths = sorted({Path(c.source) for c in conversations})
    if not paths:
        return ""
    if len(paths) == 1:
        return paths[0].stem
    try:
        return Path(os.path.commonpath([str(p.parent) for p in paths])).name or "threads"
    except ValueError:
        return "threads"


def relevance_samples(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    k: int = 5,
    weight: float = OWN_WEIGHT,
    piece_bytes: int | None = None,
    fusion: FusionSettings = RUNTIME_DEFAULT,
    limit_queries: int | None = None,
    seed: int = 0,
    pool: int | None = None,
) -> list[dict[str, Any]]:
    """One sample per candidate among the top ``pool`` of each part's runtime hybrid ranking, for
    every fact and question: ``{"dataset", "conversation", "query_set", "query", "part", "cosine", "top",
    "coverage", "fused", "rank", "n_candidates", "right"}`` (right: the piece holds one of the query's
    evidence units; top: its cosine is the highest among the part's candidates)."""
    from ..query.relevance import CALIBRATION_POOL, content_coverage, is_top

    pool = int(pool or CALIBRATION_POOL)
    pool_fusion = with_candidates(RUNTIME_DEFAULT, fusion.candidates, fusion.lexical_floor)
    emb = cached_embedder(embedder)
    out: list[dict[str, Any]] = []
    dataset = dataset_name(conversations)
    indexed = _indexed(conversations, emb, piece_bytes, weight, fusion, k, limit_queries, seed)
    for conv, sets, ix in indexed:
        for qs in ("facts", "qa"):
            for qn, q in enumerate(sets[qs]):
                parts, qv = ix.query(q.text, split=True)
                if not parts:
                    continue
                cands = hybrid_candidates(
                    ix.exact_store(ix.default_stored),
                    conv.id,
                    parts,
                    qv,
                    k=k,
                    fusion=pool_fusion,
                )
                for part_index, c in enumerate(cands):
                    best = max(c.cosine.values(), default=None)
                    top = c.ranked[:pool]
                    texts = [ix.pieces[ix.index_of[rid]].text for rid, _ in top]
                    content = dict(zip([rid for rid, _ in top], content_coverage(c.part, texts), strict=True))
                    for rank, (rid, fused) in enumerate(top):
                        right = bool(ix.piece_units[ix.index_of[rid]] & q.evidence)
                        out.append(
                            {
                                "dataset": dataset,
                                "conversation": conv.id,
                                "query_set": qs,
                                "query": f"{conv.id}/{qs}/{qn}",
                                "part": part_index,
                                "cosine": float(c.cosine[rid]),
                                "best": best,
                                "top": is_top(c.cosine[rid], best),
                                "coverage": content[rid],
                                "fused": float(fused),
                                "rank": rank,
                                "bm25": float((c.bm25 or {}).get(rid, 0.0)),
                                "n_candidates": len(c.ranked),
                                "right": right,
                            }
                        )
    return out


@dataclass
class DocsSet:
    """Documents and labelled queries for the relevance fit: ``documents`` as ``ContextualIndex.add_documents``
    takes them (each with an ``id``), ``queries`` as ``(query id, text, relevant document ids)``."""

    name: str
    documents: list[dict[str, Any]]
    queries: list[tuple[str, str, frozenset[str]]]
    note: str = ""


def load_docs_set(
    path: str | Path,
    *,
    split: str = "train",
    limit_queries: int | None = None,
    distractors: int | None = None,
    seed: int = 0,
) -> DocsSet:
    """A BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/SPLIT.tsv``) or a folder of ``.md``/``.txt``
    files with ``queries.jsonl`` (``{"query": ..., "relevant": ["file.md", ...]}`` a line; ids are the files'
    paths under the folder). BEIR: ``limit_queries`` of the split's queries (a seeded sample), and the
    corpus cut to their relevant documents plus ``distractors`` others (a seeded sample; ``None``: all)."""
    import json
    import random

    root = Path(path)
    if not root.is_dir():
        raise InputError(f"{root}: not a folder; --docs takes a BEIR folder or a folder of .md/.txt files")
    rng = random.Random(seed)
    if (root / "corpus.jsonl").is_file():
        qrels_file = root / "qrels" / f"{split}.tsv"
        if not qrels_file.is_file():
            raise InputError(f"{root}: no qrels/{split}.tsv; pass the split that exists (--docs-split)")
        qrels: dict[str, set[str]] = defaultdict(set)
        for line in qrels_file.read_text(encoding="utf-8").splitlines()[1:]:
            cols = line.split("\t")
            if len(cols) >= 3 and float(cols[2]) > 0:
                qrels[cols[0]].add(cols[1])
        texts = {}
        for line in (root / "queries.jsonl").read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                texts[str(q["_id"])] = str(q["text"])
        qids = sorted((q for q in qrels if q in texts), key=str)
        rng.shuffle(qids)
        qids = qids[:limit_queries] if limit_queries else qids
        need = set().union(*(qrels[q] for q in qids)) if qids else set()
        corpus = [
            json.loads(line)
            for line in (root / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
            if line.strip()
        ]
        others = [c for c in corpus if str(c["_id"]) not in need]
        rng.shuffle(others)
        keep = [c for c in corpus if str(c["_id"]) in need] + (others if distractors is None else others[:distractors])
        documents = [
            {"id": str(c["_id"]), "text": str(c.get("text") or ""), "title": str(c.get("title") or "")} for c in keep
        ]
        queries = [(q, texts[q], frozenset(qrels[q])) for q in qids]
        note = f"{len(queries)} queries of qrels/{split}.tsv, {len(documents)} of {len(corpus)} documents"
        return DocsSet(root.name, documents, queries, note)
    qfile = root / "queries.jsonl"
    if not qfile.is_file():
        raise InputError(f'{root}: no queries.jsonl (one {{"query": ..., "relevant": ["file.md"]}} a line)')
    files = sorted(f for f in root.rglob("*") if f.suffix.lower() in (".md", ".markdown", ".txt") and f.is_file())
    documents = [
        {"id": f.relative_to(root).as_posix(), "text": f.read_text(encoding="utf-8"), "title": f.stem} for f in files
    ]
    ids = {d["id"] for d in documents}
    queries = []
    for n, line in enumerate(qfile.read_text(encoding="utf-8").splitlines()):
        if line.strip():
            q = json.loads(line)
            relevant = frozenset(str(r) for r in q["relevant"])
            if not relevant <= ids:
                raise InputError(f"{qfile}:{n + 1}: relevant {sorted(relevant - ids)} not among the folder's files")
            queries.append((str(n), str(q["query"]), relevant))
    queries = queries[:limit_queries] if limit_queries else queries
    return DocsSet(root.name, documents, queries, f"{len(queries)} queries, {len(documents)} files")


def docs_relevance_samples(docs: DocsSet, embedder: Embedder, *, pool: int | None = None) -> list[dict[str, Any]]:
    """The samples of :func:`relevance_samples` for a documents set, from the runtime itself: the documents in
    an in-memory :class:`~ctxret.ContextualIndex` over the embedder's default stored side, each query searched
    whole (``split=False``) with no floor, its top ``pool`` hits labelled right when their document is one
    of the query's relevant ones. ``top``: the highest cosine among those hits."""
    from ..index import ContextualIndex
    from ..query.relevance import CALIBRATION_POOL, is_top

    pool = int(pool or CALIBRATION_POOL)
    index = ContextualIndex(in_memory=True, embedder=embedder, collection=f"calibrate-{abs(hash(docs.name))}")
    try:
        index.add_documents(docs.documents)
        out: list[dict[str, Any]] = []
        for qid, text, relevant in docs.queries:
            for g in index.search(text, k=pool, score_threshold=None, split=False):
                best = max((float(h.scores["cosine"]) for h in g.hits), default=None)
                for rank, h in enumerate(g.hits):
                    out.append(
                        {
                            "dataset": docs.name,
                            "conversation": docs.name,
                            "query_set": "docs",
                            "query": f"{docs.name}/{qid}",
                            "part": g.part_index,
                            "cosine": float(h.scores["cosine"]),
                            "best": best,
                            "top": is_top(float(h.scores["cosine"]), best),
                            "coverage": h.scores.get("coverage"),
                            "fused": float(h.scores.get("fused", h.score)),
                            "rank": rank,
                            "bm25": float(h.scores.get("bm25", 0.0)),
                            "n_candidates": len(g.hits),
                            "right": str(h.stored.get("doc_id")) in relevant,
                        }
                    )
        return out
    finally:
        index.close()


#: Folds of the held-out-by-fold estimate (queries hashed into folds, inside every dataset).
RELEVANCE_FOLDS = 5


def _fold(query: str, folds: int) -> int:
    import zlib

    return zlib.crc32(query.encode("utf-8")) % folds


def relevance_report(
    samples: Sequence[dict[str, Any]], cal: Any, *, folds: int = RELEVANCE_FOLDS, shipped: Any = None
) -> dict[str, Any]:
    """Per dataset: how well ``cal`` separates and is calibrated (in sample), the same held out by fold
    (coefficients fitted on every dataset's other folds) and by dataset (fitted on the other datasets),
    ``shipped`` (the calibration the embedder has today) scored the same way, the top hits' relevance
    (the share of right top hits at ≥ 0.5) and the wrong hits' distribution; the reliability table of
    the held-out-by-fold relevance."""
    from ..query.relevance import auc, expected_calibration_error, fit_relevance, reliability

    def score(c: Any, rows: Sequence[dict[str, Any]]) -> np.ndarray:
        return np.array([c(r["cosine"], r["coverage"], r.get("best"), r.get("rank", 0) == 0) for r in rows])

    by_fold = np.zeros(len(samples))
    fold_of = np.array([_fold(str(r.get("query", i)), folds) for i, r in enumerate(samples)])
    for f in range(folds):
        test = fold_of == f
        train = [r for r, t in zip(samples, test, strict=True) if not t]
        if test.any() and len({r["right"] for r in train}) == 2:
            by_fold[test] = score(fit_relevance(train), [r for r, t in zip(samples, test, strict=True) if t])
    names = sorted({str(r.get("dataset", "")) for r in samples})
    by_set = np.full(len(samples), math.nan)
    if len(names) > 1:
        for n in names:
            mask = np.array([str(r.get("dataset", "")) == n for r in samples])
            train = [r for r, m in zip(samples, mask, strict=True) if not m]
            if len({r["right"] for r in train}) == 2:
                by_set[mask] = score(fit_relevance(train), [r for r, m in zip(samples, mask, strict=True) if m])
    fitted = score(cal, samples)
    now = score(shipped, samples) if shipped is not None else None
    rows: list[dict[str, Any]] = []
    tables: list[dict[str, Any]] = []
    for n in names:
        mask = np.array([str(r.get("dataset", "")) == n for r in samples])
        sub = [r for r, m in zip(samples, mask, strict=True) if m]
        y = np.array([bool(r["right"]) for r in sub])
        tops = np.array([r["rank"] == 0 for r in sub])
        queries = len({(r["query"], r["part"]) for r in sub})
        variants = [
            ("fitted, in sample", fitted[mask]),
            ("held out by fold", by_fold[mask]),
            ("held out by dataset", by_set[mask]),
        ]
        if now is not None:
            variants.insert(0, ("shipped before", now[mask]))
        for label, p in variants:
            if np.isnan(p).all():
                continue
            wrong = p[~y]
            rows.append(
                {
                    "dataset": n,
                    "relevance": label,
                    "n": len(sub),
                    "right": int(y.sum()),
                    "parts": queries,
                    "auc": auc(p, y),
                    "ece": expected_calibration_error(p, y),
                    "right_top_share_ge_0_5": float(np.mean(p[tops & y] >= 0.5)) if (tops & y).any() else math.nan,
                    "right_top_ge_0_5_of_parts": float((p[tops & y] >= 0.5).sum() / queries) if queries else math.nan,
                    "wrong_top_ge_0_5": float(np.mean(p[tops & ~y] >= 0.5)) if (tops & ~y).any() else math.nan,
                    "wrong_ge_0_5": float(np.mean(wrong >= 0.5)) if len(wrong) else math.nan,
                    "wrong_p50": float(np.percentile(wrong, 50)) if len(wrong) else math.nan,
                    "wrong_p90": float(np.percentile(wrong, 90)) if len(wrong) else math.nan,
                    "wrong_p99": float(np.percentile(wrong, 99)) if len(wrong) else math.nan,
                }
            )
        rows.append(
            {
                "dataset": n,
                "relevance": "cosine alone (AUC only)",
                "n": len(sub),
                "right": int(y.sum()),
                "parts": queries,
                "auc": auc([r["cosine"] for r in sub], y),
            }
        )
        rows.append(
            {
                "dataset": n,
                "relevance": "fused score (AUC only)",
                "n": len(sub),
                "right": int(y.sum()),
                "parts": queries,
                "auc": auc([r["fused"] for r in sub], y),
            }
        )
        for b in reliability(by_fold[mask], y):
            tables.append({"dataset": n, "relevance": "held out by fold", **b})
        if now is not None:
            for b in reliability(now[mask], y):
                tables.append({"dataset": n, "relevance": "shipped before", **b})
    return {"separation": rows, "reliability": tables}


def relevance_sweep(
    conversations: Sequence[Conversation], embedder: Embedder, *, docs: Sequence[DocsSet] = (), **kwargs: Any
) -> dict[str, Any]:
    """Fit relevance (see the module docstring) on the conversations and any documents sets together (each
    dataset weighs the same) and measure it per dataset (:func:`relevance_report`)."""
    from ..query.relevance import calibration_for, fit_relevance

    emb = cached_embedder(embedder)
    samples = relevance_samples(conversations, emb, **kwargs) if conversations else []
    for ds in docs:
        samples.extend(docs_relevance_samples(ds, emb.inner))
    cal = fit_relevance(samples, source=f"{emb.model_id}, fitted by ctxret eval calibrate --sweeps relevance")
    report = relevance_report(samples, cal, shipped=calibration_for(emb.inner))
    y = [s["right"] for s in samples]
    h, d = cal.hybrid, cal.dense
    recommended = {
        "hybrid": {
            "intercept": h.intercept,
            "cosine_weight": h.cosine_weight,
            "coverage_weight": h.coverage_weight,
            "coverage_sq_weight": h.coverage_sq_weight,
            "top_weight": h.top_weight,
            "margin_weight": h.margin_weight,
            "first_weight": h.first_weight,
        },
        "dense": {
            "intercept": d.intercept,
            "cosine_weight": d.cosine_weight,
            "top_weight": d.top_weight,
            "margin_weight": d.margin_weight,
            "first_weight": d.first_weight,
        },
        "code": (
            f"RelevanceCalibration(hybrid=RelevanceModel({h.intercept:.3f}, {h.cosine_weight:.3f}, "
            f"{h.coverage_weight:.3f}, {h.coverage_sq_weight:.3f}, {h.top_weight:.3f}, {h.margin_weight:.3f}, "
            f"{h.first_weight:.3f}), dense=RelevanceModel({d.intercept:.3f}, {d.cosine_weight:.3f}, "
            f"top_weight={d.top_weight:.3f}, margin_weight={d.margin_weight:.3f}, first_weight={d.first_weight:.3f}))"
        ),
    }
    per_set = [r for r in report["separation"] if r["relevance"] == "held out by fold"]
    notes = [
        f"relevance: sigmoid({h.intercept:.3f} + {h.cosine_weight:.3f}*cosine + {h.coverage_weight:.3f}*coverage "
        f"{h.coverage_sq_weight:+.3f}*coverage^2 {h.top_weight:+.3f}*top {h.margin_weight:+.3f}*margin "
        f"{h.first_weight:+.3f}*first) (no content word: sigmoid({d.intercept:.3f} + {d.cosine_weight:.3f}*cosine "
        f"{d.top_weight:+.3f}*top {d.margin_weight:+.3f}*margin {d.first_weight:+.3f}*first)) "
        f"on {len(samples)} candidates, {int(sum(y))} right; held out by fold: "
        + "; ".join(
            f"{r['dataset']} AUC {r['auc']:.3f}, ECE {r['ece']:.3f}, right top hits >= 0.5 "
            f"{r['right_top_share_ge_0_5'] * 100:.0f}%"
            for r in per_set
        )
        + f"; use it: SearchSettings(relevance={recommended['code']})"
    ]
    return {
        "samples": samples,
        "calibration": cal,
        "reliability": report["reliability"],
        "separation": report["separation"],
        "recommended": recommended,
        "notes": notes,
    }
