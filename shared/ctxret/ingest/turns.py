"""The turn model: chat messages → turns → sources → labelled pieces.

A *turn* is a user message and everything up to the next user message. Its *sources* are the
user message, each assistant step, and each tool call (name, JSON arguments and the full result,
nothing truncated). A *piece* is a packed run of one source's sentences, prefixed with a header
that names its turn, source and time, e.g. ``[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..errors import InputError
from ..text import PIECE_MAX_BYTES, clean_text, pack_text_pieces

logger = logging.getLogger(__name__)

#: Smallest body budget left after the header; below this the header is too long for the budget.
MIN_BODY_BYTES = 64
#: Roles of OpenAI chat messages that ``turns_from_messages`` understands.
KNOWN_ROLES = ("user", "assistant", "tool", "function", "system", "developer")
_TIME_KEYS = ("timestamp", "created_at", "time", "date")
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


@dataclass(frozen=True)
class Turn:
    """A passage that gives its pieces their context: a chat turn or a document section."""

    thread_id: str
    index: int  # 1-based turn (or section) number inside the thread / document
    sources: tuple[Source, ...]
    label: str  # "Turn 4", or a document title
    kind: str = "turn"  # "turn" | "section"
    timestamp: datetime | None = None
    doc_id: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

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


def piece_id(thread_id: str, turn_index: int, source_ordinal: int, ordinal: int, text: str, doc_id: str | None = None) -> str:
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


def _content_text(content: Any, where: str) -> str:
    """Text of an OpenAI message ``content``: a string, None, or a list of content parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, Mapping):
                if part.get("type") in (None, "text", "input_text", "output_text") and "text" in part:
                    out.append(str(part["text"]))
                elif part.get("type") == "refusal":
                    out.append(str(part.get("refusal", "")))
                else:
                    out.append(f"[{part.get('type', 'part')}]")
            else:
                raise InputError(f"{where}: unsupported content part {type(part).__name__}")
        return "\n".join(out)
    if isinstance(content, Mapping):
        return json.dumps(content, ensure_ascii=False, sort_keys=True)
    raise InputError(f"{where}: content must be a string, a list of parts or None, got {type(content).__name__}")


def _message_time(msg: Mapping[str, Any], where: str) -> datetime | None:
    for key in _TIME_KEYS:
        if key in msg and msg[key] not in (None, ""):
            return parse_time(msg[key], f"{where}.{key}")
    return None


