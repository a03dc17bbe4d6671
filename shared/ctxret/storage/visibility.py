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

Only this process's writes are known here: on a Chroma server, other processes' writes reach a search through the
change log (:mod:`.changes`) and may show both versions of a turn while they run.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator

__all__ = ["Change", "Hidden", "InFlight", "NOTHING"]


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
        self.removing = False
        self.owner = threading.get_ident()
        self.ended = 0  # the sequence number at its end (0 while in flight)

    def touches(self, threads: Collection[str] | None) -> bool:
        return self.threads is None or threads is None or not self.threads.isdisjoint(threads)


class InFlight:
    """The changes of one store in flight in this process, and the reads that run beside them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0  # moves at every change's start and end
        self._active: list[Change] = []
        self._ended: list[Change] = []  # kept while a read that began before their end runs
        self._reads: Counter[int] = Counter()  # the stamps of the reads running

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
        """Before ``change`` removes ``ids`` (``everything``: every piece), once everything it adds is stored."""
        with self._cond:
            change.stale = frozenset(ids)
            change.everything = everything
            change.removing = True

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
