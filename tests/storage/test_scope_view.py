"""A thread scope's search kernels: the partial sorts give exactly the full sorts' answers, and a
one-thread scope reads its cached block in place (a knowledge base in one scope is searched without
copying its pieces)."""

from __future__ import annotations

import numpy as np
import pytest
from ctxret.storage.base import group_parents
from ctxret.storage.bm25 import BM25Corpus
from ctxret.storage.cache import Block, ScopeView, top_n
from ctxret.storage.schema import Scope
from ctxret.storage.tokenize import analysis
from hypothesis import given, settings
from hypothesis import strategies as st

# few distinct values, so ties (and NaN) are common
SCORES = st.lists(st.sampled_from([-1.0, -0.5, 0.0, 0.25, 0.5, 0.5, 1.0, float("nan")]), max_size=40)


@given(SCORES, st.integers(-1, 45))
def test_top_n_is_the_stable_full_sort(values, n):
    scores = np.asarray(values, dtype=np.float32)
    expected = np.argsort(-scores, kind="stable")[: max(n, 0)]
    assert top_n(scores, n).tolist() == expected.tolist()


WORDS = ["fox", "dog", "river", "cells", "protein", "tumour", "growth", "the", "and"]
DOCS = st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8), min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(DOCS, st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), st.integers(1, 35))
def test_bm25_top_k_is_the_full_ranking(docs, query, k):
    """The top ``k`` found among the rows at or above the k-th score is the full ranking's top ``k``."""
    a = analysis()
    ids = [f"p{i:02d}" for i in range(len(docs))][::-1]  # id order is not row order: ties go by id
    corpus = BM25Corpus(ids, [a.index_tokens(" ".join(d)) for d in docs], a)
    q = " ".join(query)
    s, hit = corpus._scores(a.query_terms(q))
    rows = np.flatnonzero(hit)
    full = sorted(rows.tolist(), key=lambda i: (-s[i], ids[i]))[:k]  # the full ranking, ties by piece id
    assert corpus.search(q, k) == [(ids[int(i)], float(s[i])) for i in full]


def _blocks(n_threads: int = 2, per: int = 40, dims: int = 8) -> list[Block]:
    rng = np.random.default_rng(3)
    out = []
    for t in range(n_threads):
        vecs = rng.integers(-2, 3, size=(per, dims)).astype(np.float32)  # integer vectors: tied cosines
        vecs /= np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)
        ids = [f"t{t}-p{i}" for i in range(per)]
        metas = [{"thread_id": f"t{t}", "parent_id": f"s{i // 4}", "ordinal": i % 4, "n": i % 3} for i in range(per)]
        out.append(Block(ids, vecs, [f"text {i}" for i in ids], metas))
    return out


def _reference_dense(blocks, q, n, allowed=None):
    """The scope's dense answer as it was computed before: every vector stacked, one full stable sort."""
    ids = [i for b in blocks for i in b.ids]
    vecs = np.vstack([b.vectors for b in blocks])
    rows = np.arange(len(ids)) if allowed is None else np.flatnonzero(allowed)
    scores = vecs[rows] @ q.T
    return [[ids[rows[i]] for i in np.argsort(-scores[:, j], kind="stable")[:n]] for j in range(q.shape[0])]


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("where", [None, {"n": {"$ne": 1}}])
def test_scope_view_answers_as_the_stacked_scope(n_threads, where):
    blocks = _blocks(n_threads)
    view = ScopeView(blocks, where, analysis())
    q = np.random.default_rng(5).integers(-2, 3, size=(3, 8)).astype(np.float32)
    for n in (1, 5, 17, 500):
        got = [[r[0] for r in rows] for rows in view.dense(q, n, Scope(None))]
        assert got == _reference_dense(blocks, q, n, view.allowed)
    metas = [m for b in blocks for m in b.metadatas]
    keys = [("t0", "s1"), ("t0", "s9"), ("t1", "s2"), ("t0", "missing"), ("t9", "s1")]
    expected = {k: v for k, v in group_parents(metas).items() if k in set(keys)}
    assert view.parents(keys) == expected
    fetched = view.fetch(["t0-p1", "t0-p4", "nope"], Scope(None))
    assert all(view.allowed is None or view.allowed[view._row[i]] for i in fetched)
    assert set(fetched) <= {"t0-p1", "t0-p4"}


def test_one_thread_scope_reads_its_block_in_place():
    """A knowledge base in one scope: the search reads the cached block's vectors, never a copy of them."""
    (block,) = _blocks(1)
    view = ScopeView([block], None, analysis())
    assert view.vectors is block.vectors
    assert view.ids is block.ids and view.metadatas is block.metadatas
    assert ScopeView([block], None, analysis())._row is view._row  # the row index is the block's, made once
