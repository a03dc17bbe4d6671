"""A persistent, incremental, thread-scoped BM25 index on SQLite FTS5 (Python's standard library).

Text is normalised in Python before it reaches FTS5, so indexing and querying share one
Unicode-aware tokenizer: NFKC, case-folded, accents removed; words of letters and digits; each
CJK character (Han, kana, Hangul) a token of its own. FTS5's ``bm25()`` ranks (higher is better
here: the sign is flipped).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

from .errors import InputError

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(
    r"[\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\ua960-\ua97f\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f]"
)


def tokenize(text: str) -> list[str]:
    """Lexical tokens of ``text``: case-folded, accent-free words; CJK characters one by one."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    text = unicodedata.normalize("NFC", text)  # recompose Hangul syllables split by NFKD
    tokens: list[str] = []
    for word in _WORD.findall(text):
        if _CJK.search(word):
            run = ""
            for ch in word:
                if _CJK.match(ch):
                    if run:
                        tokens.append(run)
                        run = ""
                    tokens.append(ch)
                else:
                    run += ch
            if run:
                tokens.append(run)
        else:
            tokens.append(word)
    return tokens


class LexicalIndex:
    """BM25 over piece texts, kept in step with the vector store by piece id.

    ``path`` is a SQLite file (created if missing) or ``":memory:"``.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL") if self.path != ":memory:" else None
        self._db.executescript(
            """
            CREATE TABLE IF NOT EXISTS pieces (
                rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, thread_id TEXT NOT NULL, turn_id TEXT NOT NULL
            );
            CREATE INDEX IF NOT EXISTS pieces_thread ON pieces(thread_id);
            CREATE VIRTUAL TABLE IF NOT EXISTS pieces_fts USING fts5(tokens, tokenize='unicode61 remove_diacritics 0');
            """
        )
        self._db.commit()

    def close(self) -> None:
        self._db.close()

    def upsert(self, ids: Sequence[str], texts: Sequence[str], thread_ids: Sequence[str], turn_ids: Sequence[str]) -> None:
        """Add or replace pieces (one transaction)."""
        if not (len(ids) == len(texts) == len(thread_ids) == len(turn_ids)):
            raise InputError("ids, texts, thread_ids and turn_ids must have the same length")
        with self._lock, self._db:
            self._delete(ids)
            for pid, text, thread, turn in zip(ids, texts, thread_ids, turn_ids):
                cur = self._db.execute("INSERT INTO pieces(id, thread_id, turn_id) VALUES (?, ?, ?)", (pid, thread, turn))
                self._db.execute(
                    "INSERT INTO pieces_fts(rowid, tokens) VALUES (?, ?)", (cur.lastrowid, " ".join(tokenize(text)))
                )

    def _delete(self, ids: Iterable[str]) -> None:
        ids = list(ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            self._db.execute(f"DELETE FROM pieces_fts WHERE rowid IN (SELECT rowid FROM pieces WHERE id IN ({marks}))", chunk)
            self._db.execute(f"DELETE FROM pieces WHERE id IN ({marks})", chunk)

    def delete(self, ids: Iterable[str]) -> None:
        """Remove pieces by id (unknown ids are ignored)."""
        with self._lock, self._db:
            self._delete(ids)

    def ids(self, thread_id: str | None = None) -> set[str]:
        with self._lock:
            if thread_id is None:
                rows = self._db.execute("SELECT id FROM pieces").fetchall()
            else:
                rows = self._db.execute("SELECT id FROM pieces WHERE thread_id = ?", (thread_id,)).fetchall()
        return {r[0] for r in rows}

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pieces").fetchone()[0])

    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """Top ``k`` ``(id, bm25)`` for ``query`` (any of its tokens), scoped to ``thread_ids`` inside the SQL query."""
        tokens = sorted(set(tokenize(query)))
        if not tokens or k < 1:
            return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in tokens)
        sql = (
            "SELECT p.id, -bm25(pieces_fts) AS score FROM pieces_fts JOIN pieces p ON p.rowid = pieces_fts.rowid "
            "WHERE pieces_fts MATCH ?"
        )
        params: list[object] = [match]
        if thread_ids is not None:
            thread_ids = list(thread_ids)
            sql += f" AND p.thread_id IN ({','.join('?' * len(thread_ids))})"
            params.extend(thread_ids)
        sql += " ORDER BY bm25(pieces_fts) LIMIT ?"
        params.append(int(k))
        with self._lock:
            return [(r[0], float(r[1])) for r in self._db.execute(sql, params).fetchall()]
