"""Hostile input through the Python API and the CLI: a ctxret error naming the problem, or correct
handling — never another exception, never a half-written store.

Hypothesis generates messages, documents, metadata and search arguments with wrong types, deep
nesting, lone surrogates, control characters, NaN and huge numbers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from ctxret import CallableError, ContextualIndex, CtxretError, EmbeddingError, InputError, StoreError
from ctxret.agent_memory import AgentMemory
from ctxret.ingest import turns_from_messages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliability.bow_embedder import SmallEmbedder

pytestmark = pytest.mark.slow

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())  # surrogates too
TEXT = st.text(alphabet=ANY_CHAR, max_size=40)
SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | TEXT
KEY = st.sampled_from(["a", "n", "kind", "thread_id", "$a", "#a", "chroma:x"]) | TEXT
#: Where filters from the pieces of Chroma's grammar, well and badly put together.
WHERE_ANY = st.recursive(
    st.dictionaries(
        KEY,
        SCALARS
        | st.dictionaries(
            st.sampled_from(["$eq", "$ne", "$gt", "$in", "$nin", "$x"]),
            SCALARS | st.lists(SCALARS, max_size=3),
            max_size=2,
        ),
        max_size=2,
    ),
    lambda kids: st.dictionaries(st.sampled_from(["$and", "$or", "a"]), st.lists(kids, max_size=3) | kids, max_size=1),
    max_leaves=6,
)
VALUES = st.recursive(
    SCALARS, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3), max_leaves=12
)
ROLES = st.sampled_from(["user", "assistant", "tool", "system", "function", "bogus", "", 5, None])
MESSAGE = (
    st.fixed_dictionaries(
        {"role": ROLES, "content": VALUES},
        optional={"tool_calls": VALUES, "tool_call_id": VALUES, "name": VALUES, "timestamp": VALUES},
    )
    | VALUES
)
THREAD_ID = TEXT | st.integers() | st.none() | st.lists(TEXT, max_size=2)
FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the hostile texts go through the real tokenizer


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages([{"role": "user", "content": "A safe first memory about the garden."}], thread_id="safe")

    return fill


def _ids(index):
    return sorted(r["id"] for r in index.store.records(include=()))


@FAST
@given(messages=st.lists(MESSAGE, max_size=4) | VALUES, thread_id=THREAD_ID)
def test_add_messages_either_works_or_raises_a_ctxret_error(index, messages, thread_id):
    before = _ids(index)
    try:
        index.add_messages(messages, thread_id=thread_id)
    except CtxretError as e:
        assert not isinstance(e, StoreError), e  # the caller's input is never the store's fault
        assert str(e) and _ids(index) == before  # nothing half-written
    assert sorted(index.lexical_index.ids()) == _ids(index)
    assert not index.lexical_index.journal.pending


@FAST
@given(
    docs=st.lists(
        VALUES | st.fixed_dictionaries({"text": VALUES}, optional={"id": VALUES, "title": VALUES, "metadata": VALUES}),
        max_size=3,
    ),
    thread_id=THREAD_ID,
)
def test_add_documents_either_works_or_raises_a_ctxret_error(index, docs, thread_id):
    before = _ids(index)
    try:
        index.add_documents(docs, thread_id=thread_id)
    except CtxretError as e:
        assert not isinstance(e, StoreError), e
        assert str(e) and _ids(index) == before
    assert not index.lexical_index.journal.pending


@FAST
@given(message=VALUES, thread_id=THREAD_ID, k=VALUES, threshold=VALUES, where=VALUES | WHERE_ANY)
def test_search_either_works_or_raises_a_ctxret_error(index, message, thread_id, k, threshold, where):
    try:
        groups = index.search(message, k=k, score_threshold=threshold, thread_id=thread_id, where=where)
    except CtxretError as e:
        assert not isinstance(e, StoreError), e
        assert str(e)
    else:
        assert all(math.isfinite(h.score) for g in groups for h in g.hits)


def test_the_reported_cases(index):
    """The fault-injection run's list, one by one."""
    deep: object = "leaf"
    for _ in range(3000):
        deep = [deep]
    cases = [
        lambda: index.add_messages([{"role": "user", "content": deep}], thread_id="t"),
        lambda: index.add_messages([{"role": "assistant", "content": "x", "tool_calls": 5}], thread_id="t"),
        lambda: index.add_messages([{"role": "user", "content": "hi"}], thread_id="bad\udc80id"),
        lambda: index.add_messages(None, thread_id="t"),
        lambda: index.add_documents([{"text": "x", "id": 5}]),
        lambda: index.add_documents([{"text": "x", "title": ["a"]}]),
        lambda: index.search("garden", score_threshold="x"),
        lambda: index.search("garden", thread_id=5),
        lambda: index.search("garden", thread_id="bad\udc80id"),
        lambda: index.add_messages([{"role": "user", "content": "hi"}], thread_id="t", metadata={"a": deep}),
    ]
    before = _ids(index)
    for i, case in enumerate(cases):
        with pytest.raises(InputError) as err:
            case()
        assert len(str(err.value)) > 20, (i, err.value)
    assert _ids(index) == before


