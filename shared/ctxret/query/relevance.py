"""``relevance``: a score in [0, 1] you can threshold, the same whatever other searches found.

The fused score of hybrid search is min–max normalised over each part's candidates, so the same
right answer scores 1.0 in one store and 0.30 in another: it ranks, it cannot be thresholded.
``relevance`` is a logistic function of three features of the hit in its own part's search:

* ``cosine`` — the hit's raw cosine to its (blended) query part;
* ``coverage`` — the share of the part's distinct content words the piece holds (its text,
  label included, tokenized by the lexical index's tokenizer; English function words left out:
  :func:`content_words`). 1.0 = every content word of the part;
* ``top`` — 1 when the hit is the part's best dense match (its cosine is the highest among the
  part's candidates, :func:`is_top`), else 0; and ``margin``, how far its cosine is under that best
  (``max(cosine − best, −0.15)``, 0 for the best: :func:`best_features`);
* ``first`` — 1 for the hit the part's search ranks first (hybrid: the fused ranking, with the answers, latest and
  speakers stages; dense: the best dense match), else 0.

``relevance = 1 / (1 + exp(-(intercept + a·cosine + b·coverage + c·coverage² + d·top + e·margin + f·first)))``;
a part with no content word at all uses the cosine-only model, ``dense`` (no coverage terms).

Coverage is deliberately not weighted by IDF (the lexical floor's ``LexicalIndex.coverage`` is):
IDF comes from the store, and in a small store it is degenerate — with two pieces a word one of
them holds weighs nothing and a word none holds weighs the most, so "When does my flight leave?"
gave the piece about the flight a coverage of 0.

Why ``top`` and ``margin``: fitted on conversations alone (LoCoMo, where about one candidate in twenty is right and
shared words are the strongest evidence), cosine and coverage put a right answer worded differently
from the question — "departing at 09:40" for "when does my flight leave" — at 0.07, and right top hits
of a small wiki at 0.02–0.3. Being the part's best dense match is evidence on every kind of data (on
LoCoMo dev 63% of the top hits are right, on documents 70–90%), and it costs nothing: the part's
candidates are scored anyway. It is the one feature that looks beyond the hit, and only inside its own
part's search: adding a piece that becomes the part's best match lowers the previous best's relevance;
nothing else in the store, no other part and no other search enters.

Why ``first``: the adapters show each group in the search's ranking, and the score shown never rises down a group
(:func:`shown_scores`), so a threshold on it keeps or drops a group with its first hit. Scored without knowing it is
first, a right first hit that the fused ranking put above the best dense match (its words match the question, its
cosine is not the highest) scored like an also-ran: "Which environment variable selects the OpenAI embedding
model?" over this project's docs put the right section first at 0.16, under the 0.3 the docs then suggested, and the
group with it. Being ranked first is evidence on both kinds of data (its rank, not its fused score: the fused score's
scale changes with the fusion rule), measured held out (BENCHMARKS, "Relevance: one cutoff for conversations and
documents").

The coefficients are fitted per embedder family by ``ctxret eval calibrate --sweeps relevance`` on
several kinds of data at once, each dataset weighing the same: conversations (every candidate among
the top :data:`CALIBRATION_POOL` of each query part's hybrid ranking, labelled right when the piece
holds one of the query's evidence utterances) and documents sets (``--docs``: the top hits of each
query, labelled right when they come from one of its relevant documents). The fit is a compromise
between datasets whose share of right candidates differs (5% on LoCoMo, 16–19% on documents), so it is
calibrated on none of them exactly; the command prints the per-dataset AUC, reliability table and calibration error,
held out by fold and by dataset, and BENCHMARKS ("Relevance: one cutoff for conversations and documents") what
:data:`SUGGESTED_CUTOFF` keeps on data the fit did not see. Recalibrate on your own data
(the same command prints the coefficients; pass them as ``SearchSettings(relevance=RelevanceCalibration(...))``
or declare it in your embedder's ``capabilities = EmbedderCapabilities(relevance=...)``).

Embedders without a fitted calibration get the local model's curve shifted along the cosine axis
so that their default floor (``default_score_threshold``) maps to the relevance the local model's
floor maps to — a placeholder, named ``uncalibrated`` in :attr:`RelevanceCalibration.source`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..embedders.base import capabilities_of
from ..errors import InputError

__all__ = [
    "CALIBRATION_POOL",
    "SUGGESTED_CUTOFF",
    "content_coverage",
    "content_words",
    "expected_calibration_error",
    "LOCAL_MINILM",
    "RelevanceCalibration",
    "RelevanceModel",
    "calibration_for",
    "fit_relevance",
    "best_features",
    "is_top",
    "relevance",
    "scored_metadata",
    "shown_groups",
    "shown_order",
    "shown_score",
]

#: Candidates per query part (best first, by the runtime's hybrid ranking) the fit looks at.
CALIBRATION_POOL = 20
#: The cutoff the docs suggest for a threshold on the relevance (``min_relevance``; an adapter's ``score_threshold``;
#: LlamaIndex's ``SimilarityPostprocessor(similarity_cutoff=...)``), the same for conversations and documents: held
#: out, it keeps at least 95% of the right first hits of both (BENCHMARKS, "Relevance: one cutoff for conversations
#: and documents"). A threshold is optional: the cosine floor already empties the parts nothing answers.
SUGGESTED_CUTOFF = 0.3

#: English function words left out of a part before its coverage is measured.
STOPWORDS = frozenset(
    """
