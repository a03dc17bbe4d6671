"""The local model's passes (real model): windows, length-sorted runs by tokens, late chunking read once per
token, a one-piece turn's own vector from the same pass, token ids reused from ``count_tokens``."""

from __future__ import annotations

import numpy as np
import pytest
from ctxret.errors import InputError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("onnxruntime")
pytest.importorskip("tokenizers")

from ctxret._lru import TextLRU  # noqa: E402
from ctxret.embedders import local as local_mod  # noqa: E402
from ctxret.embedders.local import LateVectors, LocalEmbedder, model_runs, pool_spans, token_windows  # noqa: E402
from ctxret.ingest.context import _joined, late_passes  # noqa: E402
from ctxret.ingest.turns import Piece  # noqa: E402

SENTENCES = [
    "The cat sat on the warm windowsill and purred in the sun.",
    "Quarterly revenue grew by twelve percent thanks to strong cloud sales.",
    "To bake bread, knead the dough and let it rise for an hour.",
    "The spacecraft entered orbit around Mars after a seven-month journey.",
    "Ünïcödé façade — naïve café; 日本語のテキストです。 👩\u200d🚀 done.",
]

body = st.text(
    alphabet=st.one_of(
        st.sampled_from(list("abcdefXYZ019 .,!?'-\t\n")),
        st.sampled_from(list("éüñçÅø\u0301日本語中文한국어テキスト")),
        st.sampled_from(["👍", "\u200d", "🚀", "\ufffd", "\u00a0", "\x00", "\u200b", "ﬁ", "İ"]),
    ),
    max_size=60,
)
#: A turn as the write path gives it: labelled pieces (each starts with its header), sometimes longer than a window.
turns_strategy = st.lists(st.lists(st.tuples(body, st.integers(0, 30)), min_size=1, max_size=4), min_size=1, max_size=4)


def piece_texts(turn: list[tuple[str, int]]) -> list[str]:
    return [
        f"[Turn 1 · Piece {i}]\n{text} " + " ".join(SENTENCES[j % len(SENTENCES)] for j in range(repeat))
        for i, (text, repeat) in enumerate(turn)
    ]


def pieces_of(texts: list[str]) -> list[Piece]:
    header = "[Turn 1]"
    return [
        Piece(
            id=f"p{i}",
            thread_id="t",
            turn_id="1",
            turn_index=1,
            source_ordinal=0,
            ordinal=i,
            header=header,
            body=t,
            text=t,
            kind="turn",
            source_kind="user",
            source_label="User",
        )
        for i, t in enumerate(texts)
    ]


def test_model_runs_are_sorted_and_bounded():
    widths = [5, 300, 40, 40, 41, 7, 256, 12, 3]
    runs = model_runs(widths, max_rows=3, max_tokens=100)
    assert sorted(i for r in runs for i in r) == list(range(len(widths)))  # each once
    flat = [widths[i] for r in runs for i in r]
    assert flat == sorted(flat)  # shortest first
    for r in runs:
        assert len(r) <= 3 and (len(r) == 1 or len(r) * max(widths[i] for i in r) <= 100)
    assert [300] in [[widths[i] for i in r] for r in runs]  # wider than the budget: alone


def test_tokens_read_per_token_of_a_long_text_stay_near_one():
    """Windows of a text just over the model read about the overlap twice, not a second window."""
    for n in (255, 300, 396, 672, 1110, 5000):
        windows = token_windows(n, 254)
        read = sum(b - a for a, b in windows)
        assert read / n <= 1 + local_mod.WINDOW_OVERLAP / (254 - local_mod.WINDOW_OVERLAP) + 0.01, n


@pytest.mark.slow  # 15 drawn threads through the real model: the full suite's
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=turns_strategy)
def test_embed_late_is_pool_spans_over_the_joined_turn(local_embedder, turns):
    """The late pass over pieces' tokens (reused from count_tokens) gives exactly what pooling each piece's span
    of the joined turn text gives, for short and multi-window turns; a one-piece turn in one window gets exactly
    embed()'s vector of that piece."""
    texts = [piece_texts(t) for t in turns]
    local_embedder.count_tokens([x for t in texts for x in t])  # as fitting does: the ids are then reused
    late = local_embedder.embed_late(texts, own=True)
    assert isinstance(late, LateVectors) and len(late.context) == len(texts) == len(late.own)
    joined = [_joined(pieces_of(t)) for t in texts]
    tokens = local_embedder.embed_tokens_many([j for j, _ in joined])
    for t, ctx, own, tok, (_, spans) in zip(texts, late.context, late.own, tokens, joined, strict=True):
        assert ctx.shape == (len(t), 384) and ctx.dtype == np.float32
        np.testing.assert_array_equal(ctx, pool_spans(tok, spans))
        if len(t) == 1 and tok.windows == 1:
            assert own is not None
            np.testing.assert_array_equal(own[0], local_embedder.embed(t)[0])
        else:
            assert own is None
    counts = [n - 2 for n in local_embedder.count_tokens([j for j, _ in joined])]
    assert late.tokens == sum(b - a + 2 for n in counts for a, b in token_windows(n, 254))  # [CLS], [SEP] a window


