"""The time query sets and the time-aware representations of ``eval threads`` (ctxret.evaluation.timeset)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pytest
from ctxret.evaluation.datasets import load_jsonl, load_threads
from ctxret.evaluation.hybrid import RUNTIME_DEFAULT, hybrid_candidates, with_candidates
from ctxret.evaluation.index import ConversationIndex
from ctxret.evaluation.threads import run_threads
from ctxret.evaluation.timequeries import dated_questions, default_now, time_queries
from ctxret.evaluation.timeset import TIME_REPRESENTATIONS
from ctxret.query.time import find_time, has_time_words
from test_eval_threads import LOCOMO, write_synthetic

needs_locomo = pytest.mark.skipif(not LOCOMO.is_dir(), reason="needs ../shared/data/locomo-dev")


@needs_locomo
def test_the_time_set_is_deterministic_and_its_windows_hold_the_evidence():
    convs = load_threads(LOCOMO)
    queries = [q for c in convs for q in time_queries(c, seed=0)]
    assert 300 <= len(queries) <= 500
    assert [q.text for c in convs for q in time_queries(c, seed=0)] == [q.text for q in queries]
    assert [q.text for q in time_queries(convs[0], seed=1)] != [q.text for q in time_queries(convs[0], seed=0)]
    for conv in convs:
        stamp = {t.index: t.timestamp for t in conv.turns}
        for q in time_queries(conv):
            assert q.gold and all(q.holds(stamp[s]) and stamp[s] <= q.now for s in q.gold), q
            assert q.evidence
    assert {q.kind for q in queries} >= {"date", "month", "yesterday", "today", "weekday", "last_week", "last_month"}


@needs_locomo
def test_the_parser_gives_every_generated_query_its_window():
    """The generator's windows are its own calendar arithmetic; the parser must agree on every query."""
    for conv in load_threads(LOCOMO):
        for q in time_queries(conv):
            w = find_time(q.text, q.now)
            assert w is not None and (w.start, w.end) == (q.start, q.end), q


@needs_locomo
def test_dated_questions_are_the_datas_questions_that_name_a_time():
    conv = load_threads(LOCOMO / "42.json")[0]
    dated = dated_questions(conv)
    assert dated and all(has_time_words(q.text) for q in dated)
    assert {q.text for q in dated} <= {q.text for q in conv.questions}
    assert all(q.now == default_now(conv) for q in dated)


def test_a_thread_without_timestamps_gets_no_time_queries_and_a_note(tmp_path, local_embedder):
    thread = {
        "thread_id": "plain",
        "messages": [
            {"role": "user", "content": "My dogs are called Biscuit and Pepper."},
            {"role": "assistant", "content": "Noted: Biscuit and Pepper."},
        ],
        "facts": [{"text": "The dogs are Biscuit and Pepper.", "turn": 1}],
    }
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps(thread) + "\n", encoding="utf-8")
    conv = load_jsonl(path)[0]
    assert time_queries(conv) == [] and dated_questions(conv) == [] and default_now(conv) is None
    res = run_threads([conv], local_embedder, representations=["hybrid_time"], query_sets=["facts", "time"])
    assert res.config["data_notes"]["threads without timestamps (no time queries)"] == 1
    assert [r["query_set"] for r in res.rows] == ["facts"]  # the fact still searches, with no window


def test_time_aware_search_equals_the_default_without_time_words(tmp_path, local_embedder):
    """Facts and questions without a time expression search exactly as hybrid_default (per query, every metric)."""
    convs = load_jsonl(write_synthetic(tmp_path))
    reps = ["hybrid_default", "hybrid_time", "hybrid_time_strip", "hybrid_time_pm1d"]
    res = run_threads(convs, local_embedder, representations=reps, query_sets=["facts", "qa", "composite"])
    by = {(r["representation"], r["query_id"]): r for r in res.per_query}
    checked = 0
    for (rep, qid), row in by.items():
        if rep == "hybrid_default":
            continue
        base = by[("hybrid_default", qid)]
        assert {k: v for k, v in row.items() if k != "representation"} == {
            k: v for k, v in base.items() if k != "representation"
        }, qid
        checked += 1
    assert checked == 3 * len(res.per_query) // 4


