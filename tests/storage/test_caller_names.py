"""Your metadata keys keep your names (filters and results); ctxret's fields are ``ctxret:<field>``; ``thread_id`` and
``doc_id`` are one key for both; a store written by the earlier schema reads and filters the same.

The stored names are those of earlier versions (a caller key named like one of ctxret's fields is stored as
``meta_<key>``): the names change only where a caller names or reads a key (``storage/schema.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from ctxret import ContextualIndex
from ctxret.errors import InputError
from ctxret.ingest import pieces as ingest_pieces
from ctxret.ingest import plan as ingest_plan
from ctxret.ingest.documents import document_turns
from ctxret.storage import schema
from ctxret.storage.schema import (
    FIELD_PREFIX,
    ITEM_FIELDS,
    METADATA_PREFIX,
    RESERVED_KEYS,
    RETRIEVAL_KEYS,
    SHARED_KEYS,
    caller_metadata,
    caller_view,
    flatten_metadata,
    is_item_field,
    public_metadata,
    public_name,
    stored_name,
    stored_where,
)
from hypothesis import given, settings
from hypothesis import strategies as st

# -- the names, as properties -------------------------------------------------------------------------------------
_TAKEN = sorted(RESERVED_KEYS | RETRIEVAL_KEYS | ITEM_FIELDS | {"score_x", "score_", "item_ns_0", "item_ns_17"})
_key = st.one_of(
    st.sampled_from(_TAKEN),
    st.builds(lambda n, k: METADATA_PREFIX * n + k, st.integers(1, 3), st.sampled_from(_TAKEN + ["team", "x"])),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
        lambda k: not k.startswith(("$", "#", "chroma:", FIELD_PREFIX))
    ),
)


@given(st.lists(_key, min_size=1, max_size=8, unique=True))
def test_stored_names_are_one_to_one_and_invert(keys):
    stored = [stored_name(k) for k in keys]
    assert len(set(stored)) == len(keys)  # two keys of the caller never share a stored name
    assert [public_name(s) for s in stored] == keys  # and each reads back as given
    for k, s in zip(keys, stored, strict=True):
        if (k in RESERVED_KEYS and k not in SHARED_KEYS) or k in RETRIEVAL_KEYS or is_item_field(k):
            assert s == METADATA_PREFIX + k  # never under a name ctxret writes or returns itself
        assert s not in RESERVED_KEYS - SHARED_KEYS and s not in RETRIEVAL_KEYS and not is_item_field(s)


@given(st.dictionaries(_key, st.one_of(st.integers(-5, 5), st.text(max_size=5), st.booleans()), max_size=8))
def test_caller_metadata_reads_back_under_the_callers_names(meta):
    stored = caller_metadata(meta)
    flat = {k: v for k, v in flatten_metadata(meta).items() if k not in SHARED_KEYS}
    record = {**stored, "caller_keys": schema.join_caller_keys(stored)}
    assert caller_view(record) == flat
    for key, value in flat.items():  # a filter on the caller's name is a filter on the stored key
        assert stored_where({key: value}) == {stored_name(key): value}
        assert record[stored_where({key: value}).popitem()[0]] == value


def test_filter_names_translate():
    where = {"$or": [{"kind": "travel"}, {"$and": [{"ctxret:kind": "turn"}, {"thread_id": {"$in": ["a", "b"]}}]}]}
    assert stored_where(where) == {
        "$or": [{"meta_kind": "travel"}, {"$and": [{"kind": "turn"}, {"thread_id": {"$in": ["a", "b"]}}]}]
    }
    assert stored_where({"doc_id": "d"}) == {"doc_id": "d"} and stored_where({"#document": {"$contains": "x"}})
    assert stored_where({"meta_team": 1}) == {"meta_team": 1} and stored_where(None) is None
    with pytest.raises(InputError, match="ctxret:nope"):
        stored_where({"ctxret:nope": 1})
    with pytest.raises(InputError, match="ctxret:"):
        flatten_metadata({"ctxret:kind": "x"})  # the namespace is ctxret's


def test_public_metadata_names():
    record = {
        "thread_id": "t",
        "doc_id": "d",
        "kind": "section",
        "header": "[Doc]",
        "meta_kind": "memo",
        "meta_group": 3,
        "team": "ops",
        "caller_keys": "meta_group,meta_kind,team",
        "view_kind": "summary",
    }
    out = public_metadata(record, own={"group", "score"})
    assert out == {
        "thread_id": "t",
        "doc_id": "d",
        "ctxret:kind": "section",
        "ctxret:header": "[Doc]",
        "kind": "memo",
        "meta_group": 3,
        "team": "ops",
        "view_kind": "summary",
    }
    assert public_metadata(record)["group"] == 3  # without a result key of that name: by its own name


# -- a store written by the earlier schema --------------------------------------------------------------------------
def legacy_caller_metadata(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """``caller_metadata`` as the code before the ``ctxret:`` namespace wrote it (verbatim): the schema a store
    written by that code holds (a caller ``thread_id`` as ``meta_thread_id``, ``meta_x`` as itself)."""
    taken = lambda name: name in RESERVED_KEYS or name in RETRIEVAL_KEYS or name.startswith("score_")  # noqa: E731
    flat = flatten_metadata(meta or {})
    out: dict[str, Any] = {}
    for key, value in flat.items():
        name = key
        while taken(name) or (name != key and name in flat):
            name = METADATA_PREFIX + name
        out[name] = value
    return out


DOCS = [
    {
        "id": "flight",
        "text": "The flight to Lisbon leaves at 09:40 from gate 12.",
        "metadata": {"kind": "travel", "team": "home", "timestamp": "2026-10-01", "thread_id": "u1"},
    },
    {
        "id": "hotel",
        "text": "The hotel in Lisbon is booked for three nights near the river.",
        "metadata": {"kind": "travel", "team": "home", "meta_note": "keep"},
    },
    {
        "id": "vet",
        "text": "Biscuit's vaccinations are on Thursday at the Green Paws clinic.",
        "metadata": {"kind": "pets", "team": "home", "header": "mine"},
    },
]


def _write(path, embedder, *, legacy: bool, monkeypatch) -> None:
    with ContextualIndex(path, embedder=embedder) as index, monkeypatch.context() as m:
        if not legacy:
            index.add_documents(
                [{**d, "metadata": {k: v for k, v in d["metadata"].items() if k != "thread_id"}} for d in DOCS]
            )
            return
        # the writer of the earlier schema: a caller's thread_id kept aside (meta_thread_id), the thread the document's
        m.setattr(ingest_pieces, "caller_metadata", legacy_caller_metadata)
        m.setattr(ingest_pieces, "SHARED_KEYS", frozenset())
        m.setattr(ingest_plan, "check_shared_keys", lambda turn: None)
        index.add_turns([t for d in DOCS for t in document_turns(d["text"], doc_id=d["id"], metadata=d["metadata"])])


def test_a_store_written_by_the_earlier_schema_reads_the_same(tmp_path, hash_embedder, monkeypatch):
    _write(tmp_path / "old", hash_embedder, legacy=True, monkeypatch=monkeypatch)
    _write(tmp_path / "new", hash_embedder, legacy=False, monkeypatch=monkeypatch)
    old = ContextualIndex(tmp_path / "old", embedder=hash_embedder)
    new = ContextualIndex(tmp_path / "new", embedder=hash_embedder)
    stored = {r["id"]: r["metadata"] for r in old.store.chroma.iter_records(None)}
    assert {m.get("meta_kind") for m in stored.values()} == {"travel", "pets"}  # the earlier schema, as stored
    assert any(m.get("meta_thread_id") == "u1" for m in stored.values())
    queries = ["When does my flight to Lisbon leave?", "Where is the hotel? When are the vaccinations?"]
    filters = [
        None,
        {"kind": "travel"},
        {"team": "home"},
        {"kind": {"$in": ["pets"]}},
        {"ctxret:kind": "section"},
        {"$and": [{"kind": "travel"}, {"team": "home"}]},
        {"kind": {"$ne": "travel"}},
    ]
    for q in queries:
        for where in filters:
            a = [[(h.id, round(h.score, 6)) for h in g.hits] for g in old.search(q, 3, None, where=where)]
            b = [[(h.id, round(h.score, 6)) for h in g.hits] for g in new.search(q, 3, None, where=where)]
            assert a == b, (q, where)  # same pieces, same scores, same filters
            assert any(a), (q, where)
    travel = {h.metadata["doc_id"] for g in old.search(queries[1], 5, None, where={"kind": "travel"}) for h in g.hits}
    assert travel == {"flight", "hotel"}
    # the caller's names come back: the vector store's documents and the grouped retrievers' results
    from langchain_ctxret import ContextualRetriever, ContextualVectorStore

    store = ContextualVectorStore(old)
    got = {d.id: d.metadata for d in store.get_by_ids(["flight", "hotel", "vet"])}
    assert got["flight"] == {"kind": "travel", "team": "home", "timestamp": "2026-10-01", "meta_thread_id": "u1"}
    assert got["hotel"] == {"kind": "travel", "team": "home", "meta_note": "keep"}
    assert got["vet"] == {"kind": "pets", "team": "home", "header": "mine"}
    assert [d.id for d in store.similarity_search("Lisbon", k=3, filter={"kind": "travel"})] == ["flight", "hotel"] or [
        d.id for d in store.similarity_search("Lisbon", k=3, filter={"kind": "travel"})
    ] == ["hotel", "flight"]
    docs = ContextualRetriever(index=old, k=1, score_threshold=None).invoke("vaccinations", where={"header": "mine"})
    assert docs and docs[0].metadata["header"] == "mine" and docs[0].metadata["ctxret:header"].startswith("[")
    # a legacy caller thread_id stays the caller's, under the name it was stored by; the scope is the document's
    assert old.search("flight", k=1, where={"meta_thread_id": "u1"})[0].hits
    assert old.search("flight", k=1, where={"thread_id": "flight"})[0].hits


def test_thread_id_and_doc_id_in_metadata_are_the_thread_and_document(tmp_path, hash_embedder):
    index = ContextualIndex(in_memory=True, embedder=hash_embedder)
    index.add_documents([{"text": "The flight leaves at 09:40.", "metadata": {"thread_id": "u1", "doc_id": "f"}}])
    (hit,) = index.search("flight", k=1, thread_id="u1")[0].hits
    assert (hit.metadata["thread_id"], hit.metadata["doc_id"]) == ("u1", "f")
    assert index.search("flight", k=1, where={"thread_id": "u1"})[0].hits  # the filter is the scope
    assert caller_view(hit.stored) == {"thread_id": "u1", "doc_id": "f"}  # returned as given
    with pytest.raises(InputError, match="doc_id"):  # a chat turn has no document
        index.add_messages([{"role": "user", "content": "hi"}], thread_id="t", metadata={"doc_id": "x"})
    with pytest.raises(InputError, match="thread_id"):
        index.add_documents([{"text": "x", "metadata": {"thread_id": "a"}}], thread_id="b")
    assert index.store.count() == 1


def test_an_empty_search_on_a_field_name_says_what_it_meant(hash_embedder, caplog):
    index = ContextualIndex(in_memory=True, embedder=hash_embedder)
    index.add_messages([{"role": "user", "content": "The flight leaves at 09:40."}], thread_id="t")
    with caplog.at_level("WARNING", logger="ctxret"):
        assert index.search("flight", k=1, where={"source_kind": "user"})[0].hits == ()
    assert "'ctxret:source_kind'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="ctxret"):
        assert index.search("flight", k=1, where={"ctxret:source_kind": "user"})[0].hits
    assert not caplog.text


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(sorted(RESERVED_KEYS - SHARED_KEYS - {"caller_keys"})))
def test_no_caller_key_is_unfilterable(name):
    """A caller key named like any of ctxret's fields is found by its name (the issue: one returned [])."""
    record = {**caller_metadata({name: "v"}), name: "ctxret's", "caller_keys": stored_name(name)}
    assert record[next(iter(stored_where({name: "v"})))] == "v"
    assert record[next(iter(stored_where({FIELD_PREFIX + name: "x"})))] == "ctxret's"
    assert schema.public_metadata(record)[name] == "v"