def test_limits_have_clear_errors_and_overrides(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "limits", embedder=local_embedder, max_turn_bytes=10_000)
    with pytest.raises(InputError, match="max_turn_bytes"):
        index.add_messages([{"role": "user", "content": "word " * 5_000}], thread_id="t")
    assert index.store.count() == 0
    with pytest.raises(InputError, match="max_message_bytes"):
        index.search("word " * 20_000)
    assert index.search("word " * 20_000, max_message_bytes=None, k=1) is not None


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(lines=st.lists(st.one_of(MESSAGE.map(lambda m: json.dumps(m, default=str)), TEXT), min_size=1, max_size=4))
def test_cli_index_reports_a_bad_file_and_writes_nothing(tmp_path_factory, lines):
    folder = tmp_path_factory.mktemp("cli")
    good = folder / "a-good.jsonl"
    good.write_text(json.dumps({"role": "user", "content": "a good file comes first"}) + "\n", encoding="utf-8")
    bad = folder / "b-hostile.jsonl"
    bad.write_text(
        "\n".join(line.encode("utf-8", "surrogatepass").decode("utf-8", "replace") for line in lines), encoding="utf-8"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "ctxret", "index", str(good), str(bad), "--store", str(folder / "s")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1), proc.stderr
    if proc.returncode == 1:
        assert "error:" in proc.stderr
        assert "pieces" not in proc.stdout  # nothing was written, the good file included


# -- query vectors are checked like stored ones ----------------------------------------------------------------
class Misbehaving(SmallEmbedder):
    """Answers wrongly in one way (``mode``) for the texts ``when`` selects (default: every call)."""

    def __init__(self, mode: str, when=lambda texts: True) -> None:
        super().__init__()
        self.mode, self.when = mode, when

    def embed(self, texts):
        good = super().embed(texts)
        if not self.when(texts):
            return good
        if self.mode == "dims":
            return good[:, :-1]
        if self.mode == "fewer":
            return good[:-1]
        if self.mode == "more":
            return np.concatenate([good, good[:1]])
        if self.mode in ("nan", "inf"):
            good[-1, 3] = np.nan if self.mode == "nan" else np.inf
            return good
        if self.mode == "flat":
            return good.reshape(-1)
        if self.mode == "ragged":
            return [list(good[0]), list(good[0, :-2]), *(list(row) for row in good[1:])]
        raise AssertionError(self.mode)


BAD_MODES = ["dims", "fewer", "more", "nan", "inf", "flat", "ragged"]
ONE_PART = "Where are the alpha launch codes?"
TWO_PARTS = "Where are the alpha launch codes? Also, what did bravo say about the garden?"


@pytest.fixture(scope="module")
def small_index():
    index = ContextualIndex(in_memory=True, embedder=SmallEmbedder(), progress=False)
    index.add_messages([{"role": "user", "content": "the alpha launch codes are in the blue safe"}], thread_id="a")
    index.add_messages([{"role": "user", "content": "bravo said the garden needs water"}], thread_id="b")
    yield index
    index.close()


def _check_refused(err: pytest.ExceptionInfo[EmbeddingError], mode: str) -> None:
    message = str(err.value)
    assert "small-bow-16" in message, message  # names the embedder
    fixes = {"dims": "returned 15-dimensional vectors", "nan": "NaN", "inf": "NaN or infinite"}
    fix = fixes.get(mode, "one 16-dimensional vector per text")
    assert fix in message, message


@pytest.mark.parametrize("message", [ONE_PART, TWO_PARTS], ids=["one-part", "two-parts"])
@pytest.mark.parametrize("mode", BAD_MODES)
def test_a_bad_query_embedding_is_an_embedding_error(small_index, monkeypatch, mode, message):
    """Raw numpy ValueError / IndexError before, or worse: too few vectors for two parts and the whole
    message were taken as two unblended part vectors, and NaN ranked as a score."""
    monkeypatch.setattr(small_index, "embedder", Misbehaving(mode))
    with pytest.raises(EmbeddingError) as err:
        small_index.search(message, score_threshold=None)
    _check_refused(err, mode)
    with pytest.raises(EmbeddingError) as err:
        asyncio.run(small_index.asearch(message, score_threshold=None))
    _check_refused(err, mode)
    with pytest.raises(EmbeddingError):
        small_index.search(message, score_threshold=None, thread_id="a", deadline_ms=60_000)  # the staged path


