"""Reading chat exports for ``ctxret index``: ``.jsonl`` (one message or one thread a line) and ``.json`` files,
checked completely before anything is written.

A ``.json`` file may hold any of the shapes chat tools export (:func:`_json_threads`):

* a JSON array of OpenAI-format messages (``[{"role": ..., "content": ...}, ...]``): one thread;
* one thread object ``{"messages": [...]}``, its id under ``thread_id``, ``conversation_id``, ``session_id`` or
  ``id`` (else the file name), its ``title`` shown in its turns' headers, other keys (``model``...) ignored; an
  array of such objects;
* LangChain's ``messages_to_dict`` (``[{"type": "human", "data": {"content": ...}}, ...]``, what
  ``FileChatMessageHistory`` stores), on its own or as a thread's ``messages``;
* ChatGPT's data export (``conversations.json``: conversations with a ``mapping`` of message nodes; the branch
  that ends at ``current_node`` is indexed, each conversation a thread named by its id);
* Claude's data export (``conversations.json``: conversations with ``chat_messages``, each a thread named by its
  ``uuid``; a message's text blocks, its attachments noted by file name).

A conversation's title (ChatGPT's ``title``, Claude's ``name``, a thread object's ``title``) labels its turns:
``[Lisbon trip · Turn 3 · User]`` heads each piece, so the title is embedded, indexed and shown
(:func:`ctxret.ingest.messages.titled_turn`); the thread keeps the conversation's id, so a newer export still
appends to it.

Messages are appended to their threads (``ContextualIndex.add_messages``): indexing a file again adds nothing, a newer
export of a conversation adds only its new messages (ChatGPT's and LangChain's message ids are kept), and several
files naming one thread (``--thread``, or one session per file) are appended in the order given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .inputs import FileProblem, InputFile, decode_lines, parse_json

if TYPE_CHECKING:
    from ..ingest.turns import Turn

_JSONL_FIX = (
    'each line must be one JSON object: an OpenAI message ({"role": ..., "content": ...}) '
    'or a thread ({"thread_id": ..., "messages": [...]})'
)
_JSON_FIX = (
    'a .json file holds a JSON array of OpenAI messages ([{"role": ..., "content": ...}]), a thread '
    '({"messages": [...]}, with an optional "thread_id"), an array of threads, LangChain\'s messages_to_dict '
    "output, or ChatGPT's or Claude's conversations.json"
)
#: Keys a thread object may name its id with (the first present wins).
THREAD_ID_KEYS = ("thread_id", "conversation_id", "session_id", "id", "uuid")
_CORE_WHERE = re.compile(r"^message (\d+)(\S*): ")


def read_jsonl(path: Path, thread: str | None) -> InputFile:
    from ..ingest.messages import titled_turn, turns_from_messages

    records: list[tuple[int, dict[str, Any]]] = []
    kind: str | None = None
    for number, text in decode_lines(path):
        if not text.strip():
            continue
        obj = parse_json(path, number, text, _JSONL_FIX)
        if not isinstance(obj, dict):
            raise FileProblem(path, number, f"expected a JSON object, got {type(obj).__name__}; {_JSONL_FIX}")
        this = "threads" if "messages" in obj else "messages" if "role" in obj else None
        if this is None:
            raise FileProblem(path, number, f"the object has neither 'role' nor 'messages'; {_JSONL_FIX}")
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
    chats: list[tuple[str, list[dict[str, Any]]]] = []
    titles: dict[str, str] = {}
    next_turn: dict[str, int] = {}

    def convert(
        messages: list[Any], thread_id: str, line_of_message: Any, line: int, label: str, title: Any = None
    ) -> None:
        """Turns of ``messages``; a core error is located at the line of the message it names."""
        first = next_turn.get(thread_id, 1)
        if _title(title):
            titles[thread_id] = _title(title)
        try:
            new = [
                titled_turn(t, titles.get(thread_id))
                for t in turns_from_messages(messages, thread_id, first_turn=first)
            ]
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
        chats.append((thread_id, messages))
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
                    f"the thread object needs a non-empty string 'thread_id' (got {own!r}), or pass --thread",
                )
            label = f"thread {own!r}, " if isinstance(own, str) and own.strip() else "thread, "
            convert(messages, thread or str(own), lambda i, n=number: n, number, label, obj.get("title"))
    threads = sorted({t.thread_id for t in turns})
    return InputFile(path, turns, threads, kind or "messages", chats=chats, titles=titles)


def _title(value: Any) -> str:
    """A conversation's title as an export gives it (a non-blank string), else ``""``."""
    return value.strip() if isinstance(value, str) else ""


