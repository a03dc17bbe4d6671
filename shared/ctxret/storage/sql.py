"""Helpers of the lexical file's SQL: ids in ``IN (...)`` chunks, text SQLite can store, and damage SQLite reports."""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from ..errors import StoreError

__all__ = ["damage_error", "in_chunks", "is_damage", "reports_damage", "safe_text"]

_F = TypeVar("_F", bound=Callable[..., Any])
#: SQLite's result codes for a damaged file: SQLITE_CORRUPT, SQLITE_NOTADB.
_DAMAGE_CODES = (11, 26)
_DAMAGE_WORDS = ("malformed", "not a database", "file is encrypted")

_SQL_CHUNK = 500  # values per SQL ``IN (...)``


def in_chunks(values: Sequence[str]) -> Iterator[tuple[list[str], str]]:
    """``values`` in chunks of :data:`_SQL_CHUNK`, each with its ``?,?,...`` placeholders for ``IN (...)``."""
    for start in range(0, len(values), _SQL_CHUNK):
        chunk = list(values[start : start + _SQL_CHUNK])
        yield chunk, ",".join("?" * len(chunk))


def safe_text(text: str) -> str:
    """``text`` storable by SQLite (lone surrogates replaced)."""
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text


def is_damage(e: BaseException) -> bool:
    """Whether a SQLite error says the file is damaged (not busy, locked, missing or read-only)."""
    if not isinstance(e, sqlite3.DatabaseError):
        return False
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _DAMAGE_CODES
    return any(w in str(e).lower() for w in _DAMAGE_WORDS)


def damage_error(path: str, e: BaseException) -> StoreError:
    """The error a damaged lexical file gives while the store runs: what is wrong, and that reopening repairs it."""
    return StoreError(
        f"the lexical file {path} is damaged ({e}); close the index and open it again: opening a store moves a "
        "damaged lexical file aside and rebuilds it from the pieces Chroma holds (no re-embedding)"
    )


def reports_damage(fn: _F) -> _F:
    """A method of an object with a ``path`` whose SQLite damage errors become :func:`damage_error` (the object is
    marked ``damaged``)."""

    @functools.wraps(fn)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(self, *args, **kwargs)
        except sqlite3.DatabaseError as e:
            if is_damage(e):
                self.damaged = True  # its file is not stamped as closed cleanly (heal.mark_checked)
                raise damage_error(str(getattr(self, "path", "?")), e) from e
            raise

    return wrapper  # type: ignore[return-value]
