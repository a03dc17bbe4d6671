"""The harness measures memory the way it is written: ``eval threads --incremental`` and ``eval longmemeval``."""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from ctxret.evaluation.datasets import load_threads
from ctxret.evaluation.longmemeval import (
    BM25Okapi,
    latest_evidence_first,
    load_longmemeval,
    newer_evidence_first,
    parse_lme_date,
    ranking_metrics,
    run_longmemeval,
)
from ctxret.evaluation.memory import conversation_sessions, run_memory
from reliability.hash_embedder import HashEmbedder

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def _threads_file(tmp_path: Path) -> Path:
    thread = {
        "thread_id": "home",
        "messages": [
            {"role": "user", "content": "My dentist is Dr. Alvarez on Main Street.", "timestamp": "2026-01-02T09:00"},
            {"role": "assistant", "content": "Noted: Dr. Alvarez.", "timestamp": "2026-01-02T09:01"},
            {"role": "user", "content": "The plumber comes on Friday at noon.", "timestamp": "2026-01-09T10:00"},
            {"role": "assistant", "content": "Friday at noon, noted.", "timestamp": "2026-01-09T10:01"},
            {"role": "user", "content": "My sister Ana lands at 6 pm on Sunday.", "timestamp": "2026-01-16T11:00"},
            {"role": "assistant", "content": "Ana at 6 pm Sunday.", "timestamp": "2026-01-16T11:01"},
        ],
        "facts": [
            {"text": "The dentist is Dr. Alvarez", "turn": 1},
            {"text": "The plumber comes on Friday", "turn": 2},
        ],
        "questions": [{"question": "When does Ana land?", "turns": [3]}],
    }
    path = tmp_path / "threads.jsonl"
    path.write_text(json.dumps(thread) + "\n", encoding="utf-8")
    return path


def test_memory_protocol_writes_both_ways_and_finds_the_same(tmp_path):
    convs = load_threads(str(_threads_file(tmp_path)))
    sessions, where = conversation_sessions(convs[0])
    assert [len(s) for s in sessions] == [2, 2, 2] and all(m["id"] in where for s in sessions for m in s)
    res = run_memory(convs, HashEmbedder(), k=3)
    assert res.config["identical"] and res.config["structure"]["home"]["pieces"] == 6
    rows = {(r["representation"], r["query_set"]): r for r in res.rows}
    assert rows[("incremental", "qa")]["recall_at_3"] == rows[("one_call", "qa")]["recall_at_3"]
    assert rows[("one_call", "facts")]["n"] == 2
    assert all(c["diff"]["mean"] == 0 for c in res.config["comparison"])


def _lme_file(tmp_path: Path) -> Path:
    def turns(text: str, marked: bool = False) -> list[dict]:
        user = {"role": "user", "content": text, **({"has_answer": True} if marked else {})}
        return [user, {"role": "assistant", "content": "Noted, thanks for telling me."}]

    questions = [
        {
            "question_id": "q1",
            "question_type": "single-session-user",
            "question": "Where does my sister live?",
            "question_date": "2023/05/30 (Tue) 23:40",
            "answer": "Lisbon",
            "answer_session_ids": ["answer_1"],
            "haystack_session_ids": ["s_b", "answer_1", "s_a"],
            "haystack_dates": ["2023/05/20 (Sat) 10:00", "2023/05/10 (Wed) 09:00", "2023/05/01 (Mon) 08:00"],
            "haystack_sessions": [
                turns("I bought a red bike for the commute."),
                turns("My sister moved to Lisbon last spring.", marked=True),
                turns("The garden needs new tomato plants."),
            ],
        },
        {
            "question_id": "q2_abs",
            "question_type": "multi-session",
            "question": "What is my cat called?",
            "question_date": "2023/06/01 (Thu) 10:00",
            "answer": "unknown",
            "answer_session_ids": [],
            "haystack_session_ids": ["s_c"],
            "haystack_dates": ["2023/05/05 (Fri) 12:00"],
            "haystack_sessions": [turns("I went hiking in the Alps.")],
        },
    ]
    path = tmp_path / "lme.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(questions, f)
    return path