@pytest.mark.parametrize("mode", ["dims", "fewer", "nan"])
def test_a_bad_hyde_answer_embedding_is_an_embedding_error(small_index, monkeypatch, mode):
    bad = Misbehaving(mode, when=lambda texts: any("hypothetical" in t for t in texts))
    monkeypatch.setattr(small_index, "embedder", bad)
    hyde = lambda part: "a hypothetical answer about launch codes"  # noqa: E731
    with pytest.raises(EmbeddingError) as err:
        small_index.search(TWO_PARTS, score_threshold=None, hyde=hyde)
    _check_refused(err, mode)
    with pytest.raises(EmbeddingError):
        asyncio.run(small_index.asearch(TWO_PARTS, score_threshold=None, hyde=hyde))


def test_a_bad_embedding_at_write_time_still_writes_nothing(small_index, monkeypatch):
    before = sorted(r["id"] for r in small_index.store.records(include=()))
    for mode in BAD_MODES:
        monkeypatch.setattr(small_index, "embedder", Misbehaving(mode))
        with pytest.raises(EmbeddingError, match="small-bow-16"):
            small_index.add_messages([{"role": "user", "content": f"a new turn {mode}"}], thread_id="c")
    assert sorted(r["id"] for r in small_index.store.records(include=())) == before


# -- every error by its cause -------------------------------------------------------------------------------------
#: Malformed where filters, each with what its InputError must name. Before, 22 of these 34 (unscoped; more
#: scoped) raised StoreError "check that the store folder is on a writable disk", one an AttributeError, and
#: one was accepted (an integer Chroma cannot hold).
BAD_WHERE = [
    ({"a": 1, "b": 2}, "exactly one"),
    ({"$and": [{"a": 1}]}, "'$and'"),
    ({"$and": []}, "'$and'"),
    ({"$or": {"a": 1}}, "'$or'"),
    ({"$and": [{"a": 1}, 5]}, "['$and'][1]"),
    ({"a": {"$foo": 1}}, "'$foo'"),
    ({"a": {"$gt": "x"}}, "'$gt'"),
    ({"a": {"$in": []}}, "'$in'"),
    ({"a": {"$in": 5}}, "'$in'"),
    ({"a": {"$in": [1, "x"]}}, "one type"),
    ({"a": None}, "['a']"),
    ({"a": [1, 2]}, "$in"),
    ({"a": {"$eq": 1, "$ne": 2}}, "2 operators"),
    ({"a": {}}, "['a']"),
    ({"$not": {"a": 1}}, "'$not'"),
    ({"$contains": "x"}, "'$contains'"),
    ({5: 1}, "5"),
    ({"a": {"$eq": None}}, "'$eq'"),
    ({"a": {"$eq": [1]}}, "'$eq'"),
    ({"a": {"$eq": {"b": 1}}}, "'$eq'"),
    ({"a": float("nan")}, "nan"),
    ({"a": 2**80}, "64-bit"),
    ({"a": {"$gt": True}}, "'$gt'"),
    ({"a": "\udc80"}, "surrogate"),
    ({"\udc80": 1}, "surrogate"),
    ({"a": {"$in": [[1]]}}, "['$in'][0]"),
    ({"a": {"$nin": [None]}}, "'$nin'"),
    ({"$or": [{"a": 1}, {}]}, "['$or'][1]"),
    ({"a": {"$contains": [1]}}, "'$contains'"),
    ({"$in": [1, 2]}, "'$in'"),
    ({"a": b"x"}, "['a']"),
    ({"a": {"$lt": float("inf")}}, "inf"),
    ({"a": {"$gte": None}}, "'$gte'"),
    ({"#document": {"$contains": 5}}, "#document"),
]


@pytest.mark.parametrize(("where", "names"), BAD_WHERE, ids=[repr(w)[:40] for w, _ in BAD_WHERE])
def test_a_malformed_where_is_an_input_error_naming_the_key_or_operator(small_index, where, names):
    for call in (
        lambda: small_index.search("launch codes", where=where),
        lambda: small_index.search("launch codes", where=where, thread_id="a"),  # served from memory
        lambda: asyncio.run(small_index.asearch("launch codes", where=where, thread_id=["a", "b"])),
        lambda: small_index.delete(where=where),
    ):
        with pytest.raises(InputError) as err:
            call()
        assert names in str(err.value), str(err.value)
    assert small_index.store.count() == 2


def test_where_through_the_adapters_is_checked_the_same_way(small_index):
    from langchain_ctxret import ContextualRetriever as LCRetriever
    from langchain_ctxret import ContextualVectorStore
    from llamaindex_ctxret import ContextualRetriever as LIRetriever

    where = {"a": {"$in": [1, "x"]}}
    with pytest.raises(InputError, match="one type"):
        LCRetriever(index=small_index, where=where).invoke("launch codes")
    with pytest.raises(InputError, match="one type"):
        LCRetriever(index=small_index, search_kwargs={"filter": where}).invoke("launch codes")
    with pytest.raises(InputError, match="one type"):
        ContextualVectorStore(index=small_index).similarity_search("launch codes", filter=where)
    with pytest.raises(InputError, match="one type"):
        LIRetriever(index=small_index, where=where).retrieve("launch codes")


