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
  never to hold the memory text. A piece counts as in the model's input when the recall showed it
  (``Recall.hits``) and its quoted first line is in what the model was given. Evidence the core's top 5 holds and the
  input does not is split by cause: the search (the middleware's search did not return it: its deadline, the
  messages in view left out) or the budget (returned, but ``max_chars`` left it out).
* **longmemeval** (``--longmemeval FILE``): long agent-style histories (~48 sessions of a user and a verbose
  assistant; pieces up to the model's limit). Each question's sessions are written in time order as the middleware
  writes them (``AgentMemory.write``, one call per session, ``conversation`` = the session), the question asked at its
  date through ``create_agent`` with a read-only middleware (``scope`` = the question's history) in a fresh thread.
  Units are sessions: **recall** is the share of the question's evidence sessions in the model's input, paired
  against the sessions of the core's top 5 (the best group). The same recall's groups are rendered again at other
  budgets (``--budgets``), so the budget's cost is read off one search.

    python benchmarks/bench_agent_memory.py ../shared/data/locomo-dev --json benchmarks/results/agent_memory.json
    python benchmarks/bench_agent_memory.py ../shared/data/locomo-dev --limit-conversations 1 --limit-questions 20
    python benchmarks/bench_agent_memory.py ../shared/data/locomo-dev --skip writes recall \\
        --longmemeval ../shared/data/longmemeval-dev --per-type 4 --cache /tmp/lme-agent
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


def in_input(hit: Any, seen: str) -> bool:
    """Whether ``hit``'s text is in ``seen`` (the model's input) as the memory text quotes it: its first line."""
    from ctxret.query.render import QUOTE, neutralize

    lines = neutralize(str(hit.stored.get("body", hit.text)).strip()).splitlines()
    return bool(lines) and QUOTE + lines[0] in seen


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
    one_call.add_messages(messages_to_openai(state), conv.id, metadata={"conversation": conv.id})
    structure = _structure(store_snapshot(index, conv.id), store_snapshot(one_call, conv.id))
    counts = dict(calls)
    again = CtxretMemoryMiddleware(index, background=False).memory.write(
        messages_to_openai(state), conv.id, conversation=conv.id
    )
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


def pairs_of(questions: list[Any], seed: int = 0) -> list[tuple[Any, Any]]:
    """Questions paired two by two (seeded order), a partner's evidence never the other's."""
    import random

    pool = list(questions)
    random.Random(seed).shuffle(pool)
    out = []
    while len(pool) >= 2:
        a = pool.pop()
        j = next((i for i in range(len(pool) - 1, -1, -1) if not set(pool[i].evidence) & set(a.evidence)), None)
        if j is None:
            continue
        out.append((a, pool.pop(j)))
    return out


def run_recall(
    conv: Any, emb: Any, limit_questions: int | None, deadline_ms: float | None, pairs: bool = False
) -> list[dict[str, Any]]:
    from agent_fakes import ScriptedChatModel
    from ctxret import ContextualIndex, Store
    from ctxret.evaluation.datasets import select_queries
    from ctxret.evaluation.memory import _message_id, conversation_sessions
    from ctxret.evaluation.metrics import evidence_recall
    from ctxret.query.render import render_layout
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
    questions = select_queries(conv, limit_questions, 0)["qa"]
    paired = pairs_of(questions) if pairs else []
    model = ScriptedChatModel(messages=iter([AIMessage("(answer)") for _ in range(len(questions) + len(paired))]))
    reading = CtxretMemoryMiddleware(index, scope=user_of, write=False, deadline_ms=deadline_ms)
    recalls: list[Any] = []
    make_recall = reading.memory.recall

    def kept(*a: Any, **kw: Any) -> Any:  # the recall the middleware made, kept to count degraded ones
        recalls.append(make_recall(*a, **kw))
        return recalls[-1]

    reading.memory.recall = kept  # type: ignore[method-assign]
    reader = create_agent(model, middleware=[reading], checkpointer=saver)
    rows = []
    core_of: dict[str, list[set[str]]] = {}
    for i, q in enumerate(questions):
        thread = {"configurable": {"thread_id": f"{conv.id}/q{i}"}}
        reader.invoke({"messages": [HumanMessage(q.text)]}, thread, context={"user": conv.id})
        seen = "\n".join(m.text for m in model.inputs[-1])
        present = {where.get(_message_id(h.stored), ("?", -1))[0] for h in recalls[-1].hits if in_input(h, seen)}
        state = reader.get_state(thread).values["messages"]
        assert all("<memory>" not in m.text for m in state), "the memory text entered the checkpointer"
        groups = [g for g in index.search(q.text, k=5, thread_id=conv.id) if g.hits]
        core: list[set[str]] = []
        if groups:
            best = max(groups, key=lambda g: g.hits[0].score)
            core = [{where.get(_message_id(h.stored), ("?", -1))[0]} for h in best.hits[:5]]
        core_of[q.id] = core
        evidence = set(q.evidence)
        core_found = set().union(*core) if core else set()
        searched = {where.get(_message_id(h.stored), ("?", -1))[0] for g in recalls[-1].groups for h in g.hits}
        lost = evidence & core_found - present
        causes = {"lost_budget": len(lost & searched), "lost_search": len(lost - searched)}
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
                    **(causes if system == "middleware" else {}),
                }
            )
    for i, (a, b) in enumerate(paired):  # two questions in one message: each against its own core top 5
        thread = {"configurable": {"thread_id": f"{conv.id}/p{i}"}}
        reader.invoke(
            {"messages": [HumanMessage(f"{a.text.strip()} {b.text.strip()}")]}, thread, context={"user": conv.id}
        )
        seen = "\n".join(m.text for m in model.inputs[-1])
        recall = recalls[-1]

        def unit(h: Any) -> str:
            return where.get(_message_id(h.stored), ("?", -1))[0]

        shown = {"middleware": {unit(h) for h in recall.hits if in_input(h, seen)}}
        for budget in (4000, None):
            layout = render_layout(recall.groups, max_chars=budget, conversation=f"{conv.id}/p{i}")
            shown[f"budget_{budget}"] = {
                unit(h) for g, n in zip(recall.groups, layout.shown, strict=True) for h in g.hits[:n]
            }
        for q in (a, b):
            evidence = set(q.evidence)
            for system, units in (*((k, [v]) for k, v in shown.items()), ("core_top5", core_of[q.id])):
                found = set().union(*units) if units else set()
                rows.append(
                    {
                        "conversation": conv.id,
                        "representation": system,
                        "query_set": "pairs",
                        "query_id": f"p{i}:{q.id}",
                        "recall": evidence_recall(units, evidence),
                        "any": 1.0 if evidence & found else 0.0,
                        "parts": len(recall.groups),
                    }
                )
    return rows


