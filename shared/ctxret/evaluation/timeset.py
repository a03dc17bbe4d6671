"""The time-aware representations of ``eval threads`` and the scoring of the time query sets (:mod:`.timequeries`).

Time-aware representations (opt-in: name them in ``--representations``)
-----------------------------------------------------------------------
All are the runtime's default hybrid search (:data:`.hybrid.RUNTIME_DEFAULT` over the default stored side), each
part searched inside its own scope: ``Scope(thread, where=ts_epoch window)`` — the thread's pieces filtered before
ranking (dense and BM25), never after the cut to k. Every one also stops at ``now`` (a search never sees what was
stored after its time), which the plain ``hybrid_default`` does not:

* ``hybrid_asof``: no time handling, only the store as of now (the product today, where nothing is stored after now);
* ``hybrid_time``: each part's window (:func:`ctxret.query.time.find_time`), the time words kept in the text;
* ``hybrid_time_strip``: the same, the time words taken out of the embedded and matched text (part and whole);
* ``hybrid_time_pm1d``: the window widened by a day on each side;
* ``hybrid_time_fallback``: the window, but a part whose window holds no piece searches as of now;
  ``hybrid_time_pm1d_fallback``: both;
* ``hybrid_time_product``: the product's rules (:mod:`ctxret.query.time.search`: ±1 day, the fallback when the window
  holds no piece of the thread, the product's ``Scope`` window, no floor for a part inside the window it names), no
  "as of now" cut for parts without a window;
  ``hybrid_time_product_asking``: the same with ``time_windows="asking"`` (only parts that ask get a window);
* ``hybrid_recency_7d`` / ``_30d`` / ``_90d``: no window; each part's candidates re-ranked by their fused score times
  ``0.5 ** (age / half_life)`` (age = now − the piece's time).

For ``facts`` / ``qa`` / ``composite`` the time-aware representations use now = the day after the conversation's last
section (at 12:00), so a query without a time word searches exactly as ``hybrid_default`` does.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from ..blend import blend_with_context
from ..embedders.fitting import embed_fitting
from ..query.search import PartCandidates
from ..query.time import TimeWindow, decide_windows, find_time, part_windows, strip_time, time_expressions
from ..query.vectors import query_texts
from ..storage.schema import Scope
from ..text import clean_text
from .hybrid import RUNTIME_DEFAULT, hybrid_candidates
from .index import Retrieval
from .metrics import evidence_recall, mean, reciprocal_rank
from .representations import hybrid_groups, register_representation
from .scoring import best_group
from .stats import by_query, compare
from .timequeries import TimeQuery, default_now

__all__ = [
    "TIME_REPRESENTATIONS",
    "TimeAware",
    "score_time",
    "time_breakdown",
    "time_comparison",
]

_EPOCH = datetime(1970, 1, 1)


# -- the time-aware search ------------------------------------------------------------------------------------------
def _floating(dt: datetime) -> float:
    """``ts_epoch`` of a naive timestamp (its wall clock read as UTC; ``storage.schema``)."""
    return (dt.replace(tzinfo=None) - _EPOCH).total_seconds()


def _where(window: TimeWindow | None, now: datetime, latest: float) -> dict[str, Any] | None:
    """The part's filter: its window (naive timestamps: the wall-clock scale), else the store as of now (None when
    that holds every piece, so a part without a time word searches exactly as ``hybrid_default``)."""
    if window is None:
        window = TimeWindow(None, now + timedelta(seconds=1), (), now)
        if latest < window.epoch_bounds(naive=True)[1]:
            return None
    return window.where(naive=True)


@dataclass(frozen=True)
class TimeAware:
    """A time-aware hybrid representation (see the module docstring): ``rep(ix, message, now=None)``."""

    windows: bool = True
    strip: bool = False
    tolerance: timedelta | None = None
    fallback: bool = False
    half_life: timedelta | None = None
    product: bool = False  # the product's window rules (ctxret.query.time.search), scoped as the product scopes
    asking: bool = False  # product: only parts that ask get their window (time_windows="asking")

    def __call__(self, ix: Any, message: str, now: datetime | None = None) -> Any:
        now = now if now is not None else default_now(ix.conv)
        return Retrieval("pieces", True, self.groups(ix, message, now))

    def groups(self, ix: Any, message: str, now: datetime | None) -> list[Any]:
        parts, whole = query_texts(message)
        if not parts:
            return []
        if now is None:  # no timestamps: nothing to filter on
            return _groups_plain(ix, message)
        if self.product:
            return self._product_groups(ix, message, parts, now)
        found = [find_time(p, now) if self.windows else None for p in parts]
        if self.tolerance is not None:
            found = [w.widened(self.tolerance) if w is not None else None for w in found]
        texts, qvecs = self._vectors(ix, message, parts, whole, found, now)
        latest = max((float(m.get("ts_epoch", -math.inf)) for m in ix.exact_store().metadatas), default=-math.inf)
        store = ix.exact_store(ix.default_stored)
        fusion = RUNTIME_DEFAULT
        wheres = [_where(w, now, latest) for w in found]
        cands: list[PartCandidates | None] = [None] * len(parts)
        for where in [w for i, w in enumerate(wheres) if w not in wheres[:i]]:  # parts sharing a scope: one search
            idx = [i for i, w in enumerate(wheres) if w == where]
            got = hybrid_candidates(
                store,
                ix.conv.id,
                [texts[i] for i in idx],
                qvecs[idx],
                k=ix.k,
                fusion=fusion,
                where=where,
                embedder=ix.emb,
            )
            for i, c in zip(idx, got, strict=True):
                if self.fallback and found[i] is not None and not c.ranked:
                    c = hybrid_candidates(
                        store,
                        ix.conv.id,
                        [texts[i]],
                        qvecs[i : i + 1],
                        k=ix.k,
                        fusion=fusion,
                        where=_where(None, now, latest),
                        embedder=ix.emb,
                    )[0]
                cands[i] = _recency(c, now, self.half_life) if self.half_life is not None else c
        groups = ix.ranked([c for c in cands if c is not None], fusion.lexical_floor)
        for g, part in zip(groups, parts, strict=True):
            g.part = part  # the part as written (composite scoring finds a fact's part by its words)
        return groups

    def _product_groups(self, ix: Any, message: str, parts: list[str], now: datetime) -> list[Any]:
        """Each part's window decided by the product's code (:func:`ctxret.query.time.decide_windows`: its
        tolerance, fallback and no-timestamp rules) and searched in the product's scope (``Scope(thread,
        window=...)``, whose ``where`` the thread view masks dense and BM25 with)."""
        store = ix.exact_store(ix.default_stored)

        def holds_any(scope: Scope) -> bool:
            view = store.resolve(scope)[0]
            return bool(view.allowed.any()) if view.allowed is not None else bool(view.ids)

        thread = Scope(ix.conv.id)
        named = part_windows(parts, now, asking=self.asking)
        keys, notes = decide_windows(named, None, thread, holds_any)
        qvecs = ix.query(message, split=True)[1]
        fusion = RUNTIME_DEFAULT
        cands: list[PartCandidates | None] = [None] * len(parts)
        for key in dict.fromkeys(keys):
            idx = [i for i, w in enumerate(keys) if w == key]
            got = hybrid_candidates(
                store,
                ix.conv.id,
                [parts[i] for i in idx],
                qvecs[idx],
                k=ix.k,
                fusion=fusion,
                where=thread.with_window(key).where,
                embedder=ix.emb,
            )
            for i, c in zip(idx, got, strict=True):
                cands[i] = c
        groups = ix.ranked([c for c in cands if c is not None], fusion.lexical_floor)
        for i, (g, part) in enumerate(zip(groups, parts, strict=True)):
            g.part = part
            g.windowed = named[i] is not None and not notes[i]  # the product drops the floor there
        return groups

    def _vectors(
        self, ix: Any, message: str, parts: list[str], whole: str, found: list[TimeWindow | None], now: datetime
    ) -> tuple[list[str], np.ndarray]:
        """The parts' texts and blended vectors: the runtime's (``ix.query``) unless time words are stripped."""
        if not self.strip or all(w is None for w in found):
            return parts, ix.query(message, split=True)[1]
        texts = [strip_time(p, w.spans) if w is not None else p for p, w in zip(parts, found, strict=True)]
        stripped_whole = strip_time(whole, [e.span for e in time_expressions(whole, now) if e.end is not None])
        if len(parts) == 1 and clean_text(parts[0]) == clean_text(whole):
            return texts, embed_fitting(ix.emb, texts)
        vecs = embed_fitting(ix.emb, [*texts, stripped_whole])
        return texts, blend_with_context(vecs[:-1], vecs[-1], ix.weight).astype(np.float32)


def _groups_plain(ix: Any, message: str) -> list[Any]:
    return hybrid_groups(ix, message, RUNTIME_DEFAULT)


def _recency(c: PartCandidates, now: datetime, half_life: timedelta) -> PartCandidates:
    """``c`` re-ranked by fused score × 0.5 ** (age / half_life) (a piece without a time keeps its score)."""
    h = half_life.total_seconds()
    t_now = _floating(now)
    rescored = []
    for rid, score in c.ranked:
        ts = c.info[rid][1].get("ts_epoch")
        decay = 1.0 if ts is None else 0.5 ** (max(0.0, t_now - float(ts)) / h)
        rescored.append((rid, float(score) * decay))
    rescored.sort(key=lambda x: -x[1])
    c.ranked = rescored
    return c


TIME_REPRESENTATIONS: dict[str, TimeAware] = {
    "hybrid_asof": TimeAware(windows=False),
    "hybrid_time": TimeAware(),
    "hybrid_time_strip": TimeAware(strip=True),
    "hybrid_time_pm1d": TimeAware(tolerance=timedelta(days=1)),
    "hybrid_time_fallback": TimeAware(fallback=True),
    "hybrid_time_pm1d_fallback": TimeAware(tolerance=timedelta(days=1), fallback=True),
    "hybrid_time_product": TimeAware(product=True),
    "hybrid_time_product_asking": TimeAware(product=True, asking=True),
    "hybrid_recency_7d": TimeAware(windows=False, half_life=timedelta(days=7)),
    "hybrid_recency_30d": TimeAware(windows=False, half_life=timedelta(days=30)),
    "hybrid_recency_90d": TimeAware(windows=False, half_life=timedelta(days=90)),
}
for _name, _rep in TIME_REPRESENTATIONS.items():
    register_representation(_name, _rep, default=False)


# -- scoring -------------------------------------------------------------------------------------------------------
def score_time(ix: Any, ret: Any, q: TimeQuery, k: int) -> dict[str, float]:
    """``top1_window``, ``top5_window`` (time set), ``window_has_evidence`` (time_qa), ``top1_section``, ``mrr``,
    ``recall``."""
    stamp = {t.index: t.timestamp for t in ix.conv.turns}
    g = best_group(ret.groups)
    out: dict[str, float] = {}
    if q.base == "qa":
        out["window_has_evidence"] = 1.0 if any(q.holds(stamp.get(s)) for s in q.gold) else 0.0
    if g is None:
        if q.base != "qa":
            out.update(top1_window=0.0, top5_window=0.0)
        out.update(top1_section=0.0, mrr=0.0, recall=evidence_recall([], q.evidence))
        return out
    sections = ix.sections(ret.level)[g.items]
    if q.base != "qa":
        inside = [1.0 if q.holds(stamp.get(int(s))) else 0.0 for s in sections[:5]]
        out["top1_window"] = inside[0]
        out["top5_window"] = mean(inside)
    out["top1_section"] = 1.0 if sections[0] in q.gold else 0.0
    out["mrr"] = reciprocal_rank(sections.tolist(), q.gold)
    units = ix.units(ret.level)
    out["recall"] = evidence_recall([units[i] for i in g.items[:k]], q.evidence)
    return out


#: Baselines each time-aware representation is compared with (``hybrid_time``: for its variants
#: ``hybrid_time_*`` only), and the metrics compared.
TIME_BASELINES = ("hybrid_default", "hybrid_asof", "hybrid_time")
TIME_METRICS = {
    "time": ("top1_window", "top5_window", "top1_section"),
    "time_qa": ("top1_section", "recall"),
    "facts": ("top1_section",),
    "qa": ("top1_section", "recall"),
    "composite": ("coverage",),
}


def time_breakdown(per_query: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``time`` set's window metrics per representation and per base (fact, question, open) and phrase kind."""
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in per_query:
        if row["query_set"] == "time":
            cells[(row["representation"], "base", row["base"])].append(row)
            cells[(row["representation"], "kind", row["kind"])].append(row)
    return [
        {
            "representation": rep,
            "by": by,
            "value": value,
            "n": len(rows),
            "top1_window": mean(r["top1_window"] for r in rows),
            "top5_window": mean(r["top5_window"] for r in rows),
        }
        for (rep, by, value), rows in sorted(cells.items())
    ]


def time_comparison(per_query: Sequence[dict[str, Any]], recall_key: str = "recall_at_5") -> list[dict[str, Any]]:
    """Each time-aware representation against :data:`TIME_BASELINES`, paired per query (mean difference, 95%
    interval, bootstrap within conversations, per conversation), on the metrics of :data:`TIME_METRICS`."""
    by = by_query(per_query)
    reps = [r for r in TIME_REPRESENTATIONS if any(key[0] == r for key in by)]
    out: list[dict[str, Any]] = []
    for rep in reps:
        for base in TIME_BASELINES:
            if rep == base or (base == "hybrid_time" and not rep.startswith("hybrid_time_")):
                continue
            for qs, metrics in TIME_METRICS.items():
                mine, theirs = by.get((rep, qs)), by.get((base, qs))
                if not mine or not theirs:
                    continue
                for metric in metrics:
                    paired = compare(mine, theirs, metric, changed=True)
                    if paired is not None:
                        name = recall_key if metric == "recall" else metric
                        out.append({"system": rep, "peer": base, "query_set": qs, "metric": name, **paired})
    return out