# -- .json chat exports ---------------------------------------------------------------------------
#: LangChain message types (``messages_to_dict``) → OpenAI roles.
_LANGCHAIN_ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "function": "function",
    "HumanMessageChunk": "user",
    "AIMessageChunk": "assistant",
    "SystemMessageChunk": "system",
    "ToolMessageChunk": "tool",
    "FunctionMessageChunk": "function",
}


def read_json(path: Path, thread: str | None) -> InputFile:
    """A ``.json`` chat export: every thread it holds, checked completely (see the module docstring)."""
    from ..ingest.messages import titled_turn, turns_from_messages

    lines = decode_lines(path)  # checks the encoding line by line
    text = "\n".join(line for _, line in lines)
    if not text.strip():
        return InputFile(path, [], [], "messages")
    data = parse_json(path, None, text, _JSON_FIX)
    threads = _json_threads(path, data)
    turns: list[Turn] = []
    chats: list[tuple[str, list[dict[str, Any]]]] = []
    titles: dict[str, str] = {}
    next_turn: dict[str, int] = {}
    for own, messages, label, title in threads:
        if thread is None and own is None and len(threads) > 1:
            raise FileProblem(
                path,
                None,
                f"{label.rstrip(', ')} has no id ({', '.join(THREAD_ID_KEYS)}); give each thread one, or pass --thread",
            )
        thread_id = thread or own or path.stem
        if title:
            titles[thread_id] = title
        try:
            new = turns_from_messages(messages, thread_id, first_turn=next_turn.get(thread_id, 1))
        except InputError as e:
            raise FileProblem(path, None, f"{label}{e}") from None
        turns.extend(titled_turn(t, titles.get(thread_id)) for t in new)
        chats.append((thread_id, messages))
        if new:
            next_turn[thread_id] = new[-1].index + 1
    kind = "threads" if len(threads) > 1 or (threads and threads[0][0] is not None) else "messages"
    return InputFile(path, turns, sorted({t.thread_id for t in turns}), kind, chats=chats, titles=titles)


#: A thread as a JSON export holds it: ``(own id or None, OpenAI-format messages, label for errors, title or "")``.
_Thread = tuple[str | None, list[dict[str, Any]], str, str]


def _json_threads(path: Path, data: Any) -> list[_Thread]:
    """``(own id or None, OpenAI-format messages, label for errors, title)`` of each thread a JSON export holds."""
    if isinstance(data, Mapping) and isinstance(data.get("mapping"), Mapping):
        return [_chatgpt_thread(path, data, "")]
    if isinstance(data, Mapping) and isinstance(data.get("chat_messages"), list):
        return [_claude_thread(path, data, "")]
    if isinstance(data, Mapping):
        if "messages" not in data:
            keys = ", ".join(repr(k) for k in list(data)[:6])
            raise FileProblem(path, None, f"the JSON object has no 'messages' list (keys: {keys}); {_JSON_FIX}")
        return [_thread_object(path, data, "")]
    if not isinstance(data, list):
        raise FileProblem(path, None, f"expected a JSON array or object, got {type(data).__name__}; {_JSON_FIX}")
    if not data:
        return []
    first = data[0]
    if isinstance(first, Mapping) and isinstance(first.get("mapping"), Mapping):
        return [
            _chatgpt_thread(path, _item(path, c, i, "a conversation"), f"conversation {i}, ")
            for i, c in enumerate(data)
        ]
    if isinstance(first, Mapping) and isinstance(first.get("chat_messages"), list):
        return [
            _claude_thread(path, _item(path, c, i, "a conversation"), f"conversation {i}, ") for i, c in enumerate(data)
        ]
    if isinstance(first, Mapping) and "messages" in first:
        return [_thread_object(path, _item(path, t, i, "a thread object"), f"thread {i}, ") for i, t in enumerate(data)]
    return [(None, _messages(path, data, ""), "", "")]


