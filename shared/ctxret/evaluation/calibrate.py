"""``ctxret eval calibrate``: pick the blend weight, piece budget, floor and fusion on your own threads.

Each sweep varies one setting and keeps the others at the values given (defaults: weight 0.8,
the embedder's piece budget and floor), on the thread protocol of :mod:`.threads`:

* ``weight`` (0.6–1.0; 1.0 = no blend) and ``piece_bytes`` (0.5–2× the embedder's default): the
  runtime's dense search (``pieces_blend_split``) on every query set. Best: the highest facts
  ``top1_section`` (ties: higher MRR, then the value nearest the current one); recommended only
  when it beats the current value by more than one binomial standard error — otherwise the
  current value is kept (the note says so).
* ``threshold`` (cosine floor): from the top hits of the facts. For each floor, the share of
  correct top hits kept and of wrong top hits rejected. Recommended: the highest floor that still
  keeps :data:`KEEP_CORRECT` (95%) of the correct top hits — a floor drops memories, so it is set
  conservatively.
* ``fusion``: every method × ``lexical_weight`` × ``rrf_k`` of the hybrid search (per part,
  ``DEFAULT_CANDIDATES`` of each side, :func:`ctxret.fusion.fuse`), against dense-only
  (``pieces_blend_split``) and BM25-only. Criterion (the hybrid issue's): at least as good as the
  better single side on facts ``top1_section`` and on QA ``recall_at_k``. ``margin`` = the smaller
  of the two differences to that better side; recommended: the largest margin (ties: the larger
  sum). Facts alone are used when there are no questions, and vice versa.

The sweep chooses on the same queries it reports, so its best number is optimistic. With two or
more conversations a leave-one-conversation-out estimate is reported too: for each conversation,
the configuration is chosen on the others and scored on it.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..blend import CHUNK_FOCUS_WEIGHT
from ..embedders.base import Embedder
from ..fusion import DEFAULT_CANDIDATES, FusionMethod
from ..turns import MIN_BODY_BYTES
from .embedding import cached_embedder
from .hybrid import FusionConfig, dense_candidates, fused_ranking
from .metrics import mean
from .threads import (
    THREAD_REPRESENTATIONS,
    Conversation,
    ConversationIndex,
    Ranked,
    Retrieval,
    prewarm,
    run_threads,
    score_query,
    select_queries,
)

WEIGHT_GRID = (0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0)
PIECE_BYTES_FACTORS = (0.5, 0.75, 1.0, 1.5, 2.0)
THRESHOLD_GRID = tuple(round(x, 2) for x in np.arange(0.0, 0.85, 0.05))
LEXICAL_WEIGHTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
RRF_KS = (10.0, 30.0, 60.0, 100.0)
#: The recommended floor keeps at least this share of the correct top hits.
KEEP_CORRECT = 0.95
DENSE = "pieces_blend_split"


def fusion_grid(lexical_weights: Sequence[float] = LEXICAL_WEIGHTS, rrf_ks: Sequence[float] = RRF_KS) -> list[FusionConfig]:
    """Equal RRF at every k, weighted RRF at every weight × k, convex at every weight."""
    grid = [FusionConfig(FusionMethod.RRF, 0.5, k) for k in rrf_ks]
    grid += [FusionConfig(FusionMethod.WEIGHTED_RRF, w, k) for w in lexical_weights for k in rrf_ks]
    grid += [FusionConfig(FusionMethod.CONVEX, w, 60.0) for w in lexical_weights]
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
    weight: float = CHUNK_FOCUS_WEIGHT,
    piece_bytes: int | None = None,
    threshold: float | None = None,
    weights: Sequence[float] = WEIGHT_GRID,
    piece_bytes_grid: Sequence[int] | None = None,
    thresholds: Sequence[float] = THRESHOLD_GRID,
    fusion_configs: Sequence[FusionConfig] | None = None,
    candidates: int = DEFAULT_CANDIDATES,
    limit_conversations: int | None = None,
    limit_queries: int | None = None,
    seed: int = 0,
    sweeps: Sequence[str] = ("weight", "piece_bytes", "threshold", "fusion"),
    progress: bool = False,
) -> CalibrationResult:
    """Run the sweeps (see the module docstring) and return the curves and recommended values."""
    emb = cached_embedder(embedder)
    convs = list(conversations[:limit_conversations] if limit_conversations else conversations)
    base_bytes = int(piece_bytes or emb.default_piece_bytes)
    floor = emb.default_score_threshold if threshold is None else float(threshold)
    common = dict(k=k, limit_queries=limit_queries, seed=seed, candidates=candidates)
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
            res = run_threads(convs, emb, representations=[DENSE], weight=w, piece_bytes=base_bytes, threshold=floor, **common)
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
            res = run_threads(convs, emb, representations=[DENSE], weight=weight, piece_bytes=b, threshold=floor, **common)
            curve.append({"piece_bytes": b, "pieces": res.config["counts"].get("pieces", 0), **_metrics(res.rows, k)})
            n_main = _main_n(res.rows)
        curves["piece_bytes"] = curve
        _, rec, note = _pick(curve, "piece_bytes", base_bytes, n_main)
        recommended["piece_bytes"] = rec["piece_bytes"]
        notes.append(note)
    if "threshold" in sweeps:
        say("threshold")
        res = run_threads(
            convs, emb, representations=[DENSE], query_sets=("facts",), weight=weight, piece_bytes=base_bytes,
            threshold=floor, **common,
        )
        tops = [(q["top_cosine"], q["top1_section"]) for q in res.per_query if "top_cosine" in q]
        if not tops:
            res = run_threads(
                convs, emb, representations=[DENSE], query_sets=("qa",), weight=weight, piece_bytes=base_bytes,
                threshold=floor, **common,
            )
            tops = [(q["top_cosine"], q["top1_section"]) for q in res.per_query if "top_cosine" in q]
        curve = []
        n_right = sum(1 for _, ok in tops if ok)
        n_wrong = len(tops) - n_right
        for t in thresholds:
            kept = sum(1 for c, ok in tops if ok and c >= t)
            rejected = sum(1 for c, ok in tops if not ok and c < t)
            curve.append(
                {
                    "threshold": float(t),
                    "top1_section_floor": kept / len(tops) if tops else math.nan,
                    "correct_kept": kept / n_right if n_right else math.nan,
                    "wrong_rejected": rejected / n_wrong if n_wrong else math.nan,
                }
            )
        curves["threshold"] = curve
        ok = [r["threshold"] for r in curve if not math.isnan(r["correct_kept"]) and r["correct_kept"] >= KEEP_CORRECT]
        recommended["threshold"] = max(ok) if ok else min(thresholds)
    if "fusion" in sweeps:
        say("fusion")
        fusion = fusion_sweep(
            convs, emb, configs=fusion_configs or fusion_grid(), k=k, weight=weight, piece_bytes=base_bytes,
            floor=floor, candidates=candidates, limit_queries=limit_queries, seed=seed,
        )
        curves["fusion"] = fusion["curve"]
        curves["fusion_baselines"] = fusion["baselines"]
        recommended["fusion"] = fusion["recommended"]
        if "leave_one_out" in fusion:
            curves["fusion_leave_one_out"] = [fusion["leave_one_out"]]
        notes.extend(fusion["notes"])
    config = {
        "harness": "calibrate",
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
    }
    return CalibrationResult(recommended, curves, config, notes)


def fusion_sweep(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    configs: Sequence[FusionConfig],
    k: int = 5,
    weight: float = CHUNK_FOCUS_WEIGHT,
    piece_bytes: int | None = None,
    floor: float | None = None,
    candidates: int = DEFAULT_CANDIDATES,
    limit_queries: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Score every fusion config and the two single sides on facts and QA (see the module docstring)."""
    emb = cached_embedder(embedder)
    rkey = f"recall_at_{k}"
    # per (label, conversation, query set) → metric lists
    vals: dict[tuple[str, str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for conv in conversations:
        sets = select_queries(conv, limit_queries, seed)
        prewarm(emb, [q.text for s in ("facts", "qa") for q in sets[s]])
        ix = ConversationIndex(conv, emb, piece_bytes=piece_bytes, weight=weight, candidates=candidates)
        for qs in ("facts", "qa"):
            for q in sets[qs]:
                for name in (DENSE, "bm25"):
                    m = score_query(ix, THREAD_REPRESENTATIONS[name](ix, q.text), q, k, floor)
                    _add(vals[(name, conv.id, qs)], m)
                parts, qv = ix.query(q.text, split=True)
                per_part = []
                for part, v in zip(parts, qv):
                    dense = ix.blended @ v
                    dc = dense_candidates(dense, candidates, ix.piece_ids)
                    lc = ix.bm25(part, candidates)
                    listed = {i for i, _ in lc}
                    exact = ix.bm25_of(part, [i for i, _ in dc if i not in listed])  # same for every config
                    per_part.append((part, dense, dc, lc, exact))
                for cfg in configs:
                    groups = []
                    for part, dense, dc, lc, exact in per_part:
                        idx, fused, lex = fused_ranking(dense, dc, lc, cfg, ix.index_of, lambda ids, exact=exact: exact)
                        groups.append(Ranked(part, idx, fused, dense[idx], lex))
                    m = score_query(ix, Retrieval("pieces", True, groups), q, k, floor)
                    _add(vals[(cfg.label, conv.id, qs)], m)
        ix.close()
    conv_ids = [c.id for c in conversations]

    def pooled(label: str, convs: Sequence[str]) -> dict[str, float]:
        out = {}
        for qs in ("facts", "qa"):
            lists = [vals[(label, c, qs)] for c in convs if (label, c, qs) in vals]
            n = sum(len(x.get("top1_section", [])) for x in lists)
            if not n:
                continue
            cat = lambda key: [v for x in lists for v in x.get(key, [])]  # noqa: E731
            out[f"{qs}_top1_section"] = mean(cat("top1_section"))
            out[f"{qs}_mrr"] = mean(cat("mrr"))
            out[f"{qs}_{rkey}"] = mean(cat("recall"))
            out[f"{qs}_n"] = n
        return out

    def targets(convs: Sequence[str]) -> dict[str, float]:
        d, b = pooled(DENSE, convs), pooled("bm25", convs)
        out = {}
        for key in ("facts_top1_section", f"qa_{rkey}"):
            if key in d and not math.isnan(d[key]):
                out[key] = max(d[key], b.get(key, -math.inf))
        return out

    def margin(m: dict[str, float], tgt: dict[str, float]) -> float:
        diffs = [m[key] - t for key, t in tgt.items() if key in m and not math.isnan(m[key])]
        return min(diffs) if diffs else math.nan

    def choose(convs: Sequence[str]) -> tuple[FusionConfig, dict[str, float], float]:
        tgt = targets(convs)
        scored = []
        for cfg in configs:
            m = pooled(cfg.label, convs)
            mg = margin(m, tgt)
            scored.append((mg, sum(m.get(key, 0.0) for key in tgt), cfg, m))
        mg, _, cfg, m = max(scored, key=lambda x: (round(x[0], 9), round(x[1], 9)))
        return cfg, m, mg

    tgt_all = targets(conv_ids)
    curve = []
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
    baselines = [{"config": name, **pooled(name, conv_ids)} for name in (DENSE, "bm25")]
    best, best_m, best_margin = choose(conv_ids)
    recommended = {
        **best.as_dict(),
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
        held: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        picks = []
        for c in conv_ids:
            others = [x for x in conv_ids if x != c]
            cfg, _, _ = choose(others)
            picks.append(cfg.label)
            for qs in ("facts", "qa"):
                for label, name in ((cfg.label, "fused"), (DENSE, DENSE), ("bm25", "bm25")):
                    for key, v in vals.get((label, c, qs), {}).items():
                        held[(name, qs)][key].extend(v)
        loo: dict[str, Any] = {"config": "leave-one-conversation-out", "picks": picks}
        for name in ("fused", DENSE, "bm25"):
            for qs in ("facts", "qa"):
                if (name, qs) in held:
                    loo[f"{name}_{qs}_top1_section"] = mean(held[(name, qs)]["top1_section"])
                    loo[f"{name}_{qs}_{rkey}"] = mean(held[(name, qs)]["recall"])
        out["leave_one_out"] = loo
        fused_f = loo.get("fused_facts_top1_section", math.nan)
        fused_r = loo.get(f"fused_qa_{rkey}", math.nan)
        notes.append(
            "fusion, leave-one-conversation-out (config chosen on the other conversations): "
            f"facts top1_section {fused_f * 100:.1f}% (dense {loo.get(f'{DENSE}_facts_top1_section', math.nan) * 100:.1f}%, "
            f"bm25 {loo.get('bm25_facts_top1_section', math.nan) * 100:.1f}%), QA {rkey} {fused_r * 100:.1f}% "
            f"(dense {loo.get(f'{DENSE}_qa_{rkey}', math.nan) * 100:.1f}%, "
            f"bm25 {loo.get(f'bm25_qa_{rkey}', math.nan) * 100:.1f}%); "
            f"picks: {', '.join(dict.fromkeys(picks))}"
        )
    return out


def _add(acc: dict[str, list[float]], m: dict[str, float]) -> None:
    for key in ("top1_section", "top1_section_floor", "mrr", "recall"):
        if key in m:
            acc[key].append(m[key])
