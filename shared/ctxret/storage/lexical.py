"""A persistent, incremental, thread-scoped BM25 index on SQLite FTS5 (Python's standard library).

Engine: SQLite FTS5 ships inside Python's ``sqlite3`` module (no extra package), stores its
index in one file that survives restarts, updates row by row in transactions (add, replace and
delete cost what they touch, never a re-index of the corpus), can be shared by several
processes on one machine (WAL), and ranks with Okapi BM25 (``bm25()``: k1 = 1.2, b = 0.75).

Text is tokenized in Python (:mod:`ctxret.storage.tokenize`) and stored as space-separated tokens
in a column that FTS5's ``ascii`` tokenizer splits on spaces only, so indexing and querying share
one Unicode-aware tokenizer that does not depend on the SQLite build's Unicode tables.

Each row also carries a scope token (a hash of its thread id) in a zero-weight column, so a
thread-scoped search is an FTS5 intersection inside the query (and re-checked against the
stored thread id), never a filter after ranking. BM25 statistics (document frequencies,
average length) are over the whole file, i.e. every thread of the collection; FTS5 counts a
row's length over all its columns, so every piece is one token longer than its text (the scope
token) — the same for all pieces, a negligible shift of the length normalisation.

:meth:`LexicalIndex.coverage` gives the share of a query's IDF-weighted tokens a piece holds;
hybrid search uses it to let a strong lexical match through the cosine floor.

Searches run on the file's postings held in memory (:mod:`.postings`: the same numbers, ~50x
faster than an FTS5 ``MATCH`` over 100,000 pieces; the tests check them against FTS5's own SQL), read
from the file on the first search and kept in step with every committed write; a write through
another connection to the same file (another process) is noticed by SQLite's ``data_version`` and a
generation counter, and the postings are read again.

The index is keyed by piece id: ``ContextualIndex`` writes it right after Chroma, deletes from
both, and repairs it from Chroma's stored documents (:func:`~.lexical_sync.sync_from_store`)
when the two differ, without re-embedding anything.

The file also holds the write journal (:mod:`.journal`: the announcements of writes to Chroma,
:attr:`LexicalIndex.journal`) and a copy of each piece's document and metadata as Chroma holds them
(:mod:`.copies`, :attr:`LexicalIndex.copies`), both written in the same transactions as the tokens.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import CtxretError, InputError
from .copies import SCHEMA as COPIES_SCHEMA
from .copies import Copies, encode_copy
from .journal import SCHEMA as JOURNAL_SCHEMA
from .journal import Journal
from .postings import Postings
from .sql import damage_error, in_chunks, is_damage, reports_damage, safe_text
from .tokenize import Analysis, analysis

logger = logging.getLogger(__name__)

#: Version of the tokenizer and table layout. A file written by another version is emptied on
#: open and refilled from Chroma's stored documents (no re-embedding): the Chroma collection's
#: config does not depend on it.
LEXICAL_VERSION = "fts5-ascii-4"


@functools.lru_cache(maxsize=1)
def fts5_available() -> bool:
    """Whether this Python's SQLite has the FTS5 extension (python.org, Debian/Ubuntu and conda builds do)."""
    db = sqlite3.connect(":memory:")
    try:
        db.execute("CREATE VIRTUAL TABLE t USING fts5(x)")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        db.close()


def scope_token(thread_id: str) -> str:
    """The FTS5 token standing for one thread id (a hash; the stored id is checked too)."""
    return "t" + hashlib.sha256(str(thread_id).encode("utf-8", "surrogatepass")).hexdigest()[:24]


