"""LangChainEmbedder / LlamaIndexEmbedder over real framework models; the framework wrappers."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from ctxret.embedders.base import Embedder
from ctxret.embedders.wrappers import DIMENSION_PROBE, LangChainEmbedder, LlamaIndexEmbedder
from ctxret.errors import EmbeddingError, InputError
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from llama_index.core.embeddings import MockEmbedding

from langchain_ctxret.embeddings import CtxretEmbeddings
from llamaindex_ctxret.embeddings import CtxretEmbedding

TEXTS = [
    "first text about cats",
    "second text about finance",
    "third: 日本語 👍",
    "fourth \ud800 text",
]


def unit(rows) -> np.ndarray:
    arr = np.asarray(rows, dtype=np.float64)
    return arr / np.linalg.norm(arr, axis=-1, keepdims=True)


class RecordingEmbeddings(Embeddings):
    """A tiny LangChain Embeddings for plumbing: records calls; NaN for texts containing 'nan'."""

    def __init__(self, dims: int = 3, rows_delta: int = 0) -> None:
        self.dims = dims
        self.rows_delta = rows_delta
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        out = [[float("nan") if "nan" in t else float(len(t) + k) for k in range(self.dims)] for t in texts]
        return out[: len(out) + self.rows_delta] if self.rows_delta < 0 else out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def check_rows(vecs: np.ndarray, n: int, dims: int) -> None:
    assert vecs.shape == (n, dims) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


# -- LangChainEmbedder -----------------------------------------------------------------------


async def test_langchain_fake_embedding():
    fake = DeterministicFakeEmbedding(size=64)
    emb = LangChainEmbedder(fake)
    assert isinstance(emb, Embedder)
    assert emb.model_id == "langchain:DeterministicFakeEmbedding:"
    assert emb.dims == 64 and emb.max_tokens == 8191
    vecs = emb.embed(TEXTS)
    check_rows(vecs, len(TEXTS), 64)
    # order: row i is text i's own (deterministic) vector, unit-normalised
    for text, vec in zip(TEXTS, vecs, strict=True):
        cleaned = text.replace("\ud800", "\ufffd")
        np.testing.assert_allclose(vec, unit(fake.embed_query(cleaned)), atol=1e-6)
    np.testing.assert_allclose(await emb.aembed(TEXTS), vecs, atol=1e-6)
    assert emb.embed([]).shape == (0, 64)
    assert emb.count_tokens(["héllo", ""]) == [6, 0]


async def test_langchain_over_ctxret_embeddings(local_embedder):
    emb = LangChainEmbedder(CtxretEmbeddings(local_embedder))
    assert emb.model_id == "langchain:CtxretEmbeddings:local:all-MiniLM-L6-v2-onnx-int8"
    want = local_embedder.embed(TEXTS)
    np.testing.assert_allclose(emb.embed(TEXTS), want, atol=1e-5)
    np.testing.assert_allclose(await emb.aembed(TEXTS[::-1]), want[::-1], atol=1e-5)
    assert emb.dims == 384


def test_given_dims_and_ids_skip_the_probe():
    rec = RecordingEmbeddings(dims=3)
    emb = LangChainEmbedder(rec, model_id="mine", dims=3, max_tokens=100, default_piece_bytes=500)
    assert (emb.model_id, emb.dims, emb.max_tokens, emb.default_piece_bytes) == (
        "mine",
        3,
        100,
        500,
    )
    assert emb.default_score_threshold == 0.35
    emb.embed(["abc"])
    assert rec.calls == [["abc"]]


def test_probe_happens_once_and_lazily():
    rec = RecordingEmbeddings(dims=5)
    emb = LangChainEmbedder(rec)
    assert rec.calls == []
    assert emb.dims == 5 and emb.dims == 5
    assert rec.calls == [[DIMENSION_PROBE]]


def test_empty_texts_are_zero_rows_and_not_sent():
    rec = RecordingEmbeddings(dims=3)
    vecs = LangChainEmbedder(rec, dims=3).embed(["", "ab", "  \n", "cd"])
    assert rec.calls == [["ab", "cd"]]
    assert np.all(vecs[[0, 2]] == 0)
    np.testing.assert_allclose(np.linalg.norm(vecs[[1, 3]], axis=1), 1.0, atol=1e-6)


def test_nan_and_wrong_shapes_are_errors():
    with pytest.raises(EmbeddingError, match="NaN or infinite numbers in row 1"):
        LangChainEmbedder(RecordingEmbeddings(), dims=3).embed(["ok", "a nan here", "ok"])
    with pytest.raises(EmbeddingError, match="2 vectors .* for 3 texts"):
        LangChainEmbedder(RecordingEmbeddings(rows_delta=-1), dims=3).embed(["a", "b", "c"])
    with pytest.raises(EmbeddingError, match="3-dimensional vectors, expected 4"):
        LangChainEmbedder(RecordingEmbeddings(dims=3), dims=4).embed(["a"])
    with pytest.raises(InputError, match="embed_documents"):
        LangChainEmbedder(object())
    with pytest.raises(InputError):
        LangChainEmbedder(RecordingEmbeddings(), dims=0)


class BadEmbeddings(Embeddings):
    """A LangChain Embeddings that answers the way it is told (sync and async alike)."""

    def __init__(self, answer) -> None:
        self.answer = answer  # texts -> rows
        self.calls: list[list[str]] = []

    def embed_documents(self, texts: list[str]):
        self.calls.append(list(texts))
        return self.answer(texts)

    async def aembed_documents(self, texts: list[str]):
        return self.embed_documents(texts)

    def embed_query(self, text: str):
        return self.embed_documents([text])[0]


def _rows(texts, dims=3):
    return [[float(len(t) + k + 1) for k in range(dims)] for t in texts]


#: A bad answer of the wrapped model (for the texts of rows 0 and 2) and what the error says.
BAD_ANSWERS = {
    "one too few": (lambda t: _rows(t)[:-1], r"returned 1 vectors of shape \(3,\) for 2 texts"),
    "ragged": (
        lambda t: [[1.0, 2.0, 3.0], [1.0, 2.0]],
        r"returned vectors of different lengths \(2, 3 numbers\) for 2 texts",
    ),
    "strings": (lambda t: [["1", "2", "3"]] * len(t), r"returned <U1 values, not numbers"),
    "None": (lambda t: None, r"returned NoneType that is not a list of vectors of numbers"),
    "flat": (lambda t: [1.0, 2.0, 3.0], r"returned one flat list of 3 numbers for 2 texts"),
    "wrong dims": (
        lambda t: _rows(t, dims=4),
        r"returned 4-dimensional vectors, expected 3 \(dims=3 was given\); nothing was "
        r"returned\. Pass dims=4 if this is the model you meant",
    ),
    "inf": (
        lambda t: [[1.0, 2.0, 3.0], [1.0, float("inf"), 3.0]],
        r"returned NaN or infinite numbers in row 2 \(1 bad row\(s\)\)",
    ),
    "zero": (
        lambda t: [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]],
        r"returned an all-zero vector in row 0 for a non-empty text \(1 such row\(s\)\)",
    ),
}


@pytest.mark.parametrize("mode", ["embed", "aembed"])
@pytest.mark.parametrize("case", list(BAD_ANSWERS))
async def test_bad_answers_are_embedding_errors(case, mode):
    answer, message = BAD_ANSWERS[case]
    emb = LangChainEmbedder(BadEmbeddings(answer), dims=3)
    texts = ["first", " ", "third"]  # the blank text is not sent: rows 0 and 2 are
    with pytest.raises(EmbeddingError, match=message):
        if mode == "embed":
            emb.embed(texts)
        else:
            await emb.aembed(texts)


@pytest.mark.parametrize("mode", ["embed", "aembed"])
async def test_dims_are_learnt_from_the_first_real_vectors(mode):
    answers = iter([_rows(["a", "bb"], dims=5), _rows(["c"], dims=4)])
    model = BadEmbeddings(lambda texts: next(answers))
    emb = LangChainEmbedder(model)

    async def call(texts):
        return emb.embed(texts) if mode == "embed" else await emb.aembed(texts)

    check_rows(await call(["a", "bb"]), 2, 5)
    assert model.calls == [["a", "bb"]]  # no separate probe: the real vectors set dims
    assert emb.dims == 5
    with pytest.raises(
        EmbeddingError,
        match=r"returned 4-dimensional vectors, expected 5 \(the first vectors it returned had "
        r"that size\)",
    ):
        await call(["c"])


async def test_llamaindex_wrapper_checks_answers_too():
    class NaNEmbedding(MockEmbedding):
        def _get_text_embeddings(self, texts):
            dims = self.embed_dim
            return [[float("nan")] * dims if "nan" in t else [1.0] * dims for t in texts]

        async def _aget_text_embeddings(self, texts):
            return self._get_text_embeddings(texts)

    emb = LlamaIndexEmbedder(NaNEmbedding(embed_dim=8), dims=8)
    check_rows(emb.embed(["fine"]), 1, 8)
    with pytest.raises(EmbeddingError, match="get_text_embedding_batch returned NaN .* row 1"):
        emb.embed(["fine", "a nan here"])
    with pytest.raises(EmbeddingError, match="get_text_embedding_batch returned NaN .* row 1"):
        await emb.aembed(["fine", "a nan here"])
    with pytest.raises(EmbeddingError, match="returned 8-dimensional vectors, expected 16"):
        LlamaIndexEmbedder(NaNEmbedding(embed_dim=8), dims=16).embed(["fine"])


# -- LlamaIndexEmbedder ----------------------------------------------------------------------


async def test_llamaindex_mock_embedding():
    emb = LlamaIndexEmbedder(MockEmbedding(embed_dim=8))
    assert emb.model_id == "llamaindex:MockEmbedding:unknown"
    vecs = emb.embed(TEXTS)
    check_rows(vecs, len(TEXTS), 8)
    np.testing.assert_allclose(vecs, np.full((len(TEXTS), 8), 1 / np.sqrt(8)), atol=1e-6)
    np.testing.assert_allclose(await emb.aembed(TEXTS), vecs, atol=1e-6)


async def test_llamaindex_over_ctxret_embedding(local_embedder):
    li = CtxretEmbedding(local_embedder, embed_batch_size=2)  # LlamaIndex splits into 2-text calls
    emb = LlamaIndexEmbedder(li)
    assert emb.model_id == "llamaindex:CtxretEmbedding:local:all-MiniLM-L6-v2-onnx-int8"
    want = local_embedder.embed(TEXTS)
    np.testing.assert_allclose(emb.embed(TEXTS), want, atol=1e-5)
    np.testing.assert_allclose(await emb.aembed(TEXTS[::-1]), want[::-1], atol=1e-5)


# -- the framework-facing wrappers of ctxret embedders ----------------------------------------


async def test_ctxret_embedding_for_llamaindex(local_embedder):
    li = CtxretEmbedding(local_embedder)
    assert li.model_name == local_embedder.model_id and li.embedder is local_embedder
    want = local_embedder.embed(TEXTS)
    np.testing.assert_allclose(li.get_text_embedding_batch(TEXTS), want, atol=1e-5)
    np.testing.assert_allclose(li.get_query_embedding(TEXTS[0]), want[0], atol=1e-5)
    np.testing.assert_allclose(li.get_text_embedding(TEXTS[1]), want[1], atol=1e-5)
    np.testing.assert_allclose(await li.aget_query_embedding(TEXTS[2]), want[2], atol=1e-5)
    np.testing.assert_allclose(await li.aget_text_embedding(TEXTS[3]), want[3], atol=1e-5)
    np.testing.assert_allclose(await li.aget_text_embedding_batch(TEXTS), want, atol=1e-5)
    assert li.to_payload()["model_name"] == local_embedder.model_id


async def test_ctxret_embeddings_for_langchain(local_embedder):
    lc = CtxretEmbeddings(local_embedder)
    want = local_embedder.embed(TEXTS)
    docs = lc.embed_documents(TEXTS)
    assert isinstance(docs, list) and isinstance(docs[0], list) and isinstance(docs[0][0], float)
    np.testing.assert_allclose(docs, want, atol=1e-5)
    np.testing.assert_allclose(lc.embed_query(TEXTS[1]), want[1], atol=1e-5)
    np.testing.assert_allclose(await lc.aembed_documents(TEXTS), want, atol=1e-5)
    np.testing.assert_allclose(await lc.aembed_query(TEXTS[2]), want[2], atol=1e-5)


def test_default_is_the_shared_local_embedder(local_embedder):
    assert CtxretEmbeddings().embedder is local_embedder
    assert CtxretEmbedding().embedder is local_embedder


def test_wrappers_module_imports_no_framework():
    code = (
        "import sys, ctxret.embedders.wrappers\n"
        "mods = ('langchain_core', 'llama_index.core', 'onnxruntime')\n"
        "bad = [m for m in mods if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
