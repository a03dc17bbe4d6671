"""``ctxret eval docs``: the BEIR reader, the metrics by hand, the peers against bm25s and LangChain's rule,
the document rule, and a folder of markdown end to end on the real model and the product's own index."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from ctxret.errors import InputError
from ctxret.evaluation.docs import (
    Peers,
    budget_recall_docs,
    load_beir,
    load_docs,
    load_folder,
    mrr_at,
    ndcg_at,
    open_product_index,
    read_qrels,
    recall_at,
    run_docs,
)
from ctxret.evaluation.peers import BM25sPeer
from ctxret.query.documents import document_key, rank_documents
from ctxret.results import Hit

DATA = Path(__file__).resolve().parents[1] / "data"
BEIR = DATA / "docs_beir"
FOLDER = DATA / "docs_folder"
SHARED_SCIFACT = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "scifact-dev"


# -- the readers ----------------------------------------------------------------------------------


def test_beir_reader_skips_the_header_and_counts_missing_ids():
    ds = load_beir(BEIR, "test")
    assert [d.id for d in ds.documents] == ["d1", "d2", "d3", "d4", "d5", "d6"]
    assert ds.documents[5].title is None and ds.documents[0].full_text.startswith("Vitamin D and bone density\n\n")
    # q5's only document is missing (dropped), q9 is not a query, d9 and d404 are not documents; d5 scores 0
    assert [q.id for q in ds.queries] == ["q1", "q2", "q3", "q4"]
    assert ds.queries[2].relevant == {"d3": 1.0}
    assert ds.queries[3].relevant == {"d4": 2.0}
    assert ds.notes == {
        "qrels naming a document not in corpus.jsonl": 2,
        "qrels naming a query not in queries.jsonl": 1,
        "queries left with no relevant document": 1,
    }


def test_qrels_with_and_without_a_header_read_the_same(tmp_path):
    body = "q1\td1\t1\nq2\td2\t2\n"
    (tmp_path / "a.tsv").write_text("query-id\tcorpus-id\tscore\n" + body)
    (tmp_path / "b.tsv").write_text(body)
    assert read_qrels(tmp_path / "a.tsv") == read_qrels(tmp_path / "b.tsv") == {"q1": {"d1": 1.0}, "q2": {"d2": 2.0}}
    (tmp_path / "c.tsv").write_text(body + "q3\td3\tmany\n")
    with pytest.raises(InputError, match="not a number"):
        read_qrels(tmp_path / "c.tsv")


def test_beir_reader_names_the_missing_split_and_the_splits_there():
    assert [q.id for q in load_beir(BEIR, "dev").queries] == ["q1", "q2"]
    with pytest.raises(InputError, match=r"no qrels/train\.tsv; this folder has --split dev, test"):
        load_beir(BEIR, "train")


def test_folder_reader_ids_are_relative_paths_and_missing_files_are_counted():
    ds = load_docs(FOLDER)
    assert [d.id for d in ds.documents] == ["deploys.md", "guides/backups.txt", "guides/style.md", "oncall.md"]
    assert [q.id for q in ds.queries] == ["q1", "q2", "backup"]
    assert ds.queries[2].relevant == {"guides/backups.txt": 1.0}
    assert ds.notes == {"relevant files not in the folder": 1, "queries left with no relevant document": 1}


def test_folder_reader_without_a_queries_file_says_what_to_give(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\ntext\n")
    with pytest.raises(InputError, match="--queries FILE"):
        load_folder(tmp_path)


# -- the metrics, by hand -------------------------------------------------------------------------


def test_ndcg_recall_mrr_by_hand():
    ranked = ["a", "b", "c", "d"]
    rel = {"b": 1.0, "d": 2.0}
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ndcg_at(ranked, rel, 10) == pytest.approx(dcg / idcg)  # 0.5672
    assert ndcg_at(ranked, rel, 10) == pytest.approx(0.56720, abs=1e-5)
    assert ndcg_at(ranked, rel, 2) == pytest.approx((1 / math.log2(3)) / idcg)
    assert ndcg_at(["b", "d"], {"b": 1.0}, 10) == 1.0
    assert recall_at(ranked, rel, 2) == 0.5
    assert recall_at(ranked, rel, 100) == 1.0
    assert mrr_at(ranked, rel, 10) == 0.5
    assert mrr_at(ranked, rel, 1) == 0.0


def test_equal_budget_recall_stops_at_the_first_document_that_does_not_fit():
    nbytes = {"a": 1500, "b": 600, "c": 100}
    assert budget_recall_docs(["a", "b", "c"], {"c": 1.0}, nbytes, 2000) == 0.0  # b does not fit: stop
    assert budget_recall_docs(["c", "a"], {"a": 1.0, "c": 1.0}, nbytes, 2000) == 1.0
    assert budget_recall_docs(["a", "c"], {"c": 1.0, "z": 1.0}, nbytes, 8000) == 0.5


# -- the peers ------------------------------------------------------------------------------------


def test_peer_bm25s_is_bm25s_over_whole_documents():
    bm25s = pytest.importorskip("bm25s")
    import Stemmer

    ds = load_beir(BEIR, "test")
    texts = [d.full_text for d in ds.documents]
    stemmer = Stemmer.Stemmer("english")
    theirs = bm25s.BM25()
    theirs.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    ours = BM25sPeer(texts)
    for q in ds.queries:
        toks = bm25s.tokenize([q.text], stopwords="en", stemmer=stemmer, show_progress=False)
        docs, scores = theirs.retrieve(toks, k=len(texts), show_progress=False)
        want = {int(i): float(s) for i, s in zip(docs[0], scores[0], strict=True) if s > 0}
        got = dict(ours.search(q.text))
        assert got.keys() == want.keys(), q.text
        for i, s in got.items():
            assert s == pytest.approx(want[i], rel=1e-5)


def _toy_peers() -> Peers:
    ds = load_beir(BEIR, "test")
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(len(ds.documents), 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return Peers([d.id for d in ds.documents], BM25sPeer([d.full_text for d in ds.documents]), vecs)


def test_ensemble_rrf_and_query_fusion_follow_their_rules_on_a_fixture():
    peers = _toy_peers()
    q = "Statins muscle pain vitamin bone"
    qv = np.ones(8, np.float32) / math.sqrt(8)
    lex = peers.bm25_top(q, 4)
    den = peers.dense_top(qv, 4)
    got = peers.rankings(q, qv, 4)
    # LangChain: Σ 0.5 / (rank + 60), a stable sort of the union in first-appearance order (BM25 first)
    score: dict[int, float] = {}
    for ranking in ([i for i, _ in lex], [i for i, _ in den]):
        for r, i in enumerate(ranking, start=1):
            score[i] = score.get(i, 0.0) + 0.5 / (r + 60)
    union = list(dict.fromkeys([i for i, _ in lex] + [i for i, _ in den]))
    want = sorted(union, key=lambda i: -score[i])[:4]
    assert got["peer_ensemble_rrf"] == [peers.ids[i] for i in want]
    # LlamaIndex relative_score: min-max each list, × 0.5, summed
    fused: dict[int, float] = {}
    for hits in (den, lex):
        lo, hi = min(s for _, s in hits), max(s for _, s in hits)
        for i, s in hits:
            fused[i] = fused.get(i, 0.0) + 0.5 * (s - lo) / (hi - lo)
    assert got["peer_query_fusion"] == [peers.ids[i] for i in sorted(fused, key=lambda i: -fused[i])[:4]]
    assert got["peer_bm25s"][0] in ("d1", "d2")


# -- the document rule ----------------------------------------------------------------------------


def _hit(pid: str, doc: str, score: float, thread: str | None = None) -> Hit:
    return Hit(pid, pid, score, {"thread_id": thread or doc, "doc_id": doc, "turn_id": f"{doc}#1"})


def test_rank_documents_rules():
    part1 = [_hit("p1", "A", 0.9), _hit("p2", "B", 0.8), _hit("p3", "B", 0.7), _hit("p4", "C", 0.2)]
    part2 = [_hit("p5", "C", 0.95), _hit("p6", "A", 0.1)]
    assert [d.doc_id for d in rank_documents([part1], rule="max")] == ["A", "B", "C"]  # first appearance
    assert [d.doc_id for d in rank_documents([part1])] == ["B", "A", "C"]  # default: 0.8 + 0.25 * 0.7 > 0.9
    assert [d.doc_id for d in rank_documents([part1], rule="top2", alpha=0.5)] == ["B", "A", "C"]  # 1.15 > 0.9
    assert rank_documents([part1], rule="sum")[0].score == pytest.approx(1.5)
    both = rank_documents([part1, part2], rule="max")
    assert [d.doc_id for d in both] == ["C", "A", "B"] and both[0].score == 0.95
    assert [h.id for h in both[1].hits] == ["p1", "p6"]
    summed = rank_documents([part1, part2], rule="max", across="sum")
    assert summed[0].doc_id == "C" and summed[0].score == pytest.approx(1.15)
    assert len(rank_documents([part1, part2], k=2)) == 2
    assert rank_documents([part1])[0].score == pytest.approx(0.8 + 0.25 * 0.7)
    with pytest.raises(InputError, match="rule must be one of"):
        rank_documents([part1], rule="mean")


def test_document_key_falls_back_to_the_turn_for_chat():
    chat = Hit("x", "x", 1.0, {"thread_id": "t", "turn_id": "t#3"})
    assert document_key(chat) == ("t", "t#3")
    assert document_key(_hit("p", "D", 1.0, thread="kb")) == ("kb", "D")


# -- end to end: the product's index and search, on the real model ---------------------------------


def test_hybrid_default_is_the_products_own_search(local_embedder, tmp_path):
    ds = load_docs(FOLDER)
    res = run_docs(ds, local_embedder, cache_dir=str(tmp_path), depth=4)
    index = open_product_index(ds, local_embedder, str(tmp_path))  # the cached folder: nothing re-embedded
    try:
        assert index.stats()["threads"] == 4
        for q, ranked in zip(ds.queries, res.rankings["hybrid_default"], strict=True):
            want = [d.doc_id for d in rank_documents(index.search(q.text, k=4), k=4)]
            assert ranked == want
    finally:
        index.close()
    rows = {r["system"]: r for r in res.rows}
    assert set(rows) == {"hybrid_default", "peer_bm25s", "peer_dense", "peer_ensemble_rrf", "peer_query_fusion"}
    assert rows["hybrid_default"]["mrr_at_10"] == 1.0  # three easy questions, each about one file
    assert len(res.per_query["peer_dense"]["ndcg_at_10"]) == 3
    assert (tmp_path / next(p.name for p in tmp_path.glob("peer-dense-*.npz"))).is_file()


def test_cli_on_a_folder_of_markdown(local_embedder, capsys, tmp_path):
    from ctxret.cli.evaluate import main

    out_json = tmp_path / "out.json"
    assert main(["eval", "docs", str(FOLDER), "--no-cache", "--quiet", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "4 documents" in out and "3 queries" in out
    assert "relevant files not in the folder: 1" in out
    assert "Document ranking of hybrid_default: document score = best piece + 0.25 × second-best piece" in out
    assert "fusion of its pieces: convex w=0.5" in out  # a per-document search fuses at the documents' weight
    for peer in ("peer_bm25s", "peer_dense", "peer_ensemble_rrf", "peer_query_fusion"):
        assert f"| {peer}" in out
    saved = json.loads(out_json.read_text())
    assert {r["system"] for r in saved["rows"]} >= {"hybrid_default", "peer_bm25s"}
    assert len(saved["config"]["peer_comparison"]) == 4


def test_cli_bad_folder_exits_1_with_the_reason(capsys, tmp_path):
    from ctxret.cli.evaluate import main

    (tmp_path / "a.md").write_text("# A\n")
    assert main(["eval", "docs", str(tmp_path), "--no-cache"]) == 1
    assert "no queries file" in capsys.readouterr().err


@pytest.mark.skipif(not SHARED_SCIFACT.is_dir(), reason="../shared/data/scifact-dev is absent")
def test_scifact_dev_reads_as_beir():
    ds = load_beir(SHARED_SCIFACT, "train")
    assert len(ds.documents) == 5183 and len(ds.queries) == 809 and not ds.notes
