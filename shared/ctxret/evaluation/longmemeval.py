"""LongMemEval in the harness: each question's history written the way an agent writes it, asked at its own date.

LongMemEval (Wu et al., 2024; the *S* setting: ~48 timestamped sessions per question) gives each question its own
chat history. ``ctxret eval longmemeval FILE`` meets it as an agent would:

* **Written one session per call.** The sessions are written in time order, one ``add_messages`` call each, into a
  real :class:`~ctxret.ContextualIndex` (one thread per question), every message with its session's date as its time
  and ``<session id>/<n>`` as its id. The store is an embedded folder under ``--cache``: a later run opens it and
  finds every message stored already (nothing is embedded again), so the cache is the product's own store.
* **Asked at its date.** ``index.search(question, k=depth, thread_id=..., now=question_date)`` with the product's
  defaults (the floor, hybrid fusion, time windows); the scored group is the best one (its top hit scores highest, as
  in the thread protocol). Sessions are ranked by their first hit, messages (the paper's turns) likewise.

Metrics (the paper's, ``src/retrieval/eval_utils.py``): **recall_all@k** (every evidence session in the top k
sessions), **recall_any@k** and **ndcg_any@k** (binary relevance, over the ranking with each session once), at k = 5
and 10, for sessions and for turns; abstention questions (``_abs``) are skipped. Evidence: the ``answer_*`` sessions
with a turn marked ``has_answer`` (turns: those turns). The paper counts marked *user* turns only, its keys being user
turns; the single-session-assistant questions, whose evidence is what the assistant said, would then have none (12 of
the 15 in the dev part), so they are scored on their marked assistant turns here.

Peers, on the same questions in the same run:

* ``paper_bm25``: the paper's flat BM25 (rank_bm25's ``BM25Okapi``, k1 1.5, b 0.75, epsilon 0.25; whitespace tokens)
  over each session's user turns joined (sessions), and over user turns (turns);
* ``peer_bm25s``: BM25 done well — LlamaIndex's ``BM25Retriever`` (bm25s, English stemmer and stopwords;
  :class:`.peers.BM25sPeer`) over the very pieces ctxret stored, sessions and turns ranked by their first piece.

Each system against each peer is compared paired per question, with a 95% interval (normal, and a bootstrap
within question types), overall and per question type.

**The latest fact first on real updates.** ``ctxret_no_latest`` is the same search with ``latest_first=False`` and
``ctxret_no_user`` with ``user_first=False``, each paired against the default. ``latest_first`` is scored for
questions with two or more evidence sessions (in ``knowledge-update`` questions, the fact as first said and as it
changed): 1 when the latest evidence session is in the top 5 sessions and ranks above every earlier evidence session
that is ranked; ``newer_first`` (the fact as it changed above the fact as first said, at any depth: the newer evidence
session is ranked, above every earlier one, one not ranked counting as below it) is scored for the peers too, so the
default is paired against bm25s and the paper's BM25 on it.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..embedders.base import Embedder
from ..errors import InputError
from .metrics import mean
from .peers import BM25sPeer
from .stats import compare

__all__ = ["LME_SYSTEMS", "LMEQuestion", "LMEResult", "BM25Okapi", "load_longmemeval", "run_longmemeval"]

LME_SYSTEMS = ("ctxret_default", "ctxret_parts", "ctxret_no_latest", "ctxret_no_user", "paper_bm25", "peer_bm25s")
#: The default paired against itself with one ranking step off: the latest fact first (``latest_first=False``, the
#: ``user_first`` step with it) and the user's own word first (``user_first=False``).
ABLATIONS = {"ctxret_no_latest": {"latest_first": False}, "ctxret_no_user": {"user_first": False}}
#: The product's two readings: its best group alone (as the thread protocol scores), and every part's group rank by
#: rank (each part's first hit, then each part's second, ...: the order the memory text gives the model, as
#: ``render_groups`` and the agent middleware spend their budget).
CTXRET_SYSTEMS = ("ctxret_default", "ctxret_parts")
#: The metrics the default is compared on against each of :data:`ABLATIONS` (one ranking step turned off).
LATEST_METRICS = ("newer_first", "latest_first", "recall_all@5", "recall_all@10", "ndcg_any@5", "turn_ndcg_any@5")
PEERS = ("paper_bm25", "peer_bm25s")
#: The metrics each ctxret system is compared on against each peer (and, for questions with two or more evidence
#: sessions, ``newer_first`` and ``latest_first``).
PEER_METRICS = ("recall_all@5", "recall_all@10", "ndcg_any@5", "ndcg_any@10", "turn_recall_all@5")
KS = (5, 10)
_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\(\w+\))?\s*(\d{1,2}):(\d{2})")


@dataclass
class LMEQuestion:
    id: str
    type: str
    question: str
    date: datetime
    sessions: list[tuple[str, datetime, list[dict[str, Any]]]]  # (session id, date, turns), in time order
    evidence_sessions: frozenset[str]
    evidence_turns: frozenset[str]  # "<session id>/<n>" of the turns marked has_answer

    @property
    def abstention(self) -> bool:
        return self.id.endswith("_abs")


@dataclass
class LMEResult:
    rows: list[dict[str, Any]]
    config: dict[str, Any]
    per_query: list[dict[str, Any]] = field(default_factory=list)


def parse_lme_date(value: str) -> datetime:
    """``"2023/05/30 (Tue) 23:40"`` → ``datetime(2023, 5, 30, 23, 40)``."""
    m = _DATE.search(str(value))
    if not m:
        raise InputError(f"cannot read the LongMemEval date {value!r} (expected '2023/05/30 (Tue) 23:40')")
    y, mo, d, h, mi = (int(x) for x in m.groups())
    return datetime(y, mo, d, h, mi)


def load_longmemeval(path: str | Path) -> list[LMEQuestion]:
    """The questions of a LongMemEval file (``.json`` or ``.json.gz``, or a folder holding one)."""
    path = Path(path)
    if path.is_dir():
        found = sorted([*path.glob("*.json.gz"), *path.glob("*.json")])
        if not found:
            raise InputError(f"{path}: no LongMemEval .json or .json.gz file in this folder")
        path = found[0]
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list) or not data or "haystack_sessions" not in data[0]:
        raise InputError(f"{path} is not a LongMemEval file (a list of questions with haystack_sessions)")
    out = []
    for q in data:
        sessions = []
        ev_sessions: set[str] = set()
        ev_turns: set[str] = set()
        for sid, date, turns in zip(
            q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"], strict=True
        ):
            sessions.append((str(sid), parse_lme_date(date), list(turns)))
            marked = [i for i, t in enumerate(turns) if t.get("has_answer")]
            if "answer" in str(sid) and marked:
                ev_sessions.add(str(sid))
                ev_turns.update(f"{sid}/{i}" for i in marked)
        sessions.sort(key=lambda s: s[1])  # as they happened (stable for equal times)
        out.append(
            LMEQuestion(
                str(q["question_id"]),
                str(q["question_type"]),
                str(q["question"]),
                parse_lme_date(q["question_date"]),
                sessions,
                frozenset(ev_sessions),
                frozenset(ev_turns),
            )
        )
    return out


def session_messages(q: LMEQuestion, sid: str, date: datetime, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One session as the messages an agent writes: role and content, the session's time, an id per message."""
    return [
        {"role": t["role"], "content": t.get("content") or "", "timestamp": date.isoformat(), "id": f"{sid}/{i}"}
        for i, t in enumerate(turns)
    ]


