"""BM25 over the pieces of a scope, in memory: the numbers SQLite FTS5's ``bm25()`` gives.

A thread-scoped search ranks a thread's own pieces, so its BM25 statistics (document frequencies,
average length) are the thread's: :class:`BM25Corpus` holds one scope's analysed pieces and scores
them exactly as :class:`~ctxret.storage.lexical.LexicalIndex` (FTS5) does over a file holding
only that scope — ``idf = ln((N - df + 0.5) / (df + 0.5))`` (1e-6 when not positive),
``k1 = 1.2``, ``b = 0.75``, each piece one token longer than its text (FTS5 counts the scope
column), each distinct query term once, ties broken by piece id — so the runtime's scoped search
and the evaluation harness (one corpus per conversation) compute the same numbers. Unscoped
searches use the FTS5 file (statistics over everything).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence

import numpy as np

from .tokenize import Analysis

__all__ = ["BM25Corpus", "K1", "B"]

K1 = 1.2
B = 0.75


class BM25Corpus:
    """Analysed pieces of one scope (``ids`` with their index tokens); immutable.

    Implements the lexical protocol (:class:`~ctxret.storage.base.LexicalBackend`): ``search``,
    ``scores``, ``coverage``. ``allowed`` restricts which pieces may be returned (a caller's
    ``where`` filter) without changing the statistics, as FTS5's scope does.
    """

    def __init__(self, ids: Sequence[str], tokens: Sequence[Sequence[str]], analysis: Analysis) -> None:
        self.ids = list(ids)
        self.analysis = analysis
        self.n = len(self.ids)
        self._row = {rid: i for i, rid in enumerate(self.ids)}
        dl = np.array([len(t) for t in tokens], dtype=np.float64) + 1.0  # + the scope column's token
        avgdl = float(dl.mean()) if self.n else 1.0
        self._norm = K1 * (1.0 - B + B * dl / avgdl) if self.n else dl
        post: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for i, toks in enumerate(tokens):
            for t in toks:
                post[t][i] += 1
        self._post = {
            t: (np.fromiter(d.keys(), np.int64), np.fromiter(d.values(), np.float64)) for t, d in post.items()
        }
        self._order = np.argsort(np.array(self.ids, dtype=object), kind="stable") if self.n else np.zeros(0, np.int64)
        self._rank_of_id = np.empty(self.n, dtype=np.int64)
        self._rank_of_id[self._order] = np.arange(self.n)
        self._tokens = [frozenset(t) for t in tokens]

    def _idf(self, df: int) -> float:
        v = math.log((self.n - df + 0.5) / (df + 0.5))
        return v if v > 0 else 1e-6

    def _scores(self, terms: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        s = np.zeros(self.n)
        hit = np.zeros(self.n, dtype=bool)
        for t in terms:
            p = self._post.get(t)
            if p is None:
                continue
            rows, tf = p
            s[rows] += self._idf(len(rows)) * tf * (K1 + 1.0) / (tf + self._norm[rows])
            hit[rows] = True
        return s, hit

    def search(
        self, query: str, k: int, thread_ids: Sequence[str] | None = None, allowed: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Top ``k`` ``(id, bm25)`` holding any of the query's terms, best first (ties: piece id)."""
        terms = self.analysis.query_terms(query)
        if not terms or k < 1 or not self.n:
            return []
        s, hit = self._scores(terms)
        if allowed is not None:
            hit &= allowed
        rows = np.flatnonzero(hit)
        if len(rows) > k:  # only the rows scoring at least the k-th best can be in the top k (ties included)
            top = s[rows]
            rows = rows[top >= np.partition(top, len(rows) - k)[len(rows) - k]]
        order = rows[np.lexsort((self._rank_of_id[rows], -s[rows]))][:k]
        return [(self.ids[int(i)], float(s[i])) for i in order]

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        """Exact BM25 of given pieces (0.0 for a piece holding none of the query's terms); unknown ids left out."""
        wanted = [(rid, self._row[rid]) for rid in dict.fromkeys(ids) if rid in self._row]
        if not wanted:
            return {}
        s, _ = self._scores(self.analysis.query_terms(query))
        return {rid: float(s[i]) for rid, i in wanted}

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Share of the part's IDF-weighted terms each piece holds (see ``LexicalIndex.coverage``)."""
        wanted = [(rid, self._row[rid]) for rid in dict.fromkeys(ids) if rid in self._row]
        if not wanted:
            return {}
        terms = self.analysis.coverage_terms(query)
        n = self.n
        idf = {
            t: max(math.log((n - len(self._post[t][0]) + 0.5) / (len(self._post[t][0]) + 0.5)), 0.0)
            if t in self._post
            else math.log((n + 0.5) / 0.5)
            for t in terms
        }
        total = sum(idf.values())
        if total <= 0:
            return {rid: 0.0 for rid, _ in wanted}
        return {rid: sum(w for t, w in idf.items() if t in self._tokens[i]) / total for rid, i in wanted}
