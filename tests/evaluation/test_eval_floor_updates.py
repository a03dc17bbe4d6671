"""The harness's floor report (ctxret.evaluation.floorset: the ``foreign`` set), the ``updates`` set
(ctxret.evaluation.updates) and the ranking comparison (ctxret.evaluation.ranking), on two small LoCoMo-format
conversations written here, with the real model."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta

import numpy as np
import pytest
from ctxret.evaluation.datasets import load_threads
from ctxret.evaluation.floorset import floor_report, foreign_queries
from ctxret.evaluation.hybrid import group_floor_mask
from ctxret.evaluation.index import Ranked
from ctxret.evaluation.threads import run_threads
from ctxret.evaluation.updates import MIN_GAP, UPDATE_TEMPLATES, UpdateQuery, score_update, update_thread

#: Two conversations of two speakers each: (speaker, text) per session.
SESSIONS = {
    "c1": (
        "Ana",
        "Ben",
        [
            [
                "I started pottery classes on Monday.",
                "That sounds fun! What are you making first?",
                "A small blue bowl.",
            ],
            ["My brother Tomas is visiting from Madrid.", "How long is he staying?", "Two weeks, until the 20th."],
            ["We went hiking at Eagle Lake.", "Did you see the waterfall?", "Yes, it was frozen!"],
            ["I got a promotion at the bakery.", "Congratulations, what is the new role?", "Head of pastry."],
            ["The bowl cracked in the kiln.", "Oh no, will you make another?", "A green one this time."],
            ["Tomas flew back home yesterday.", "Did he enjoy the trip?", "He loved the lake."],
        ],
    ),
    "c2": (
        "Kai",
        "Lia",
        [
            ["I adopted a parrot called Mango.", "Does Mango talk yet?", "Only whistles so far."],
            ["I'm training for a 10k race.", "When is the race?", "In late April."],
            ["My laptop died during the exam.", "Did you pass anyway?", "The teacher let me retake it."],
            ["We painted the kitchen yellow.", "Bold choice! Do you like it?", "It feels sunny now."],
            ["Mango said his first word.", "What was it?", "Hello, of course."],
            ["I finished the 10k in 52 minutes.", "That's a great time!", "I want to try a half marathon."],
        ],
    ),
}
QUESTIONS = {
    "c1": [
        ("What is Ana making in pottery class?", ["D1:3"]),
        ("Where did Ana go hiking?", ["D3:1"]),
        ("What is Ana's new role at the bakery?", ["D4:3"]),
    ],
    "c2": [
        ("What is the name of Kai's parrot?", ["D1:1"]),
        ("How fast did Kai run the 10k?", ["D6:1"]),
        ("What colour did they paint the kitchen?", ["D4:1"]),
    ],
}


def _write(folder):
    start = datetime(2024, 3, 4, 18, 0)
    for cid, (a, b, sessions) in SESSIONS.items():
        conv = {"speaker_a": a, "speaker_b": b}
        for n, utterances in enumerate(sessions, start=1):
            when = start + timedelta(days=5 * n)
            conv[f"session_{n}_date_time"] = when.strftime("%-I:%M %p on %-d %B, %Y").lower().replace("pm", "pm")
            conv[f"session_{n}"] = [
                {"speaker": (a, b)[j % 2], "dia_id": f"D{n}:{j + 1}", "text": text} for j, text in enumerate(utterances)
            ]
        obs = {"session_1_observation": {a: [[sessions[0][0], "D1:1"]]}}
        qa = [{"question": q, "answer": "x", "evidence": ev, "category": 1} for q, ev in QUESTIONS[cid]]
        (folder / f"{cid}.json").write_text(json.dumps({"sample_id": cid, "conversation": conv, **obs, "qa": qa}))
    return folder


@pytest.fixture(scope="module")
def conversations(tmp_path_factory):
    return load_threads(_write(tmp_path_factory.mktemp("two-convs")))


def test_the_fixture_reads_as_locomo(conversations):
    assert [c.id for c in conversations] == ["c1", "c2"]
    assert all(t.timestamp is not None for c in conversations for t in c.turns)
    assert [len(c.questions) for c in conversations] == [3, 3]


def test_foreign_queries_are_the_other_conversations_questions(conversations):
    c1, c2 = conversations
    got = foreign_queries(c1, conversations)
    assert [q.text for q in got] == [q.text for q in c2.questions]
    assert all(not q.evidence and not q.gold and q.id.startswith("c1/foreign/") for q in got)
    assert len(foreign_queries(c1, conversations, limit=1)) == 1


def test_update_threads_insert_both_statements_in_order_and_keep_the_data(conversations):
    conv = conversations[0]
    changed, queries = update_thread(conv, seed=0)
    assert len(queries) == len(UPDATE_TEMPLATES)
    assert update_thread(conv, seed=0)[1] == queries  # fixed by the seed
    where = {}
    for t in changed.turns:
        originals = [s.text for s in t.sources if not changed.unit_of(t.index, s.ordinal).startswith("U")]
        assert originals == [s.text for s in next(u for u in conv.turns if u.index == t.index).sources]
        assert [s.ordinal for s in t.sources] == list(range(len(t.sources)))
        for s in t.sources:
            where[changed.unit_of(t.index, s.ordinal)] = (t, s)
    order = [t.index for t in sorted(conv.turns, key=lambda t: t.timestamp)]
    for n, (q, tpl) in enumerate(zip(queries, UPDATE_TEMPLATES, strict=True)):
        (t_old, s_old), (t_new, s_new) = where[q.old], where[q.new]
        assert s_old.text == tpl.old and s_new.text == tpl.new and s_old.name == s_new.name
        assert order.index(t_new.index) - order.index(t_old.index) >= MIN_GAP
        assert s_old.name in q.text and q.template == tpl.id and q.old == f"U{n}:old"


def test_a_fact_changed_twice_is_three_statements_of_one_speaker_in_order(conversations):
    conv = conversations[1]
    changed, queries = update_thread(conv, seed=0, twice=True)
    assert len(queries) == len(UPDATE_TEMPLATES) and update_thread(conv, seed=0, twice=True)[1] == queries
    assert [q.id for q in queries] != [q.id for q in update_thread(conv, seed=0)[1]]  # its own ids: w<n>, not u<n>
    where = {changed.unit_of(t.index, s.ordinal): (t, s) for t in changed.turns for s in t.sources}
    order = [t.index for t in sorted(conv.turns, key=lambda t: t.timestamp)]
    for n, (q, tpl) in enumerate(zip(queries, UPDATE_TEMPLATES, strict=True)):
        assert (q.old, q.between, q.new) == (f"U{n}:old", (f"U{n}:new",), f"U{n}:again")
        (t1, s1), (t2, s2), (t3, s3) = where[q.old], where[q.between[0]], where[q.new]
        assert (s1.text, s2.text, s3.text) == (tpl.old, tpl.new, tpl.again) and s1.name == s2.name == s3.name
        assert order.index(t2.index) - order.index(t1.index) >= MIN_GAP
        assert order.index(t3.index) - order.index(t2.index) >= MIN_GAP
    originals = [
        s.text for t in changed.turns for s in t.sources if not changed.unit_of(t.index, s.ordinal).startswith("U")
    ]
    assert originals == [s.text for t in conv.turns for s in t.sources]
    short = replace(conv, turns=conv.turns[: 2 * MIN_GAP])  # too few sections for three statements MIN_GAP apart
    assert update_thread(short, seed=0, twice=True)[1] == []


class _Units:
    def __init__(self, units):
        self.piece_units = units


def test_score_update_wants_the_latest_above_every_earlier_statement():
    q = UpdateQuery("c/w0", "What car does Ana drive?", "U0:old", "U0:again", "car", ("U0:new",))
    ix = _Units([{"U0:old"}, {"U0:new"}, {"U0:again"}, {"D1:1"}])

    def group(*items):
        return [Ranked("q", np.array(items), np.linspace(1.0, 0.5, len(items)), None)]

    assert score_update(ix, group(2, 0, 1, 3), q, 5) == {
        "latest_first": 1.0,
        "latest_top1": 1.0,
        "first_top1": 0.0,
        "both_kept": 1.0,
        "recall": 1.0,
    }
    assert score_update(ix, group(1, 2, 0), q, 5)["latest_first"] == 0.0  # the value between above the latest
    assert score_update(ix, group(0, 2, 1), q, 5)["first_top1"] == 1.0
    assert score_update(ix, group(2, 3), q, 5)["latest_first"] == 1.0  # the earlier ones not in the group
    assert score_update(ix, group(3, 0, 1, 2), q, 3)["latest_first"] == 0.0  # the latest not in the first k


def test_group_floor_mask_decides_the_part_on_its_first_k_hits():
    cos = np.array([0.25, 0.2, 0.18, 0.4])
    idf = np.zeros(4)
    assert not group_floor_mask(cos, idf, 0.3, 0.3, k=3).any()  # the 0.4 hit is fourth: no answer in the first 3
    assert group_floor_mask(cos, idf, 0.3, 0.3, k=4).tolist() == [True, True, True, True]  # down to 0.15
    assert group_floor_mask(cos, idf, None, 0.3, k=1).all()
    lifted = group_floor_mask(np.array([0.05, 0.4, 0.2]), idf[:3], 0.3, 0.3, k=3, lifted={0: 1})
    assert lifted.tolist() == [True, True, True]  # a lifted answer stands with the question it was lifted above


def test_floor_report_pairs_the_floor_with_no_floor():
    rows = []
    for i, (none, floored, emptied) in enumerate([(1.0, 1.0, 0.0), (0.5, 0.0, 1.0), (1.0, 1.0, 0.0), (0.0, 0.0, 0.0)]):
        rows.append(
            {
                "conversation": "c",
                "representation": "hybrid_default",
                "query_set": "qa",
                "query_id": str(i),
                "recall": none,
                "recall_floor": floored,
                "recall_floor_cut": floored,
                "emptied": emptied,
                "emptied_cut": emptied,
            }
        )
    rows += [
        {
            "conversation": "c",
            "representation": "hybrid_default",
            "query_set": "foreign",
            "query_id": f"f{i}",
            "emptied": float(i % 2),
            "emptied_cut": 0.0,
        }
        for i in range(4)
    ]
    report = floor_report(rows)
    qa = next(r for r in report if r["query_set"] == "qa" and r["rule"] == "part")
    assert qa["peer_value"] == pytest.approx(0.625) and qa["system_value"] == pytest.approx(0.5)
    assert qa["relative_cost"] == pytest.approx(0.2) and qa["emptied"] == pytest.approx(0.25)
    foreign = {r["rule"]: r["emptied"] for r in report if r["query_set"] == "foreign"}
    assert foreign == {"part": 0.5, "cut": 0.0}


@pytest.mark.slow
def test_a_run_reports_the_floor_the_updates_and_the_ranking_steps(conversations, local_embedder):
    res = run_threads(
        conversations,
        local_embedder,
        representations=["hybrid_default", "hybrid_before"],
        query_sets=["facts", "qa", "foreign", "updates", "updates_twice"],
    )
    assert res.config["counts"]["foreign"] == 6 and res.config["counts"]["updates"] == 2 * len(UPDATE_TEMPLATES)
    assert res.config["counts"]["updates_twice"] == 2 * len(UPDATE_TEMPLATES)
    sets = {r["query_set"] for r in res.config["floor_report"]}
    assert {"qa", "facts", "foreign"} <= sets
    foreign = next(r for r in res.config["floor_report"] if r["query_set"] == "foreign" and r["rule"] == "part")
    assert foreign["n"] == 6 and 0.0 <= foreign["emptied"] <= 1.0
    updates = [r for r in res.per_query if r["query_set"] == "updates"]
    assert {r["representation"] for r in updates} == {"hybrid_default", "hybrid_before"}
    assert all(set(r) >= {"latest_first", "latest_top1", "both_kept", "recall"} for r in updates)
    compared = {(r["query_set"], r["metric"]) for r in res.config["ranking_comparison"]}
    assert {("qa", "question_top"), ("updates", "latest_first"), ("facts", "top1_section")} <= compared
    assert {("updates_twice", "latest_first"), ("updates_twice", "first_top1")} <= compared
    qa = [r for r in res.per_query if r["query_set"] == "qa"]
    assert all({"recall_floor", "emptied", "top1_evidence", "question_top"} <= set(r) for r in qa)