WHERE_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64)
    | st.floats()
    | st.text(max_size=3)
    | st.binary(max_size=2)
    | st.lists(st.integers(0, 3) | st.text(max_size=2) | st.booleans() | st.floats(0, 1), max_size=3)
)
OPS = st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$contains", "$not_contains", "$x"])
KEYS = st.sampled_from(["a", "b", "#document", "$and", "$or", "$in", "", "\udc80"]) | st.integers(0, 2)
WHERE = st.recursive(
    st.dictionaries(KEYS, WHERE_VALUES | st.dictionaries(OPS, WHERE_VALUES, max_size=2), min_size=0, max_size=2),
    lambda kids: (
        st.dictionaries(st.sampled_from(["$and", "$or"]), st.lists(kids, max_size=3), min_size=1, max_size=1)
        | st.dictionaries(KEYS, kids, min_size=1, max_size=1)
    ),
    max_leaves=6,
)
_TEXT_OK = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=3)
_NUMBER = st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
_SCALAR = st.booleans() | _NUMBER | _TEXT_OK
_FIELD = st.sampled_from(["a", "b", "n"])
#: Filters within Chroma's grammar (so that the agreement is also tested on filters both take).
VALID_WHERE = st.recursive(
    st.dictionaries(_FIELD, _SCALAR, min_size=1, max_size=1)
    | st.builds(lambda k, op, v: {k: {op: v}}, _FIELD, st.sampled_from(["$eq", "$ne", "$contains"]), _SCALAR)
    | st.builds(lambda k, op, v: {k: {op: v}}, _FIELD, st.sampled_from(["$gt", "$gte", "$lt", "$lte"]), _NUMBER)
    | st.builds(
        lambda k, op, v: {k: {op: v}},
        _FIELD,
        st.sampled_from(["$in", "$nin"]),
        st.lists(st.booleans(), min_size=1)
        | st.lists(st.integers(-5, 5), min_size=1)
        | st.lists(st.floats(-1, 1), min_size=1)
        | st.lists(_TEXT_OK, min_size=1),
    )
    | st.builds(lambda op, v: {"#document": {op: v}}, st.sampled_from(["$contains", "$not_contains"]), _TEXT_OK),
    lambda kids: st.builds(
        lambda op, v: {op: v}, st.sampled_from(["$and", "$or"]), st.lists(kids, min_size=2, max_size=3)
    ),
    max_leaves=5,
)
#: Where ctxret is stricter than Chroma 1.5, on purpose: an integer past 64 bits (Chroma takes 2**64 but
#: refuses 2**63, and stores neither), and '#document' compared to a number or boolean (taken, never matches;
#: compared to a string it is refused).
STRICTER = re.compile(r"64-bit integers|Chroma filters the document text with")


@settings(max_examples=400, deadline=None)
@given(where=VALID_WHERE | WHERE)
def test_check_where_accepts_exactly_what_chroma_accepts(chroma_probe, where):
    """The property behind the table above: a filter ctxret lets through, Chroma takes (no store error can come of
    a caller's filter); one ctxret refuses, Chroma refuses too (nothing valid is turned away), but for STRICTER."""
    from ctxret.storage.where import check_where

    try:
        checked = check_where(where)
    except InputError as e:
        ours: InputError | None = e
    else:
        ours = None
    try:
        chroma_probe.get(where=where, limit=1)
        theirs = None
    except Exception as e:  # noqa: BLE001  # any refusal of Chroma's
        theirs = e
    if ours is None:
        assert theirs is None, (where, theirs)
        chroma_probe.get(where=checked, limit=1)  # what the stores get
    elif theirs is None:
        assert STRICTER.search(str(ours)), (where, ours)


@pytest.fixture(scope="module")
def chroma_probe():
    from chromadb.config import Settings as ChromaSettings
    from ctxret.storage.chroma import memory_client

    client = memory_client(ChromaSettings(anonymized_telemetry=False))
    col = client.create_collection("probe", embedding_function=None)
    col.add(ids=["x"], embeddings=np.ones((1, 4), np.float32), documents=["d"], metadatas=[{"a": 1}])
    yield col
    client.close()