def _args_text(arguments: Any) -> str:
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def turns_from_messages(
    messages: Iterable[Mapping[str, Any]],
    thread_id: str = "default",
    *,
    first_turn: int = 1,
    include_system: bool = False,
) -> list[Turn]:
    """Group OpenAI chat-completions messages into turns of sources.

    A turn starts at each user message (messages before the first user message form a turn of
    their own). Assistant text is one source per message; each tool call is one source holding its
    name, JSON arguments and full result (matched by ``tool_call_id``). A tool result with no
    matching call is kept as a source of its own, never dropped. System/developer messages are
    skipped unless ``include_system=True``. An unknown role raises :class:`InputError`.

    Timestamps are read from ``timestamp``/``created_at``/``time``/``date`` when present; a turn's
    time is its first timed message's. ``first_turn`` numbers the first turn (pass it when you index
    a thread in slices so turn ids stay stable).
    """
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InputError(f"thread_id must be a non-empty string, got {thread_id!r}")
    if isinstance(messages, (str, bytes)) or isinstance(messages, Mapping):
        raise InputError("messages must be a list of message dicts, not a single string or dict")

    groups: list[list[tuple[int, Mapping[str, Any]]]] = []
    for i, msg in enumerate(messages):
        where = f"message {i}"
        if not isinstance(msg, Mapping):
            raise InputError(f"{where}: expected a dict with 'role' and 'content', got {type(msg).__name__}")
        role = msg.get("role")
        if role not in KNOWN_ROLES:
            raise InputError(
                f"{where}: unknown role {role!r}; use one of 'user', 'assistant', 'tool' "
                "(or 'system'), e.g. map your speaker names to 'user'/'assistant' and keep the name in 'name'"
            )
        if role == "user" or not groups:
            groups.append([])
        groups[-1].append((i, msg))

    turns: list[Turn] = []
    index = first_turn  # consecutive over the turns returned: the first turn is ``first_turn``
    for group in groups:
        sources: list[Source] = []
        calls: dict[str, int] = {}  # tool_call_id -> index into sources
        call_text: dict[int, tuple[str, str, str]] = {}  # source index -> (name, args, result)
        for i, msg in group:
            where = f"message {i}"
            role = msg["role"]
            ts = _message_time(msg, where)
            name = msg.get("name") if isinstance(msg.get("name"), str) else None
            if role in ("system", "developer"):
                if include_system:
                    text = _content_text(msg.get("content"), where)
                    if clean_text(text).strip():
                        sources.append(Source("system", "System", text, len(sources), ts, name))
                continue
            if role == "user":
                text = _content_text(msg.get("content"), where)
                if clean_text(text).strip():
                    sources.append(Source("user", name or "User", text, len(sources), ts, name))
                continue
            if role == "assistant":
                text = _content_text(msg.get("content"), where)
                if clean_text(text).strip():
                    sources.append(Source("assistant", name or "Assistant", text, len(sources), ts, name))
                for j, call in enumerate(msg.get("tool_calls") or []):
                    if not isinstance(call, Mapping):
                        raise InputError(f"{where}.tool_calls[{j}]: expected a dict, got {type(call).__name__}")
                    fn = call.get("function") or {}
                    if not isinstance(fn, Mapping):
                        raise InputError(
                            f"{where}.tool_calls[{j}].function: expected a dict with 'name' and "
                            f"'arguments', got {type(fn).__name__}"
                        )
                    tool = str(fn.get("name") or call.get("name") or "tool")
                    args = _args_text(fn.get("arguments", call.get("arguments")))
                    sources.append(Source("tool", f"Tool {tool}", "", len(sources), ts, tool))
                    call_text[len(sources) - 1] = (tool, args, "")
                    if call.get("id") is not None:
                        calls[str(call["id"])] = len(sources) - 1
                fc = msg.get("function_call")
                if isinstance(fc, Mapping):
                    tool = str(fc.get("name") or "function")
                    sources.append(Source("tool", f"Tool {tool}", "", len(sources), ts, tool))
                    call_text[len(sources) - 1] = (tool, _args_text(fc.get("arguments")), "")
                    calls[f"__function__{tool}"] = len(sources) - 1
                continue
            # tool / function result
            result = _content_text(msg.get("content"), where)
            call_id = msg.get("tool_call_id")
            key = str(call_id) if call_id is not None else f"__function__{name}"
            if key in calls and not call_text[calls[key]][2]:
                idx = calls[key]
                tool, args, _ = call_text[idx]
                call_text[idx] = (tool, args, result)
                if ts is not None and sources[idx].timestamp is None:
                    sources[idx] = Source("tool", sources[idx].label, "", idx, ts, tool)
            else:
                tool = name or "result"
                logger.warning("%s: tool result %r has no matching tool call; kept as its own source", where, call_id)
                sources.append(Source("tool", f"Tool {tool}", "", len(sources), ts, tool))
                call_text[len(sources) - 1] = (tool, "", result)
        for idx, (tool, args, result) in call_text.items():
            body = []
            if args:
                body.append(f"{tool} arguments: {args}")
            body.append(f"Result: {result}" if result else "Result: (none)")
            src = sources[idx]
            sources[idx] = Source("tool", src.label, "\n".join(body), idx, src.timestamp, tool)
        if not sources:
            continue
        turn_ts = next((s.timestamp for s in sources if s.timestamp is not None), None)
        turns.append(Turn(thread_id, index, tuple(sources), f"Turn {index}", "turn", turn_ts))
        index += 1
    return turns


def label_pieces(turn: Turn, max_bytes: int = PIECE_MAX_BYTES) -> list[Piece]:
    """Pack each source of ``turn`` into pieces of at most ``max_bytes``, header included.

    The header's bytes (plus the newline after it) are subtracted from the budget before packing.
    """
    pieces: list[Piece] = []
    for src in turn.sources:
        ts = src.timestamp or turn.timestamp
        header = make_header(turn.label, src.label, ts)
        header = clean_text(header)
        budget = max_bytes - len(header.encode("utf-8")) - 1
        if budget < MIN_BODY_BYTES:
            raise InputError(
                f"the header {header!r} leaves {budget} bytes of a {max_bytes}-byte piece budget; "
                f"raise max_bytes or shorten the title/source names (at least {MIN_BODY_BYTES} bytes must remain)"
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
                )
            )
    return pieces
