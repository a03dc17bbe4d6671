"""The names of a piece's metadata: ctxret's own fields, the caller's keys as stored, and the view a caller reads.

Pure functions and constants on plain mappings, below every layer that stores or searches, so a result
(:class:`ctxret.results.Hit`) can show its metadata under the caller's names and the schema
(:mod:`ctxret.storage.schema`, which re-exports all of it and says the policies) can build what is stored.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "BOOKKEEPING_KEYS",
    "FIELD_PREFIX",
    "ITEM_FIELDS",
    "ITEM_LABEL_PREFIX",
    "METADATA_PREFIX",
    "RESERVED_KEYS",
    "RETRIEVAL_KEYS",
    "SCORE_PREFIX",
    "SHARED_KEYS",
    "caller_keys",
    "caller_view",
    "is_item_field",
    "join_caller_keys",
    "public_metadata",
    "public_name",
    "stored_name",
]

#: Metadata keys ctxret writes on every piece.
RESERVED_KEYS = frozenset(
    {
        "thread_id",
        "turn_id",
        "turn_index",
        "turn_label",
        "parent_id",
        "kind",
        "source_kind",
        "source_label",
        "source_name",
        "source_ordinal",
        "ordinal",
        "timestamp",
        "ts_epoch",
        "header",
        "body",
        "doc_id",
        "caller_keys",
        "context_text",
        "view_texts",
        "message_key",
        "tool_call_id",
        "result_key",
        "time_added",
        "exact_patch",
    }
)
#: The fields an item's pieces carry (:mod:`ctxret.ingest.items`), written only by the item store, plus
#: ``item_ns_<i>`` (:data:`ITEM_LABEL_PREFIX`), one per namespace label. A caller key of one of these names is stored
#: under :data:`METADATA_PREFIX` like every other name ctxret uses (``meta_item_value``), so no chat or document
#: writer can plant an item or half of one.
ITEM_FIELDS = frozenset(
    {
        "item_id",
        "item_key",
        "item_namespace",
        "item_depth",
        "item_value",
        "item_created_at",
        "item_updated_at",
        "item_indexed",
    }
)
#: The prefix of an item's namespace label fields (``item_ns_0``, ``item_ns_1``, ...).
ITEM_LABEL_PREFIX = "item_ns_"


def is_item_field(name: str) -> bool:
    """Whether ``name`` is one of an item's fields (:data:`ITEM_FIELDS` or ``item_ns_<i>``)."""
    if name in ITEM_FIELDS:
        return True
    rest = name[len(ITEM_LABEL_PREFIX) :] if name.startswith(ITEM_LABEL_PREFIX) else ""
    return rest.isascii() and rest.isdigit()


#: Stored fields that are bookkeeping, never shown in a result: the caller keys' list (each is shown by its name) and
#: what gives a chat message back exactly (the message itself is what a chat history returns).
BOOKKEEPING_KEYS = frozenset({"caller_keys", "exact_patch"})
#: Keys the adapters add to every retrieved Document / node (plus ``score_<name>`` per named score).
RETRIEVAL_KEYS = frozenset(
    {
        "group",
        "group_query",
        "group_rank",
        "group_count",
        "group_parts",
        "score",
        "score_scale",
        "parent_text",
        "relevance",
        "view_kind",
        "view_text",
        "search_degraded",
        "search_skipped",
    }
)
#: Prefix of the stored name of a caller metadata key that ctxret or the adapters use themselves (``meta_kind``).
METADATA_PREFIX = "meta_"
#: The namespace of ctxret's own fields in filters and in the grouped retrievers' results (``ctxret:source_kind``);
#: a caller metadata key may not start with it.
FIELD_PREFIX = "ctxret:"
#: Keys that are one for the caller and for ctxret: the thread a piece belongs to (the scope of a search) and the
#: document it is part of. A caller's value is the piece's own (never stored twice, never under another name).
SHARED_KEYS = frozenset({"thread_id", "doc_id"})
SCORE_PREFIX = "score_"


def _escaped(name: str) -> bool:
    """Whether a caller key of this name is stored under :data:`METADATA_PREFIX`: it is named like one of ctxret's
    fields (but the shared ones) or result keys, or it starts with the prefix and the rest is such a name."""
    while True:
        if (name in RESERVED_KEYS and name not in SHARED_KEYS) or name in RETRIEVAL_KEYS or is_item_field(name):
            return True
        if name.startswith(SCORE_PREFIX):
            return True
        if not name.startswith(METADATA_PREFIX):
            return False
        name = name[len(METADATA_PREFIX) :]


def stored_name(key: str) -> str:
    """The name a caller metadata key is stored under: ``meta_<key>`` when :func:`_escaped`, else the key itself.
    A function of the key alone (so a filter on it can be translated), and one to one (:func:`public_name`)."""
    return METADATA_PREFIX + key if _escaped(key) else key


def public_name(stored: str) -> str:
    """The name the caller gave a stored caller key (the inverse of :func:`stored_name`)."""
    if stored.startswith(METADATA_PREFIX) and _escaped(stored[len(METADATA_PREFIX) :]):
        return stored[len(METADATA_PREFIX) :]
    return stored


def caller_keys(meta: Mapping[str, Any]) -> list[str]:
    """The stored names of a piece's caller metadata (its ``caller_keys`` entry: the names joined by commas, or a
    JSON list when a name holds a comma)."""
    text = str(meta.get("caller_keys", ""))
    if text.startswith("["):
        try:
            names = json.loads(text)
        except ValueError:
            names = None
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            return names
    return [k for k in text.split(",") if k]


def join_caller_keys(names: Iterable[str]) -> str:
    """A piece's ``caller_keys`` entry: the names joined by commas (as stores have always held them), or a JSON
    list when one holds a comma or starts with ``[`` (:func:`caller_keys` reads both)."""
    names = sorted(names)
    if any("," in n for n in names) or (names and names[0].startswith("[")):
        return json.dumps(names, ensure_ascii=False)
    return ",".join(names)


def caller_view(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A stored piece's caller metadata under the names the caller gave (:func:`public_name`), the shared keys
    (``thread_id``, ``doc_id``) included when the caller gave them."""
    return {public_name(key): meta[key] for key in caller_keys(meta) if key in meta}


def public_metadata(meta: Mapping[str, Any], *, own: Iterable[str] = ()) -> dict[str, Any]:
    """A stored piece's metadata as a caller reads it in the grouped retrievers' results: the caller's keys under
    the names the caller gave, ``thread_id`` and ``doc_id``, ctxret's other fields as ``ctxret:<field>``, and
    the result keys a search put on the hit (``view_kind``, ``view_text``) as they are. ``own``: names the result
    sets itself (``group``, ``score``, ...); a caller key with one of them keeps its stored name (``meta_group``)."""
    taken = set(own)
    names = caller_keys(meta)
    caller = set(names)
    out: dict[str, Any] = {}
    for key, value in meta.items():
        if key in caller or key in BOOKKEEPING_KEYS:  # the caller's keys are given by name below
            continue
        if key in SHARED_KEYS or key in RETRIEVAL_KEYS:
            out[key] = value
        elif key in RESERVED_KEYS or is_item_field(key):
            out[FIELD_PREFIX + key] = value
        else:  # a key no caller_keys lists (written by something else): the caller's, by its name
            name = public_name(key)
            out[key if name in taken else name] = value
    for key in names:
        if key in meta:
            name = public_name(key)
            out[key if name in taken else name] = meta[key]
    return out
