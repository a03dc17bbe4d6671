"""BM25 over the pieces of a scope, in memory: the numbers SQLite FTS5's ``bm25()`` gives.

A thread-scoped search ranks a thread's own pieces, so its BM25 statistics (document frequencies,
average length) are the thread's: :class:`BM25Corpus` holds one scope's analysed pieces and scores
them exactly as :class:`~ctxret.storage.lexical.LexicalIndex` (FTS5) does over a file holding
only that scope — ``idf = ln((N - df + 0.5) / (df + 0.5))`` (1e-6 when not positive),
``k1 = 1.2``, ``b = 0.75``, each piece one token longer than its text (FTS5 counts the scope
column), each distinct query term once, ties broken by piece id — so the runtime's scoped search
and the evaluation harness (one corpus per conversation) compute the same numbers. Unscoped
searches use the FTS5 file (statistics over everything).

A corpus never changes. A write to a cached thread makes the next version with :meth:`BM25Corpus.extended` (rows
appended, rows that left marked dead), in time proportional to what the write adds: the versions share their
postings, which only grow (each version reads the rows below its own count), and the statistics are taken over the
live rows only (``N``, ``df`` and the average length), so a version scores exactly as a corpus built afresh from its
live rows does (the lengths are whole numbers, so their sum is exact in any order).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .tokenize import Analysis

__all__ = ["BM25Corpus", "K1", "B"]

K1 = 1.2
B = 0.75


class _Postings:
    """One term's postings, shared by the versions of a corpus: rows ascending and their term frequencies.

    ``data`` is ``(rows, tfs, used)``, replaced as one value (a reader takes it whole while a writer appends): the
    arrays' first ``used`` entries are written; entries below ``used`` never change."""

    __slots__ = ("data",)

    def __init__(self, rows: np.ndarray, tfs: np.ndarray) -> None:
        self.data = (rows, tfs, len(rows))

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The postings of rows below ``n`` (a version's own)."""
        rows, tfs, used = self.data
        if not used:
            return rows[:0], tfs[:0]
        end = used if rows[used - 1] < n else int(np.searchsorted(rows[:used], n))
        return rows[:end], tfs[:end]

    def append(self, rows: np.ndarray, tfs: np.ndarray) -> None:
        old_rows, old_tfs, used = self.data
        k = len(rows)
        if used + k > len(old_rows):  # grow by doubling: an append costs what it adds, on average
            cap = max(2 * (used + k), 4)
            new_rows, new_tfs = np.empty(cap, np.int64), np.empty(cap, np.float64)
            new_rows[:used], new_tfs[:used] = old_rows[:used], old_tfs[:used]
            old_rows, old_tfs = new_rows, new_tfs
        old_rows[used : used + k] = rows  # beyond every reader's ``used``
        old_tfs[used : used + k] = tfs
        self.data = (old_rows, old_tfs, used + k)


class _Shared:
    """What the versions of one corpus share: every row's length, and the postings (which also say which terms a
    row holds: its rows are sorted). ``rows``: how many rows are written (a version extends it only when it holds
    them all)."""

    __slots__ = ("dl", "post", "rows")

    def __init__(self) -> None:
        self.dl = np.zeros(0, np.float64)
        self.post: dict[str, _Postings] = {}
        self.rows = 0

    def add(self, tokens: Sequence[Sequence[str]]) -> None:
        start = self.rows
        k = len(tokens)
        lengths = np.array([len(t) for t in tokens], dtype=np.float64) + 1.0  # + the scope column's token
        if start + k > len(self.dl):
            grown = np.zeros(max(2 * (start + k), 16), np.float64)
            grown[:start] = self.dl[:start]
            self.dl = grown  # versions keep their own view of the old array
        self.dl[start : start + k] = lengths
        found: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for i, toks in enumerate(tokens, start):
            for t in toks:
                found[t][i] += 1
        for t, d in found.items():
            rows, tfs = np.fromiter(d.keys(), np.int64, len(d)), np.fromiter(d.values(), np.float64, len(d))
            p = self.post.get(t)
            if p is None:
                self.post[t] = _Postings(rows, tfs)
            else:
                p.append(rows, tfs)
        self.rows = start + k


class BM25Corpus:
    """Analysed pieces of one scope (``ids`` with their index tokens); immutable.

    Implements the lexical protocol (:class:`~ctxret.storage.base.LexicalBackend`): ``search``,
    ``scores``, ``coverage``. ``allowed`` restricts which pieces may be returned (a caller's
    ``where`` filter) without changing the statistics, as FTS5's scope does. ``live``: which rows are pieces of the
    scope (``None``: all); the others count nowhere (rows a write removed, in a thread's cached block).
    ``row``: each live piece id's row, when the caller has it.
    """

    def __init__(
        self,
        ids: Sequence[str],
        tokens: Sequence[Sequence[str]],
        analysis: Analysis,
        *,
        live: np.ndarray | None = None,
        row: Mapping[str, int] | None = None,
    ) -> None:
        shared = _Shared()
        shared.add(tokens)
        self._init(list(ids), analysis, shared, live, row)

    def _init(
        self,
        ids: list[str],
        analysis: Analysis,
        shared: _Shared,
        live: np.ndarray | None,
        row: Mapping[str, int] | None,
    ) -> None:
        self.ids = ids
        self.analysis = analysis
        self._shared = shared
        self.rows = len(ids)  # rows of this version (live or not)
        self._live = None if live is None or bool(np.all(live)) else np.asarray(live, dtype=bool)
        #: Live pieces: the ``N`` of BM25.
        self.n = self.rows if self._live is None else int(np.count_nonzero(self._live))
        self._dl = shared.dl[: self.rows]
        if row is None:
            alive = range(self.rows) if self._live is None else np.flatnonzero(self._live).tolist()
            row = {ids[i]: i for i in alive}
        self._row = row
        self._norm: np.ndarray | None = None

    def extended(
        self,
        ids: Sequence[str],
        tokens: Sequence[Sequence[str]],
        dead: Iterable[int] = (),
        *,
        all_ids: list[str] | None = None,
        row: Mapping[str, int] | None = None,
    ) -> BM25Corpus:
        """The next version: ``ids`` (with their ``tokens``) appended as new rows, the rows ``dead`` removed. In time
        proportional to what it adds, when this is the latest version (else built afresh from its live rows).
        ``all_ids`` / ``row``: the new version's id list and live rows, when the caller has them."""
        ids = list(ids)
        everyone = all_ids if all_ids is not None else [*self.ids, *ids]
        live = np.ones(self.rows + len(ids), dtype=bool)
        if self._live is not None:
            live[: self.rows] = self._live
        live[np.fromiter(dead, np.int64)] = False
        shared = self._shared
        if shared.rows != self.rows:  # another version was extended from this one: start afresh
            return _afresh(everyone, tokens, self, live, row)
        shared.add(tokens)
        out = BM25Corpus.__new__(BM25Corpus)
        out._init(everyone, self.analysis, shared, live, row)
        return out

    def _norms(self) -> np.ndarray:
        """``K1 * (1 - B + B * dl / avgdl)`` per row, the average over the live rows (worked out once a version)."""
        norm = self._norm
        if norm is None:
            dl = self._dl
            if self.n:
                avgdl = float(dl.mean()) if self._live is None else float(dl[self._live].sum()) / self.n
                norm = K1 * (1.0 - B + B * dl / avgdl)
            else:
                norm = dl
            self._norm = norm
        return norm

    def _df(self, rows: np.ndarray) -> int:
        return len(rows) if self._live is None else int(np.count_nonzero(self._live[rows]))

    def _idf(self, df: int) -> float:
        v = math.log((self.n - df + 0.5) / (df + 0.5))
        return v if v > 0 else 1e-6

    def _scores(self, terms: Iterable[str]) -> tuple[np.ndarray, np.ndarray]:
        s = np.zeros(self.rows)
        hit = np.zeros(self.rows, dtype=bool)
        if not self.n:
            return s, hit
        norm = self._norms()
        for t in terms:
            p = self._shared.post.get(t)
            if p is None:
                continue
            rows, tf = p.upto(self.rows)
            if not len(rows):
                continue
            df = self._df(rows)
            if not df:
                continue
            s[rows] += self._idf(df) * tf * (K1 + 1.0) / (tf + norm[rows])
            hit[rows] = True
        if self._live is not None:
            hit &= self._live
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
        ids = self.ids
        order = sorted(rows.tolist(), key=lambda i: (-s[i], ids[i]))[:k]
        return [(ids[i], float(s[i])) for i in order]

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        """Exact BM25 of given pieces (0.0 for a piece holding none of the query's terms); unknown ids left out.
        Only their rows are scored (each term's postings searched for them: they are sorted), with the same arithmetic
        as :meth:`search`, so the numbers are the same."""
        wanted = [(rid, self._row[rid]) for rid in dict.fromkeys(ids) if rid in self._row]
        if not wanted or not self.n:
            return {rid: 0.0 for rid, _ in wanted}
        at = np.array([i for _, i in wanted], dtype=np.int64)
        s = np.zeros(len(at))
        norm = self._norms()[at]
        for t in self.analysis.query_terms(query):
            p = self._shared.post.get(t)
            if p is None:
                continue
            rows, tf = p.upto(self.rows)
            if not len(rows):
                continue
            df = self._df(rows)
            if not df:
                continue
            k = np.minimum(np.searchsorted(rows, at), len(rows) - 1)
            hit = np.flatnonzero(rows[k] == at)
            if len(hit):
                f = tf[k[hit]]
                s[hit] += self._idf(df) * f * (K1 + 1.0) / (f + norm[hit])
        return {rid: float(s[j]) for j, (rid, _) in enumerate(wanted)}

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Share of the part's IDF-weighted terms each piece holds (see ``LexicalIndex.coverage``)."""
        wanted = [(rid, self._row[rid]) for rid in dict.fromkeys(ids) if rid in self._row]
        if not wanted:
            return {}
        terms = self.analysis.coverage_terms(query)
        n = self.n
        idf: dict[str, float] = {}
        held: dict[str, np.ndarray] = {}
        for t in terms:
            p = self._shared.post.get(t)
            rows = p.upto(self.rows)[0] if p is not None else np.zeros(0, np.int64)
            df = self._df(rows) if len(rows) else 0
            idf[t] = max(math.log((n - df + 0.5) / (df + 0.5)), 0.0) if df else math.log((n + 0.5) / 0.5)
            held[t] = rows
        total = sum(idf.values())
        if total <= 0:
            return {rid: 0.0 for rid, _ in wanted}
        at = np.array([i for _, i in wanted], dtype=np.int64)
        got = np.zeros(len(at))
        for t, w in idf.items():  # the terms in order, as a sum over each row's terms would add them
            rows = held[t]
            if len(rows):
                k = np.minimum(np.searchsorted(rows, at), len(rows) - 1)
                got[rows[k] == at] += w  # the row holds the term: it is in the term's (sorted) rows
        return {rid: float(got[j]) / total for j, (rid, _) in enumerate(wanted)}


def _afresh(
    ids: list[str],
    new_tokens: Sequence[Sequence[str]],
    old: BM25Corpus,
    live: np.ndarray,
    row: Mapping[str, int] | None,
) -> BM25Corpus:
    """A corpus built afresh for :meth:`BM25Corpus.extended` when its storage was extended by another version:
    the old rows' tokens are read back from the postings (their counts), the new rows' as given."""
    counts: list[dict[str, int]] = [{} for _ in range(old.rows)]
    for t, p in list(old._shared.post.items()):
        rows, tfs = p.upto(old.rows)
        for r, f in zip(rows.tolist(), tfs.tolist(), strict=True):
            counts[r][t] = int(f)
    tokens: list[list[str]] = [[t for t, f in c.items() for _ in range(f)] for c in counts]
    tokens += [list(t) for t in new_tokens]
    return BM25Corpus(ids, tokens, old.analysis, live=live, row=row)