@pytest.mark.parametrize(
    ("metadata", "names"),
    [
        ({"k": "bad\udc80"}, "'k'"),
        ({"k\udc80": "v"}, "surrogate"),
        ({"k": ["x\udc80"]}, "'k'"),
        ({"k": 2**80}, "64-bit"),
        ({"k": -(2**63) - 1}, "64-bit"),
        ({"k": np.float64("nan")}, "'k'"),
        ({"$k": 1}, "'$k'"),
        ({"#k": 1}, "'#k'"),
        ({"#a": {"b": 1}}, "'#a'"),
        ({"chroma:document": "x"}, "chroma:"),
    ],
)
def test_metadata_chroma_cannot_hold_is_an_input_error_naming_the_key(small_index, metadata, names):
    """A lone surrogate was a StoreError ("check the disk"), 2**80 came back as a float, '$k' and '#k' were
    refused by Chroma after the write was announced."""
    before = sorted(r["id"] for r in small_index.store.records(include=()))
    for call in (
        lambda: small_index.add_messages([{"role": "user", "content": "new words"}], thread_id="m", metadata=metadata),
        lambda: small_index.add_documents([{"text": "new words", "id": "d", "metadata": metadata}]),
    ):
        with pytest.raises(InputError) as err:
            call()
        assert names in str(err.value), str(err.value)
    assert sorted(r["id"] for r in small_index.store.records(include=())) == before
    assert not small_index.lexical_index.journal.pending


def test_numpy_metadata_values_are_stored_as_numbers(small_index):
    small_index.add_messages(
        [{"role": "user", "content": "numpy valued"}], thread_id="np", metadata={"n": np.int64(3), "x": np.float32(0.5)}
    )
    (meta,) = [r["metadata"] for r in small_index.store.records() if r["metadata"]["thread_id"] == "np"]
    assert (meta["n"], meta["x"]) == (3, 0.5) and type(meta["n"]) is int
    small_index.delete(thread_id="np")


def test_a_write_chroma_refuses_clears_its_announcement(small_index):
    """The refused write left the lexical file's pending marker until reopen, and every thread-scoped search
    then read its thread through Chroma's filter (23.4 s instead of 1.0 s for 10,000 threads)."""
    store = small_index.store
    before = sorted(store.lexical.ids())
    metas = [{"thread_id": "r", "turn_id": "r#1", "parent_id": "r#1", "body": "x"}]
    with pytest.raises(InputError, match="Chroma refused to write pieces.*dimension"):  # a real refusal: wrong size
        store.write(["refused-1"], np.ones((1, 5), np.float32), ["x"], metas)
    assert not store.lexical.journal.pending
    assert sorted(store.lexical.ids()) == before and store.count() == 2


def test_an_index_used_after_close_says_it_is_closed():
    from ctxret import ClosedError

    from langchain_ctxret import ContextualRetriever as LCRetriever

    index = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
    index.add_messages([{"role": "user", "content": "before closing"}], thread_id="t")
    index.search("before", thread_id="t")  # the thread is in the cache now
    retriever = LCRetriever(index=index)
    index.close()
    index.close()  # closing again is fine
    calls = [
        lambda: index.search("before", thread_id="t"),
        lambda: index.search("before"),
        lambda: asyncio.run(index.asearch("before")),
        lambda: index.add_messages([{"role": "user", "content": "x"}]),
        lambda: index.add_documents(["x"]),
        lambda: index.delete(thread_id="t"),
        index.clear,
        index.stats,
        index.sync_lexical,
        index.reindex,
        lambda: index.lexical_index,
        lambda: retriever.invoke("before"),
    ]
    for call in calls:
        with pytest.raises(ClosedError, match="is closed"):
            call()


@pytest.mark.parametrize("first_turn", [-1, 0, float("nan"), True, 1.5, "2", 2**80])
def test_a_bad_first_turn_is_refused(small_index, first_turn):
    """-1, NaN and True were stored as "Turn -1", "Turn nan", "Turn True". (``None`` is the default: append.)"""
    with pytest.raises(InputError, match="first_turn"):
        small_index.add_messages([{"role": "user", "content": "x"}], thread_id="ft", first_turn=first_turn)
    assert not small_index.store.has_thread("ft")


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_include_system_must_be_a_bool(small_index, value):
    with pytest.raises(InputError, match="include_system"):
        small_index.add_messages([{"role": "system", "content": "x"}], thread_id="s", include_system=value)


@pytest.mark.parametrize("metadata", [["a"], "a=1", 5, ("a", 1)])
def test_metadata_that_is_not_a_dict_is_refused(small_index, metadata):
    """``metadata=['a']`` raised a raw ValueError from dict()."""
    for call in (
        lambda: small_index.add_messages([{"role": "user", "content": "x"}], thread_id="md", metadata=metadata),
        lambda: small_index.add_documents(["x"], metadata=metadata),
        lambda: small_index.add_turns(turns_from_messages([{"role": "user", "content": "x"}], "md"), metadata=metadata),
    ):
        with pytest.raises(InputError, match="metadata must be a dict"):
            call()


