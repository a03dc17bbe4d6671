"""Reading input files for ``ctxret index``: the folder walk (what to index, what was left out and why) and
:func:`read_input_file`, which hands each file to its reader: chat exports in :mod:`.chats` (the ``.json`` shapes
are listed there), documents in :mod:`.documents`; :mod:`.inputs` holds what they return.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .chats import THREAD_ID_KEYS, read_json, read_jsonl
from .documents import document_key, read_document
from .inputs import FileProblem, InputFile
from .settings import UsageError

__all__ = [
    "DEFAULT_INCLUDE",
    "DOCUMENT_SUFFIXES",
    "JSONL_SUFFIXES",
    "JSON_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "THREAD_ID_KEYS",
    "FileProblem",
    "InputFile",
    "Skipped",
    "collect_paths",
    "document_key",
    "document_root",
    "read_input_file",
    "skipped_summary",
]

JSONL_SUFFIXES = (".jsonl",)
JSON_SUFFIXES = (".json",)
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt")
#: Every file type ``ctxret index`` reads.
SUPPORTED_SUFFIXES = JSONL_SUFFIXES + JSON_SUFFIXES + DOCUMENT_SUFFIXES


#: Files a folder walk picks up by default (``--include``).
DEFAULT_INCLUDE = tuple(f"*{suffix}" for suffix in SUPPORTED_SUFFIXES)


@dataclass(frozen=True)
class Skipped:
    """A file a folder walk left out, and why (``hidden``, ``excluded``, ``not included``, ``special``: a FIFO,
    socket or device)."""

    path: Path
    reason: str


def collect_paths(
    names: Sequence[str], include: Sequence[str] = DEFAULT_INCLUDE, exclude: Sequence[str] = ()
) -> tuple[list[Path], list[Skipped]]:
    """The files to index and the files folder walks left out, with the reason.

    A file named on the command line must exist and be of a supported type (else a clear error);
    a folder is walked recursively (sorted), keeping files that match one of ``include`` and none of
    ``exclude`` (globs on the path relative to the folder, or on the name); files under a hidden
    entry (``.git/``, ``.env``) are left out and counted as hidden, and anything not a regular file (a FIFO, a
    socket, a device: reading one could block forever) as such; one named on the command line is an error.
    """
    files: list[Path] = []
    skipped: list[Skipped] = []
    supported = ", ".join(SUPPORTED_SUFFIXES)
    for name in names:
        path = Path(name)
        if path.is_dir():
            found = 0
            for child in sorted(path.rglob("*")):
                rel = child.relative_to(path)
                if child.is_dir():
                    continue
                if not child.is_file():  # a FIFO, socket or device: reading it could block forever
                    skipped.append(Skipped(child, "special"))
                    continue
                if any(part.startswith(".") for part in rel.parts):
                    skipped.append(Skipped(child, "hidden"))
                    continue
                if _matches(rel, exclude):
                    skipped.append(Skipped(child, "excluded"))
                    continue
                if not _matches(rel, include):
                    skipped.append(Skipped(child, "not included"))
                    continue
                if child.suffix.lower() not in SUPPORTED_SUFFIXES:
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
        if not path.is_file():
            raise FileProblem(
                name,
                None,
                "is not a regular file (a FIFO, socket or device, which reading could wait on forever); "
                "ctxret indexes files and folders of them: save the data to a file first",
            )
        if suffix not in SUPPORTED_SUFFIXES:
            raise UsageError(
                f"{name}: unsupported file type {suffix or '(none)'!r}; "
                f"ctxret indexes {supported} (and folders of them)"
            )
        files.append(path)
    unique = list(dict.fromkeys(p.resolve() for p in files))
    return [Path(p) for p in unique], skipped


def skipped_summary(skipped: Sequence[Skipped], include: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """What a folder walk left out, one line per reason (and per file type for files not included)."""
    if not skipped:
        return []
    lines = []
    by_type: dict[str, list[Path]] = {}
    for s in skipped:
        if s.reason == "not included":
            by_type.setdefault(s.path.suffix.lower() or "(no extension)", []).append(s.path)
    for suffix, paths in sorted(by_type.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        why = (
            f"ctxret indexes {', '.join(SUPPORTED_SUFFIXES)}"
            if suffix not in SUPPORTED_SUFFIXES
            else f"not matched by --include {' '.join(include)}"
        )
        lines.append(f"skipped {_count(paths)} of type {suffix} ({why}): {_some(paths)}")
    for reason, why in (
        ("excluded", f"matched --exclude {' '.join(exclude)}"),
        ("hidden", "under a hidden name such as .git/; name the file itself to index it"),
        ("special", "a FIFO, socket or device; save its data to a file to index it"),
    ):
        paths = [s.path for s in skipped if s.reason == reason]
        if paths:
            lines.append(f"skipped {len(paths)} {reason} file{'s' if len(paths) != 1 else ''} ({why}): {_some(paths)}")
    return lines


def _count(paths: Sequence[Path]) -> str:
    return f"{len(paths)} file" + ("s" if len(paths) != 1 else "")


def _some(paths: Sequence[Path], n: int = 3) -> str:
    shown = ", ".join(str(p) for p in paths[:n])
    return shown + (f" and {len(paths) - n} more" if len(paths) > n else "")


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
    try:
        if path.suffix.lower() in JSONL_SUFFIXES:
            return read_jsonl(path, thread)
        if path.suffix.lower() in JSON_SUFFIXES:
            return read_json(path, thread)
        return read_document(path, thread, root if root is not None else path.resolve().parent)
    except RecursionError:  # content or metadata nested deeper than the readers go
        raise FileProblem(
            path, None, "its content is nested too deeply to read; give each message its text, or a flat list of parts"
        ) from None
