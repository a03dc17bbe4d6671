"""OpenAIEmbedder with the real ``openai`` client against a local OpenAI-compatible server.

The server (tests/openai_server.py) runs on 127.0.0.1 and is backed by LocalEmbedder, so the
vectors that come back can be compared with the local model's, row by row.
"""

from __future__ import annotations

import logging

import numpy as np
import openai
import pytest
from ctxret.blend import truncate_dims
from ctxret.embedders import openai as openai_mod
from ctxret.embedders.base import Embedder
from ctxret.embedders.openai import OpenAIEmbedder
from ctxret.errors import EmbeddingError, InputError, InputTooLongError

KEY = "test-key-do-not-leak"
TEXTS = [
    "The cat sat on the warm windowsill.",
    "Quarterly revenue grew by twelve percent.",
    "Knead the dough and let it rise.",
    "The spacecraft entered orbit around Mars.",
    "Lone surrogate \ud800 and control \x07 characters.",
    "日本語のテキストと絵文字 👍🏽",
]


@pytest.fixture
def make(fake_openai):
    """Build an OpenAIEmbedder pointed at the local server, with short retry delays."""

    def _make(**kwargs) -> OpenAIEmbedder:
        params = {
            "model": "text-embedding-3-small",
            "dimensions": 384,
            "api_key": KEY,
            "base_url": fake_openai.url,
            "timeout": 10.0,
            "max_retries": 3,
            "retry_base_delay": 0.01,
            "retry_max_delay": 0.05,
        }
        params.update(kwargs)
        return OpenAIEmbedder(**params)

    return _make


def row_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def assert_within_limits(server, max_inputs=2048, max_bytes=300_000) -> None:
    assert server.requests, "no request was sent"
    for r in server.requests:
        assert r.n_inputs <= max_inputs, r
        assert r.n_bytes <= max_bytes, r
        assert r.status == 200, r


