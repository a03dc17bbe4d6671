"""The lexical file's three queries in FTS5 SQL (BM25 search, exact scores, coverage): the oracle the
in-memory postings (:mod:`ctxret.storage.postings`, what every search runs on) are checked against, on
the same file.

Each row carries a scope token (a hash of its thread id) in a zero-weight column, so a
thread-scoped search is an FTS5 intersection inside the query, re-checked against the stored
thread id. BM25 statistics are over the whole file; FTS5 counts a row's length over all its
columns, so every piece is one token longer than its text (the scope token).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Sequence

from ctxret.storage.lexical import LexicalIndex, scope_token
from ctxret.storage.sql import in_chunks, safe_text


class FTS5:
    """:meth:`LexicalIndex.search`, ``scores`` and ``coverage`` of ``index`` run as FTS5 queries on its file."""

    def __init__(self, index: LexicalIndex) -> None:
        self.index = index

    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
        tokens = self.index.analysis.query_terms(query)
        scope = _thread_list(thread_ids)
        if not tokens or k < 1 or scope == []:
            return []
        with self.index._lock:
            return fts5_search(self.index._db, tokens, k, scope)

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return {}
        with self.index._lock:
            return fts5_scores(self.index._db, self.index.analysis.query_terms(query), ids, _thread_list(thread_ids))

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return {}
        with self.index._lock:
            return fts5_coverage(self.index._db, self.index.analysis.coverage_terms(query), ids)


def _thread_list(thread_ids: Sequence[str] | None) -> list[str] | None:
    return None if thread_ids is None else [safe_text(str(t)) for t in thread_ids]


def _match_expr(tokens: Sequence[str], thread_ids: Sequence[str] | None) -> str:
    words = " OR ".join(f'"{t}"' for t in tokens)  # tokens never hold quotes or whitespace
    expr = f"tokens : ({words})"
    if thread_ids is not None:
        scopes = " OR ".join(f'"{scope_token(t)}"' for t in dict.fromkeys(thread_ids))
        expr = f"scope : ({scopes}) AND {expr}"
    return expr


def fts5_search(
    db: sqlite3.Connection, tokens: Sequence[str], k: int, thread_ids: list[str] | None
) -> list[tuple[str, float]]:
    """Top ``k`` ``(id, bm25)`` holding any token (``bm25``: FTS5's with the sign flipped, > 0)."""
    params: list[object] = [_match_expr(tokens, thread_ids)]
    check = ""
    if thread_ids is not None:  # the scope token narrows the match; the stored thread id decides
        check = f" AND p.thread_id IN ({','.join('?' * len(thread_ids))})"
        params.extend(thread_ids)
    sql = (
        "SELECT p.id, -bm25(pieces_fts, 0.0, 1.0) FROM pieces_fts CROSS JOIN pieces p ON p.rowid = pieces_fts.rowid "
        f"WHERE pieces_fts MATCH ?{check} ORDER BY bm25(pieces_fts, 0.0, 1.0), p.id LIMIT ?"
    )
    params.append(int(k))
    rows = db.execute(sql, params).fetchall()
    return [(r[0], float(r[1])) for r in rows]


def fts5_scores(
    db: sqlite3.Connection, tokens: Sequence[str], ids: list[str], thread_ids: list[str] | None
) -> dict[str, float]:
    """Exact BM25 of ``ids`` (0.0 without any token; unknown ids or ids outside ``thread_ids`` left out)."""
    out: dict[str, float] = {}
    for chunk, marks in in_chunks(ids):
        known = db.execute(f"SELECT id, thread_id FROM pieces WHERE id IN ({marks})", chunk).fetchall()
        for pid, thread in known:
            if thread_ids is None or thread in thread_ids:
                out[pid] = 0.0
        if not tokens or not known:
            continue
        # CROSS JOIN keeps the FTS5 match as the outer loop (one pass over the match, ~20x
        # faster than letting SQLite probe the FTS table once per id).
        rows = db.execute(
            "SELECT p.id, -bm25(pieces_fts, 0.0, 1.0) FROM pieces_fts CROSS JOIN pieces p "
            f"ON p.rowid = pieces_fts.rowid WHERE pieces_fts MATCH ? AND p.id IN ({marks})",
            (_match_expr(tokens, thread_ids), *chunk),
        ).fetchall()
        for pid, score in rows:
            if pid in out:
                out[pid] = float(score)
    return out


def fts5_coverage(db: sqlite3.Connection, tokens: Sequence[str], ids: list[str]) -> dict[str, float]:
    """Share of the tokens' IDF weight each piece holds (BM25's idf over the whole file, floored at 0)."""
    n = int(db.execute("SELECT count(*) FROM pieces").fetchone()[0])
    # a query token no piece holds weighs the most (df = 0)
    idf: dict[str, float] = dict.fromkeys(tokens, math.log((n + 0.5) / 0.5)) if n else {}
    for chunk, marks in in_chunks(tokens):
        for term, df in db.execute(f"SELECT term, doc FROM pieces_vocab WHERE term IN ({marks})", chunk):
            idf[term] = max(math.log((n - df + 0.5) / (df + 0.5)), 0.0)
    total = sum(idf.values())
    out: dict[str, float] = {}
    for chunk, marks in in_chunks(ids):
        rows = db.execute(
            f"SELECT p.id, f.tokens FROM pieces p JOIN pieces_fts f ON f.rowid = p.rowid WHERE p.id IN ({marks})", chunk
        ).fetchall()
        for pid, toks in rows:
            have = set(toks.split())
            out[pid] = sum(w for t, w in idf.items() if t in have) / total if total > 0 else 0.0
    return out
