"""A relevance users can threshold, on a small docs set of our own (``tests/data/handbook``: 20 markdown files of
a team handbook and runbook, with near-miss distractors, and 40 questions with their relevant files).

With the real local model and the default index (late chunking, hybrid search), for at least three quarters of
the questions the top hit is from a relevant file and scores a relevance of at least 0.5, while wrong hits
stay low. Before the refit on documents (LoCoMo-only coefficients), 13 of the 40 did (at the calibration's
pool of 20 hits per question, no floor).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.evaluation.calibrate import load_docs_set

HANDBOOK = Path(__file__).resolve().parents[1] / "data" / "handbook"


@pytest.fixture(scope="module")
def handbook(local_embedder):
    docs = load_docs_set(HANDBOOK)
    index = ContextualIndex(in_memory=True, collection=f"handbook-{uuid.uuid4().hex}", embedder=local_embedder)
    index.add_documents(docs.documents)
    yield index, docs
    index.close()


def test_the_fixture_is_what_the_docstring_says():
    files = sorted(p.name for p in HANDBOOK.glob("*.md"))
    queries = [json.loads(line) for line in (HANDBOOK / "queries.jsonl").read_text().splitlines() if line.strip()]
    assert len(files) == 20 and len(queries) == 40
    assert all(set(q["relevant"]) <= set(files) for q in queries)


def test_right_top_hits_score_at_least_one_half_for_three_quarters_of_the_questions(handbook):
    index, docs = handbook
    high, wrong = 0, []
    for _, question, relevant in docs.queries:
        groups = index.search(question)
        hits = [h for g in groups for h in g.hits]
        assert hits, question
        top = max(groups[0].hits, key=lambda h: h.relevance)  # what the adapters list first
        if top.metadata["doc_id"] in relevant and top.relevance >= 0.5:
            high += 1
        wrong += [h.relevance for h in hits if h.metadata["doc_id"] not in relevant]
    assert high >= 0.75 * len(docs.queries), f"{high} of {len(docs.queries)}"
    # the wrong hits among the top 5 stay low: most under 0.2, one in ten at most at 0.5 or more
    assert np.median(wrong) < 0.2 and np.mean(np.array(wrong) >= 0.5) <= 0.1, np.percentile(wrong, [50, 90, 99])


def test_load_docs_set_reads_a_beir_folder_and_cuts_the_corpus(tmp_path):
    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    corpus = [{"_id": f"d{i}", "title": f"T{i}", "text": f"text {i}"} for i in range(10)]
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps(c) for c in corpus))
    (beir / "queries.jsonl").write_text("\n".join(json.dumps({"_id": f"q{i}", "text": f"query {i}"}) for i in range(4)))
    qrels = "query-id\tcorpus-id\tscore\nq0\td1\t1\nq1\td2\t1\nq1\td3\t1\nq2\td9\t0\n"
    (beir / "qrels" / "train.tsv").write_text(qrels)
    full = load_docs_set(beir)
    assert sorted(q for q, _, _ in full.queries) == ["q0", "q1"]  # q2's only pair scores 0, q3 has none
    assert len(full.documents) == 10
    cut = load_docs_set(beir, limit_queries=1, distractors=2, seed=3)
    ((qid, text, relevant),) = cut.queries
    ids = {d["id"] for d in cut.documents}
    assert relevant <= ids and len(ids) == len(relevant) + 2 and text.startswith("query")
    assert load_docs_set(beir, limit_queries=1, distractors=2, seed=3) == cut  # seeded


def test_calibrate_fits_and_reports_per_dataset_on_documents(local_embedder):
    from ctxret.evaluation.calibrate import relevance_sweep

    docs = load_docs_set(HANDBOOK, limit_queries=12)
    res = relevance_sweep([], local_embedder, docs=[docs])
    rows = {r["relevance"]: r for r in res["separation"] if r["dataset"] == "handbook"}
    assert {"shipped before", "fitted, in sample", "held out by fold"} <= set(rows)
    assert 0.5 < rows["held out by fold"]["auc"] <= 1.0 and rows["held out by fold"]["n"] == 12 * 20
    assert {r["bin"] for r in res["reliability"]} >= {"0.0-0.1", "0.8-1.0"}
    assert "top_weight" in res["recommended"]["hybrid"]


def test_conversations_loaded_together_are_one_dataset_of_the_fit():
    from types import SimpleNamespace

    from ctxret.evaluation.calibrate import dataset_name

    locomo = [SimpleNamespace(source=f"/data/locomo-dev/{n}.json") for n in (26, 30, 41)]
    assert dataset_name(locomo) == "locomo-dev"  # five files, one dataset: it weighs as much as a docs set
    assert dataset_name([SimpleNamespace(source="/x/tuning_threads.jsonl")] * 2) == "tuning_threads"