class BM25Okapi:
    """rank_bm25's ``BM25Okapi`` (the paper's flat BM25): ``idf = ln(N − n + 0.5) − ln(n + 0.5)``, negative idfs
    replaced by ``epsilon`` × the mean idf; tokens as given (the paper splits on single spaces)."""

    def __init__(self, corpus: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25):
        self.k1, self.b = k1, b
        self.doc_freqs = [Counter(doc) for doc in corpus]
        self.doc_len = np.array([len(doc) for doc in corpus], dtype=np.float64)
        n = len(corpus)
        self.avgdl = float(self.doc_len.sum() / n) if n else 0.0
        nd: Counter = Counter(w for doc in self.doc_freqs for w in doc)
        self.idf: dict[str, float] = {}
        negative = []
        for word, freq in nd.items():
            idf = math.log(n - freq + 0.5) - math.log(freq + 0.5)
            self.idf[word] = idf
            if idf < 0:
                negative.append(word)
        average = sum(self.idf.values()) / len(self.idf) if self.idf else 0.0
        for word in negative:
            self.idf[word] = epsilon * average

    def get_scores(self, query: Sequence[str]) -> np.ndarray:
        score = np.zeros(len(self.doc_freqs))
        for q in query:
            tf = np.array([doc.get(q, 0) for doc in self.doc_freqs], dtype=np.float64)
            norm = self.k1 * (1 - self.b + self.b * self.doc_len / self.avgdl) if self.avgdl else 1.0
            score += self.idf.get(q, 0.0) * (tf * (self.k1 + 1) / (tf + norm))
        return score


