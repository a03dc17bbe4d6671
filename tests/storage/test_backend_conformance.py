"""The vector-backend contract (``ctxret.storage.base.VectorBackend``): every backend gives the same answers.

Parametrized over embedded Chroma (a temp folder), a Chroma server (``chroma run``) and the in-process backend
(``ctxret.storage.inprocess``). A new backend joins ``BACKENDS`` and must pass all of it. The last tests run the
product's own index on the in-process backend and on Chroma and compare what they return.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from ctxret.errors import CtxretError, InputError
from ctxret.storage.base import DEFERRED, VectorBackend
from ctxret.storage.chroma import ChromaStore
from ctxret.storage.inprocess import InProcessBackend

BACKENDS = ["chroma", "server", "inprocess"]


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path):
    collection = f"c-{uuid.uuid4().hex[:10]}"
    if request.param == "chroma":
        store: VectorBackend = ChromaStore(tmp_path / "store", collection=collection)
    elif request.param == "server":
        server = request.getfixturevalue("chroma_server")
        store = ChromaStore(host=server.host, port=server.port, collection=collection)
    else:
        store = InProcessBackend(collection=collection)
    store.open({"model": "test", "dims": 3})
    yield store
    if request.param == "server":
        for name in store.names():
            if name.startswith(collection):
                store.drop(name)
    store.close()


def unit(*xs: float) -> list[float]:
    v = np.asarray(xs, dtype=np.float64)
    return (v / np.linalg.norm(v)).tolist()


#: Records with the metadata types the product stores (strings, ints, floats, booleans) and gaps (keys missing).
RECORDS = {
    "r1": ({"thread_id": "t1", "turn_index": 1, "score": 0.25, "done": True, "kind": "turn"}, [1.0, 0.0, 0.0]),
    "r2": ({"thread_id": "t1", "turn_index": 2, "score": 1.5, "done": False, "kind": "turn"}, [0.9, 0.1, 0.0]),
    "r3": ({"thread_id": "t2", "turn_index": 3, "kind": "section", "doc_id": "d1"}, [0.0, 1.0, 0.0]),
    "r4": ({"thread_id": "t2", "turn_index": -4, "score": 2.0, "kind": "section", "doc_id": "d2"}, [0.0, 0.7, 0.7]),
    "r5": ({"thread_id": "t3", "turn_index": 5, "done": True, "label": "ünïcode ✓"}, [-1.0, 0.0, 0.0]),
}


def fill(store: VectorBackend, name: str | None = None) -> None:
    ids = list(RECORDS)
    store.upsert(
        ids,
        np.asarray([RECORDS[i][1] for i in ids], np.float32),
        [f"doc {i}" for i in ids],
        [RECORDS[i][0] for i in ids],
        name=name,
    )


# -- writes, reads, round trip ------------------------------------------------------------------------------------
def test_upsert_round_trips_documents_metadata_types_and_vectors(backend):
    fill(backend)
    got = backend.get(list(RECORDS), include=("documents", "metadatas", "embeddings"))
    assert [r["id"] for r in got] == list(RECORDS)
    for rec in got:
        meta, vec = RECORDS[rec["id"]]
        assert rec["document"] == f"doc {rec['id']}"
        assert rec["metadata"] == meta
        for key, value in meta.items():  # the types survive: a bool stays a bool, an int an int
            assert type(rec["metadata"][key]) is type(value), key
        assert np.allclose(np.asarray(rec["embedding"], np.float64), vec, atol=1e-6)
    assert backend.count() == len(RECORDS)


def test_upsert_of_a_stored_id_merges_metadata_and_replaces_document_and_vector(backend):
    fill(backend)
    backend.upsert(["r1"], np.asarray([[0.0, 0.0, 1.0]], np.float32), ["new"], [{"extra": 7, "score": None}])
    (rec,) = backend.get(["r1"], include=("documents", "metadatas", "embeddings"))
    assert rec["document"] == "new"
    expected = {k: v for k, v in RECORDS["r1"][0].items() if k != "score"} | {"extra": 7}
    assert rec["metadata"] == expected  # kept keys stay, a None removes its key
    assert np.allclose(rec["embedding"], [0, 0, 1])
    assert backend.count() == len(RECORDS)
    top = backend.query(np.asarray([[0.0, 0.0, 1.0]], np.float32), 1)[0][0]
    assert top[0] == "r1" and top[2] == pytest.approx(1.0, abs=1e-5)


def test_a_none_value_is_not_stored_on_a_new_record(backend):
    backend.upsert(["n"], np.asarray([[1.0, 0, 0]], np.float32), ["d"], [{"a": 1, "b": None}])
    assert backend.get(["n"])[0]["metadata"] == {"a": 1}


def test_add_keeps_the_first_record_of_an_id(backend):
    backend.open_side("side-" + backend.collection_name, "claims")
    side = "side-" + backend.collection_name
    backend.add(["s1"], [[1.0]], None, [{"token": "first"}], name=side)
    backend.add(["s1", "s2"], [[1.0], [1.0]], None, [{"token": "second"}, {"token": "second"}], name=side)
    got = {r["id"]: r["metadata"]["token"] for r in backend.get(["s1", "s2"], include=("metadatas",), name=side)}
    assert got == {"s1": "first", "s2": "second"}
    assert backend.count(side) == 2 and backend.count() == 0  # the side collection only


def test_reads_come_in_the_order_first_written(backend):
    fill(backend)
    backend.upsert(["r2"], np.asarray([[0.0, 1.0, 0.0]], np.float32), ["again"], [{"thread_id": "t1"}])
    assert [r["id"] for r in backend.iter_records(None, include=())] == list(RECORDS)
    assert [r["id"] for r in backend.get(["r4", "r1", "r3", "r1"], include=())] == ["r1", "r3", "r4"]
    assert [r["id"] for r in backend.iter_records(None, include=(), limit=2)] == ["r1", "r2"]


def test_empty_answers(backend):
    assert backend.get(["nope"]) == []
    assert list(backend.iter_records({"thread_id": "nope"})) == []
    assert backend.query(np.asarray([[1.0, 0, 0]], np.float32), 3) == [[]]
    assert backend.count() == 0
    fill(backend)
    assert backend.get([]) == []
    assert backend.query(np.zeros((0, 3), np.float32), 3) == []
    assert backend.query(np.asarray([[1.0, 0, 0]], np.float32), 0) == [[]]
    assert backend.query(np.asarray([[1.0, 0, 0]], np.float32), 3, {"thread_id": "nope"}) == [[]]
    backend.upsert([], np.zeros((0, 3), np.float32), [], [])
    backend.delete_ids([])
    assert backend.count() == len(RECORDS)


# -- filters ------------------------------------------------------------------------------------------------------
WHERE = [
    ({"thread_id": "t1"}, {"r1", "r2"}),
    ({"thread_id": {"$eq": "t2"}}, {"r3", "r4"}),
    ({"thread_id": {"$ne": "t1"}}, {"r3", "r4", "r5"}),
    ({"turn_index": {"$gt": 2}}, {"r3", "r5"}),
    ({"turn_index": {"$gte": 2}}, {"r2", "r3", "r5"}),
    ({"turn_index": {"$lt": 1}}, {"r4"}),
    ({"turn_index": {"$lte": 1}}, {"r1", "r4"}),
    ({"score": {"$gt": 1}}, {"r2", "r4"}),  # a float field against a whole number
    ({"score": {"$lte": 1.5}}, {"r1", "r2"}),
    ({"score": 2}, {"r4"}),  # 2 equals 2.0
    ({"thread_id": {"$in": ["t1", "t3"]}}, {"r1", "r2", "r5"}),
    ({"thread_id": {"$nin": ["t1", "t3"]}}, {"r3", "r4"}),
    ({"turn_index": {"$in": [1, 5]}}, {"r1", "r5"}),
    ({"doc_id": {"$ne": "d1"}}, {"r1", "r2", "r4", "r5"}),  # $ne matches a record without the key
    ({"doc_id": {"$nin": ["d1", "d2"]}}, {"r1", "r2", "r5"}),  # so does $nin
    ({"score": {"$lt": 100}}, {"r1", "r2", "r4"}),  # the order operators never match a missing key
    ({"done": True}, {"r1", "r5"}),
    ({"done": {"$ne": True}}, {"r2", "r3", "r4"}),
    ({"done": 1}, set()),  # a boolean is not a number
    ({"turn_index": True}, set()),
    ({"label": "ünïcode ✓"}, {"r5"}),
    ({"$and": [{"thread_id": "t2"}, {"doc_id": {"$in": ["d2", "d9"]}}]}, {"r4"}),
    ({"$or": [{"kind": "section"}, {"done": True}]}, {"r1", "r3", "r4", "r5"}),
    ({"$and": [{"$or": [{"thread_id": "t1"}, {"thread_id": "t3"}]}, {"done": True}]}, {"r1", "r5"}),
    ({"$or": [{"thread_id": "nope"}, {"turn_index": {"$gt": 100}}]}, set()),
]


@pytest.mark.parametrize("where,expected", WHERE, ids=[str(w) for w, _ in WHERE])
def test_where_filters(backend, where, expected):
    fill(backend)
    assert {r["id"] for r in backend.iter_records(where, include=())} == expected
    assert {r["id"] for r in backend.get(list(RECORDS), include=(), where=where)} == expected
    rows = backend.query(np.asarray([[1.0, 0.0, 0.0]], np.float32), 10, where)[0]
    assert {r[0] for r in rows} == expected


def test_records_of_and_documents(backend):
    fill(backend)
    assert {r["id"] for r in backend.records_of("thread_id", ["t1", "t3", "none"])} == {"r1", "r2", "r5"}
    assert {r["id"] for r in backend.records_of("thread_id", ["t2"])} == {"r3", "r4"}
    docs = backend.document_records([("t2", "d1"), ("t2", "d2"), ("t1", "d1")])
    assert sorted((rid, key) for rid, key, _ in docs) == [("r3", ("t2", "d1")), ("r4", ("t2", "d2"))]
    assert set(backend.document_pieces([("t2", "d2")])) == {("t2", "d2")}


# -- deletes and counts -------------------------------------------------------------------------------------------
def test_deletes_and_counts(backend):
    fill(backend)
    backend.delete_ids(["r1", "unknown"])
    assert backend.count() == 4 and backend.get(["r1"]) == []
    backend.delete_where({"thread_id": "t2"})
    assert sorted(r["id"] for r in backend.iter_records(None, include=())) == ["r2", "r5"]
    backend.delete_where(None)
    assert backend.count() == 0
    fill(backend)  # the collection stays usable, ids can come back
    assert backend.count() == len(RECORDS)


# -- queries ------------------------------------------------------------------------------------------------------
def test_query_orders_by_cosine_and_cuts_at_k(backend):
    fill(backend)
    q = np.asarray([[1.0, 0.0, 0.0], unit(0.0, 1.0, 1.0)], np.float32)
    first, second = backend.query(q, 3)
    assert [r[0] for r in first] == ["r1", "r2", "r3"] or [r[0] for r in first] == ["r1", "r2", "r4"]
    assert [r[0] for r in first[:2]] == ["r1", "r2"]
    assert first[0][2] == pytest.approx(1.0, abs=1e-5)
    assert first[1][2] == pytest.approx(float(np.dot([1, 0, 0], unit(0.9, 0.1, 0))), abs=1e-5)
    assert [r[0] for r in second[:2]] == ["r4", "r3"]
    assert second[0][2] == pytest.approx(1.0, abs=1e-5)
    assert second[1][2] == pytest.approx(float(np.dot(unit(0, 1, 1), [0, 1, 0])), abs=1e-5)
    everything = backend.query(q[:1], 50)[0]
    assert [r[0] for r in everything][-1] == "r5" and len(everything) == len(RECORDS)
    assert everything[-1][2] == pytest.approx(-1.0, abs=1e-5)
    assert all(a[2] >= b[2] for a, b in zip(everything, everything[1:], strict=False))
    rid, doc, _, meta = everything[0]
    assert (rid, doc, meta) == ("r1", "doc r1", RECORDS["r1"][0])


def test_query_without_texts_gives_ids_and_cosines_only(backend):
    fill(backend)
    rows = backend.query(np.asarray([[1.0, 0.0, 0.0]], np.float32), 2, {"thread_id": "t1"}, texts=False)[0]
    assert [(r[0], r[1]) for r in rows] == [("r1", ""), ("r2", "")]
    assert all(r[3] is DEFERRED for r in rows)


# -- collections --------------------------------------------------------------------------------------------------
def test_collections_open_rename_drop(backend):
    name = backend.collection_name
    other = name + "-rebuild"
    assert backend.exists() and not backend.exists(other)
    assert backend.stored_config() == {"model": "test", "dims": 3}
    assert backend.stored_config(other) is None
    backend.open({"model": "other"})  # an existing collection keeps the config it was made with
    assert backend.stored_config() == {"model": "test", "dims": 3}
    backend.open({"model": "test", "dims": 3}, name=other)
    fill(backend, name=other)
    assert backend.count(other) == len(RECORDS) and backend.count() == 0
    assert {name, other} <= set(backend.names())
    backend.drop(name)
    backend.rename(other, name)
    assert not backend.exists(other) and backend.count() == len(RECORDS)
    assert backend.stored_config() == {"model": "test", "dims": 3}
    backend.drop(other)  # dropping what is not there is nothing
    with pytest.raises(CtxretError, match="not open"):
        backend.count(other)
    assert backend.drop_orphan_segments() >= 0


# -- bad input ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "ids,vectors,metas",
    [
        (["a"], [[1.0, 0.0]], [{"k": 1}]),  # the collection has 3 dimensions
        (["a", "a"], [[1.0, 0, 0], [1.0, 0, 0]], [{"k": 1}, {"k": 2}]),  # an id twice
        ([""], [[1.0, 0, 0]], [{"k": 1}]),  # an empty id
        (["a"], [[float("nan"), 0, 0]], [{"k": 1}]),  # a vector that is not finite
        (["a"], [[1.0, 0, 0]], [{"$k": 1}]),  # a reserved key
    ],
    ids=["dimensions", "duplicate-id", "empty-id", "nan-vector", "reserved-key"],
)
def test_a_refused_write_is_an_input_error_and_stores_nothing(backend, ids, vectors, metas):
    fill(backend)  # the dimensions are set
    with pytest.raises(InputError) as info:
        backend.upsert(ids, np.asarray(vectors, np.float32), ["d"] * len(ids), metas)
    assert getattr(info.value, "nothing_stored", False)
    assert backend.count() == len(RECORDS) and backend.get(["a"]) == []


def test_bad_filters_and_queries_are_errors(backend):
    fill(backend)
    with pytest.raises(CtxretError):
        list(backend.iter_records({"k": {"$nope": 1}}))
    with pytest.raises(CtxretError):
        backend.query(np.asarray([[1.0, 0.0]], np.float32), 2)
    with pytest.raises(InputError):
        backend.upsert(["a", "b"], np.asarray([[1.0, 0, 0]], np.float32), ["d", "d"], [{"k": 1}, {"k": 2}])


# -- the product on the in-process backend ------------------------------------------------------------------------
def _answers(index, queries):
    """What the index gives for each query: unscoped, thread-scoped, and with a filter."""
    out = []
    for q in queries:
        for kwargs in ({}, {"thread_id": "garden"}, {"where": {"ctxret:kind": "section"}}):
            groups = index.search(q, k=3, **kwargs)
            out.append([[(h.id, round(h.scores.get("cosine", 0.0), 4)) for h in g.hits] for g in groups])
    return out


def _run(index):
    from sample_threads import FLIGHT_AND_VET, GARDEN

    queries = [
        "What is wrong with the tomatoes? And when is the dentist?",
        "When does my flight to Lisbon leave?",
        "How do I water the plants?",
    ]
    steps = []
    index.add_messages(GARDEN, thread_id="garden")
    index.add_messages(FLIGHT_AND_VET, thread_id="travel")
    index.add_documents([{"id": "care", "title": "Plant care", "text": "Water tomatoes at the base.\n\nFeed weekly."}])
    steps.append((index.stats()["pieces"], _answers(index, queries)))
    # an update: the document edited under its id, a reply added to the thread
    index.add_documents([{"id": "care", "title": "Plant care", "text": "Water tomatoes in the morning at the base."}])
    index.add_messages([{"role": "user", "content": "The blight spread to the potatoes too."}], thread_id="garden")
    steps.append((index.stats()["pieces"], _answers(index, queries)))
    assert index.delete(thread_id="travel") > 0
    steps.append((index.stats()["pieces"], _answers(index, queries)))
    return steps


@pytest.mark.parametrize("lexical", [True, False], ids=["hybrid", "dense"])
def test_the_index_on_the_in_process_backend_answers_as_on_chroma(tmp_path, local_embedder, lexical):
    from ctxret import ContextualIndex, Store

    on_chroma = ContextualIndex(Store.embedded(tmp_path / "chroma", lexical=lexical), embedder=local_embedder)
    in_process = ContextualIndex(Store.memory(backend="inprocess", lexical=lexical), embedder=local_embedder)
    try:
        assert type(in_process.store.backend).__name__ == "InProcessBackend"
        expected, got = _run(on_chroma), _run(in_process)
    finally:
        on_chroma.close()
        in_process.close()
    assert got == expected
    assert expected[0][0] > expected[2][0] > 0  # the delete removed pieces
    assert any(any(group) for group in expected[0][1])  # the searches found something


def test_in_process_backend_is_chosen_only_for_memory():
    from ctxret import ContextualIndex, Store

    with pytest.raises(InputError, match="in_memory=True"):
        ContextualIndex("./nowhere", backend="inprocess")
    with pytest.raises(InputError, match="backend must be one of"):
        Store.memory(backend="qdrant")
    assert Store.memory().backend == "chroma"  # the default is unchanged
    assert Store.of(in_memory=True, backend="inprocess") == Store.memory(backend="inprocess")


def test_the_shorthand_opens_the_in_process_backend(local_embedder):
    from ctxret import ContextualIndex

    index = ContextualIndex(in_memory=True, backend="inprocess", embedder=local_embedder)
    try:
        index.add_messages([{"role": "user", "content": "The heron came back to the pond."}], thread_id="t")
        assert type(index.store.backend).__name__ == "InProcessBackend"
        assert [h.metadata.get("thread_id") for g in index.search("heron at the pond", k=1) for h in g.hits] == ["t"]
        assert index.stats()["pieces"] == 1
    finally:
        index.close()
