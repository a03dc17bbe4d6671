"""The latest fact first: when a group holds two statements of one subject made at different times, the later ranks
above the earlier; both stay in the group, each with its timestamp, so the model sees the change.

Facts change ("the cutover is planned for November 14" ... "we moved the cutover to November 21"), and the first
statement, worded like the question, usually outranks the correction. A global recency decay would fix that and bury
every old fact that never changed (``recency_half_life``, docs/time.md); this rule moves only a hit that restates
another hit of the same group, and only for a part that asks how things are **now**:

* **the part asks how things are now** (:func:`asks_now`: a question or request in the present tense, "What car does
  Caroline drive?", "When is the cutover?", with no past-tense auxiliary such as "did" or "was"; one that asks for
  the latest state in any tense, "What lens did I buy most recently?", "... so far?"; or a tally or a duration in the
  present perfect, "How many tops have I bought?", "How long have I had my cat?"). A question about what happened
  ("When did Caroline go camping?") wants the event, and a statement (a fact being looked up) its own source: they
  keep their ranking;
* **two of the group's first ``k`` hits (at most :data:`DEPTH`) were said by the same source at different times**
  (the stored ``source_name`` and ``ts_epoch``; a hit without a time never moves). Only then is anything computed
  (:func:`latest_request`), so most searches pay nothing;
* **they are about the same subject** (:func:`same_subject`): each is the other's nearest neighbour among those hits
  said by the same source at another time (two pieces of one message never compete),
  and their similarity is at least :data:`SAME_SUBJECT`. The similarity is the cosine of the hits' **own-text
  vectors** (each stored text embedded alone, at search time: those hits' texts in one request) once the direction of
  the part's first :data:`CONTEXT` stored vectors is taken out (what the candidates all share: the thread's people,
  its tone; a part with fewer candidates, in a small thread, has too few to tell that from the pair itself, and
  nothing is taken out), plus the mean of how much of each hit's IDF-weighted words the other holds (the lexical index's
  ``coverage``; 0 without a lexical index). The stored vectors themselves carry their session (late chunking), so two
  statements from different sessions look less alike in them than they are: same-subject detection from the stored
  vectors moved 78% of the changed facts up, from the own-text vectors 95% (held out; BENCHMARKS, "The latest fact
  first"). A fact changed twice has three statements, and only two of them are each other's nearest: a hit whose
  nearest neighbour is one of such a pair, as similar, joins it, and one said after them only when it is as similar
  to both (:func:`subjects`);
* **the later ranks above the earlier**: a subject's statements take the place of its best-ranked one, the latest
  first, each with the best score among them; each one moved up also gets a ``relevance`` at least that one's (it
  restates it).

Nothing enters or leaves the group: the first ``k`` candidates only change places, so a fact never restated keeps its
place whatever its age. The search runs it as its ``latest`` stage (:mod:`.executor`): on the clock under a deadline,
and skipped (the group keeps its order) when the search has no embedder or no time left. The stage remembers the
own-text vectors it embedded (:func:`own_vectors`: the last :data:`REMEMBERED` texts per embedder), so a search that
meets the same hits again embeds nothing. Measured on the ``updates``
query set (:mod:`ctxret.evaluation.updates`: 150 controlled update threads on LoCoMo dev) and on LoCoMo's facts and
questions.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._lru import TextLRU
from ..storage.base import Deferred
from .split.asking import asks

__all__ = [
    "CONTEXT",
    "DEPTH",
    "REMEMBERED",
    "SAME_SUBJECT",
    "LatestRequest",
    "OwnVectors",
    "asks_now",
    "latest_first",
    "latest_request",
    "may_restate",
    "own_vectors",
    "request_ids",
    "same_subject",
    "subjects",
]

#: The part's first candidates whose mean stored vector gives the direction taken out before two hits are compared.
CONTEXT = 20
#: The most hits of a group the rule compares (its first ``min(k, DEPTH)``): what was measured (``k=5``), and a bound on
#: the texts the ``latest`` stage embeds whatever ``k`` a search asks for.
DEPTH = 5
#: Two hits are about the same subject when their similarity (own-text cosine with the shared direction taken out,
#: plus mean lexical containment) is at least this, and each is the other's nearest neighbour among the group's hits.
SAME_SUBJECT = 0.5
#: How many own-text vectors the ``latest`` stage remembers per embedder (:func:`own_vectors`): 1.5 MB at 384
#: dimensions, 6 MB at 1,536.
REMEMBERED = 1024

#: Auxiliaries and markers of a question about the present ("does", "is", "what's", "will", "now").
_PRESENT = re.compile(
    r"\b(?:does|do|is|are|am|doesn't|don't|isn't|aren't|will|won't|can|now|currently|these days|still)\b|"
    r"\b(?:what|who|where|when|how|which|that|there|it|he|she|they|you|we)'(?:s|re|ll)\b"
)
#: Markers of a question about the past ("did", "was", "used to").
_PAST = re.compile(r"\b(?:did|didn't|was|wasn't|were|weren't|had|hadn't|used to|ago|last)\b")
#: Words that ask for the latest state whatever the tense ("What lens did I buy most recently?", "... so far?").
_RECENT = re.compile(
    r"\b(?:now|currently|current|latest|most recent|most recently|so far|these days|lately|anymore|still)\b"
)
#: A tally or a duration up to now, in the present perfect ("How many tops have I bought?", "How long has she had it?").
_TALLY = re.compile(r"\bhow (?:many|much|long|often)\b.*(?:\b(?:have|has|haven't|hasn't)\b|'ve\b)")

Fetch = Callable[[list[str]], Mapping[str, tuple[str, Mapping[str, Any], Any]]]


def asks_now(part: str) -> bool:
    """Whether ``part`` asks about the present: a question or request (:func:`~.split.asking.asks`) that asks for the
    latest state ("now", "currently", "most recently", "so far", ...), or a tally or a duration in the present perfect
    ("How many ... have I ...?", "How long has ...?"), or has a present-tense marker and no past-tense one."""
    if not asks(part):
        return False
    text = " ".join(part.lower().replace("\u2019", "'").split())
    if _RECENT.search(text) or _TALLY.search(text):
        return True
    return bool(_PRESENT.search(text)) and not _PAST.search(text)


@dataclass(frozen=True)
class LatestRequest:
    """A group that may hold a changed fact: its first ``k`` hits that were read (``pool``), their stored rows
    (``rows``: id -> ``(document, metadata, vector)``) and the stored vectors of its first :data:`CONTEXT` hits.
    :attr:`texts` are what the search embeds for it."""

    pool: list[str]
    rows: Mapping[str, tuple[str, Mapping[str, Any], Any]]
    context: np.ndarray

    @property
    def texts(self) -> list[str]:
        """The pool's stored texts, in order (each is embedded alone)."""
        return [str(self.rows[rid][0]) for rid in self.pool]