def test_longmemeval_loads_orders_sessions_and_scores_against_the_peers(tmp_path):
    questions = load_longmemeval(_lme_file(tmp_path))
    q = questions[0]
    assert [s[0] for s in q.sessions] == ["s_a", "answer_1", "s_b"]  # written in time order
    assert q.evidence_sessions == {"answer_1"} and q.evidence_turns == {"answer_1/0"}
    assert questions[1].abstention
    first = run_longmemeval(questions, HashEmbedder(), cache=tmp_path / "cache", depth=10)
    assert first.config["counts"]["abstention (not scored)"] == 1 and first.config["counts"]["pieces_embedded"] > 0
    systems = {r["system"] for r in first.rows}
    assert systems == {
        "ctxret_default",
        "ctxret_parts",
        "ctxret_no_latest",
        "ctxret_no_user",
        "paper_bm25",
        "peer_bm25s",
    }
    assert any(c["peer"] == "ctxret_no_latest" for c in first.config["comparison"])
    # one part: the best group and the parts rank by rank are the same ranking
    by = {(r["representation"], r["query_id"]): r for r in first.per_query}
    assert {k: v for k, v in by[("ctxret_parts", q.id)].items() if k != "representation"} == {
        k: v for k, v in by[("ctxret_default", q.id)].items() if k != "representation"
    }
    paper = next(r for r in first.rows if r["system"] == "paper_bm25" and r["type"] == "all")
    assert paper["recall_all@5"] == 1.0 and paper["n"] == 1
    again = run_longmemeval(questions, HashEmbedder(), cache=tmp_path / "cache", depth=10)
    assert again.config["counts"]["pieces_embedded"] == 0  # the store is the cache: every message is known
    assert [r for r in again.per_query] == [r for r in first.per_query]


def test_latest_evidence_first_needs_the_latest_session_on_top_of_the_earlier_ones(tmp_path):
    q = load_longmemeval(_lme_file(tmp_path))[0]
    dates = {sid: date for sid, date, _ in q.sessions}  # s_a, answer_1, s_b in time order
    q2 = replace(q, evidence_sessions=frozenset({"s_a", "s_b"}))
    assert dates["s_b"] > dates["s_a"]
    assert latest_evidence_first(["s_b", "x", "s_a"], q2) == 1.0
    assert latest_evidence_first(["s_a", "s_b"], q2) == 0.0  # the earlier statement first
    assert latest_evidence_first(["s_b"], q2) == 1.0  # the earlier one not ranked at all
    assert latest_evidence_first(["a", "b", "c", "d", "e", "s_b"], q2) == 0.0  # not in the top 5


def test_newer_evidence_first_at_any_depth_a_session_not_ranked_below(tmp_path):
    q = load_longmemeval(_lme_file(tmp_path))[0]
    q2 = replace(q, evidence_sessions=frozenset({"s_a", "s_b"}))  # s_b is the newer
    assert newer_evidence_first(["s_b", "x", "s_a"], q2) == 1.0
    assert newer_evidence_first(["a", "b", "c", "d", "e", "s_b"], q2) == 1.0  # below the top 5: still above s_a
    assert newer_evidence_first(["s_a", "s_b"], q2) == 0.0
    assert newer_evidence_first(["s_a", "x"], q2) == 0.0  # the newer not ranked at all


def test_ranking_metrics_are_the_papers():
    m = ranking_metrics(["a", "x", "b", "y", "z", "c"], frozenset({"a", "b", "c"}), "")
    assert m["recall_all@5"] == 0.0 and m["recall_any@5"] == 1.0 and m["recall_all@10"] == 1.0
    ideal = sum(1 / math.log2(i + 2) for i in range(3))
    assert m["ndcg_any@5"] == pytest.approx((1 + 1 / math.log2(4)) / ideal)
    assert parse_lme_date("2023/05/30 (Tue) 23:40").isoformat() == "2023-05-30T23:40:00"


def test_bm25okapi_matches_rank_bm25():
    corpus = [d.split(" ") for d in ("the cat sat on the mat", "the dog barked", "a cat and a dog", "nothing here")]
    query = "cat dog the".split(" ")
    mine = BM25Okapi(corpus).get_scores(query)
    try:
        from rank_bm25 import BM25Okapi as Reference
    except ImportError:  # the formula by hand for one document (rank_bm25 is not a dependency)
        import numpy as np

        n, avgdl = 4, sum(map(len, corpus)) / 4
        idf = {"cat": math.log(4 - 2 + 0.5) - math.log(2 + 0.5), "dog": math.log(4 - 2 + 0.5) - math.log(2 + 0.5)}
        raw_the = math.log(n - 2 + 0.5) - math.log(2 + 0.5)
        assert raw_the >= 0
        idf["the"] = raw_the
        doc = corpus[0]
        want = sum(idf[w] * doc.count(w) * 2.5 / (doc.count(w) + 1.5 * (0.25 + 0.75 * len(doc) / avgdl)) for w in query)
        np.testing.assert_allclose(mine[0], want)
        return
    import numpy as np

    np.testing.assert_allclose(mine, Reference(corpus).get_scores(query))


@pytest.mark.skipif(not (SHARED / "longmemeval-dev").exists(), reason="../shared/data is not beside the repo")
def test_the_dev_file_loads_whole():
    questions = load_longmemeval(SHARED / "longmemeval-dev")
    assert len(questions) == 138 and sum(q.abstention for q in questions) == 8
    assert all(q.evidence_sessions for q in questions if not q.abstention)
    assert all(a[1] <= b[1] for q in questions for a, b in zip(q.sessions, q.sessions[1:], strict=False))
