"""Chroma's ``where`` filter, evaluated on piece metadata in Python (for searches served from memory).

Supports what Chroma documents for metadata: ``{key: value}`` (equality), ``{key: {op: value}}`` with
``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$nin``, and ``$and`` / ``$or`` of
clauses. As in Chroma 1.5, ``$ne`` and ``$nin`` are the negations of ``$eq`` and ``$in`` (so a record
that lacks the key, or holds another type, matches them), the other operators never match a
record without the key, the order operators compare numbers only, and a boolean is not a number. A filter
using anything else raises :class:`Unsupported`, and the caller hands the search to Chroma instead; a test
holds this evaluator to Chroma's answers on random filters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["Unsupported", "compile_where"]


class Unsupported(Exception):
    """A filter this evaluator does not handle (the search goes to Chroma)."""


_Pred = Callable[[Mapping[str, Any]], bool]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_kind(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    if _number(a) and _number(b):
        return True
    return type(a) is type(b)


def _fractional(v: Any) -> bool:
    # Chroma 1.5 compares an int field with a fractional float by truncating the float ({"n": 0.5}
    # matches n = 0, {"n": {"$gte": 0.5}} matches n = 0): such filters go to Chroma, so the answer
    # stays Chroma's.
    return isinstance(v, float) and not v.is_integer()


def _op(key: str, op: str, value: Any) -> _Pred:
    if op in ("$eq", "$ne"):
        if not isinstance(value, (str, int, float, bool)) or _fractional(value):
            raise Unsupported(op)
        want = op == "$eq"

        def eq(meta: Mapping[str, Any]) -> bool:
            got = meta.get(key)
            equal = got is not None and _same_kind(got, value) and got == value
            return equal == want

        return eq
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if not _number(value) or _fractional(value):
            raise Unsupported(op)
        cmp = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}[op]

        def order(meta: Mapping[str, Any]) -> bool:
            got: Any = meta.get(key)
            return _number(got) and bool(cmp(float(got), float(value)))

        return order
    if op in ("$in", "$nin"):
        if not isinstance(value, list) or not value or not all(isinstance(v, (str, int, float, bool)) for v in value):
            raise Unsupported(op)
        if any(_fractional(v) for v in value):
            raise Unsupported(op)
        inside = op == "$in"

        def member(meta: Mapping[str, Any]) -> bool:
            got = meta.get(key)
            found = got is not None and any(_same_kind(got, v) and got == v for v in value)
            return found == inside

        return member
    raise Unsupported(op)


def compile_where(where: Mapping[str, Any]) -> _Pred:
    """A predicate on metadata equal to Chroma's reading of ``where``; :class:`Unsupported` otherwise."""
    if not isinstance(where, Mapping) or len(where) != 1:
        raise Unsupported("a where filter has exactly one top-level key")
    ((key, value),) = where.items()
    if key in ("$and", "$or"):
        if not isinstance(value, list) or len(value) < 2:
            raise Unsupported(key)
        parts = [compile_where(v) for v in value]
        if key == "$and":
            return lambda meta: all(p(meta) for p in parts)
        return lambda meta: any(p(meta) for p in parts)
    if key.startswith("$"):
        raise Unsupported(key)
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise Unsupported("one operator per key")
        ((op, operand),) = value.items()
        return _op(key, op, operand)
    return _op(key, "$eq", value)
