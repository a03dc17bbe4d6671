"""Items: namespaced JSON values kept as documents, what a key-value memory store (LangGraph's ``BaseStore``) holds.

An item is ``(namespace, key, value)``: the namespace a tuple of labels (``("memories", "user-42")``), the key a
string, the value a JSON object. ctxret stores it as one document of kind ``"item"``: the thread is the namespace's
labels joined by ``"."`` after :data:`~ctxret.storage.schema.ITEM_THREAD_PREFIX` (``ctxret:items:memories.user-42``,
:func:`namespace_thread`; LangGraph's labels cannot hold a ``"."``, so the name is unambiguous, and no chat or
document thread may start with the prefix, so a chat scope never reads an item), the document id is the key, and its
one section has a source per indexed text of the value (LangGraph's ``index`` fields; the whole value as JSON by
default), stamped with the item's last write (so the header shows it and time windows apply). Every piece carries the
item's own fields (:data:`ITEM_KEYS`, ctxret's: a caller's metadata key of one of these names is stored under another
name, :mod:`ctxret.storage.schema`): the value as JSON, the namespace and each of its labels (``item_ns_0``,
``item_ns_1``, ...; a namespace prefix is then one equality per label, evaluated inside the store's queries), the key,
when it was created and updated, and whether a query search may find it.

**Stores written before** items had their own threads hold an item in the thread its labels name (``memories.user-42``,
kind ``"section"``, the fields listed as caller keys). They read as before (:func:`read_item` takes a piece of either
form whose fields agree with its thread and document); a chat scope of that name leaves them out (a store holding any
searches its chat scopes with :meth:`~ctxret.storage.schema.Scope.without_items`: :func:`chat_scope`); putting or
deleting an item removes its old copy; ``ContextualIndex.reindex()`` (``ctxret reindex``) moves them all.

So the retrievers and the CLI read an item store like any other documents (``--thread ctxret:items:memories.user-42``),
every search hit carries its item whole, and items can share a collection with chat memory.
:mod:`ctxret.items` reads and writes items through a ``ContextualIndex``. A piece whose item fields are broken or
disagree with where it is stored is left out of every item read with a warning, never an error for the caller.
"""

from __future__ import annotations

import json
import logging
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ..errors import InputError
from ..storage.schema import ITEM_FIELDS, ITEM_LABEL_PREFIX, ITEM_THREAD_PREFIX, MAX_ID_BYTES, Scope, check_size, shown
from .turns import Source, Turn

logger = logging.getLogger(__name__)

__all__ = [
    "ITEM_KEYS",
    "StoredItem",
    "chat_scope",
    "check_filter",
    "check_item_turn",
    "check_key",
    "check_namespace",
    "item_from_metadata",
    "item_id",
    "item_turn",
    "item_value_json",
    "legacy_item_fields",
    "legacy_thread",
    "namespace_matches",
    "namespace_thread",
    "prefix_where",
    "read_item",
    "search_where",
    "value_matches",
    "whole_value_text",
]

#: The metadata keys every piece of an item carries (plus ``item_ns_<i>``, one per namespace label): the reserved
#: item fields, in a fixed order.
ITEM_KEYS = tuple(sorted(ITEM_FIELDS))
#: The metadata key of the ``i``-th namespace label.
LABEL_KEY = ITEM_LABEL_PREFIX + "{}"
#: How long an item's value may be as JSON, in UTF-8 bytes (it is stored on every piece of the item).
MAX_VALUE_BYTES = 1_000_000
#: Where a label may say "any label" (``list_namespaces``' prefix and suffix conditions).
WILDCARD = "*"
#: How deep a value may nest (a deeper one is refused: it is a bug, or a recursive structure).
MAX_DEPTH = 64


