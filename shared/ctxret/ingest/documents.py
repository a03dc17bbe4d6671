"""Plain documents: text or markdown → sections (by headings, by size when there are none).

A section is the context of its pieces, the way a turn is for chat: pieces are labelled with the
document title and the section's heading path, e.g. ``[Runbook · Deploys › Rollback]``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InputError
from ..storage.schema import (
    MAX_ID_BYTES,
    MAX_LABEL_BYTES,
    as_list,
    check_metadata_arg,
    check_size,
    check_writable_thread,
    shown,
)
from ..text import clean_text
from .turns import Source, Turn

#: Sections of a document without headings are packed from paragraphs up to this many bytes.
SECTION_MAX_BYTES = 4000

# A closing run of ``#`` only counts when a space precedes it (CommonMark): "## Using C#" keeps its "#".
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_PARAGRAPHS = re.compile(r"\n[ \t]*\n")


def document_id(text: str, title: str | None = None) -> str:
    """A default document id: a hash of the title and text.

    Two documents with the same title (e.g. the pages of one PDF) stay apart. Pass an explicit id
    to have a re-added, edited document replace its old sections.
    """
    key = f"{title or ''}\x00{text}"
    return "doc-" + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:16]


def split_sections(text: str, max_section_bytes: int = SECTION_MAX_BYTES) -> list[tuple[str | None, str]]:
    """Split text into ``(heading path, body)`` sections.

    Markdown ATX headings (``#`` … ``######``, outside code fences) start sections; the heading
    path joins the enclosing headings with `` › ``. Text before the first heading is a section with
    no heading. With no headings at all, paragraphs are packed into sections of at most
    ``max_section_bytes`` (a longer paragraph is a section of its own).
    """
    text = clean_text(text)
    lines = text.splitlines()
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    path: list[tuple[int, str]] = []
    in_fence = False
    found_heading = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
        m = None if in_fence else _HEADING.match(line)
        if m:
            found_heading = True
            level = len(m.group(1))
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, m.group(2).strip()))
            sections.append((" › ".join(h for _, h in path), []))
        else:
            sections[-1][1].append(line)
    if found_heading:
        return [(h, "\n".join(body).strip()) for h, body in sections if "\n".join(body).strip()]
    out: list[tuple[str | None, str]] = []
    current: list[str] = []
    size = 0
    for para in (p.strip() for p in _PARAGRAPHS.split(text)):
        if not para:
            continue
        n = len(para.encode("utf-8"))
        if current and size + 2 + n > max_section_bytes:
            out.append((None, "\n\n".join(current)))
            current, size = [], 0
        current.append(para)
        size += n + (2 if size else 0)
    if current:
        out.append((None, "\n\n".join(current)))
    return out


def document_input(doc: Any, position: int = 0) -> tuple[str, str | None, str | None, dict[str, Any]]:
    """``(text, title, id, metadata)`` of one document: a string, or a dict ``{"text", "title"?, "id"?, "metadata"?}``.

    The one reading of a document every entry point shares (the core, both adapters, the CLI):
    ``id`` absent means the default id (:func:`document_id`: a hash of the title and the text).
    """
    where = f"document {position}"
    if isinstance(doc, str):
        return doc, None, None, {}
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: expected a string or a dict with 'text', got {type(doc).__name__}")
    if "text" not in doc:
        raise InputError(f"{where}: a dict document needs a 'text' key")
    text, title, doc_id, meta = doc["text"], doc.get("title"), doc.get("id"), doc.get("metadata")
    if not isinstance(text, str):
        raise InputError(f"{where}: 'text' must be a string, got {type(text).__name__}")
    for name, value, limit in (("title", title, MAX_LABEL_BYTES), ("id", doc_id, MAX_ID_BYTES)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(f"{where}: {name!r} must be a non-empty string or absent, got {shown(value)}")
        if value is not None:
            check_size(value, f"{where}: its {name!r}", limit)
    if meta is not None and not isinstance(meta, Mapping):
        raise InputError(f"{where}: 'metadata' must be a dict, got {type(meta).__name__}")
    return text, title, doc_id, dict(meta or {})


def documents_to_turns(
    documents: Iterable[Any] | str | Mapping[str, Any],
    *,
    thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[Turn]:
    """The section turns of documents given as strings or dicts (see :func:`document_input`);
    ``metadata`` goes on every piece, under each document's own."""
    return read_documents(documents, thread_id=thread_id, metadata=metadata)[0]


def read_documents(
    documents: Iterable[Any] | str | Mapping[str, Any],
    *,
    thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> tuple[list[Turn], list[tuple[str, str]]]:
    """:func:`documents_to_turns`, and each document's ``(thread_id, doc_id)`` (a document with no text
    has no sections, and is still named: re-adding it empty removes the stored one)."""
    if isinstance(documents, (str, Mapping)):
        documents = [documents]
    else:
        documents = as_list(documents, "documents", "strings or dicts {'text', 'title'?, 'id'?, 'metadata'?}")
    check_metadata_arg(metadata)
    turns: list[Turn] = []
    keys: list[tuple[str, str]] = []
    for i, doc in enumerate(documents):
        text, title, doc_id, meta = document_input(doc, i)
        merged = {**dict(metadata or {}), **meta}
        # thread_id and doc_id in the metadata are the document's own (one key for the caller and ctxret): they
        # place it when no argument does (an argument that disagrees is the write's error: plan.check_shared_keys)
        thread = thread_id if thread_id is not None else _shared(merged, "thread_id", i)
        doc_id = doc_id if doc_id is not None else _shared(merged, "doc_id", i)
        turns.extend(document_turns(text, title=title, doc_id=doc_id, thread_id=thread, metadata=merged))
        keys.append(document_key(text, title, doc_id, thread))
    return turns, keys


def _shared(meta: Mapping[str, Any], key: str, position: int) -> str | None:
    value = meta.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(
            f"document {position}: metadata {key!r} must be a non-empty string (it is the document's "
            f"{'thread' if key == 'thread_id' else 'id'}), got {value!r}"
        )
    return value


def document_key(
    text: str, title: str | None = None, doc_id: str | None = None, thread_id: str | None = None
) -> tuple[str, str]:
    """``(thread_id, doc_id)``: what a document is stored under (the thread defaults to the document id)."""
    if thread_id is not None:  # an empty one would silently become the document id
        check_writable_thread(thread_id)
    doc_id = doc_id or document_id(text, title)
    return (thread_id or doc_id, doc_id)


def document_turns(
    text: str,
    *,
    title: str | None = None,
    doc_id: str | None = None,
    thread_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    max_section_bytes: int = SECTION_MAX_BYTES,
) -> list[Turn]:
    """Turn a document into section turns. ``thread_id`` (the search scope) defaults to ``doc_id``."""
    if not isinstance(text, str):
        raise InputError(f"document text must be a string, got {type(text).__name__}")
    thread, doc_id = document_key(text, title, doc_id, thread_id)
    label = title or doc_id
    turns = []
    for index, (heading, body) in enumerate(split_sections(text, max_section_bytes), start=1):
        src = Source("section", heading or "", body, 0)
        turns.append(Turn(thread, index, (src,), label, "section", None, doc_id, dict(metadata or {})))
    return turns
