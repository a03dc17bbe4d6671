"""The harness's peers, held to the libraries they imitate; the paired statistics and the equal-budget metric."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ctxret.evaluation.metrics import budget_recall, round_robin
from ctxret.evaluation.peers import BM25sPeer, bm25s_tokens, ensemble_rrf
from ctxret.evaluation.stats import paired_diff, per_cluster, stratified_bootstrap
from hypothesis import given, settings
from hypothesis import strategies as st

TEXTS = [
    "[Session 1 · Caroline · May 8, 2023] I went to the LGBTQ support group yesterday and it was powerful.",
    "[Session 1 · Melanie · May 8, 2023] That's great! I painted a lake sunrise last year.",
    "[Session 2 · Caroline · May 25, 2023] I'm researching adoption agencies; I want to be a mom.",
    "[Session 2 · Melanie · May 25, 2023] Running a charity race for mental health this Saturday.",
    "[Session 3 · Caroline · June 9, 2023] The support groups helped me so much; running helps too.",
    "[Session 3 · Melanie · June 9, 2023] My kids love the beach; we go camping in the mountains.",
]
QUERIES = [
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint?",
    "running race charity",
    "adoption agencies mom",
    "camping mountains kids beach",
    "zzz nothing",
]


def test_bm25s_peer_equals_llamaindex_bm25retriever():
    """The numpy peer gives the scores of LlamaIndex's BM25Retriever (bm25s underneath) on the same texts."""
    pytest.importorskip("llama_index.retrievers.bm25")
    import Stemmer
    from llama_index.core.schema import TextNode
    from llama_index.retrievers.bm25 import BM25Retriever

    nodes = [TextNode(text=t, id_=f"n{i}") for i, t in enumerate(TEXTS)]
    theirs = BM25Retriever.from_defaults(
        nodes=nodes, stemmer=Stemmer.Stemmer("english"), language="english", similarity_top_k=len(TEXTS)
    )
    peer = BM25sPeer(TEXTS)
    for q in QUERIES:
        got = {int(n.node.node_id[1:]): float(n.score) for n in theirs.retrieve(q) if n.score and n.score > 0}
        ours = dict(peer.search(q))
        assert ours.keys() == got.keys(), q
        for i in ours:
            assert ours[i] == pytest.approx(got[i], rel=1e-5), (q, i)


def test_bm25s_tokens_are_bm25s_tokens():
    bm25s = pytest.importorskip("bm25s")
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    for text in TEXTS + QUERIES:
        ids, vocab = bm25s.tokenize([text], stopwords="en", stemmer=stemmer, show_progress=False, return_ids=True)
        inverse = {v: k for k, v in vocab.items()}
        assert [inverse[i] for i in ids[0]] == bm25s_tokens(text, stemmer)


def test_ensemble_rrf_is_langchains_rule():
    """EnsembleRetriever(weights=[0.5, 0.5], c=60): Σ w/(rank + c), ties in first-appearance order (BM25 first)."""
    bm25, dense = [3, 1, 4, 5, 9], [2, 6, 5, 3, 8]
    fused = ensemble_rrf([bm25, dense])
    expected = {
        d: sum(0.5 / (r + 1 + 60) for lst in (bm25, dense) for r, x in enumerate(lst) if x == d)
        for d in {*bm25, *dense}
    }
    assert dict(fused) == pytest.approx(expected)
    assert [d for d, _ in fused] == sorted(dict.fromkeys(bm25 + dense), key=lambda d: expected[d], reverse=True)
    assert [d for d, _ in fused][:2] == [3, 5]  # in both lists: first
    assert [d for d, _ in ensemble_rrf([[1], [2]])] == [1, 2]  # a tie keeps the BM25 side first


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 9), max_size=6), max_size=4))
def test_round_robin_takes_each_item_once_rank_by_rank(groups):
    out = round_robin(groups)
    assert len(out) == len(set(out)) == len({i for g in groups for i in g})
    firsts = list(dict.fromkeys(g[0] for g in groups if g))
    assert out[: len(firsts)] == firsts


def test_budget_recall_cuts_every_system_at_the_same_bytes():
    units = [{"a"}, {"b"}, {"c"}, {"d"}]
    assert budget_recall([[0, 1, 2]], [400, 400, 400, 400], units, {"a", "b", "c"}, 1000) == pytest.approx(2 / 3)
    # stops at the first misfit
    assert budget_recall([[0], [1], [2]], [400, 700, 10, 10], units, {"a", "c"}, 1000) == 0.5
    assert budget_recall([[0, 0, 0]], [400] * 4, units, {"a", "b"}, 4000) == 0.5  # repeats cost nothing, gain nothing
    assert math.isnan(budget_recall([[0]], [1] * 4, units, set(), 100))


def test_paired_diff_and_its_intervals():
    a = np.array([1, 1, 1, 0, 1, 1, 0, 1] * 50, dtype=float)
    b = np.array([1, 0, 1, 0, 0, 1, 0, 1] * 50, dtype=float)
    d = paired_diff(a, b)
    assert d.mean == pytest.approx(0.25) and d.n == 400 and d.excludes_zero
    se = np.std(a - b, ddof=1) / math.sqrt(400)
    assert d.hi - d.lo == pytest.approx(2 * 1.959963984540054 * se)
    boot = stratified_bootstrap(a, b, ["x", "y"] * 200)
    assert boot.lo < 0.25 < boot.hi and abs((boot.hi - boot.lo) - (d.hi - d.lo)) < 0.05
    assert per_cluster(a, b, ["x"] * 200 + ["y"] * 200) == pytest.approx({"x": 0.25, "y": 0.25})
    assert paired_diff([1.0, math.nan], [0.0, 1.0]).n == 1
    assert d.fmt() == "+25.0 [+20.8, +29.2]"


def _fusion_with_llamaindex(dense, lexical, weights=(0.6, 0.4)):
    """The real QueryFusionRetriever (relative_score, one query) over two retrievers returning fixed lists."""
    from llama_index.core.llms import MockLLM
    from llama_index.core.retrievers import BaseRetriever, QueryFusionRetriever
    from llama_index.core.schema import NodeWithScore, TextNode

    class Fixed(BaseRetriever):
        def __init__(self, hits):
            super().__init__()
            self.hits = hits

        def _retrieve(self, query_bundle):
            return [NodeWithScore(node=TextNode(text=f"piece {d}", id_=str(d)), score=s) for d, s in self.hits]

    fusion = QueryFusionRetriever(
        [Fixed(dense), Fixed(lexical)],
        mode="relative_score",
        retriever_weights=list(weights),
        num_queries=1,
        use_async=False,
        similarity_top_k=20,
        llm=MockLLM(),  # num_queries=1: the LLM is never called
    )
    return [(int(n.node.text.split()[1]), n.score) for n in fusion.retrieve("q")]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 9), st.floats(0, 1, allow_nan=False)), max_size=5, unique_by=lambda x: x[0]),
    st.lists(st.tuples(st.integers(0, 9), st.floats(0, 30, allow_nan=False)), max_size=5, unique_by=lambda x: x[0]),
)
def test_relative_score_fusion_is_llamaindex_query_fusion(dense, lexical):
    from ctxret.evaluation.peers import relative_score_fusion

    dense = sorted(dense, key=lambda x: -x[1])
    lexical = sorted(lexical, key=lambda x: -x[1])
    ours = relative_score_fusion([dense, lexical])
    theirs = _fusion_with_llamaindex(dense, lexical)
    assert [d for d, _ in ours] == [d for d, _ in theirs]
    assert [s for _, s in ours] == pytest.approx([s for _, s in theirs])
