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
faster than an FTS5 ``MATCH`` over 100,000 pieces), read from the file on the first search and
kept in step with every committed write; a write through another connection to the same file
(another process) is noticed by SQLite's ``data_version`` and a generation counter, and the
postings are read again. ``LexicalIndex(memory=False)`` runs every search as an FTS5 query
(:mod:`.fts5`) instead.

The index is keyed by piece id: ``ContextualIndex`` writes it right after Chroma, deletes from
both, and repairs it from Chroma's stored documents (:func:`~.lexical_sync.sync_from_store`)
when the two differ, without re-embedding anything.

Beside each piece's tokens the file keeps a copy of its document and metadata exactly as Chroma
holds them (:meth:`LexicalIndex.stored`; table ``piece_copies``): an unscoped search reads the
texts of the hits it keeps, and a thread's first search its pieces' texts, from here (~0.4 ms for
the ~32 kept hits of a search) instead of from Chroma (2.5–6 ms at 100K pieces). The copy is
written in the same transaction as the tokens, by the same writes, replays and repairs, and is
only read while no write to Chroma is announced (:attr:`~LexicalIndex.pending`); an announcement
lists the pieces it writes, so the repair after a crash reads exactly those again from Chroma. A
piece the copy lacks (metadata JSON does not keep exactly) is read from Chroma.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import CtxretError, InputError
from .fts5 import fts5_coverage, fts5_scores, fts5_search, in_chunks, scope_token
from .postings import Postings
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


def _safe(text: str) -> str:
    """``text`` storable by SQLite (lone surrogates replaced)."""
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


