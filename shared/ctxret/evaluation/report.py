"""Output of the harness: markdown tables for the terminal, ``--json`` files and ``--plot`` figures.

Plots use matplotlib's object API on the Agg canvas (no pyplot, no global backend switch), so they
work headless and never disturb a caller's own matplotlib state.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import MissingExtraError

CONDITION_TITLES = {
    "clean": "Clean",
    "stored_noise": "Stored noise",
    "query_noise": "Query noise",
    "both_noise": "Both noise",
    "message": "Message (intent part)",
    "message_any": "Message (any group)",
    "generic": "Generic: top 4",
}
THREAD_METRICS = (
    ("top1_window", "Top hit in window"),
    ("top5_window", "Top 5 in window"),
    ("window_has_evidence", "Window holds evidence"),
    ("top1_section_floor", "Top hit in section, above floor"),
    ("top1_section", "Top hit in section"),
    ("mrr", "MRR (sections)"),
    ("recall_at_5", "Evidence recall@5"),
    ("coverage", "Coverage"),
)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured markdown table; ``align`` per column: ``"l"`` or ``"r"`` (default: first left, rest right)."""
    align = list(align or ["l"] + ["r"] * (len(headers) - 1))
    cells = [[str(c) for c in headers]] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        padded = (c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(r, widths, align, strict=False))
        return "| " + " | ".join(padded) + " |"

    rules = (("-" * (w + 1) + ":") if a == "r" else (":" + "-" * (w + 1)) for w, a in zip(widths, align, strict=False))
    sep = "|" + "|".join(rules) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return str(value)


def pct(value: float | None) -> str:
    """``0.5843`` → ``58.4%``; None/NaN → ``—``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value * 100:.1f}%"


def controlled_table(rows: Sequence[Mapping[str, Any]], block: str = "all") -> str:
    """Representations × conditions for one block: top-1 %, and generic as ``hits/n (%)``."""
    reps = list(dict.fromkeys(r["representation"] for r in rows))
    conds = [c for c in CONDITION_TITLES if any(r["condition"] == c and r["block"] == block for r in rows)]
    index = {(r["representation"], r["condition"]): r for r in rows if r["block"] == block}
    body = []
    for rep in reps:
        line = [rep]
        for c in conds:
            r = index.get((rep, c))
            if r is None:
                line.append("—")
            elif c == "generic":
                line.append(f"{round(r['top1'] * r['n'])}/{r['n']} ({pct(r['top1'])})")
            else:
                line.append(pct(r["top1"]))
        body.append(line)
    n = {c: next((r["n"] for r in rows if r["condition"] == c and r["block"] == block), None) for c in conds}
    headers = ["Representation"] + [f"{CONDITION_TITLES[c]} (n={n[c]})" for c in conds]
    return markdown_table(headers, body)


def threads_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """One line per (representation, query set); omitted metrics show as ``—``."""
    recall_keys = sorted({k for r in rows for k in r if k.startswith("recall_at_")}) or ["recall_at_5"]
    shown = {k for r in rows for k in r}
    metrics = [(key, title) for key, title in THREAD_METRICS if key != "recall_at_5"]
    timed = {"top1_window", "top5_window", "window_has_evidence"}
    window = [(key, title) for key, title in metrics if key in timed and key in shown]
    metrics = [(key, title) for key, title in metrics if key not in timed]
    budgets = sorted(
        {k for r in rows for k in r if k.startswith("recall_") and k.endswith("b") and k[7:-1].isdigit()},
        key=lambda k: int(k[7:-1]),
    )
    metrics = (
        window
        + metrics[:3]
        + [(k, f"Evidence recall@{k.rsplit('_', 1)[-1]}") for k in recall_keys]
        + [(k, f"Recall ≤{int(k[7:-1]):,} B") for k in budgets]
        + metrics[3:]
    )
    headers = ["Representation", "Query set"] + [t for _, t in metrics] + ["n"]
    body = []
    for r in rows:
        line = [r["representation"], r["query_set"]]
        for key, _ in metrics:
            v = r.get(key)
            line.append("—" if v is None else (f"{v:.3f}" if key == "mrr" else pct(v)))
        line.append(r["n"])
        body.append(line)
    return markdown_table(headers, body, ["l", "l"] + ["r"] * (len(headers) - 2))


def distracted_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The ``distracted`` rows (:mod:`.distracted`): the question's group against the question asked alone and one
    whole-message search, and the share of questions merged into a statement."""
    headers = ["Representation", "Recall@k, question's group", "Asked alone", "Kept", "One whole-message search"]
    headers += ["Merged into a statement", "n"]
    body = []
    for r in rows:
        if r.get("query_set") != "distracted":
            continue
        recall = next(v for k, v in r.items() if k.startswith("recall_at_"))
        cells = [recall, r["recall_alone"], r["kept"], r["recall_whole"], r["merged"]]
        body.append([r["representation"], *(pct(v) for v in cells), r["n"]])
    return markdown_table(headers, body, ["l"] + ["r"] * 6)