def _item(path: Path, obj: Any, i: int, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise FileProblem(path, None, f"item {i}: expected {what} like item 0, got {type(obj).__name__}")
    return obj


def _own_id(obj: Mapping[str, Any]) -> str | None:
    for key in THREAD_ID_KEYS:
        value = obj.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value)
    return None


def _thread_object(path: Path, obj: Mapping[str, Any], label: str) -> _Thread:
    own = _own_id(obj)
    label = f"thread {own!r}, " if own is not None else label or "thread, "
    messages = obj.get("messages")
    if not isinstance(messages, list):
        raise FileProblem(
            path, None, f"{label}'messages' must be a list of message objects, got {type(messages).__name__}"
        )
    return own, _messages(path, messages, label), label, _title(obj.get("title"))


def _messages(path: Path, items: list[Any], label: str) -> list[dict[str, Any]]:
    """OpenAI-format messages from OpenAI's own or LangChain's ``messages_to_dict`` shape."""
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(items):
        if isinstance(msg, Mapping) and "role" not in msg and "type" in msg and isinstance(msg.get("data"), Mapping):
            out.append(_from_langchain(path, msg, f"{label}message {i}"))
        elif isinstance(msg, Mapping) and "role" in msg:
            out.append(dict(msg))
        else:
            got = (
                f"an object with keys {', '.join(map(repr, list(msg)[:5]))}"
                if isinstance(msg, Mapping)
                else (type(msg).__name__)
            )
            raise FileProblem(
                path, None, f"{label}message {i}: expected a message with 'role' and 'content', got {got}; {_JSON_FIX}"
            )
    return out


