"""search per="document" / "section": one hit per document (or section) with a document score, in the core,
async, through both adapters and the CLI, on a real embedded Chroma store and the real local model."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest
from ctxret import ContextualIndex, InputError, SearchSettings
from ctxret.query.documents import PIECES_PER_DOCUMENT, rank_documents

RUNBOOK = (
    "# Deploys\nWe deploy the web app every Tuesday from the main branch; a deploy takes twelve minutes.\n\n"
    "## Rollback\nTo roll back a deploy, run make rollback and watch the deploy dashboard.\n\n"
    "## Canary\nA new deploy goes to five percent of traffic first; the canary lasts thirty minutes.\n\n"
    "# Monitoring\nDashboards live in Grafana; the pager rotates weekly.\n"
)
DOCS = [
    {"id": "runbook", "text": RUNBOOK},
    {"id": "release-notes", "text": "# Release notes\nVersion 2 changes how we deploy: deploys now need a ticket."},
    {"id": "cookbook", "text": "# Soup\nSimmer the onions for twenty minutes, then add the stock."},
    {"id": "travel", "text": "# Lisbon\nThe hotel in Alfama has breakfast included; check-in opens at 14:00."},
]
QUERY = "how do we deploy and roll back"


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on document ranking


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_documents(DOCS, thread_id="kb")
        ix.add_messages(
            [
                {"role": "user", "content": "Please deploy the billing service tonight."},
                {"role": "assistant", "content": "Deployed billing at 22:00; the rollback tag is v3.1."},
                {"role": "user", "content": "Book a table for two at eight."},
            ],
            thread_id="chat",
        )

    return fill


def _runbook_sections(idx: ContextualIndex) -> list[str]:
    pieces = [h for g in idx.search(QUERY, k=20, thread_id="kb", score_threshold=None) for h in g]
    return [h.id for h in pieces if h.metadata.get("doc_id") == "runbook"]


def test_sections_of_one_document_collapse_to_one_hit_ordered_by_the_rule(index):
    assert len(_runbook_sections(index)) >= 2  # the piece search returns several pieces of the runbook
    groups = index.search(QUERY, k=3, thread_id="kb", score_threshold=None, per="document")
    for g in groups:
        ids = [h.id for h in g]
        assert len(ids) == len(set(ids)) <= 3
        assert "runbook" in ids
        runbook = g.hits[ids.index("runbook")]
        assert runbook.metadata["doc_id"] == "runbook" and runbook.metadata["per"] == "document"
        assert len(runbook.pieces) >= 2 and runbook.metadata["piece_ids"] == [p.id for p in runbook.pieces]
        assert runbook.text == runbook.pieces[0].text  # the best piece's text
        # the score is the rule's: best piece + 0.25 x second best, on the group's scale
        best, second = (float(p.score) for p in runbook.pieces[:2])
        assert runbook.score == pytest.approx(best + 0.25 * second)
        assert runbook.scores["document"] == pytest.approx(runbook.score)
        assert [h.score for h in g] == sorted((h.score for h in g), reverse=True)


def test_the_result_is_the_rule_over_the_piece_search_with_enough_pieces(index):
    k = 2
    pieces = index.search(QUERY, k=PIECES_PER_DOCUMENT * k, thread_id="kb", score_threshold=None)
    expected = [[d.doc_id for d in rank_documents([g], k=k)] for g in pieces]
    got = index.search(QUERY, k=k, thread_id="kb", score_threshold=None, per="document")
    assert [[h.id for h in g] for g in got] == expected
    assert all(len(g) == k for g in got)  # k documents, not k pieces of one


def test_parents_give_the_whole_document(index):
    groups = index.search(QUERY, k=2, thread_id="kb", score_threshold=None, per="document", parents=True)
    runbook = next(h for g in groups for h in g if h.id == "runbook")
    assert runbook.parent_text is not None
    for text in ("twelve minutes", "make rollback", "five percent", "Grafana"):  # every section, in order
        assert text in runbook.parent_text
    assert runbook.parent_text.index("twelve") < runbook.parent_text.index("Grafana")
    assert "parents" in groups[0].stages


def test_per_section_keeps_one_hit_per_section_with_its_section_text(index):
    groups = index.search(QUERY, k=10, thread_id="kb", score_threshold=None, per="section", parents=True)
    hits = [h for h in groups[0]]
    keys = [(h.metadata["thread_id"], h.metadata["ctxret:turn_id"]) for h in hits]
    assert len(keys) == len(set(keys))
    assert sum(h.metadata["doc_id"] == "runbook" for h in hits) >= 2  # sections of one document stay apart
    for h in hits:  # the section's own text, not its whole document
        assert h.id == h.metadata["ctxret:turn_id"] and h.parent_text is not None and h.body in h.parent_text
        assert h.parent_text.count("[") == 1


def test_async_is_the_same(index):
    sync = index.search(QUERY, k=3, thread_id="kb", score_threshold=None, per="document", parents=True)
    got = asyncio.run(index.asearch(QUERY, k=3, thread_id="kb", score_threshold=None, per="document", parents=True))
    assert [[(h.id, h.score, h.parent_text) for h in g] for g in got] == [
        [(h.id, h.score, h.parent_text) for h in g] for g in sync
    ]


def test_a_thread_of_chat_turns_is_keyed_by_turn(index):
    groups = index.search("deploy billing rollback", k=5, thread_id="chat", score_threshold=None, per="document")
    hits = [h for g in groups for h in g]
    assert hits and all(h.metadata.get("doc_id") is None for h in hits)
    for g in groups:
        ids = [h.id for h in g]
        assert len(ids) == len(set(ids))
        assert all(h.id == h.metadata["ctxret:turn_id"] for h in g)
    with_parents = index.search(
        "deploy billing", k=2, thread_id="chat", score_threshold=None, per="document", parents=True
    )
    assert all("billing" in (h.parent_text or "") for h in with_parents[0].hits[:1])


def _fused(index: ContextualIndex, **options) -> dict[str, float]:
    groups = index.search("deploy the billing service and roll back", k=50, score_threshold=None, **options)
    return {h.id: h.scores["fused"] for g in groups for h in g}


def test_a_per_document_search_fuses_at_the_documents_lexical_weight(index):
    """per="document" fuses its candidates at document_lexical_weight (0.5), a piece search at lexical_weight
    (0.7): over the same candidates (they do not depend on the weights) a piece's fused score is linear in the
    weight, the piece search ignores the documents' weight, and lexical_weight= alone sets both."""
    pieces = {w: _fused(index, lexical_weight=w) for w in (0.3, 0.5, 0.7)}
    assert pieces[0.3].keys() == pieces[0.5].keys() == pieces[0.7].keys()
    for pid, f5 in pieces[0.5].items():
        assert f5 == pytest.approx((pieces[0.3][pid] + pieces[0.7][pid]) / 2, abs=1e-9)  # w * lexical + (1 - w) * dense
    assert any(pieces[0.3][p] != pytest.approx(pieces[0.7][p]) for p in pieces[0.5])
    assert _fused(index) == pieces[0.7] == _fused(index, document_lexical_weight=0.3)  # a piece search: 0.7
    docs = index.search("deploy the billing service and roll back", k=50, score_threshold=None, per="document")
    for g in docs:
        for h in g:  # the document's best piece, fused at 0.5: as the piece search at lexical_weight 0.5 gives it
            assert h.scores["fused"] == pytest.approx(pieces[0.5][h.metadata["piece_id"]], abs=1e-9)
    assert any(
        pieces[0.5][h.metadata["piece_id"]] != pytest.approx(pieces[0.7][h.metadata["piece_id"]])
        for g in docs
        for h in g
    )
    same = index.search(
        "deploy the billing service and roll back", k=50, score_threshold=None, per="document", lexical_weight=0.7
    )
    assert [h.scores["fused"] for g in same for h in g] == pytest.approx(
        [pieces[0.7][h.metadata["piece_id"]] for g in same for h in g], abs=1e-9
    )


