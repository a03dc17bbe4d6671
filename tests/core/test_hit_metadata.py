"""A core hit's metadata speaks the caller's names, exactly as the adapters show it.

``Hit.metadata`` holds the caller's keys as given, ``thread_id`` / ``doc_id``, ctxret's own fields as
``ctxret:<field>``, and ``view_kind`` / ``view_text`` when a view won; never the bookkeeping (``caller_keys``,
``exact_patch``) nor a stored name (``meta_kind``). ``Hit.stored`` is the metadata under the names it is stored by.
Stores written before (the earlier layout, raw Chroma records) read the same.
"""

from __future__ import annotations

import uuid
from typing import Any

import chromadb
import pytest
from ctxret import ContextualIndex, Store
from ctxret.items import ItemStore, ItemWrite
from ctxret.results import Hit
from ctxret.storage.schema import (
    BOOKKEEPING_KEYS,
    FIELD_PREFIX,
    ITEM_FIELDS,
    METADATA_PREFIX,
    RESERVED_KEYS,
    RETRIEVAL_KEYS,
    SHARED_KEYS,
    flatten_metadata,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

GIVEN = {"kind": "finance", "timestamp": "2026-01-05", "header": "mine"}
BUDGET = "The quarterly budget review moved to Friday; the finance team owns the spreadsheet."
CHAT = [
    {"role": "user", "content": "My dog Biscuit has his vaccinations on Thursday at Green Paws."},
    {"role": "assistant", "content": "Noted: Biscuit, Thursday, Green Paws."},
]


def _no_storage_names(meta: Any, given: Any = GIVEN) -> None:
    """Nothing of the stored layout shows (the caller's keys ``given`` aside): no bookkeeping, no escaped caller key,
    no plain ctxret field."""
    assert not BOOKKEEPING_KEYS & set(meta)
    assert not [k for k in meta if k.startswith(METADATA_PREFIX) and k not in given]
    assert not (RESERVED_KEYS - SHARED_KEYS - BOOKKEEPING_KEYS) & set(meta) - set(given)


def _adapter_view(doc_meta: dict[str, Any], hit: Hit) -> dict[str, Any]:
    """A grouped retriever's Document metadata without the keys it adds (group, score and rank keys)."""
    added = (RETRIEVAL_KEYS - {"view_kind", "view_text"}) | {f"score_{name}" for name in hit.scores}
    return {k: v for k, v in doc_meta.items() if k not in added}


@pytest.fixture
def index(hash_embedder):
    with ContextualIndex(in_memory=True, embedder=hash_embedder, collection=f"m-{uuid.uuid4().hex[:8]}") as ix:
        yield ix


# -- the example ---------------------------------------------------------------------------------------
def test_a_documents_hit_shows_the_callers_keys_and_ctxrets_fields_by_namespace(index):
    index.add_documents([{"id": "budget", "title": "Budget", "text": BUDGET, "metadata": dict(GIVEN)}])
    (hit,) = index.search("When is the budget review?", k=1, thread_id="budget")[0].hits
    meta = hit.metadata
    assert (meta["kind"], meta["timestamp"], meta["header"]) == ("finance", "2026-01-05", "mine")
    assert meta["ctxret:kind"] == "section" and meta["ctxret:header"].startswith("[")
    assert meta["doc_id"] == "budget" and meta["thread_id"] == "budget"
    _no_storage_names(meta)
    # the stored names, as the search's stages read them
    assert hit.stored["meta_kind"] == "finance" and hit.stored["kind"] == "section" and "caller_keys" in hit.stored
    assert hit.body == BUDGET and hit.stored["header"] == meta["ctxret:header"]
    with pytest.raises(AttributeError):
        hit.metadata = {}  # type: ignore[misc]  # read-only: the view of what is stored


def test_a_deferred_hit_completed_shows_its_own_metadata():
    """A row whose metadata the search reads later (Chroma's unscoped rows) is completed by a new hit: a view read
    before completion is never the completed hit's."""
    from dataclasses import replace

    from ctxret.storage.base import DEFERRED

    early = Hit("p1", "", 0.5, DEFERRED)
    assert early.metadata == {}
    done = replace(
        early, text="[Budget]\nbody", stored={"kind": "section", "meta_kind": "finance", "caller_keys": "meta_kind"}
    )
    assert done.metadata == {"ctxret:kind": "section", "kind": "finance"} and early.metadata == {}


# -- the same view as the adapters ---------------------------------------------------------------------------------
@pytest.mark.parametrize("what", ["document", "chat"])
def test_the_core_shows_what_the_langchain_and_llamaindex_retrievers_show(index, what):
    from langchain_ctxret import ContextualRetriever
    from llamaindex_ctxret import ContextualRetriever as LIRetriever

    if what == "document":
        index.add_documents([{"id": "budget", "title": "Budget", "text": BUDGET, "metadata": dict(GIVEN)}])
        thread, question = "budget", "When is the budget review?"
    else:
        index.add_messages(CHAT, thread_id="u1", metadata={**GIVEN, "conversation": "pets", "meta_x": 1})
        thread, question = "u1", "When are Biscuit's vaccinations?"
    hits = {h.id: h for h in index.search(question, k=3, thread_id=thread, score_threshold=None)[0].hits}
    docs = ContextualRetriever(index=index, k=3, thread_id=thread, score_threshold=None).invoke(question)
    nodes = LIRetriever(index, similarity_top_k=3, thread_id=thread, score_threshold=None).retrieve(question)
    assert hits and {d.id for d in docs} == set(hits) == {n.node.node_id for n in nodes}
    for d in docs:
        assert hits[d.id].metadata == _adapter_view(d.metadata, hits[d.id])
    for n in nodes:
        assert hits[n.node.node_id].metadata == _adapter_view(n.node.metadata, hits[n.node.node_id])
    for hit in hits.values():
        assert {k: hit.metadata[k] for k in GIVEN} == GIVEN
        _no_storage_names(hit.metadata, {*GIVEN, "meta_x"})
    if what == "chat":
        assert {h.metadata["ctxret:source_kind"] for h in hits.values()} <= {"user", "assistant"}
        assert all(h.metadata["conversation"] == "pets" and h.metadata["meta_x"] == 1 for h in hits.values())
        assert all(h.metadata["ctxret:kind"] == "turn" for h in hits.values())


def test_the_cli_json_shows_the_same_metadata(index):
    from ctxret.cli.render import search_json

    index.add_documents([{"id": "budget", "title": "Budget", "text": BUDGET, "metadata": dict(GIVEN)}])
    groups = index.search("When is the budget review?", k=1, thread_id="budget")
    (shown,) = search_json("q", groups, 1, None)["groups"][0]["hits"]
    assert shown["metadata"] == groups[0].hits[0].metadata and shown["header"].startswith("[Budget")


# -- items and views ------------------------------------------------------------------------------------------------
def test_an_items_hit_shows_its_fields_as_ctxrets(index):
    ItemStore(index).write([ItemWrite(("memories", "ana"), "dog", {"text": "Biscuit is a beagle."}, [("text", "x")])])
    ItemStore(index).write(
        [ItemWrite(("memories", "ana"), "cat", {"text": "Miso is a cat."}, [("text", "Miso is a cat.")])]
    )
    hits = [h for g in index.search("Which cat is Miso?", k=3, score_threshold=None) for h in g.hits]
    (cat,) = [h for h in hits if h.metadata.get("ctxret:item_key") == "cat"]
    assert cat.metadata["ctxret:kind"] == "item" and cat.metadata["ctxret:item_ns_0"] == "memories"
    assert not [k for k in cat.metadata if k in ITEM_FIELDS or k.startswith("item_ns_")]  # all under ctxret:
    _no_storage_names(cat.metadata)


def test_a_view_that_won_shows_its_kind_and_text_and_the_callers_key_of_that_name_stays_apart(hash_embedder):
    odd = "Which purple zeppelin carries the accordion orchestra?"

    def writer(passage, bodies):
        return [[odd] if "vaccinations" in b else [f"What about {b[:20]}?"] for b in bodies]

    with ContextualIndex(
        in_memory=True, embedder=hash_embedder, views=["questions"], view_writer=writer, collection="views-m"
    ) as ix:
        ix.add_messages(CHAT, thread_id="u1", metadata={"view_kind": "mine", "team": "home"})
        hit = ix.search(odd, k=1, thread_id="u1", lexical=False)[0].hits[0]
        assert "vaccinations" in hit.text and "view" in hit.scores
        assert (hit.metadata["view_kind"], hit.metadata["view_text"]) == ("questions", odd)
        assert hit.metadata["meta_view_kind"] == "mine" and hit.metadata["team"] == "home"  # the search's name wins
        plain = ix.search("When are the vaccinations?", k=1, thread_id="u1", views=False)[0].hits[0]
        assert plain.metadata["view_kind"] == "mine" and "view_text" not in plain.metadata


# -- a store written before ----------------------------------------------------------------------------------------
def _rewrite_as_before(folder) -> None:
    """Every record rewritten with plain chromadb as earlier versions stored them: no ``exact_patch``, no
    ``time_added``, the caller keys' list comma-joined, and a caller's ``thread_id`` kept aside (``meta_thread_id``)."""
    client = chromadb.PersistentClient(str(folder), settings=chromadb.config.Settings(anonymized_telemetry=False))
    col = client.get_collection("ctxret")
    got = col.get(include=["metadatas", "documents", "embeddings"])
    metas = []
    for meta in got["metadatas"]:
        meta = {k: v for k, v in meta.items() if k not in ("exact_patch", "time_added")}
        meta.update(
            meta_thread_id="u1", caller_keys=",".join(sorted([*meta["caller_keys"].split(","), "meta_thread_id"]))
        )
        metas.append(meta)
    col.delete(ids=got["ids"])  # new ids: the lexical file finds them missing and reads them from Chroma
    col.add(
        ids=[f"old-{i}" for i in got["ids"]], embeddings=got["embeddings"], documents=got["documents"], metadatas=metas
    )


def test_a_store_written_before_shows_the_same_names(tmp_path, hash_embedder):
    folder = tmp_path / "old"
    with ContextualIndex(Store.embedded(folder), embedder=hash_embedder) as ix:
        ix.add_documents([{"id": "budget", "title": "Budget", "text": BUDGET, "metadata": dict(GIVEN)}])
    _rewrite_as_before(folder)
    with ContextualIndex(Store.embedded(folder), embedder=hash_embedder) as ix:
        raw = [r["metadata"] for r in ix.store.records()]
        assert raw and all("exact_patch" not in m and m["meta_thread_id"] == "u1" for m in raw)  # as written before
        (hit,) = ix.search("When is the budget review?", k=1, where={"kind": "finance"})[0].hits
        assert {k: hit.metadata[k] for k in GIVEN} == GIVEN
        assert hit.metadata["thread_id"] == "budget" and hit.metadata["meta_thread_id"] == "u1"  # as stored then
        assert hit.metadata["ctxret:kind"] == "section" and hit.metadata["ctxret:header"].startswith("[Budget")
        assert not BOOKKEEPING_KEYS & set(hit.metadata) and "meta_kind" not in hit.metadata
        from langchain_ctxret import ContextualRetriever

        (doc,) = ContextualRetriever(index=ix, k=1, score_threshold=None).invoke(
            "When is the budget review?", where={"kind": "finance"}
        )
        assert hit.metadata == _adapter_view(doc.metadata, hit)


# -- any caller metadata round-trips ---------------------------------------------------------------------------------
_COLLIDING = sorted(
    (RESERVED_KEYS - SHARED_KEYS)
    | RETRIEVAL_KEYS
    | ITEM_FIELDS
    | {"meta_x", "meta_kind", "meta_meta_header", "score_x", "score_", "item_ns_0", "a,b", "[x", "conversation"}
)
_KEY = st.one_of(
    st.sampled_from(_COLLIDING),
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
        lambda k: not k.startswith(("$", "#", "chroma:", FIELD_PREFIX)) and k not in SHARED_KEYS
    ),
)
_VALUE = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20),
    st.integers(-(2**62), 2**62),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.booleans(),
    st.lists(st.integers(0, 9), max_size=3),
)
_META = st.dictionaries(_KEY, st.one_of(_VALUE, st.dictionaries(_KEY, _VALUE, max_size=2)), max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(meta=_META, shared=st.sampled_from([(), ("thread_id",), ("doc_id",), ("thread_id", "doc_id")]))
def test_any_callers_metadata_comes_back_by_the_callers_names(index, meta, shared):
    doc = f"d{uuid.uuid4().hex[:10]}"
    given_meta = {**meta, **dict.fromkeys(shared, doc)}  # the shared keys name the piece's own thread and document
    index.add_documents([{"id": doc, "text": BUDGET, "metadata": given_meta}])
    hits = index.search("budget review", k=3, thread_id=doc, score_threshold=None)[0].hits
    assert hits
    flat = flatten_metadata(given_meta)
    for hit in hits:
        assert {k: hit.metadata[k] for k in flat if k in hit.metadata} == flat
        assert hit.metadata["doc_id"] == doc and hit.metadata["ctxret:kind"] == "section"
        assert not BOOKKEEPING_KEYS & set(hit.metadata) - set(flat)  # a caller's own "caller_keys" is theirs