def test_vectors_match_local_model_in_order(make, fake_openai, local_embedder):
    emb = make()
    assert isinstance(emb, Embedder)
    assert emb.dims == 384 and emb.model_id == "openai:text-embedding-3-small@384"
    got = emb.embed(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    want = local_embedder.embed(TEXTS)
    np.testing.assert_array_less(0.999, row_cos(got, want))
    (req,) = fake_openai.requests
    # the client asks for base64 by default; the server answers in reverse index order
    assert req.encoding_format == "base64"
    assert req.dimensions == 384 and req.model == "text-embedding-3-small"
    assert req.authorization == f"Bearer {KEY}"


def test_server_float_format(fake_openai, local_embedder):
    client = openai.OpenAI(api_key=KEY, base_url=fake_openai.url, max_retries=0)
    resp = client.embeddings.create(model="m", input=["a b c", "d"], encoding_format="float")
    data = sorted(resp.data, key=lambda d: d.index)
    np.testing.assert_allclose(np.array([d.embedding for d in data]), local_embedder.embed(["a b c", "d"]), atol=1e-6)
    assert resp.usage.prompt_tokens == 5 + 3


@pytest.mark.parametrize("dimensions", [64, 128, 383])
def test_dimensions_honoured(make, fake_openai, local_embedder, dimensions):
    got = make(dimensions=dimensions).embed(TEXTS)
    assert got.shape == (len(TEXTS), dimensions)
    want = truncate_dims(local_embedder.embed(TEXTS), dimensions)
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert fake_openai.requests[0].dimensions == dimensions


def test_unknown_model_probes_dims_once(make, fake_openai):
    emb = make(model="all-minilm-served", dimensions=None)
    assert fake_openai.requests == []  # nothing sent at construction
    assert emb.dims == 384
    assert len(fake_openai.requests) == 1 and fake_openai.requests[0].dimensions is None
    assert emb.model_id == "openai:all-minilm-served@384"
    assert emb.embed(["one", "two"]).shape == (2, 384)
    assert len(fake_openai.requests) == 2


def test_unknown_model_learns_dims_from_first_response(make, fake_openai):
    emb = make(model="all-minilm-served", dimensions=None)
    assert emb.embed(["one"]).shape == (1, 384)
    assert len(fake_openai.requests) == 1


def test_many_short_inputs_are_split(make, fake_openai, local_embedder):
    distinct = [f"item {i}" for i in range(250)]  # the server memoises: 250 model runs, not 5,000
    which = [(i * 7) % 250 for i in range(5000)]
    texts = [distinct[j] for j in which]
    got = make().embed(texts)
    assert got.shape == (5000, 384)
    assert len(fake_openai.requests) >= 3
    assert sum(r.n_inputs for r in fake_openai.requests) == 5000
    assert_within_limits(fake_openai)
    np.testing.assert_array_less(0.999, row_cos(got, local_embedder.embed(distinct)[which]))


def test_large_inputs_are_split_by_bytes(make, fake_openai, local_embedder):
    distinct = [f"{i} " + " ".join(["lorem ipsum dolor sit amet"] * 20) for i in range(10)]  # ~540 B
    texts = [distinct[i % 10] for i in range(700)]  # ~380 KB in all
    assert sum(len(t.encode()) for t in texts) > 300_000
    got = make().embed(texts)
    assert len(fake_openai.requests) >= 2
    assert_within_limits(fake_openai)
    want = local_embedder.embed(distinct)
    np.testing.assert_array_less(0.999, row_cos(got, want[[i % 10 for i in range(700)]]))


def test_custom_request_limits(make, fake_openai):
    texts = [f"sentence number {i} " * 5 for i in range(60)]
    make(max_inputs=7, max_bytes=1000).embed(texts)
    assert len(fake_openai.requests) >= 9
    assert_within_limits(fake_openai, max_inputs=7, max_bytes=1000)


def test_429_then_success(make, fake_openai, local_embedder):
    fake_openai.fail_next(2, 429, retry_after="0")
    got = make(retry_base_delay=30.0, retry_max_delay=30.0).embed(TEXTS[:3])  # Retry-After wins
    assert [r.status for r in fake_openai.requests] == [429, 429, 200]
    np.testing.assert_array_less(0.999, row_cos(got, local_embedder.embed(TEXTS[:3])))


def test_retry_after_is_capped(make, fake_openai):
    fake_openai.fail_next(1, 429, retry_after="3600")
    make(max_retry_after=0.01).embed(["x"])
    assert [r.status for r in fake_openai.requests] == [429, 200]


def test_500_forever_gives_up_without_leaking_key(make, fake_openai, caplog):
    fake_openai.fail_always(500)
    emb = make(max_retries=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(EmbeddingError) as info:
        emb.embed(["x", "y"])
    message = str(info.value)
    assert "HTTP 500" in message and "3 attempts" in message and "2 retries" in message
    assert isinstance(info.value.__cause__, openai.InternalServerError)
    assert len(fake_openai.requests) == 3
    for text in (message, repr(emb), caplog.text):
        assert KEY not in text
    assert "retry 1 of 2" in caplog.text


def test_4xx_is_permanent(make, fake_openai):
    fake_openai.fail_next(1, 401)
    with pytest.raises(EmbeddingError, match="HTTP 401.*check the API key") as info:
        make().embed(["x"])
    assert len(fake_openai.requests) == 1
    assert KEY not in str(info.value)
    fake_openai.reset()
    fake_openai.fail_next(1, 400)
    with pytest.raises(EmbeddingError, match="failed permanently: HTTP 400"):
        make().embed(["x"])
    assert len(fake_openai.requests) == 1


def test_timeout_is_retried(make, fake_openai, local_embedder):
    fake_openai.slow_next(1, 1.5)
    got = make(timeout=0.4).embed(["slow answer"])
    assert len(fake_openai.requests) == 2
    assert row_cos(got, local_embedder.embed(["slow answer"]))[0] > 0.999


def test_timeouts_exhausted(make, fake_openai):
    fake_openai.slow_next(2, 1.0)
    with pytest.raises(EmbeddingError, match="2 attempts.*timed out after 0.3 s") as info:
        make(timeout=0.3, max_retries=1).embed(["x"])
    assert isinstance(info.value.__cause__, openai.APITimeoutError)


def test_connection_error_is_retried_then_reported():
    emb = OpenAIEmbedder(
        api_key=KEY,
        base_url="http://127.0.0.1:9/v1",
        max_retries=1,
        retry_base_delay=0.01,
        timeout=2.0,
    )
    with pytest.raises(EmbeddingError, match="2 attempts.*connection error"):
        emb.embed(["x"])


def test_over_long_input_refused_before_sending(make, fake_openai):
    emb = make()
    assert emb.count_tokens(["hello world"]) == [2]  # tiktoken cl100k_base, loaded offline
    long = "hello " * 8999 + "hello"
    assert emb.count_tokens([long]) == [9000]
    with pytest.raises(InputTooLongError, match=r"input 2 is 9,000 tokens, over .*8,191"):
        emb.embed(["fine", "", long])
    assert fake_openai.requests == []
    with pytest.raises(InputTooLongError, match="input 1 is"):  # over max_bytes alone
        make(max_bytes=100).embed(["fine", "x" * 101])
    assert fake_openai.requests == []


def test_without_tokenizer_bytes_rule(make, fake_openai, monkeypatch, caplog):
    monkeypatch.setattr(openai_mod, "offline_tiktoken", lambda name: None)  # patch the loader
    emb = make(max_tokens=100)
    assert emb.count_tokens(["héllo", ""]) == [6, 0]  # UTF-8 bytes: an upper bound
    with pytest.raises(InputTooLongError, match=r"input 0 is 401 UTF-8 bytes, over 400 bytes"):
        emb.embed(["x" * 401])
    assert fake_openai.requests == []
    with caplog.at_level(logging.WARNING):
        got = emb.embed(["short", "word " * 50])  # 250 bytes: maybe over, sent with a warning
    assert got.shape == (2, 384)
    assert "may be over" in caplog.text and "input 1" in caplog.text


def test_empty_texts_are_zero_rows_and_not_sent(make, fake_openai, local_embedder):
    emb = make()
    assert emb.embed([]).shape == (0, 384)
    assert np.all(emb.embed(["", "  \n"]) == 0)
    assert fake_openai.requests == []
    got = emb.embed(["", "text", " "])
    assert np.all(got[[0, 2]] == 0)
    assert row_cos(got[[1]], local_embedder.embed(["text"]))[0] > 0.999
    assert [r.n_inputs for r in fake_openai.requests] == [1]


async def test_async_path(make, fake_openai, local_embedder):
    emb = make(max_inputs=4)
    fake_openai.fail_next(1, 429, retry_after="0")
    fake_openai.fail_next(1, 503)
    got = await emb.aembed(TEXTS + ["", "last"])
    want = local_embedder.embed(TEXTS + ["last"])
    np.testing.assert_array_less(0.999, row_cos(got[[*range(len(TEXTS)), len(TEXTS) + 1]], want))
    assert np.all(got[len(TEXTS)] == 0)
    statuses = [r.status for r in fake_openai.requests]
    assert statuses[:2] == [429, 503] and statuses.count(200) == 2
    assert all(r.n_inputs <= 4 for r in fake_openai.requests)
    assert (await emb.aembed([])).shape == (0, 384)


async def test_async_gives_up(make, fake_openai):
    fake_openai.fail_always(500)
    with pytest.raises(EmbeddingError, match="2 attempts.*HTTP 500"):
        await make(max_retries=1).aembed(["x"])


def test_server_rejects_oversized_requests(fake_openai):
    """The fixture itself enforces OpenAI's limits (so the tests above could fail)."""
    client = openai.OpenAI(api_key=KEY, base_url=fake_openai.url, max_retries=0)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="m", input=["a"] * 2049)
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="m", input=["x" * 1000] * 301)
    assert [r.status for r in fake_openai.requests] == [400, 400]


