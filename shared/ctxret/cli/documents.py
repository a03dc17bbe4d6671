"""Reading a text or markdown document for ``ctxret index``: its id is its path relative to the root."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .inputs import FileProblem, InputFile, decode_lines


def document_key(path: Path, root: Path) -> str:
    """A document file's id: its path relative to ``root``, with ``/`` (never relative to the working directory).

    Indexing the same file again replaces the stored document whole; the id is also the default thread.
    """
    resolved = path.resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def read_document(path: Path, thread: str | None, root: Path) -> InputFile:
    from ..ingest.documents import document_turns

    lines = decode_lines(path)  # checks the encoding line by line
    text = "\n".join(line for _, line in lines)
    doc_id = document_key(path, root)
    try:
        turns = document_turns(text, title=path.name, doc_id=doc_id, thread_id=thread)
    except InputError as e:
        raise FileProblem(path, None, str(e)) from None
    return InputFile(path, turns, sorted({t.thread_id for t in turns}), "document", (thread or doc_id, doc_id))
