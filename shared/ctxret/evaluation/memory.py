"""Memory as agents write it: the product's own store, written one session per call, against the same messages in one.

``ctxret eval threads PATH --incremental`` runs this beside the thread protocol. Each conversation becomes the chat
messages an agent would have written (LoCoMo: the first speaker is ``user``, the other ``assistant``, each utterance
one message with its speaker as ``name``, its session's time and its ``dia_id`` as the message ``id``; JSONL threads:
their turns' sources), and is written into a real :class:`~ctxret.ContextualIndex` (an in-memory store) two ways:

* ``one_call``: every message in one ``add_messages`` call;
* ``incremental``: one ``add_messages`` call per session, with that session's messages only (a JSONL thread: one
  call per turn).

The two stores must hold the same pieces (ids, texts, metadata and vectors: ``structure`` in the report). Then every
fact and question is searched with the product's defaults (``index.search(q, k, thread_id=...)``) in both stores and
scored as the thread protocol scores its grouped rows (the best group: the one whose top hit scores highest):
``recall_at_5``, the share of the query's evidence units (utterances) among the group's top k hits, and
``top1_section``, whether the top hit lies in a gold session. The two ways are compared paired per query.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..embedders.base import Embedder
from ..errors import InputError
from .datasets import Conversation, select_queries
from .embedding import cached_embedder
from .metrics import evidence_recall, mean
from .stats import by_query, compare

__all__ = ["MEMORY_MODES", "MemoryResult", "conversation_sessions", "run_memory", "store_snapshot"]

#: The two ways a conversation is written (see the module docstring).
MEMORY_MODES = ("one_call", "incremental")


@dataclass
class MemoryResult:
    rows: list[dict[str, Any]]
    config: dict[str, Any]
    per_query: list[dict[str, Any]] = field(default_factory=list)


def conversation_sessions(conv: Conversation) -> tuple[list[list[dict[str, Any]]], dict[str, tuple[str, int]]]:
    """The conversation as chat messages, one list per session (section), and each message id's
    ``(evidence unit, section)``."""
    sources = [s for t in conv.turns for s in t.sources]
    speakers = all(s.kind == "user" and s.name for s in sources)  # LoCoMo: every utterance a named speaker's
    first = sources[0].name if sources else None
    sessions: list[list[dict[str, Any]]] = []
    where: dict[str, tuple[str, int]] = {}
    for turn in conv.turns:
        messages = []
        for src in turn.sources:
            if speakers:
                role = "user" if src.name == first else "assistant"
            else:
                role = "user" if src.kind == "user" else "assistant"
            mid = f"s{turn.index}.{src.ordinal}"
            where[mid] = (conv.unit_of(turn.index, src.ordinal), turn.index)
            msg: dict[str, Any] = {"role": role, "content": src.text, "id": mid}
            if src.name:
                msg["name"] = src.name
            ts = src.timestamp or turn.timestamp
            if ts is not None:
                msg["timestamp"] = ts.isoformat()
            messages.append(msg)
        sessions.append(messages)
    return sessions, where


def store_snapshot(index: Any, thread_id: str) -> dict[str, tuple[str, tuple[Any, ...], np.ndarray]]:
    """Every piece of a thread: id → (text, metadata items, vector)."""
    out = {}
    recs = index.store.chroma.iter_records({"thread_id": thread_id}, include=("documents", "metadatas", "embeddings"))
    for rec in recs:
        meta = tuple(sorted((rec["metadata"] or {}).items()))
        out[rec["id"]] = (rec["document"] or "", meta, np.asarray(rec["embedding"], dtype=np.float32))
    return out


def _structure(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """How the incremental store ``a`` differs from the one-call store ``b``."""
    shared = a.keys() & b.keys()
    diff = max((float(np.max(np.abs(a[i][2] - b[i][2]))) for i in shared), default=0.0)
    return {
        "pieces": len(a),
        "one_call_pieces": len(b),
        "only_incremental": len(a.keys() - b.keys()),
        "only_one_call": len(b.keys() - a.keys()),
        "text_or_metadata_differ": sum(1 for i in shared if a[i][:2] != b[i][:2]),
        "max_vector_diff": diff,
        "identical": a.keys() == b.keys() and all(a[i][:2] == b[i][:2] for i in shared) and diff < 1e-4,
    }


def run_memory(
    conversations: Sequence[Conversation],
    embedder: Embedder,
    *,
    k: int = 5,
    query_sets: Sequence[str] = ("facts", "qa"),
    limit_conversations: int | None = None,
    limit_queries: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> MemoryResult:
    """Write each conversation both ways into the product's store and search it (see the module docstring)."""
    from ..index import ContextualIndex
    from ..store import Store

    bad = [s for s in query_sets if s not in ("facts", "qa")]
    if bad:
        raise InputError(f"the memory protocol scores facts and qa; got {bad}")
    emb = cached_embedder(embedder)
    convs = list(conversations[:limit_conversations] if limit_conversations else conversations)
    per_query: list[dict[str, Any]] = []
    structure: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = defaultdict(int)
    for ci, conv in enumerate(convs):
        sessions, where = conversation_sessions(conv)
        sets = select_queries(conv, limit_queries, seed)
        snaps = {}
        for mode in MEMORY_MODES:
            index = ContextualIndex(Store.memory(), embedder=emb)
            if mode == "one_call":
                index.add_messages([m for s in sessions for m in s], thread_id=conv.id)
            else:
                for session in sessions:
                    index.add_messages(session, thread_id=conv.id)
            snaps[mode] = store_snapshot(index, conv.id)
            for qs in query_sets:
                for q in sets.get(qs, []):
                    groups = [g for g in index.search(q.text, k=k, thread_id=conv.id) if g.hits]
                    m: dict[str, float] = {"recall": evidence_recall([], q.evidence), "top1_section": 0.0}
                    if groups:
                        best = max(groups, key=lambda g: g.hits[0].score)
                        hits = [where.get(_message_id(h.stored), ("?", -1)) for h in best.hits[:k]]
                        m = {
                            "recall": evidence_recall([{u} for u, _ in hits], q.evidence),
                            "top1_section": 1.0 if hits[0][1] in q.gold else 0.0,
                        }
                    per_query.append(
                        {"conversation": conv.id, "representation": mode, "query_set": qs, "query_id": q.id, **m}
                    )
            index.close()
        structure[conv.id] = _structure(snaps["incremental"], snaps["one_call"])
        counts["conversations"] += 1
        counts["sessions"] += len(sessions)
        counts["messages"] += sum(len(s) for s in sessions)
        counts["pieces"] += len(snaps["one_call"])
        if progress:
            s = structure[conv.id]
            print(
                f"[eval memory] {ci + 1}/{len(convs)} {conv.id}: {len(sessions)} sessions, {s['pieces']} pieces "
                f"(one call: {s['one_call_pieces']}; identical: {s['identical']})",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    recall_key = f"recall_at_{k}"
    for mode in MEMORY_MODES:
        for qs in query_sets:
            vals = [q for q in per_query if q["representation"] == mode and q["query_set"] == qs]
            if not vals:
                continue
            recall = mean([q["recall"] for q in vals if not math.isnan(q["recall"])])
            rows.append(
                {
                    "representation": mode,
                    "query_set": qs,
                    recall_key: recall,
                    "top1_section": mean([q["top1_section"] for q in vals]),
                    "n": len(vals),
                }
            )
    by = by_query(per_query)
    paired = []
    for qs in query_sets:
        for metric in ("recall", "top1_section"):
            mine, theirs = by.get(("incremental", qs)), by.get(("one_call", qs))
            cmp = compare(mine, theirs, metric, changed=True) if mine and theirs else None
            if cmp is not None:
                name = recall_key if metric == "recall" else metric
                paired.append({"system": "incremental", "peer": "one_call", "query_set": qs, "metric": name, **cmp})
    config = {
        "harness": "memory",
        "embedder": emb.model_id,
        "k": k,
        "counts": dict(counts),
        "structure": structure,
        "identical": all(s["identical"] for s in structure.values()),
        "comparison": paired,
    }
    return MemoryResult(rows, config, per_query)


def _message_id(meta: Mapping[str, Any]) -> str:
    key = str(meta.get("message_key") or "")
    return key[3:] if key.startswith("id:") else key
