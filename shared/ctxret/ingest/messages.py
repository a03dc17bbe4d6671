"""Chat messages → turns: OpenAI chat completions, the Anthropic Messages API, and what LangChain sends.

A *turn* is a user message and everything up to the next user message; its *sources* are the user
message, each assistant step, and each tool call (name, JSON arguments and the full result, nothing
truncated). Content blocks are read as what they mean: ``text`` as text; ``tool_use`` as a tool call
with its name and JSON input (like an OpenAI ``tool_calls`` entry); ``tool_result`` attached to the
call with that id (a user message made only of tool results continues the turn); images, audio,
files and documents as a short note (``[image: image/png]``, never their data); thinking blocks
skipped. A message with no content and no tool calls is skipped with a warning. Content is walked
without recursion; JSON nested deeper than :data:`MAX_JSON_DEPTH` is refused with a clear error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..errors import InputError
from ..storage.schema import MAX_ID_BYTES, MAX_LABEL_BYTES, check_size, check_writable_thread, shown
from ..text import clean_text
from .turns import Source, Turn, parse_time

logger = logging.getLogger(__name__)

__all__ = [
    "KNOWN_ROLES",
    "MAX_JSON_DEPTH",
    "Message",
    "check_first_turn",
    "check_thread_id",
    "group_messages",
    "group_sources",
    "group_turns",
    "make_turn",
    "message_fingerprint",
    "read_messages",
    "source_fingerprint",
    "stores_anything",
    "titled_turn",
    "turns_from_messages",
]

_TIME_KEYS = ("timestamp", "created_at", "time", "date")
#: Roles of OpenAI chat messages that ``turns_from_messages`` understands.
KNOWN_ROLES = ("user", "assistant", "tool", "function", "system", "developer")
#: Tool inputs and JSON content nested deeper than this are refused (they would overflow the JSON encoder).
MAX_JSON_DEPTH = 256
_TEXT_TYPES = ("text", "input_text", "output_text")
_TOOL_USE_TYPES = ("tool_use", "server_tool_use")
_SKIPPED_TYPES = ("thinking", "redacted_thinking")
_DATA_URL = re.compile(r"^data:([\w.+-]+/[\w.+-]+)?[;,]", re.IGNORECASE)


@dataclass
class _Call:
    id: str | None
    name: str
    args: str


@dataclass
class _Result:
    call_id: str | None
    text: str
    is_error: bool = False
    name: str | None = None  # the tool name a result carries itself (OpenAI ``name``)


@dataclass
class _Content:
    """What one message's ``content`` holds: its text (notes included), tool calls and tool results."""

    text: list[str] = field(default_factory=list)
    calls: list[_Call] = field(default_factory=list)
    results: list[_Result] = field(default_factory=list)
    skipped: int = 0  # thinking blocks left out


