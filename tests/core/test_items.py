"""Items (``ctxret.ingest.items``, ``ctxret.items``): the value checks, the filter and namespace rules held to
LangGraph's ``InMemoryStore`` (the reference), the ranking rank by rank across parts, writes and reads."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from ctxret import ContextualIndex, InputError, Store
from ctxret.ingest.items import (
    check_namespace,
    item_turn,
    item_value_json,
    namespace_matches,
    namespace_thread,
    prefix_where,
    value_matches,
)
from ctxret.items import ItemStore, ItemWrite, rank_items
from ctxret.results import Group, Hit
from hypothesis import given, settings
from hypothesis import strategies as st
from langgraph.store.base import MatchCondition
from langgraph.store.memory import _compare_values, _does_match
from reliability.hash_embedder import HashEmbedder

T0 = datetime(2026, 4, 1, 9, 0, tzinfo=timezone.utc)

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.sampled_from(["a", "b", ""]))
VALUES = st.recursive(
    SCALARS,
    lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.sampled_from(["x", "y"]), c, max_size=2)),
    max_leaves=6,
)
OPS = st.dictionaries(
    st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]), st.integers(-5, 5), min_size=1, max_size=2
)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.sampled_from(["kind", "n", "tags"]), VALUES, max_size=3),
    filter=st.dictionaries(st.sampled_from(["kind", "n", "tags"]), st.one_of(VALUES, OPS), min_size=1, max_size=2),
)
def test_value_filter_is_langgraphs(value, filter):
    try:
        theirs = all(_compare_values(value.get(k), v) for k, v in filter.items())
    except (TypeError, ValueError):  # InMemoryStore raises comparing a missing or non-numeric field; ctxret: no match
        theirs = False
    assert value_matches(value, filter) == theirs


LABEL = st.sampled_from(["a", "b", "c", "*"])


@settings(max_examples=300, deadline=None)
@given(
    namespace=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=4).map(tuple),
    path=st.lists(LABEL, max_size=4).map(tuple),
    kind=st.sampled_from(["prefix", "suffix"]),
)
def test_namespace_conditions_are_langgraphs(namespace, path, kind):
    assert namespace_matches(namespace, path, kind) == _does_match(MatchCondition(kind, path), namespace)


def test_values_and_namespaces_are_checked():
    assert json.loads(item_value_json({"a": [1, 2.5, None, True], "b": {"c": "ü"}})) == {
        "a": [1, 2.5, None, True],
        "b": {"c": "ü"},
    }
    for bad, match in [
        ("text", "must be a dict"),
        ({"x": float("inf")}, "finite"),
        ({"x": {2: "y"}}, "JSON object keys are strings"),
        ({"x": {1, 2}}, "JSON cannot hold"),
        ({"x": "\ud800"}, "lone surrogate"),
    ]:
        with pytest.raises(InputError, match=match):
            item_value_json(bad)
    assert check_namespace(["a", "b"]) == ("a", "b")
    assert check_namespace((), empty=True) == ()
    for bad in [(), "ab", ("a.b",), ("a", ""), ("a", 3)]:
        with pytest.raises(InputError):
            check_namespace(bad)
    assert namespace_thread(("memories", "user-42")) == "ctxret:items:memories.user-42"


def test_an_item_is_one_section_with_its_keys_on_every_piece():
    value = {"content": "Biscuit is a beagle.", "tags": ["dog"]}
    turn = item_turn(
        ("memories", "ana"),
        "dog",
        json.dumps(value),
        [("content", "Biscuit is a beagle."), ("tags", "")],
        created_at=T0,
        updated_at=T0 + timedelta(hours=1),
    )
    assert turn.thread_id == "ctxret:items:memories.ana" and turn.doc_id == "dog" and turn.kind == "item"
    assert [s.text for s in turn.sources] == ["Biscuit is a beagle."] and turn.sources[0].label == ""
    assert not turn.metadata  # the item's fields are ctxret's, never caller metadata
    assert turn.item["item_ns_0"] == "memories" and turn.item["item_depth"] == 2
    assert turn.item["item_indexed"] is True and json.loads(turn.item["item_value"]) == value
    unindexed = item_turn(("m",), "k", json.dumps(value), [], created_at=T0, updated_at=T0)
    assert unindexed.item["item_indexed"] is False and "Biscuit" in unindexed.sources[0].text
    two = item_turn(("m",), "k", json.dumps(value), None, created_at=T0, updated_at=T0)
    assert two.sources[0].text == json.dumps(value, sort_keys=True)
    assert prefix_where(()) == {"item_depth": {"$gte": 1}}
    assert prefix_where(("a", "*"), wildcards=True) == {"$and": [{"item_depth": {"$gte": 2}}, {"item_ns_0": "a"}]}
    assert {"item_ns_1": "*"} in prefix_where(("a", "*"))["$and"]


def _hit(item: str, relevance: float) -> Hit:
    meta = {
        "thread_id": "ctxret:items:m",
        "doc_id": item,
        "kind": "item",
        "item_id": json.dumps(["m", item]),
        "item_key": item,
        "item_namespace": '["m"]',
        "item_value": "{}",
        "item_created_at": T0.isoformat(),
        "item_updated_at": T0.isoformat(),
    }
    return Hit(id=f"{item}-{relevance}", text=item, score=relevance, stored=meta, scores={"relevance": relevance})


def test_items_are_ranked_rank_by_rank_across_parts():
    groups = [
        Group(0, "first question", (_hit("a1", 0.9), _hit("a1", 0.8), _hit("a2", 0.85), _hit("a3", 0.7))),
        Group(1, "second question", (_hit("b1", 0.4), _hit("a2", 0.3))),
        Group(2, "nothing", ()),
    ]
    ranked = rank_items(groups)
    assert [i.key for i in ranked] == ["a1", "b1", "a2", "a3"]
    assert [i.score for i in ranked] == [0.9, 0.4, 0.8, 0.7]  # a group's shown scores never rise down the group
    assert rank_items([]) == []


def test_writes_and_reads():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    items = ItemStore(index)
    result = items.write(
        [
            ItemWrite(("m", "a"), "k", {"content": "first"}),
            ItemWrite(("m", "a"), "k", {"content": "second"}),  # the last write of a key wins
            ItemWrite(("m", "b"), "gone", {"content": "x"}),
            ItemWrite(("m", "b"), "gone", None),
        ],
        now=T0,
    )
    assert result.added >= 1
    k, gone = items.read([(("m", "a"), "k"), (("m", "b"), "gone")])
    assert k.value == {"content": "second"} and gone is None and k.created_at == T0
    items.write([ItemWrite(("m", "a"), "k", {"content": "third"})], now=T0 + timedelta(days=1))
    (k,) = items.read([(("m", "a"), "k")])
    assert k.created_at == T0 and k.updated_at == T0 + timedelta(days=1) and k.value == {"content": "third"}
    assert index.stats()["pieces"] == 1  # the item's old pieces were replaced
    with pytest.raises(InputError, match="ItemWrite"):
        items.write([("m", "k", {})])  # type: ignore[list-item]
    with pytest.raises(InputError, match="ContextualIndex"):
        ItemStore(object())
