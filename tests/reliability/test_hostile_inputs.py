"""Hostile input through the Python API and the CLI: a ctxret error naming the problem, or correct
handling — never another exception, never a half-written store.

Hypothesis generates messages, documents, metadata and search arguments with wrong types, deep
nesting, lone surrogates, control characters, NaN and huge numbers.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from ctxret import ContextualIndex, CtxretError, EmbeddingError, InputError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reliability.bow_embedder import SmallEmbedder

pytestmark = pytest.mark.slow

ANY_CHAR = st.characters(min_codepoint=0, max_codepoint=0x10FFFF, blacklist_categories=())  # surrogates too
TEXT = st.text(alphabet=ANY_CHAR, max_size=40)
SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | TEXT
VALUES = st.recursive(
    SCALARS, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(TEXT, kids, max_size=3), max_leaves=12
)
ROLES = st.sampled_from(["user", "assistant", "tool", "system", "function", "bogus", "", 5, None])
MESSAGE = st.fixed_dictionaries(
    {"role": ROLES, "content": VALUES},
    optional={"tool_calls": VALUES, "tool_call_id": VALUES, "name": VALUES, "timestamp": VALUES},
) | VALUES
THREAD_ID = TEXT | st.integers() | st.none() | st.lists(TEXT, max_size=2)
FAST = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@pytest.fixture(scope="module")
def index(tmp_path_factory, local_embedder):
    idx = ContextualIndex(tmp_path_factory.mktemp("hostile") / "store", embedder=local_embedder, progress=False)
    idx.add_messages([{"role": "user", "content": "A safe first memory about the garden."}], thread_id="safe")
    return idx


def _ids(index):
    return sorted(r["id"] for r in index.store.records(include=()))


@FAST
@given(messages=st.lists(MESSAGE, max_size=4) | VALUES, thread_id=THREAD_ID)
def test_add_messages_either_works_or_raises_a_ctxret_error(index, messages, thread_id):
    before = _ids(index)
    try:
        index.add_messages(messages, thread_id=thread_id)
    except CtxretError as e:
        assert str(e) and _ids(index) == before  # nothing half-written
    assert sorted(index.lexical_index.ids()) == _ids(index)


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
        assert str(e) and _ids(index) == before


@FAST
@given(message=VALUES, thread_id=THREAD_ID, k=VALUES, threshold=VALUES, where=VALUES)
def test_search_either_works_or_raises_a_ctxret_error(index, message, thread_id, k, threshold, where):
    try:
        groups = index.search(message, k=k, score_threshold=threshold, thread_id=thread_id, where=where)
    except CtxretError as e:
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
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
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
