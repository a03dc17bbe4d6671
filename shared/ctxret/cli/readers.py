"""Reading input files for ``ctxret index``: JSONL threads and text/markdown documents, checked completely before anything is written."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CtxretError, InputError
from .settings import UsageError

if TYPE_CHECKING:
    from ..ingest.turns import Turn

JSONL_SUFFIXES = (".jsonl",)
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt")

_JSONL_FIX = (
    'each line must be one JSON object: an OpenAI message ({"role": ..., "content": ...}) '
    'or a thread ({"thread_id": ..., "messages": [...]})'
)
_CORE_WHERE = re.compile(r"^message (\d+)(\S*): ")


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


def check_paths(paths: Sequence[str]) -> list[Path]:
    """Existing files of a supported type; an unknown type raises :class:`UsageError`."""
    out = []
    for name in paths:
        path = Path(name)
        suffix = path.suffix.lower()
        if suffix not in JSONL_SUFFIXES + DOCUMENT_SUFFIXES:
            supported = ", ".join(JSONL_SUFFIXES + DOCUMENT_SUFFIXES)
            raise UsageError(
                f"{name}: unsupported file type {suffix or '(none)'!r}; ctxret indexes {supported}"
            )
        if path.is_dir():
            raise UsageError(f"{name}: is a folder; pass its files (e.g. {name}/*.jsonl)")
        if not path.exists():
            raise FileProblem(name, None, "no such file")
        out.append(path)
    return out


def read_input_file(path: Path, thread: str | None = None) -> InputFile:
    """Read and check one file completely; any problem raises :class:`FileProblem` with its line."""
    if path.suffix.lower() in JSONL_SUFFIXES:
        return _read_jsonl(path, thread)
    return _read_document(path, thread)


def _decode_lines(path: Path) -> list[tuple[int, str]]:
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


def _read_jsonl(path: Path, thread: str | None) -> InputFile:
    from ..ingest.turns import turns_from_messages

    records: list[tuple[int, dict[str, Any]]] = []
    kind: str | None = None
    for number, text in _decode_lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise FileProblem(
                path, number, f"invalid JSON at column {e.colno} ({e.msg}); {_JSONL_FIX}"
            ) from None
        if not isinstance(obj, dict):
            raise FileProblem(
                path, number, f"expected a JSON object, got {type(obj).__name__}; {_JSONL_FIX}"
            )
        this = "threads" if "messages" in obj else "messages" if "role" in obj else None
        if this is None:
            raise FileProblem(
                path, number, f"the object has neither 'role' nor 'messages'; {_JSONL_FIX}"
            )
        if kind is None:
            kind = this
        elif this != kind:
            first = "thread objects" if kind == "threads" else "single messages"
            raise FileProblem(
                path,
                number,
                f"the file started with {first} but this line is not one; use one form per file",
            )
        records.append((number, obj))
    if not records:
        return InputFile(path, [], [], kind or "messages")

    turns: list[Turn] = []
    next_turn: dict[str, int] = {}

    def convert(
        messages: list[Any], thread_id: str, line_of_message: Any, line: int, label: str
    ) -> None:
        """Turns of ``messages``; a core error is located at the line of the message it names."""
        first = next_turn.get(thread_id, 1)
        try:
            new = turns_from_messages(messages, thread_id, first_turn=first)
        except InputError as e:
            text = str(e)
            m = _CORE_WHERE.match(text)
            if m is None:
                raise FileProblem(path, line, f"{label}{text}") from None
            i, field = int(m.group(1)), m.group(2).lstrip(".")
            if label:  # a thread object: the line holds many messages, name the one at fault
                where = f"{label}message {i}{m.group(2)}: "
            else:  # one message per line: the line is the message
                where = f"{field}: " if field else ""
            raise FileProblem(path, line_of_message(i), where + text[m.end() :]) from None
        turns.extend(new)
        if new:
            next_turn[thread_id] = new[-1].index + 1

    if kind == "messages":
        thread_id = thread or path.stem
        convert([obj for _, obj in records], thread_id, lambda i: records[i][0], records[0][0], "")
    else:
        for number, obj in records:
            messages = obj["messages"]
            if not isinstance(messages, list):
                raise FileProblem(
                    path,
                    number,
                    f"'messages' must be a list of message objects, got {type(messages).__name__}",
                )
            own = obj.get("thread_id")
            if thread is None and (not isinstance(own, str) or not own.strip()):
                raise FileProblem(
                    path,
                    number,
                    "the thread object needs a non-empty string 'thread_id' "
                    f"(got {own!r}), or pass --thread",
                )
            label = f"thread {own!r}, " if isinstance(own, str) and own.strip() else "thread, "
            convert(messages, thread or str(own), lambda i, n=number: n, number, label)
    threads = sorted({t.thread_id for t in turns})
    return InputFile(path, turns, threads, kind or "messages")


def document_key(path: Path) -> str:
    """A document file's id: its path relative to the working directory (else absolute), with ``/``.

    Indexing the same file again replaces its changed sections; the id is also the default thread.
    """
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def _read_document(path: Path, thread: str | None) -> InputFile:
    from ..ingest.documents import document_turns

    lines = _decode_lines(path)  # checks the encoding line by line
    text = "\n".join(line for _, line in lines)
    try:
        turns = document_turns(text, title=path.name, doc_id=document_key(path), thread_id=thread)
    except InputError as e:
        raise FileProblem(path, None, str(e)) from None
    return InputFile(path, turns, sorted({t.thread_id for t in turns}), "document")