def _from_langchain(path: Path, msg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One ``messages_to_dict`` entry (``{"type": "human", "data": {...}}``) as an OpenAI message."""
    data = msg["data"]
    kind = str(msg["type"])
    role = data.get("role") if kind in ("chat", "ChatMessageChunk") else _LANGCHAIN_ROLES.get(kind)
    if role is None:
        known = ", ".join(k for k in _LANGCHAIN_ROLES if k.islower())
        raise FileProblem(path, None, f"{where}: unknown LangChain message type {kind!r} (known: {known}, chat)")
    out: dict[str, Any] = {"role": role, "content": data.get("content", "")}
    for key in ("name", "tool_call_id", "timestamp", "created_at", "id"):
        if data.get(key) is not None:
            out[key] = data[key]
    calls = data.get("tool_calls") or (data.get("additional_kwargs") or {}).get("tool_calls")
    if role == "assistant" and calls:
        out["tool_calls"] = [
            c
            if "function" in c
            else {
                "id": c.get("id"),
                "type": "function",
                "function": {"name": c.get("name"), "arguments": c.get("args")},
            }
            for c in calls
            if isinstance(c, Mapping)
        ]
    return out


def _chatgpt_thread(path: Path, conv: Mapping[str, Any], label: str) -> _Thread:
    """One conversation of ChatGPT's data export: the branch ending at ``current_node``, in order."""
    own = _own_id(conv)
    label = f"conversation {own!r}, " if own is not None else label
    mapping: Mapping[str, Any] = conv["mapping"]
    node_id: Any = conv.get("current_node")
    if node_id not in mapping:  # no current node: the last child all the way down from the root
        node_id = next((k for k, n in mapping.items() if isinstance(n, Mapping) and not n.get("parent")), None)
        while node_id in mapping and (mapping[node_id].get("children") or []):
            node_id = mapping[node_id]["children"][-1]
    chain: list[Mapping[str, Any]] = []
    seen: set[Any] = set()
    while node_id in mapping and node_id not in seen:
        seen.add(node_id)
        node = mapping[node_id]
        if not isinstance(node, Mapping):
            raise FileProblem(path, None, f"{label}mapping[{node_id!r}] is not an object")
        if isinstance(node.get("message"), Mapping):
            chain.append(node["message"])
        node_id = node.get("parent")
    messages = []
    for m in reversed(chain):
        role = (m.get("author") or {}).get("role")
        text = _chatgpt_text(m.get("content"))
        hidden = (m.get("metadata") or {}).get("is_visually_hidden_from_conversation")
        if hidden or role not in ("user", "assistant", "tool", "system") or not text.strip():
            continue
        msg: dict[str, Any] = {"role": role, "content": text}
        if isinstance(m.get("id"), str) and m["id"]:
            msg["id"] = m["id"]  # a newer export of the conversation adds only its new messages
        if m.get("create_time") is not None:
            msg["timestamp"] = m["create_time"]
        name = (m.get("author") or {}).get("name")
        if role == "tool" and isinstance(name, str):
            msg["name"] = name
        messages.append(msg)
    return own, messages, label, _title(conv.get("title"))


#: Claude's senders → OpenAI roles.
_CLAUDE_ROLES = {"human": "user", "user": "user", "assistant": "assistant"}


def _claude_thread(path: Path, conv: Mapping[str, Any], label: str) -> _Thread:
    """One conversation of Claude's data export (``chat_messages`` in order; ``name`` is its title): each message's
    text blocks (else its ``text``), its attachments and files noted by name, never their data."""
    own = _own_id(conv)
    label = f"conversation {own!r}, " if own is not None else label
    messages = []
    for i, m in enumerate(conv["chat_messages"]):
        if not isinstance(m, Mapping):
            raise FileProblem(path, None, f"{label}chat_messages[{i}] is not an object")
        role = _CLAUDE_ROLES.get(str(m.get("sender")))
        if role is None:
            raise FileProblem(
                path, None, f"{label}chat_messages[{i}]: unknown sender {m.get('sender')!r} (known: human, assistant)"
            )
        text = _claude_text(m)
        if not text.strip():
            continue
        msg: dict[str, Any] = {"role": role, "content": text}
        if isinstance(m.get("uuid"), str) and m["uuid"]:
            msg["id"] = m["uuid"]  # a newer export of the conversation adds only its new messages
        if m.get("created_at"):
            msg["timestamp"] = m["created_at"]
        messages.append(msg)
    return own, messages, label, _title(conv.get("name"))


def _claude_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    blocks = content if isinstance(content, list) else []
    texts = [str(b["text"]) for b in blocks if isinstance(b, Mapping) and b.get("type") == "text" and b.get("text")]
    if not texts and isinstance(message.get("text"), str):
        texts = [message["text"]]
    for key in ("attachments", "files"):
        for f in message.get(key) or ():
            name = f.get("file_name") if isinstance(f, Mapping) else None
            if isinstance(name, str) and name:
                texts.append(f"[file: {name}]")
    return "\n".join(texts)


def _chatgpt_text(content: Any) -> str:
    if not isinstance(content, Mapping):
        return ""
    parts = content.get("parts")
    if isinstance(parts, list):
        texts = [p if isinstance(p, str) else _chatgpt_part_note(p) for p in parts]
        return "\n".join(t for t in texts if t)
    text = content.get("text") or content.get("result")
    return text if isinstance(text, str) else ""


def _chatgpt_part_note(part: Any) -> str:
    """A non-text part of a ChatGPT message (an uploaded image, a file) as a short note, never its data."""
    if isinstance(part, Mapping):
        kind = str(part.get("content_type") or "attachment").replace("_asset_pointer", "")
        return f"[{kind}]"
    return ""