def test_constructor_checks(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(InputError, match="OPENAI_API_KEY"):
        OpenAIEmbedder()
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    emb = OpenAIEmbedder()
    assert emb.dims == 1536 and emb.model_id == "openai:text-embedding-3-small@1536"
    assert KEY not in repr(emb)
    assert OpenAIEmbedder("text-embedding-3-large").dims == 3072
    assert OpenAIEmbedder("text-embedding-ada-002").dims == 1536
    assert OpenAIEmbedder(dimensions=256).model_id == "openai:text-embedding-3-small@256"
    with pytest.raises(InputError, match="does not support dimensions"):
        OpenAIEmbedder("text-embedding-ada-002", dimensions=256)
    with pytest.raises(InputError, match="1536 dimensions"):
        OpenAIEmbedder(dimensions=2000)
    with pytest.raises(InputError):
        OpenAIEmbedder(dimensions=0)


def test_injected_client_has_its_retries_switched_off(fake_openai):
    client = openai.OpenAI(api_key=KEY, base_url=fake_openai.url, max_retries=4)
    emb = OpenAIEmbedder(dimensions=384, client=client, max_retries=0, api_key=None)
    fake_openai.fail_next(1, 500)
    with pytest.raises(EmbeddingError, match="after 1 attempt "):
        emb.embed(["x"])
    assert len(fake_openai.requests) == 1  # the client did not retry on its own
