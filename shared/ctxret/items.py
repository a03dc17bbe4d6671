"""``ItemStore``: namespaced JSON items in a :class:`~ctxret.ContextualIndex`, searched by parts.

What a key-value memory store needs (LangGraph's ``BaseStore``: ``langchain_ctxret.CtxretStore`` is this class in
LangGraph's shape): ``write`` puts and deletes items, ``read`` gets them by namespace and key, ``search`` finds the
items under a namespace prefix (a value ``filter``, ``limit`` / ``offset``, and a ``query``), ``namespaces`` lists
the namespaces. Items are documents of the index (:mod:`ctxret.ingest.items`), so the same collection may hold chat
memory and items, and the retrievers and the CLI read them.

**A query search is ctxret's search.** The query is split into its parts, each blended with the whole message and
searched (dense and BM25, the floor) inside the prefix's items; an item's score is the relevance of its best piece in
a part's group, and the items are listed rank by rank across the parts: every part's best item first (best score
first among them), then every part's second, and so on, each item once. A message with one subject is listed by
score; a message with two questions has both subjects' best items at its top, where one vector per message finds the
louder subject only.

**Up to ``limit`` items, whatever their score**, as LangGraph's ``InMemoryStore`` returns them: what a key-value
store's caller (a LangMem search tool, "user preferences", "What should I cook tonight?") reads is a ranking, and the
item that answers a general question rarely shares its words. The items that pass the product's floor come first, in
the order above; when they are fewer than ``limit``, the search runs again without the floor and the other items
follow in its order. ``SearchItem.score`` is each item's relevance in [0, 1] (low for the ones that did not pass: a
caller thresholds on it). A caller who asks for a floor (``score_threshold`` — a relevance floor — ``cosine_floor``
or ``min_relevance`` among the search options, or a ``min_relevance`` in the index's settings) gets only what passes
it, so such a search may return fewer than ``limit``.

**Without a query** the items under the prefix that pass the filter are listed namespace by namespace (in the order
each was first written to), each namespace's items in the order they were first written (``created_at``: a
re-written item keeps its place; a deleted and re-written one goes last), as LangGraph's ``InMemoryStore`` lists.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from .errors import InputError
from .index import ContextualIndex
from .ingest.items import (
    StoredItem,
    check_filter,
    check_key,
    check_namespace,
    item_id,
    item_turn,
    item_value_json,
    legacy_thread,
    namespace_matches,
    namespace_thread,
    prefix_where,
    read_item,
    search_where,
    value_matches,
)
from .query.relevance import shown_scores
from .results import Group, IndexResult
from .storage.schema import shown as shown_value

__all__ = ["FLOOR_OPTIONS", "ItemStore", "ItemWrite", "PIECES_PER_ITEM", "StoredItem", "rank_items"]

#: A query search asks each part for this many pieces per item wanted, so that enough distinct items are found when
#: some are long (several pieces).
PIECES_PER_ITEM = 4
#: Search options an item search sets itself (the namespace prefix is the scope).
_SCOPE_OPTIONS = ("thread_id", "where", "k", "per")
#: Search options that ask for a floor: with one of them, a query search returns only what passes it (no fill).
FLOOR_OPTIONS = ("score_threshold", "cosine_floor", "min_relevance")


@dataclass(frozen=True)
class ItemWrite:
    """One write: ``value`` (a dict) puts the item, ``None`` deletes it. ``texts``: ``(field, text)`` of the texts
    to index (``None``: the whole value as JSON; ``[]``: none, the item is stored but no query finds it)."""

    namespace: tuple[str, ...]
    key: str
    value: Mapping[str, Any] | None
    texts: Sequence[tuple[str, str]] | None = None


def rank_items(groups: Sequence[Group]) -> list[StoredItem]:
    """The items of a search's groups, each once: per group, an item at the place of its best piece (the group's
    ranking) with that piece's shown relevance as its score; then rank by rank across the groups (every group's
    best item, the best score first among them, then every group's second, ...)."""
    per_group: list[list[StoredItem]] = []
    for group in groups:
        seen: set[str] = set()
        mine: list[StoredItem] = []
        for hit, shown in zip(group.hits, shown_scores(group.hits), strict=True):
            item_key = hit.stored.get("item_id")
            if item_key is None or item_key in seen:
                continue
            seen.add(str(item_key))
            score = float(shown[0]) if shown is not None else None
            item = read_item(hit.stored, score=score, hit=hit)
            if item is not None:
                mine.append(item)
        per_group.append(mine)
    out: list[StoredItem] = []
    taken: set[str] = set()
    for rank in range(max((len(g) for g in per_group), default=0)):
        row = [g[rank] for g in per_group if rank < len(g)]
        row.sort(key=lambda it: -(it.score if it.score is not None else float("-inf")))  # stable: part order on ties
        for item in row:
            if item.id not in taken:
                taken.add(item.id)
                out.append(item)
    return out


