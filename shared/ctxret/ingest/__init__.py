"""Ingest: messages and documents → turns and sections → labelled pieces → context → the write path.

* :mod:`.turns` — the turn model (``Turn``, ``Source``, ``Piece``), chat messages → turns,
  labelled pieces (``label_pieces``), deterministic piece ids;
* :mod:`.documents` — text and markdown → sections, the document-id policy;
* :mod:`.context` — context strategies (``mean``, ``turn``, ``late``, ``llm``);
* :mod:`.plan` — a write planned (fit, label, metadata) and diffed with the store by unit;
* :mod:`.writer` — the one write path (batches of what changed: embed, context, blend, store);
* :mod:`.append` — messages added to the end of a thread (a message sent again adds nothing), and read back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_dir, lazy_getattr

if TYPE_CHECKING:
    from .append import append_messages, thread_messages
    from .context import context_vectors, late_context_vectors
    from .documents import document_id, document_turns, split_sections
    from .messages import turns_from_messages
    from .turns import Piece, Source, Turn, label_pieces, piece_id
    from .writer import plan_turns, write_turns

_NAMES = {
    "Piece": ".turns",
    "Source": ".turns",
    "Turn": ".turns",
    "label_pieces": ".turns",
    "piece_id": ".turns",
    "turns_from_messages": ".messages",
    "document_id": ".documents",
    "document_turns": ".documents",
    "split_sections": ".documents",
    "context_vectors": ".context",
    "late_context_vectors": ".context",
    "plan_turns": ".writer",
    "write_turns": ".writer",
    "append_messages": ".append",
    "thread_messages": ".append",
}
__getattr__ = lazy_getattr(__name__, _NAMES)
__dir__ = lazy_dir(globals(), _NAMES)
__all__ = [
    "Piece",
    "Source",
    "Turn",
    "append_messages",
    "context_vectors",
    "document_id",
    "document_turns",
    "label_pieces",
    "late_context_vectors",
    "piece_id",
    "plan_turns",
    "split_sections",
    "thread_messages",
    "turns_from_messages",
    "write_turns",
]
