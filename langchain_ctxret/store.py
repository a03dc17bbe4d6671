"""ctxret as a LangGraph store: ``CtxretStore`` is a ``langgraph.store.base.BaseStore``.

Long-term memory in LangGraph lives in a ``BaseStore``: ``put`` / ``get`` / ``delete`` / ``search`` /
``list_namespaces`` (and their async twins), used by ``create_agent(..., store=...)``, by any tool through
``runtime.store``, and by LangMem's memory tools. ``CtxretStore(index)`` keeps those items in a ctxret index
(:class:`ctxret.items.ItemStore`): a namespace is a ctxret thread of its own (``ctxret:items:`` and its labels joined by
``"."``; no chat scope reads it, and no other writer sets an item's fields), an item a document
whose value comes back whole, and ``search(prefix, query=...)`` is ctxret's search: the query split into its parts,
each blended with the whole message and searched (dense and BM25, under the product's floor), an item scored by its
best piece, the items listed rank by rank across the parts. So a message with two questions gets both subjects' items
at its top, where a store with one vector per message finds the louder one. Like ``InMemoryStore``, a search returns
up to ``limit`` items whatever their score: the items under the floor follow the others (each with its relevance as
``score``), unless a floor is asked for (``search_kwargs={"score_threshold": ...}``).

What is LangGraph's: the namespace rules (labels are non-empty strings without ``"."``; a search's prefix matches
the namespace and every one below it; ``list_namespaces`` with ``prefix`` / ``suffix`` (``"*"``: any label),
``max_depth``, ``limit``, ``offset``), the ``filter`` on value fields (equality, ``$eq``, ``$ne``, ``$gt``, ``$gte``,
``$lt``, ``$lte``), which fields are indexed (``fields=`` as ``index={"fields": [...]}``, ``put(..., index=False |
[...])``) and the text of each (``get_text_at_path``). What differs from ``InMemoryStore`` is in docs/langchain.md.

>>> store = CtxretStore(ContextualIndex("./memory"))                              # doctest: +SKIP
>>> store.put(("memories", "user-42"), "dog", {"content": "My dog is called Biscuit."})  # doctest: +SKIP
>>> store.search(("memories", "user-42"), query="What is my dog called?")          # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ctxret import InputError
from ctxret.adapters import ItemStore, ItemWrite, StoredItem, missing_extra

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
        get_text_at_path,
        tokenize_path,
    )
except ImportError as e:  # pragma: no cover - the base install has no langgraph
    raise missing_extra(e.name or "langgraph", "langgraph", "CtxretStore") from e

__all__ = ["CtxretStore"]


class CtxretStore(BaseStore):
    """A LangGraph ``BaseStore`` in a ctxret index (see the module docstring).

    Args:
        index: a :class:`ctxret.ContextualIndex` (or a ``ContextualRetriever``, which holds one); it may hold chat
            memory too (items are told apart by their metadata).
        fields: the value fields indexed by default (LangGraph's ``index={"fields": [...]}``; ``["$"]``, the
            whole value as JSON, when not given); ``put(..., index=[...])`` names others for one item and
            ``index=False`` stores an item no query search finds.
        search_kwargs: ctxret search options for every query search (``score_threshold``: a relevance floor,
            only the items at or above it; ``"auto"``: only the items past the product's floor; ``None``: no floor
            at all; ``lexical``, ``fusion``, ``deadline_ms``, ...). Without a floor asked for, a search returns up to
            ``limit`` items, the ones past the product's floor first.

    Items are stored as JSON (as LangGraph's Postgres store keeps them): a value must be a dict with string keys and
    JSON values, and comes back as JSON reads it. ``created_at`` is the item's first write, ``updated_at`` its last;
    ``SearchItem.score`` is the relevance in [0, 1] of the item's best piece (``None`` without a query). TTLs are not
    supported (``put(..., ttl=...)`` raises, as in every store that does not).
    """

    def __init__(
        self, index: Any, *, fields: Sequence[str] | None = None, search_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.items = ItemStore(index, **dict(search_kwargs or {}))
        paths = list(fields) if fields is not None else ["$"]
        if isinstance(fields, str) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise InputError(f"fields must be a list of value paths such as ['content'] or ['$'], got {fields!r}")
        self.fields = paths
        self._paths = [(p, _tokens(p)) for p in paths]

    @property
    def index(self) -> Any:
        """The :class:`ctxret.ContextualIndex` the items live in."""
        return self.items.index

    # -- BaseStore ----------------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order of kind: reads and searches see the store as it was before the batch, then every
        write of the batch (all checked first: a bad one raises and writes nothing) is made in one write."""
        ops = list(ops)
        writes = self._writes(ops)
        results = self._reads(ops)
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                results[i] = [_search_item(it) for it in self.items.search(**_search_args(op))]
            elif isinstance(op, ListNamespacesOp):
                results[i] = self._namespaces(op)
        if writes:
            self.items.write(writes)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch`: searches on the index's async search, reads and writes in a worker thread."""
        ops = list(ops)
        writes = self._writes(ops)
        results = await asyncio.to_thread(self._reads, ops)
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp):
                results[i] = [_search_item(it) for it in await self.items.asearch(**_search_args(op))]
            elif isinstance(op, ListNamespacesOp):
                results[i] = await asyncio.to_thread(self._namespaces, op)
        if writes:
            await self.items.awrite(writes)
        return results

    # -- the parts of a batch -----------------------------------------------------------------------
    def _writes(self, ops: Sequence[Op]) -> list[ItemWrite]:
        writes = []
        for op in ops:
            if not isinstance(op, (GetOp, SearchOp, ListNamespacesOp, PutOp)):
                raise InputError(
                    f"unknown store operation {type(op).__name__}; a batch holds GetOp, SearchOp, "
                    "ListNamespacesOp and PutOp"
                )
            if isinstance(op, PutOp):
                texts = None if op.value is None or not isinstance(op.value, Mapping) else self._texts(op)
                writes.append(ItemWrite(tuple(op.namespace), op.key, op.value, texts))
        return writes

    def _texts(self, op: PutOp) -> list[tuple[str, str]]:
        """The texts of ``op``'s value to index, as LangGraph's stores take them: each field path's texts (a path
        that yields several is numbered, ``path.0``, ``path.1``, ...)."""
        if op.index is False:
            return []
        paths = self._paths if op.index is None else [(p, _tokens(p)) for p in op.index]
        out: list[tuple[str, str]] = []
        for path, tokens in paths:
            texts = get_text_at_path(op.value, tokens)
            if len(texts) > 1:
                out += [(f"{path}.{i}", t) for i, t in enumerate(texts)]
            elif texts:
                out.append((path, texts[0]))
        return out

    def _reads(self, ops: Sequence[Op]) -> list[Result]:
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        results: list[Result] = [None] * len(ops)
        if gets:
            found = self.items.read([(tuple(op.namespace), op.key) for _, op in gets])
            for (i, _), item in zip(gets, found, strict=True):
                results[i] = None if item is None else _item(item)
        return results

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        prefix = suffix = None
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                prefix = tuple(condition.path)
            elif condition.match_type == "suffix":
                suffix = tuple(condition.path)
            else:
                raise InputError(f"a namespace condition is 'prefix' or 'suffix', got {condition.match_type!r}")
        return self.items.namespaces(
            prefix=prefix, suffix=suffix, max_depth=op.max_depth, limit=op.limit, offset=op.offset
        )


def _tokens(path: str) -> Any:
    return path if path == "$" else tokenize_path(path)


def _search_args(op: SearchOp) -> dict[str, Any]:
    return {
        "prefix": tuple(op.namespace_prefix),
        "query": op.query,
        "filter": op.filter,
        "limit": op.limit,
        "offset": op.offset,
    }


def _item(it: StoredItem) -> Item:
    return Item(value=it.value, key=it.key, namespace=it.namespace, created_at=it.created_at, updated_at=it.updated_at)


def _search_item(it: StoredItem) -> SearchItem:
    return SearchItem(
        namespace=it.namespace,
        key=it.key,
        value=it.value,
        created_at=it.created_at,
        updated_at=it.updated_at,
        score=it.score,
    )