def run_lme_question(q: Any, index: Any, budgets: list[int | str | None], deadline_ms: float | None) -> dict[str, Any]:
    """One LongMemEval question (see the module docstring): its history written as the middleware writes it, the
    question asked through ``create_agent``; the evidence sessions in the model's input, in the core's top 5, and in
    the same recall rendered at each of ``budgets``."""
    from agent_fakes import ScriptedChatModel
    from ctxret.agent_memory import AgentMemory
    from ctxret.evaluation.longmemeval import session_messages
    from ctxret.query.render import render_layout
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_ctxret import CtxretMemoryMiddleware

    writer = AgentMemory(index)
    for sid, date, turns in q.sessions:
        writer.write(session_messages(q, sid, date, turns), q.id, conversation=sid)
    model = ScriptedChatModel(messages=iter([AIMessage("(answer)")]))
    reading = CtxretMemoryMiddleware(
        index, scope=q.id, write=False, deadline_ms=deadline_ms, search_kwargs={"now": q.date.isoformat()}
    )
    recalls: list[Any] = []
    make_recall = reading.memory.recall

    def kept(*a: Any, **kw: Any) -> Any:
        recalls.append(make_recall(*a, **kw))
        return recalls[-1]

    reading.memory.recall = kept  # type: ignore[method-assign]
    agent = create_agent(model, middleware=[reading], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage(q.question)]}, {"configurable": {"thread_id": f"{q.id}/ask"}})
    seen = "\n".join(m.text for m in model.inputs[-1])
    recall = recalls[-1]

    def session(hit: Any) -> str:
        return str(hit.stored.get("message_key", "")).removeprefix("id:").rsplit("/", 1)[0]

    present = {session(h) for h in recall.hits if in_input(h, seen)}
    groups = [g for g in index.search(q.question, k=5, thread_id=q.id, now=q.date.isoformat()) if g.hits]
    core = {session(h) for h in max(groups, key=lambda g: g.hits[0].score).hits[:5]} if groups else set()
    searched = {session(h) for g in recall.groups for h in g.hits}
    evidence = set(q.evidence_sessions)
    out: dict[str, Any] = {
        "question": q.id,
        "type": q.type,
        "parts": len(recall.groups),
        "evidence": len(evidence),
        "middleware": len(evidence & present) / len(evidence),
        "core_top5": len(evidence & core) / len(evidence),
        "lost_budget": len(evidence & core & searched - present),
        "lost_search": len(evidence & core - searched),
        "memory_chars": len(recall.text),
        "bullets": [len(b) for b in recall.text.split("\n- ")[1:]],
        "degraded": recall.degraded,
    }
    for budget in budgets:
        limit = budget if budget != "auto" else auto_budget(index)
        layout = render_layout(recall.groups, max_chars=limit, now=q.date.isoformat(), conversation=f"{q.id}/ask")
        shown = {session(h) for g, n in zip(recall.groups, layout.shown, strict=True) for h in g.hits[:n]}
        out[f"budget_{budget}"] = len(evidence & shown) / len(evidence)
    return out


