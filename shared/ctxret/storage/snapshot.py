"""Read-only stores: an embedded folder searched without writing to it or taking its lock.

Chroma's embedded client writes to its folder as soon as it opens it (chromadb 1.5 fails on read-only media with
"attempt to write a readonly database"; it has no read-only client: chroma-core/chroma#1438). So a store opened read
only — ``read_only=True``, or a folder this process cannot write (read-only media, a volume mounted read only, a
store shipped inside a container image) — is copied into a private temporary folder (:func:`take_snapshot`: Chroma's
database and segments, the lexical file and the write journal; nothing else) and opened there; the copy goes when
the store is closed. Searches read the copy; every write is refused with a :class:`~ctxret.errors.StoreError`
(``PieceStore.refuse_writes``). The copy costs the folder's size in temporary space and the time to copy it (about
the time to read the folder once).

While copying a folder it can write, the store takes the folder's lock (waiting ``lock_timeout`` seconds for a process
that holds it), so the copy is never one taken in the middle of another process's write; on read-only media no process
can be writing.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import weakref
from pathlib import Path

from ..errors import StoreError
from .lock import FolderLock

logger = logging.getLogger(__name__)

__all__ = ["Snapshot", "copy_into", "take_snapshot", "writable"]

#: What a snapshot leaves out: this folder's lock and notes, stamps, files moved aside.
_LEAVE_OUT = ("ctxret.lock", "ctxret.lock.json", "*.checked", "*.damaged-*", "*.other-version-*", "*-shm")


def writable(folder: Path) -> bool:
    """Whether this process may write to ``folder`` (``False`` on read-only media, or without permission)."""
    return os.access(folder, os.W_OK)


class Snapshot:
    """A private copy of the store folder ``source`` at :attr:`path` inside the temporary folder ``root``, which
    :meth:`remove` deletes (as does the end of the process)."""

    def __init__(self, source: Path, path: Path, root: Path) -> None:
        self.source = source
        self.path = path
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(root), True)

    def remove(self) -> None:
        self._finalizer()


def take_snapshot(folder: str | os.PathLike[str], lock_timeout: float = 0.0) -> Snapshot:
    """Copy the store folder ``folder`` into a new temporary folder (see the module docstring)."""
    source = Path(folder).expanduser()
    if not (source / "chroma.sqlite3").is_file():
        raise StoreError(
            f"no store to open read-only at {source} (no chroma.sqlite3 there); give the folder of an existing store, "
            "or open it without read_only=True to create one"
        )
    lock = FolderLock(source).acquire(lock_timeout) if writable(source) else None
    target = Path(tempfile.mkdtemp(prefix="ctxret-read-only-"))
    try:
        shutil.copytree(source, target / "store", ignore=shutil.ignore_patterns(*_LEAVE_OUT))
    except OSError as e:
        shutil.rmtree(target, ignore_errors=True)
        raise StoreError(
            f"cannot copy the read-only store {source} to {target} to search it ({e.strerror or e}); Chroma cannot "
            "open a folder it may not write, so a read-only store is searched in a copy: free space in the temporary "
            "folder (TMPDIR), or open the store where it can be written"
        ) from e
    finally:
        if lock is not None:
            lock.release()
    snapshot = Snapshot(source, target / "store", target)
    logger.info("opened %s read-only: searching a copy in %s (removed on close)", source, target)
    return snapshot


def copy_into(snapshot: Snapshot, file: str | os.PathLike[str]) -> str:
    """A copy of a lexical file kept outside the store folder (``lexical_path``), beside the snapshot's files."""
    source = Path(file).expanduser()
    target = snapshot.path / f"lexical-path-{source.name}"
    for suffix in ("", "-wal"):
        if Path(f"{source}{suffix}").is_file():
            shutil.copyfile(f"{source}{suffix}", f"{target}{suffix}")
    return str(target)
