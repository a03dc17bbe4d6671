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
place whatever its age.

**In an agent's memory** (``user_first``, on by default: a thread where the assistant speaks), the user's statements
are the facts, and the assistant's words about them (its echoes, its answers to "Where do I work now?") are not
evidence: they may be wrong or out of date. There a changed fact is often stated in other words than the question
("I accepted a job at Globex" for "Where do I work now?", against "I work as a data analyst at Acme Corp") and ranks
below the group, where the rule above cannot see it. So for a part that asks (in any tense: a user asking their
assistant "Which city did I move to?" wants the present; not a part that asks for an earlier state,
:func:`asks_then`) the stage also, in this order:

* **a recency prior** (:func:`recency_prior`): of the group's first hits ranked nearly alike (within :data:`RECENCY`
  of their score range), the newer first; a hit well above another keeps its place, and the group keeps its hits;
* **reaches beyond the group**: each statement of the user among the part's first :data:`REACH` candidates said
  after the group's earliest statement of the user is embedded too (its own text, in the same request, with the
  part's), and joins the subject of the group's statement it is most like, said before it, when their similarity is
  at least :data:`SAME_SUBJECT`, or at least :data:`REACH_SUBJECT` and it answers the part at least as well (its
  own-text cosine with the part); it enters the group in that statement's place, the latest first
  (:func:`_reached_subjects`). A reached statement that restates none of the group's stays out;