def test_the_window_filters_the_thread_before_ranking(tmp_path, local_embedder):
    """Every candidate lies inside the window, and a window with fewer pieces than k returns only those."""
    conv = load_jsonl(write_synthetic(tmp_path))[0]  # "home": one turn a day, 1–6 October 2026
    ix = ConversationIndex(conv, local_embedder)
    window = find_time("What did I book on 3 October 2026?", datetime(2026, 10, 20, 12))
    assert window is not None
    parts, q = ix.query("What did I book?", split=True)
    store = ix.exact_store(ix.default_stored)
    fusion = with_candidates(RUNTIME_DEFAULT, RUNTIME_DEFAULT.candidates, RUNTIME_DEFAULT.lexical_floor)
    (c,) = hybrid_candidates(store, conv.id, parts, q, k=50, fusion=fusion, where=window.where())
    inside = {p.id for p in ix.pieces if window.contains(p.timestamp)}
    assert inside and {rid for rid, _ in c.ranked} == inside
    (everything,) = hybrid_candidates(store, conv.id, parts, q, k=50, fusion=fusion)
    assert len(everything.ranked) > len(inside)


def test_hybrid_time_finds_the_window_the_default_misses(tmp_path, local_embedder):
    conv = load_jsonl(write_synthetic(tmp_path))[0]
    ix = ConversationIndex(conv, local_embedder)
    now = datetime(2026, 10, 5, 20)  # the evening after the Lisbon turn (5 October, 08:00)
    message = "What did I say this morning?"
    stamp = {t.index: t.timestamp for t in conv.turns}
    timed = TIME_REPRESENTATIONS["hybrid_time"](ix, message, now=now)
    top = int(ix.piece_section[timed.groups[0].items[0]])
    assert stamp[top].date() == now.date()
    assert all(stamp[int(s)] < now + timedelta(seconds=1) for s in ix.piece_section[timed.groups[0].items])
    strip = TIME_REPRESENTATIONS["hybrid_time_strip"](ix, message, now=now)
    assert strip.groups[0].part == message  # the group keeps the part as written
    assert not np.array_equal(ix.query(message, split=True)[1], ix.query("What did I say?", split=True)[1])


def test_recency_reorders_inside_the_candidates_by_the_decayed_score(tmp_path, local_embedder):
    conv = load_jsonl(write_synthetic(tmp_path))[0]
    ix = ConversationIndex(conv, local_embedder)
    now = datetime(2026, 10, 7, 12)
    plain = TIME_REPRESENTATIONS["hybrid_asof"](ix, "What did I book?", now=now).groups[0]
    recent = TIME_REPRESENTATIONS["hybrid_recency_7d"](ix, "What did I book?", now=now).groups[0]
    assert sorted(plain.items.tolist()) == sorted(recent.items.tolist())  # the same candidates
    fused = dict(zip(plain.items.tolist(), plain.scores.tolist(), strict=True))
    for item, score in zip(recent.items.tolist(), recent.scores.tolist(), strict=True):
        age_days = (now - ix.pieces[item].timestamp).total_seconds() / 86400
        assert score == pytest.approx(fused[item] * 0.5 ** (age_days / 7))
    assert recent.scores.tolist() == sorted(recent.scores.tolist(), reverse=True)
    assert recent.items.tolist() != plain.items.tolist()


def test_cli_runs_the_time_set(tmp_path, monkeypatch, local_embedder, capsys):
    from ctxret.cli import evaluate as cli

    monkeypatch.setattr(cli, "make_embedder", lambda args: local_embedder)
    out = tmp_path / "time.json"
    code = cli.main(
        [
            "eval",
            "threads",
            str(write_synthetic(tmp_path)),
            "--query-sets",
            "time",
            "--representations",
            "hybrid_default,hybrid_time",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "Top hit in window" in text and "Time-aware search" in text
    rows = {r["representation"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["hybrid_time"]["top1_window"] >= rows["hybrid_default"]["top1_window"]
    assert rows["hybrid_time"]["top1_window"] == 1.0