class ItemStore:
    """Namespaced JSON items in ``index`` (a :class:`~ctxret.ContextualIndex`, or anything with an ``index``
    attribute holding one); see the module docstring. ``search_options``: search options for every query search
    (``score_threshold``, ``lexical``, ``deadline_ms``, ...; not ``thread_id`` / ``where`` / ``k``: the namespace
    prefix and ``limit`` set those)."""

    def __init__(self, index: Any, **search_options: Any) -> None:
        index = getattr(index, "index", index)
        if not isinstance(index, ContextualIndex):
            raise InputError(f"an item store needs a ctxret ContextualIndex, got {type(index).__name__}")
        self.index = index
        self.search_options = self._check_options(search_options)

    def _check_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        bad = [k for k in options if k in _SCOPE_OPTIONS]
        if bad:
            raise InputError(
                f"an item search sets {', '.join(bad)} itself (the namespace prefix is the scope, limit the count); "
                "leave it out"
            )
        self.index.plan(**dict(options))  # a misspelt or bad option fails here, not at the first search
        return dict(options)

    # -- writes -------------------------------------------------------------------------------------
    def write(self, writes: Iterable[ItemWrite], *, now: datetime | None = None) -> IndexResult:
        """Put and delete items in one write: every write is checked first (a bad one writes nothing); for a
        namespace and key written twice the last write wins; a put keeps the item's ``created_at``."""
        checked: dict[tuple[tuple[str, ...], str], tuple[ItemWrite, str | None]] = {}
        for i, w in enumerate(writes):
            if not isinstance(w, ItemWrite):
                raise InputError(f"write {i} must be an ItemWrite, got {type(w).__name__}")
            ns = check_namespace(w.namespace)
            key = check_key(w.key)
            value_json = (
                None
                if w.value is None
                else item_value_json(w.value, f"the value of {shown_value(key)} in {shown_value(ns)}")
            )
            texts = None if w.texts is None else [(str(f), t) for f, t in w.texts]
            checked[(ns, key)] = (ItemWrite(ns, key, w.value, texts), value_json)
        if not checked:
            return IndexResult()
        at = now or datetime.now(timezone.utc)
        puts = [(w, v) for w, v in checked.values() if v is not None]
        legacy: list[tuple[str, str]] = []
        known = self._read_ids([item_id(ns, key) for ns, key in checked], legacy)
        turns = []
        for n, (w, value_json) in enumerate(puts):
            updated = at + timedelta(microseconds=n)  # one batch keeps its order (listing is by first write)
            old = known.get(item_id(w.namespace, w.key))
            created = old.created_at if old is not None else updated
            turns.append(
                item_turn(w.namespace, w.key, value_json or "{}", w.texts, created_at=created, updated_at=updated)
            )
        documents = [(namespace_thread(ns), key) for ns, key in checked] + legacy  # an old copy goes too
        return self.index.write_items(turns, documents)

    async def awrite(self, writes: Iterable[ItemWrite], *, now: datetime | None = None) -> IndexResult:
        """Async :meth:`write` (in a worker thread)."""
        return await asyncio.to_thread(self.write, list(writes), now=now)

    # -- reads --------------------------------------------------------------------------------------
    def read(self, keys: Iterable[tuple[Sequence[str], str]]) -> list[StoredItem | None]:
        """The items at ``(namespace, key)``, in order (``None``: no such item)."""
        wanted = [item_id(check_namespace(ns), check_key(key)) for ns, key in keys]
        found = self._read_ids(wanted)
        return [found.get(i) for i in wanted]

    def _read_ids(self, ids: Sequence[str], legacy: list[tuple[str, str]] | None = None) -> dict[str, StoredItem]:
        """The stored items of ``ids``; ``legacy``: gets the ``(thread, key)`` of each one stored the way stores
        written before items had their own threads store it (in its namespace's plain thread)."""
        out: dict[str, StoredItem] = {}
        ids = list(dict.fromkeys(ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            clause = {"item_id": chunk[0]} if len(chunk) == 1 else {"item_id": {"$in": chunk}}
            where = {"$and": [clause, {"source_ordinal": 0}, {"ordinal": 0}]}
            for rec in self.index.store.chroma.iter_records(where):
                item = read_item(rec["metadata"] or {})
                if item is None:
                    continue
                _keep_latest(out, item)
                if legacy is not None and (rec["metadata"] or {}).get("kind") == "section":
                    legacy.append((legacy_thread(item.namespace), item.key))
        return out

    def scan(self, prefix: Sequence[str] = (), *, wildcards: bool = False) -> list[StoredItem]:
        """Every item under ``prefix``, namespace by namespace in the order they were first written to, each
        namespace's items in the order first written (``created_at``), as LangGraph's ``InMemoryStore`` lists."""
        out: dict[str, StoredItem] = {}
        for rec in self.index.store.chroma.iter_records(prefix_where(prefix, wildcards=wildcards, first_piece=True)):
            item = read_item(rec["metadata"] or {})
            if item is not None:
                _keep_latest(out, item)
        first: dict[tuple[str, ...], datetime] = {}
        for it in out.values():
            first[it.namespace] = min(first.get(it.namespace, it.created_at), it.created_at)
        return sorted(out.values(), key=lambda it: (first[it.namespace], it.namespace, it.created_at, it.key))

    def namespaces(
        self,
        *,
        prefix: Sequence[str] | None = None,
        suffix: Sequence[str] | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        """The namespaces holding items, sorted: those starting with ``prefix`` and ending with ``suffix`` (a ``"*"``
        label matches any), cut to their first ``max_depth`` labels (and each listed once), ``limit`` from
        ``offset``."""
        pre = check_namespace(prefix, "prefix") if prefix else ()
        suf = check_namespace(suffix, "suffix") if suffix else ()
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1):
            raise InputError(f"max_depth must be a positive integer or None, got {max_depth!r}")
        _check_window(limit, offset)
        found = {it.namespace for it in self.scan(pre, wildcards=True)}
        keep = [ns for ns in found if namespace_matches(ns, pre, "prefix") and namespace_matches(ns, suf, "suffix")]
        if max_depth is not None:
            keep = list({ns[:max_depth] for ns in keep})
        return sorted(keep)[offset : offset + limit]

    # -- search -------------------------------------------------------------------------------------
    def search(
        self,
        prefix: Sequence[str],
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        **options: Any,
    ) -> list[StoredItem]:
        """The items under ``prefix`` that pass ``filter``: for a ``query``, ctxret's search (see the module
        docstring), else all in the order first written; ``limit`` of them from ``offset``. ``options``: search
        options for this search (over the store's)."""
        plan = self._plan(prefix, query, filter, limit, offset, options)
        if plan is None:
            return []
        if isinstance(plan, list):
            return plan
        where, k, opts = plan
        items = rank_items(self.index.search(str(query), k=k, where=where, **opts))
        if len(items) < offset + limit and self._fills(opts):
            more = self.index.search(str(query), k=k, where=where, **{**opts, "score_threshold": None})
            items = _followed_by(items, rank_items(more))
        return items[offset : offset + limit]

    async def asearch(
        self,
        prefix: Sequence[str],
        query: str | None = None,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        **options: Any,
    ) -> list[StoredItem]:
        """Async :meth:`search` (the query on the index's async search, reads in a worker thread)."""
        plan = await asyncio.to_thread(self._plan, prefix, query, filter, limit, offset, options)
        if plan is None:
            return []
        if isinstance(plan, list):
            return plan
        where, k, opts = plan
        items = rank_items(await self.index.asearch(str(query), k=k, where=where, **opts))
        if len(items) < offset + limit and self._fills(opts):
            more = await self.index.asearch(str(query), k=k, where=where, **{**opts, "score_threshold": None})
            items = _followed_by(items, rank_items(more))
        return items[offset : offset + limit]

    def _fills(self, options: Mapping[str, Any]) -> bool:
        """Whether a query search is filled up to ``limit`` past the floor: unless a floor was asked for (a
        :data:`FLOOR_OPTIONS` option for the search, or a relevance floor in the index's settings)."""
        return not any(o in options for o in FLOOR_OPTIONS) and self.index.settings.min_relevance is None

    def _plan(
        self,
        prefix: Sequence[str],
        query: str | None,
        filter: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        options: Mapping[str, Any],
    ) -> list[StoredItem] | tuple[dict[str, Any], int, dict[str, Any]] | None:
        """A listing's items, or a query search's ``(where, k, options)``; ``None``: nothing can match."""
        pre = check_namespace(prefix, "namespace_prefix", empty=True)
        flt = check_filter(filter)
        _check_window(limit, offset)
        if query is not None and not isinstance(query, str):
            raise InputError(f"query must be a string or None, got {type(query).__name__}")
        if limit == 0:
            return None
        if not query or not query.strip():
            items = self.scan(pre)
            if flt:
                items = [it for it in items if value_matches(it.value, flt)]
            return items[offset : offset + limit]
        opts = {**self.search_options, **self._check_options(options)}
        where = prefix_where(pre, indexed=True)
        if flt:
            ids = [it.id for it in self.scan(pre) if value_matches(it.value, flt)]
            if not ids:
                return None
            where = {"$and": [where, {"item_id": ids[0]} if len(ids) == 1 else {"item_id": {"$in": ids}}]}
        return search_where(where), (offset + limit) * PIECES_PER_ITEM, opts


def _followed_by(first: Sequence[StoredItem], rest: Sequence[StoredItem]) -> list[StoredItem]:
    """``first``, then the items of ``rest`` not in it, in ``rest``'s order."""
    seen = {it.id for it in first}
    return [*first, *(it for it in rest if it.id not in seen)]


def _keep_latest(out: dict[str, StoredItem], item: StoredItem) -> None:
    """Keep one record per item (the latest write, while a rewrite is replacing an older one)."""
    old = out.get(item.id)
    if old is None or item.updated_at > old.updated_at:
        out[item.id] = item


def _check_window(limit: Any, offset: Any) -> None:
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{name} must be a non-negative integer, got {value!r}")
