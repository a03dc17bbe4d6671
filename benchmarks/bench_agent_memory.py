"""A LangChain agent with ctxret memory on LoCoMo: ``create_agent`` with ``CtxretMemoryMiddleware``, on each exchange.

Every run uses LangChain's ``create_agent``, LangGraph's ``InMemorySaver`` and LangChain's fake chat model, which
answers each exchange with the conversation's own reply (an exchange: the first speaker's messages in, the other
speaker's reply out; the first speaker is the user, as ``ctxret eval threads --incremental`` reads LoCoMo; messages
keep their ``dia_id`` as id and their session's time). Two runs per conversation:

* **writes**: the conversation is one LangGraph thread (the middleware's default scope). What the middleware leaves in
  ctxret is compared with one ``add_messages`` call of the same messages (the thread's final state) into another
  store: piece ids, texts, metadata and vectors. The whole state is then written again through a new middleware
  (what a new process does): it must add nothing. The searches and appends per model call are counted.
* **recall**: ``scope`` is the conversation's user (from the run's context), each session a new LangGraph thread. Each
  QA question (categories 1-4) is then asked in a fresh thread through a read-only middleware (``write=False``, so
  the store is the same for every question); the model's input (what the fake model was called with) is searched for
  the question's evidence utterances (their pieces as the memory text renders them). Its pair is the core search's
  top 5 on the same store (``index.search(question, k=5, thread_id=...)``, the best group, as the harness scores it).
  Evidence recall and "any evidence" paired per question with 95% intervals; the checkpointer's messages are checked
  never to hold the memory text.

    python benchmarks/bench_agent_memory.py ../shared/data/locomo-dev --json /work/cache/agents/agent_memory.json
    python benchmarks/bench_agent_memory.py ../shared/data/locomo-dev --limit-conversations 1 --limit-questions 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "adapters"))  # LangChain's fake chat model with bind_tools and its inputs


def exchanges(sessions: list[list[dict[str, Any]]]) -> list[tuple[int, list[dict[str, Any]], dict[str, Any] | None]]:
    """``(session, input messages, reply)`` per exchange: each reply of the second speaker that the first speaker
    speaks after (or that ends its session) closes one; messages before it are its input. A session that ends with
    the first speaker passes those messages on to the next exchange; after the last session they get no reply."""
    out: list[tuple[int, list[dict[str, Any]], dict[str, Any] | None]] = []
    pending: list[dict[str, Any]] = []
    for s, session in enumerate(sessions):
        for i, msg in enumerate(session):
            last = i + 1 == len(session) or session[i + 1]["role"] == "user"
            if msg["role"] == "assistant" and last:
                out.append((s, pending, msg))
                pending = []
            else:
                pending.append(msg)
    if pending:
        out.append((len(sessions) - 1, pending, None))
    return out


def lc_message(msg: dict[str, Any]) -> Any:
    from langchain_core.messages import AIMessage, HumanMessage

    cls = HumanMessage if msg["role"] == "user" else AIMessage
    extra = {"timestamp": msg["timestamp"]} if msg.get("timestamp") else {}
    return cls(msg["content"], id=msg["id"], name=msg.get("name"), additional_kwargs=extra)


def end_reply(conv_id: str, last: dict[str, Any]) -> dict[str, Any]:
    """The fake model's reply to messages that had none (the conversation ended on the first speaker)."""
    return {
        "role": "assistant",
        "content": "(the conversation ends here)",
        "id": f"{conv_id}-end",
        "timestamp": last.get("timestamp"),
    }


def counted(index: Any, calls: Counter) -> None:
    """Count the index's searches and appends (each name replaced on this instance only)."""
    for name in ("search", "asearch", "add_messages", "aadd_messages"):
        inner = getattr(index, name)

        def wrapper(*a: Any, _inner: Any = inner, _name: str = name, **kw: Any) -> Any:
            calls[_name] += 1
            return _inner(*a, **kw)

        setattr(index, name, wrapper)


