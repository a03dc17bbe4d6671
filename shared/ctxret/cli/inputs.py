"""What reading one input file for ``ctxret index`` yields (:class:`InputFile`), the error that locates a problem in
it (:class:`FileProblem`), and the line-by-line UTF-8 decoding and JSON parsing the chat and document readers share."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CtxretError

if TYPE_CHECKING:
    from ..ingest.turns import Turn


class FileProblem(CtxretError):
    """A problem in an input file, located at ``path:line`` (the line may be unknown)."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


@dataclass(frozen=True)
class InputFile:
    """One file read and checked: its turns (not yet written) and the threads they belong to."""

    path: Path
    turns: list[Turn]
    threads: list[str]
    kind: str  # "messages", "threads" or "document"
    document: tuple[str, str] | None = None  # a document's (thread_id, doc_id): it replaces the stored one whole
    #: A chat file's messages, thread by thread, in the file's order: they are appended to their threads.
    chats: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    #: The title a chat export gives a thread (a conversation's name): shown in its turns' headers.
    titles: dict[str, str] = field(default_factory=dict)


def decode_lines(path: Path) -> list[tuple[int, str]]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FileProblem(path, None, f"cannot read it ({e.strerror or e})") from e
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FileProblem(
                path,
                number,
                f"not valid UTF-8 (byte {e.start + 1} of the line); save the file as UTF-8",
            ) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        lines.append((number, text))
    return lines


def parse_json(path: Path, line: int | None, text: str, fix: str) -> Any:
    """``text`` parsed as JSON, or a :class:`FileProblem` at ``path:line`` (``None``: the error's own line) that
    says what is wrong and ``fix``: invalid JSON, JSON nested deeper than Python reads, a number too long to read."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = e.lineno if line is None else line
        raise FileProblem(path, where, f"invalid JSON at column {e.colno} ({e.msg}); {fix}") from None
    except RecursionError:
        raise FileProblem(
            path, line, f"the JSON is nested deeper than can be read (about {sys.getrecursionlimit():,} levels); {fix}"
        ) from None
    except ValueError as e:  # an integer of more than 4,300 digits (Python's limit; its own hint is for programmers)
        what = str(e).split(";")[0]
        raise FileProblem(path, line, f"a value cannot be read ({what}); write such numbers as text; {fix}") from None