@pytest.mark.parametrize("documents", [None, 5, b"text", 1.5])
def test_documents_that_are_not_documents_are_refused(small_index, documents):
    """``add_documents(None)`` raised a raw TypeError."""
    with pytest.raises(InputError, match="documents must be"):
        small_index.add_documents(documents)


@pytest.mark.parametrize("thread", ["", "   "])
def test_an_empty_thread_id_is_refused_everywhere(small_index, thread):
    """``add_documents(..., thread_id='')`` silently stored the document under its own id."""
    from langchain_core.documents import Document as LCDocument
    from llama_index.core import Document as LIDocument

    from langchain_ctxret import ContextualRetriever as LCRetriever
    from llamaindex_ctxret import ContextualNodeParser

    for call in (
        lambda: small_index.add_documents(["x"], thread_id=thread),
        lambda: small_index.add_messages([{"role": "user", "content": "x"}], thread_id=thread),
        lambda: small_index.search("x", thread_id=thread),
        lambda: small_index.delete(thread_id=thread),
        lambda: LCRetriever(index=small_index).add_documents([LCDocument(page_content="x")], thread_id=thread),
        lambda: ContextualNodeParser(index=small_index).get_nodes_from_documents(
            [LIDocument(text="x", metadata={"thread_id": thread})]
        ),
    ):
        with pytest.raises(InputError, match="non-empty"):
            call()
    assert small_index.store.count() == 2


# -- the other gaps a sweep of every entry point found (each raised a raw error or was silently accepted) ----------
@pytest.mark.parametrize(
    ("kwargs", "names"),
    [
        ({"in_memory": "yes"}, "in_memory"),
        ({"in_memory": 1}, "in_memory"),
        ({"progress": "yes"}, "progress"),
        ({"max_turn_bytes": -1}, "max_turn_bytes"),
        ({"max_turn_bytes": "big"}, "max_turn_bytes"),
        ({"settings": {"k": 3}}, "SearchSettings"),
        ({"lexical_path": True}, "lexical_path"),
        ({"lexical_path": ""}, "lexical_path"),
        ({"client": "not a client"}, "Chroma client"),
        ({"host": 5}, "host"),
        ({"host": ""}, "host"),
        ({"host": "127.0.0.1", "port": "8000"}, "port"),
        ({"host": "127.0.0.1", "port": 70_000}, "port"),
        ({"host": "127.0.0.1", "ssl": "yes"}, "ssl"),
        ({"host": "127.0.0.1", "headers": {"x": 1}}, "headers"),
        ({"path": 5}, "path"),
        ({"piece_bytes": 2**80}, "piece_bytes"),
    ],
)
def test_bad_index_arguments_are_input_errors(kwargs, names):
    """Before: ``in_memory='yes'`` and ``progress='yes'`` were taken as true, ``lexical_path=True`` made a file named
    'True', ``settings={...}`` raised AttributeError, a bad client, host or port a StoreError ("check that the Chroma
    server is running"), ``piece_bytes=2**80`` was recorded."""
    kwargs = {"embedder": SmallEmbedder(), **kwargs}
    if not {"host", "client", "path"} & set(kwargs):
        kwargs.setdefault("in_memory", True)
    with pytest.raises(InputError, match=names):
        ContextualIndex(**kwargs)


def test_a_bad_header_value_is_not_echoed():
    with pytest.raises(InputError) as err:
        ContextualIndex(host="127.0.0.1", headers={"Authorization": 12345}, embedder=SmallEmbedder())
    assert "12345" not in str(err.value)


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"k": 2**80}, "k "),
        ({"candidates": 2**80}, "candidates"),
        ({"mmr": True, "fetch_k": 2**80}, "fetch_k"),
        ({"deadline_ms": 2**80}, "deadline_ms"),
        ({"max_message_bytes": ""}, "max_message_bytes"),
        ({"settings": 0}, "SearchSettings"),
        ({"settings": ""}, "SearchSettings"),
    ],
)
def test_search_options_past_what_the_store_takes_are_input_errors(small_index, options, names):
    """k or candidates of 2**80 were a StoreError (Chroma's OverflowError), deadline_ms an OverflowError, and
    ``settings=0`` or ``max_message_bytes=''`` were taken as the defaults."""
    with pytest.raises(InputError, match=names):
        small_index.search("launch codes", **options)


def test_the_helper_methods_check_their_arguments(small_index):
    turn = turns_from_messages([{"role": "user", "content": "hi"}], "h")[0]
    for call, names in (
        (lambda: small_index.query_vectors("a. b?", max_parts="two"), "max_parts"),
        (lambda: small_index.query_vectors("a. b?", split="no"), "split"),
        (lambda: small_index.fit_pieces(turn, max_bytes=float("nan")), "piece_bytes"),
        (lambda: small_index.fit_pieces(turn, max_bytes="600"), "piece_bytes"),
        (lambda: small_index.add_turns(None), "list of Turns"),
        (lambda: small_index.add_turns("turns"), "list of Turns"),
    ):
        with pytest.raises(InputError, match=names):
            call()


