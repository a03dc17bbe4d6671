"""Appending messages: the next exchange becomes the thread's next turns; a message sent again adds nothing.

A thread written one call per exchange (or session, or message) must hold exactly the pieces of the same thread
written in one call: same ids, texts, metadata and vectors.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import numpy as np
import pytest
from ctxret import ContextualIndex, InputError
from ctxret.ingest import turns_from_messages
from ctxret.ingest.turns import Source, Turn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability.hash_embedder import HashEmbedder

T0 = datetime(2026, 3, 2, 9, 0)


def memory(**kwargs) -> ContextualIndex:
    kwargs.setdefault("embedder", HashEmbedder())
    return ContextualIndex(in_memory=True, **kwargs)


def snapshot(index: ContextualIndex, thread_id: str | None = None) -> dict[str, tuple]:
    """Every stored piece: id -> (document, metadata without the lexical copy's extras, vector rounded)."""
    out = {}
    where = None if thread_id is None else {"thread_id": thread_id}
    for rec in index.store.chroma.iter_records(where, include=("documents", "metadatas", "embeddings")):
        vec = tuple(np.round(np.asarray(rec["embedding"], dtype=np.float64), 5))
        out[rec["id"]] = (rec["document"], tuple(sorted((rec["metadata"] or {}).items())), vec)
    return out


def exchange(i: int, *, ts: datetime | None = None, ids: bool = False, tool: bool = False) -> list[dict]:
    user = {"role": "user", "content": f"Question {i}: what is the status of project {i}?"}
    answer = {"role": "assistant", "content": f"Project {i} ships on day {i}, after the review."}
    msgs = [user, answer]
    if tool:
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call-{i}", "type": "function", "function": {"name": "lookup", "arguments": f'{{"p": {i}}}'}}
            ],
        }
        result = {"role": "tool", "tool_call_id": f"call-{i}", "content": f"project {i}: green"}
        msgs = [user, call, result, answer]
    for j, m in enumerate(msgs):
        if ts is not None:
            m["timestamp"] = (ts + timedelta(minutes=j)).isoformat()
        if ids:
            m["id"] = f"m{i}-{j}"
    return msgs


def test_the_next_exchange_appends_and_nothing_is_erased():
    index = memory()
    first = [{"role": "user", "content": "My dog is called Biscuit."}, {"role": "assistant", "content": "Noted."}]
    second = [{"role": "user", "content": "I moved to Berlin last month."}, {"role": "assistant", "content": "Noted."}]
    assert index.add_messages(first, thread_id="u1").turns_changed == 1
    result = index.add_messages(second, thread_id="u1")
    assert (result.replaced, result.turns_changed) == (0, 1)
    turns = sorted({(r["metadata"]["turn_index"], r["metadata"]["body"]) for r in index.store.records()})
    assert [t for t, _ in turns].count(1) == 2 and [t for t, _ in turns].count(2) == 2
    hits = [h.body for g in index.search("What is my dog called?", thread_id="u1", score_threshold=None) for h in g]
    assert "My dog is called Biscuit." in hits


@pytest.mark.parametrize("form", ["plain", "timed", "ids"])
def test_a_retry_adds_nothing(form):
    index = memory()
    kw = {"ts": T0} if form == "timed" else {"ids": True} if form == "ids" else {}
    index.add_messages(exchange(1, **kw), thread_id="t")
    before = snapshot(index)
    again = index.add_messages(exchange(1, **kw), thread_id="t")
    assert again.duplicates == 2 and again.added == 0 and snapshot(index) == before


def test_redelivered_exchanges_in_any_order_are_stored_once_when_messages_have_ids_or_times():
    one_call, index, timed = memory(), memory(), memory()
    order = [1, 2, 1, 3, 2, 4, 3, 1, 4]
    for i in order:
        index.add_messages(exchange(i, ids=True, ts=T0 + timedelta(hours=i)), thread_id="t")
        timed.add_messages(exchange(i, ts=T0 + timedelta(hours=i)), thread_id="t")
    one_call.add_messages(
        [m for i in (1, 2, 3, 4) for m in exchange(i, ids=True, ts=T0 + timedelta(hours=i))], thread_id="t"
    )
    assert snapshot(index) == snapshot(one_call)
    assert sorted({r["metadata"]["turn_index"] for r in timed.store.records()}) == [1, 2, 3, 4]


