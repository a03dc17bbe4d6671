"""One process per embedded store folder: an exclusive inter-process lock, taken when the folder is opened.

Chroma's embedded ``PersistentClient`` is not safe for two processes on one folder (measured: lost
vectors, ``Error finding id``, failed searches in the other process). So the first process to
open a folder holds ``<folder>/ctxret.lock`` (``filelock``: an OS-level lock, released when the
process ends, however it ends) until it closes the store; a second process gets a
:class:`~ctxret.errors.StoreError` naming the holder and the fix — a Chroma server, which many
processes and machines can share. Inside one process the lock is shared by every store opened
on the folder (counted), so reopening an index in the same process just works. Every way to a
folder takes it: ``path=`` and ``client=chromadb.PersistentClient(folder)`` alike.

A process may wait for the holder instead of failing at once: ``acquire(timeout)`` (seconds;
``ContextualIndex(..., lock_timeout=...)``, CLI ``--wait``) logs that it waits, then takes the lock
as soon as the holder lets go, or fails with the same message once ``timeout`` has passed.

Inside a process, one write at a time per store (a folder or a server collection): :func:`writers_of`
gives every ``PieceStore`` open on it the same write lock and write counter (:class:`Writers`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import socket
import sys
import threading
import time
import weakref
from collections.abc import Collection, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from ..errors import InputError, StoreError
from .visibility import InFlight

__all__ = ["FolderLock", "LOCK_NAME", "Writers", "check_lock_timeout", "writers_of"]

logger = logging.getLogger(__name__)

LOCK_NAME = "ctxret.lock"
_INFO_NAME = "ctxret.lock.json"
_held: dict[Path, _Hold] = {}  # resolved folder -> this process's hold on its lock file
_guard = threading.Lock()  # guards _held and _gates
_gates: dict[Path, threading.Lock] = {}  # one thread of the process takes a folder's file lock at a time


class _Hold:
    """This process's hold on one folder's lock file: the lock, how many stores hold it, and which file it is (a
    folder deleted and made again under a live process holds a new file: a new hold, the old one ends with its
    holders)."""

    __slots__ = ("lock", "count", "file")

    def __init__(self, lock: Any, file: tuple[int, int] | None) -> None:
        self.lock, self.count, self.file = lock, 1, file


def _file_id(folder: Path) -> tuple[int, int] | None:
    try:
        st = (folder / LOCK_NAME).stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check_lock_timeout(value: Any) -> float:
    """``value`` as seconds to wait for a folder another process holds (``0``: fail at once; ``math.inf``:
    wait for as long as it takes), else an :class:`InputError`."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
        raise InputError(
            f"lock_timeout must be a number of seconds >= 0 (0: fail at once if another process holds the "
            f"store folder; math.inf: wait until it lets go), got {value!r}"
        )
    return float(value)


class FolderLock:
    """The process's hold on one folder's lock; :meth:`release` once per :meth:`acquire`."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).resolve()
        self._released = True
        self._hold: _Hold | None = None
        #: Whether the last :meth:`acquire` took the folder's file lock (no other hold of this process had it): what
        #: other processes wrote to the folder before is unknown to this one.
        self.newly_held = False

    def acquire(self, timeout: float = 0.0) -> FolderLock:
        """Hold the folder (shared with this process's other holders); another process's hold is waited
        for up to ``timeout`` seconds (:func:`check_lock_timeout`), then a :class:`StoreError`."""
        from filelock import FileLock, Timeout

        timeout = check_lock_timeout(timeout)
        with _guard:
            gate = _gates.setdefault(self.folder, threading.Lock())
        with gate:  # a wait below holds up this folder's other openers only, and no release
            with _guard:
                hold = _held.get(self.folder)
                if hold is not None and hold.file != _file_id(self.folder):
                    del _held[self.folder]  # the folder was deleted (or replaced) since: its lock file is another
                    hold = None
                if hold is not None:
                    hold.count += 1
            fresh = hold is None
            if hold is None:
                lock = FileLock(str(self.folder / LOCK_NAME), timeout=0, thread_local=False)
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    if timeout <= 0:
                        raise StoreError(_busy_message(self.folder)) from None
                    logger.warning(
                        "the store folder %r is in use by %s; waiting for it (%s)",
                        str(self.folder),
                        _holder(self.folder),
                        "until it lets go" if math.isinf(timeout) else f"up to {timeout:g} s",
                    )
                    try:
                        lock.acquire(timeout=-1 if math.isinf(timeout) else timeout)
                    except Timeout:
                        raise StoreError(_busy_message(self.folder, waited=timeout)) from None
                other = _live_holder(self.folder)
                if other is not None:  # its lock file was removed under it: this lock is on a new file
                    lock.release()
                    raise StoreError(_removed_message(self.folder, other))
                _write_info(self.folder)
                hold = _Hold(lock, _file_id(self.folder))
                with _guard:
                    _held[self.folder] = hold
        self.newly_held = fresh
        self._hold = hold
        self._released = False
        return self

    def release(self) -> bool:
        """Give this hold back; ``True`` when it was the process's last on the folder (the file lock is released)."""
        if self._released:
            return False
        self._released = True
        hold, self._hold = self._hold, None
        if hold is None:
            return False
        with _guard:
            hold.count -= 1
            if hold.count > 0:
                return False
            current = _held.get(self.folder) is hold
            if current:
                del _held[self.folder]
            try:
                if current:
                    (self.folder / _INFO_NAME).unlink(missing_ok=True)
            finally:
                hold.lock.release()
        return True

    def check(self) -> None:
        """A :class:`StoreError` when the folder's lock file is no longer the one this hold locked (removed, or
        replaced): another process may have opened the folder since, and two writers corrupt it."""
        hold = self._hold
        if hold is None or hold.file is None or _file_id(self.folder) == hold.file:
            return
        raise StoreError(
            f"the lock file {self.folder / LOCK_NAME} was removed or replaced while this process held the store "
            f"folder, so another process may have opened it since (two writers corrupt an embedded folder); nothing "
            "was written. Close every index on the folder in every process, then open it again (a new lock file is "
            "made); never delete ctxret.lock while a process uses the folder"
        )

    def __del__(self) -> None:  # an index dropped without close() still gives the folder back
        try:
            self.release()
        except Exception:  # noqa: S110  # interpreter shutdown: the OS releases the lock anyway
            pass


def _write_info(folder: Path) -> None:
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "command": " ".join(sys.argv)[:300],
    }
    try:
        (folder / _INFO_NAME).write_text(json.dumps(info), encoding="utf-8")
    except OSError:
        pass  # the lock is what counts; the note only helps the error message


