"""The lexical file's FTS5 queries: BM25 search, exact scores and coverage in SQL (used when the
postings are not held in memory, ``LexicalIndex(memory=False)``; :mod:`.postings` gives the same
numbers from memory).

Each row carries a scope token (a hash of its thread id) in a zero-weight column, so a
thread-scoped search is an FTS5 intersection inside the query, re-checked against the stored
thread id. BM25 statistics are over the whole file; FTS5 counts a row's length over all its
columns, so every piece is one token longer than its text (the scope token).
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Iterator, Sequence

_SQL_CHUNK = 500  # values per SQL ``IN (...)``


def in_chunks(values: Sequence[str]) -> Iterator[tuple[list[str], str]]:
    """``values`` in chunks of :data:`_SQL_CHUNK`, each with its ``?,?,...`` placeholders for ``IN (...)``."""
    for start in range(0, len(values), _SQL_CHUNK):
        chunk = list(values[start : start + _SQL_CHUNK])
        yield chunk, ",".join("?" * len(chunk))

__all__ = ["fts5_coverage", "fts5_scores", "fts5_search", "scope_token"]


def scope_token(thread_id: str) -> str:
    """The FTS5 token standing for one thread id (a hash; the stored id is checked too)."""
    return "t" + hashlib.sha256(str(thread_id).encode("utf-8", "surrogatepass")).hexdigest()[:24]


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