def _epoch(meta: Any) -> float | None:
    if isinstance(meta, Deferred) or not isinstance(meta, Mapping):
        return None
    value = meta.get("ts_epoch")
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _source(meta: Any) -> Any:
    return meta.get("source_name") if isinstance(meta, Mapping) else None


def _restated(metas: Sequence[Any]) -> bool:
    """Whether two of ``metas`` were said by the same source at different times."""
    seen: dict[Any, float] = {}
    for meta in metas:
        stamp = _epoch(meta)
        if stamp is None:
            continue
        source = _source(meta)
        if source in seen and seen[source] != stamp:
            return True
        seen.setdefault(source, stamp)
    return False


def may_restate(c: Any, k: int) -> bool:
    """Whether :func:`latest_request` may find work in ``c`` (a part's ranked :class:`~.search.PartCandidates`): the
    part asks about now, and its first ``k`` hits' metadata shows two statements of one source at different times, or
    is not read yet (an unscoped store defers it). Reads nothing."""
    k = min(k, DEPTH)
    if len(c.ranked) < 2 or k < 2 or not asks_now(c.part):
        return False
    metas = [c.info[rid][1] if rid in c.info else None for rid, _ in c.ranked[:k]]
    return any(isinstance(m, Deferred) for m in metas) or _restated(metas)


def request_ids(c: Any, k: int) -> list[str]:
    """The ids whose stored rows :func:`latest_request` reads for ``c``: its first :data:`CONTEXT` candidates (the
    first ``min(k, DEPTH)`` among them)."""
    return [rid for rid, _ in c.ranked[: max(min(k, DEPTH), CONTEXT)]]


