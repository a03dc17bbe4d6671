"""Two questions in one message against a LangGraph store of facts: ``CtxretStore`` beside ``InMemoryStore``.

A LangGraph memory store holds facts (LangMem's memories). Here the facts are LoCoMo's observations (``session_N_
observation``: "Caroline went to an LGBTQ support group on 7 May"), one item each (``{"content": fact}``) in the
namespace ``("locomo", <conversation>)``; a QA question (categories 1-4) is answered by the facts that cite one of its
evidence utterances (questions with none are left out). Messages join two questions of one conversation whose facts
differ (seeded pairing), and each store is searched with the message, ``limit=2``: **both** is 1 when the top 2
hold a fact of each question. Each question alone is searched too (**hit@1**, **hit@2**: one of its facts in the top
1 / 2), to show where ctxret does not help.

**General queries** (``--general``, on by default): the questions a LangMem-style lookup asks of a user's memories
("user preferences", "What should I cook tonight?", ...: :data:`GENERAL_QUERIES`, none naming a fact's words), each
asked of every conversation's facts with ``limit=5``: **full** is 1 when the store returns 5 items (``InMemoryStore``
always does), **overlap** the share of ``InMemoryStore``'s top 5 among the store's. Their search time is timed in
the same run (median ms per search, each store's searches interleaved).

Stores (the same facts, the same local model): ``InMemoryStore(index={"embed": CtxretEmbeddings(), "fields":
["content"]})`` (one vector per item and per message); ``CtxretStore(index, fields=["content"])`` (the default
search: parts, blend, BM25, the floor, then filled to ``limit`` past it), and the same store with one change each:
``split=False`` (one vector per message), ``lexical=False`` (dense only), ``score_threshold=None`` (no floor at all),
``score_threshold="auto"`` (the product's floor asked for: no fill, what the default was before Dec 6). Paired per
message (or question) against ``InMemoryStore``: normal 95% intervals and a bootstrap within conversations
(``ctxret.evaluation.stats``).

    python benchmarks/bench_store_questions.py ../shared/data/locomo-dev --json benchmarks/results/store_questions.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

SYSTEMS = {
    "ctxret_store": {},
    "ctxret_one_vector": {"split": False},
    "ctxret_dense_only": {"lexical": False},
    "ctxret_no_floor": {"score_threshold": None},
    "ctxret_floor_only": {"score_threshold": "auto"},
}
PEER = "in_memory_store"
#: Questions about a user's memories in general: what a memory tool asks, sharing no fact's words.
GENERAL_QUERIES = (
    "user preferences",
    "What should I cook tonight?",
    "hobbies and interests",
    "What does she enjoy doing?",
    "family",
    "What would be a good gift for them?",
    "Any plans for the weekend?",
    "work and career",
    "How have they been feeling lately?",
    "Tell me something about them.",
    "recent events in their life",
    "pets",
)


def pairs_of(questions: list[Any], gold: dict[str, set[str]], seed: int) -> list[tuple[Any, Any]]:
    """Questions paired two by two (seeded order), skipping a partner whose facts overlap."""
    pool = list(questions)
    random.Random(seed).shuffle(pool)
    out = []
    while len(pool) >= 2:
        a = pool.pop()
        j = next((i for i in range(len(pool) - 1, -1, -1) if not gold[pool[i].id] & gold[a.id]), None)
        if j is None:
            continue
        out.append((a, pool.pop(j)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="the LoCoMo folder (../shared/data/locomo-dev)")
    ap.add_argument("--limit-conversations", type=int, default=None)
    ap.add_argument("--limit-questions", type=int, default=None, help="questions per conversation (default all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-general", dest="general", action="store_false", help="skip the general queries")
    ap.add_argument("--json", default=None, help="write every number here")
    args = ap.parse_args()

    from ctxret import ContextualIndex, Store
    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.datasets import load_locomo
    from ctxret.evaluation.embedding import cached_embedder
    from ctxret.evaluation.stats import by_query, compare
    from langgraph.store.memory import InMemoryStore

    from langchain_ctxret import CtxretEmbeddings, CtxretStore

    emb = cached_embedder(shared_local_embedder())
    convs = [load_locomo(p) for p in sorted(Path(args.path).glob("*.json"))][: args.limit_conversations]
    rows: list[dict[str, Any]] = []
    seconds: dict[str, list[float]] = {}
    counts = {"facts": 0, "questions": 0, "pairs": 0, "two_part_messages": 0}
    started = time.perf_counter()
    for conv in convs:
        ns = ("locomo", conv.id)
        index = ContextualIndex(Store.memory(), embedder=emb, progress=False)
        ours = {name: CtxretStore(index, fields=["content"], search_kwargs=kw) for name, kw in SYSTEMS.items()}
        theirs = InMemoryStore(index={"dims": emb.dims, "embed": CtxretEmbeddings(emb), "fields": ["content"]})
        for store in (ours["ctxret_store"], theirs):
            store.batch([_put(ns, f.id, f.text) for f in conv.facts])
        facts_of = {f.id: set(f.evidence) for f in conv.facts}
        gold = {q.id: {f for f, ev in facts_of.items() if ev & set(q.evidence)} for q in conv.questions}
        questions = [q for q in conv.questions if gold[q.id]][: args.limit_questions]
        pairs = pairs_of(questions, gold, args.seed)
        counts["facts"] += len(conv.facts)
        counts["questions"] += len(questions)
        counts["pairs"] += len(pairs)
        stores = {**ours, PEER: theirs}
        for a, b in pairs:
            message = f"{a.text.strip()} {b.text.strip()}"
            counts["two_part_messages"] += len(index.query_vectors(message)[0]) == 2
            for name, store in stores.items():
                top = [i.key for i in store.search(ns, query=message, limit=2)]
                found = [bool(gold[q.id] & set(top)) for q in (a, b)]
                rows.append(
                    {
                        "conversation": conv.id,
                        "representation": name,
                        "query_set": "pairs",
                        "query_id": f"{a.id}+{b.id}",
                        "both": float(all(found)),
                        "share": sum(found) / 2,
                    }
                )
        if args.general:
            for j, q in enumerate(GENERAL_QUERIES):
                order = list(stores.items()) if j % 2 == 0 else list(stores.items())[::-1]
                found: dict[str, list[str]] = {}
                for name, store in order:
                    t0 = time.perf_counter()
                    found[name] = [i.key for i in store.search(ns, query=q, limit=5)]
                    seconds.setdefault(name, []).append(time.perf_counter() - t0)
                for name in stores:
                    rows.append(
                        {
                            "conversation": conv.id,
                            "representation": name,
                            "query_set": "general",
                            "query_id": f"{conv.id}:{j}",
                            "full": float(len(found[name]) == 5),
                            "overlap": len(set(found[name]) & set(found[PEER])) / max(1, len(found[PEER])),
                        }
                    )
        for q in questions:
            for name in ("ctxret_store", "ctxret_floor_only", PEER):
                top = [i.key for i in stores[name].search(ns, query=q.text, limit=2)]
                rows.append(
                    {
                        "conversation": conv.id,
                        "representation": name,
                        "query_set": "single",
                        "query_id": q.id,
                        "hit_at_1": float(bool(top[:1] and top[0] in gold[q.id])),
                        "hit_at_2": float(bool(gold[q.id] & set(top))),
                    }
                )
        print(
            f"[store] conversation {conv.id}: {len(conv.facts)} facts, {len(questions)} questions, "
            f"{len(pairs)} pairs ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
        index.close()
    by = by_query(rows)
    results: list[dict[str, Any]] = []
    for qs, metrics, systems in (
        ("pairs", ("both", "share"), list(SYSTEMS)),
        ("single", ("hit_at_1", "hit_at_2"), ["ctxret_store", "ctxret_floor_only"]),
        ("general", ("full", "overlap"), list(SYSTEMS) if args.general else []),
    ):
        for system in systems:
            for metric in metrics:
                cmp = compare(by[(system, qs)], by[(PEER, qs)], metric)
                if cmp is None:
                    continue
                results.append({"system": system, "peer": PEER, "query_set": qs, "metric": metric, **cmp})
                d, bs = cmp["diff"], cmp["bootstrap"]
                print(
                    f"{qs:7} {metric:9} {system:18} {cmp['system_value'] * 100:5.1f}%  {PEER} "
                    f"{cmp['peer_value'] * 100:5.1f}%  diff {d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, "
                    f"{d['hi'] * 100:+.1f}]  bootstrap [{bs['lo'] * 100:+.1f}, {bs['hi'] * 100:+.1f}]  per conv "
                    + " ".join(f"{v * 100:+.1f}" for v in cmp["per_conversation"].values())
                )
    timing = {name: round(statistics.median(v) * 1000, 1) for name, v in seconds.items()}
    if timing:
        print(f"general queries, median ms per search: {timing}")
    print(f"counts: {counts}; {time.perf_counter() - started:.0f} s")
    if args.json:
        out = {
            "command": " ".join(sys.argv),
            "date": time.strftime("%a %b %d %H:%M UTC %Y", time.gmtime()),
            "counts": counts,
            "general_median_ms": timing,
            "results": results,
        }
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


def _put(namespace: tuple[str, ...], key: str, text: str) -> Any:
    from langgraph.store.base import PutOp

    return PutOp(namespace, key, {"content": text})


if __name__ == "__main__":
    main()
