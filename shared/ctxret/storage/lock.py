"""One process per embedded store folder: an exclusive inter-process lock, taken when the folder is opened.

Chroma's embedded ``PersistentClient`` is not safe for two processes on one folder (measured: lost
vectors, ``Error finding id``, failed searches in the other process). So the first process to
open a folder holds ``<folder>/ctxret.lock`` (``filelock``: an OS-level lock, released when the
process ends, however it ends) until it closes the store; a second process gets a
:class:`~ctxret.errors.StoreError` naming the holder and the fix — a Chroma server, which many
processes and machines can share. Inside one process the lock is shared by every store opened
on the folder (counted), so reopening an index in the same process just works.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import StoreError

__all__ = ["FolderLock", "LOCK_NAME"]

LOCK_NAME = "ctxret.lock"
_INFO_NAME = "ctxret.lock.json"
_held: dict[Path, tuple[Any, int]] = {}  # resolved folder -> (FileLock, how many stores hold it)
_guard = threading.Lock()


class FolderLock:
    """The process's hold on one folder's lock; :meth:`release` once per :meth:`acquire`."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder).resolve()
        self._released = True

    def acquire(self) -> FolderLock:
        from filelock import FileLock, Timeout

        with _guard:
            lock, count = _held.get(self.folder, (None, 0))
            if lock is None:
                lock = FileLock(str(self.folder / LOCK_NAME), timeout=0, thread_local=False)
                try:
                    lock.acquire()
                except Timeout:
                    raise StoreError(_busy_message(self.folder)) from None
                _write_info(self.folder)
            _held[self.folder] = (lock, count + 1)
        self._released = False
        return self

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        with _guard:
            lock, count = _held.get(self.folder, (None, 0))
            if lock is None:
                return
            if count <= 1:
                del _held[self.folder]
                try:
                    (self.folder / _INFO_NAME).unlink(missing_ok=True)
                finally:
                    lock.release()
            else:
                _held[self.folder] = (lock, count - 1)

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


def _busy_message(folder: Path) -> str:
    try:
        info = json.loads((folder / _INFO_NAME).read_text(encoding="utf-8"))
        holder = f"process {info.get('pid')} on {info.get('host')} since {info.get('since')} (`{info.get('command')}`)"
    except (OSError, ValueError):
        holder = "another process"
    return (
        f"the store folder {str(folder)!r} is in use by {holder}. An embedded Chroma folder serves one process at a "
        "time (two processes corrupt it). Stop the other process, or share the data through a Chroma server: "
        f"`chroma run --path {folder}` and connect every process to it (ctxret --chroma-host HOST, or "
        "ContextualIndex(host=..., port=...))."
    )