def _live_holder(folder: Path) -> str | None:
    """The holder the folder's note names when that is another process of this host that is still running (its
    lock file was removed under it), else ``None`` (no note, this process, a process gone, another host)."""
    try:
        info = json.loads((folder / _INFO_NAME).read_text(encoding="utf-8"))
        pid, host = int(info.get("pid")), str(info.get("host"))
    except (OSError, ValueError, TypeError):
        return None
    if pid == os.getpid() or host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:  # it exists (another user's)
        pass
    return _holder(folder)


def _removed_message(folder: Path, holder: str) -> str:
    return (
        f"the store folder {str(folder)!r} is in use by {holder}, whose lock file {folder / LOCK_NAME} was removed: "
        "opening it beside that process would corrupt it. Stop that process (or close its index) and open the folder "
        f"again; if no such process uses the folder, delete {folder / _INFO_NAME} and open it again"
    )


def _holder(folder: Path) -> str:
    try:
        info = json.loads((folder / _INFO_NAME).read_text(encoding="utf-8"))
        return f"process {info.get('pid')} on {info.get('host')} since {info.get('since')} (`{info.get('command')}`)"
    except (OSError, ValueError):
        return "another process"


def _busy_message(folder: Path, waited: float = 0.0) -> str:
    after = f" (waited {waited:g} s)" if waited else ""
    return (
        f"the store folder {str(folder)!r} is in use by {_holder(folder)}{after}. An embedded Chroma folder serves one "
        "process at a time (two processes corrupt it). Stop the other process, or wait for it "
        "(ContextualIndex(..., lock_timeout=SECONDS); ctxret --wait SECONDS), or share the data through a Chroma "
        f"server: `chroma run --path {folder}` and connect every process to it (ctxret --chroma-host HOST, or "
        "ContextualIndex(host=..., port=...))."
    )


class _Cache(Protocol):
    """A thread cache (:class:`~.cache.ThreadCache`): what a write drops its threads from, or updates them in."""

    def invalidate(self, thread_ids: Iterable[str] | None = None) -> None: ...

    def update(self, written: Mapping[str, Any], stale: Collection[str] = ()) -> None: ...

    def holding(self, thread_ids: Iterable[str]) -> set[str]: ...


class Writers:
    """The one write lock and write counter of a store inside this process, shared by every
    ``PieceStore`` open on it (two indexes on one folder, or one server collection), their thread
    caches (a write drops the threads it changes from every one of them) and the changes in flight that
    searches beside them must see whole (:class:`~.visibility.InFlight`)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.generation = 0
        self.caches: weakref.WeakSet[_Cache] = weakref.WeakSet()
        self.inflight = InFlight()
        self._threads: weakref.WeakValueDictionary[str, _ThreadLock] = weakref.WeakValueDictionary()
        self._threads_guard = threading.Lock()
        #: The highest chat turn number in use in each thread as this process knows it (read once, then kept by
        #: every write of a store only this process writes: ``PieceStore.thread_end``); a thread missing: not known.
        self.heads: dict[str, int] = {}
        #: The turn each thread's last append in this process opened and left awaiting a reply (a user message last):
        #: the turn a reply this process sends alone continues (``ctxret.ingest.append``).
        self.own: dict[str, int] = {}

    @contextlib.contextmanager
    def appending(self, thread_id: str) -> Iterator[None]:
        """One append to ``thread_id`` at a time in this process (appends to other threads go on beside it): an
        append reads the thread's end, numbers its turns after it and writes them, with no other append between."""
        with self._threads_guard:
            found = self._threads.get(thread_id)
            if found is None:
                found = self._threads[thread_id] = _ThreadLock()
        with found.lock:
            yield


class _ThreadLock:
    __slots__ = ("lock", "__weakref__")

    def __init__(self) -> None:
        self.lock = threading.RLock()


_writers: weakref.WeakValueDictionary[tuple[str, str], Writers] = weakref.WeakValueDictionary()
_writers_guard = threading.Lock()


def writers_of(where: str, collection: str) -> Writers:
    """The :class:`Writers` of ``collection`` in the store at ``where`` (a resolved folder, or where a
    server or client object is)."""
    key = (where, collection)
    with _writers_guard:
        found = _writers.get(key)
        if found is None:
            found = _writers[key] = Writers()
        return found