def test_embed_late_without_own_and_progress(local_embedder):
    turns = [[SENTENCES[0]], [SENTENCES[1], SENTENCES[2]], [" ".join(SENTENCES * 12)], []]
    done: list[int] = []
    late = local_embedder.embed_late(turns, progress=done.append)
    assert late.own == [None] * 4  # not asked for
    assert sum(done) == 4 and all(n > 0 for n in done)  # every piece of every turn, after the runs
    assert late.context[3].shape == (0, 384)
    np.testing.assert_allclose(np.linalg.norm(late.context[2], axis=1), 1.0, atol=1e-5)


def test_runs_by_tokens_change_no_vector(local_embedder):
    """How texts are grouped into runs (rows and tokens per run) changes no vector: padding is masked."""
    texts = [*SENTENCES, " ".join(SENTENCES * 3), "x", "", SENTENCES[0] * 3]
    joined = " ".join(SENTENCES * 10)
    base = local_embedder.embed(texts), local_embedder.embed_tokens(joined).vectors
    for rows, tokens in ((1, 10**6), (3, 64), (32, 300)):
        other = LocalEmbedder(batch_size=rows, batch_tokens=tokens)
        np.testing.assert_array_equal(other.embed(texts), base[0])
        np.testing.assert_array_equal(other.embed_tokens(joined).vectors, base[1])


def test_token_ids_reused_from_count_tokens_change_nothing(local_embedder):
    fresh = LocalEmbedder()
    text = "A sentence the tokenizer reads once: naïve café, 日本語."
    assert fresh.count_tokens([text]) == local_embedder.count_tokens([text])
    assert text in fresh._token_cache.get([text])  # kept for the pass that follows
    np.testing.assert_array_equal(fresh.embed([text]), LocalEmbedder().embed([text]))
    assert fresh.count_tokens([""]) == [2]


def test_token_cache_is_bounded():
    cache = TextLRU(10, weigh=len)  # what LocalEmbedder keeps its token ids in, bounded in tokens
    cache.put(["a", "b"], [np.arange(6, dtype=np.uint16), np.arange(5, dtype=np.uint16)])
    assert "a" not in cache.get(["a", "b"]) and "b" in cache.get(["b"])  # the oldest went
    cache.put(["c"], [np.arange(11, dtype=np.uint16)])  # larger than the whole cache: not kept
    assert cache.get(["c"]) == {}
    cache.put(["b"], [np.arange(5, dtype=np.uint16)])  # written again: counted once
    cache.put(["d"], [np.arange(5, dtype=np.uint16)])
    assert set(cache.get(["b", "d"])) == {"b", "d"} and len(cache) == 2


def test_batch_tokens_must_be_positive():
    with pytest.raises(InputError, match="batch_tokens"):
        LocalEmbedder(batch_tokens=0)


def test_late_passes_falls_back_to_token_output(local_embedder):
    """An embedder with token output but no embed_late (a wrapper that hides it) gets the same contexts."""

    class TokensOnly:
        def __init__(self, inner):
            self.embed_tokens_many = inner.embed_tokens_many
            self.embed_tokens = inner.embed_tokens

    turns = [pieces_of(piece_texts([("alpha beta", 2), ("gamma", 0)])), pieces_of(piece_texts([("delta", 40)]))]
    done: list[int] = []
    ctx, own = late_passes(TokensOnly(local_embedder), turns, own=True, progress=done.append)
    ref, _ = late_passes(local_embedder, turns)
    for a, b in zip(ctx, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    assert own == [None, None] and sum(done) == 3


def test_the_writer_at_weight_above_zero_stores_the_piece_read_alone_blended_with_its_late_context(local_embedder):
    """context='late', weight 0.5: a one-piece turn's own vector comes from its late pass, the pieces of longer
    turns are embedded alone; either way each stored vector is blend(embed(piece), late context)."""
    from ctxret import ContextualIndex
    from ctxret.blend import blend_with_context

    messages = [
        {"role": "user", "content": "Book the train to Lyon for the 3rd of May."},
        {"role": "assistant", "content": "Booked the 9:42 to Lyon. " + " ".join(SENTENCES * 9)},
        {"role": "user", "content": "Thanks! And what time does it reach Lyon?"},  # a turn of one piece
    ]
    with ContextualIndex(in_memory=True, embedder=local_embedder, context="late", weight=0.5, progress=False) as ix:
        ix.add_messages(messages, thread_id="trip")
        stored = {r["id"]: r for r in ix.store.records(("documents", "metadatas", "embeddings"))}
        turns = {}
        for r in stored.values():
            turns.setdefault(r["metadata"]["turn_id"], []).append(r)
        assert sorted(len(v) for v in turns.values())[0] == 1 and max(len(v) for v in turns.values()) > 1
        for rows in turns.values():
            rows.sort(key=lambda r: (r["metadata"]["source_ordinal"], r["metadata"]["ordinal"]))
            texts = [r["document"] for r in rows]
            context = local_embedder.embed_late([texts]).context[0]
            expected = blend_with_context(local_embedder.embed(texts), context, 0.5)
            got = np.asarray([r["embedding"] for r in rows], dtype=np.float32)
            np.testing.assert_allclose(got, expected, atol=1e-6)  # the blend's rounding over other rows: ~1e-8