def lme_pairs(picked: list[Any], index: Any, budgets: list[int | str | None]) -> list[dict[str, Any]]:
    """Two LongMemEval questions in one message, over both histories (``thread_id=[a, b]``, asked at the later
    date): each question's evidence sessions among the hits of its own part that the text shows at each budget
    (``budget_None``: every hit the search found, the core's top 5 of each part)."""
    from ctxret.query.render import render_layout

    rows: list[dict[str, Any]] = []
    for i in range(0, len(picked) - 1, 2):
        a, b = picked[i], picked[i + 1]
        now = max(a.date, b.date).isoformat()
        groups = index.search(f"{a.question.strip()} {b.question.strip()}", k=5, thread_id=[a.id, b.id], now=now)
        if len(groups) != 2:
            print(f"[longmemeval pairs] {a.id} + {b.id}: {len(groups)} parts, left out", flush=True)
            continue
        for budget in budgets:
            limit = budget if budget != "auto" else auto_budget(index)
            layout = render_layout(groups, max_chars=limit, now=now, conversation="ask")
            for q, g, n in zip((a, b), groups, layout.shown, strict=True):
                shown = {str(h.stored.get("message_key", "")).removeprefix("id:").rsplit("/", 1)[0] for h in g.hits[:n]}
                ev = set(q.evidence_sessions)
                rows.append(
                    {
                        "conversation": q.type,
                        "representation": f"budget_{budget}",
                        "query_set": "lme_pairs",
                        "query_id": f"{a.id}+{b.id}:{q.id}",
                        "recall": len(ev & shown) / len(ev),
                    }
                )
    return rows


def auto_budget(index: Any) -> int:
    from ctxret.query.render import auto_max_chars

    return auto_max_chars(index.settings.k, index.config.piece_bytes)