def latest_request(c: Any, k: int, fetch: Fetch) -> LatestRequest | None:
    """The :class:`LatestRequest` of ``c`` (a part's ranked :class:`~.search.PartCandidates`), or ``None`` when the
    rule cannot move anything: the part does not ask about now, or no two of its first ``k`` hits were said by one
    source at different times. ``fetch(ids)`` reads stored ``(document, metadata, vector)`` rows (only when needed;
    rows of other ids in its answer are ignored, so one read may serve every part)."""
    if not may_restate(c, k):
        return None
    k = min(k, DEPTH)
    top = request_ids(c, k)
    rows = fetch(top)
    pool = [rid for rid in top[:k] if rid in rows]
    if len(pool) < 2 or not _restated([rows[rid][1] for rid in pool]):
        return None
    context = np.stack([np.asarray(rows[rid][2], dtype=np.float64) for rid in top if rid in rows])
    return LatestRequest(pool, {rid: rows[rid] for rid in top if rid in rows}, context)


class OwnVectors(TextLRU):
    """The own-text vectors the ``latest`` stage embedded, by text: at most ``size``, the least recently used out
    first. A text's vector depends only on the text and the embedder, so nothing a write does makes one stale.
    Safe to share between threads."""

    def __init__(self, size: int = REMEMBERED) -> None:
        super().__init__(size)

    def put(self, texts: Sequence[str], values: Sequence[np.ndarray] | np.ndarray) -> None:
        """Remember ``values[i]`` (a list of vectors or one matrix) as the vector of ``texts[i]`` (a float32 copy)."""
        super().put(texts, [v.copy() for v in np.asarray(values, dtype=np.float32)])


_MEMOS: dict[int, tuple[weakref.ref[Any], OwnVectors]] = {}
_MEMOS_LOCK = threading.Lock()


def own_vectors(embedder: Any) -> OwnVectors | None:
    """The :class:`OwnVectors` of ``embedder`` (the embedder a guard wraps, when it is one): one per embedder object
    for as long as it lives, so an agent that asks about the same memories again embeds nothing more. ``None`` for an
    embedder that cannot be weakly referenced (nothing is remembered for it)."""
    inner = getattr(embedder, "guarded_embedder", embedder)
    key = id(inner)
    with _MEMOS_LOCK:
        entry = _MEMOS.get(key)
        if entry is not None and entry[0]() is inner:
            return entry[1]

        def forget(ref: weakref.ref[Any], key: int = key) -> None:  # the embedder is gone: so is its memo
            if _MEMOS.get(key, (None,))[0] is ref:
                _MEMOS.pop(key, None)

        try:
            ref = weakref.ref(inner, forget)
        except TypeError:
            return None
        memo = OwnVectors()
        _MEMOS[key] = (ref, memo)
        return memo


