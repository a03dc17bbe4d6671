"""Paired statistics for comparisons in one harness run: per-query differences with a 95% interval.

Both systems answered the *same* queries, so the comparison is paired: the mean of per-query
differences with a normal-approximation interval (``mean ± 1.96·sd/√n``; for a 0/1 metric the
paired, McNemar-style interval on the difference of proportions), a bootstrap that resamples
queries within each conversation as a check, and the per-conversation means (does the sign hold
everywhere, or does one conversation carry the effect?).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .metrics import mean

__all__ = ["Diff", "by_query", "compare", "paired_diff", "per_cluster", "stratified_bootstrap"]

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Diff:
    """A paired difference: its mean, a 95% interval and the number of pairs."""

    mean: float
    lo: float
    hi: float
    n: int

    @property
    def excludes_zero(self) -> bool:
        return self.lo > 0 or self.hi < 0

    def fmt(self, scale: float = 100.0, digits: int = 1) -> str:
        """``+2.5 [+1.3, +3.7]`` (points by default)."""
        if self.n == 0 or math.isnan(self.mean):
            return "—"
        return f"{self.mean * scale:+.{digits}f} [{self.lo * scale:+.{digits}f}, {self.hi * scale:+.{digits}f}]"

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "n": self.n}


def _paired(a: Sequence[float], b: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        raise ValueError(f"paired values differ in shape: {x.shape} vs {y.shape}")
    keep = ~(np.isnan(x) | np.isnan(y))
    return x[keep] - y[keep], keep


def paired_diff(a: Sequence[float], b: Sequence[float]) -> Diff:
    """Mean of ``a - b`` over the queries where both are defined, with a normal 95% interval."""
    d, _ = _paired(a, b)
    if d.size == 0:
        return Diff(math.nan, math.nan, math.nan, 0)
    m = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else math.inf
    return Diff(m, m - Z95 * se, m + Z95 * se, int(d.size))


def stratified_bootstrap(
    a: Sequence[float], b: Sequence[float], clusters: Sequence[Hashable], *, reps: int = 2000, seed: int = 0
) -> Diff:
    """Percentile 95% interval of the mean difference, resampling queries within each cluster (conversation)."""
    d, keep = _paired(a, b)
    labels = np.asarray(list(clusters), dtype=object)[keep]
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(labels == c) for c in dict.fromkeys(labels.tolist())]
    stats = np.empty(reps)
    for r in range(reps):
        stats[r] = sum(d[rng.choice(g, size=g.size, replace=True)].sum() for g in groups) / max(d.size, 1)
    return Diff(
        float(d.mean()) if d.size else math.nan,
        float(np.quantile(stats, 0.025)),
        float(np.quantile(stats, 0.975)),
        int(d.size),
    )


def per_cluster(a: Sequence[float], b: Sequence[float], clusters: Sequence[Hashable]) -> dict[Hashable, float]:
    """Mean difference ``a - b`` within each cluster, in first-seen order."""
    d, keep = _paired(a, b)
    labels = np.asarray(list(clusters), dtype=object)[keep]
    return {c: float(d[labels == c].mean()) for c in dict.fromkeys(labels.tolist())}


def by_query(per_query: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Mapping[str, Any]]]:
    """Per-query metric rows keyed by ``(representation, query set)``, then by query id."""
    out: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for row in per_query:
        out[(row["representation"], row["query_set"])][row["query_id"]] = row
    return out


def compare(
    mine: Mapping[str, Mapping[str, Any]],
    theirs: Mapping[str, Mapping[str, Any]],
    metric: str,
    *,
    changed: bool = False,
) -> dict[str, Any] | None:
    """``metric`` of two systems paired per query, over the queries where both have it (``None``: no
    such query): ``system_value`` and ``peer_value`` (means), ``diff`` (normal 95% interval on the
    per-query differences), ``bootstrap`` (queries resampled within conversations),
    ``per_conversation``; with ``changed``, the number of queries whose value differs."""
    ids = [i for i in mine if i in theirs and metric in mine[i] and metric in theirs[i]]
    if not ids:
        return None
    a = [float(mine[i][metric]) for i in ids]
    b = [float(theirs[i][metric]) for i in ids]
    convs = [mine[i]["conversation"] for i in ids]
    out: dict[str, Any] = {
        "system_value": mean(a),
        "peer_value": mean(b),
        "diff": paired_diff(a, b).as_dict(),
        "bootstrap": stratified_bootstrap(a, b, convs).as_dict(),
        "per_conversation": per_cluster(a, b, convs),
    }
    if changed:
        out["changed"] = sum(x != y for x, y in zip(a, b, strict=True))
    return out