a about above after again against all am an and any are aren't as at be because been before being below between
both but by can can't cannot could couldn't did didn't do does doesn't doing don't down during each few for from
further had hadn't has hasn't have haven't having he he'd he'll he's her here here's hers herself him himself his
how how's i i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my myself no nor
not of off on once only or other ought our ours ourselves out over own same shan't she she'd she'll she's should
shouldn't so some such than that that's the their theirs them themselves then there there's these they they'd
they'll they're they've this those through to too under until up very was wasn't we we'd we'll we're we've were
weren't what what's when when's where where's which while who who's whom why why's will with won't would wouldn't
you you'd you'll you're you've your yours yourself yourselves also just did does tell know please again ever
""".split()
)
_WORD = re.compile(r"[\w'’]+", re.UNICODE)


def content_coverage(part: str, texts: Sequence[str]) -> list[float | None]:
    """For each text, the share of ``part``'s distinct content words it holds (``None`` for all
    when the part has no content word: the cosine-only model applies)."""
    from ..storage.tokenize import query_tokens, tokenize

    words = set(query_tokens(content_words(part))) if _has_content(part) else set()
    if not words:
        return [None] * len(texts)
    return [len(words & set(tokenize(t))) / len(words) for t in texts]


def _has_content(part: str) -> bool:
    return any(w.casefold().replace("’", "'") not in STOPWORDS for w in _WORD.findall(part))


def content_words(part: str) -> str:
    """``part`` without English function words (``"What is my flight?"`` → ``"flight"``); the part
    itself when nothing else is left."""
    kept = [w for w in _WORD.findall(part) if w.casefold().replace("’", "'") not in STOPWORDS]
    return " ".join(kept) if kept else part


@dataclass(frozen=True)
class RelevanceModel:
    """``sigmoid(intercept + cosine_weight·cosine + coverage_weight·coverage + coverage_sq_weight·coverage²
    + top_weight·top + margin_weight·margin + first_weight·first)``; ``top`` is 1 for the part's best dense match,
    else 0, ``margin`` = ``max(cosine − the part's best cosine, −MARGIN_CAP)`` (:func:`best_features`) and ``first``
    1 for the hit its part's search ranks first, else 0."""

    intercept: float
    cosine_weight: float
    coverage_weight: float = 0.0
    coverage_sq_weight: float = 0.0
    top_weight: float = 0.0
    margin_weight: float = 0.0
    first_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "intercept",
            "cosine_weight",
            "coverage_weight",
            "coverage_sq_weight",
            "top_weight",
            "margin_weight",
            "first_weight",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                raise InputError(f"RelevanceModel.{name} must be a finite number, got {v!r}")
            object.__setattr__(self, name, float(v))

    def __call__(self, cosine: Any, coverage: Any = 0.0, top: Any = 0.0, margin: Any = 0.0, first: Any = 0.0) -> Any:
        z = self.intercept + self.cosine_weight * np.asarray(cosine, dtype=np.float64)
        cov = np.asarray(coverage, dtype=np.float64)
        z = z + self.coverage_weight * cov + self.coverage_sq_weight * cov * cov
        z = z + self.top_weight * np.asarray(top, dtype=np.float64)
        z = z + self.margin_weight * np.asarray(margin, dtype=np.float64)
        z = z + self.first_weight * np.asarray(first, dtype=np.float64)
        out = 1.0 / (1.0 + np.exp(-np.clip(z, -60.0, 60.0)))
        return float(out) if np.ndim(out) == 0 else out

    def shifted(self, cosine_shift: float) -> RelevanceModel:
        """The same curve moved right by ``cosine_shift`` on the cosine axis."""
        return replace(self, intercept=self.intercept - self.cosine_weight * float(cosine_shift))


@dataclass(frozen=True)
class RelevanceCalibration:
    """The two relevance models of an embedder family: with lexical coverage (hybrid search) and
    the cosine alone (dense search). ``source`` says where the numbers come from."""

    hybrid: RelevanceModel
    dense: RelevanceModel
    source: str = ""

    def __call__(
        self, cosine: float, coverage: float | None = None, best: float | None = None, first: bool | None = None
    ) -> float:
        """The relevance of one hit (``coverage=None``: a part without content words, the cosine alone;
        ``best``: the highest cosine among the hit's part's candidates, ``None``: the hit's own, i.e. it is
        its part's best match; ``first``: whether its part's search ranks it first, ``None``: whether it is the
        part's best dense match, as a dense search ranks)."""
        top, margin = best_features(cosine, best)
        lead = top if first is None else (1.0 if first else 0.0)
        if coverage is None:
            return float(self.dense(cosine, 0.0, top, margin, lead))
        return float(self.hybrid(cosine, coverage, top, margin, lead))

    def shifted(self, cosine_shift: float, source: str) -> RelevanceCalibration:
        return RelevanceCalibration(self.hybrid.shifted(cosine_shift), self.dense.shifted(cosine_shift), source)


#: all-MiniLM-L6-v2 (the local model), fitted by ``ctxret eval calibrate --sweeps relevance`` over the local
#: model's default stored side (late chunking at weight 0), on three datasets weighing the same: the first three
#: LoCoMo dev conversations (facts and questions, the top 20 of each part's default hybrid ranking: 21,200
#: candidates, 1,032 right), scifact-dev (a seeded 300 of the 809 train claims, the corpus cut to their cited
#: abstracts + 1,200 others: 6,000 candidates, 1,122 right) and tests/data/handbook (40 questions over 20 files: 800
#: candidates, 125 right). Held out by fold: AUC 0.916 / 0.902 / 0.833. The other two LoCoMo conversations and the
#: other 509 claims are held out for the cutoff the docs suggest (:data:`SUGGESTED_CUTOFF`; BENCHMARKS, "Relevance:
#: one cutoff for conversations and documents").
LOCAL_MINILM = RelevanceCalibration(
    hybrid=RelevanceModel(
        intercept=-3.238,
        cosine_weight=4.069,
        coverage_weight=-0.786,
        coverage_sq_weight=3.264,
        top_weight=0.347,
        margin_weight=6.178,
        first_weight=1.846,
    ),
    dense=RelevanceModel(
        intercept=-3.190, cosine_weight=4.432, top_weight=0.363, margin_weight=6.664, first_weight=2.255
    ),
    source="all-MiniLM-L6-v2, LoCoMo dev + scifact-dev + handbook",
)
#: The local model's default floor: where the placeholder curves of other embedders are anchored.
_LOCAL_FLOOR = 0.3
#: Fitted calibrations by ``model_id`` prefix.
FITTED: dict[str, RelevanceCalibration] = {"local:all-MiniLM-L6-v2": LOCAL_MINILM}


def calibration_for(embedder: Any) -> RelevanceCalibration:
    """The relevance calibration of ``embedder``: its own (``EmbedderCapabilities.relevance``) if it has one, a
    fitted one for its model family, else the placeholder (see the module docstring)."""
    own = capabilities_of(embedder).relevance
    if isinstance(own, RelevanceCalibration):
        return own
    model_id = str(embedder.model_id)
    for prefix, cal in FITTED.items():
        if model_id.startswith(prefix):
            return cal
    floor = float(embedder.default_score_threshold)
    return LOCAL_MINILM.shifted(
        floor - _LOCAL_FLOOR,
        f"uncalibrated: the local model's curve moved to floor {floor:g}; "
        "run `ctxret eval calibrate --sweeps relevance`",
    )


def is_top(cosine: float, best: float | None) -> bool:
    """Whether a hit with ``cosine`` is its part's best dense match (``best``: the highest cosine among the
    part's candidates; ``None``: the hit's own)."""
    return best is None or float(cosine) >= float(best) - TOP_TOLERANCE


def best_features(cosine: float, best: float | None) -> tuple[float, float]:
    """``(top, margin)`` of a hit: 1.0 when it is its part's best dense match (:func:`is_top`), and its
    cosine's margin under the part's best, ``max(cosine − best, −MARGIN_CAP)`` (0 for the best)."""
    if best is None:
        return 1.0, 0.0
    return (1.0 if is_top(cosine, best) else 0.0), max(min(float(cosine) - float(best), 0.0), -MARGIN_CAP)


#: Cosines this close to the part's best count as the best (float32 vectors, ties).
TOP_TOLERANCE = 1e-6
#: How far under the part's best cosine the margin feature still tells hits apart.
MARGIN_CAP = 0.15


def relevance(
    cal: RelevanceCalibration,
    cosine: float,
    coverage: float | None,
    best: float | None = None,
    first: bool | None = None,
) -> float:
    """``cal(cosine, coverage, best, first)``, for callers that prefer a function."""
    return cal(cosine, coverage, best, first)


# -- fitting --------------------------------------------------------------------------------------
def _logistic_fit(
    x: np.ndarray, y: np.ndarray, l2: float = 1e-3, iters: int = 100, weights: np.ndarray | None = None
) -> np.ndarray:
    """Newton–Raphson (IRLS) for an L2-regularised, optionally weighted logistic regression; ``x`` has a
    leading ones column."""
    w = np.zeros(x.shape[1])
    sw = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=np.float64)
    reg = np.full(x.shape[1], l2)
    reg[0] = 0.0  # the intercept is not shrunk
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -60, 60)))
        grad = x.T @ (sw * (p - y)) + reg * w
        hess = (x * (sw * p * (1 - p))[:, None]).T @ x + np.diag(reg + 1e-9)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return w