def test_a_message_without_a_time_gets_the_time_it_was_added():
    index = memory()
    at = datetime(2026, 5, 4, 10, 30).astimezone()
    index.store.heads.clear()
    from ctxret.ingest.append import append_messages

    append_messages(index.store, exchange(1), "t", include_system=False, write=index.add_turns, now=at)
    metas = [r["metadata"] for r in index.store.records()]
    assert {m["timestamp"] for m in metas} == {at.isoformat()}
    assert all(m["time_added"] is True for m in metas)
    # kept out of the embedded header: a date in the text of a short message costs it its meaning
    texts = [r["document"] for r in index.store.records(include=("documents",))]
    assert not any("May 4" in m["header"] for m in metas) and not any("May 4" in t for t in texts)
    plain = memory()
    plain.add_messages(exchange(1), thread_id="t")
    assert all(r["metadata"].get("ts_epoch") for r in plain.store.records())
    assert plain.add_messages(exchange(1), thread_id="t").duplicates == 2  # a retry: its given form has no time
    # a time the message gives is in its header, as before, and is not 'added'
    timed = memory()
    timed.add_messages(exchange(1, ts=at), thread_id="t")
    assert all("May 4, 2026, 10:3" in r["metadata"]["header"] for r in timed.store.records())
    assert not any("time_added" in r["metadata"] for r in timed.store.records())


def split_calls(messages: list[dict], cuts: list[int]) -> list[list[dict]]:
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(messages))), len(messages)]
    return [messages[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def conversation(n: int, *, ids: bool) -> list[dict]:
    # a message before the first user message (a turn of its own), and one that continues a turn later
    msgs = [{"role": "assistant", "content": "Hello! I keep notes of our chats.", "timestamp": T0.isoformat()}]
    for i in range(1, n + 1):
        msgs += exchange(i, ts=T0 + timedelta(hours=i), ids=ids, tool=i % 2 == 0)
        if i % 3 == 0:
            msgs.append(
                {
                    "role": "assistant",
                    "content": f"Also, project {i} needs a new owner.",
                    "timestamp": (T0 + timedelta(hours=i, minutes=30)).isoformat(),
                }
            )
    return msgs


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 40), max_size=8), ids=st.booleans())
def test_any_split_into_calls_holds_exactly_the_one_call_pieces(cuts, ids):
    messages = conversation(6, ids=ids)
    one_call = memory()
    one_call.add_messages(messages, thread_id="t")
    index = memory()
    for call in split_calls(messages, cuts):
        index.add_messages(call, thread_id="t")
    assert snapshot(index) == snapshot(one_call)


def test_sessions_appended_with_the_real_model_hold_the_one_call_vectors(local_embedder):
    """Late chunking reads a piece inside its whole turn: a turn continued by a later call is embedded again whole,
    so its vectors are the one-call ones."""
    messages = conversation(4, ids=False)
    one_call = ContextualIndex(in_memory=True, embedder=local_embedder)
    one_call.add_messages(messages, thread_id="t")
    index = ContextualIndex(in_memory=True, embedder=local_embedder)
    for call in split_calls(messages, [2, 3, 7, 9, 12]):
        index.add_messages(call, thread_id="t")
    assert index.config.context == "late"
    a, b = snapshot(index), snapshot(one_call)
    assert a.keys() == b.keys() and all(a[k][:2] == b[k][:2] for k in a)
    for k in a:
        np.testing.assert_allclose(a[k][2], b[k][2], atol=2e-5)


def test_a_tool_result_sent_later_joins_its_call():
    index = memory()
    msgs = exchange(2, tool=True, ids=True, ts=T0)
    index.add_messages(msgs[:2], thread_id="t")  # the question and the call
    pending = [r["metadata"] for r in index.store.records() if r["metadata"]["source_kind"] == "tool"]
    assert pending and pending[0]["body"].endswith("Result: (none)")
    index.add_messages(msgs[2:], thread_id="t")  # the result and the answer
    bodies = {r["metadata"]["source_kind"]: r["metadata"]["body"] for r in index.store.records()}
    assert bodies["tool"] == 'lookup arguments: {"p": 2}\nResult: project 2: green'
    one_call = memory()
    one_call.add_messages(msgs, thread_id="t")
    assert snapshot(index) == snapshot(one_call)


def test_first_turn_keeps_numbered_writes_and_replace_messages_rewrites_the_thread():
    index = memory()
    index.add_messages(exchange(1) + exchange(2) + exchange(3), thread_id="t")
    index.add_messages(exchange(9), thread_id="t", first_turn=2)  # turn 2 replaced, 1 and 3 kept
    bodies = {
        r["metadata"]["turn_index"]: r["metadata"]["body"]
        for r in index.store.records()
        if r["metadata"]["source_kind"] == "user"
    }
    assert bodies == {
        1: "Question 1: what is the status of project 1?",
        2: "Question 9: what is the status of project 9?",
        3: "Question 3: what is the status of project 3?",
    }
    result = index.replace_messages(exchange(7), thread_id="t")
    assert result.replaced >= 4
    assert {r["metadata"]["turn_index"] for r in index.store.records()} == {1}
    index.add_messages(exchange(8), thread_id="t")  # appends after the replaced thread
    assert {r["metadata"]["turn_index"] for r in index.store.records()} == {1, 2}


