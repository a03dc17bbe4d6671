"""The ``distracted`` query set (ctxret.evaluation.distracted): each question after two statements of its thread and
a topic switch; its construction, its scoring and its report, on the synthetic threads and the real model."""

from __future__ import annotations

import math

import pytest
from ctxret.cli import evaluate as cli
from ctxret.evaluation.datasets import QUERY_SETS, load_jsonl, load_threads
from ctxret.evaluation.distracted import (
    DISTRACTED,
    MIN_WORDS,
    SWITCH_PHRASES,
    DistractedQuery,
    _question_part,
    distracted_queries,
)
from ctxret.evaluation.threads import run_threads
from test_eval_threads import write_synthetic


def nonws(text: str) -> str:
    return "".join(text.split())


def test_a_distracted_message_is_two_statements_a_switch_and_the_question(tmp_path):
    home = load_jsonl(write_synthetic(tmp_path))[0]
    made = distracted_queries(home, seed=0)
    assert DISTRACTED in QUERY_SETS
    assert [d.question.id for d in made] == [q.id for q in home.questions]
    for d in made:
        flat = nonws(d.text)
        phrase = next(p for p in SWITCH_PHRASES if flat[d.statements_end :].startswith(nonws(p)))
        assert flat[d.question_at :].lower() == nonws(d.question.text).lower()
        assert d.question_at == d.statements_end + len(nonws(phrase))
        statements = d.text[: d.text.index(phrase)]
        # none of the question's evidence (its turns) is among the statements; both are long utterances
        evidence_texts = [s.text for t in home.turns if f"T{t.index}" in d.question.evidence for s in t.sources]
        assert not any(e.rstrip(".") in statements for e in evidence_texts)
        assert len(statements.split()) >= 2 * MIN_WORDS
    assert distracted_queries(home, seed=0) == made  # seeded
    assert distracted_queries(home, seed=1) != made
    assert distracted_queries(home, limit=1, seed=0) == made[:1]


def test_a_thread_with_too_few_long_utterances_gives_no_message(tmp_path):
    ops = load_jsonl(write_synthetic(tmp_path))[1]
    assert len(distracted_queries(ops)) == 1
    short = type(ops)(ops.id, ops.source, ops.turns[:1], ops.facts, ops.questions)
    assert distracted_queries(short) == []  # its one turn has a single utterance of 12 words or more


def test_the_question_part_and_whether_it_is_merged():
    dq = DistractedQuery("q", "One two. Three four. Anyway, who?", None, len("Onetwo.Threefour."), 25)  # type: ignore[arg-type]
    assert _question_part(["One two.", "Three four.", "Anyway, who?"], dq) == (2, False)
    assert _question_part(["One two.", "Three four. Anyway, who?"], dq) == (1, True)
    assert _question_part(["One two. Three four. Anyway, who?"], dq) == (0, True)


@pytest.fixture(scope="module")
def distracted_run(tmp_path_factory, local_embedder):
    path = write_synthetic(tmp_path_factory.mktemp("distracted"))
    reps = ["hybrid_default", "late_only", "bm25"]
    return path, run_threads(load_threads(path), local_embedder, representations=reps, query_sets=[DISTRACTED])


def test_distracted_rows_pair_the_question_group_with_the_question_alone_and_one_search(distracted_run):
    _, res = distracted_run
    rows = {r["representation"]: r for r in res.rows if r["query_set"] == DISTRACTED}
    assert set(rows) == {"hybrid_default", "late_only", "bm25"}
    for rep, row in rows.items():
        assert row["n"] == 4 and res.config["counts"][DISTRACTED] == 4
        for key in ("recall_at_5", "recall_alone", "recall_whole", "merged"):
            assert 0.0 <= row[key] <= 1.0, (rep, key)
        assert math.isclose(row["kept"], row["recall_at_5"] / row["recall_alone"])
    assert rows["hybrid_default"]["merged"] == 0.0  # every question its own part
    assert rows["bm25"]["merged"] == 1.0  # one ranking for the whole message
    # the whole-message search is the same baseline for every representation
    assert len({r["recall_whole"] for r in rows.values()}) == 1
    paired = [c for c in res.config["distracted_comparison"] if c["system"] == "hybrid_default (distracted)"]
    assert [c["peer"] for c in paired] == ["asked alone", "one whole-message search"]
    assert all(c["diff"]["n"] == 4 for c in paired)


def test_eval_threads_prints_the_distracted_report(distracted_run, monkeypatch, local_embedder, capsys):
    path, _ = distracted_run
    monkeypatch.setattr(cli, "make_embedder", lambda args: local_embedder)
    argv = ["eval", "threads", str(path), "--query-sets", "distracted", "--representations", "hybrid_default"]
    code = cli.main([*argv, "--quiet"])
    out = capsys.readouterr().out
    assert code == 0
    assert "4 distracted queries" in out
    assert "Merged into a statement" in out and "one whole-message search" in out
