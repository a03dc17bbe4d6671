"""LlamaIndex ``MetadataFilters`` → the store's filter (a Chroma ``where`` on piece metadata).

Supported: ``==`` ``!=`` ``>`` ``>=`` ``<`` ``<=`` ``in`` ``nin`` (Chroma's ``$eq $ne $gt $gte $lt
$lte $in $nin``), combined with ``and`` / ``or`` and nested ``MetadataFilters``. Other operators
(``text_match``, ``contains``, ``any``, ``all``, ``is_empty``) and ``not`` have no Chroma ``where``
equivalent: they are refused with an error naming the supported ones, never ignored.

Keys are named as a caller names them (the core translates them, :func:`ctxret.storage.schema.stored_where`): your
own keys as you gave them (``kind``, ``timestamp``, … too), ``thread_id`` and ``doc_id`` (the thread and the
document: one key for you and ctxret), and ctxret's other fields as ``ctxret:<field>`` (``ctxret:source_kind``,
``ctxret:ts_epoch``, …). Chroma compares numbers with ``$gt`` … only when the stored value is a number.
"""

from __future__ import annotations

from typing import Any

from ctxret import InputError
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

__all__ = ["SUPPORTED_OPERATORS", "metadata_filters_to_where"]

_OPS = {
    FilterOperator.EQ: "$eq",
    FilterOperator.NE: "$ne",
    FilterOperator.GT: "$gt",
    FilterOperator.GTE: "$gte",
    FilterOperator.LT: "$lt",
    FilterOperator.LTE: "$lte",
    FilterOperator.IN: "$in",
    FilterOperator.NIN: "$nin",
}
#: The LlamaIndex operators a Chroma ``where`` can express.
SUPPORTED_OPERATORS = tuple(op.value for op in _OPS)


def _one(f: MetadataFilter) -> dict[str, Any]:
    op = FilterOperator(f.operator)
    if op not in _OPS:
        raise InputError(
            f"metadata filter on {f.key!r}: operator {op.value!r} has no Chroma equivalent; use one of "
            f"{', '.join(SUPPORTED_OPERATORS)} (combined with and/or)"
        )
    value: Any = f.value
    if op in (FilterOperator.IN, FilterOperator.NIN):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
            raise InputError(f"metadata filter on {f.key!r}: {op.value!r} needs a non-empty list, got {value!r}")
        value = list(value)
    elif value is None or isinstance(value, (list, tuple)):
        raise InputError(f"metadata filter on {f.key!r}: {op.value!r} needs a single value, got {value!r}")
    return {f.key: {_OPS[op]: value}}


def metadata_filters_to_where(filters: MetadataFilters | None) -> dict[str, Any] | None:
    """``filters`` as a Chroma ``where`` dict (``None`` for no filter or an empty one)."""
    if filters is None:
        return None
    if not isinstance(filters, MetadataFilters):
        raise InputError(f"filters must be a LlamaIndex MetadataFilters, got {type(filters).__name__}")
    clauses = []
    for f in filters.filters:
        clause = metadata_filters_to_where(f) if isinstance(f, MetadataFilters) else _one(f)
        if clause:
            clauses.append(clause)
    if not clauses:
        return None
    condition = FilterCondition(filters.condition or FilterCondition.AND)
    if condition is FilterCondition.NOT:
        raise InputError("metadata filters: condition 'not' has no Chroma equivalent; use '!=' or 'nin' on the key")
    if len(clauses) == 1:
        return clauses[0]
    return {"$and" if condition is FilterCondition.AND else "$or": clauses}
