"""OpenAIEmbedder under fault injection: the real ``openai`` client against a local server that
answers badly on demand (tests/openai_server.py, backed by the local model).

For every fault: a few bad answers then good ones give the local model's vectors; bad answers
that never stop give an :class:`EmbeddingError` naming the problem, soon, without the API key
in the message or the logs. Vectors of the wrong size are refused at once, and an index whose
embedder fails half-way writes nothing. ``embed`` and ``aembed`` behave the same.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.embedders.openai import OpenAIEmbedder
from ctxret.errors import EmbeddingError, InputError

KEY = "sk-test-secret"
TEXTS = [
    "The cat sat on the warm windowsill.",
    "Quarterly revenue grew by twelve percent.",
    "Knead the dough and let it rise.",
    "The spacecraft entered orbit around Mars.",
]
#: Per-attempt timeout in these tests (a "hang" lasts longer).
TIMEOUT = 0.5
HANG = 1.5

#: What the error says when each fault never stops (a regular expression).
PERSISTENT_MESSAGE = {
    "truncated": r"HTTP 200 with JSON that does not parse, probably cut short \(application/json",
    "html": r"HTTP 200 with a body that is not JSON \(text/html, 74 bytes: '<html><head><title>502",
    "empty": r"HTTP 200 with an empty body \(application/json, 0 bytes\)",
    "no_data": r"HTTP 200 with a JSON object without a 'data' list of vectors \(keys: model, obj",
    "wrong_count": r"HTTP 200 with 1 vector for 2 inputs",
    "missing_index": r"HTTP 200 with a vector without an integer 'index' \(data\[0\] has index N",
    "duplicate_index": r"HTTP 200 with two vectors with index 0",
    "ragged": r"HTTP 200 with vectors of different lengths in one answer \(383, 384 numbers\)",
    "nan": r"HTTP 200 with NaN or infinite numbers in the vector of input 0",
    "inf": r"HTTP 200 with NaN or infinite numbers in the vector of input 0",
    "zero": r"HTTP 200 with an all-zero vector for input 0",
    "bad_base64": r"HTTP 200 with an 'embedding' for input 0 that is not valid base64",
    "base64_bytes": r"HTTP 200 with a base64 'embedding' for input 0 of 1,001 bytes, not a whole",
    "reset": r"connection error: ReadError",
    "cut": r"connection error: RemoteProtocolError: peer closed connection without sending",
    "hang": rf"timed out after {TIMEOUT:g} s",
}
#: The fix each error names.
FIX = {
    **dict.fromkeys(
        [
            "truncated",
            "html",
            "empty",
            "no_data",
            "wrong_count",
            "missing_index",
            "duplicate_index",
            "ragged",
            "bad_base64",
            "base64_bytes",
        ],
        "check that base_url (or OPENAI_BASE_URL) points at an OpenAI-compatible /v1 endpoint",
    ),
    **dict.fromkeys(["nan", "inf", "zero"], "check the server and its model"),
    **dict.fromkeys(["reset", "cut"], "is up and reachable and that base_url (or OPENAI_BASE_URL) is right"),
    "hang": "raise timeout= (seconds per attempt), max_retries= or total_timeout=",
}
FAULTS = list(PERSISTENT_MESSAGE)


@pytest.fixture
def make(fake_openai):
    """An OpenAIEmbedder on the local server: 2 inputs a request, short backoff, short timeout."""

    def _make(**kwargs) -> OpenAIEmbedder:
        params = {
            "model": "text-embedding-3-small",
            "dimensions": 384,
            "api_key": KEY,
            "base_url": fake_openai.url,
            "timeout": TIMEOUT,
            "max_retries": 2,
            "max_inputs": 2,
            "retry_base_delay": 0.01,
            "retry_max_delay": 0.05,
        }
        params.update(kwargs)
        return OpenAIEmbedder(**params)

    return _make


@pytest.fixture(params=["embed", "aembed"])
def run(request):
    """Call ``embed`` or ``aembed`` (each test runs both ways)."""

    def _run(emb: OpenAIEmbedder, texts: list[str]) -> np.ndarray:
        if request.param == "embed":
            return emb.embed(texts)
        return asyncio.run(emb.aembed(texts))

    _run.mode = request.param
    return _run


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert KEY not in text


@pytest.mark.parametrize("fault", FAULTS)
def test_transient_fault_then_recovery(make, fake_openai, local_embedder, run, fault, caplog):
    fake_openai.inject(fault, 2, seconds=HANG)
    with caplog.at_level(logging.DEBUG):
        got = run(make(), TEXTS)
    np.testing.assert_allclose(got, unit(local_embedder.embed(TEXTS)), atol=1e-6)
    # 2 requests of 2 inputs, the first two answers bad: 4 requests in all
    assert len(fake_openai.requests) == 4
    assert caplog.text.count("retry 1 of 2") + caplog.text.count("retry 2 of 2") == 2
    assert_no_key(caplog.text)


@pytest.mark.parametrize("fault", FAULTS)
def test_persistent_fault_is_an_embedding_error(make, fake_openai, run, fault, caplog):
    fake_openai.inject_always(fault, seconds=HANG)
    emb = make()
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as info:
        run(emb, TEXTS[:2])
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert "failed after 3 attempts (2 retries): last error" in message
    assert f"at {fake_openai.url}" in message
    assert re.search(PERSISTENT_MESSAGE[fault], message), message
    assert FIX[fault] in message, message
    assert len(fake_openai.requests) == 3
    assert elapsed < 3 * TIMEOUT + 2.0
    assert_no_key(message, caplog.text, repr(emb))


def test_float_lists_are_read_too(make, fake_openai, local_embedder, run):
    fake_openai.inject_always("floats")  # a server that ignores encoding_format=base64
    got = run(make(), TEXTS)
    assert [r.encoding_format for r in fake_openai.requests] == ["base64", "base64"]
    np.testing.assert_allclose(got, unit(local_embedder.embed(TEXTS)), atol=1e-6)


def test_total_timeout_caps_a_hung_server(make, fake_openai, run):
    fake_openai.inject_always("hang", seconds=HANG)
    emb = make(timeout=0.4, max_retries=50, total_timeout=1.0)
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match=r"in total_timeout=1 s: last error timed out"):
        run(emb, ["x"])
    assert time.monotonic() - start < 1.5
    assert 2 <= len(fake_openai.requests) <= 4


def test_total_timeout_is_checked(make):
    for bad in (0, -1.0, float("inf"), "30"):
        with pytest.raises(InputError, match="total_timeout must be a positive number"):
            make(total_timeout=bad)
    assert make(total_timeout=None).total_timeout is None
    assert make().timeout == TIMEOUT and OpenAIEmbedder(api_key=KEY).total_timeout == 300.0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_server_down_names_the_host_not_the_key(run, caplog):
    port = _closed_port()
    emb = OpenAIEmbedder(
        dimensions=384,
        api_key=KEY,
        # credentials in the URL must not reach a message either
        base_url=f"http://user:{KEY}@127.0.0.1:{port}/v1",
        max_retries=1,
        retry_base_delay=0.01,
        timeout=2.0,
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as info:
        run(emb, ["x"])
    message = str(info.value)
    assert f"at http://127.0.0.1:{port}/v1 failed after 2 attempts" in message
    assert "last error connection error: ConnectError" in message
    assert f"check that the server at http://127.0.0.1:{port}/v1 is up" in message
    assert_no_key(message, caplog.text, repr(emb))


def test_server_from_the_environment_is_named(monkeypatch, run):
    port = _closed_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    emb = OpenAIEmbedder(dimensions=384, api_key=KEY, max_retries=0)
    assert emb.endpoint == f"http://127.0.0.1:{port}/v1"
    with pytest.raises(EmbeddingError, match=rf"at http://127\.0\.0\.1:{port}/v1 failed after 1"):
        run(emb, ["x"])


# -- vectors of the wrong size: refused at once, never truncated or stored ---------------------


@pytest.mark.parametrize("served", [128, 512])
def test_wrong_dimension_is_refused_without_retry(make, fake_openai, run, served):
    fake_openai.inject("wrong_dims", 1, dims=served)
    with pytest.raises(EmbeddingError) as info:
        run(make(), TEXTS[:2])
    assert str(info.value) == (
        f"text-embedding-3-small at {fake_openai.url} returned {served}-dimensional vectors but "
        "this embedder expects 384 (dimensions=384 was asked for); nothing was returned. The "
        f"server may not honour dimensions: pass dimensions={served} to use its vectors (an "
        "index built with 384-dimensional vectors must then be rebuilt), or use a server and "
        "model that honour dimensions=384"
    )
    assert len(fake_openai.requests) == 1  # a configuration mismatch is not retried


def test_native_size_mismatch_names_both_sizes(make, fake_openai, run):
    # no dimensions: text-embedding-3-small should give 1,536 numbers; this server gives 384
    with pytest.raises(EmbeddingError) as info:
        run(make(dimensions=None), ["x"])
    message = str(info.value)
    assert "returned 384-dimensional vectors but this embedder expects 1536" in message
    assert "(text-embedding-3-small's native size)" in message
    assert "Pass dimensions=384 if this is the model you meant" in message
    assert "point base_url at the model the index was built with" in message


def test_unknown_model_keeps_the_first_size(make, fake_openai, run, local_embedder):
    emb = make(model="all-minilm-served", dimensions=None)
    fake_openai.answer_next(1)
    fake_openai.inject("wrong_dims", 1, dims=256)
    with pytest.raises(
        EmbeddingError,
        match="returned 256-dimensional vectors but this embedder "
        r"expects 384 \(the first answer had that size\)",
    ):
        emb.embed(TEXTS)  # the second request of two
    np.testing.assert_allclose(run(emb, TEXTS), unit(local_embedder.embed(TEXTS)), atol=1e-6)


@pytest.mark.parametrize("fault", ["wrong_dims", "nan", "html"])
def test_index_writes_nothing_when_the_embedder_fails_half_way(make, fake_openai, fault):
    index = ContextualIndex(in_memory=True, embedder=make(), collection=f"faults_{fault}")
    index.add_documents([{"id": "first", "text": "Cats like warm windowsills. Dogs do not."}])
    before = index.store.count()
    assert before > 0
    documents = [
        {"id": f"doc{i}", "text": f"Document {i} talks about topic {i}. It has a second line."} for i in range(4)
    ]
    fake_openai.reset()
    fake_openai.answer_next(1)  # the first request is answered well
    if fault == "wrong_dims":
        fake_openai.inject("wrong_dims", 1, dims=512)
    else:
        fake_openai.inject_always(fault)
    with pytest.raises(EmbeddingError):
        index.add_documents(documents)
    assert len(fake_openai.requests) >= 2  # it failed after a good answer, half-way
    assert index.store.count() == before
    fake_openai.reset()
    index.add_documents(documents)  # the same call, once the server is right again
    assert index.store.count() > before


# -- the async path: concurrent requests, in order ---------------------------------------------


def _wait_idle(server, seconds: float = 5.0) -> None:
    """Wait for hung answers of earlier tests to end (they count as in flight)."""
    end = time.monotonic() + seconds
    while server.in_flight and time.monotonic() < end:
        time.sleep(0.05)
    server.reset()


async def test_aembed_sends_requests_concurrently_in_order(make, fake_openai, local_embedder):
    _wait_idle(fake_openai)
    texts = [f"sentence number {i} about topic {i % 5}" for i in range(16)]
    fake_openai.slow_next(8, 0.3)
    start = time.monotonic()
    got = await make(timeout=5.0).aembed(texts)  # 8 requests of 2, at most 4 at once
    elapsed = time.monotonic() - start
    np.testing.assert_allclose(got, unit(local_embedder.embed(texts)), atol=1e-6)
    assert len(fake_openai.requests) == 8
    assert fake_openai.max_in_flight == 4
    assert elapsed < 8 * 0.3


async def test_aembed_concurrency_is_configurable(make, fake_openai):
    _wait_idle(fake_openai)
    fake_openai.slow_next(6, 0.1)
    await make(max_concurrency=1).aembed([f"text {i}" for i in range(6)])
    assert fake_openai.max_in_flight == 1
    with pytest.raises(InputError, match="max_concurrency must be a positive integer"):
        make(max_concurrency=0)


async def test_aembed_failure_cancels_the_other_requests(make, fake_openai):
    fake_openai.inject_always("html")
    with pytest.raises(EmbeddingError, match="HTTP 200 with a body that is not JSON"):
        await make(max_retries=1).aembed([f"text {i}" for i in range(16)])  # 8 requests
    # the first request that gives up stops the rest: not all 8 x 2 attempts are made
    await asyncio.sleep(0.2)
    assert len(fake_openai.requests) < 16