def test_a_bad_value_names_the_choices(index):
    with pytest.raises(InputError, match="'piece', 'section', 'document'"):
        SearchSettings(per="doc")
    with pytest.raises(InputError, match="per must be one of"):
        index.search(QUERY, per="documents")


def test_langchain_retriever_and_vector_store(index):
    from langchain_ctxret import ContextualRetriever, ContextualVectorStore

    docs = ContextualRetriever(
        index=index, thread_id="kb", score_threshold=None, k=2, search_kwargs={"per": "document"}
    ).invoke(QUERY)
    ids = [d.id for d in docs if d.metadata["group"] == 0]
    assert "runbook" in ids and len(ids) == len(set(ids)) == 2
    core = index.search(QUERY, k=2, thread_id="kb", score_threshold=None, per="document")
    assert ids == [h.id for h in core[0]]  # the adapter keeps the document rule's order
    store = ContextualVectorStore(index=index)
    found = store.similarity_search(QUERY, k=2, thread_id="kb", per="document")
    assert len({d.id for d in found}) == len(found) and "runbook" in {d.id for d in found}
    via = store.as_retriever(search_kwargs={"k": 2, "thread_id": "kb", "per": "document"}).invoke(QUERY)
    assert [d.id for d in via] == [d.id for d in found]
    with pytest.raises(ValueError, match="per must be one of"):  # checked when the retriever is built
        ContextualRetriever(index=index, search_kwargs={"per": "chapter"})


