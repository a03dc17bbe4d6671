"""The turn model: turns → sources → labelled pieces (chat messages are read into turns by :mod:`.messages`).

A *turn* is a user message and everything up to the next user message. Its *sources* are the
user message, each assistant step, and each tool call (name, JSON arguments and the full result,
nothing truncated). A *piece* is a packed run of one source's sentences, prefixed with a header
that names its turn, source and time, e.g. ``[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import InputError
from ..text import PIECE_MAX_BYTES, clean_text, pack_text_pieces

logger = logging.getLogger(__name__)

#: Smallest body budget left after the header; below this the header is too long for the budget.
MIN_BODY_BYTES = 64
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


@dataclass(frozen=True)
class Source:
    """One source inside a turn: a user message, an assistant step, a tool call, or a section body."""

    kind: str  # "user" | "assistant" | "tool" | "system" | "section"
    label: str  # shown in the header: "User", "Assistant", "Tool logistics_export", a heading
    text: str
    ordinal: int  # position inside the turn, from 0
    timestamp: datetime | None = None
    name: str | None = None  # speaker or tool name, when known
    #: The key of the message the source comes from (``id:<message id>`` or ``fp:<content hash>``; for a tool call,
    #: the assistant message that made it): how an append knows a message it is sent again (:mod:`.append`).
    message_key: str | None = None
    call_id: str | None = None  # a tool call's id: its result, sent later, joins this source
    result_key: str | None = None  # a tool call's result message's key
    #: ``timestamp`` is the time the message was added (it had none): in the metadata, not in the header.
    stamped: bool = False


@dataclass(frozen=True)
class Turn:
    """A passage that gives its pieces their context: a chat turn or a document section."""

    thread_id: str
    index: int  # 1-based turn (or section) number inside the thread / document
    sources: tuple[Source, ...]
    label: str  # "Turn 4", or a document title
    kind: str = "turn"  # "turn" | "section" | "item"
    timestamp: datetime | None = None
    doc_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: An item's own fields (``kind="item"``: :func:`ctxret.ingest.items.item_turn`, what the item store writes),
    #: stored on every piece as ctxret's fields; ``None`` for every other turn (their ``metadata`` is the caller's).
    item: Mapping[str, Any] | None = None

    @property
    def turn_id(self) -> str:
        """Stable id of the turn inside its thread (or of the section inside its document)."""
        scope = self.doc_id if self.doc_id is not None else self.thread_id
        return f"{scope}#{self.index}"

    @property
    def text(self) -> str:
        """The whole passage, as plain text."""
        return "\n".join(f"{s.label}: {s.text}" if s.label else s.text for s in self.sources)


@dataclass(frozen=True)
class Piece:
    """A labelled stored unit. ``text`` (header + body) is what gets embedded."""

    id: str
    text: str
    header: str
    body: str
    thread_id: str
    turn_id: str
    turn_index: int
    source_kind: str
    source_label: str
    source_ordinal: int
    ordinal: int  # position inside its source, from 0
    kind: str = "turn"
    timestamp: datetime | None = None
    source_name: str | None = None
    doc_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    message_key: str | None = None
    call_id: str | None = None
    result_key: str | None = None
    time_added: bool = False  # ``timestamp`` is the time it was added, not a time the message gave
    #: What gives back this piece's share of its message exactly (``ctxret.text.exact_patches``; ``None``: its body as
    #: packed): a chat history returns each message as it was added.
    exact_patch: str | None = None


def piece_id(
    thread_id: str, turn_index: int, source_ordinal: int, ordinal: int, text: str, doc_id: str | None = None
) -> str:
    """A deterministic id from thread, turn, source, ordinal and text: stable across runs and machines."""
    key = json.dumps([thread_id, doc_id, turn_index, source_ordinal, ordinal, text], ensure_ascii=True)
    return hashlib.sha256(key.encode("ascii")).hexdigest()[:32]


def format_time(ts: datetime | None) -> str | None:
    """``Oct 16, 2026, 2:02 PM``: the time as the header shows it."""
    if ts is None:
        return None
    hour = ts.hour % 12 or 12
    # Fixed English month names, not strftime's locale-dependent %b: the header is part of the
    # embedded text and of the piece id, so it must not change with the process locale.
    month = _MONTHS[ts.month - 1]
    return f"{month} {ts.day}, {ts.year}, {hour}:{ts.minute:02d} {'AM' if ts.hour < 12 else 'PM'}"


def parse_time(value: Any, where: str = "timestamp") -> datetime | None:
    """Parse an ISO-8601 string, a datetime, or epoch seconds; ``None`` stays ``None``."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value
    if isinstance(value, bool):
        raise InputError(f"{where}: expected an ISO-8601 time or epoch seconds, got {value!r}")
    if isinstance(value, (int, float)):
        try:
            return datetime.fromtimestamp(float(value), tz=timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise InputError(
                f"{where}: {value!r} is not a usable epoch time; pass epoch seconds "
                "(divide epoch milliseconds by 1000) or an ISO-8601 string"
            ) from None
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        try:
            return datetime.fromisoformat(text)
        except ValueError:
            pass
    raise InputError(
        f"{where}: cannot read {value!r} as a time; use ISO-8601 (e.g. '2026-10-16T14:02:00') or epoch seconds"
    )


def make_header(turn_label: str | None, source_label: str | None, ts: datetime | None) -> str:
    """``[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]``; missing parts are left out."""
    parts = [p for p in (turn_label, source_label, format_time(ts)) if p]
    return "[" + " · ".join(parts) + "]"


def _cut(label: str | None, max_bytes: int) -> str | None:
    """``label`` cut to at most ``max_bytes`` UTF-8 bytes, an ellipsis marking the cut."""
    if not label:
        return label
    raw = clean_text(label).encode("utf-8")
    return label if len(raw) <= max_bytes else raw[: max_bytes - 3].decode("utf-8", "ignore") + "…"


def label_pieces(turn: Turn, max_bytes: int = PIECE_MAX_BYTES) -> list[Piece]:
    """Pack each source of ``turn`` into pieces of at most ``max_bytes``, header included.

    The header's bytes (plus the newline after it) are subtracted from the budget before packing; a header that
    would leave less than :data:`MIN_BODY_BYTES` has its labels cut (an ellipsis marks it): a long title or
    speaker name costs its header's tail, never the write.
    """
    pieces: list[Piece] = []
    for src in turn.sources:
        ts = src.timestamp or turn.timestamp
        header = make_header(turn.label, src.label, None if src.stamped else ts)
        header = clean_text(header)
        budget = max_bytes - len(header.encode("utf-8")) - 1
        if budget < MIN_BODY_BYTES:  # a long title, speaker or namespace: cut in the header only (metadata keeps it)
            room = max(8, (max_bytes // 2 - 48) // 2)
            header = make_header(_cut(turn.label, room), _cut(src.label, room), None if src.stamped else ts)
            header = clean_text(header)
            budget = max_bytes - len(header.encode("utf-8")) - 1
        if budget < MIN_BODY_BYTES:
            raise InputError(
                f"a piece budget of {max_bytes} bytes leaves {budget} bytes for text after the header (the turn's "
                f"label and time); raise max_bytes (at least {MIN_BODY_BYTES} bytes must remain)"
            )
        for ordinal, body in enumerate(pack_text_pieces(src.text, budget)):
            text = f"{header}\n{body}"
            pieces.append(
                Piece(
                    id=piece_id(turn.thread_id, turn.index, src.ordinal, ordinal, text, turn.doc_id),
                    text=text,
                    header=header,
                    body=body,
                    thread_id=turn.thread_id,
                    turn_id=turn.turn_id,
                    turn_index=turn.index,
                    source_kind=src.kind,
                    source_label=src.label,
                    source_ordinal=src.ordinal,
                    ordinal=ordinal,
                    kind=turn.kind,
                    timestamp=ts,
                    source_name=src.name,
                    doc_id=turn.doc_id,
                    metadata=dict(turn.metadata),
                    message_key=src.message_key,
                    call_id=src.call_id,
                    result_key=src.result_key,
                    time_added=src.stamped and ts is not None,
                )
            )
    return pieces
