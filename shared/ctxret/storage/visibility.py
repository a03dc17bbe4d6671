"""What a search may see of the writes in flight in this process: every write whole, before it or after it.

A write reaches Chroma in steps (the new pieces upserted, then the stale ones deleted, then the lexical file in one
transaction), and searches run beside it without a lock. Read between two steps, a rewritten turn holds both of its
versions; read during a delete, Chroma itself may fail ("Error finding id": an id its metadata still lists and its
vectors no longer hold). Every :class:`~.pieces.PieceStore` on one store in a process shares one :class:`InFlight`,
which every change of the pieces declares itself to (:meth:`InFlight.change`), and which every read a search makes
asks what it must not show (:meth:`InFlight.begin` / :meth:`InFlight.end`):

* while a write is **adding** its pieces, the ids it adds are hidden: the search sees the store before it (nothing
  is removed before that step ends);
* once it is **removing** the stale ids (every new piece is stored by then), those ids are hidden: the search sees
  the store after it; so are the stale ids of every write that ended while the read ran;
* a clear hides everything while it runs.

So the ids a read returns are filtered into one version of every write in flight; the reads that give a search its
texts (``complete``), parents and documents are filtered last, so no hit and no parent mixes two versions. A read
that fails while a write overlapped it is made again once the write is over (:meth:`InFlight.wait`). A thread's
pieces, read into the thread cache, are read while no change of that thread is in flight and kept only when none
began meanwhile (:meth:`InFlight.touched`); a cached thread stays cached while it is rewritten (the "before" view)
and leaves the cache when the write ends.

A search of the whole store reads several times (the graph search, the lexical hits, then the texts of the hits it
keeps, their parents), and each read alone may fall on another side of a write: the graph search before it (the old
pieces), the texts after it (the old pieces gone), and the thread is missing from the answer. So such a search reads
in one :class:`Session` (``PieceStore.searching``), which fixes its side of every write once, when it starts: a write
that was removing already is seen after it (its stale ids hidden), any other before it (its added ids hidden, for
the whole search, even once it removes); and a write waits, before it removes anything, until the sessions that see
it "before" have ended (:attr:`InFlight.grace` seconds at most: a session that long loses what the write removes
meanwhile, as a read alone does). A session belongs to its thread: a write never waits for a search its own thread
holds open. Thread-scoped searches read a cached thread, whole, and open no session.

Only this process's writes are known here: on a Chroma server, other processes' writes reach a search through the
change log (:mod:`.changes`) and may show both versions of a turn while they run.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterable, Iterator

__all__ = ["Change", "Hidden", "InFlight", "NOTHING", "Session"]

logger = logging.getLogger(__name__)


class Hidden:
    """The ids one read must not show (``everything``: none of them)."""

    __slots__ = ("ids", "everything")

    def __init__(self, ids: Iterable[str] = (), everything: bool = False) -> None:
        self.ids = frozenset(ids)
        self.everything = everything

    def __contains__(self, rid: object) -> bool:
        return self.everything or rid in self.ids

    def __bool__(self) -> bool:
        return self.everything or bool(self.ids)

    def __repr__(self) -> str:
        return "Hidden(everything)" if self.everything else f"Hidden({len(self.ids)} ids)"


#: Nothing hidden (no write in flight, none ended during the read).
NOTHING = Hidden()


class Change:
    """One change of the pieces in flight: the threads it touches (``None``: any), what it adds and removes."""

    __slots__ = ("threads", "added", "stale", "everything", "removing", "owner", "ended")

    def __init__(self, threads: Collection[str] | None) -> None:
        self.threads = None if threads is None else frozenset(str(t) for t in threads)
        self.added: frozenset[str] = frozenset()
        self.stale: frozenset[str] = frozenset()
        self.everything = False  # a clear: every piece goes
        self.removing = 0  # the sequence number at which it began removing (0: adding)
        self.owner = threading.get_ident()
        self.ended = 0  # the sequence number at its end (0 while in flight)

    def touches(self, threads: Collection[str] | None) -> bool:
        return self.threads is None or threads is None or not self.threads.isdisjoint(threads)


class Session:
    """The reads of one search of the whole store, which see every write from one side (see the module docstring):
    opened (:meth:`InFlight.open`) before its first read, closed (:meth:`InFlight.close`) after its last."""

    __slots__ = ("seq", "after", "owner")

    def __init__(self) -> None:
        self.seq: int | None = None  # the sequence number it opened at (None: not opened)
        self.after: frozenset[Change] = frozenset()  # the writes it sees after them (removing when it opened)
        self.owner = threading.get_ident()  # the thread it belongs to (a write of that thread never waits for it)


class InFlight:
    """The changes of one store in flight in this process, and the reads that run beside them."""

    #: Seconds a write waits, before it removes pieces, for the searches that see it "before" to end.
    grace = 10.0

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0  # moves at every change's start, its start of removing, and its end
        self._active: list[Change] = []
        self._ended: list[Change] = []  # kept while a read that began before their end runs
        self._reads: Counter[int] = Counter()  # the stamps of the reads running (a session's: while it is open)
        self._sessions: list[Session] = []  # the sessions open
        self._held = 0  # writes waiting for sessions now

    # -- the writer's side -------------------------------------------------------------------------
    @contextlib.contextmanager
    def change(self, threads: Collection[str] | None) -> Iterator[Change]:
        """Declare a change of ``threads`` (``None``: any thread) for as long as the block runs."""
        change = Change(threads)
        with self._cond:
            self._seq += 1
            self._active.append(change)
        try:
            yield change
        finally:
            with self._cond:
                self._seq += 1
                change.ended = self._seq
                self._active.remove(change)
                if self._reads:
                    self._ended.append(change)
                self._cond.notify_all()

    def adding(self, change: Change, ids: Iterable[str]) -> None:
        """Before ``change`` writes pieces: the ids it adds stay hidden until it starts removing (or ends)."""
        with self._cond:
            change.added = frozenset(ids)

    def removing(self, change: Change, ids: Iterable[str] = (), *, everything: bool = False) -> None:
        """Before ``change`` removes ``ids`` (``everything``: every piece), once everything it adds is stored; returns
        when no session that sees the store before ``change`` is open (:attr:`grace` seconds at most), so what it
        removes is never gone under a search that saw it."""
        with self._cond:
            change.stale = frozenset(ids)
            change.everything = everything
            self._seq += 1
            change.removing = self._seq
            if not (change.stale or everything):
                return
            me = threading.get_ident()

            def before() -> bool:
                return any(s.seq is not None and s.seq < change.removing and s.owner != me for s in self._sessions)

            if not before():
                return
            self._held += 1
            started = time.monotonic()
            try:
                if not self._cond.wait_for(lambda: not before(), self.grace):
                    logger.warning(
                        "a write waited %.0f s for searches that began before it to end; it goes on (those searches "
                        "may miss what it removes)",
                        time.monotonic() - started,
                    )
            finally:
                self._held -= 1

    def held(self) -> int:
        """How many writes wait now for searches that see the store before them (:meth:`removing`)."""
        with self._cond:
            return self._held

    # -- the readers' side -------------------------------------------------------------------------
    def begin(self) -> int:
        """Before a read: its stamp, for :meth:`end` and :meth:`touched`."""
        with self._cond:
            self._reads[self._seq] += 1
            return self._seq

    def end(self, stamp: int) -> Hidden:
        """After a read begun at ``stamp``: what it must not show (see the module docstring)."""
        with self._cond:
            hidden = self._hidden(stamp)
            self._reads[stamp] -= 1
            if not self._reads[stamp]:
                del self._reads[stamp]
            oldest = min(self._reads, default=self._seq)
            self._ended = [c for c in self._ended if c.ended > oldest]
        return hidden

    def open(self, session: Session) -> None:
        """Open ``session`` (once; before its first read): from now on it sees each write from one side."""
        with self._cond:
            if session.seq is not None:
                return
            session.seq = self._seq
            session.after = frozenset(c for c in self._active if c.removing)
            self._reads[session.seq] += 1
            self._sessions.append(session)

    def close(self, session: Session) -> None:
        """Close ``session`` (after its last read; a session never opened: nothing)."""
        with self._cond:
            if session.seq is None or session not in self._sessions:
                return
            self._sessions.remove(session)
            self._reads[session.seq] -= 1
            if not self._reads[session.seq]:
                del self._reads[session.seq]
            oldest = min(self._reads, default=self._seq)
            self._ended = [c for c in self._ended if c.ended > oldest]
            self._cond.notify_all()

    def seen(self, session: Session) -> Hidden:
        """What a read of ``session`` must not show: the added ids of every write it sees before it, the stale ids
        of every write it sees after it (see the module docstring)."""
        with self._cond:
            if session.seq is None:
                raise RuntimeError("a read of a session that is not open")
            ids: set[str] = set()
            for c in [*self._active, *(c for c in self._ended if c.ended > (session.seq or 0))]:
                if c in session.after:
                    if c.everything:
                        return Hidden(everything=True)
                    ids.update(c.stale)
                else:
                    ids.update(c.added)
            return Hidden(ids) if ids else NOTHING

    def _hidden(self, stamp: int) -> Hidden:
        if not self._active and not self._ended:
            return NOTHING
        ids: set[str] = set()
        for c in self._active:
            if c.removing and c.everything:
                return Hidden(everything=True)
            ids.update(c.stale if c.removing else c.added)
        for c in self._ended:
            if c.ended > stamp:
                if c.everything:
                    return Hidden(everything=True)
                ids.update(c.stale)
        return Hidden(ids) if ids else NOTHING

    def touched(self, threads: Collection[str] | None, stamp: int) -> bool:
        """Whether a change of ``threads`` (``None``: of any) was in flight at any time since ``stamp``."""
        with self._cond:
            return any(c.touches(threads) for c in self._active) or any(
                c.ended > stamp and c.touches(threads) for c in self._ended
            )

    def wait(self, threads: Collection[str] | None, timeout: float | None = None) -> bool:
        """Wait until no change of ``threads`` (``None``: of any) is in flight, but this thread's own (``timeout``
        seconds at most); ``True`` when none is."""
        me = threading.get_ident()
        with self._cond:
            return self._cond.wait_for(
                lambda: not any(c.touches(threads) and c.owner != me for c in self._active), timeout
            )
