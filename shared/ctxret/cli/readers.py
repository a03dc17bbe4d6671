"""Reading input files for ``ctxret index``: JSONL threads and text/markdown documents, checked completely
before anything is written."""

from __future__ import annotations

import fnmatch
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
    document: tuple[str, str] | None = None  # a document's (thread_id, doc_id): it replaces the stored one whole


#: Files a folder walk picks up by default (``--include``).
DEFAULT_INCLUDE = tuple(f"*{suffix}" for suffix in JSONL_SUFFIXES + DOCUMENT_SUFFIXES)


def collect_paths(
    names: Sequence[str], include: Sequence[str] = DEFAULT_INCLUDE, exclude: Sequence[str] = ()
) -> tuple[list[Path], list[Path]]:
    """The files to index and the folders they came from.

    A file named on the command line must exist and be of a supported type (else a clear error);
    a folder is walked recursively (sorted, hidden entries skipped), keeping files that match one of
    ``include`` and none of ``exclude`` (globs on the path relative to the folder, or on the name).
    """
    files: list[Path] = []
    roots: list[Path] = []
    supported = ", ".join(JSONL_SUFFIXES + DOCUMENT_SUFFIXES)
    for name in names:
        path = Path(name)
        if path.is_dir():
            roots.append(path)
            found = 0
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(path)
                if any(part.startswith(".") for part in rel.parts) or not child.is_file():
                    continue
                if not _matches(rel, include) or _matches(rel, exclude):
                    continue
                if child.suffix.lower() not in JSONL_SUFFIXES + DOCUMENT_SUFFIXES:
                    raise UsageError(
                        f"{child}: --include picked a file of type {child.suffix or '(none)'!r}; "
                        f"ctxret indexes {supported}"
                    )
                files.append(child)
                found += 1
            if not found:
                raise UsageError(
                    f"{name}: the folder holds no file matching {', '.join(include)} (see --include/--exclude)"
                )
            continue
        suffix = path.suffix.lower()
        if not path.exists():
            raise FileProblem(name, None, "no such file or folder")
        if suffix not in JSONL_SUFFIXES + DOCUMENT_SUFFIXES:
            raise UsageError(
                f"{name}: unsupported file type {suffix or '(none)'!r}; "
                f"ctxret indexes {supported} (and folders of them)"
            )
        files.append(path)
    unique = list(dict.fromkeys(p.resolve() for p in files))
    return [Path(p) for p in unique], roots


def _matches(rel: Path, globs: Sequence[str]) -> bool:
    return any(rel.match(g) or fnmatch.fnmatch(rel.as_posix(), g) for g in globs)


def document_root(files: Sequence[Path], root: str | None = None) -> Path:
    """The folder document ids are relative to: ``--root``, else the common parent of the documents."""
    if root is not None:
        base = Path(root).resolve()
        if not base.is_dir():
            raise UsageError(f"--root {root}: not a folder")
        outside = [
            str(f) for f in files if f.suffix.lower() in DOCUMENT_SUFFIXES and not f.resolve().is_relative_to(base)
        ]
        if outside:
            raise UsageError(
                f"--root {root}: {outside[0]} is not inside it; document ids are paths relative to the root"
            )
        return base
    docs = [f.resolve().parent for f in files if f.suffix.lower() in DOCUMENT_SUFFIXES]
    if not docs:
        return Path.cwd().resolve()
    return Path(os.path.commonpath([str(d) for d in docs]))


def read_input_file(path: Path, thread: str | None = None, root: Path | None = None) -> InputFile:
    """Read and check one file completely; any problem raises :class:`FileProblem` with its line.

    A document's id is its path relative to ``root`` (default: its own folder), with ``/``.
    """
    if path.suffix.lower() in JSONL_SUFFIXES:
        return _read_jsonl(path, thread)
    return _read_document(path, thread, root if root is not None else path.resolve().parent)


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
    from ..ingest.messages import turns_from_messages

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


def document_key(path: Path, root: Path) -> str:
    """A document file's id: its path relative to ``root``, with ``/`` (never relative to the working directory).

    Indexing the same file again replaces the stored document whole; the id is also the default thread.
    """
    resolved = path.resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def _read_document(path: Path, thread: str | None, root: Path) -> InputFile:
    from ..ingest.documents import document_turns

    lines = _decode_lines(path)  # checks the encoding line by line
    text = "\n".join(line for _, line in lines)
    doc_id = document_key(path, root)
    try:
        turns = document_turns(text, title=path.name, doc_id=doc_id, thread_id=thread)
    except InputError as e:
        raise FileProblem(path, None, str(e)) from None
    return InputFile(path, turns, sorted({t.thread_id for t in turns}), "document", (thread or doc_id, doc_id))