def paired_table(comparison: Sequence[Mapping[str, Any]]) -> str:
    """Systems against baselines, paired per query (points, 95% intervals; ``changed``: queries whose value moved)."""
    headers = [
        "System",
        "Baseline",
        "Query set",
        "Metric",
        "System",
        "Baseline",
        "Δ (95% CI)",
        "Δ bootstrap CI",
        "Changed",
        "Δ per conversation",
    ]
    body = []
    for r in comparison:
        diff, bootstrap, per = _paired_cells(r)
        body.append(
            [
                r["system"],
                r["peer"],
                r["query_set"],
                r["metric"],
                pct(r["system_value"]),
                pct(r["peer_value"]),
                diff,
                bootstrap,
                f"{r.get('changed', '—')}/{r['diff']['n']}",
                per,
            ]
        )
    return markdown_table(headers, body, ["l", "l", "l", "l", "r", "r", "r", "r", "r", "l"])


def peer_table(comparison: Sequence[Mapping[str, Any]]) -> str:
    """The runtime default against each peer, paired per query (points, 95% intervals)."""
    headers = [
        "Peer",
        "Query set",
        "Metric",
        "ctxret default",
        "Peer",
        "Δ (95% CI)",
        "Δ bootstrap CI",
        "Δ per conversation",
    ]
    body = [
        [r["peer"], r["query_set"], r["metric"], pct(r["system_value"]), pct(r["peer_value"]), *_paired_cells(r)]
        for r in comparison
    ]
    return markdown_table(headers, body, ["l", "l", "l", "r", "r", "r", "r", "l"])


def _paired_cells(r: Mapping[str, Any]) -> tuple[str, str, str]:
    """A paired row's difference with its t interval, its bootstrap interval and the per-conversation differences."""
    d, bs = r["diff"], r["bootstrap"]
    per = " ".join(f"{v * 100:+.1f}" for v in r["per_conversation"].values())
    return (
        f"{d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, {d['hi'] * 100:+.1f}]",
        f"[{bs['lo'] * 100:+.1f}, {bs['hi'] * 100:+.1f}]",
        per,
    )


def calibration_report(result: Any) -> str:
    """The recommended values and every curve as markdown."""
    rec = result.recommended
    out = ["## Recommended", ""]
    lines = []
    if "weight" in rec:
        lines.append(["blend weight", f"{rec['weight']:g}", f"current {result.config['weight']:g}"])
    if "piece_bytes" in rec:
        lines.append(["piece byte budget", str(rec["piece_bytes"]), f"current {result.config['piece_bytes']}"])
    if "threshold" in rec:
        keep = f"keeps ≥ {result.config['keep_correct']:.0%} of correct top hits (facts and questions); an upper bound"
        lines.append(["score threshold (cosine)", f"{rec['threshold']:.2f}", keep])
    if "fusion" in rec:
        f = rec["fusion"]
        verdict = "meets" if f["meets_criterion"] else "misses"
        lines.append(["fusion", f["label"], f"margin {f['margin'] * 100:+.1f} points ({verdict} the criterion)"])
    if "relevance" in rec:
        lines.append(
            ["relevance", rec["relevance"]["code"], "pass as SearchSettings(relevance=...) (ctxret.query.relevance)"]
        )
    out.append(markdown_table(["Setting", "Recommended", "Note"], lines, ["l", "l", "l"]))
    for name, curve in result.curves.items():
        if not curve:
            continue
        out += ["", f"## Sweep: {name}", ""]
        keys = [k for k in curve[0] if k not in ("method", "picks")]
        for row in curve[1:]:
            keys += [k for k in row if k not in keys and k not in ("method", "picks")]
        body = [[_fmt(key, row.get(key)) for key in keys] for row in curve]
        out.append(markdown_table(keys, body))
    if result.notes:
        out += [""] + [f"- {n}" for n in result.notes]
    return "\n".join(out)