def run_writes(conv: Any, emb: Any) -> dict[str, Any]:
    from agent_fakes import ScriptedChatModel
    from ctxret import ContextualIndex, Store
    from ctxret.evaluation.memory import _structure, conversation_sessions, store_snapshot
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_ctxret import CtxretMemoryMiddleware, messages_to_openai

    sessions, _ = conversation_sessions(conv)
    plan = exchanges(sessions)
    replies = [r if r is not None else end_reply(conv.id, inputs[-1]) for _, inputs, r in plan]
    model = ScriptedChatModel(messages=iter([lc_message(r) for r in replies]))
    index = ContextualIndex(Store.memory(), embedder=emb, progress=False)
    calls: Counter = Counter()
    counted(index, calls)
    agent = create_agent(model, middleware=[CtxretMemoryMiddleware(index)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": conv.id}}
    started = time.perf_counter()
    for _, inputs, _reply in plan:
        agent.invoke({"messages": [lc_message(m) for m in inputs]}, config)
    index.flush()  # the middleware writes in the background: counted in the run's time
    seconds = time.perf_counter() - started
    state = agent.get_state(config).values["messages"]
    assert not any(isinstance(m, AIMessage) and "<memory>" in m.text for m in state)
    one_call = ContextualIndex(Store.memory(), embedder=emb, progress=False)
    one_call.add_messages(messages_to_openai(state), conv.id)
    structure = _structure(store_snapshot(index, conv.id), store_snapshot(one_call, conv.id))
    counts = dict(calls)
    again = CtxretMemoryMiddleware(index, background=False).memory.write(messages_to_openai(state), conv.id)
    original = [m for s in sessions for m in s]
    return {
        "conversation": conv.id,
        "exchanges": len(plan),
        "messages": len(state),
        "locomo_messages": len(original),
        "extra_replies": sum(1 for _, _, r in plan if r is None),
        "model_calls": len(model.inputs),
        "searches": counts.get("search", 0) + counts.get("asearch", 0),
        "appends": counts.get("add_messages", 0) + counts.get("aadd_messages", 0),
        "seconds": seconds,
        "structure": structure,
        "rewrite_added": again.added,
        "rewrite_duplicates": again.duplicates,
    }


def run_recall(conv: Any, emb: Any, limit_questions: int | None, deadline_ms: float | None) -> list[dict[str, Any]]:
    from agent_fakes import ScriptedChatModel
    from ctxret import ContextualIndex, Store
    from ctxret.evaluation.datasets import select_queries
    from ctxret.evaluation.memory import _message_id, conversation_sessions
    from ctxret.evaluation.metrics import evidence_recall
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_ctxret import CtxretMemoryMiddleware

    sessions, where = conversation_sessions(conv)
    plan = exchanges(sessions)
    replies = [r if r is not None else end_reply(conv.id, inputs[-1]) for _, inputs, r in plan]
    index = ContextualIndex(Store.memory(), embedder=emb, progress=False)
    saver = InMemorySaver()

    def user_of(runtime: Any) -> str:
        return runtime.context["user"]

    writer = create_agent(
        ScriptedChatModel(messages=iter([lc_message(r) for r in replies])),
        middleware=[CtxretMemoryMiddleware(index, scope=user_of)],
        checkpointer=saver,
    )
    for s, inputs, _ in plan:
        writer.invoke(
            {"messages": [lc_message(m) for m in inputs]},
            {"configurable": {"thread_id": f"{conv.id}/s{s}"}},
            context={"user": conv.id},
        )
    index.flush()  # every session stored before the questions
    rendered: dict[str, list[str]] = {}  # evidence unit -> its pieces as the memory text shows them
    for rec in index.store.chroma.iter_records({"thread_id": conv.id}, include=("documents", "metadatas")):
        unit = where.get(_message_id(rec["metadata"]), ("?", -1))[0]
        rendered.setdefault(unit, []).append(rec["document"].strip().replace("\n", "\n  "))
    questions = select_queries(conv, limit_questions, 0)["qa"]
    model = ScriptedChatModel(messages=iter([AIMessage("(answer)") for _ in questions]))
    reading = CtxretMemoryMiddleware(index, scope=user_of, write=False, deadline_ms=deadline_ms)
    recalls: list[Any] = []
    make_recall = reading.memory.recall

    def kept(*a: Any, **kw: Any) -> Any:  # the recall the middleware made, kept to count degraded ones
        recalls.append(make_recall(*a, **kw))
        return recalls[-1]

    reading.memory.recall = kept  # type: ignore[method-assign]
    reader = create_agent(model, middleware=[reading], checkpointer=saver)
    rows = []
    for i, q in enumerate(questions):
        thread = {"configurable": {"thread_id": f"{conv.id}/q{i}"}}
        reader.invoke({"messages": [HumanMessage(q.text)]}, thread, context={"user": conv.id})
        seen = "\n".join(m.text for m in model.inputs[-1])
        present = {u for u, texts in rendered.items() if any(t in seen for t in texts)}
        state = reader.get_state(thread).values["messages"]
        assert all("<memory>" not in m.text for m in state), "the memory text entered the checkpointer"
        groups = [g for g in index.search(q.text, k=5, thread_id=conv.id) if g.hits]
        core: list[set[str]] = []
        if groups:
            best = max(groups, key=lambda g: g.hits[0].score)
            core = [{where.get(_message_id(h.metadata), ("?", -1))[0]} for h in best.hits[:5]]
        evidence = set(q.evidence)
        for system, units in (("middleware", [present]), ("core_top5", core)):
            recall = evidence_recall(units, evidence)
            found = set().union(*units) if units else set()
            rows.append(
                {
                    "conversation": conv.id,
                    "representation": system,
                    "query_set": "qa",
                    "query_id": q.id,
                    "recall": recall,
                    "any": 1.0 if evidence & found else 0.0,
                    "memory_chars": sum(len(m.text) for m in model.inputs[-1] if m.type == "system")
                    if system == "middleware"
                    else None,
                    "degraded": recalls[-1].degraded if system == "middleware" else None,
                }
            )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="the LoCoMo folder (../shared/data/locomo-dev)")
    ap.add_argument("--limit-conversations", type=int, default=None)
    ap.add_argument("--limit-questions", type=int, default=None, help="QA questions per conversation (default all)")
    ap.add_argument("--skip", nargs="*", default=[], choices=("writes", "recall"))
    ap.add_argument("--deadline-ms", type=float, default=1000, help="the middleware's deadline_ms (default 1000)")
    ap.add_argument("--json", default=None, help="write every number here")
    args = ap.parse_args()

    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.datasets import load_locomo
    from ctxret.evaluation.embedding import cached_embedder
    from ctxret.evaluation.stats import by_query, compare

    emb = cached_embedder(shared_local_embedder())
    convs = [load_locomo(p) for p in sorted(Path(args.path).glob("*.json"))][: args.limit_conversations]
    out: dict[str, Any] = {"command": " ".join(sys.argv), "date": time.strftime("%a %b %d %H:%M UTC %Y", time.gmtime())}
    if "writes" not in args.skip:
        out["writes"] = []
        for conv in convs:
            r = run_writes(conv, emb)
            out["writes"].append(r)
            s = r["structure"]
            print(
                f"[writes] {conv.id}: {r['exchanges']} invokes, {r['messages']} messages ({r['locomo_messages']} in "
                f"LoCoMo + {r['extra_replies']} end reply), {s['pieces']} pieces vs {s['one_call_pieces']} one call, "
                f"identical {s['identical']}; {r['model_calls']} model calls, {r['searches']} searches, "
                f"{r['appends']} appends; the state again: added {r['rewrite_added']}, duplicates "
                f"{r['rewrite_duplicates']}; {r['seconds']:.0f} s",
                flush=True,
            )
    if "recall" not in args.skip:
        rows: list[dict[str, Any]] = []
        for conv in convs:
            mine = run_recall(conv, emb, args.limit_questions, args.deadline_ms)
            rows += mine
            print(f"[recall] {conv.id}: {len(mine) // 2} questions", flush=True)
        by = by_query(rows)
        out["recall"] = {}
        for metric in ("recall", "any"):
            cmp = compare(by[("middleware", "qa")], by[("core_top5", "qa")], metric, changed=True)
            out["recall"][metric] = cmp
            d = cmp["diff"] if cmp else {}
            print(
                f"[recall] {metric}: middleware {cmp['system_value']:.3f}, core top 5 {cmp['peer_value']:.3f}, "
                f"diff {d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, {d['hi'] * 100:+.1f}] points, n {d['n']}, "
                f"changed {cmp['changed']}; per conversation "
                + " ".join(f"{v * 100:+.1f}" for v in cmp["per_conversation"].values())
            )
        chars = [r["memory_chars"] for r in rows if r["memory_chars"] is not None]
        out["recall"]["system_chars_median"] = sorted(chars)[len(chars) // 2] if chars else 0
        out["recall"]["degraded"] = sum(1 for r in rows if r["degraded"])
        print(
            f"[recall] the model's system message: median {out['recall']['system_chars_median']} characters; "
            f"{out['recall']['degraded']} recalls ran out of their {args.deadline_ms:g} ms"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
