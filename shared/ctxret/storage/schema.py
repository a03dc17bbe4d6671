"""The one metadata schema: what ctxret stores with a piece, which keys are its own, what a hit carries.

Every write path (the core, both adapters, the CLI readers) builds piece metadata with
:func:`ctxret.ingest.pieces.piece_metadata`, and every adapter builds a result's metadata with :func:`hit_metadata`,
so the policies below hold everywhere:

* **Your names and ctxret's.** ctxret writes :data:`RESERVED_KEYS` on every piece and the adapters add
  :data:`RETRIEVAL_KEYS` (and ``score_<name>``) to every result. A caller's metadata key keeps the name the caller
  gave it wherever a caller names or reads it: in filters (:func:`stored_where`) and in results
  (:func:`caller_view`, :func:`public_metadata`). In a filter and in every result (the core's
  :attr:`~ctxret.results.Hit.metadata`, the adapters'), ctxret's own fields are ``ctxret:<field>``
  (:data:`FIELD_PREFIX`), a namespace no caller key may use; ``thread_id`` and
  ``doc_id`` (:data:`SHARED_KEYS`) are one key for both: a caller's value for one of them *is* the piece's thread or
  document (the write path checks that they agree), so ``{"thread_id": "u1"}`` is the scope.
* **Stored names.** What is stored is unchanged from earlier versions (stores written before read the same; the stages
  read a hit's :attr:`~ctxret.results.Hit.stored`): a caller
  key named like one of ctxret's fields or result keys is stored under the :data:`METADATA_PREFIX` (``meta_kind``),
  as is one that already starts with it and would otherwise read as such a name (``meta_kind`` → ``meta_meta_kind``),
  so that the stored name depends on the key alone and a filter on the caller's name finds it
  (:func:`stored_name`, :func:`public_name`). Never dropped, never an error (framework loaders routinely send
  ``source``, ``title`` or ``timestamp``). ``caller_keys`` lists a piece's caller keys by stored name.
* **Flat values.** Caller metadata is flattened to Chroma's scalar values
  (:func:`flatten_metadata`): nested dicts become dotted keys, lists and other values JSON strings.
* **Parents** are keyed by ``(thread_id, parent_id)``: a parent id alone (``"<doc or thread>#<n>"``)
  is not unique across threads, and one thread must never see another's text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError
from ..metanames import (
    BOOKKEEPING_KEYS,
    FIELD_PREFIX,
    ITEM_FIELDS,
    ITEM_LABEL_PREFIX,
    METADATA_PREFIX,
    RESERVED_KEYS,
    RETRIEVAL_KEYS,
    SCORE_PREFIX,
    SHARED_KEYS,
    caller_keys,
    caller_view,
    is_item_field,
    join_caller_keys,
    public_metadata,
    public_name,
    stored_name,
)
from ..text import check_unicode
from .where import check_where

if TYPE_CHECKING:
    from ..results import Group, Hit

__all__ = [
    "RESERVED_KEYS",
    "ITEM_FIELDS",
    "ITEM_LABEL_PREFIX",
    "ITEM_THREAD_PREFIX",
    "MAX_ID_BYTES",
    "MAX_LABEL_BYTES",
    "MAX_METADATA_KEY_BYTES",
    "MAX_METADATA_VALUE_BYTES",
    "Scope",
    "RETRIEVAL_KEYS",
    "BOOKKEEPING_KEYS",
    "METADATA_PREFIX",
    "FIELD_PREFIX",
    "SHARED_KEYS",
    "ParentKey",
    "caller_keys",
    "caller_metadata",
    "join_caller_keys",
    "candidate_metadata",
    "as_list",
    "caller_view",
    "check_id",
    "check_size",
    "shown",
    "check_writable_thread",
    "is_item_field",
    "is_item_thread",
    "check_metadata_arg",
    "flatten_metadata",
    "hit_metadata",
    "parent_key",
    "public_metadata",
    "public_name",
    "stored_key",
    "stored_name",
    "stored_where",
    "ctxret_field_names",
    "unmatched_field_names",
]

#: The prefix of the threads items live in (``ctxret:items:memories.user-42``): no chat or document thread may start
#: with it (:func:`check_writable_thread`), so a chat scope never names an item namespace's thread.
ITEM_THREAD_PREFIX = "ctxret:items:"
#: How long an id may be (a thread id, a document id, a message id, an item key, a memory scope), in UTF-8 bytes.
#: Chroma holds any length, but an id is stored in every piece's metadata and in every piece id's hash, and real ids
#: (UUIDs, file paths, URLs, chat exports' ids) are far shorter.
MAX_ID_BYTES = 1_024
#: How long a label may be (a document title, a speaker or tool name, a heading), in UTF-8 bytes: far above real
#: ones (tool names are at most 64 characters in OpenAI's API; titles a few hundred bytes). A header shows a label cut
#: to fit its piece; the metadata keeps it whole.
MAX_LABEL_BYTES = 4_096
#: How long one caller metadata value may be, in UTF-8 bytes: metadata is for filtering and labelling and is stored
#: with every piece of a turn (a 10 MB value on a 40-piece document is 400 MB of metadata); text to search goes in the
#: text. 64 KiB is far above real values (titles, URLs, tags, JSON summaries).
MAX_METADATA_VALUE_BYTES = 65_536
#: How long a metadata key may be, in UTF-8 bytes.
MAX_METADATA_KEY_BYTES = 1_024


def is_item_thread(thread_id: str) -> bool:
    """Whether ``thread_id`` is an item namespace's thread (:data:`ITEM_THREAD_PREFIX`)."""
    return thread_id.startswith(ITEM_THREAD_PREFIX)