@dataclass(frozen=True)
class StoredItem:
    """One item as stored: ``namespace``, ``key``, ``value`` (the JSON object written, whole), ``created_at``
    (its first write), ``updated_at`` (its last), and for a query search its ``score`` (the relevance of its best
    piece, in [0, 1]) and ``hit`` (that piece)."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    score: float | None = None
    hit: Any = None

    @property
    def id(self) -> str:
        return item_id(self.namespace, self.key)


def check_namespace(namespace: Any, what: str = "namespace", *, empty: bool = False) -> tuple[str, ...]:
    """``namespace`` as a tuple of labels, else an :class:`InputError` naming the label at fault.

    A namespace is a non-empty tuple of non-empty strings without ``"."`` (LangGraph's rule, which keeps the joined
    thread name unambiguous). ``what`` names the argument; ``empty``: ``()`` is allowed (a prefix of every one)."""
    if isinstance(namespace, str) or not isinstance(namespace, (tuple, list)):
        raise InputError(f"{what} must be a tuple of string labels such as ('memories', 'user-42'), got {namespace!r}")
    labels = tuple(namespace)
    if not labels and not empty:
        raise InputError(f"{what} is empty; give at least one label, e.g. ('memories', 'user-42')")
    for i, label in enumerate(labels):
        if not isinstance(label, str) or not label.strip():
            raise InputError(f"{what} label {i} is {shown(label)}; every label must be a non-empty string")
        check_size(label, f"{what} label {i}", MAX_ID_BYTES)
        if "." in label:
            raise InputError(
                f"{what} label {i} ({shown(label)}) holds a '.'; labels cannot contain periods "
                "(the namespace is stored as its labels joined by '.'): use '-' or '_' instead"
            )
    room = MAX_ID_BYTES - len(ITEM_THREAD_PREFIX)
    if labels and len(legacy_thread(labels).encode("utf-8")) > room:  # the thread id it is stored as
        raise InputError(
            f"{what} has {len(labels)} labels that join to over {room:,} bytes (a namespace is stored as the thread "
            f"{ITEM_THREAD_PREFIX!r} + its labels joined by '.', and a thread id holds at most {MAX_ID_BYTES:,} "
            "bytes); use fewer or shorter labels"
        )
    return labels


def namespace_thread(namespace: Sequence[str]) -> str:
    """The thread an item's namespace is stored as: its labels joined by ``"."`` after the items' prefix
    (``ctxret:items:memories.user-42``)."""
    return ITEM_THREAD_PREFIX + ".".join(namespace)


def legacy_thread(namespace: Sequence[str]) -> str:
    """The thread an item's namespace was stored as before items had their own threads (``memories.user-42``)."""
    return ".".join(namespace)


def item_id(namespace: Sequence[str], key: str) -> str:
    """A stored item's unique id: its namespace and key as a JSON list (``["memories", "user-42", "k1"]``)."""
    return json.dumps([*namespace, key], ensure_ascii=False)