def _fmt(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "—"
        if key in ("weight", "threshold", "lexical_weight", "rrf_k"):
            return f"{value:g}"
        if key == "margin":
            return f"{value * 100:+.1f}"
        if "mrr" in key or key in ("auc", "log_loss"):
            return f"{value:.3f}"
        return pct(value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value)


def write_json(path: str | os.PathLike[str], rows: Sequence[Mapping[str, Any]], config: Mapping[str, Any]) -> None:
    """``{"rows": [...], "config": {...}}``, UTF-8, sorted keys, NaN written as null."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    data = {"rows": [_clean(r) for r in rows], "config": _clean(config)}
    Path(path).write_text(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


# -- plots ------------------------------------------------------------------------------------
def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingExtraError('--plot needs matplotlib: pip install "ctxret[plot]"') from exc
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _colors(names: Sequence[str]) -> dict[str, Any]:
    """One fixed colour per representation, the same in every panel."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {name: cmap(i % 10) for i, name in enumerate(dict.fromkeys(names))}


def _bars(
    ax: Any,
    groups: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    ylabel: str,
    ylim: float | None = 1.0,
    colors: Mapping[str, Any] | None = None,
) -> None:
    n = max(1, len(series))
    width = 0.8 / n
    for i, (name, values) in enumerate(series.items()):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        heights = [0 if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in values]
        ax.bar(xs, heights, width, label=name, color=(colors or {}).get(name))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(0, ylim)
    ax.grid(axis="y", alpha=0.3)


def plot_controlled(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """Grouped bars: top-1 per condition (block "all"), one bar per representation; generic in its own panel."""
    fig = _figure(12, 5.4)
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [5, 1.4]})
    reps = list(dict.fromkeys(r["representation"] for r in rows))
    conds = [c for c in CONDITION_TITLES if c != "generic" and any(r["condition"] == c for r in rows)]
    index = {(r["representation"], r["condition"]): r["top1"] for r in rows if r["block"] == "all"}
    colors = _colors(reps)
    _bars(
        ax,
        [CONDITION_TITLES[c] for c in conds],
        {rep: [index.get((rep, c)) for c in conds] for rep in reps},
        "correct context first (top-1)",
        colors=colors,
    )
    ax.set_title("Controlled test: right context first")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    generic = {rep: [index.get((rep, "generic"))] for rep in reps}
    _bars(ax2, ["generic"], generic, "families with all 4 contexts on top", colors=colors)
    ax2.set_title("Generic queries")
    fig.tight_layout()
    fig.savefig(str(path), format="png")


def plot_threads(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> None:
    """One panel per query set, grouped bars per metric, one bar per representation (MRR on the same 0–1 axis)."""
    sets = list(dict.fromkeys(r["query_set"] for r in rows))
    colors = _colors([r["representation"] for r in rows])
    metric_keys = {}
    for qs in sets:
        sub = [r for r in rows if r["query_set"] == qs]
        keys = [k for k, _ in THREAD_METRICS if any(k in r for r in sub)]
        metric_keys[qs] = keys + sorted({k for r in sub for k in r if k.startswith("recall_at_") and k not in keys})
    ratios = [max(1.6, len(metric_keys[qs])) for qs in sets] or [1]
    fig = _figure(1.5 * sum(ratios) + 1.5, 4.8)
    axes = fig.subplots(1, max(1, len(sets)), squeeze=False, gridspec_kw={"width_ratios": ratios})[0]
    for ax, qs in zip(axes, sets, strict=False):
        sub = [r for r in rows if r["query_set"] == qs]
        keys = metric_keys[qs]
        _bars(ax, keys, {r["representation"]: [r.get(k) for k in keys] for r in sub}, "fraction / MRR", colors=colors)
        ax.set_title(f"Threads: {qs} (n={sub[0]['n'] if sub else 0})")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(str(path), format="png")


def plot_calibration(result: Any, path: str | os.PathLike[str]) -> None:
    """One panel per sweep: metric curves against the swept value (fusion: margin per config)."""
    names = [n for n in ("weight", "piece_bytes", "threshold", "fusion") if result.curves.get(n)]
    fig = _figure(5 * max(1, len(names)), 4.2)
    axes = fig.subplots(1, max(1, len(names)), squeeze=False)[0]
    for ax, name in zip(axes, names, strict=False):
        curve = result.curves[name]
        if name == "fusion":
            labels = [r["config"] for r in curve]
            ax.barh(range(len(curve)), [0 if math.isnan(r["margin"]) else r["margin"] * 100 for r in curve])
            ax.set_yticks(range(len(curve)))
            ax.set_yticklabels(labels, fontsize=5)
            ax.axvline(0, color="k", lw=0.8)
            ax.set_xlabel("margin vs better single side (points)")
            ax.set_title("Fusion sweep")
            continue
        xs = [r[name] for r in curve]
        keys = [k for k in curve[0] if k not in (name, "pieces")]
        for key in keys:
            ax.plot(xs, [r.get(key) for r in curve], marker="o", label=key)
        rec = result.recommended.get(name)
        if rec is not None:
            ax.axvline(rec, color="k", ls="--", lw=0.8)
        ax.set_xlabel(name)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        ax.set_title(f"Sweep: {name}")
    fig.tight_layout()
    fig.savefig(str(path), format="png")