class LexicalIndex:
    """BM25 over piece texts, kept in step with the vector store by piece id.

    ``path`` is a SQLite file (created with its folder if missing) or ``":memory:"``. A file may
    be shared by several processes on one machine (WAL journal, 30 s busy timeout); it is
    local to that machine, which is why a Chroma server gets no lexical index by default.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, analysis: Analysis | None = None) -> None:
        if not fts5_available():
            raise CtxretError(
                f"the SQLite library of this Python ({sqlite3.sqlite_version}) has no FTS5 extension, which the "
                "lexical (BM25) index needs; use a Python whose sqlite3 has FTS5 (python.org, Debian/Ubuntu and "
                "conda builds do) or open the index with lexical=False for dense search only"
            )
        #: How texts become tokens (stopwords, stemming); recorded in the file with :data:`LEXICAL_VERSION`.
        self.analysis = analysis if analysis is not None else _default_analysis()
        self.version = f"{LEXICAL_VERSION}/{self.analysis.version}"
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
            self.path = str(Path(self.path).expanduser())
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=30.0, isolation_level=None)
        #: Whether the file was created, or emptied because another version wrote it: a fresh
        #: index needs a full fill from the vector store.
        self.fresh = False
        #: The announcements of writes to the vector store (:mod:`.journal`), in this file.
        self.journal = Journal(self._db, self._lock, self.path)
        #: Each piece's document and metadata as the vector store holds them (:mod:`.copies`).
        self.copies = Copies(self._db, self._lock, self.journal, self.path)
        #: Searches run on the file's postings held in memory (:mod:`.postings`), read on the first
        #: search and kept in step with every write.
        self._postings: Postings | None = None
        self._postings_version: int | None = None  # SQLite's data_version when last checked
        self._postings_generation: int | None = None  # ctxret_meta's generation the postings hold
        try:
            with self._lock:
                if self.path != ":memory:":
                    self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute("PRAGMA synchronous=NORMAL")
                    self._db.execute("PRAGMA journal_size_limit=1048576")  # the -wal shrinks back after checkpoints
                self._open_schema()
        except sqlite3.DatabaseError as e:
            self._db.close()
            if is_damage(e):
                raise damage_error(self.path, e) from e
            raise

    def _open_schema(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute("CREATE TABLE IF NOT EXISTS ctxret_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            row = db.execute("SELECT value FROM ctxret_meta WHERE key = 'version'").fetchone()
            if row is None or row[0] != self.version:
                if row is not None:
                    logger.warning(
                        "lexical index %s was written by another version (%s); refilling it as %s from the stored "
                        "texts (no re-embedding)",
                        self.path,
                        row[0],
                        self.version,
                    )
                db.execute("DROP TABLE IF EXISTS pieces_vocab")
                db.execute("DROP TABLE IF EXISTS pieces_fts")
                db.execute("DROP TABLE IF EXISTS pieces")
                db.execute("DROP TABLE IF EXISTS piece_copies")
                db.execute("DROP TABLE IF EXISTS pending_writes")  # the refill that follows covers them
                db.execute("DELETE FROM ctxret_meta")
                db.execute("INSERT INTO ctxret_meta VALUES ('version', ?)", (self.version,))
                self.fresh = True
            db.execute(
                "CREATE TABLE IF NOT EXISTS pieces (rowid INTEGER PRIMARY KEY, id TEXT UNIQUE NOT NULL, "
                "thread_id TEXT NOT NULL, turn_id TEXT NOT NULL)"
            )
            db.execute("CREATE INDEX IF NOT EXISTS pieces_thread ON pieces(thread_id)")
            db.execute(COPIES_SCHEMA)
            db.execute(JOURNAL_SCHEMA)
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS pieces_fts USING fts5(scope, tokens, tokenize='ascii')")
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS pieces_vocab USING fts5vocab(pieces_fts, 'row')")
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    # -- transactions --------------------------------------------------------------------------
    def _tx(self, after: Callable[[Postings], None] | None = None) -> _Transaction:
        """A write transaction; ``after(postings)`` brings the in-memory postings in step once it has committed."""
        return _Transaction(self, after)

    def _memory(self) -> Postings:
        """The postings, (re)read from the file when missing or when another connection has written
        to it since (SQLite's ``data_version``). Call under the lock."""
        version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        if self._postings is not None and version != self._postings_version:
            if self._generation() != self._postings_generation:  # another connection changed the pieces
                self._postings = None
            self._postings_version = version
        if self._postings is None:
            self._db.execute("BEGIN")  # one snapshot: the generation and the rows read together
            try:
                self._postings_generation = self._generation()
                rows = self._db.execute(
                    "SELECT p.id, p.thread_id, f.tokens FROM pieces p JOIN pieces_fts f ON f.rowid = p.rowid "
                    "ORDER BY p.rowid"
                )
                self._postings = Postings.from_rows(rows, self.analysis)
            finally:
                self._db.execute("COMMIT")
            self._postings_version = int(self._db.execute("PRAGMA data_version").fetchone()[0])
        return self._postings

    def _generation(self) -> int:
        row = self._db.execute("SELECT value FROM ctxret_meta WHERE key = 'generation'").fetchone()
        return int(row[0]) if row is not None else 0

    def _next_generation(self) -> None:
        """Inside a write transaction: count a change of the pieces (other connections' postings
        are read again); postings that missed another connection's change are dropped."""
        current = self._generation()
        if current != self._postings_generation:
            self._postings = None
        self._db.execute("INSERT OR REPLACE INTO ctxret_meta(key, value) VALUES ('generation', ?)", (str(current + 1),))
        self._postings_generation = current + 1

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> LexicalIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes --------------------------------------------------------------------------------
    @reports_damage
    def write(
        self,
        ids: Sequence[str] = (),
        texts: Sequence[str] = (),
        thread_ids: Sequence[str] = (),
        turn_ids: Sequence[str] = (),
        *,
        delete: Iterable[str] = (),
        settle: bool = False,
        stored: Sequence[tuple[str, Mapping[str, Any]]] | None = None,
    ) -> None:
        """Add or replace pieces and delete others in ONE transaction; ``settle`` clears the pending marker.

        ``stored``: each piece's ``(document, metadata)`` exactly as the vector store holds them,
        kept beside its tokens (:mod:`.copies`; without it, those reads go to the vector store)."""
        if not (len(ids) == len(texts) == len(thread_ids) == len(turn_ids)):
            raise InputError("ids, texts, thread_ids and turn_ids must have the same length")
        if stored is not None and len(stored) != len(ids):
            raise InputError("stored must give one (document, metadata) per id")
        rows = [
            (str(i), safe_text(str(th)), safe_text(str(tu)))
            for i, th, tu in zip(ids, thread_ids, turn_ids, strict=False)
        ]
        toks = [" ".join(self.analysis.index_tokens(t)) for t in texts]  # before the transaction: nothing half-written
        kept = [encode_copy(d, m) for d, m in stored] if stored is not None else [(None, None)] * len(rows)
        gone = [str(i) for i in ids] + [str(i) for i in delete]

        def after(postings: Postings) -> None:
            postings.delete(gone)
            postings.add_rows((pid, thread, tokens) for (pid, thread, _), tokens in zip(rows, toks, strict=False))

        with self._tx(after):
            self._next_generation()
            self._delete(gone)
            for (pid, thread, turn), tokens, copy in zip(rows, toks, kept, strict=False):
                cur = self._db.execute(
                    "INSERT INTO pieces(id, thread_id, turn_id) VALUES (?, ?, ?)", (pid, thread, turn)
                )
                self.copies.insert(cur.lastrowid, copy)
                self._db.execute(
                    "INSERT INTO pieces_fts(rowid, scope, tokens) VALUES (?, ?, ?)",
                    (cur.lastrowid, scope_token(thread), tokens),
                )
            if settle:
                self.journal.settle_latest()

    def upsert(
        self, ids: Sequence[str], texts: Sequence[str], thread_ids: Sequence[str], turn_ids: Sequence[str]
    ) -> None:
        """Add or replace pieces (one transaction)."""
        self.write(ids, texts, thread_ids, turn_ids)

    def delete(self, ids: Iterable[str], *, settle: bool = False) -> None:
        """Remove pieces by id (unknown ids are ignored)."""
        self.write(delete=list(ids), settle=settle)

    @reports_damage
    def clear(self, *, settle: bool = False) -> None:
        """Remove every piece."""
        with self._tx(Postings.clear):
            self._next_generation()
            self._db.execute("DELETE FROM pieces_fts")
            self.copies.clear()
            self._db.execute("DELETE FROM pieces")
            if settle:
                self.journal.settle_latest()

    @reports_damage
    def replace_all(self, records: Iterable[tuple[Any, ...]]) -> int:
        """Replace the whole content with ``(id, text, thread_id, turn_id[, document, metadata])``
        records in one transaction (``document, metadata``: as :meth:`write`'s ``stored``)."""
        n = 0
        with self._tx():
            self._next_generation()
            self._postings = None  # read again from the new content
            self._db.execute("DELETE FROM pieces_fts")
            self.copies.clear()
            self._db.execute("DELETE FROM pieces")
            for pid, text, thread, turn, *kept in records:
                cur = self._db.execute(
                    "INSERT INTO pieces(id, thread_id, turn_id) VALUES (?, ?, ?)",
                    (str(pid), safe_text(str(thread)), safe_text(str(turn))),
                )
                self.copies.insert(cur.lastrowid, encode_copy(*kept) if kept else (None, None))
                self._db.execute(
                    "INSERT INTO pieces_fts(rowid, scope, tokens) VALUES (?, ?, ?)",
                    (cur.lastrowid, scope_token(safe_text(str(thread))), " ".join(self.analysis.index_tokens(text))),
                )
                n += 1
        self.journal.settle_all()
        return n

    def _delete(self, ids: Sequence[str]) -> None:
        for chunk, marks in in_chunks([str(i) for i in ids]):
            self._db.execute(
                f"DELETE FROM pieces_fts WHERE rowid IN (SELECT rowid FROM pieces WHERE id IN ({marks}))", chunk
            )
            self.copies.delete(chunk, marks)
            self._db.execute(f"DELETE FROM pieces WHERE id IN ({marks})", chunk)

    # -- bookkeeping and space -------------------------------------------------------------------
    @reports_damage
    def meta_int(self, key: str) -> int:
        """An integer the store keeps in the file's ``ctxret_meta`` (0 when unset)."""
        with self._lock:
            row = self._db.execute("SELECT value FROM ctxret_meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row is not None and str(row[0]).lstrip("-").isdigit() else 0

    @reports_damage
    def set_meta_int(self, key: str, value: int, *, add: bool = False) -> int:
        """Set (``add``: add to) an integer in ``ctxret_meta``, in one transaction; returns its new value."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                row = self._db.execute("SELECT value FROM ctxret_meta WHERE key = ?", (key,)).fetchone()
                old = int(row[0]) if row is not None and str(row[0]).lstrip("-").isdigit() else 0
                new = old + value if add else value
                self._db.execute("INSERT OR REPLACE INTO ctxret_meta(key, value) VALUES (?, ?)", (key, str(new)))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return new

    def compact(self) -> None:
        """Give the file's free space back: FTS5's segments merged, the file rewritten without free pages, the
        ``-wal`` emptied. A failure (another connection busy with the file) is logged: the file stays as it was."""
        if self.path == ":memory:":
            return
        with self._lock:
            try:
                self._db.execute("INSERT INTO pieces_fts(pieces_fts) VALUES ('optimize')")
                self._db.execute("VACUUM")
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error as e:
                logger.warning("could not compact the lexical file %s (%s); it keeps its free pages", self.path, e)

    # -- reads ---------------------------------------------------------------------------------
    @reports_damage
    def ids(self, thread_id: str | None = None) -> set[str]:
        """Every stored piece id (of one thread)."""
        with self._lock:
            if thread_id is None:
                rows = self._db.execute("SELECT id FROM pieces").fetchall()
            else:
                rows = self._db.execute("SELECT id FROM pieces WHERE thread_id = ?", (safe_text(thread_id),)).fetchall()
        return {r[0] for r in rows}

    @reports_damage
    def last_turn(self, thread_id: str) -> int | None:
        """The highest chat turn number of ``thread_id`` the file holds (``turn_id`` ``<thread>#<n>``; 0: none), from
        its index (a few milliseconds at 10,000 turns); ``None`` while a write is announced (the file may be behind)."""
        prefix = f"{thread_id}#"
        with self._lock:
            if self.journal.pending:
                return None
            rows = self._db.execute(
                "SELECT DISTINCT turn_id FROM pieces WHERE thread_id = ?", (safe_text(thread_id),)
            ).fetchall()
        numbers = [r[0][len(prefix) :] for r in rows if r[0].startswith(prefix)]
        return max((int(n) for n in numbers if n.isdigit()), default=0)

    @reports_damage
    def known(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` the file holds."""
        ids = list(dict.fromkeys(str(i) for i in ids))
        out: set[str] = set()
        with self._lock:
            for chunk, marks in in_chunks(ids):
                out.update(r[0] for r in self._db.execute(f"SELECT id FROM pieces WHERE id IN ({marks})", chunk))
        return out

    @reports_damage
    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pieces").fetchone()[0])

    @reports_damage
    def thread_counts(self) -> dict[str, tuple[int, int]] | None:
        """``{thread_id: (pieces, turns)}`` from the file's index (no piece is read); ``None`` while a write is
        announced (:attr:`~.journal.Journal.pending`), when the file may be behind the vector store."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                if self.journal.pending:
                    return None
                rows = self._db.execute(
                    "SELECT thread_id, count(*), count(DISTINCT turn_id) FROM pieces GROUP BY thread_id"
                ).fetchall()
            finally:
                self._db.execute("COMMIT")
        return {str(t): (int(n), int(turns)) for t, n, turns in rows}

    @reports_damage
    def search(self, query: str, k: int, thread_ids: Sequence[str] | None = None) -> list[tuple[str, float]]:
        """Top ``k`` ``(id, bm25)`` for ``query`` (pieces holding any of its tokens), best first.

        ``bm25`` is Okapi BM25 (FTS5's ``bm25()`` with the sign flipped: higher is better, > 0).
        ``thread_ids`` scopes the search inside the FTS5 query; ``None`` searches every thread.
        """
        tokens = self.analysis.query_terms(query)
        if not tokens or k < 1:
            return []
        thread_ids = _thread_list(thread_ids)
        if thread_ids == []:
            return []
        with self._lock:
            return self._memory().search(query, k, thread_ids)

    @reports_damage
    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        """Exact BM25 of given pieces for ``query`` (the same number :meth:`search` gives them).

        Pieces that hold none of the query's tokens score 0.0; unknown ids (or ids outside
        ``thread_ids``) are left out.
        """
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return {}
        thread_ids = _thread_list(thread_ids)
        with self._lock:
            return self._memory().scores(query, ids, thread_ids)

    @reports_damage
    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Share of the query's term weight each piece holds:
        ``sum idf(t) for t in query ∩ piece / sum idf(t) for t in query``.

        ``idf`` is BM25's (Robertson) over the whole index, floored at 0, so words in half the
        pieces or more (``the``, ``is``) weigh nothing. 1.0: the piece holds every weighted query
        token; 0.0: none (or the query has no weighted token). Unknown ids are left out.
        """
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return {}
        with self._lock:
            return self._memory().coverage(query, ids)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` under the index's lock (rolled back on any error)."""

    def __init__(self, index: LexicalIndex, after: Callable[[Postings], None] | None = None) -> None:
        self.index = index
        self.after = after

    def __enter__(self) -> None:
        self.index._lock.acquire()
        try:
            self.index._db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self.index._lock.release()
            raise

    def __exit__(self, exc_type: object, *rest: object) -> None:
        index = self.index
        try:
            index._db.execute("ROLLBACK" if exc_type is not None else "COMMIT")
            if exc_type is None and index._postings is not None:
                if self.after is None:
                    return
                try:  # the file committed: the postings follow (or are read again on the next search)
                    self.after(index._postings)
                except BaseException:
                    index._postings = None
                    raise
        except BaseException:
            index._postings = None
            raise
        finally:
            index._lock.release()


def _default_analysis() -> Analysis:
    return analysis("english")


def _thread_list(thread_ids: str | Sequence[str] | None) -> list[str] | None:
    if thread_ids is None:
        return None
    if isinstance(thread_ids, str):
        return [safe_text(thread_ids)]
    return [safe_text(str(t)) for t in thread_ids]


def default_lexical_path(store_path: str | os.PathLike[str], collection: str) -> Path:
    """``<chroma folder>/ctxret-lexical-<collection>.sqlite3``: one file per collection, beside Chroma's own."""
    return Path(store_path) / f"ctxret-lexical-{collection}.sqlite3"


__all__ = [
    "LEXICAL_VERSION",
    "LexicalIndex",
    "default_lexical_path",
    "fts5_available",
    "scope_token",
]