def test_llamaindex_retriever_nodes_are_documents(index):
    pytest.importorskip("llama_index.core")
    from llamaindex_ctxret import ContextualRetriever

    r = ContextualRetriever(index, similarity_top_k=2, score_threshold=None, thread_id="kb", per="document")
    nodes = [n for n in r.retrieve(QUERY) if n.node.metadata["group"] == 0]
    assert len(nodes) == 2 and "runbook" in [n.node.node_id for n in nodes]
    runbook = next(n for n in nodes if n.node.node_id == "runbook")
    assert runbook.node.ref_doc_id == "runbook"
    assert [n.node.node_id for n in nodes] == [
        h.id for h in index.search(QUERY, k=2, thread_id="kb", score_threshold=None, per="document")[0]
    ]
    with pytest.raises(InputError, match="per must be one of"):
        ContextualRetriever(index, per="chapter")


def test_llamaindex_as_retriever_passes_per(index):
    pytest.importorskip("llama_index.core")
    from llamaindex_ctxret import ContextualStoreIndex

    li = ContextualStoreIndex(index)
    nodes = li.as_retriever(similarity_top_k=2, thread_id="kb", score_threshold=None, per="document").retrieve(QUERY)
    ids = [n.node.node_id for n in nodes if n.node.metadata["group"] == 0]
    assert "runbook" in ids and len(ids) == len(set(ids))


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``ctxret ARGS`` in this process (``tests/cli_inprocess.py``)."""
    from cli_inprocess import run_cli

    proc = run_cli(*args, cwd=cwd)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_cli_search_per_document(tmp_path):
    (tmp_path / "runbook.md").write_text(RUNBOOK, encoding="utf-8")
    (tmp_path / "soup.md").write_text(DOCS[2]["text"], encoding="utf-8")
    store = ["--store", str(tmp_path / "store")]
    assert _run("index", str(tmp_path / "runbook.md"), str(tmp_path / "soup.md"), *store, cwd=tmp_path).returncode == 0
    pieces = json.loads(_run("search", QUERY, "-k", "3", "--threshold", "none", "--json", *store, cwd=tmp_path).stdout)
    out = _run("search", QUERY, "-k", "3", "--threshold", "none", "--per", "document", "--json", *store, cwd=tmp_path)
    docs = json.loads(out.stdout)
    piece_docs = [h["metadata"].get("doc_id") for h in pieces["groups"][0]["hits"]]
    assert piece_docs.count(piece_docs[0]) >= 2  # pieces: several of one document
    ids = [h["id"] for h in docs["groups"][0]["hits"]]
    assert len(ids) == len(set(ids)) and all(h["metadata"]["per"] == "document" for h in docs["groups"][0]["hits"])
    bad = _run("search", QUERY, "--per", "chapter", *store, cwd=tmp_path)
    assert bad.returncode != 0 and "document" in bad.stderr
