"""The peers a user would pick instead of ctxret, run on ctxret's own pieces in the same harness run.

* :class:`BM25sPeer` — LlamaIndex's ``BM25Retriever`` (llama-index-retrievers-bm25): bm25s with
  ``stopwords="en"``, a Snowball English stemmer (PyStemmer) and ``token_pattern=r"(?u)\\b\\w\\w+\\b"``
  (lower-cased), scored as ``bm25s.BM25()`` defaults: ``method="lucene"``, k1 = 1.5, b = 0.75,
  ``idf = ln(1 + (N − df + 0.5) / (df + 0.5))``, repeated query tokens counted per repeat. It
  indexes what ``node.get_content(MetadataMode.EMBED)`` gives for a ctxret piece node: the piece
  text, header included. Implemented in numpy (no bm25s at run time); ``tests/evaluation/test_eval_peers.py``
  holds it to bm25s itself.
* :func:`ensemble_rrf` — LangChain's ``EnsembleRetriever([bm25, dense], weights=[0.5, 0.5], c=60)``:
  ``score = Σ w / (rank + c)`` over each retriever's top 5, the union ordered by score with a
  stable sort (ties: first appearance, the BM25 list first). Its BM25 side is :class:`BM25sPeer`
  (the strong one), its dense side plain unblended piece vectors against the whole message.
* :func:`relative_score_fusion` — LlamaIndex's ``QueryFusionRetriever([dense, bm25],
  mode="relative_score", retriever_weights=[0.6, 0.4], num_queries=1)`` (its documented hybrid
  example, no LLM): each retriever's top 5 min-max scaled (a list whose scores are all equal scales
  to 1.0, or 0.0 when they are not positive), times its weight, summed per node, sorted by score
  with a stable sort (ties: first appearance, the dense list first). Same sides as the ensemble.
* plain dense — unblended piece vectors against the whole-message vector (the harness's ``pieces``).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["BM25S_EN_STOPWORDS", "BM25sPeer", "bm25s_tokens", "ensemble_rrf", "relative_score_fusion"]

TOKEN_PATTERN = re.compile(r"(?u)\b\w\w+\b")
#: bm25s's ``"en"`` list (Lucene's 33 words).
BM25S_EN_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with".split()
)


def bm25s_tokens(text: str, stemmer: Any = None) -> list[str]:
    """``bm25s.tokenize``'s tokens of one text: lower-cased ``\\w\\w+`` words, the ``en`` stopwords out,
    Snowball English stems."""
    toks = [t for t in TOKEN_PATTERN.findall(text.lower()) if t not in BM25S_EN_STOPWORDS]
    if stemmer is None:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    return list(stemmer.stemWords(toks)) if toks else []


class BM25sPeer:
    """LlamaIndex's BM25Retriever over ``texts``; :meth:`search` gives ``(index, score)`` best first (ties: index)."""

    K1 = 1.5
    B = 0.75

    def __init__(self, texts: Sequence[str]) -> None:
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        docs = [bm25s_tokens(t, self._stemmer) for t in texts]
        self.n = len(docs)
        dl = np.array([len(d) for d in docs], dtype=np.float64)
        avgdl = float(dl.mean()) if self.n else 1.0
        self._norm = self.K1 * (1.0 - self.B + self.B * dl / avgdl) if self.n else dl
        post: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for i, toks in enumerate(docs):
            for t in toks:
                post[t][i] += 1
        self._post = {
            t: (np.fromiter(d.keys(), np.int64), np.fromiter(d.values(), np.float64)) for t, d in post.items()
        }

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """(score of every text, which texts hold a query token)."""
        s = np.zeros(self.n)
        hit = np.zeros(self.n, dtype=bool)
        for t in bm25s_tokens(query, self._stemmer):  # repeats count, as in bm25s
            p = self._post.get(t)
            if p is None:
                continue
            rows, tf = p
            idf = math.log(1.0 + (self.n - len(rows) + 0.5) / (len(rows) + 0.5))
            s[rows] += idf * tf / (tf + self._norm[rows])
            hit[rows] = True
        return s, hit

    def search(self, query: str, k: int | None = None) -> list[tuple[int, float]]:
        s, hit = self.scores(query)
        rows = np.flatnonzero(hit)
        order = rows[np.lexsort((rows, -s[rows]))]
        if k is not None:
            order = order[:k]
        return [(int(i), float(s[i])) for i in order]


def ensemble_rrf(
    rankings: Sequence[Sequence[int]], weights: Sequence[float] = (0.5, 0.5), c: float = 60.0
) -> list[tuple[int, float]]:
    """LangChain EnsembleRetriever's weighted RRF over already-cut rankings (ids best first)."""
    if len(rankings) != len(weights):
        raise ValueError("one weight per ranking")
    score: dict[int, float] = defaultdict(float)
    for ranking, w in zip(rankings, weights, strict=False):
        for rank, doc in enumerate(ranking, start=1):
            score[doc] += w / (rank + c)
    unique = list(dict.fromkeys(doc for ranking in rankings for doc in ranking))
    return [(d, score[d]) for d in sorted(unique, key=lambda d: score[d], reverse=True)]


def relative_score_fusion(
    results: Sequence[Sequence[tuple[int, float]]], weights: Sequence[float] = (0.6, 0.4)
) -> list[tuple[int, float]]:
    """LlamaIndex QueryFusionRetriever's ``relative_score`` mode over already-cut ``(id, score)``
    lists (one query): min-max per list, times the list's weight (weights normalised to sum 1)."""
    if len(results) != len(weights):
        raise ValueError("one weight per result list")
    total = float(sum(weights))
    fused: dict[int, float] = {}
    for hits, w in zip(results, weights, strict=True):
        if not hits:
            continue
        lo, hi = min(s for _, s in hits), max(s for _, s in hits)
        for doc, score in hits:
            scaled = (1.0 if hi > 0 else 0.0) if hi == lo else (score - lo) / (hi - lo)
            fused[doc] = fused.get(doc, 0.0) + scaled * (w / total)
    return sorted(fused.items(), key=lambda x: x[1], reverse=True)
