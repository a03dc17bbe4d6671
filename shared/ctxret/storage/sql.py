"""Two helpers of the lexical file's SQL: ids in ``IN (...)`` chunks, and text SQLite can store."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

__all__ = ["in_chunks", "safe_text"]

_SQL_CHUNK = 500  # values per SQL ``IN (...)``


def in_chunks(values: Sequence[str]) -> Iterator[tuple[list[str], str]]:
    """``values`` in chunks of :data:`_SQL_CHUNK`, each with its ``?,?,...`` placeholders for ``IN (...)``."""
    for start in range(0, len(values), _SQL_CHUNK):
        chunk = list(values[start : start + _SQL_CHUNK])
        yield chunk, ",".join("?" * len(chunk))


def safe_text(text: str) -> str:
    """``text`` storable by SQLite (lone surrogates replaced)."""
    return text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text