def same_subject(own: np.ndarray, context: np.ndarray, containment: np.ndarray | None = None) -> np.ndarray:
    """The pairwise same-subject similarity of a group's hits (see the module docstring): the cosine of their ``own``
    vectors once the direction of ``context``'s mean is taken out (when it holds :data:`CONTEXT` vectors), plus the
    mean of ``containment[a, b]`` and ``[b, a]`` (the share of hit ``a``'s IDF-weighted words hit ``b`` holds). The
    diagonal is ``-inf``."""
    v = np.asarray(own, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    context = np.asarray(context, dtype=np.float64)
    mean = context.mean(axis=0) if len(context) >= CONTEXT else np.zeros(v.shape[1])
    norm = float(np.linalg.norm(mean))
    if norm > 0:  # fewer candidates (a small thread): their mean is mostly the pair itself, so nothing is taken out
        shared = mean / norm
        v = v - np.outer(v @ shared, shared)
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    sim = v @ v.T
    if containment is not None:
        sim = sim + (containment + containment.T) / 2.0
    np.fill_diagonal(sim, -np.inf)
    return sim


def _before(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a < b


def subjects(sim: np.ndarray, threshold: float, times: Sequence[float | None] | None = None) -> list[list[int]]:
    """The groups of hits about one subject, from :func:`same_subject`'s masked similarity ``sim``: two hits that
    are each other's nearest neighbour with a similarity of at least ``threshold``, and each other hit whose nearest
    neighbour is one of them, at least as similar (a fact changed twice: the first statement's nearest may be the
    second while the second and the third are each other's, or the other way round). With ``times``, a hit said after
    either of the pair joins only when it is that similar to both: it will pass them, and a later statement like one
    of them by chance must not. Each hit is in at most one group; groups in order of their first hit."""
    n = len(sim)
    if n < 2:
        return []
    nearest = sim.argmax(axis=1)
    group: dict[int, int] = {}
    out: list[list[int]] = []
    for a in range(n):
        b = int(nearest[a])
        if b > a and int(nearest[b]) == a and sim[a, b] >= threshold:
            group[a] = group[b] = len(out)
            out.append([a, b])
    pairs = [list(g) for g in out]
    for a in range(n):
        b = int(nearest[a])
        if a in group or b not in group or not sim[a, b] >= threshold:
            continue
        pair = pairs[group[b]]
        if times is not None and times[a] is None:
            continue  # a hit without a time is neither earlier nor later
        later = times is not None and any(_before(times[a], times[m]) is not True for m in pair)
        if later and not all(sim[a, m] >= threshold for m in pair):
            continue  # it would pass them on a likeness to one of them
        out[group[b]].append(a)
        group[a] = group[b]
    return [sorted(g) for g in out]


def latest_first(
    c: Any,
    k: int,
    request: LatestRequest,
    own: np.ndarray,
    coverage: Callable[[str, list[str]], Mapping[str, float]] | None = None,
) -> Any:
    """``c`` with, among its first ``min(k, DEPTH)`` candidates, the statements of each subject (:func:`subjects`) in
    the place of the best-ranked one, the latest first, each with the best score among them (so the scores stay in
    order; see the module docstring). ``request``: :func:`latest_request`'s for ``c``; ``own``: the embeddings
    of its :attr:`~LatestRequest.texts`; ``coverage(text, ids)``: the share of ``text``'s IDF-weighted words each of
    ``ids`` holds (``None``: no lexical index)."""
    k = min(k, DEPTH)
    pool, rows = request.pool, request.rows
    containment = None
    if coverage is not None:
        containment = np.zeros((len(pool), len(pool)))
        for a, rid in enumerate(pool):
            body = str(rows[rid][1].get("body", rows[rid][0]))
            got = coverage(body, pool)
            containment[a] = [float(got.get(other, 0.0)) for other in pool]
    sim = same_subject(own, request.context, containment)
    sources = [_source(rows[rid][1]) for rid in pool]
    stamp = {rid: _epoch(rows[rid][1]) for rid in pool}
    for a in range(len(pool)):
        for b in range(len(pool)):
            ta, tb = stamp[pool[a]], stamp[pool[b]]
            if sources[a] != sources[b] or ta is None or tb is None or ta == tb:
                sim[a, b] = -np.inf  # a statement restates its own source's, said at another (known) time
    order = [rid for rid, _ in c.ranked]
    lifted = getattr(c, "lifted", {}) or {}
    shares: dict[str, str] = {}
    score = dict(c.ranked)
    for members in subjects(sim, SAME_SUBJECT, [stamp[rid] for rid in pool]):
        ids = [pool[m] for m in members]
        ranked = sorted(ids, key=order.index)
        latest = sorted(ranked, key=lambda rid: (-(stamp[rid] or 0.0), order.index(rid)))  # every member has a time
        if latest == ranked:
            continue  # already the latest first
        top = ranked[0]
        at = order.index(top)
        if at > 0 and lifted.get(order[at - 1]) == top:  # keep a lifted answer right above its question
            at -= 1
        order = [rid for rid in order if rid not in set(ids)]
        order[at:at] = latest
        best = max(score[rid] for rid in ids)
        for rid in latest:
            if rid != top and latest.index(rid) < ranked.index(rid):  # moved up: it restates ``top``
                shares[rid] = top
            score[rid] = best  # together in ``top``'s place: above any hit that scored below ``top``
    if not shares:
        return c
    return replace(c, ranked=[(rid, score[rid]) for rid in order], lifted={**lifted, **shares})
