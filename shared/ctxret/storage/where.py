"""Chroma's ``where`` filter, evaluated on piece metadata in Python (for searches served from memory).

Supports what Chroma documents for metadata: ``{key: value}`` (equality), ``{key: {op: value}}`` with
``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, ``$in``, ``$nin``, and ``$and`` / ``$or`` of
clauses. As in Chroma 1.5, ``$ne`` and ``$nin`` are the negations of ``$eq`` and ``$in`` (so a record
that lacks the key, or holds another type, matches them), the other operators never match a
record without the key, the order operators compare numbers only, and a boolean is not a number. A filter
using anything else raises :class:`Unsupported`, and the caller hands the search to Chroma instead; a test
holds this evaluator to Chroma's answers on random filters.

:func:`check_where` holds a caller's filter to Chroma's grammar before any store sees it, so a malformed
one is an :class:`~ctxret.errors.InputError` naming the key or operator and the fix (not a store fault).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import InputError
from ..text import check_unicode

__all__ = ["MAX_WHERE_DEPTH", "MAX_WHERE_VALUES", "Unsupported", "check_where", "check_where_size", "compile_where"]

#: How deep a caller's filter may nest (a filter inside ``$and`` / ``$or`` is one level down). Chroma 1.5 refuses
#: filters nested between 50 and 100 levels ("Invalid where clause"); Python's recursion fails at about 1,000.
MAX_WHERE_DEPTH = 32
#: How many values a caller's filter may hold in all (what its conditions compare with, one per ``$in`` / ``$nin``
#: item): SQLite takes at most 32,766 in one statement, and a store's read by id adds up to 5,461 ids and a thread
#: scope its thread ids (:data:`~.schema.MAX_THREAD_IDS`) to the filter's.
MAX_WHERE_VALUES = 10_000

#: Chroma's operators on a metadata key (1.5).
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains", "$not_contains")
_INT64 = (-(2**63), 2**63 - 1)
_EXAMPLE = "e.g. {'kind': 'turn'}, {'n': {'$gte': 3}}, {'$and': [{'kind': 'turn'}, {'n': {'$lt': 9}}]}"


def check_where(where: Any) -> dict[str, Any]:
    """``where`` as Chroma takes it (numpy scalars as Python numbers), else an :class:`InputError` that
    names the key or operator at fault and the fix.

    Chroma's grammar: a dict of exactly one key; ``$and`` / ``$or`` with a list of at least two
    filters; otherwise a metadata key whose value is a string, number or boolean (equality) or a dict
    of one operator (:data:`OPERATORS`): the order operators take a number, ``$in`` / ``$nin`` a
    non-empty list of values of one type, ``$contains`` on ``#document`` a string. Numbers are finite
    and within 64-bit integers; text is valid Unicode.
    """
    if not isinstance(where, Mapping):
        raise InputError(f"where must be a Chroma filter dict ({_EXAMPLE}), got {type(where).__name__}")
    check_where_size(where)
    return _clause(where, "where")


def check_where_size(where: Any) -> None:
    """An :class:`InputError` naming the limit when ``where`` nests deeper than :data:`MAX_WHERE_DEPTH` or holds more
    than :data:`MAX_WHERE_VALUES` values, found without recursion (before anything walks the filter recursively)
    and stopping at the first level or value over the limit (a filter that refers to itself is just too deep)."""
    stack: list[tuple[Any, int]] = [(where, 1)]
    values = 0  # the filter's values: what its conditions compare with, one per $in/$nin item
    while stack:
        node, depth = stack.pop()
        if depth > MAX_WHERE_DEPTH:
            raise InputError(
                f"where nests filters more than {MAX_WHERE_DEPTH} levels deep (the limit); flatten it: '$and' and "
                "'$or' take any number of clauses at one level, e.g. {'$or': [{'a': 1}, {'b': 2}, {'c': 3}]}"
            )
        in_dict = isinstance(node, Mapping)
        for v in node.values() if in_dict else node:
            if isinstance(v, (Mapping, list, tuple)):  # a list is at the level of the key that holds it
                stack.append((v, depth if in_dict and not isinstance(v, Mapping) else depth + 1))
            else:
                values += 1
        if values > MAX_WHERE_VALUES:
            raise InputError(
                f"where holds more than {MAX_WHERE_VALUES:,} values in all (the limit: what its conditions compare "
                "with, one per $in/$nin item; a store query takes at most that many); split the call into several, or "
                "filter on a key the wanted pieces share (a tag in their metadata) instead of listing them"
            )


def _clause(where: Any, path: str) -> dict[str, Any]:
    if not isinstance(where, Mapping):
        raise InputError(f"{path} must be a filter dict ({_EXAMPLE}), got {_show(where)}")
    if len(where) != 1:
        keys = ", ".join(repr(k) for k in where) or "none"
        raise InputError(
            f"{path} has {len(where)} keys ({keys}); a Chroma filter has exactly one: combine conditions with "
            "{'$and': [{'a': 1}, {'b': 2}]} (or '$or')"
        )
    ((key, value),) = where.items()
    if not isinstance(key, str):
        raise InputError(f"{path}: a filter key must be a metadata name or '$and' / '$or', got {key!r}")
    check_unicode(key, f"{path} key {key!r}")
    here = f"{path}[{key!r}]"
    if key in ("$and", "$or"):
        if not isinstance(value, list) or len(value) < 2:
            raise InputError(
                f"{here} must be a list of at least two filters, got {_show(value)}; a single condition goes "
                f"alone, without {key!r}"
            )
        return {key: [_clause(v, f"{here}[{i}]") for i, v in enumerate(value)]}
    if key.startswith("$"):
        raise InputError(f"{path}: {key!r} is not a Chroma filter key; use a metadata name, or '$and' / '$or'")
    if key == "#document" and not (isinstance(value, Mapping) and set(value) <= {"$contains", "$not_contains"}):
        raise InputError(
            f"{here}: Chroma filters the document text with {{'$contains': text}} or {{'$not_contains': text}} only, "
            f"got {_show(value)}"
        )
    if isinstance(value, Mapping):
        if len(value) != 1:
            ops = ", ".join(repr(k) for k in value) or "none"
            raise InputError(
                f"{here} holds {len(value)} operators ({ops}); give one per condition and combine them with "
                "'$and', e.g. {'$and': [{'n': {'$gte': 1}}, {'n': {'$lt': 9}}]}"
            )
        ((op, operand),) = value.items()
        return {key: {op: _operand(key, op, operand, f"{here}[{op!r}]")}}
    return {key: _scalar(value, here, "a string, number or boolean (or an operator dict such as {'$in': [...]})")}


def _operand(key: str, op: Any, operand: Any, here: str) -> Any:
    if op not in OPERATORS:
        raise InputError(f"{here}: {op!r} is not a Chroma operator; use one of {', '.join(OPERATORS)}")
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or not operand:
            raise InputError(f"{here} must be a non-empty list of values, got {_show(operand)}")
        values = [_scalar(v, f"{here}[{i}]", "a string, number or boolean") for i, v in enumerate(operand)]
        if len({_kind(v) for v in values}) > 1:
            raise InputError(
                f"{here} mixes value types ({_show(operand)}); Chroma takes values of one type: all strings, "
                "all integers, all floats or all booleans"
            )
        return values
    if op in ("$gt", "$gte", "$lt", "$lte"):
        value = _scalar(operand, here, "a number")
        if _kind(value) not in ("int", "float"):
            raise InputError(f"{here}: {op!r} compares numbers only, got {_show(operand)}")
        return value
    if key == "#document" and op in ("$contains", "$not_contains") and not isinstance(operand, str):
        raise InputError(f"{here}: {op!r} on '#document' takes the text to find, got {_show(operand)}")
    return _scalar(operand, here, "a string, number or boolean")


def _scalar(value: Any, here: str, what: str) -> Any:
    if hasattr(value, "item") and type(value).__module__ == "numpy":
        value = value.item()
    if isinstance(value, str):
        return check_unicode(value, here)
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise InputError(f"{here} is {value}, outside Chroma's 64-bit integers; pass a smaller number")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{here} is {value}; Chroma compares finite numbers only")
        return value
    hint = " (to match any of several values use {'$in': [...]})" if isinstance(value, (list, tuple, set)) else ""
    if value is None:
        hint = " (Chroma stores no None values, so nothing could match)"
    raise InputError(f"{here} must be {what}, got {_show(value)}{hint}")


def _kind(value: Any) -> str:
    return "bool" if isinstance(value, bool) else type(value).__name__


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


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


def _op(key: str, op: str, value: Any, exact: bool = False) -> _Pred:
    if op in ("$eq", "$ne"):
        if not isinstance(value, (str, int, float, bool)) or _fractional(value) and not exact:
            raise Unsupported(op)
        want = op == "$eq"

        def eq(meta: Mapping[str, Any]) -> bool:
            got = meta.get(key)
            equal = got is not None and _same_kind(got, value) and got == value
            return equal == want

        return eq
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if not _number(value) or _fractional(value) and not exact:
            raise Unsupported(op)
        cmp = {"$gt": float.__gt__, "$gte": float.__ge__, "$lt": float.__lt__, "$lte": float.__le__}[op]

        def order(meta: Mapping[str, Any]) -> bool:
            got: Any = meta.get(key)
            return _number(got) and bool(cmp(float(got), float(value)))

        return order
    if op in ("$in", "$nin"):
        if not isinstance(value, list) or not value or not all(isinstance(v, (str, int, float, bool)) for v in value):
            raise Unsupported(op)
        if any(_fractional(v) for v in value) and not exact:
            raise Unsupported(op)
        inside = op == "$in"
        if all(type(v) is str for v in value):  # a list of ids or keys: one set lookup, not a scan of the list
            strings = frozenset(value)

            def member_str(meta: Mapping[str, Any]) -> bool:
                got = meta.get(key)
                return (type(got) is str and got in strings) == inside

            return member_str

        def member(meta: Mapping[str, Any]) -> bool:
            got = meta.get(key)
            found = got is not None and any(_same_kind(got, v) and got == v for v in value)
            return found == inside

        return member
    raise Unsupported(op)


def compile_where(where: Mapping[str, Any], *, exact: bool = False) -> _Pred:
    """A predicate on metadata equal to Chroma's reading of ``where``; :class:`Unsupported` otherwise.

    ``exact``: a fractional number is compared as a number with every field (Chroma 1.5 truncates it against a
    whole-number field): the reading of :mod:`.inprocess`, which has no Chroma to hand such filters to."""
    if not isinstance(where, Mapping) or len(where) != 1:
        raise Unsupported("a where filter has exactly one top-level key")
    ((key, value),) = where.items()
    if key in ("$and", "$or"):
        if not isinstance(value, list) or len(value) < 2:
            raise Unsupported(key)
        parts = [compile_where(v, exact=exact) for v in value]
        if key == "$and":
            return lambda meta: all(p(meta) for p in parts)
        return lambda meta: any(p(meta) for p in parts)
    if key.startswith("$"):
        raise Unsupported(key)
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise Unsupported("one operator per key")
        ((op, operand),) = value.items()
        return _op(key, op, operand, exact)
    return _op(key, "$eq", value, exact)