def auc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve: the chance a random right hit outscores a random wrong one (ties: ½)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if not n_pos or not n_neg:
        return math.nan
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over ties
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def log_loss(p: Any, labels: Any) -> float:
    q = np.clip(np.asarray(p, dtype=np.float64), 1e-9, 1 - 1e-9)
    y = np.asarray(labels, dtype=np.float64)
    return float(-np.mean(y * np.log(q) + (1 - y) * np.log(1 - q))) if len(q) else math.nan


def reliability(
    p: Any, labels: Any, edges: Sequence[float] = (0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0001)
) -> list[dict[str, Any]]:
    """Per relevance bin: how many hits, their mean relevance and the share that were right."""
    pa = np.asarray(p, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    rows: list[dict[str, Any]] = []
    for lo, hi in zip(edges[:-1], edges[1:], strict=False):
        m = (pa >= lo) & (pa < hi)
        n = int(m.sum())
        rows.append(
            {
                "bin": f"{lo:.1f}-{min(hi, 1.0):.1f}",
                "n": n,
                "mean_relevance": float(pa[m].mean()) if n else math.nan,
                "right_share": float(y[m].mean()) if n else math.nan,
            }
        )
    return rows


def fit_relevance(
    samples: Sequence[Mapping[str, Any]], *, source: str = "", balance: bool = True
) -> RelevanceCalibration:
    """Fit both models on ``samples`` of ``{"cosine", "coverage", "best", "rank", "right"}`` (one per candidate hit;
    ``best``: the highest cosine among its part's candidates, the hit's own when absent; ``rank``: its place in its
    part's ranking, 0 = first; absent: first when it is the best dense match): the coverage model on the samples
    that have a coverage, the cosine-only model on all. ``balance``: every ``dataset`` (a sample key; one when
    absent) weighs the same in the fit, whatever its number of samples."""
    if not samples:
        raise InputError("no samples to fit relevance on: the threads need labelled facts or questions")
    cos = np.array([float(s["cosine"]) for s in samples])
    has = np.array([s.get("coverage") is not None for s in samples])
    cov = np.array([float(s.get("coverage") or 0.0) for s in samples])
    feats = [best_features(float(s["cosine"]), s.get("best")) for s in samples]
    top = np.array([t for t, _ in feats])
    margin = np.array([m for _, m in feats])
    first = np.array([float(s["rank"] == 0) if "rank" in s else t for s, (t, _) in zip(samples, feats, strict=True)])
    y = np.array([1.0 if s["right"] else 0.0 for s in samples])
    if y.min() == y.max() or y[has].min(initial=1.0) == y[has].max(initial=1.0):
        raise InputError(
            "relevance needs both right and wrong hits among the samples (and among those with content words)"
        )
    names = [str(s.get("dataset", "")) for s in samples]
    sizes = {n: names.count(n) for n in set(names)} if balance else {}
    weights = np.array([1.0 / sizes[n] for n in names]) if balance else np.ones(len(samples))
    weights = weights / weights.mean()
    ones = np.ones_like(cos)
    hb = _logistic_fit(
        np.column_stack([ones, cos, cov, cov * cov, top, margin, first])[has], y[has], weights=weights[has]
    )
    dn = _logistic_fit(np.column_stack([ones, cos, top, margin, first]), y, weights=weights)
    return RelevanceCalibration(
        RelevanceModel(*(float(v) for v in hb)),
        RelevanceModel(
            float(dn[0]), float(dn[1]), top_weight=float(dn[2]), margin_weight=float(dn[3]), first_weight=float(dn[4])
        ),
        source,
    )


def expected_calibration_error(p: Any, labels: Any, bins: int = 10) -> float:
    """ECE: the mean |predicted − observed share right| over ``bins`` equal-width bins, weighted by size."""
    pa = np.asarray(p, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if not len(pa):
        return math.nan
    idx = np.minimum((pa * bins).astype(int), bins - 1)
    return float(
        sum(abs(pa[idx == b].mean() - y[idx == b].mean()) * (idx == b).sum() for b in range(bins) if (idx == b).any())
        / len(pa)
    )


# -- what the adapters show -------------------------------------------------------------------------
def shown_score(hit: Any) -> tuple[float, str] | None:
    """The score an adapter shows for ``hit`` and its scale: the reranker's when one ran (``"rerank"``:
    the group is in its order), else the hit's ``relevance``; ``None`` when it has neither."""
    scores = hit.scores
    if scores.get("rerank") is not None:
        return float(scores["rerank"]), "rerank"
    if scores.get("relevance") is not None:
        return float(scores["relevance"]), "relevance"
    return None


def shown_order(hits: Sequence[Any]) -> list[Any]:
    """``hits`` (one group) in the order an adapter lists them: the search's own ranking (the fused
    score, or a reranker's order when one ran) -- the order the evaluation measures. Listing by the
    relevance instead was tried and put worse hits first (the fused score ranks better than any one
    score can threshold); the score shown follows this order instead (:func:`shown_scores`)."""
    return list(hits)


def shown_scores(hits: Sequence[Any]) -> list[tuple[float, str] | None]:
    """The score an adapter shows for each of ``hits`` (a group, in its order), non-increasing down the
    group: a hit's relevance, capped by the one shown above it, so that a threshold on the shown score
    keeps a prefix of the ranking and the first hit is never shown lower than a later one (the top
    hit's relevance is never changed; the uncapped relevance stays in ``score_relevance``). A
    reranker's scores are shown as they are (the group is in their order)."""
    out: list[tuple[float, str] | None] = []
    cap = math.inf
    for hit in hits:
        shown = shown_score(hit)
        if shown is not None and shown[1] == "relevance":
            cap = min(cap, shown[0])
            shown = (cap, "relevance")
        out.append(shown)
    return out


def shown_groups(groups: Sequence[Any]) -> list[tuple[Any, list[Any]]]:
    """Each group with its hits in the order an adapter shows them (:func:`shown_order`)."""
    return [(g, shown_order(g.hits)) for g in groups]


def scored_metadata(hit: Any, group: Any, rank: int, parts: Sequence[str]) -> dict[str, Any]:
    """:func:`ctxret.storage.schema.hit_metadata` with ``score`` = the score the adapters show
    (:func:`shown_score`: the hit's ``relevance``, ``score_scale = "relevance"``; the reranker's
    score, ``"rerank"``, when one ran) and ``group_rank`` = ``rank``, the hit's place in the order
    shown (:func:`shown_order`). The ranking score stays under its own name (``score_fused``,
    ``score_cosine``) and so does the relevance (``score_relevance``)."""
    from ..storage.schema import hit_metadata

    meta = hit_metadata(hit, group, rank, parts)
    hits = list(getattr(group, "hits", ()))
    shown = shown_scores(hits)[rank] if rank < len(hits) and hits[rank] is hit else shown_score(hit)
    if shown is not None:
        meta["score"], meta["score_scale"] = shown
    return meta