def test_the_adapters_refuse_what_is_not_a_list_of_their_items(small_index):
    from langchain_core.documents import Document as LCDocument

    from langchain_ctxret import ContextualRetriever as LCRetriever
    from langchain_ctxret import ContextualVectorStore
    from llamaindex_ctxret import ContextualStoreIndex

    retriever, store = LCRetriever(index=small_index), ContextualVectorStore(index=small_index)
    for call in (
        lambda: retriever.add_documents(None),
        lambda: retriever.add_documents([LCDocument(page_content="x")], ids=5),
        lambda: retriever.add_messages(None),
        lambda: retriever.delete(5),
        lambda: store.add_texts(None),
        lambda: store.add_texts([None]),
        lambda: store.add_texts(["a"], metadatas=5),
        lambda: store.add_documents(None),
        lambda: store.add_documents([None]),
        lambda: store.add_documents(["text"]),
        lambda: store.delete(5),
        lambda: store.get_by_ids(None),
        lambda: ContextualStoreIndex(index=small_index).insert_documents(None),
    ):
        with pytest.raises(InputError):
            call()
    assert small_index.store.count() == 2


# -- names, sizes, special files and user callables (issue: memory you can trust) ---------------------------------
SURROGATE = "x\udc80y"


def test_a_lone_surrogate_wherever_a_name_enters_is_an_input_error_naming_it(small_index):
    from langchain_ctxret import CtxretStore

    ix, store = small_index, CtxretStore(small_index)
    hi = {"role": "user", "content": "hi"}
    call = {"id": SURROGATE, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    cases = {
        "thread id": lambda: ix.add_messages([hi], thread_id=SURROGATE),  # was: "Invalid where clause"
        "message 0.name": lambda: ix.add_messages([{**hi, "name": SURROGATE}], thread_id="s"),  # was: a disk problem
        "message 0.id": lambda: ix.add_messages([{**hi, "id": SURROGATE}], thread_id="s"),
        "tool_calls[0].id": lambda: ix.add_messages([{"role": "assistant", "tool_calls": [call]}], thread_id="s"),
        "'title'": lambda: ix.add_documents([{"text": "x", "title": SURROGATE}]),
        "'id'": lambda: ix.add_documents([{"text": "x", "id": SURROGATE}]),
        "metadata 'k'": lambda: ix.add_documents([{"text": "x", "metadata": {"k": SURROGATE}}]),
        "metadata key": lambda: ix.add_messages([hi], thread_id="s", metadata={SURROGATE: 1}),
        "namespace label 0": lambda: store.put((SURROGATE,), "k", {"text": "x"}),
        "item key": lambda: store.put(("ns",), SURROGATE, {"text": "x"}),
        "the value": lambda: store.put(("ns",), "k", {"text": SURROGATE}),
        "search thread id": lambda: ix.search("garden", thread_id=SURROGATE),
    }
    before = _ids(ix)
    for what, case in cases.items():
        with pytest.raises(InputError, match="lone surrogate") as err:
            case()
        assert what.split()[-1].strip("'") in str(err.value), (what, err.value)
    assert _ids(ix) == before


def test_sizes_past_the_limits_name_the_field_and_the_limit_never_the_value(small_index):
    from langchain_ctxret import CtxretStore

    ix, store = small_index, CtxretStore(small_index)
    mb = "q" * 1_000_000
    hi = {"role": "user", "content": "hi"}
    cases = [  # (the call, the field its error names, the limit)
        (lambda: ix.add_messages([hi], thread_id=mb), "thread", "1,024"),
        (lambda: ix.add_documents([{"text": "x", "id": mb}]), "'id'", "1,024"),
        (lambda: ix.add_messages([{**hi, "id": mb}], thread_id="s"), "message 0.id", "1,024"),
        (lambda: ix.add_messages([{**hi, "name": mb}], thread_id="s"), "message 0.name", "4,096"),
        (lambda: ix.add_documents([{"text": "x", "title": mb}]), "'title'", "4,096"),
        (lambda: ix.add_documents([{"text": "x", "metadata": {"k": "q" * 10_000_000}}]), "metadata 'k'", "65,536"),
        (lambda: ix.add_documents([{"text": "x", "metadata": {"k": ["q"] * 100_000}}]), "metadata 'k'", "65,536"),
        (lambda: ix.add_messages([hi], thread_id="s", metadata={mb: 1}), "metadata key", "1,024"),
        (lambda: store.put(("ns",), mb, {"text": "x"}), "item key", "1,024"),
        (lambda: store.put(("ns",), "k", {"text": "q" * 2_000_000}), "value", "1,000,000"),
        (lambda: store.put(("a" * 600, "b" * 600), "k", {"text": "x"}), "labels", "1,011"),
        (lambda: AgentMemory(ix).write([hi], mb), "memory scope", "1,024"),
    ]
    before = _ids(ix)
    for i, (case, field, limit) in enumerate(cases):
        with pytest.raises(InputError) as err:
            case()
        msg = str(err.value)
        assert field in msg and limit in msg and "q" * 100 not in msg and len(msg) < 600, (i, msg[:300])
    assert _ids(ix) == before
    # what real data holds is accepted: a 500-byte namespace label (was: refused, quoting the whole label)
    label = "l" * 500
    store.put((label, "u" * 500), "k", {"text": "the 500-byte label holds"})  # 1,001 bytes joined: fits
    assert store.get((label, "u" * 500), "k").value == {"text": "the 500-byte label holds"}
    assert [it.key for it in store.search((label,), query="label holds")] == ["k"]
    ix.add_messages([{**hi, "name": "é" * 2_000}], thread_id="long-name")  # a long speaker: its header is cut
    store.delete((label, "u" * 500), "k")


def test_recall_never_raises_into_the_model_call(small_index, caplog):
    ix = small_index
    memory = AgentMemory(ix, max_chars=2_000)
    view = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about the alpha launch", "id": f"m{i}"}
        for i in range(10_050)
    ]
    view.append({"role": "user", "content": "Where are the alpha launch codes?"})
    recall = memory.recall(view, "a")  # was: InputError (over 10,000 values in one where)
    assert "blue safe" in recall.text

    def bad_rerank(part, hits):
        raise RuntimeError("reranker down")

    failing = AgentMemory(ix, search_options={"rerank": bad_rerank})
    question = [{"role": "user", "content": "Where are the alpha launch codes?"}]
    with caplog.at_level(logging.WARNING, logger="ctxret.agent_memory"):
        got = failing.recall(question, "a")
        assert got.text == "" and got.degraded
        got = asyncio.run(failing.arecall(question, "a"))
        assert got.text == "" and got.degraded
        assert memory.recall(question, SURROGATE).text == ""  # a scope it cannot read: no memory, no error
    assert "bad_rerank raised RuntimeError: reranker down" in caplog.text