ParentKey = tuple[str, str]  # (thread_id, parent_id)


def caller_metadata(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """Caller metadata, flattened, under the names it is stored by (:func:`stored_name`; see the module
    docstring). The shared keys (``thread_id``, ``doc_id``) are not in it: they are the piece's own fields."""
    return {stored_name(k): v for k, v in flatten_metadata(meta or {}).items() if k not in SHARED_KEYS}


def ctxret_field_names() -> list[str]:
    """ctxret's own fields as a filter names them (``ctxret:<field>``), and the shared keys."""
    return sorted(SHARED_KEYS) + sorted(FIELD_PREFIX + k for k in RESERVED_KEYS - SHARED_KEYS)


def stored_key(name: str) -> str:
    """The stored key a filter's name means: ``ctxret:<field>`` is ctxret's field, ``thread_id`` / ``doc_id`` the
    shared ones, any other name the caller's key of that name (:func:`stored_name`)."""
    if name.startswith(FIELD_PREFIX):
        field = name[len(FIELD_PREFIX) :]
        if field not in RESERVED_KEYS and not is_item_field(field):
            known = ", ".join(FIELD_PREFIX + k for k in sorted(RESERVED_KEYS - SHARED_KEYS))
            raise InputError(f"filter key {name!r} names no field of ctxret's; its fields are {known}")
        return field
    if name in SHARED_KEYS or name.startswith("#"):  # '#document': Chroma's own
        return name
    return stored_name(name)


def stored_where(where: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A caller's filter (keys as the caller names them: see :func:`stored_key`) on the stored keys, checked against
    Chroma's grammar first (:func:`check_where`); ``None`` / empty stays ``None``."""
    if not where:
        return None
    checked = check_where(where)
    out: dict[str, Any] = {}
    pending: list[tuple[Mapping[str, Any], dict[str, Any]]] = [(checked, out)]
    while pending:  # iterative: how deep a filter may nest is the grammar's to say, never a RecursionError here
        src, dst = pending.pop()
        for key, value in src.items():
            if key in ("$and", "$or"):
                clauses: list[dict[str, Any]] = [{} for _ in value]
                pending.extend(zip(value, clauses, strict=True))
                dst[key] = clauses
            else:
                dst[stored_key(key)] = value
    return out


def unmatched_field_names(where: Mapping[str, Any]) -> list[str]:
    """The plain names in a caller's filter that are also ctxret fields (``kind``, not ``ctxret:kind``): they mean the
    caller's key, which may be why a filter found nothing (said in a warning, never guessed)."""
    found: list[str] = []
    stack: list[Any] = [where]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            for key, value in node.items():
                if key in ("$and", "$or") and isinstance(value, list):
                    stack.extend(value)
                elif isinstance(key, str) and key in RESERVED_KEYS and key not in SHARED_KEYS:
                    found.append(key)
    return sorted(set(found))


def flatten_metadata(meta: Mapping[str, Any], prefix: str = "") -> dict[str, str | int | float | bool]:
    """Flatten caller metadata to Chroma's scalar values.

    Nested dicts become dotted keys (``{"a": {"b": 1}}`` → ``{"a.b": 1}``); lists, tuples and other
    values become JSON strings; ``None`` values are left out (Chroma cannot filter on them); numpy
    scalars become Python numbers. What Chroma cannot hold is an :class:`InputError` naming the key:
    a key starting with ``$`` or ``#`` (Chroma's own) or ``ctxret:`` (ctxret's), text with a lone surrogate, a
    non-finite float, an integer outside 64 bits (Chroma would store it as a float); so is a key over
    :data:`MAX_METADATA_KEY_BYTES` or a value (text, or a list's JSON) over :data:`MAX_METADATA_VALUE_BYTES`.
    """
    if not isinstance(meta, Mapping):
        raise InputError(f"metadata must be a dict of str keys, got {type(meta).__name__}")
    out: dict[str, str | int | float | bool] = {}
    stack: list[tuple[str, Mapping[str, Any], int]] = [(prefix, meta, 0)]
    while stack:  # iterative: deeply nested metadata is an error, never a RecursionError
        pre, current, depth = stack.pop()
        if depth > 32:
            raise InputError(f"metadata {pre.rstrip('.')!r} is nested more than 32 levels deep; flatten it")
        for key, value in current.items():
            if not isinstance(key, str) or not key:
                raise InputError(f"metadata keys must be non-empty strings, got {shown(key)}")
            name = f"{pre}{key}"
            check_size(name, f"metadata key {shown(name)}", MAX_METADATA_KEY_BYTES)
            if name.startswith(("$", "#", "chroma:")):
                raise InputError(
                    f"metadata key {name!r} starts with {name[0] if name[0] in '$#' else 'chroma:'!r}, which Chroma "
                    "keeps for its own filters and fields; rename it"
                )
            if name.startswith(FIELD_PREFIX):
                raise InputError(
                    f"metadata key {name!r} starts with {FIELD_PREFIX!r}, the names of ctxret's own fields in filters "
                    "and results; rename it"
                )
            if isinstance(value, np.generic):
                value = value.item()
            if value is None:
                continue
            if isinstance(value, bool):
                out[name] = value
            elif isinstance(value, int):
                if not -(2**63) <= value < 2**63:
                    raise InputError(
                        f"metadata {name!r} is {value}, outside the 64-bit integers Chroma holds (it would come back "
                        "as an inexact float); store it as a string"
                    )
                out[name] = value
            elif isinstance(value, str):
                out[name] = check_size(str(value), f"metadata {shown(name)}", MAX_METADATA_VALUE_BYTES)
            elif isinstance(value, float):
                if value != value or value in (float("inf"), float("-inf")):
                    raise InputError(f"metadata {name!r} is {value}; Chroma stores finite numbers only")
                out[name] = value
            elif isinstance(value, Mapping):
                stack.append((f"{name}.", value, depth + 1))
            else:
                try:
                    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
                except (TypeError, ValueError, RecursionError) as e:
                    raise InputError(f"metadata {name!r} of type {type(value).__name__} cannot be stored") from e
                out[name] = check_size(text, f"metadata {shown(name)}", MAX_METADATA_VALUE_BYTES)
    return dict(sorted(out.items()))


def parent_key(meta: Mapping[str, Any]) -> ParentKey | None:
    """The ``(thread_id, parent_id)`` a piece's parent is known by, or ``None``."""
    pid, thread = meta.get("parent_id"), meta.get("thread_id")
    return None if pid is None or thread is None else (str(thread), str(pid))


def _result_keys(hit: Hit) -> set[str]:
    return set(RETRIEVAL_KEYS) | {f"{SCORE_PREFIX}{name}" for name in hit.scores}


def candidate_metadata(hit: Hit, part: str) -> dict[str, Any]:
    """What a framework reranker sees of one candidate of a group: the piece's metadata as the grouped retrievers
    show it (:func:`public_metadata`; no retrieval keys from an earlier search), one ``score_<name>`` per named score
    and ``group_query`` (the part)."""
    meta = {k: v for k, v in public_metadata(hit.stored, own=_result_keys(hit)).items() if k not in RETRIEVAL_KEYS}
    meta.update({f"{SCORE_PREFIX}{name}": float(v) for name, v in hit.scores.items()})
    meta["group_query"] = part
    return meta


def hit_metadata(hit: Hit, group: Group, rank: int, parts: Sequence[str]) -> dict[str, Any]:
    """What an adapter puts in a result's metadata: the piece's metadata as a caller reads it
    (:func:`public_metadata`: the caller's keys by their names, ``thread_id``, ``doc_id``, ctxret's fields as
    ``ctxret:<field>``) plus group and score keys.

    ``group`` (0-based part index), ``group_query`` (the part), ``group_rank`` (0 = best),
    ``group_count`` and ``group_parts`` (every part's text), ``score`` (the ranking score) and
    ``score_scale`` (its name), one ``score_<name>`` per named score, ``parent_text`` when the search asked for
    parents, and ``search_degraded`` / ``search_skipped`` (the stages a ``deadline_ms`` skipped) when it skipped any.
    """
    meta: dict[str, Any] = public_metadata(hit.stored, own=_result_keys(hit))
    meta.update(
        group=int(group.part_index),
        group_query=group.part,
        group_rank=int(rank),
        group_count=len(parts),
        group_parts=list(parts),
        score=float(hit.score),
        score_scale=hit.score_scale,
    )
    for name, value in hit.scores.items():
        meta[f"{SCORE_PREFIX}{name}"] = float(value)
    if hit.parent_text is not None:
        meta["parent_text"] = hit.parent_text
    if group.degraded:
        meta["search_degraded"] = True
        meta["search_skipped"] = list(group.skipped)
    return meta


#: How many thread ids one search or delete may name (their ``$in`` and a caller's filter together stay well inside
#: SQLite's 32,766 values per statement; :data:`~.where.MAX_WHERE_VALUES`).
MAX_THREAD_IDS = 10_000


class Scope:
    """Where a search or delete looks: some threads (or all), a caller's Chroma ``where`` filter, and a time window.

    All are applied inside the stores' queries (never after ranking). Thread ids must be
    non-empty strings; an empty list of threads is an error (it would match nothing).

    ``window`` is ``(start, end)``: pieces stamped ``start <= timestamp < end`` (datetimes; either ``None``:
    unbounded). It becomes a clause on the stored ``ts_epoch`` joined to ``where`` (:attr:`where` is the
    combined filter; :attr:`caller_where` the caller's alone), so Chroma's query, the thread cache's mask
    (dense and BM25 over the same rows) and the lexical side's reads all apply it. A piece without a
    timestamp is outside every window. A naive stored timestamp is the store's own wall clock (``ts_epoch``
    holds it read as UTC) and is compared with the window's wall clock; an aware one by its instant
    (:func:`time_clause`).
    """

    __slots__ = ("thread_ids", "where", "caller_where", "window", "no_items")

    def __init__(
        self,
        thread_ids: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        window: tuple[Any, Any] | None = None,
        *,
        no_items: bool = False,
    ) -> None:
        self.thread_ids: tuple[str, ...] | None = _thread_tuple(thread_ids)
        if where is not None and not isinstance(where, Mapping):
            raise InputError(f"where must be a Chroma filter dict, got {type(where).__name__}")
        # held to Chroma's grammar here: a malformed filter is the caller's error, never a store fault
        self.caller_where: dict[str, Any] | None = check_where(where) if where else None
        self.window: tuple[Any, Any] | None = None if window is None or window == (None, None) else tuple(window)
        #: leave out the items of stores written before items had their own threads (:meth:`without_items`)
        self.no_items = no_items
        clause = time_clause(*self.window) if self.window is not None else None
        self.where = _joined(self.caller_where, clause, _NO_ITEMS if no_items else None)

    def __repr__(self) -> str:
        extra = f", window={self.window!r}" if self.window is not None else ""
        return f"Scope(thread_ids={self.thread_ids!r}, where={self.caller_where!r}{extra})"

    def with_window(self, window: tuple[Any, Any] | None) -> Scope:
        """The same threads and caller filter with another time window."""
        return Scope(self.thread_ids, self.caller_where, window, no_items=self.no_items)

    def without_items(self) -> Scope:
        """The same scope without item pieces (:data:`ITEM_FIELDS`): what a chat scope reads in a store written
        before items had their own threads (:data:`ITEM_THREAD_PREFIX`), where an item namespace's thread was its
        labels joined by ``"."`` and a chat scope of that name would read its items."""
        return Scope(self.thread_ids, self.caller_where, self.window, no_items=True)

    def stamped(self) -> Scope:
        """The same threads and caller filter, only the pieces that have a timestamp."""
        out = Scope(self.thread_ids, self.caller_where, no_items=self.no_items)
        out.where = _joined(
            out.caller_where, {"ts_epoch": {"$gte": -_EPOCH_SPAN}}, _NO_ITEMS if self.no_items else None
        )
        return out

    @property
    def everything(self) -> bool:
        return self.thread_ids is None and self.where is None

    def chroma_where(self) -> dict[str, Any] | None:
        """The thread scope and the caller filter as one Chroma ``where``."""
        clauses: list[dict[str, Any]] = []
        if self.thread_ids is not None:
            ids = list(self.thread_ids)
            clauses.append({"thread_id": ids[0]} if len(ids) == 1 else {"thread_id": {"$in": ids}})
        if self.where:
            clauses.append(dict(self.where))
        if not clauses:
            return None
        return clauses[0] if len(clauses) == 1 else {"$and": clauses}

    def holds(self, meta: Mapping[str, Any]) -> bool:
        """Whether a record's metadata is inside the thread scope (the ``where`` filter is Chroma's to check)."""
        return self.thread_ids is None or str(meta.get("thread_id")) in self.thread_ids


_EPOCH_SPAN = 10**13  # seconds: far beyond any stored time
#: No item piece: every item piece has ``item_indexed`` (true or false), and ``$nin`` matches a record without the key.
_NO_ITEMS: dict[str, Any] = {"item_indexed": {"$nin": [True, False]}}


def _joined(*clauses: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The given clauses (``None``: none) as one filter: ``None``, the one clause, or their ``$and``."""
    kept = [dict(c) for c in clauses if c]
    return None if not kept else kept[0] if len(kept) == 1 else {"$and": kept}


def _epoch_scales(dt: datetime) -> tuple[float, float]:
    """``dt`` on the ``ts_epoch`` scale of a naive stored timestamp (its wall clock read as UTC) and of an aware
    one (its instant; a naive ``dt`` is read in the machine's zone)."""
    wall = (dt.replace(tzinfo=None) - datetime(1970, 1, 1)).total_seconds()
    return wall, dt.timestamp()


def time_clause(start: datetime | None, end: datetime | None) -> dict[str, Any] | None:
    """``start <= timestamp < end`` as a Chroma ``where`` on ``ts_epoch`` (``None`` when both are ``None``).

    ``ts_epoch`` does not say whether a piece's timestamp carried a zone, so when the two scales differ (``now``'s
    zone is not UTC) the clause admits a piece on either: a naive piece compared by wall clock, an aware one by
    instant, each possibly also matching on the other scale within the zone's offset.
    """
    if start is None and end is None:
        return None

    def one(lo: float | None, hi: float | None) -> dict[str, Any]:
        parts = ([{"ts_epoch": {"$gte": float(lo)}}] if lo is not None else []) + (
            [{"ts_epoch": {"$lt": float(hi)}}] if hi is not None else []
        )
        return parts[0] if len(parts) == 1 else {"$and": parts}

    lo = _epoch_scales(start) if start is not None else (None, None)
    hi = _epoch_scales(end) if end is not None else (None, None)
    wall, instant = one(lo[0], hi[0]), one(lo[1], hi[1])
    return wall if wall == instant else {"$or": [wall, instant]}


def as_list(value: Any, what: str, items: str) -> list[Any]:
    """``value`` (an iterable of ``items``, not a string, bytes or a dict) as a list, else an :class:`InputError`."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InputError(f"{what} must be a list of {items}, got {type(value).__name__}")
    return list(value)


def check_metadata_arg(metadata: Any) -> None:
    """A ``metadata=`` argument is ``None`` or a dict (its keys and values are checked when flattened)."""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InputError(
            f"metadata must be a dict of str keys (e.g. {{'source': 'crm'}}) or None, got {type(metadata).__name__}"
        )


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters: how an error message quotes what it refuses (never a huge
    value whole)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 12]}...{text[-8:]} ({len(text):,} characters)"


def check_size(text: str, what: str, limit: int) -> str:
    """``text`` if it is valid Unicode of at most ``limit`` UTF-8 bytes, else an :class:`InputError` naming
    ``what`` and the limit (not the value)."""
    check_unicode(text, what)
    size = len(text.encode("utf-8"))
    if size > limit:
        raise InputError(f"{what} is {size:,} bytes, over the limit of {limit:,} bytes; shorten it")
    return text


def check_id(value: Any, what: str = "thread id") -> str:
    """``value`` if it is a usable id (a non-empty string of valid Unicode, at most :data:`MAX_ID_BYTES`), else an
    :class:`InputError` naming ``what``."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"a {what} must be a non-empty string, got {shown(value)}; pass e.g. 'user-42'")
    return check_size(value, f"the {what} {shown(value)}", MAX_ID_BYTES)


def check_writable_thread(value: Any, what: str = "thread id") -> str:
    """:func:`check_id`, and not an item namespace's thread (:data:`ITEM_THREAD_PREFIX`): what a chat or document
    writer may write to."""
    thread = check_id(value, what)
    if is_item_thread(thread):
        raise InputError(
            f"the {what} {shown(thread)} starts with {ITEM_THREAD_PREFIX!r}, which names the threads of a key-value "
            "item store (ctxret.items.ItemStore, LangChain's CtxretStore); items are written through it: choose "
            "another id"
        )
    return thread


def _thread_tuple(thread_id: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if thread_id is None:
        return None
    ids = [thread_id] if isinstance(thread_id, str) else thread_id
    if not isinstance(ids, (list, tuple, set, frozenset)):
        raise InputError(f"thread_id must be a string, a list of strings or None, got {type(thread_id).__name__}")
    if len(ids) > MAX_THREAD_IDS:
        raise InputError(
            f"thread_id lists {len(ids):,} threads, over the limit of {MAX_THREAD_IDS:,} in one call (a store query "
            "takes at most that many); search or delete in several calls, or give the threads' pieces a shared "
            "metadata key and filter on it with where="
        )
    out = [check_id(t) for t in ids]
    if not out:
        raise InputError("thread_id is an empty list; pass at least one thread id or None")
    return tuple(dict.fromkeys(out))
