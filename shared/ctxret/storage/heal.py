"""Derived files that heal: a lexical file (or write journal) that is damaged, truncated or from another version is
moved aside on open and rebuilt from Chroma's stored texts, without re-embedding.

The lexical file (and, with ``lexical=False``, the small journal file beside Chroma's) only holds what can be read
again from the Chroma collection: the pieces' tokens and copies, and the announcements of writes in flight. So a
file SQLite cannot read, one whose pages fail SQLite's own check (``PRAGMA quick_check``: a file truncated, or
overwritten in the middle), or one written by another version of ctxret is moved aside (``<name>.damaged-<time>`` /
``<name>.other-version-<time>``, with its ``-wal``; the warning names both paths and what was wrong), and a new file
takes its place: the store's open refills it from Chroma (:func:`~.lexical_sync.sync_from_store`). A missing file is
created and refilled the same way. What a moved-aside journal announced is lost: a write a crash cut off before this
open may leave a turn in two versions until it is written again (the write removes the other one).

The check reads the whole file (about 6 ms per 1,000 pieces). A file this process closed cleanly is stamped
(``<name>.checked``: its size, time and inode, and its ``-wal``'s) and not checked again while it is unchanged; the
stamp is dropped when the file is opened, so a crash or any other change means a check on the next open.
While the store runs, an error SQLite reports as damage is a :class:`~ctxret.errors.StoreError` naming the file and
the fix (:func:`~.sql.damage_error`).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..errors import StoreError
from .lexical import LEXICAL_VERSION, LexicalIndex
from .sql import is_damage
from .tokenize import Analysis

logger = logging.getLogger(__name__)

__all__ = ["database_problem", "drop_stamp", "mark_checked", "open_derived", "stamp_matches"]

_STAMP_SUFFIX = ".checked"


def open_derived(path: str | os.PathLike[str], *, analysis: Analysis, role: str = "lexical file") -> LexicalIndex:
    """The :class:`LexicalIndex` at ``path``, after moving a damaged file, or one from another version, aside.

    ``role`` names the file in the warning: ``"lexical file"`` or ``"write journal"`` (its announcements are lost)."""
    path = Path(path).expanduser()
    if path.exists():
        problem = _problem(path, f"{LEXICAL_VERSION}/{analysis.version}")
        if problem is not None:
            _move_aside(path, *problem, role)
    drop_stamp(path)  # open from here on: a crash or any change means a check next time
    try:
        return LexicalIndex(path, analysis=analysis)
    except StoreError as e:  # damage the check did not see (a stamped file changed since, keeping its stamp)
        if not is_damage(e.__cause__ or e):
            raise
        _move_aside(path, f"cannot be read ({e.__cause__})", "damaged", role)
        return LexicalIndex(path, analysis=analysis)


def mark_checked(path: str | os.PathLike[str]) -> None:
    """After this process closed the file at ``path`` cleanly: stamp it, so an unchanged file is not checked again."""
    if str(path) == ":memory:":
        return
    stamp = _stamp_of(Path(path))
    if stamp is None:
        return
    try:
        Path(f"{path}{_STAMP_SUFFIX}").write_text(json.dumps(stamp), encoding="utf-8")
    except OSError:  # a read-only folder: the next open checks the file
        pass


def _problem(path: Path, version: str) -> tuple[str, str] | None:
    """``(what is wrong, kind)`` with the file at ``path``, or ``None`` when it is fine (or new, or SQLite is busy)."""
    trusted = stamp_matches(path)
    try:
        db = sqlite3.connect(str(path), timeout=30.0)
    except sqlite3.Error:
        return None  # cannot even be opened (permissions): LexicalIndex says so
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "ctxret_meta" in tables:
            row = db.execute("SELECT value FROM ctxret_meta WHERE key = 'version'").fetchone()
            if row is not None and row[0] != version:
                return f"was written by another version ({row[0]}; this one writes {version})", "other-version"
        if not trusted:
            found = [r[0] for r in db.execute("PRAGMA quick_check")]
            if found != ["ok"]:
                return f"fails SQLite's check ({'; '.join(found[:3])})", "damaged"
        else:  # what opening reads (a millisecond at 100,000 pieces), in case it changed keeping its stamp
            for table in {"pieces", "pending_writes"} & tables:
                db.execute(f"SELECT count(*) FROM {table}").fetchone()
    except sqlite3.DatabaseError as e:
        if is_damage(e):
            return f"cannot be read ({e})", "damaged"
        return None  # busy or locked: not damage
    finally:
        db.close()
    return None


def database_problem(path: Path) -> str | None:
    """What SQLite's ``quick_check`` finds wrong with the database file at ``path`` (read only), or ``None``: fine, or
    busy (a lock is not damage)."""
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=30.0)
    except sqlite3.Error:
        return None
    try:
        found = [r[0] for r in db.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as e:
        return f"cannot be read ({e})" if is_damage(e) else None
    finally:
        db.close()
    return None if found == ["ok"] else f"fails SQLite's check ({'; '.join(found[:3])})"


def _move_aside(path: Path, problem: str, kind: str, role: str) -> None:
    aside = path.with_name(f"{path.name}.{kind}-{time.strftime('%Y%m%d-%H%M%S')}")
    n = 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{n}")
    try:
        path.replace(aside)
        for extra in ("-wal", "-shm"):
            sibling = Path(f"{path}{extra}")
            if sibling.exists():
                if extra == "-wal":
                    sibling.replace(Path(f"{aside}{extra}"))
                else:
                    sibling.unlink()
    except OSError as e:
        raise StoreError(
            f"the {role} {path} {problem}, and it cannot be moved aside ({e.strerror or e}); move or delete it "
            "yourself (it is rebuilt from Chroma's stored pieces on the next open, without re-embedding)"
        ) from e
    if role == "write journal":
        after = (
            "a new, empty one takes its place; the write announcements it held are lost: a write a crash cut off "
            "before may leave a turn in two versions until it is written again"
        )
    else:
        after = "a new one is rebuilt from the pieces Chroma holds (no re-embedding)"
    logger.warning("the %s %s %s: moved aside to %s; %s", role, path, problem, aside, after)


def _stamp_of(path: Path) -> dict[str, Any] | None:
    def stat(p: Path) -> list[int] | None:
        try:
            s = p.stat()
        except OSError:
            return None
        return [s.st_size, s.st_mtime_ns, s.st_ino]

    db = stat(path)
    return None if db is None else {"db": db, "wal": stat(Path(f"{path}-wal"))}


def stamp_matches(path: Path) -> bool:
    """Whether the file at ``path`` is as this process stamped it when it closed it cleanly (:func:`mark_checked`)."""
    try:
        kept = json.loads(Path(f"{path}{_STAMP_SUFFIX}").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return kept == _stamp_of(path)


def drop_stamp(path: Path) -> None:
    """Forget the stamp of the file at ``path`` (it is open: a crash or any change means a check next time)."""
    try:
        Path(f"{path}{_STAMP_SUFFIX}").unlink(missing_ok=True)
    except OSError:
        pass
