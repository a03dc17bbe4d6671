"""The lexical file's inverted index, in memory: FTS5's BM25 numbers without FTS5's query cost.

An unscoped FTS5 ``MATCH`` with a part's dozen OR-ed terms scores every piece holding any of
them inside SQLite: at 100,000 pieces that is ~30 ms per part, ~250 ms for an 8-part message.
:class:`Postings` holds the same content as the file — per term, the rows holding it and their
term frequencies; per row, its id, thread and length — and scores a part with numpy in well
under a millisecond, exactly as FTS5's ``bm25()`` does over the whole file (``idf = ln((N - df +
0.5) / (df + 0.5))``, 1e-6 when not positive, ``k1 = 1.2``, ``b = 0.75``, each piece one token
longer than its text for the scope column, ties broken by piece id): see :mod:`.bm25`, which
does the same over one scope's pieces.

It is mutable and kept in step by :class:`~ctxret.storage.lexical.LexicalIndex` after each of
its committed transactions (a deleted row is only marked dead, so statistics are always over the
live rows; dead rows are dropped when they reach a quarter of the rows). The file stays the
source of truth: the postings are read from it on the first search and read again whenever
another connection has written to it. Memory: about 12 bytes per token occurrence plus ~250
bytes per piece (~60 MB at 100,000 pieces of 20 tokens), and up to 64 MB of the BM25
contributions of recently searched terms (kept until the next write).

A part's top ``k`` costs what its terms' posting lists hold, not what the file holds: the
contributions are summed per row in one ``bincount`` and the best rows are chosen among the rows
the terms hold (at 1M pieces a part's dozen terms hold ~440,000 postings: ~2–3 ms); the BM25 of
given pieces (the dense hits') is read from each term's list by binary search.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from .bm25 import K1, B
from .tokenize import Analysis

__all__ = ["Postings"]

_Chunk = tuple[np.ndarray, np.ndarray]  # (rows int64 ascending, term frequencies or BM25 contributions float64)
#: Postings whose BM25 contributions are kept between searches (8 bytes each: 64 MB).
CACHED_POSTINGS = 1 << 23


class Postings:
    """Every live piece of a lexical file: ``add`` / ``delete`` / ``clear``, and the lexical
    protocol (:class:`~ctxret.storage.base.LexicalBackend`) over all of them."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self._ids: list[str | None] = []  # row -> id (None: dead)
        self._row: dict[str, int] = {}
        self._threads: dict[str, int] = {}
        self._thread = np.zeros(0, np.int64)  # row -> thread code
        self._dl = np.zeros(0, np.float64)  # row -> tokens + 1
        self._alive = np.zeros(0, bool)
        self._chunks: dict[str, list[_Chunk]] = {}
        self._live = 0
        self._sum_dl = 0.0
        self._writes = 0  # changes so far (the length norms below are recomputed after one)
        self._norm: tuple[int, np.ndarray] = (-1, np.zeros(0))  # (writes, k1 · (1 − b + b · dl / avgdl) per row)
        self._weights: dict[str, _Chunk] = {}  # term -> (live rows, BM25 contributions) while self._norm holds
        self._weighted = 0  # postings held in self._weights

    # -- building --------------------------------------------------------------------------------
    @classmethod
    def from_rows(cls, rows: Iterable[tuple[str, str, str]], analysis: Analysis) -> Postings:
        """Build from ``(id, thread_id, space-separated index tokens)`` rows (one pass, vectorised)."""
        self = cls(analysis)
        self.add_rows(rows)
        return self

    def add_rows(self, rows: Iterable[tuple[str, str, str]]) -> None:
        """Add pieces (ids not already held: delete a replaced piece first)."""
        self._writes += 1
        vocab: dict[str, int] = {}
        term_ids: list[int] = []
        lengths: list[int] = []
        codes: list[int] = []
        first = len(self._ids)
        for pid, thread, tokens in rows:
            toks = tokens.split()
            term_ids.extend([vocab.setdefault(t, len(vocab)) for t in toks])
            lengths.append(len(toks))
            codes.append(self._threads.setdefault(thread, len(self._threads)))
            self._row[pid] = len(self._ids)
            self._ids.append(pid)
        n = len(lengths)
        if not n:
            return
        dl = np.asarray(lengths, np.float64) + 1.0  # FTS5 counts the scope column's token
        self._dl = np.concatenate([self._dl, dl])
        self._thread = np.concatenate([self._thread, np.asarray(codes, np.int64)])
        self._alive = np.concatenate([self._alive, np.ones(n, bool)])
        self._live += n
        self._sum_dl += float(dl.sum())
        if not term_ids:
            return
        docs = np.repeat(np.arange(first, first + n, dtype=np.int64), lengths)
        key = np.asarray(term_ids, np.int64) * (first + n) + docs
        key, tf = np.unique(key, return_counts=True)  # sorted by term, then row
        terms_of = key // (first + n)
        held = key - terms_of * (first + n)
        starts = np.flatnonzero(np.r_[True, terms_of[1:] != terms_of[:-1]])
        ends = np.r_[starts[1:], len(key)]
        names = list(vocab)
        tf_f = tf.astype(np.float64)
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            self._chunks.setdefault(names[int(terms_of[s])], []).append((held[s:e], tf_f[s:e]))

    def delete(self, ids: Iterable[str]) -> None:
        """Mark pieces dead (unknown ids ignored); compact when a quarter of the rows are dead."""
        self._writes += 1
        for pid in ids:
            row = self._row.pop(pid, None)
            if row is None:
                continue
            self._ids[row] = None
            self._alive[row] = False
            self._live -= 1
            self._sum_dl -= float(self._dl[row])
        if len(self._ids) > 64 and self._live < 0.75 * len(self._ids):
            self._compact()

    def _compact(self) -> None:
        keep = self._alive
        new_row = np.cumsum(keep) - 1
        chunks: dict[str, list[_Chunk]] = {}
        for term in list(self._chunks):
            rows, tf = self._postings(term)
            live = keep[rows]
            if live.any():
                chunks[term] = [(new_row[rows[live]], tf[live])]
        self._chunks = chunks
        self._ids = [i for i in self._ids if i is not None]
        self._row = {pid: r for r, pid in enumerate(self._ids) if pid is not None}
        self._dl, self._thread = self._dl[keep], self._thread[keep]
        self._alive = np.ones(len(self._ids), bool)

    def clear(self) -> None:
        """Remove every piece."""
        self.__init__(self.analysis)  # type: ignore[misc]

    def __len__(self) -> int:
        return self._live

    # -- reading ---------------------------------------------------------------------------------
    def _postings(self, term: str) -> _Chunk:
        """All rows holding ``term`` (dead ones included) and their frequencies, chunks merged once."""
        chunks = self._chunks.get(term)
        if not chunks:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        if len(chunks) > 1:
            chunks[:] = [(np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks]))]
        return chunks[0]

    def _live_postings(self, term: str) -> _Chunk:
        rows, tf = self._postings(term)
        if self._live != len(self._ids) and len(rows):
            live = self._alive[rows]
            rows, tf = rows[live], tf[live]
        return rows, tf

    def _idf(self, df: int) -> float:
        v = math.log((self._live - df + 0.5) / (df + 0.5))
        return v if v > 0 else 1e-6

    def _term_lists(self, terms: Sequence[str]) -> list[_Chunk]:
        """Per distinct term held by a live row, in the query's order: its live rows (ascending) and
        each one's BM25 contribution ``idf · tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl))``
        (> 0, as idf >= 1e-6). A term's contributions are kept until the next write (they depend
        on every row's length and the term's document frequency), at most
        :data:`CACHED_POSTINGS` postings in all: the parts of a message share most of their terms."""
        if not self._live:
            return []
        if self._norm[0] != self._writes:  # each row's length norm, once per change of the statistics
            self._norm = (self._writes, K1 * (1.0 - B + B * self._dl / (self._sum_dl / self._live)))
            self._weights.clear()
            self._weighted = 0
        out = []
        for t in dict.fromkeys(terms):
            held = self._weights.get(t)
            if held is None:
                rows, tf = self._live_postings(t)
                held = (rows, self._idf(len(rows)) * tf * (K1 + 1.0) / (tf + self._norm[1][rows]))
                self._weights[t] = held
                self._weighted += len(rows)
                while self._weighted > CACHED_POSTINGS and len(self._weights) > 1:
                    self._weighted -= len(self._weights.pop(next(iter(self._weights)))[0])
            if len(held[0]):
                out.append(held)
        return out

    def _top_rows(
        self, terms: Sequence[str], k: int, thread_ids: Sequence[str] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Every row (inside ``thread_ids``) scoring at least the ``k``-th best row, ties included,
        and their BM25, summed term by term in the query's order as FTS5 does. The cost follows the
        terms' posting lists, not the number of rows: the rows of the best ``k × terms`` postings
        (at least ``k`` distinct rows, as a row is listed once per term it holds) give the
        ``k``-th best score — every row scoring above those postings' lowest is among them, so the
        ``k``-th best of them is the ``k``-th best of all — and only rows reaching it are kept."""
        lists = self._term_lists(terms)
        if not lists:
            return np.zeros(0, np.int64), np.zeros(0)
        held = np.concatenate([rows for rows, _ in lists]) if len(lists) > 1 else lists[0][0]
        weights = np.concatenate([w for _, w in lists]) if len(lists) > 1 else lists[0][1]
        acc = np.bincount(held, weights, minlength=len(self._ids))  # summed per row in the terms' order
        mask = self._thread_mask(held, thread_ids)
        if mask is not None:
            held = held[mask]
        best = k * len(lists)
        if len(held) > best:
            vals = acc[held]
            top = np.unique(held[np.argpartition(vals, len(vals) - best)[len(vals) - best :]])
            if len(top) >= k:
                top_scores = acc[top]
                kth = np.partition(top_scores, len(top) - k)[len(top) - k]
                held = held[vals >= kth]
        rows = np.unique(held) if len(lists) > 1 else held
        scores = acc[rows]
        if len(rows) > k:
            kth = np.partition(scores, len(scores) - k)[len(scores) - k]
            top = scores >= kth
            rows, scores = rows[top], scores[top]
        return rows, scores

    def _thread_mask(self, rows: np.ndarray, thread_ids: Sequence[str] | None) -> np.ndarray | None:
        if thread_ids is None:
            return None
        codes = [self._threads[t] for t in dict.fromkeys(thread_ids) if t in self._threads]
        return np.isin(self._thread[rows], np.asarray(codes, np.int64))

    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """Top ``k`` ``(id, bm25)`` holding any of the query's terms, best first (ties: piece id)."""
        terms = self.analysis.query_terms(query)
        if not terms or k < 1:
            return []
        rows, scores = self._top_rows(terms, k, thread_ids)
        ranked = sorted(zip(scores.tolist(), rows.tolist(), strict=True), key=lambda x: (-x[0], self._ids[x[1]]))
        return [(str(self._ids[r]), s) for s, r in ranked[:k]]

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        """Exact BM25 of given pieces (0.0 for one holding none of the query's terms); unknown ids, or
        ids outside ``thread_ids``, left out. The same numbers as :meth:`search` (the same sums in
        the same order), found in each term's posting list by binary search."""
        wanted = [(pid, self._row[pid]) for pid in dict.fromkeys(str(i) for i in ids) if pid in self._row]
        if thread_ids is not None and wanted:
            allowed = self._thread_mask(np.asarray([r for _, r in wanted], np.int64), thread_ids)
            assert allowed is not None
            wanted = [w for w, ok in zip(wanted, allowed.tolist(), strict=True) if ok]
        if not wanted:
            return {}
        terms = self.analysis.query_terms(query)
        want_rows = np.asarray([r for _, r in wanted], np.int64)
        total = np.zeros(len(wanted))
        if terms:
            for rows, weights in self._term_lists(terms):  # the same numbers, summed in the same order
                at = np.minimum(np.searchsorted(rows, want_rows), len(rows) - 1)
                hit = rows[at] == want_rows
                total[hit] += weights[at[hit]]
        return {pid: float(s) for (pid, _), s in zip(wanted, total.tolist(), strict=True)}

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Share of the part's IDF-weighted terms each piece holds (``LexicalIndex.coverage``'s numbers)."""
        wanted = [(pid, self._row[pid]) for pid in dict.fromkeys(str(i) for i in ids) if pid in self._row]
        if not wanted:
            return {}
        n = self._live
        want_rows = np.asarray([r for _, r in wanted], np.int64)
        held = np.zeros(len(wanted))
        total = 0.0
        for t in dict.fromkeys(self.analysis.coverage_terms(query)):
            rows, _ = self._live_postings(t)
            df = len(rows)
            w = max(math.log((n - df + 0.5) / (df + 0.5)), 0.0) if df else math.log((n + 0.5) / 0.5)
            total += w
            if df and w > 0:
                at = np.minimum(np.searchsorted(rows, want_rows), df - 1)
                held += w * (rows[at] == want_rows)
        if total <= 0:
            return {pid: 0.0 for pid, _ in wanted}
        return {pid: float(h / total) for (pid, _), h in zip(wanted, held.tolist(), strict=True)}