class LexicalIndex:
    """BM25 over piece texts, kept in step with the vector store by piece id.

    ``path`` is a SQLite file (created with its folder if missing) or ``":memory:"``. A file may
    be shared by several processes on one machine (WAL journal, 30 s busy timeout); it is
    local to that machine, which is why a Chroma server gets no lexical index by default.
    """

    def __init__(
        self, path: str | os.PathLike[str] = ":memory:", *, analysis: Analysis | None = None, memory: bool = True
    ) -> None:
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
        # This object's writes announced by mark_pending() and not settled yet, per thread (LIFO).
        self._outstanding = threading.local()
        #: Searches run on the file's postings held in memory (:mod:`.postings`), read on the first
        #: search and kept in step with every write; ``False``: every search is an FTS5 query.
        self.memory = memory
        self._postings: Postings | None = None
        self._postings_version: int | None = None  # SQLite's data_version when last checked
        self._postings_generation: int | None = None  # ctxret_meta's generation the postings hold
        with self._lock:
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._open_schema()

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
                        "texts (no re-embedding)", self.path, row[0], self.version,
                    )  # fmt: skip
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
            # a piece's document and metadata as the vector store holds them (JSON), by the piece's rowid:
            # a table of its own, so that reading the postings does not page through them
            db.execute(
                "CREATE TABLE IF NOT EXISTS piece_copies (rowid INTEGER PRIMARY KEY, document TEXT NOT NULL, "
                "metadata TEXT NOT NULL)"
            )
            db.execute(
                "CREATE TABLE IF NOT EXISTS pending_writes (token TEXT PRIMARY KEY, pid INTEGER NOT NULL, "
                "host TEXT NOT NULL, since REAL NOT NULL, ids TEXT)"
            )
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS pieces_fts USING fts5(scope, tokens, tokenize='ascii')")
            db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS pieces_vocab USING fts5vocab(pieces_fts, 'row')")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- transactions --------------------------------------------------------------------------
    def _tx(self, after: Callable[[Postings], None] | None = None) -> _Transaction:
        """A write transaction; ``after(postings)`` brings the in-memory postings in step once it has committed."""
        return _Transaction(self, after)

    def _memory(self) -> Postings | None:
        """The postings, (re)read from the file when missing or when another connection has written
        to it since (SQLite's ``data_version``); ``None`` when memory is off. Call under the lock."""
        if not self.memory:
            return None
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

    # -- the write-ahead marker ----------------------------------------------------------------
    # Every write to the vector store is announced by a row of its own in ``pending_writes``
    # (token, pid, host), deleted in the same transaction as the lexical write that follows it. Any
    # number of writers (threads, processes sharing the file) can be in flight: none can clear
    # another's row, so a crash between the two stores always leaves a row, and the next open repairs.
    @property
    def pending(self) -> bool:
        """True while a write to the vector store may not have reached this index yet (or crashed)."""
        with self._lock:
            return self._db.execute("SELECT 1 FROM pending_writes LIMIT 1").fetchone() is not None

    def mark_pending(
        self,
        ids: Iterable[str] | None = None,
        *,
        new: Iterable[str] | None = None,
        stale: Iterable[str] = (),
        clear: bool = False,
    ) -> str:
        """Announce a write to the vector store; the write that follows (``settle=True``) clears it.

        ``ids``: the pieces the write touches (``None`` and nothing else given: it may touch any piece).
        A piece store's write says more, so that a crash can be finished or undone on the next open
        (:meth:`abandoned_writes`): ``new`` (ids not stored before; ``ids`` then lists the ones
        written again under the same id), ``stale`` (ids it deletes), or ``clear`` (it deletes
        every piece). If that write never comes (a crash, an error between the two stores), the
        announcement stays in the file until a repair (:func:`sync_from_store`) finds its writer
        gone, and reads those pieces again from the vector store.
        """
        token = os.urandom(8).hex()
        listed: str | None
        if clear:
            listed = json.dumps({"clear": True})
        elif new is not None or stale:
            listed = json.dumps(
                {"new": sorted({str(i) for i in new or ()}), "rewritten": sorted({str(i) for i in ids or ()}),
                 "stale": sorted({str(i) for i in stale})}
            )  # fmt: skip
        else:
            listed = None if ids is None else json.dumps(sorted({str(i) for i in ids}))
        with self._tx():
            self._db.execute(
                "INSERT INTO pending_writes(token, pid, host, since, ids) VALUES (?, ?, ?, ?, ?)",
                (token, os.getpid(), _HOST, time.time(), listed),
            )
        stack = getattr(self._outstanding, "tokens", None)
        if stack is None:
            stack = self._outstanding.tokens = []
        stack.append(token)
        return token

    def abandoned(self) -> set[str] | None:
        """The pieces announced by writers that are gone (:meth:`settle_all` would clear them): their
        content here may be older than the vector store's. ``None``: a gone writer did not list them
        (every piece may be affected)."""
        out: set[str] = set()
        for _, listed in self._gone_announcements():
            found = _listed(listed)
            if found is None or found.get("clear"):
                return None
            for key in ("ids", "new", "rewritten", "stale"):
                out.update(found.get(key, ()))
        return out

    def abandoned_writes(self) -> list[dict[str, Any]]:
        """The announcements of gone writers, oldest first, as ``{"new", "rewritten", "stale"}`` id lists,
        ``{"clear": True}``, ``{"ids": [...]}`` (a write that did not say which ids were new) or ``{}``
        (it did not list its pieces)."""
        return [_listed(listed) or {} for _, listed in self._gone_announcements()]

    def _gone_announcements(self) -> list[tuple[str, str | None]]:
        """``(token, listed ids as JSON or None)`` of the announcements whose writers are gone, or
        are this object's (what a full repair settles), oldest first."""
        mine = set(getattr(self._outstanding, "tokens", None) or [])
        with self._lock:
            rows = self._db.execute("SELECT token, pid, host, since, ids FROM pending_writes ORDER BY since").fetchall()
        return [
            (token, listed)
            for token, pid, host, since, listed in rows
            if token in mine or pid == os.getpid() or not _alive(pid, host, since)
        ]

    def _settle(self) -> None:
        """Inside a transaction: clear this thread's latest announcement."""
        stack = getattr(self._outstanding, "tokens", None)
        if stack:
            self._db.execute("DELETE FROM pending_writes WHERE token = ?", (stack.pop(),))

    def settle_all(self) -> None:
        """After a full repair: clear the announcements whose writers are gone (or are this object's).

        A live writer's announcement (another process sharing the file) stays: its own write clears it.
        """
        with self._tx():
            for token, _ in self._gone_announcements():
                self._db.execute("DELETE FROM pending_writes WHERE token = ?", (token,))
        if getattr(self._outstanding, "tokens", None):
            self._outstanding.tokens = []

    # -- writes --------------------------------------------------------------------------------
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
        kept beside its tokens for :meth:`stored` (without it, those reads go to the vector store)."""
        if not (len(ids) == len(texts) == len(thread_ids) == len(turn_ids)):
            raise InputError("ids, texts, thread_ids and turn_ids must have the same length")
        if stored is not None and len(stored) != len(ids):
            raise InputError("stored must give one (document, metadata) per id")
        rows = [(str(i), _safe(str(th)), _safe(str(tu))) for i, th, tu in zip(ids, thread_ids, turn_ids, strict=False)]
        toks = [" ".join(self.analysis.index_tokens(t)) for t in texts]  # before the transaction: nothing half-written
        kept = [_stored_row(d, m) for d, m in stored] if stored is not None else [(None, None)] * len(rows)
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
                self._copy(cur.lastrowid, copy)
                self._db.execute(
                    "INSERT INTO pieces_fts(rowid, scope, tokens) VALUES (?, ?, ?)",
                    (cur.lastrowid, scope_token(thread), tokens),
                )
            if settle:
                self._settle()

    def upsert(
        self, ids: Sequence[str], texts: Sequence[str], thread_ids: Sequence[str], turn_ids: Sequence[str]
    ) -> None:
        """Add or replace pieces (one transaction)."""
        self.write(ids, texts, thread_ids, turn_ids)

    def delete(self, ids: Iterable[str], *, settle: bool = False) -> None:
        """Remove pieces by id (unknown ids are ignored)."""
        self.write(delete=list(ids), settle=settle)

    def clear(self, *, settle: bool = False) -> None:
        """Remove every piece."""
        with self._tx(Postings.clear):
            self._next_generation()
            self._db.execute("DELETE FROM pieces_fts")
            self._db.execute("DELETE FROM piece_copies")
            self._db.execute("DELETE FROM pieces")
            if settle:
                self._settle()

    def replace_all(self, records: Iterable[tuple[Any, ...]]) -> int:
        """Replace the whole content with ``(id, text, thread_id, turn_id[, document, metadata])``
        records in one transaction (``document, metadata``: as :meth:`write`'s ``stored``)."""
        n = 0
        with self._tx():
            self._next_generation()
            self._postings = None  # read again from the new content
            self._db.execute("DELETE FROM pieces_fts")
            self._db.execute("DELETE FROM piece_copies")
            self._db.execute("DELETE FROM pieces")
            for pid, text, thread, turn, *kept in records:
                cur = self._db.execute(
                    "INSERT INTO pieces(id, thread_id, turn_id) VALUES (?, ?, ?)",
                    (str(pid), _safe(str(thread)), _safe(str(turn))),
                )
                self._copy(cur.lastrowid, _stored_row(*kept) if kept else (None, None))
                self._db.execute(
                    "INSERT INTO pieces_fts(rowid, scope, tokens) VALUES (?, ?, ?)",
                    (cur.lastrowid, scope_token(_safe(str(thread))), " ".join(self.analysis.index_tokens(text))),
                )
                n += 1
        self.settle_all()
        return n

    def _copy(self, rowid: int | None, copy: tuple[str | None, str | None]) -> None:
        if copy[0] is not None and copy[1] is not None:
            self._db.execute("INSERT INTO piece_copies(rowid, document, metadata) VALUES (?, ?, ?)", (rowid, *copy))

    def _delete(self, ids: Sequence[str]) -> None:
        for chunk, marks in in_chunks([str(i) for i in ids]):
            for table in ("pieces_fts", "piece_copies"):
                self._db.execute(
                    f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM pieces WHERE id IN ({marks}))", chunk
                )
            self._db.execute(f"DELETE FROM pieces WHERE id IN ({marks})", chunk)

    # -- reads ---------------------------------------------------------------------------------
    def ids(self, thread_id: str | None = None) -> set[str]:
        """Every stored piece id (of one thread)."""
        with self._lock:
            if thread_id is None:
                rows = self._db.execute("SELECT id FROM pieces").fetchall()
            else:
                rows = self._db.execute("SELECT id FROM pieces WHERE thread_id = ?", (_safe(thread_id),)).fetchall()
        return {r[0] for r in rows}

    def stored(self, ids: Iterable[str]) -> dict[str, tuple[str, dict[str, Any]]] | None:
        """The ``(document, metadata)`` of pieces as the vector store holds them, for the ids kept
        here with them (the rest: read the vector store). ``None`` while a write to the vector store
        is announced and not settled (:attr:`pending`): until it settles, this copy may be behind.
        The announcement check and the rows are one snapshot of the file."""
        ids = list(dict.fromkeys(str(i) for i in ids))
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        with self._lock:
            self._db.execute("BEGIN")
            try:
                if self._db.execute("SELECT 1 FROM pending_writes LIMIT 1").fetchone() is not None:
                    return None
                for chunk, marks in in_chunks(ids):
                    rows = self._db.execute(
                        "SELECT p.id, c.document, c.metadata FROM pieces p JOIN piece_copies c ON c.rowid = p.rowid "
                        f"WHERE p.id IN ({marks})",
                        chunk,
                    )
                    for pid, document, meta in rows:
                        out[pid] = (document, json.loads(meta))
            finally:
                self._db.execute("COMMIT")
        return out

    def known(self, ids: Iterable[str]) -> set[str]:
        """Which of ``ids`` the file holds."""
        ids = list(dict.fromkeys(str(i) for i in ids))
        out: set[str] = set()
        with self._lock:
            for chunk, marks in in_chunks(ids):
                out.update(r[0] for r in self._db.execute(f"SELECT id FROM pieces WHERE id IN ({marks})", chunk))
        return out

    def count(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM pieces").fetchone()[0])

    def thread_counts(self) -> dict[str, tuple[int, int]] | None:
        """``{thread_id: (pieces, turns)}`` from the file's index (no piece is read); ``None`` while a write is
        announced (:attr:`pending`), when the file may be behind the vector store."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                if self._db.execute("SELECT 1 FROM pending_writes LIMIT 1").fetchone() is not None:
                    return None
                rows = self._db.execute(
                    "SELECT thread_id, count(*), count(DISTINCT turn_id) FROM pieces GROUP BY thread_id"
                ).fetchall()
            finally:
                self._db.execute("COMMIT")
        return {str(t): (int(n), int(turns)) for t, n, turns in rows}

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
            postings = self._memory()
            if postings is not None:
                return postings.search(query, k, thread_ids)
            return fts5_search(self._db, tokens, k, thread_ids)

    def scores(self, query: str, ids: Iterable[str], thread_ids: Sequence[str] | None = None) -> dict[str, float]:
        """Exact BM25 of given pieces for ``query`` (the same number :meth:`search` gives them).

        Pieces that hold none of the query's tokens score 0.0; unknown ids (or ids outside
        ``thread_ids``) are left out.
        """
        ids = list(dict.fromkeys(str(i) for i in ids))
        if not ids:
            return {}
        thread_ids = _thread_list(thread_ids)
        tokens = self.analysis.query_terms(query)
        with self._lock:
            postings = self._memory()
            if postings is not None:
                return postings.scores(query, ids, thread_ids)
            return fts5_scores(self._db, tokens, ids, thread_ids)

    def coverage(self, query: str, ids: Iterable[str]) -> dict[str, float]:
        """Share of the query's term weight each piece holds:
        ``sum idf(t) for t in query ∩ piece / sum idf(t) for t in query``.

        ``idf`` is BM25's (Robertson) over the whole index, floored at 0, so words in half the
        pieces or more (``the``, ``is``) weigh nothing. 1.0: the piece holds every weighted query
        token; 0.0: none (or the query has no weighted token). Unknown ids are left out.
        """
        ids = list(dict.fromkeys(str(i) for i in ids))
        tokens = self.analysis.coverage_terms(query)
        if not ids:
            return {}
        with self._lock:
            postings = self._memory()
            if postings is not None:
                return postings.coverage(query, ids)
            return fts5_coverage(self._db, tokens, ids)


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


_HOST = socket.gethostname()
#: An announcement from another machine (a lexical file on a shared disk) counts as abandoned after this long.
_FOREIGN_PENDING_SECONDS = 3600.0


def _alive(pid: int, host: str, since: float) -> bool:
    """Whether the writer of an announcement may still be running."""
    if host != _HOST:
        return time.time() - since < _FOREIGN_PENDING_SECONDS
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def _listed(listed: str | None) -> dict[str, Any] | None:
    """An announcement's id lists (see :meth:`LexicalIndex.mark_pending`); ``None``: none listed."""
    if listed is None:
        return None
    found = json.loads(listed)
    return {"ids": found} if isinstance(found, list) else dict(found)


def _stored_row(document: Any, metadata: Any) -> tuple[str | None, str | None]:
    """A piece's document and metadata as the file keeps them (JSON); ``(None, None)`` when the
    metadata does not survive JSON unchanged or either is not valid UTF-8 (a lone surrogate): that
    piece is read from the vector store instead."""
    if not isinstance(document, str) or not isinstance(metadata, Mapping):
        return None, None
    try:
        encoded = json.dumps(dict(metadata), ensure_ascii=False, allow_nan=True)
        for text in (document, encoded):
            text.encode("utf-8")  # SQLite text is UTF-8: a lone surrogate raises here, not in the transaction
    except (TypeError, ValueError):  # UnicodeEncodeError is a ValueError
        return None, None
    return (document, encoded) if json.loads(encoded) == dict(metadata) else (None, None)


def _default_analysis() -> Analysis:
    return analysis("english")


def _thread_list(thread_ids: str | Sequence[str] | None) -> list[str] | None:
    if thread_ids is None:
        return None
    if isinstance(thread_ids, str):
        return [_safe(thread_ids)]
    return [_safe(str(t)) for t in thread_ids]


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