def run_longmemeval_agent(args: Any, emb: Any) -> dict[str, Any]:
    """Every picked LongMemEval question through :func:`run_lme_question`; the recall paired against the core's."""
    import statistics

    from ctxret import ContextualIndex, Store
    from ctxret.evaluation.longmemeval import load_longmemeval
    from ctxret.evaluation.stats import by_query, compare

    questions = [q for q in load_longmemeval(args.longmemeval) if not q.abstention]
    picked: list[Any] = []
    per: Counter = Counter()
    for q in questions:
        if args.per_type is None or per[q.type] < args.per_type:
            picked.append(q)
            per[q.type] += 1
    store = Store.embedded(Path(args.cache) / "store") if args.cache else Store.memory()
    index = ContextualIndex(store, embedder=emb, progress=False)
    budgets: list[int | str | None] = [None if b == "none" else b if b == "auto" else int(b) for b in args.budgets]
    if None in budgets:  # the unbounded text last: what the others are paired against
        budgets = [b for b in budgets if b is not None] + [None]
    rows: list[dict[str, Any]] = []
    per_question = []
    started = time.perf_counter()
    try:
        for i, q in enumerate(picked):
            r = run_lme_question(q, index, budgets, args.deadline_ms)
            per_question.append(r)
            for system in ("middleware", "core_top5", *(f"budget_{b}" for b in budgets)):
                rows.append(
                    {
                        "conversation": q.type,
                        "representation": system,
                        "query_set": "lme",
                        "query_id": q.id,
                        "recall": r[system],
                    }
                )
            print(
                f"[longmemeval] {i + 1}/{len(picked)} {q.id} ({q.type}): input {r['middleware']:.2f}, core top 5 "
                f"{r['core_top5']:.2f}, {r['memory_chars']} chars ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
        pair_rows = lme_pairs(picked, index, budgets) if args.lme_pairs else []
    finally:
        index.close()
    by = by_query(rows)
    out: dict[str, Any] = {"questions": len(picked), "per_question": per_question, "compare": {}}
    if pair_rows:
        pby = by_query(pair_rows)
        out["pairs"] = {}
        for budget in budgets[:-1]:
            cmp = compare(
                pby[(f"budget_{budget}", "lme_pairs")], pby[("budget_None", "lme_pairs")], "recall", changed=True
            )
            out["pairs"][f"budget_{budget}"] = cmp
            d = cmp["diff"]
            print(
                f"[longmemeval pairs] budget {budget}: {cmp['system_value']:.3f} vs no bound {cmp['peer_value']:.3f}: "
                f"{d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, {d['hi'] * 100:+.1f}] points, n {d['n']}, "
                f"changed {cmp['changed']}"
            )
    for system in ("middleware", *(f"budget_{b}" for b in budgets)):
        cmp = compare(by[(system, "lme")], by[("core_top5", "lme")], "recall", changed=True)
        out["compare"][system] = cmp
        d = cmp["diff"]
        print(
            f"[longmemeval] {system:12} {cmp['system_value']:.3f} vs core top 5 {cmp['peer_value']:.3f}: "
            f"{d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, {d['hi'] * 100:+.1f}] points, n {d['n']}, "
            f"changed {cmp['changed']}"
        )
    bullets = sorted(b for r in per_question for b in r["bullets"])
    out["lost"] = {k: sum(r[k] for r in per_question) for k in ("lost_budget", "lost_search")}
    out["bullet_chars"] = {
        "median": statistics.median(bullets) if bullets else 0,
        "p90": bullets[int(0.9 * (len(bullets) - 1))] if bullets else 0,
    }
    out["parts"] = dict(Counter(r["parts"] for r in per_question))
    out["degraded"] = sum(1 for r in per_question if r["degraded"])
    print(
        f"[longmemeval] evidence sessions of the core's top 5 not in the input: {out['lost']}; a hit's bullet "
        f"{out['bullet_chars']}; parts {out['parts']}; {out['degraded']} recalls degraded"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", help="the LoCoMo folder (../shared/data/locomo-dev)")
    ap.add_argument("--limit-conversations", type=int, default=None)
    ap.add_argument("--limit-questions", type=int, default=None, help="QA questions per conversation (default all)")
    ap.add_argument("--skip", nargs="*", default=[], choices=("writes", "recall"))
    ap.add_argument("--pairs", action="store_true", help="also ask two questions of a conversation in one message")
    ap.add_argument("--longmemeval", default=None, help="a LongMemEval file or folder: the long-history run")
    ap.add_argument("--per-type", type=int, default=None, help="LongMemEval questions per type (default all)")
    ap.add_argument("--cache", default=None, help="an embedded store folder for the LongMemEval histories (reused)")
    ap.add_argument(
        "--budgets", nargs="*", default=["2000", "4000", "auto", "12000", "none"], help="max_chars to compare"
    )
    ap.add_argument("--lme-pairs", action="store_true", help="also two LongMemEval questions in one message")
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
            mine = run_recall(conv, emb, args.limit_questions, args.deadline_ms, args.pairs)
            rows += mine
            print(f"[recall] {conv.id}: {sum(r['query_set'] == 'qa' for r in mine) // 2} questions", flush=True)
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
        if args.pairs:
            for system in ("middleware", "budget_4000", "budget_None"):
                cmp = compare(by[(system, "pairs")], by[("core_top5", "pairs")], "recall", changed=True)
                out["recall"][f"pairs_{system}"] = cmp
                d = cmp["diff"]
                print(
                    f"[recall] two questions a message, {system}: {cmp['system_value']:.3f} vs each question's core "
                    f"top 5 {cmp['peer_value']:.3f}: {d['mean'] * 100:+.1f} [{d['lo'] * 100:+.1f}, "
                    f"{d['hi'] * 100:+.1f}] points, n {d['n']}, changed {cmp['changed']}"
                )
        chars = [r.get("memory_chars") for r in rows if r.get("memory_chars") is not None]
        out["recall"]["system_chars_median"] = sorted(chars)[len(chars) // 2] if chars else 0
        out["recall"]["degraded"] = sum(1 for r in rows if r.get("degraded"))
        mids = [r for r in rows if r["representation"] == "middleware" and r["query_set"] == "qa"]
        out["recall"]["lost"] = {k: sum(r[k] for r in mids) for k in ("lost_budget", "lost_search")}
        print(f"[recall] evidence units of the core's top 5 not in the model's input: {out['recall']['lost']}")
        print(
            f"[recall] the model's system message: median {out['recall']['system_chars_median']} characters; "
            f"{out['recall']['degraded']} recalls ran out of their {args.deadline_ms:g} ms"
        )
    if args.longmemeval:
        out["longmemeval"] = run_longmemeval_agent(args, emb)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