def test_a_user_callable_that_raises_is_named_in_one_line(small_index, tmp_path, monkeypatch):
    def bad_rerank(part, hits):
        raise RuntimeError("model server refused\nsecond line")

    with pytest.raises(CallableError) as err:
        small_index.search("alpha launch codes", rerank=bad_rerank)
    assert "rerank callable" in str(err.value) and "bad_rerank raised RuntimeError: model server refused" in str(
        err.value
    )
    assert "\n" not in str(err.value) and isinstance(err.value.__cause__, RuntimeError)

    def bad_hyde(part):
        return 1 / 0

    with pytest.raises(CallableError, match="hyde callable .*bad_hyde raised ZeroDivisionError"):
        small_index.search("alpha launch codes", hyde=bad_hyde)
    # the CLI: one line naming it, no traceback
    (tmp_path / "badrr.py").write_text("def rerank(part, hits):\n    raise ValueError('model server refused')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "note.md").write_text("# Codes\n\nThe alpha launch codes are in the blue safe.\n")
    from cli_inprocess import run_cli

    store = str(tmp_path / "store")
    assert run_cli("index", "note.md", "--store", store, cwd=tmp_path).returncode == 0
    proc = run_cli("search", "alpha launch codes", "--store", store, "--rerank", "badrr:rerank", cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "badrr.rerank raised ValueError: model server refused" in lines[0], proc.stderr
    (tmp_path / "badimport.py").write_text("raise RuntimeError('boom at import')\n")
    proc = run_cli("search", "alpha", "--store", store, "--rerank", "badimport:rerank", cwd=tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "importing 'badimport' raised RuntimeError: boom at import" in proc.stderr.splitlines()[-1]


def test_the_cli_refuses_a_fifo_and_skips_one_in_a_folder(tmp_path):
    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    cmd = [sys.executable, "-m", "ctxret", "index", str(fifo), "--store", str(tmp_path / "store")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # was: waits on the FIFO forever
    assert proc.returncode != 0 and "not a regular file" in proc.stderr and "Traceback" not in proc.stderr
    from ctxret.cli.readers import collect_paths, skipped_summary

    (tmp_path / "note.md").write_text("# Note\n\nA note.\n")
    files, skipped = collect_paths([str(tmp_path)])
    assert [f.name for f in files] == ["note.md"] and [s.path.name for s in skipped] == ["pipe.md"]
    assert "a FIFO, socket or device" in skipped_summary(skipped, ["*.md"], [])[0]