def check_key(key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise InputError(f"an item key must be a non-empty string, got {shown(key)}")
    return check_size(key, f"the item key {shown(key)}", MAX_ID_BYTES)


def item_value_json(value: Any, where: str = "the value") -> str:
    """``value`` as the JSON text stored with the item, else an :class:`InputError` naming the part at fault.

    The value must be a dict (a mapping) with string keys all the way down and JSON values (strings, finite
    numbers, booleans, None, lists, dicts); it comes back as JSON reads it (a tuple as a list)."""
    if not isinstance(value, Mapping):
        raise InputError(
            f"{where} must be a dict (a JSON object), got {type(value).__name__}: wrap it, e.g. {{'content': ...}}"
        )
    _check_json(value, where, 0)
    text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    return check_size(text, f"{where} (as JSON)", MAX_VALUE_BYTES)


def _check_json(value: Any, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InputError(f"{where} nests more than {MAX_DEPTH} levels deep; flatten it")
    if isinstance(value, Mapping):
        for k, v in value.items():
            if not isinstance(k, str):
                raise InputError(f"{where} has the key {k!r} ({type(k).__name__}); JSON object keys are strings")
            _check_json(v, f"{where}[{k!r}]", depth + 1)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(v, f"{where}[{i}]", depth + 1)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where} is {value}; JSON holds finite numbers only (store it as a string)")
    elif value is not None and not isinstance(value, (str, int, bool)):
        raise InputError(
            f"{where} is a {type(value).__name__}, which JSON cannot hold; store it as a string, number, list or dict"
        )


def whole_value_text(value: Mapping[str, Any]) -> str:
    """The text of a whole value (LangGraph's ``"$"`` field): its JSON with sorted keys."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def item_turn(
    namespace: Sequence[str],
    key: str,
    value_json: str,
    texts: Sequence[tuple[str, str]] | None,
    *,
    created_at: datetime,
    updated_at: datetime,
) -> Turn:
    """The one section an item is stored as (see the module docstring).

    ``texts``: ``(field, text)`` of each indexed text (``None``: the whole value, as LangGraph's ``"$"``); texts
    that hold nothing are left out. An item with no text left is stored with its whole value as its text and
    ``item_indexed`` false: a query search skips it (as LangGraph's stores do), ``get`` and filters find it."""
    ns = tuple(namespace)
    value = json.loads(value_json)
    if texts is None:
        texts = [("$", whole_value_text(value))]
    kept = [(f, t) for f, t in texts if isinstance(t, str) and t.strip()]
    indexed = bool(kept)
    if not kept:
        kept = [("$", whole_value_text(value))]
    labelled = len(kept) > 1
    sources = tuple(
        Source("section", f if labelled and f != "$" else "", t, i, timestamp=updated_at)
        for i, (f, t) in enumerate(kept)
    )
    meta = _fields(ns, key, value_json, created_at.isoformat(), updated_at.isoformat(), indexed)
    return Turn(namespace_thread(ns), 1, sources, " › ".join(ns), "item", updated_at, key, {}, item=meta)


def _fields(
    ns: tuple[str, ...], key: str, value_json: str, created: str, updated: str, indexed: bool
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "item_id": item_id(ns, key),
        "item_key": key,
        "item_namespace": json.dumps(list(ns), ensure_ascii=False),
        "item_depth": len(ns),
        "item_value": value_json,
        "item_created_at": created,
        "item_updated_at": updated,
        "item_indexed": indexed,
    }
    meta.update({LABEL_KEY.format(i): label for i, label in enumerate(ns)})
    return meta


def legacy_item_fields(meta: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """For a stored piece that is an item's (either form: :func:`item_from_metadata`), the thread it belongs in
    now and its item fields as :func:`item_turn` writes them; ``None`` for any other piece. What a rebuild
    (``ContextualIndex.reindex``) writes an item's pieces again with: an item of a store written before items had
    their own threads moves to its thread."""
    if "item_id" not in meta:
        return None
    try:
        item = item_from_metadata(meta)
    except InputError:
        return None
    value_json = str(meta["item_value"])
    fields = _fields(
        item.namespace,
        item.key,
        value_json,
        str(meta["item_created_at"]),
        str(meta["item_updated_at"]),
        bool(meta.get("item_indexed", True)),
    )
    return namespace_thread(item.namespace), fields


def check_item_turn(turn: Turn) -> None:
    """A turn carrying item fields is an item's, stored where its fields say (kind ``"item"``, the namespace's
    thread, the key as document id, no caller metadata), and only such a turn may be written to an item thread:
    an :class:`InputError` otherwise (what the write path checks for every turn)."""
    if turn.item is None:
        if turn.kind == "item":
            raise InputError(
                f"{turn.label} of thread {shown(turn.thread_id)} is of kind 'item' but carries no item; items are "
                "written by ctxret.items.ItemStore (LangChain: CtxretStore)"
            )
        return
    try:
        ns = tuple(json.loads(str(turn.item["item_namespace"])))
        ok = (
            turn.kind == "item"
            and not turn.metadata
            and turn.thread_id == namespace_thread(ns)
            and turn.doc_id == turn.item.get("item_key")
            and turn.item.get("item_id") == item_id(ns, str(turn.doc_id))
            and set(turn.item) == set(ITEM_KEYS) | {LABEL_KEY.format(i) for i in range(len(ns))}
        )
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise InputError(
            f"{turn.label} of thread {shown(turn.thread_id)} carries item fields that do not match where it is "
            "stored; build item turns with ctxret.ingest.items.item_turn (items are written by ItemStore)"
        )


def search_where(where: Mapping[str, Any]) -> dict[str, Any]:
    """A stored-key filter (:func:`prefix_where`) in the names a search's ``where`` takes (``ctxret:<field>``)."""
    out: dict[str, Any] = {}
    for key, value in where.items():
        if key in ("$and", "$or"):
            out[key] = [search_where(c) for c in value]
        else:
            out[f"ctxret:{key}"] = value
    return out


#: Per store (a ``PieceStore``): whether it holds items written before items had their own threads.
_LEGACY: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def chat_scope(store: Any, scope: Scope) -> Scope:
    """``scope`` as a chat or document search reads it: in a store written before items had their own threads (one
    probe per store and process), a thread scope leaves item pieces out (:meth:`Scope.without_items`), so that a chat
    scope named like an item namespace (``memories.user-42``) never reads its items. A scope naming an item thread
    (``ctxret:items:...``) is read as asked."""
    if scope.thread_ids is None or scope.no_items or any(t.startswith(ITEM_THREAD_PREFIX) for t in scope.thread_ids):
        return scope
    legacy = _LEGACY.get(store)
    if legacy is None:
        where = {"$and": [{"item_indexed": {"$in": [True, False]}}, {"kind": "section"}]}
        legacy = any(True for _ in store.backend.iter_records(where, limit=1))
        _LEGACY[store] = legacy
    return scope.without_items() if legacy else scope


def prefix_where(
    prefix: Sequence[str], *, wildcards: bool = False, indexed: bool | None = None, first_piece: bool = False
) -> dict[str, Any]:
    """The Chroma ``where`` of the items whose namespace starts with ``prefix`` (every item for ``()``): one
    equality per label (with ``wildcards``, a ``"*"`` label matches any); ``indexed``: only items a query may
    find (or only those it may not); ``first_piece``: one record per item (its first piece)."""
    clauses: list[dict[str, Any]] = [{"item_depth": {"$gte": max(1, len(prefix))}}]
    clauses += [{LABEL_KEY.format(i): label} for i, label in enumerate(prefix) if not (wildcards and label == WILDCARD)]
    if indexed is not None:
        clauses.append({"item_indexed": indexed})
    if first_piece:
        clauses += [{"source_ordinal": 0}, {"ordinal": 0}]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def item_from_metadata(meta: Mapping[str, Any], *, score: float | None = None, hit: Any = None) -> StoredItem:
    """The item a stored piece belongs to, from the piece's metadata; an :class:`InputError` when the piece is no
    item's (its item fields are missing or broken, or disagree with the thread and document it is stored in)."""
    try:
        namespace = tuple(json.loads(str(meta["item_namespace"])))
        value = json.loads(str(meta["item_value"]))
        created = _time(meta["item_created_at"])
        updated = _time(meta["item_updated_at"])
        key = str(meta["item_key"])
        if not namespace or not all(isinstance(label, str) for label in namespace) or not isinstance(value, dict):
            raise ValueError("the namespace or value is not what an item holds")
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(
            f"a piece of thread {shown(meta.get('thread_id'))} is not an item's (its item metadata is missing or "
            f"broken: {shown(str(e), 120)}); items are written by ctxret.items.ItemStore (LangChain: CtxretStore)"
        ) from e
    kind, thread = meta.get("kind"), meta.get("thread_id")
    home = (kind == "item" and thread == namespace_thread(namespace)) or (
        kind == "section" and thread == legacy_thread(namespace)  # a store written before items had their threads
    )
    if not home or meta.get("doc_id") != key or meta.get("item_id") != item_id(namespace, key):
        raise InputError(
            f"a piece of thread {shown(thread)} carries item fields for {shown(namespace)} / {shown(key)}, which "
            "is not where that item is stored; it is no item (items are written by ctxret.items.ItemStore)"
        )
    return StoredItem(namespace, key, value, created, updated, score, hit)


def read_item(meta: Mapping[str, Any], *, score: float | None = None, hit: Any = None) -> StoredItem | None:
    """:func:`item_from_metadata`, or ``None`` with a warning for a piece that is no item's: one broken or forged
    piece is left out of a read, never an error for the caller who reads."""
    try:
        return item_from_metadata(meta, score=score, hit=hit)
    except InputError as e:
        logger.warning("left out of the item store's answer: %s", e)
        return None


def _time(value: Any) -> datetime:
    ts = datetime.fromisoformat(str(value))
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=timezone.utc)


def namespace_matches(namespace: Sequence[str], path: Sequence[str], kind: str) -> bool:
    """Whether ``namespace`` starts (``kind="prefix"``) or ends (``"suffix"``) with ``path``, a ``"*"`` label
    matching any label: LangGraph's ``list_namespaces`` conditions."""
    if len(namespace) < len(path):
        return False
    if kind == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif kind == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InputError(f"a namespace condition is 'prefix' or 'suffix', got {kind!r}")
    return all(p == WILDCARD or n == p for n, p in pairs)


def value_matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether an item's value passes ``filter``, as LangGraph's stores read one: each key of the filter names a
    top-level field of the value; a plain value must equal it (a dict: field by field, recursively; a list: item
    by item), a dict of operators (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``) compares it."""
    return all(_compare(value.get(k), v) for k, v in filter.items())


def check_filter(filter: Any) -> dict[str, Any] | None:
    """``filter`` as a dict (``None`` stays ``None``), else an :class:`InputError`; unknown operators too."""
    if filter is None:
        return None
    if not isinstance(filter, Mapping):
        raise InputError(f"filter must be a dict of value fields, e.g. {{'kind': 'preference'}}, got {filter!r}")
    _check_operators(filter, "filter")
    return dict(filter)


_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


def _check_operators(filter: Mapping[str, Any], where: str) -> None:
    for k, v in filter.items():
        if isinstance(v, Mapping):
            ops = [o for o in v if isinstance(o, str) and o.startswith("$")]
            bad = [o for o in ops if o not in _OPERATORS]
            if bad:
                raise InputError(f"{where}[{k!r}] uses {bad[0]!r}; the operators are {', '.join(_OPERATORS)}")
            if not ops:
                _check_operators(v, f"{where}[{k!r}]")


def _compare(item_value: Any, filter_value: Any) -> bool:
    if isinstance(filter_value, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in filter_value):
            return all(_operator(item_value, op, v) for op, v in filter_value.items())
        if not isinstance(item_value, Mapping):
            return False
        return all(_compare(item_value.get(k), v) for k, v in filter_value.items())
    if isinstance(filter_value, (list, tuple)):
        return (
            isinstance(item_value, (list, tuple))
            and len(item_value) == len(filter_value)
            and all(_compare(a, b) for a, b in zip(item_value, filter_value, strict=False))
        )
    return bool(item_value == filter_value)


def _operator(value: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(value == operand)
    if op == "$ne":
        return bool(value != operand)
    try:
        a, b = float(value), float(operand)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field does not compare
    if op == "$gt":
        return a > b
    if op == "$gte":
        return a >= b
    if op == "$lt":
        return a < b
    if op == "$lte":
        return a <= b
    raise InputError(f"unknown filter operator {op!r}; the operators are {', '.join(_OPERATORS)}")