def _json_text(value: Any, where: str, *, sort_keys: bool = False) -> str:
    """``json.dumps`` (in the value's own key order unless ``sort_keys``) after an iterative depth check.

    Nesting deeper than :data:`MAX_JSON_DEPTH` raises :class:`InputError` instead of a RecursionError.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (Mapping, list, tuple)):
            if depth > MAX_JSON_DEPTH:
                raise InputError(
                    f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels; flatten it or pass it "
                    "as a JSON string (strings are stored as they are)"
                )
            children = item.values() if isinstance(item, Mapping) else item
            stack.extend((child, depth + 1) for child in children)
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=sort_keys, default=str)
    except (TypeError, ValueError) as e:
        raise InputError(
            f"{where}: cannot serialise as JSON ({e}); pass plain dicts, lists, strings and numbers"
        ) from None


def _media_note(kind: str, url: Any, media_type: Any = None) -> str:
    """``[image: https://…]`` or ``[image: image/png]`` for inline data: never the data itself."""
    if isinstance(url, str) and url:
        m = _DATA_URL.match(url)
        if m:
            return f"[{kind}: {m.group(1) or 'inline data'}]"
        if len(url) > 2000:  # a very long "URL" is inline data in disguise
            return f"[{kind}: inline data]"
        return f"[{kind}: {url}]"
    if isinstance(media_type, str) and media_type:
        return f"[{kind}: {media_type}]"
    return f"[{kind}: inline data]"


def _source_note(kind: str, source: Any, title: Any = None) -> str:
    """An Anthropic ``image``/``document`` block's ``source`` as a note."""
    if isinstance(title, str) and title.strip():
        return f"[{kind}: {title.strip()}]"
    if isinstance(source, Mapping):
        if source.get("type") == "url":
            return _media_note(kind, source.get("url"))
        if source.get("type") == "file":
            return f"[{kind}: {source.get('file_id', 'file')}]"
        if source.get("type") == "text":
            return f"[{kind}: text]"
        return _media_note(kind, None, source.get("media_type"))
    return f"[{kind}: inline data]"


def _block_note(kind: str | None, block: Mapping[str, Any]) -> str | None:
    """A short description of a media block, or ``None`` when ``kind`` is not a media type."""
    if kind == "image_url":
        image = block.get("image_url")
        return _media_note("image", image.get("url") if isinstance(image, Mapping) else image)
    if kind == "input_image":
        return _media_note("image", block.get("image_url") or block.get("file_id"))
    if kind == "image":
        if "source" in block:
            return _source_note("image", block.get("source"))
        return _media_note("image", block.get("url"), block.get("mime_type"))  # LangChain standard block
    if kind == "input_audio":
        audio = block.get("input_audio")
        fmt = audio.get("format") if isinstance(audio, Mapping) else None
        return f"[audio: {fmt}]" if isinstance(fmt, str) and fmt else "[audio: inline data]"
    if kind in ("audio", "video"):
        return _media_note(kind, block.get("url"), block.get("mime_type"))
    if kind in ("file", "input_file"):
        file_info = block.get("file")
        info: Mapping[str, Any] = file_info if isinstance(file_info, Mapping) else block
        name = info.get("filename") or info.get("file_id") or info.get("file_url")
        return f"[file: {name}]" if isinstance(name, str) and name else "[file: inline data]"
    if kind == "document":
        return _source_note("document", block.get("source"), block.get("title"))
    return None


def _read_content(content: Any, where: str) -> _Content:
    """Read an OpenAI or Anthropic ``content`` (a string, None, or a list of blocks), iteratively.

    Text blocks give text; ``refusal`` parts their refusal text; media blocks a short note
    (``[image: …]``, never inline data); ``tool_use`` blocks tool calls; ``tool_result`` blocks tool
    results, whose own content (a string or blocks, nested to any depth) becomes the result text;
    ``thinking`` and ``redacted_thinking`` blocks are left out. An unknown block type is kept as
    ``[type]`` (its text when it has one).
    """
    out = _Content()
    if content is None:
        return out
    if isinstance(content, str):
        out.text.append(content)
        return out
    if isinstance(content, Mapping):
        out.text.append(_json_text(content, f"{where}: content", sort_keys=True))
        return out
    if not isinstance(content, (list, tuple)):
        raise InputError(f"{where}: content must be a string, a list of parts or None, got {type(content).__name__}")
    # Frames: ("block", path, block, sink, inside_a_result) or ("join", result, parts).
    stack: list[tuple[Any, ...]] = [
        ("block", f"{where}.content[{i}]", block, out.text, False) for i, block in reversed(list(enumerate(content)))
    ]
    while stack:
        frame = stack.pop()
        if frame[0] == "join":
            frame[1].text = "\n".join(frame[2])
            continue
        _, path, block, sink, inside = frame
        if isinstance(block, str):
            sink.append(block)
            continue
        if not isinstance(block, Mapping):
            raise InputError(
                f"{where}: unsupported content part {type(block).__name__} at {path}; "
                "use a string or a block dict such as {'type': 'text', 'text': '...'}"
            )
        kind = block.get("type")
        if kind is None:
            raise InputError(
                f"{path}: content block has no 'type'; give every block a type, e.g. "
                "{'type': 'text', 'text': '...'} or {'type': 'tool_result', 'tool_use_id': '...', 'content': '...'}"
            )
        if kind in _TEXT_TYPES:
            text = block.get("text")
            if not isinstance(text, str):
                raise InputError(f"{path}: a {kind!r} block needs 'text' as a string, got {type(text).__name__}")
            sink.append(text)
        elif kind == "refusal":
            sink.append(str(block.get("refusal", "")))
        elif kind in _SKIPPED_TYPES:
            out.skipped += 1
        elif kind in _TOOL_USE_TYPES and not inside:
            name = block.get("name")
            if not isinstance(name, str) or not name.strip():
                raise InputError(f"{path}: a {kind!r} block needs the tool's 'name' as a string, got {name!r}")
            call_id = block.get("id")
            args = block.get("input", {})
            text = args if isinstance(args, str) else _json_text(args, f"{path}.input")
            check_size(name, f"{path}.name", MAX_LABEL_BYTES)
            call_id = None if call_id is None else check_size(str(call_id), f"{path}.id", MAX_ID_BYTES)
            out.calls.append(_Call(call_id, name, text))
        elif isinstance(kind, str) and kind.endswith("tool_result"):
            inner = block.get("content")
            if inside:  # a result inside a result: its content is part of the outer result's text
                parts = sink
            else:
                call_id = block.get("tool_use_id")
                result = _Result(None if call_id is None else str(call_id), "", bool(block.get("is_error")))
                out.results.append(result)
                parts = []
                stack.append(("join", result, parts))
            if inner is None:
                continue
            if isinstance(inner, str):
                parts.append(inner)
            elif isinstance(inner, (list, tuple)):
                stack.extend(
                    ("block", f"{path}.content[{j}]", b, parts, True) for j, b in reversed(list(enumerate(inner)))
                )
            elif isinstance(inner, Mapping):
                stack.append(("block", f"{path}.content", inner, parts, True))
            else:
                raise InputError(
                    f"{path}: a tool_result's 'content' must be a string or a list of blocks, "
                    f"got {type(inner).__name__}"
                )
        else:
            note = _block_note(kind, block)
            if note is None:
                text = block.get("text")
                note = text if isinstance(text, str) else f"[{kind}]"
            sink.append(note)
    return out


def _message_time(msg: Mapping[str, Any], where: str) -> datetime | None:
    for key in _TIME_KEYS:
        if key in msg and msg[key] not in (None, ""):
            return parse_time(msg[key], f"{where}.{key}")
    return None


def _args_text(arguments: Any, where: str) -> str:
    """OpenAI ``arguments``: a JSON string is kept as it is; a dict is serialised with sorted keys."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        return arguments
    return _json_text(arguments, where, sort_keys=True)


def _openai_calls(msg: Mapping[str, Any], where: str) -> list[_Call]:
    raw = msg.get("tool_calls")
    if raw is None:
        raw = []
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, (list, tuple)):
        raise InputError(
            f"{where}: tool_calls must be a list of call dicts "
            "({'id', 'type': 'function', 'function': {'name', 'arguments'}}), "
            f"got {type(raw).__name__}: {raw!r:.60}"
        )
    calls = []
    for j, call in enumerate(raw):
        if not isinstance(call, Mapping):
            raise InputError(f"{where}.tool_calls[{j}]: expected a dict, got {type(call).__name__}")
        fn = call.get("function") or {}
        if not isinstance(fn, Mapping):
            raise InputError(
                f"{where}.tool_calls[{j}].function: expected a dict with 'name' and "
                f"'arguments', got {type(fn).__name__}"
            )
        tool = str(fn.get("name") or call.get("name") or "tool")
        args = _args_text(fn.get("arguments", call.get("arguments")), f"{where}.tool_calls[{j}].arguments")
        check_size(tool, f"{where}.tool_calls[{j}]'s name", MAX_LABEL_BYTES)
        call_id = (
            None if call.get("id") is None else check_size(str(call["id"]), f"{where}.tool_calls[{j}].id", MAX_ID_BYTES)
        )
        calls.append(_Call(call_id, tool, args))
    fc = msg.get("function_call")
    if isinstance(fc, Mapping):
        tool = str(fc.get("name") or "function")
        args = _args_text(fc.get("arguments"), f"{where}.function_call.arguments")
        calls.append(_Call(f"__function__{tool}", tool, args))
    return calls


@dataclass
class Message:
    """One message, read: its role, text, tool calls and tool results, and the key it is known by
    (:func:`message_key`: ``id:<its id>``, else ``fp:<a hash of what it says>``)."""

    index: int
    role: str
    text: str
    calls: list[_Call]
    results: list[_Result]
    timestamp: datetime | None
    name: str | None
    key: str | None = None
    #: Known by its id, or by its content and its own time: a copy of it anywhere in the thread is the same
    #: message (a retry). A message with neither is known by its content and position only.
    strong: bool = False
    #: Its time is the time it was added (it had none): kept for time windows and recency, left out of the header
    #: that is embedded (a date in the text of a short message costs it its meaning; :mod:`.append`).
    stamped: bool = False


#: OpenAI Responses API items read as messages (``{"type": ..., ...}`` without a ``role``).
_RESPONSES_ITEMS = (
    "message",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "reasoning",
)


def _responses_item(msg: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """An OpenAI Responses API item as the chat-completions message it stands for: a ``function_call``
    is an assistant tool call, a ``function_call_output`` its result (matched by ``call_id``), a
    ``message`` item a message of its role; ``reasoning`` items hold nothing to index. The item's ``id``
    is kept (a retry of the same item adds nothing)."""
    kind = msg.get("type")
    out: dict[str, Any] = {k: msg[k] for k in ("id", *_TIME_KEYS, "name") if k in msg}
    if kind == "message":
        return {**msg, "role": msg.get("role") or "assistant"}
    if kind in ("function_call", "custom_tool_call"):
        call_id = msg.get("call_id") or msg.get("id")
        args = msg.get("arguments", msg.get("input"))
        out.pop("name", None)
        call = {"id": call_id, "type": "function", "function": {"name": msg.get("name"), "arguments": args}}
        return {**out, "role": "assistant", "content": None, "tool_calls": [call]}
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = msg.get("output")
        content = output if isinstance(output, (str, list, tuple)) or output is None else _json_text(output, where)
        return {**out, "role": "tool", "tool_call_id": msg.get("call_id"), "content": content}
    return {**out, "role": "assistant", "content": None, "__skip__": True}  # reasoning: the model's scratch work


def _message_id(msg: Mapping[str, Any], where: str) -> str | None:
    """The message's own id (``id``: LangChain messages, OpenAI Responses items, chat exports), if it has one."""
    raw = msg.get("id")
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise InputError(f"{where}.id: a message id must be a string (or an integer), got {type(raw).__name__}")
    return check_size(str(raw), f"{where}.id", MAX_ID_BYTES)


def _read_message(i: int, msg: Any, include_system: bool) -> Message:
    where = f"message {i}"
    if not isinstance(msg, Mapping):
        raise InputError(f"{where}: expected a dict with 'role' and 'content', got {type(msg).__name__}")
    if "role" not in msg and msg.get("type") in _RESPONSES_ITEMS:
        msg = _responses_item(msg, where)
        if msg.get("__skip__"):
            return Message(i, "assistant", "", [], [], _message_time(msg, where), None)
    role = msg.get("role")
    if role not in KNOWN_ROLES:
        raise InputError(
            f"{where}: unknown role {role!r}; use one of 'user', 'assistant', 'tool' "
            "(or 'system'), e.g. map your speaker names to 'user'/'assistant' and keep the name in 'name'"
        )
    ts = _message_time(msg, where)
    name = msg.get("name") if isinstance(msg.get("name"), str) else None
    if name is not None:
        check_size(name, f"{where}.name", MAX_LABEL_BYTES)
    for field_name in ("tool_call_id", "call_id"):
        if isinstance(msg.get(field_name), str):
            check_size(msg[field_name], f"{where}.{field_name}", MAX_ID_BYTES)
    content = _read_content(msg.get("content"), where)
    text = "\n".join(content.text)
    calls = list(content.calls)
    results = list(content.results)
    if role == "assistant":
        # OpenAI tool_calls first; an Anthropic tool_use block with the same id is the same call.
        openai = _openai_calls(msg, where)
        ids = {c.id for c in openai if c.id is not None}
        calls = openai + [c for c in calls if c.id is None or c.id not in ids]
    elif role in ("tool", "function"):
        call_id = msg.get("tool_call_id")
        key = str(call_id) if call_id is not None else (f"__function__{name}" if role == "function" or name else None)
        results = [_Result(key, text, bool(msg.get("is_error")), name)] + results
        text = ""
    elif calls:
        raise InputError(
            f"{where}: a {role!r} message holds tool_use blocks; tool calls belong in 'assistant' messages"
        )
    has_text = bool(clean_text(text).strip())
    if not has_text and not calls and not results and (role not in ("system", "developer") or include_system):
        why = f" ({content.skipped} thinking block(s) are not indexed)" if content.skipped else ""
        logger.warning("%s (%s): no content and no tool calls; skipped%s", where, role, why)
    out = Message(i, role, text if has_text else "", calls, results, ts, name)
    given = _message_id(msg, where)
    out.key = f"id:{given}" if given is not None else message_fingerprint(out)
    out.strong = given is not None or ts is not None
    return out


def _norm(text: str) -> str:
    """Text as a fingerprint reads it: cleaned, whitespace collapsed (what the stored pieces keep of it)."""
    return " ".join(clean_text(text).split())


def message_fingerprint(msg: Message) -> str:
    """``fp:<hash>`` of what a message says: its role, name, text (whitespace collapsed), tool calls and
    results, and its own time when it has one. A stored user or assistant source gives the same hash
    (:func:`source_fingerprint`), so stores written before messages carried keys are read the same way."""
    data = [
        "user" if msg.role == "user" else msg.role,
        msg.name,
        _norm(msg.text),
        [[c.name, _norm(c.args)] for c in msg.calls],
        [[r.call_id, _norm(r.text), r.is_error] for r in msg.results],
        msg.timestamp.isoformat() if msg.timestamp is not None else None,
    ]
    return "fp:" + hashlib.sha256(json.dumps(data, ensure_ascii=True).encode("ascii")).hexdigest()[:32]


def source_fingerprint(kind: str, name: str | None, text: str, timestamp: datetime | None) -> str:
    """The :func:`message_fingerprint` of the plain user or assistant message a stored source came from."""
    return message_fingerprint(Message(0, kind, text, [], [], timestamp, name))


def turns_from_messages(
    messages: Iterable[Mapping[str, Any]],
    thread_id: str = "default",
    *,
    first_turn: int = 1,
    include_system: bool = False,
) -> list[Turn]:
    """Group chat messages (OpenAI chat completions or Anthropic Messages API) into turns of sources.

    A turn starts at each user message (messages before the first user message form a turn of
    their own). Assistant text is one source per message; each tool call is one source holding its
    name, JSON arguments and full result, matched by id. A tool result with no matching call is kept
    as a source of its own (with a warning), never dropped. System/developer messages are skipped
    unless ``include_system=True``. An unknown role raises :class:`InputError`.

    Content is a string, None, or a list of blocks, in either API's form:

    * ``text`` blocks (and ``input_text``/``output_text``) are text; ``refusal`` parts keep their text.
    * OpenAI ``tool_calls`` and Anthropic ``tool_use`` blocks (``{"type": "tool_use", "id", "name",
      "input"}``) are tool calls. ``input`` is written as ``json.dumps(input, ensure_ascii=False)``
      in its own key order: the same text LangChain's conversion and OpenAI argument strings carry.
    * OpenAI ``role: "tool"`` messages and Anthropic ``tool_result`` blocks (``{"type":
      "tool_result", "tool_use_id", "content": str | [blocks], "is_error"?}``) attach their result to
      the call with that id. A user message made only of ``tool_result`` blocks continues the current
      turn; one that also holds text starts a new turn with that text after its results are attached.
      ``is_error`` (also read on ``role: "tool"`` messages) shows as ``Result (error): …``.
    * Media is noted, never embedded: ``[image: <url>]``, ``[image: image/png]`` for inline data (an
      OpenAI ``data:`` URL or an Anthropic base64 source), ``[audio: wav]``, ``[file: name]``,
      ``[document: title]``.
    * ``thinking`` and ``redacted_thinking`` blocks are left out: they are the model's scratch work
      (or encrypted), not something said in the conversation.
    * A message with no content and no tool calls is skipped with a logged warning.

    Timestamps are read from ``timestamp``/``created_at``/``time``/``date`` when present; a turn's
    time is its first timed message's. ``first_turn`` numbers the first turn (pass it when you index
    a thread in slices so turn ids stay stable).
    """
    check_thread_id(thread_id)
    check_first_turn(first_turn)
    msgs = read_messages(messages, include_system)
    return group_turns(msgs, thread_id, first_turn, include_system)


def check_first_turn(first_turn: Any) -> None:
    if isinstance(first_turn, bool) or not isinstance(first_turn, int) or not 1 <= first_turn < 2**53:
        raise InputError(
            f"first_turn must be a whole number >= 1 (the number of the first turn given: 1 for a whole thread, "
            f"n + 1 after n turns already indexed), got {first_turn!r}"
        )


def check_thread_id(thread_id: Any) -> None:
    """A chat thread's id: a non-empty string of valid Unicode within the id limit, not an item store's thread."""
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InputError(f"thread_id must be a non-empty string, got {shown(thread_id)}")
    check_writable_thread(thread_id)


def read_messages(messages: Iterable[Mapping[str, Any]], include_system: bool = False) -> list[Message]:
    """Read every message (see :func:`turns_from_messages` for the formats), in order, each with its key."""
    if not isinstance(include_system, bool):
        raise InputError(f"include_system must be True or False, got {include_system!r}")
    if isinstance(messages, (str, bytes)) or isinstance(messages, Mapping):
        raise InputError("messages must be a list of message dicts, not a single string or dict")
    if not isinstance(messages, Iterable):
        raise InputError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    return [_read_message(i, raw, include_system) for i, raw in enumerate(messages)]


def stores_anything(msg: Message, include_system: bool) -> bool:
    """Whether a read message becomes (part of) a source: text, tool calls or results."""
    if msg.role in ("system", "developer") and not include_system:
        return False
    return bool(msg.text or msg.calls or msg.results)


def group_messages(msgs: Iterable[Message]) -> list[list[Message]]:
    """Messages → turn groups: a turn starts at each user message (messages before the first one form a group
    of their own, which an append adds to the thread's last turn); an Anthropic user message holding tool results
    gives them to the group before it."""
    groups: list[list[Message]] = []
    for msg in msgs:
        if msg.role == "user" and msg.results:
            # Anthropic: tool results travel in a user message; they belong to the current turn.
            results = Message(
                msg.index, "tool", "", [], msg.results, msg.timestamp, None, msg.key, msg.strong, msg.stamped
            )
            if not groups:
                groups.append([])
            groups[-1].append(results)
            if msg.text:
                groups.append(
                    [
                        Message(
                            msg.index,
                            "user",
                            msg.text,
                            [],
                            [],
                            msg.timestamp,
                            msg.name,
                            msg.key,
                            msg.strong,
                            msg.stamped,
                        )
                    ]
                )
            continue
        if msg.role == "user" or not groups:
            groups.append([])
        groups[-1].append(msg)
    return groups


def group_turns(msgs: Iterable[Message], thread_id: str, first_turn: int, include_system: bool = False) -> list[Turn]:
    """Read messages → turns numbered from ``first_turn`` (consecutive over the turns returned)."""
    turns: list[Turn] = []
    index = first_turn
    for group in group_messages(msgs):
        sources = group_sources(group, include_system)
        if not sources:
            continue
        turns.append(make_turn(thread_id, index, sources))
        index += 1
    return turns


def make_turn(thread_id: str, index: int, sources: Iterable[Source]) -> Turn:
    """A chat turn of ``sources`` (its time: its first timed source's)."""
    sources = tuple(sources)
    turn_ts = next((s.timestamp for s in sources if s.timestamp is not None), None)
    return Turn(thread_id, index, sources, f"Turn {index}", "turn", turn_ts)


#: A conversation title is shown (and embedded) in its turns' headers up to this many characters.
MAX_TITLE_CHARS = 80


def titled_turn(turn: Turn, title: str | None) -> Turn:
    """``turn`` of a conversation named ``title`` (a chat export's title): its label, shown in each piece's header and
    so embedded and indexed, is ``"<title> · Turn <n>"`` (``[Lisbon trip · Turn 3 · User]``); the title's whitespace
    collapsed and its end cut at a word past :data:`MAX_TITLE_CHARS` (``…``). No title (``None``, blank): ``turn``
    as it is. The same turn titled again gets the same label."""
    name = " ".join(clean_text(title).split()) if isinstance(title, str) else ""
    if not name:
        return turn
    if len(name) > MAX_TITLE_CHARS:
        cut = name[:MAX_TITLE_CHARS].rsplit(" ", 1)[0] or name[:MAX_TITLE_CHARS]
        name = cut.rstrip(" ,;:·-") + "…"
    return replace(turn, label=f"{name} · Turn {turn.index}")


_NO_RESULT = "\nResult: (none)"


def _open_call(src: Source) -> tuple[str, str] | None:
    """``(tool, arguments)`` of a stored tool source still waiting for its result, else ``None``."""
    if src.kind != "tool" or not src.call_id or src.result_key is not None or not src.name:
        return None
    text = src.text.rstrip()
    prefix = f"{src.name} arguments: "
    if text == "Result: (none)":
        return src.name, ""
    if not text.startswith(prefix) or not text.endswith(_NO_RESULT):
        return None
    return src.name, text[len(prefix) : -len(_NO_RESULT)]


def group_sources(group: list[Message], include_system: bool, prior: Iterable[Source] = ()) -> list[Source]:
    """The sources of one turn's messages; ``prior``: the turn's sources already stored (an append that continues
    the turn), whose open tool calls take the results among ``group``."""
    sources: list[Source] = list(prior)
    calls: dict[str, int] = {}  # call id -> index into sources
    call_text: dict[int, tuple[str, str, _Result | None, str | None]] = {}  # source index -> (name, args, result, key)
    for i, src in enumerate(sources):
        open_call = _open_call(src)
        if open_call is not None and src.call_id is not None:
            calls[src.call_id] = i
            call_text[i] = (*open_call, None, None)
    reopened = set(call_text)
    for msg in group:
        ts, name, key, st = msg.timestamp, msg.name, msg.key, msg.stamped
        if msg.role in ("system", "developer"):
            if include_system and msg.text:
                sources.append(Source("system", "System", msg.text, len(sources), ts, name, key, stamped=st))
            continue
        if msg.role == "user":
            if msg.text:
                sources.append(Source("user", name or "User", msg.text, len(sources), ts, name, key, stamped=st))
            continue
        if msg.role == "assistant":
            if msg.text:
                sources.append(
                    Source("assistant", name or "Assistant", msg.text, len(sources), ts, name, key, stamped=st)
                )
            for call in msg.calls:
                sources.append(
                    Source("tool", f"Tool {call.name}", "", len(sources), ts, call.name, key, call.id, stamped=st)
                )
                call_text[len(sources) - 1] = (call.name, call.args, None, None)
                if call.id is not None:
                    calls[call.id] = len(sources) - 1
            continue
        for result in msg.results:  # tool / function results, and Anthropic tool_result blocks
            idx = calls.get(result.call_id) if result.call_id is not None else None
            if idx is not None and call_text[idx][2] is None:
                tool, args, _, _ = call_text[idx]
                call_text[idx] = (tool, args, result, key)
                src = sources[idx]
                if ts is not None and src.timestamp is None:
                    sources[idx] = replace(src, timestamp=ts, stamped=st)
            else:
                tool = result.name or "result"
                logger.warning(
                    "message %d: tool result %r has no matching tool call; kept as its own source",
                    msg.index,
                    result.call_id,
                )
                sources.append(
                    Source("tool", f"Tool {tool}", "", len(sources), ts, tool, key, result.call_id, stamped=st)
                )
                call_text[len(sources) - 1] = (tool, "", result, key)
    for idx, (tool, args, outcome, result_key) in call_text.items():
        if idx in reopened and outcome is None:
            continue  # a stored call still waiting: left as stored
        body = []
        if args:
            body.append(f"{tool} arguments: {args}")
        label = "Result (error)" if outcome is not None and outcome.is_error else "Result"
        body.append(f"{label}: {outcome.text}" if outcome is not None and outcome.text else f"{label}: (none)")
        sources[idx] = replace(sources[idx], text="\n".join(body), name=tool, result_key=result_key)
    return sources
