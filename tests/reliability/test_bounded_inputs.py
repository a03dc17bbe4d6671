"""Filters too deep or too long are an ``InputError`` naming the limit, found before anything recurses or queries.

The defects: a ``where`` nested 5,000 deep raised ``RecursionError`` in ``search`` and ``delete(where=)``; a ``$nin`` of
100,000 values reached SQLite ("too many SQL variables", reported as a disk fault). The limits
(``MAX_WHERE_DEPTH``, ``MAX_WHERE_VALUES``, ``MAX_THREAD_IDS``) are checked without recursion, and the largest filter
they allow runs on Chroma.
"""

from __future__ import annotations

import asyncio

import pytest
from ctxret.errors import InputError
from ctxret.storage.schema import MAX_THREAD_IDS
from ctxret.storage.where import MAX_WHERE_DEPTH, MAX_WHERE_VALUES, check_where_size
from hypothesis import given, settings
from hypothesis import strategies as st

from .hash_embedder import HashEmbedder


def nested(depth: int) -> dict:
    """A filter ``depth`` levels deep: ``$and`` inside ``$and``."""
    where: dict = {"ctxret:kind": "turn"}
    for _ in range(depth - 1):
        where = {"$and": [where, {"ctxret:kind": "turn"}]}
    return where


@pytest.fixture(scope="module")
def index_embedder():
    return HashEmbedder()


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        for t in range(3):
            ix.add_messages([{"role": "user", "content": f"alpha bravo note {t}"}], thread_id=f"t{t}")

    return fill


TOO_MUCH = {
    "5,000 levels deep": (nested(5_000), f"more than {MAX_WHERE_DEPTH} levels deep"),
    "one level too deep": (nested(MAX_WHERE_DEPTH + 1), f"more than {MAX_WHERE_DEPTH} levels deep"),
    "$nin of 100,000 values": ({"kind": {"$nin": [f"k{i}" for i in range(100_000)]}}, "more than 10,000 values"),
    "$or of 20,000 clauses": ({"$or": [{"turn_id": f"x{i}"} for i in range(20_000)]}, "more than 10,000 values"),
}


@pytest.mark.parametrize("case", list(TOO_MUCH))
def test_a_filter_over_a_limit_is_an_input_error_naming_it_in_search_and_delete(index, case):
    where, limit = TOO_MUCH[case]
    calls = {
        "search": lambda: index.search("alpha", where=where),
        "scoped search": lambda: index.search("alpha", thread_id="t1", where=where),
        "asearch": lambda: asyncio.run(index.asearch("alpha", where=where)),
        "delete": lambda: index.delete(where=where),
        "scoped delete": lambda: index.delete(thread_id="t1", where=where),
    }
    for name, call in calls.items():
        with pytest.raises(InputError, match=limit):
            call()
        assert index.store.count() == 3, name  # nothing deleted


def test_the_largest_filter_and_thread_list_allowed_run_on_chroma(index):
    values = [f"k{i}" for i in range(MAX_WHERE_VALUES - 1)]
    where = {"$and": [{"ctxret:kind": {"$nin": values}}, {"ctxret:kind": "turn"}]}
    threads = ["t0", "t1", *(f"none-{i}" for i in range(MAX_THREAD_IDS - 2))]
    assert len(index.search("alpha", where=where, score_threshold=None)[0].hits) == 3  # Chroma's query and reads
    assert index.search("alpha", where=nested(MAX_WHERE_DEPTH), score_threshold=None)[0].hits
    assert index.delete(thread_id=threads, where={"ctxret:kind": {"$in": values + ["turn"]}}) == 2
    with pytest.raises(InputError, match=f"over the limit of {MAX_THREAD_IDS:,}"):
        index.search("alpha", thread_id=[*threads, "one-more"])
    index.add_messages([{"role": "user", "content": "alpha bravo note 0"}], thread_id="t0")
    index.add_messages([{"role": "user", "content": "alpha bravo note 1"}], thread_id="t1")


def reference(where) -> tuple[int, int]:
    """``(depth, values)`` of a small filter, recursively: the rule the iterative check holds."""
    if isinstance(where, dict):
        inner = [
            reference(v) if isinstance(v, dict) else reference_list(v) if isinstance(v, list) else (0, 1)
            for v in where.values()
        ]
        return 1 + max((d for d, _ in inner), default=0), sum(n for _, n in inner)
    return reference_list(where)


def reference_list(items) -> tuple[int, int]:
    inner = [reference(v) if isinstance(v, (dict, list)) else (0, 1) for v in items]
    return max((d for d, _ in inner), default=0), sum(n for _, n in inner)


SCALAR = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.booleans())
FILTERS = st.recursive(
    st.dictionaries(st.sampled_from(["a", "b", "$in"]), st.one_of(SCALAR, st.lists(SCALAR, max_size=40)), max_size=2),
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(["$and", "$or", "k"]), st.lists(inner, max_size=3), min_size=1, max_size=2),
        st.dictionaries(st.just("k"), inner, min_size=1),
    ),
    max_leaves=60,
)


SMALL_LIMITS = (4, 30)  # depth, values: small, so that filters on both sides of each are drawn


@settings(max_examples=300, deadline=None)
@given(where=FILTERS)
def test_the_size_check_refuses_exactly_what_is_over_a_limit(where):
    import ctxret.storage.where as module

    depth, values = reference(where)
    saved = module.MAX_WHERE_DEPTH, module.MAX_WHERE_VALUES
    module.MAX_WHERE_DEPTH, module.MAX_WHERE_VALUES = SMALL_LIMITS
    try:
        over = depth > module.MAX_WHERE_DEPTH or values > module.MAX_WHERE_VALUES
        if over:
            with pytest.raises(InputError, match="the limit"):
                check_where_size(where)
        else:
            check_where_size(where)
    finally:
        module.MAX_WHERE_DEPTH, module.MAX_WHERE_VALUES = saved
