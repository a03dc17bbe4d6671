"""Inside each group the adapters list results in the search's ranking and show scores that follow it.

The ranking (the fused score, or a reranker's order) is the order the evaluation measures; listing a
group by the relevance instead put worse hits first (test_langchain_chain's cake question). So the
adapters keep the ranking and show the hit's ``relevance`` capped by the one shown above it
(``ctxret.query.relevance.shown_scores``): scores never rise down a group, a threshold keeps a prefix of
the ranking, the top hit shows its own relevance, and ``score_relevance`` keeps each hit's own.
"""

from __future__ import annotations

import importlib.util
import itertools
import uuid
from pathlib import Path

import pytest
from ctxret.query.relevance import scored_metadata, shown_order, shown_score, shown_scores
from ctxret.results import Group, Hit

ROOT = Path(__file__).resolve().parents[2]


def _hit(i: int, fused: float, relevance: float | None, rerank: float | None = None) -> Hit:
    scores = {"cosine": 0.5, "fused": fused}
    if relevance is not None:
        scores["relevance"] = relevance
    if rerank is not None:
        scores["rerank"] = rerank
    return Hit(f"h{i}", f"text {i}", rerank if rerank is not None else fused, {"header": ""}, scores)


def test_the_ranking_order_is_kept_and_the_shown_score_never_rises():
    hits = [_hit(0, 1.0, 0.55), _hit(1, 0.9, 0.59), _hit(2, 0.8, 0.55), _hit(3, 0.7, 0.10)]
    assert shown_order(hits) == hits
    assert shown_scores(hits) == [(0.55, "relevance"), (0.55, "relevance"), (0.55, "relevance"), (0.10, "relevance")]
    group = Group(0, "q", tuple(hits))
    metas = [scored_metadata(h, group, r, ["q"]) for r, h in enumerate(shown_order(group.hits))]
    assert [m["score"] for m in metas] == [0.55, 0.55, 0.55, 0.10]
    assert [m["score_relevance"] for m in metas] == [0.55, 0.59, 0.55, 0.10]
    assert [m["group_rank"] for m in metas] == [0, 1, 2, 3]
    assert all(m["score_scale"] == "relevance" and m["score_fused"] <= 1.0 for m in metas)


def test_a_reranked_group_keeps_its_order_and_shows_the_rerankers_score():
    hits = [_hit(0, 0.2, 0.9, rerank=3.0), _hit(1, 1.0, 0.1, rerank=2.0), _hit(2, 0.5, 0.5, rerank=1.0)]
    assert shown_order(hits) == hits
    assert [shown_score(h) for h in hits] == [(3.0, "rerank"), (2.0, "rerank"), (1.0, "rerank")]
    meta = scored_metadata(hits[0], Group(0, "q", tuple(hits)), 0, ["q"])
    assert meta["score"] == 3.0 and meta["score_scale"] == "rerank" and meta["score_relevance"] == 0.9


def test_hits_without_relevance_keep_the_ranking_order():
    hits = [_hit(0, 1.0, None), _hit(1, 0.5, None)]
    assert shown_order(hits) == hits and shown_score(hits[0]) is None


# -- the adapters, with the real local model ---------------------------------------------------------


def _quickstart():
    spec = importlib.util.spec_from_file_location("langchain_quickstart", ROOT / "examples" / "langchain_quickstart.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QUESTION = "When does my flight to Lisbon leave? What time is the vet appointment for my dog?"
DOCS = {
    "rollback": "# Deploys\n## Rollback\nRun deploy.sh --rollback, then purge the CDN cache.\n",
    "oncall": "# On call\nPriya Raman is on call for platform this week; Tomasz covers Thursday.\n",
    "flight": "The flight to Lisbon leaves at 09:40 from Berlin Brandenburg.",
    "vet": "Biscuit's vaccinations are on Thursday at Green Paws.",
    "mobile": "# Mobile\n## Halting a bad release\nHalt the staged rollout; a mobile release cannot be rolled back.\n",
}


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the tests assert on the orders the real model gives


@pytest.fixture(scope="module")
def index_options():
    return {"in_memory": True, "collection": f"order-{uuid.uuid4().hex}"}


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        from langchain_ctxret.messages import messages_to_openai

        ix.add_messages(messages_to_openai(_quickstart().THREAD), thread_id="user-42")  # where the orders disagreed

    return fill


def _non_increasing(scores: list[float]) -> bool:
    return all(a >= b for a, b in itertools.pairwise(scores))


def _by_group(items, group_of):
    out: dict[int, list] = {}
    for it in items:
        out.setdefault(group_of(it), []).append(it)
    return out


def test_core_fused_order_differs_from_relevance_here(index):
    """The case is a real one: the ranking order is not the relevance order in some group."""
    groups = index.search(QUESTION, k=3, thread_id="user-42", score_threshold=None)
    assert any(not _non_increasing([h.relevance for h in g.hits]) for g in groups)


def test_langchain_retriever_lists_each_group_by_its_shown_score(index):
    from langchain_ctxret import ContextualRetriever

    retriever = ContextualRetriever(index=index, k=3, thread_id="user-42", score_threshold=None)
    docs = retriever.invoke(QUESTION)
    groups = _by_group(docs, lambda d: d.metadata["group"])
    assert len(groups) == 2
    for members in groups.values():
        assert _non_increasing([d.metadata["score"] for d in members])
        assert [d.metadata["group_rank"] for d in members] == list(range(len(members)))
        assert members[0].metadata["score"] == members[0].metadata["score_relevance"]
        assert all(d.metadata["score"] <= d.metadata["score_relevance"] for d in members)


def test_llamaindex_retriever_lists_each_group_by_its_shown_score(index):
    from llamaindex_ctxret import ContextualRetriever

    nodes = ContextualRetriever(index, similarity_top_k=3, thread_id="user-42", score_threshold=None).retrieve(QUESTION)
    groups = _by_group(nodes, lambda n: n.node.metadata["group"])
    assert len(groups) == 2
    for members in groups.values():
        assert _non_increasing([n.score for n in members])
        assert [n.node.metadata["group_rank"] for n in members] == list(range(len(members)))


def test_langchain_vector_store_scores_follow_its_order(local_embedder):
    from langchain_core.documents import Document

    from langchain_ctxret import ContextualVectorStore

    store = ContextualVectorStore.from_documents(
        [Document(page_content=t, id=i) for i, t in DOCS.items()], in_memory=True
    )
    for q in ("How do I roll back a bad deploy?", "Who is on call this week?", "When does my flight leave?"):
        found = store.similarity_search_with_relevance_scores(q, k=5)
        assert len(found) == 5 and _non_increasing([s for _, s in found])
        distances = store.similarity_search_with_score(q, k=5)  # langchain-chroma's: a distance, lower first
        assert len(distances) == 5 and _non_increasing([-s for _, s in distances])


def test_langchain_quickstart_prints_its_scores_in_order(tmp_path):
    module = _quickstart()
    import contextlib
    import io
    import re

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        module.main()
    prompt = out.getvalue().split("---- prompt ----")[1].split("---- answer ----")[0]
    sections = [s for s in prompt.split("### Part")[1:] if "[score" in s]
    assert sections, prompt
    for section in sections:
        scores = [float(x) for x in re.findall(r"\[score (\d\.\d+)\]", section)]
        assert _non_increasing(scores), section