def test_a_resent_thread_adds_only_its_new_end_and_a_changed_one_is_refused():
    index = memory()
    history = exchange(1) + exchange(2)
    index.add_messages(history, thread_id="t")
    grown = index.add_messages(history + exchange(3), thread_id="t")  # the whole thread again, plus one exchange
    assert (grown.duplicates, grown.turns_changed) == (4, 1)
    before = snapshot(index)
    changed = history[:3] + [{"role": "assistant", "content": "Project 2 slipped a week."}] + exchange(3) + exchange(4)
    with pytest.raises(InputError, match=r"message 4 differs.*turn 2.*replace_messages"):
        index.add_messages(changed, thread_id="t")
    assert snapshot(index) == before


def test_a_store_written_before_messages_had_keys_takes_appends_and_knows_their_retries():
    index = memory()
    turn = Turn(
        "t",
        1,
        (
            Source("user", "User", "What time is the standup?", 0),
            Source("assistant", "Assistant", "The standup is at 9:15.", 1),
        ),
        "Turn 1",
    )
    index.add_turns([turn])  # pieces without message keys, as older versions wrote them
    assert not any("message_key" in r["metadata"] for r in index.store.records())
    retry = [
        {"role": "user", "content": "What time is the standup?"},
        {"role": "assistant", "content": "The standup is at 9:15."},
    ]
    assert index.add_messages(retry, thread_id="t").duplicates == 2
    index.add_messages(exchange(2), thread_id="t")
    assert {r["metadata"]["turn_index"] for r in index.store.records()} == {1, 2}


def test_appends_to_one_thread_from_many_threads_lose_and_duplicate_nothing(tmp_path):
    index = ContextualIndex(tmp_path / "store", embedder=HashEmbedder())
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for i in range(5):
                index.add_messages(exchange(w * 100 + i), thread_id="shared")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    metas = [r["metadata"] for r in index.store.records()]
    turns = sorted({m["turn_index"] for m in metas})
    assert turns == list(range(1, 21))  # dense
    users = [m["body"] for m in metas if m["source_kind"] == "user"]
    assert len(users) == len(set(users)) == 20  # each exchange once
    per_writer = {}
    for m in metas:
        if m["source_kind"] == "user":
            n = int(m["body"].split()[1].rstrip(":"))
            per_writer.setdefault(n // 100, []).append((m["turn_index"], n))
    for seq in per_writer.values():  # each writer's exchanges in the order it sent them
        assert [n for _, n in sorted(seq)] == sorted(n for _, n in seq)
    index.close()


def test_messages_that_store_nothing_and_bad_input():
    index = memory()
    assert index.add_messages([{"role": "system", "content": "be nice"}], thread_id="t").turns == 0
    with pytest.raises(InputError, match="thread_id"):
        index.add_messages(exchange(1), thread_id="")
    with pytest.raises(InputError, match="message id"):
        index.add_messages([{"role": "user", "content": "x", "id": {"a": 1}}], thread_id="t")
    assert index.store.count() == 0


def test_turns_from_messages_is_unchanged_by_keys():
    turns = turns_from_messages(exchange(1, ids=True), "t")
    assert [s.message_key for s in turns[0].sources] == ["id:m1-0", "id:m1-1"]
    plain = turns_from_messages(exchange(1), "t")
    assert all(s.message_key.startswith("fp:") for s in plain[0].sources)
    assert [s.text for s in turns[0].sources] == [s.text for s in plain[0].sources]


def test_openai_responses_items_are_read_with_their_ids():
    items = [
        {"type": "message", "role": "user", "id": "msg_1", "content": [{"type": "input_text", "text": "Weather?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "4 C, rain"},
        {"type": "message", "role": "assistant", "id": "msg_2", "content": [{"type": "output_text", "text": "Rainy."}]},
    ]
    turns = turns_from_messages(items, "t")
    assert len(turns) == 1
    kinds = [(s.kind, s.text) for s in turns[0].sources]
    assert kinds == [
        ("user", "Weather?"),
        ("tool", 'weather arguments: {"city":"Oslo"}\nResult: 4 C, rain'),
        ("assistant", "Rainy."),
    ]
    index = memory()
    index.add_messages(items[:3], thread_id="t")
    index.add_messages(items, thread_id="t")  # the whole response list again: only the new items count
    one = memory()
    one.add_messages(items, thread_id="t")
    # the items carry no time: each write stamps them with its own clock, so the two stores' times may differ
    assert untimed(snapshot(index)) == untimed(snapshot(one))


def untimed(snap: dict[str, tuple]) -> dict[str, tuple]:
    """``snap`` without the times a write stamps on messages that carry none."""
    times = {"timestamp", "ts_epoch"}
    return {rid: (doc, tuple(kv for kv in meta if kv[0] not in times), vec) for rid, (doc, meta, vec) in snap.items()}