def ranking_metrics(ranked: Sequence[str], relevant: frozenset[str], prefix: str) -> dict[str, float]:
    """recall_all / recall_any / ndcg_any at 5 and 10 of a ranking (each item once, best first)."""
    out: dict[str, float] = {}
    if not relevant:
        return out
    for k in KS:
        top = list(ranked[:k])
        out[f"{prefix}recall_all@{k}"] = float(all(r in top for r in relevant))
        out[f"{prefix}recall_any@{k}"] = float(any(r in top for r in relevant))
        dcg = sum(1.0 / math.log2(i + 2) for i, item in enumerate(top) if item in relevant)
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(relevant), k)))
        out[f"{prefix}ndcg_any@{k}"] = dcg / ideal if ideal else 0.0
    return out


def _first_seen(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))


def run_longmemeval(
    questions: Sequence[LMEQuestion],
    embedder: Embedder,
    *,
    cache: str | Path,
    depth: int = 50,
    limit: int | None = None,
    types: Sequence[str] | None = None,
    per_type: int | None = None,
    progress: bool = False,
) -> LMEResult:
    """Write, ask and score every question (see the module docstring); ``cache``: the folder of the product's store."""
    from ..index import ContextualIndex
    from ..store import Store

    picked = [q for q in questions if not types or q.type in types]
    if per_type:
        seen: Counter = Counter()
        sampled = []
        for q in picked:
            if seen[q.type] < per_type:
                sampled.append(q)
                seen[q.type] += 1
        picked = sampled
    if limit:
        picked = picked[:limit]
    Path(cache).mkdir(parents=True, exist_ok=True)
    index = ContextualIndex(Store.embedded(Path(cache) / "store"), embedder=embedder)
    per_query: list[dict[str, Any]] = []
    counts: Counter = Counter()
    try:
        for qi, q in enumerate(picked):
            written: Counter[str] = Counter()
            for sid, date, turns in q.sessions:  # one call per session, in time order
                res = index.add_messages(session_messages(q, sid, date, turns), thread_id=q.id)
                written["added"] += res.added
                written["duplicates"] += res.duplicates
            counts["questions"] += 1
            counts["sessions"] += len(q.sessions)
            counts["pieces_embedded"] += written["added"]
            if q.abstention:
                counts["abstention (not scored)"] += 1
                continue
            records = list(index.store.records(include=("documents", "metadatas"), scope=_scope(q.id)))
            texts = [r["document"] or "" for r in records]
            msg_of = [_message_id(r["metadata"] or {}) for r in records]
            rows = _score_question(q, index, texts, msg_of, depth)
            per_query.extend(rows)
            if progress:
                got = {r["representation"]: r.get("recall_all@5") for r in rows}
                print(
                    f"[eval longmemeval] {qi + 1}/{len(picked)} {q.id} ({q.type}): {len(records)} pieces "
                    f"({written['added']} embedded now), session recall_all@5 "
                    + ", ".join(f"{k} {v:.0f}" for k, v in got.items() if v is not None),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        index.close()
    return _summarise(per_query, counts, index, depth, picked)


def _scope(thread_id: str) -> Any:
    from ..storage.schema import Scope

    return Scope(thread_id, None)


def _message_id(meta: dict[str, Any]) -> str:
    key = str(meta.get("message_key") or "")
    return key[3:] if key.startswith("id:") else key


def _session(message_id: str) -> str:
    return message_id.rsplit("/", 1)[0]


def _score_question(q: LMEQuestion, index: Any, texts: list[str], msg_of: list[str], depth: int) -> list[dict]:
    base = {"conversation": q.type, "query_set": "longmemeval", "query_id": q.id, "type": q.type}
    out = []
    # ctxret: the product's search, at the question's date
    groups = [g for g in index.search(q.question, k=depth, thread_id=q.id, now=q.date) if g.hits]
    messages: list[str] = []
    if groups:
        best = max(groups, key=lambda g: g.hits[0].score)
        messages = [_message_id(h.stored) for h in best.hits]
    out.append({**base, "representation": "ctxret_default", "empty": float(not groups), **_metrics(q, messages)})
    for name, options in ABLATIONS.items():
        off = [g for g in index.search(q.question, k=depth, thread_id=q.id, now=q.date, **options) if g.hits]
        off_messages = [_message_id(h.stored) for h in max(off, key=lambda g: g.hits[0].score).hits] if off else []
        out.append({**base, "representation": name, "empty": float(not off), **_metrics(q, off_messages)})
    by_rank = [_message_id(g.hits[r].stored) for r in range(depth) for g in groups if r < len(g.hits)]
    out.append({**base, "representation": "ctxret_parts", "empty": float(not groups), **_metrics(q, by_rank)})
    # the paper's flat BM25: sessions (user turns joined) and user turns, whitespace tokens
    sess_ids = [sid for sid, _, _ in q.sessions]
    sess_docs = [
        " ".join(t.get("content") or "" for t in turns if t.get("role") == "user") for _, _, turns in q.sessions
    ]
    order = np.argsort(BM25Okapi([d.split(" ") for d in sess_docs]).get_scores(q.question.split(" ")), kind="stable")[
        ::-1
    ]
    ranked_sessions = [sess_ids[i] for i in order]
    turn_ids = [f"{sid}/{i}" for sid, _, turns in q.sessions for i, t in enumerate(turns) if t.get("role") == "user"]
    turn_docs = [t.get("content") or "" for _, _, turns in q.sessions for t in turns if t.get("role") == "user"]
    order_t = np.argsort(BM25Okapi([d.split(" ") for d in turn_docs]).get_scores(q.question.split(" ")), kind="stable")[
        ::-1
    ]
    paper = {
        **ranking_metrics(ranked_sessions, q.evidence_sessions, ""),
        **ranking_metrics([turn_ids[i] for i in order_t], q.evidence_turns, "turn_"),
    }
    if len(q.evidence_sessions) >= 2:
        paper["latest_first"] = latest_evidence_first(ranked_sessions, q)
        paper["newer_first"] = newer_evidence_first(ranked_sessions, q)
    out.append({**base, "representation": "paper_bm25", **paper})
    # BM25 done well over the pieces ctxret stored
    hits = BM25sPeer(texts).search(q.question)
    out.append({**base, "representation": "peer_bm25s", **_metrics(q, [msg_of[i] for i, _ in hits])})
    return out


def _metrics(q: LMEQuestion, messages: Sequence[str]) -> dict[str, float]:
    sessions = _first_seen([_session(m) for m in messages])
    out = {
        **ranking_metrics(sessions, q.evidence_sessions, ""),
        **ranking_metrics(_first_seen(messages), q.evidence_turns, "turn_"),
    }
    if len(q.evidence_sessions) >= 2:
        out["latest_first"] = latest_evidence_first(sessions, q)
        out["newer_first"] = newer_evidence_first(sessions, q)
    return out


def latest_evidence_first(sessions: Sequence[str], q: LMEQuestion) -> float:
    """1.0 when ``q``'s latest evidence session (by date) is in the top 5 of ``sessions`` and above every earlier
    evidence session ranked there."""
    dated = {sid: date for sid, date, _ in q.sessions}
    latest = max(q.evidence_sessions, key=lambda sid: (dated.get(sid, datetime.min), sid))
    top = list(sessions[:5])
    if latest not in top:
        return 0.0
    at = {sid: i for i, sid in enumerate(sessions)}
    return float(all(at[latest] < at[sid] for sid in q.evidence_sessions if sid != latest and sid in at))


def newer_evidence_first(sessions: Sequence[str], q: LMEQuestion) -> float:
    """1.0 when ``q``'s latest evidence session (by date) is ranked in ``sessions`` above every earlier evidence
    session (one not ranked counts as below it): of the fact as first said and as it changed, the newer comes first.
    Unlike :func:`latest_evidence_first`, at any depth of the ranking."""
    dated = {sid: date for sid, date, _ in q.sessions}
    latest = max(q.evidence_sessions, key=lambda sid: (dated.get(sid, datetime.min), sid))
    at = {sid: i for i, sid in enumerate(sessions)}
    if latest not in at:
        return 0.0
    return float(all(at[latest] < at.get(sid, len(at)) for sid in q.evidence_sessions if sid != latest))


METRICS = tuple(f"{p}{m}@{k}" for p in ("", "turn_") for m in ("recall_all", "ndcg_any") for k in KS)


def _summarise(per_query: list[dict], counts: Counter, index: Any, depth: int, picked: Sequence[LMEQuestion]) -> Any:
    rows = []
    types = sorted({r["type"] for r in per_query})
    for system in LME_SYSTEMS:
        for qtype in ("all", *types):
            vals = [r for r in per_query if r["representation"] == system and qtype in ("all", r["type"])]
            if not vals:
                continue
            row: dict[str, Any] = {"system": system, "type": qtype, "n": len(vals)}
            for m in (*METRICS, "recall_all@5", "recall_any@5", "latest_first", "newer_first"):
                xs = [r[m] for r in vals if m in r]
                if xs:
                    row[m] = mean(xs)
            if system in (*CTXRET_SYSTEMS, *ABLATIONS):
                row["empty"] = mean([r["empty"] for r in vals])
            rows.append(row)
    comparison = []
    by: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in per_query:
        by[r["representation"]][r["query_id"]] = r
    for system in CTXRET_SYSTEMS:
        for peer in PEERS:
            for qtype in ("all", *types):
                mine = {i: r for i, r in by[system].items() if qtype in ("all", r["type"])}
                for metric in (*PEER_METRICS, "newer_first", "latest_first"):
                    cmp = compare(mine, by[peer], metric)
                    if cmp is not None:
                        comparison.append({"system": system, "peer": peer, "query_set": qtype, "metric": metric, **cmp})
    for off in ABLATIONS:
        for qtype in ("all", *types):
            mine = {i: r for i, r in by["ctxret_default"].items() if qtype in ("all", r["type"])}
            for metric in LATEST_METRICS:
                cmp = compare(mine, by[off], metric, changed=True)
                if cmp is not None:
                    pair = {"system": "ctxret_default", "peer": off, "query_set": qtype, "metric": metric}
                    comparison.append({**pair, **cmp})
    config = {
        "harness": "longmemeval",
        "embedder": index.embedder.model_id,
        "depth": depth,
        "counts": dict(counts),
        "types": dict(Counter(q.type for q in picked)),
        "comparison": comparison,
    }
    return LMEResult(rows, config, per_query)
