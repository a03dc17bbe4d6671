"""The floor's two costs, in one run: answers it drops, and questions about nothing in memory it lets through.

A floor is judged by the recall it costs on answerable questions against the share of unanswerable parts it empties
(DESIGN §4), so ``eval threads`` measures both on the same searches:

* **answerable** — the ``facts`` and ``qa`` sets: per query, ``recall_floor`` (the evidence recall@k of what the
  group returns once the floor has dropped hits; the best group among those left) and ``emptied`` (every group came
  back empty), beside ``recall`` (no floor);
* **questions from another conversation** — the ``foreign`` query set (``--query-sets foreign``): every QA question
  of the *other* conversations of the run asked in this one (LoCoMo's conversations are between different people,
  so nothing in this thread answers them; on locomo-dev, 760 questions × 4 other conversations = 3,040 searches).
  Metric: ``emptied``. Unlike a fixed list of off-topic questions (``eval calibrate``'s tungsten and Kalman
  filters), these are worded like the thread's own questions, about the same kinds of things;
* **time questions** (``time`` / ``time_qa``): ``top1_window_floor`` and ``top1_section_floor``, the top hit once
  the floor has dropped hits (0 when the group is empty), beside the unfloored ``top1_window`` / ``top1_section``.

Each is computed for the runtime's floor (:mod:`ctxret.query.floor`) and, with the suffix ``_cut``, for the rule it
replaced (every hit under the cosine floor dropped, the lexical rescue kept, no part test), so the report pairs the
two on the same candidates. :func:`floor_report` turns the per-query rows into the table ``eval threads`` prints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .datasets import Conversation, Query
from .hybrid import floor_mask
from .metrics import evidence_recall, mean
from .stats import by_query, compare

__all__ = [
    "FLOOR_SYSTEMS",
    "FOREIGN",
    "floor_metrics",
    "floor_report",
    "floor_table",
    "foreign_metrics",
    "foreign_queries",
    "time_floor_metrics",
]

FOREIGN = "foreign"


def foreign_queries(conv: Conversation, conversations: Sequence[Conversation], limit: int | None = None) -> list[Query]:
    """The ``foreign`` set of ``conv``: the QA questions of every other conversation (the first ``limit`` of each)."""
    out: list[Query] = []
    for other in conversations:
        if other.id == conv.id:
            continue
        for q in other.questions[:limit] if limit else other.questions:
            out.append(Query(f"{conv.id}/foreign/{q.id}", q.text, frozenset(), frozenset(), q.category))
    return out


def _cut(g: Any, floor: float | None) -> np.ndarray:
    """Positions kept by the rule the part floor replaced: every hit under ``floor`` dropped (the lexical rescue
    kept), in a time window too, nothing else."""
    if g.cosines is None or floor is None:
        return np.arange(len(g.items))
    return np.flatnonzero(floor_mask(g.cosines, g.idf_coverage, floor, g.lexical_floor))


def _floored(ret: Any, floor: float | None, k: int, rule: str) -> list[tuple[Any, np.ndarray]]:
    """Each group with the positions of its hits that survive the floor (``rule``: "part" or "cut"), non-empty only."""
    out = []
    for g in ret.groups:
        kept = g.kept(floor, k) if rule == "part" else _cut(g, floor)
        if len(kept):
            out.append((g, kept))
    return out


def _best(floored: list[tuple[Any, np.ndarray]]) -> tuple[Any, np.ndarray] | None:
    """The group whose first surviving hit scores highest (first on ties), as :func:`.scoring.best_group` picks."""
    best, score = None, -math.inf
    for g, kept in floored:
        if float(g.scores[kept[0]]) > score:
            best, score = (g, kept), float(g.scores[kept[0]])
    return best


def floor_metrics(ix: Any, ret: Any, q: Query, k: int, floor: float | None) -> dict[str, float]:
    """``recall_floor`` / ``emptied`` of one answerable query, and the same under the old cut (``_cut``)."""
    if ret.level != "pieces" or not any(g.cosines is not None for g in ret.groups):
        return {}
    out: dict[str, float] = {}
    units = ix.units(ret.level)
    for rule, suffix in (("part", ""), ("cut", "_cut")):
        best = _best(_floored(ret, floor, k, rule))
        out[f"emptied{suffix}"] = 1.0 if best is None else 0.0
        hits = [] if best is None else [units[i] for i in best[0].items[best[1][:k]]]
        out[f"recall_floor{suffix}"] = evidence_recall(hits, q.evidence)
    return out


def foreign_metrics(ret: Any, k: int, floor: float | None) -> dict[str, float]:
    """``emptied`` (and ``emptied_cut``) of one question from another conversation."""
    if not any(g.cosines is not None for g in ret.groups):
        return {}
    return {
        "emptied": 0.0 if _floored(ret, floor, k, "part") else 1.0,
        "emptied_cut": 0.0 if _floored(ret, floor, k, "cut") else 1.0,
    }


def time_floor_metrics(ix: Any, ret: Any, tq: Any, k: int, floor: float | None) -> dict[str, float]:
    """``top1_window_floor`` / ``top1_section_floor`` of one time query (and ``_cut``): the top hit once the floor
    has dropped hits, 0 when every group is empty."""
    if ret.level != "pieces" or not any(g.cosines is not None for g in ret.groups):
        return {}
    stamp = {t.index: t.timestamp for t in ix.conv.turns}
    out: dict[str, float] = {}
    for rule, suffix in (("part", ""), ("cut", "_cut")):
        best = _best(_floored(ret, floor, k, rule))
        section = None if best is None else int(ix.sections(ret.level)[best[0].items[best[1][0]]])
        if tq.base != "qa":
            out[f"top1_window_floor{suffix}"] = 1.0 if section is not None and tq.holds(stamp.get(section)) else 0.0
        out[f"top1_section_floor{suffix}"] = 1.0 if section is not None and section in tq.gold else 0.0
    return out


#: (query set, metric with the floor, metric without it): what the report pairs.
_PAIRS = (
    ("qa", "recall_floor", "recall"),
    ("facts", "recall_floor", "recall"),
    ("time", "top1_window_floor", "top1_window"),
    ("time_qa", "top1_section_floor", "top1_section"),
)


#: The representations the floor report covers: the runtime's search, without and with its time windows.
FLOOR_SYSTEMS = ("hybrid_default", "hybrid_time_product", "hybrid_time_product_asking")


def floor_report(per_query: Sequence[dict[str, Any]], systems: Sequence[str] = FLOOR_SYSTEMS) -> list[dict[str, Any]]:
    """Per representation of ``systems`` and query set: what the floor costs (the metric with the floor against
    without it, paired per query, 95% interval, and the relative cost), for the runtime's floor and the old cut; and
    the share of queries it empties (answerable: should be small; ``foreign``: should be large)."""
    by = by_query(per_query)
    out: list[dict[str, Any]] = []
    reps = [r for r in dict.fromkeys(row["representation"] for row in per_query) if r in systems]
    for rep in reps:
        for qs, with_floor, without in _PAIRS:
            rows = by.get((rep, qs))
            if not rows or not any(with_floor in r for r in rows.values()):
                continue
            base = {key: dict(r, _none=r.get(without, math.nan)) for key, r in rows.items()}
            for suffix, rule in (("", "part"), ("_cut", "cut")):
                mine = {key: dict(r, _floor=r.get(with_floor + suffix, math.nan)) for key, r in rows.items()}
                paired = compare(
                    {k: {**v, "m": v["_floor"]} for k, v in mine.items()},
                    {k: {**v, "m": v["_none"]} for k, v in base.items()},
                    "m",
                    changed=True,
                )
                if paired is None:
                    continue
                none = paired["peer_value"]
                cost = (1.0 - paired["system_value"] / none) if none else math.nan
                emptied = mean(r.get("emptied" + suffix, math.nan) for r in rows.values() if "emptied" + suffix in r)
                out.append(
                    {
                        "representation": rep,
                        "query_set": qs,
                        "rule": rule,
                        "metric": with_floor,
                        "relative_cost": cost,
                        "emptied": emptied,
                        **paired,
                    }
                )
        rows = by.get((rep, FOREIGN))
        if rows:
            for suffix, rule in (("", "part"), ("_cut", "cut")):
                vals = [r["emptied" + suffix] for r in rows.values() if "emptied" + suffix in r]
                if vals:
                    out.append(
                        {
                            "representation": rep,
                            "query_set": FOREIGN,
                            "rule": rule,
                            "metric": "emptied",
                            "emptied": mean(vals),
                            "n": len(vals),
                        }
                    )
    return out


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def floor_table(report: Sequence[dict[str, Any]]) -> str:
    """:func:`floor_report` as a markdown table."""
    from .report import markdown_table, pct

    headers = [
        "Representation",
        "Query set",
        "Floor",
        "Metric",
        "No floor",
        "With the floor",
        "Δ (95% CI)",
        "Relative cost",
        "Emptied",
        "n",
    ]
    body = []
    for r in report:
        if r["query_set"] == FOREIGN:
            body.append(
                [
                    r["representation"],
                    r["query_set"],
                    r["rule"],
                    "emptied",
                    "—",
                    "—",
                    "—",
                    "—",
                    pct(r["emptied"]),
                    r["n"],
                ]
            )
            continue
        d = r["diff"]
        body.append(
            [
                r["representation"],
                r["query_set"],
                r["rule"],
                r["metric"],
                pct(r["peer_value"]),
                pct(r["system_value"]),
                f"{d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, {d['hi'] * 100:+.1f}]",
                "—" if _missing(r["relative_cost"]) else f"{r['relative_cost'] * 100:.1f}%",
                "—" if _missing(r["emptied"]) else pct(r["emptied"]),
                d["n"],
            ]
        )
    return markdown_table(headers, body, ["l", "l", "l", "l", "r", "r", "r", "r", "r", "r"])