* **the user's word above the assistant's** (:func:`user_above_assistant`): a statement of the user moves above the
  assistant's words about the same subject that rank above it (alike as above: :data:`SAME_SUBJECT`, or
  :data:`REACH_SUBJECT` and answering the part at least as well), with the run it belongs to (a subject's statements;
  a question and the assistant's reply under it, :mod:`.answers`, move as one).

A statement reached and joined to a subject takes the place, score, floor and (at least) relevance of the one it
restates (``lifted``); a statement moved above the assistant's words takes the place, score and (at least) relevance
of the first hit it passed and faces the floor on its own (``passed``). Threads
without an assistant (LoCoMo's speakers, documents) are unchanged by it, and so is a part that names one of the
thread's speakers (:mod:`.speakers` puts that speaker's words first). Measured on LongMemEval's knowledge-update
questions and on :mod:`ctxret.evaluation.agent_history`'s realistic agent histories (BENCHMARKS, "The current fact
first in an agent's memory").

The search runs it as its ``latest`` stage (:mod:`.executor`): on the clock under a deadline,
and skipped (the group keeps its order) when the search has no embedder or no time left. The stage remembers the
own-text vectors it embedded (:func:`own_vectors`: the most recently used, :data:`REMEMBERED` bytes per embedder), so
a search that meets the same hits again embeds nothing; an agent's memory writing in the background embeds the texts
it stores there ahead of the searches (``ctxret.agent_memory``), so a recall in a live loop embeds only its part.
Measured on the ``updates``
query set (:mod:`ctxret.evaluation.updates`: 150 controlled update threads on LoCoMo dev) and on LoCoMo's facts and
questions.
"""

from __future__ import annotations

import functools
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._lru import TextLRU
from ..storage.base import Deferred
from .speakers import SPEAKER_KEY, SPEAKING, named_speaker
from .split.asking import asks
from .split.units import cut_units

__all__ = [
    "CONTEXT",
    "DEPTH",
    "REACH",
    "REACH_SUBJECT",
    "RECENCY",
    "REMEMBERED",
    "SAME_SUBJECT",
    "LatestRequest",
    "OwnVectors",
    "agent_memory",
    "asks_now",
    "asks_then",
    "latest_first",
    "latest_request",
    "may_restate",
    "own_vectors",
    "recency_prior",
    "request_ids",
    "same_subject",
    "states",
    "subjects",
    "user_above_assistant",
]

#: The part's first candidates whose mean stored vector gives the direction taken out before two hits are compared.
CONTEXT = 20
#: The most hits of a group the rule compares (its first ``min(k, DEPTH)``): what was measured (``k=5``), and a bound on
#: the texts the ``latest`` stage embeds whatever ``k`` a search asks for.
DEPTH = 5
#: Two hits are about the same subject when their similarity (own-text cosine with the shared direction taken out,
#: plus mean lexical containment) is at least this, and each is the other's nearest neighbour among the group's hits.
SAME_SUBJECT = 0.5
#: In an agent's memory (``user_first``), how many of a part's first candidates the stage reads for the user's later
#: statements of a subject its group holds (a changed fact worded unlike the question ranks below the group), and
#: over how many of them the recency prior runs.
REACH = 10
#: A statement of the user reached beyond the group joins an earlier one of the group's, of its subject, when their
#: similarity (as :data:`SAME_SUBJECT`) is at least :data:`SAME_SUBJECT`, or at least this and the later statement's
#: own text answers the part at least as well as the earlier one's ("I accepted a job at Globex" for "Where do I work
#: now?", against "I work as a data analyst at Acme Corp": other words, one question).
REACH_SUBJECT = 0.1
#: The recency prior of a part about the present in an agent's memory (:func:`recency_prior`): a share of the score
#: range of the group's first hits.
RECENCY = 0.05
#: How many bytes of own-text vectors the ``latest`` stage remembers per embedder (:func:`own_vectors`): 64 MiB,
#: about 43,000 texts at 384 dimensions (the pieces of some 20,000 exchanges of an agent's memory), 11,000 at 1,536.
REMEMBERED = 64 * 2**20

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

#: Words that ask for an earlier state ("What was my first car?", "Where did I work before?"): the user's latest
#: statement is not what such a part wants.
_THEN = re.compile(
    r"\b(?:first|originally|initially|previous|previously|used to|before|earlier|former|formerly|ago|back then|"
    r"at the time|at first|old)\b"
)

Fetch = Callable[[list[str]], Mapping[str, tuple[str, Mapping[str, Any], Any]]]


def asks_then(part: str) -> bool:
    """Whether ``part`` asks for an earlier state ("What was my first car?", "Where did I live before?", "... two
    years ago?"): a question or request with a word of the past state in it."""
    if not asks(part):
        return False
    return bool(_THEN.search(" ".join(part.lower().replace("\u2019", "'").split())))


@functools.lru_cache(maxsize=4096)
def states(text: str) -> bool:
    """Whether a stored text states something: one of its sentences neither asks nor requests ("I'm allergic to
    peanuts" in "Can you suggest a dinner? I'm allergic to peanuts."). A question alone states nothing."""
    return any(not asks(u.text) for u in cut_units(text) if u.text.strip())


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
    """A group that may hold a changed fact: its first ``k`` hits that were read and, in an agent's memory, the user's
    later statements reached beyond them (``pool``: the group's first, then the reached), their stored rows (``rows``:
    id -> ``(document, metadata, vector)``) and the stored vectors of its first :data:`CONTEXT` hits. :attr:`texts`
    are what the search embeds for it: the pool's texts, then the part's when a statement was reached (``part``)."""

    pool: list[str]
    rows: Mapping[str, tuple[str, Mapping[str, Any], Any]]
    context: np.ndarray
    head: int | None = None  # how many of ``pool`` are the group's first hits (None: all)
    part: str | None = None  # the part, embedded too when statements were reached (they must answer it)
    user_first: bool = False  # the user's statements above the assistant's of the same subject
    now: bool = True  # the part asks about now: the later of a source's statements of a subject first

    @property
    def texts(self) -> list[str]:
        """The pool's stored texts, in order (each is embedded alone), then the part's when it is needed."""
        texts = [str(self.rows[rid][0]) for rid in self.pool]
        return texts if self.part is None else [*texts, self.part]


def _epoch(meta: Any) -> float | None:
    if isinstance(meta, Deferred) or not isinstance(meta, Mapping):
        return None
    value = meta.get("ts_epoch")
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _source(meta: Any) -> Any:
    """Who said a hit: its kind and name (the user and the assistant of an agent are two sources, names or not)."""
    return (meta.get("source_kind"), meta.get("source_name")) if isinstance(meta, Mapping) else None


def _kind(meta: Any) -> Any:
    return meta.get("source_kind") if isinstance(meta, Mapping) and not isinstance(meta, Deferred) else None


def _body(row: tuple[Any, ...]) -> str:
    meta = row[1]
    return str(meta.get("body", row[0])) if isinstance(meta, Mapping) else str(row[0])


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


def _user_statement(row: tuple[Any, ...]) -> bool:
    """A user's message that states something, with a time."""
    return _kind(row[1]) == "user" and _epoch(row[1]) is not None and states(_body(row))


def agent_memory(metas: Sequence[Any]) -> bool:
    """Whether hits with ``metas`` come from an agent's memory: the assistant speaks among them."""
    return any(_kind(m) == "assistant" for m in metas)


def _users_part(part: str, metas: Sequence[Any]) -> bool:
    """Whether ``part``, searched over hits with ``metas``, is the user's question to their agent: the assistant speaks
    among the hits and the part names none of their speakers (a part that names one is about that speaker, whose
    own words come first: :mod:`.speakers`)."""
    if not agent_memory(metas):
        return False
    names = [m.get(SPEAKER_KEY) for m in metas if _kind(m) in SPEAKING]
    return named_speaker(part, [n for n in names if isinstance(n, str)]) is None


def _reaches(c: Any, k: int) -> bool:
    """Whether ``user_first`` may reach beyond ``c``'s first ``k`` hits for the user's later statements: the part asks
    (not for an earlier state) over an agent's memory and its first hits hold a statement of the user."""
    if asks_then(c.part):
        return False
    infos = [c.info.get(rid) for rid, _ in c.ranked[:REACH]]
    metas = [info[1] if info else None for info in infos]
    return _users_part(c.part, metas) and any(info and _user_statement(info) for info in infos[:k])


def _assistant_above_user(c: Any, k: int) -> bool:
    """Whether ``c``'s first ``k`` hits hold an assistant's words above a user's statement (``user_first``)."""
    seen = False
    for rid, _ in c.ranked[:k]:
        info = c.info.get(rid)
        if info is None:
            continue
        if _kind(info[1]) == "assistant":
            seen = True
        elif seen and _user_statement(info):
            return True
    return False


def may_restate(c: Any, k: int, user_first: bool = False) -> bool:
    """Whether :func:`latest_request` may find work in ``c`` (a part's ranked :class:`~.search.PartCandidates`): the
    part asks about now, and its first ``k`` hits' metadata shows two statements of one source at different times, or
    is not read yet (an unscoped store defers it); with ``user_first``, in an agent's memory, the part asks (not for
    an earlier state) and a statement of the user is among its first hits. Reads nothing."""
    k = min(k, DEPTH)
    if len(c.ranked) < 2 or k < 2 or not asks(c.part):
        return False
    metas = [c.info[rid][1] if rid in c.info else None for rid, _ in c.ranked[:k]]
    if any(isinstance(m, Deferred) for m in metas):
        return asks_now(c.part)
    if asks_now(c.part) and _restated(metas):
        return True
    if not user_first:
        return False
    if _reaches(c, k):
        return True
    metas = [c.info[rid][1] if rid in c.info else None for rid, _ in c.ranked[:REACH]]
    return _users_part(c.part, metas) and _assistant_above_user(c, k)


def request_ids(c: Any, k: int, user_first: bool = False) -> list[str]:
    """The ids whose stored rows :func:`latest_request` reads for ``c``: its first :data:`CONTEXT` candidates (the
    first ``min(k, DEPTH)`` among them), and its first :data:`REACH` with ``user_first`` in an agent's memory."""
    depth = max(min(k, DEPTH), CONTEXT)
    if user_first and _reaches(c, min(k, DEPTH)):
        depth = max(depth, REACH)
    return [rid for rid, _ in c.ranked[:depth]]


def latest_request(c: Any, k: int, fetch: Fetch, user_first: bool = False) -> LatestRequest | None:
    """The :class:`LatestRequest` of ``c`` (a part's ranked :class:`~.search.PartCandidates`), or ``None`` when the
    rule cannot move anything (see :func:`may_restate`). ``fetch(ids)`` reads stored ``(document, metadata,
    vector)`` rows (only when needed; rows of other ids in its answer are ignored, so one read may serve every part).
    With ``user_first``, the user's statements among the first :data:`REACH` candidates said after the group's
    earliest statement of the user join the pool."""
    if not may_restate(c, k, user_first):
        return None
    k = min(k, DEPTH)
    top = request_ids(c, k, user_first)
    rows = fetch(top)
    pool = [rid for rid in top[:k] if rid in rows]
    if len(pool) < 2:
        return None
    reached: list[str] = []
    mine = user_first and _users_part(c.part, [rows[rid][1] for rid in top[:REACH] if rid in rows])
    if mine and not asks_then(c.part):
        stamps = [_epoch(rows[rid][1]) for rid in pool if _user_statement(rows[rid])]
        first = min((t for t in stamps if t is not None), default=None)
        if first is not None:
            reached = [
                rid
                for rid in top[k:REACH]
                if rid in rows and _user_statement(rows[rid]) and (_epoch(rows[rid][1]) or 0.0) > first
            ]
    now = asks_now(c.part) or (mine and not asks_then(c.part))  # an agent's user asks about their present
    later = now and _restated([rows[rid][1] for rid in pool])
    if not later and not reached and not (mine and _assistant_above_user(c, k)):
        return None
    context = np.stack([np.asarray(rows[rid][2], dtype=np.float64) for rid in top[:CONTEXT] if rid in rows])
    return LatestRequest(
        [*pool, *reached],
        {rid: rows[rid] for rid in top if rid in rows},
        context,
        head=len(pool),
        part=c.part if mine else None,
        user_first=mine,
        now=now,
    )


class OwnVectors(TextLRU):
    """The own-text vectors the ``latest`` stage embedded, by text: at most ``size`` bytes of them, the least recently
    used out first. A text's vector depends only on the text and the embedder, so nothing a write does makes one stale.
    Safe to share between threads."""

    def __init__(self, size: int = REMEMBERED) -> None:
        super().__init__(size, weigh=lambda v: int(v.nbytes))

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


def recency_prior(c: Any, depth: int, weight: float = RECENCY) -> Any:
    """``c`` with its first ``depth`` candidates re-ordered by their score plus ``weight`` times the score range among
    them times their time's place between the oldest and the newest of them (0 to 1; a candidate without a time gets
    0): of hits ranked nearly alike the newer comes first, a hit well above another keeps its place. The scores stay
    where they were (the hit now ranked ``i``-th takes the ``i``-th score, so they stay in order)."""
    head = list(c.ranked[:depth])
    stamps = [_epoch(c.info[rid][1]) if rid in c.info else None for rid, _ in head]
    known = [t for t in stamps if t is not None]
    if len(head) < 2 or len(known) < 2 or max(known) == min(known):
        return c
    lo, hi = min(known), max(known)
    spread = float(head[0][1]) - float(head[-1][1])
    bonus = [0.0 if t is None else weight * spread * (t - lo) / (hi - lo) for t in stamps]
    order = sorted(range(len(head)), key=lambda i: (-(float(head[i][1]) + bonus[i]), i))
    if order == list(range(len(head))):
        return c
    ranked = [(head[i][0], head[at][1]) for at, i in enumerate(order)]
    return replace(c, ranked=ranked + list(c.ranked[depth:]))


def _reached_subjects(
    groups: list[list[int]],
    sim: np.ndarray,
    head: int,
    stamps: Sequence[float | None],
    answers: np.ndarray,
    stated: Sequence[bool],
) -> list[list[int]]:
    """``groups`` (subjects among the group's first hits) with each statement reached beyond them (``head`` on) joined
    to the group's hit it is most like among those of its source said before it: when their similarity is at least
    :data:`SAME_SUBJECT`, or at least :data:`REACH_SUBJECT` and the reached statement answers the part at least as
    well (``answers``: each one's own-text cosine with the part)."""
    groups = [list(g) for g in groups]
    member = {m: gi for gi, g in enumerate(groups) for m in g}
    for e in range(head, len(sim)):
        te = stamps[e]
        like = [
            h
            for h in range(head)
            if te is not None
            and _before(stamps[h], te)
            and stated[h]
            and np.isfinite(sim[e, h])
            and (sim[e, h] >= SAME_SUBJECT or (sim[e, h] >= REACH_SUBJECT and answers[e] >= answers[h]))
        ]
        if not like:
            continue
        h = max(like, key=lambda m: sim[e, m])
        if h not in member:
            member[h] = len(groups)
            groups.append([h])
        groups[member[h]].append(e)
        member[e] = member[h]
    return groups


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
    ``ids`` holds (``None``: no lexical index). With ``request.user_first`` (an agent's memory), the user's statements
    reached beyond the first hits join the subject of the first hits' they restate, and a user's statement then moves
    above the assistant's words of the same subject (:func:`user_above_assistant`)."""
    if request.user_first and request.now:
        c = recency_prior(c, min(k, REACH))  # before the moves: they decide, not the prior
    pool, rows = request.pool, request.rows
    n = len(pool)
    head = n if request.head is None else request.head
    own = np.asarray(own, dtype=np.float64)
    part = own[n] if len(own) > n else None
    own = own[:n]
    containment = None
    if coverage is not None:
        containment = np.zeros((n, n))
        for a, rid in enumerate(pool):
            got = coverage(_body(rows[rid]), pool)
            containment[a] = [float(got.get(other, 0.0)) for other in pool]
    alike = same_subject(own, request.context, containment)
    sim = alike.copy()
    sources = [_source(rows[rid][1]) for rid in pool]
    stamps = [_epoch(rows[rid][1]) for rid in pool]
    for a in range(n):
        for b in range(n):
            ta, tb = stamps[a], stamps[b]
            if sources[a] != sources[b] or ta is None or tb is None or ta == tb:
                sim[a, b] = -np.inf  # a statement restates its own source's, said at another (known) time
    sim[head:, head:] = -np.inf  # a statement reached beyond the group restates one of the group's
    groups = subjects(sim[:head, :head], SAME_SUBJECT, stamps[:head]) if request.now else []
    if head < n and part is not None:
        unit = own / np.maximum(np.linalg.norm(own, axis=1, keepdims=True), 1e-12)
        answers = unit @ (part / max(float(np.linalg.norm(part)), 1e-12))
        stated = [_user_statement(rows[rid]) for rid in pool]
        groups = _reached_subjects(groups, sim, head, stamps, answers, stated)
    order = [rid for rid, _ in c.ranked]
    lifted = getattr(c, "lifted", {}) or {}
    shares: dict[str, str] = {}
    score = dict(c.ranked)
    blocks: list[list[str]] = []
    for members in groups:
        ids = [pool[m] for m in members]
        ranked = sorted(ids, key=order.index)
        latest = sorted(ranked, key=lambda rid: (-(stamps[pool.index(rid)] or 0.0), order.index(rid)))
        if latest == ranked:
            continue  # already the latest first
        top = ranked[0]
        at = order.index(top)
        if at > 0 and lifted.get(order[at - 1]) == top:  # keep a lifted answer right above its question
            at -= 1
        order = [rid for rid in order if rid not in set(ids)]
        order[at:at] = latest
        blocks.append(latest)
        best = max(score[rid] for rid in ids)
        for rid in latest:
            if rid != top and latest.index(rid) < ranked.index(rid):  # moved up: it restates ``top``
                shares[rid] = top
            score[rid] = best  # together in ``top``'s place: above any hit that scored below ``top``
    out = c
    if shares:
        out = replace(c, ranked=[(rid, score[rid]) for rid in order], lifted={**lifted, **shares})
    if request.user_first:
        answers = None
        if part is not None:
            unit = own / np.maximum(np.linalg.norm(own, axis=1, keepdims=True), 1e-12)
            answers = unit @ (part / max(float(np.linalg.norm(part)), 1e-12))
        same = {
            (pool[a], pool[b])
            for a in range(n)
            for b in range(n)
            if a != b
            and (
                alike[a, b] >= SAME_SUBJECT
                or (alike[a, b] >= REACH_SUBJECT and answers is not None and answers[b] >= answers[a])
            )
        }
        out = user_above_assistant(out, rows, same, blocks)
    return out


def _units(c: Any, blocks: Sequence[Sequence[str]]) -> list[list[str]]:
    """``c``'s ranking cut into the runs that move as one: a lifted answer and its question, a question and the
    assistant's reply under it, a subject's statements the latest stage put together (``blocks``)."""
    block = {rid: i for i, b in enumerate(blocks) for rid in b}
    lifted = getattr(c, "lifted", {}) or {}
    follows = getattr(c, "follows", {}) or {}
    units: list[list[str]] = []
    for i, (rid, _) in enumerate(c.ranked):
        prev = c.ranked[i - 1][0] if i else None
        joined = prev is not None and (
            lifted.get(prev) == rid or follows.get(rid) == prev or (rid in block and block.get(prev) == block[rid])
        )
        if joined:
            units[-1].append(rid)
        else:
            units.append([rid])
    return units


def user_above_assistant(
    c: Any,
    rows: Mapping[str, tuple[str, Mapping[str, Any], Any]],
    same: set[tuple[str, str]],
    blocks: Sequence[Sequence[str]] = (),
) -> Any:
    """``c`` with each statement of the user (among ``rows``) moved, with the run it belongs to (:func:`_units`),
    above the first run of the assistant's words about the same subject (``same``: the pairs of ids alike enough) that
    ranks above it and holds no statement of the user: an agent's own echo or answer never outranks what the user
    said (it may be wrong, or out of date). A moved run takes that run's first hit's score and (at least) its relevance
    (``passed``), and faces the floor on its own: a statement far from the part is no answer for being the user's."""
    units = _units(c, blocks)
    score = dict(c.ranked)
    moved_up: dict[str, str] = {}

    def user_said(rid: str) -> bool:
        return rid in rows and _user_statement(rows[rid])

    def assistant_said(rid: str) -> bool:
        return rid in rows and _kind(rows[rid][1]) == "assistant"

    j = 0
    while j < len(units):
        mine = [rid for rid in units[j] if user_said(rid)]
        target = None
        if mine:
            for i in range(j):
                theirs = [rid for rid in units[i] if assistant_said(rid)]
                if (
                    theirs
                    and not any(user_said(rid) for rid in units[i])
                    and any((a, u) in same for a in theirs for u in mine)
                ):
                    target = i
                    break
        if target is None:
            j += 1
            continue
        moved = units.pop(j)
        above = units[target][0]
        for rid in moved:
            score[rid] = score[above]
            moved_up[rid] = above
        units.insert(target, moved)
        j += 1
    if not moved_up:
        return c
    ranked = [(rid, score[rid]) for u in units for rid in u]
    return replace(c, ranked=ranked, passed={**(getattr(c, "passed", {}) or {}), **moved_up})
