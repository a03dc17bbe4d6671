"""The hashing embedder: deterministic, unit rows, lexically similar texts near, the late-chunking path."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.embedders.base import Embedder, check_vectors
from ctxret.embedders.hashing import HashEmbedder


def test_it_is_an_embedder_with_unit_float32_rows():
    e = HashEmbedder()
    assert isinstance(e, Embedder)
    assert (e.model_id, e.dims, e.max_tokens) == ("hash:256", 256, 512)
    v = e.embed(["Miso and Tofu are my cats.", "", "  \n", "!!!"])
    check_vectors(v, 4, 256, e.model_id)
    assert v.dtype == np.float32
    assert np.isclose(np.linalg.norm(v[0]), 1.0)
    assert not v[1:].any()  # no words: a zero row


def test_lexically_similar_texts_are_nearer_than_unrelated_ones():
    e = HashEmbedder()
    cats, cat, hotel = e.embed(["the cats Miso and Tofu", "my cat is called Miso", "book a hotel in Lisbon"])
    assert cats @ cat > 0.25 > cats @ hotel
    assert np.allclose(e.embed(["Cats, MISO!"]), e.embed(["cats miso"]))  # case and punctuation do not count


def test_the_same_vectors_in_another_process():
    """BLAKE2b, not Python's salted ``hash``: another interpreter gives the same bytes."""
    code = (
        "from ctxret.embedders.hashing import HashEmbedder\n"
        "print(HashEmbedder(64).embed(['Lisbon hotel']).tobytes().hex())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == HashEmbedder(64).embed(["Lisbon hotel"]).tobytes().hex()


def test_dims_name_the_model_and_bad_arguments_say_so():
    assert HashEmbedder(64).model_id == "hash:64" and HashEmbedder(64).embed(["x"]).shape == (1, 64)
    with pytest.raises(ValueError, match="dims must be an int"):
        HashEmbedder(1)
    with pytest.raises(ValueError, match="max_tokens"):
        HashEmbedder(max_tokens=0)
    with pytest.raises(TypeError, match="embed\\(\\[text\\]\\)"):
        HashEmbedder().embed("one string")


async def test_aembed_is_embed():
    e = HashEmbedder()
    assert np.array_equal(await e.aembed(["a b", "c"]), e.embed(["a b", "c"]))


def test_count_tokens_counts_words_and_marks():
    assert HashEmbedder().count_tokens(["Hello, world!", "", "a b c"]) == [4, 0, 3]


def test_late_chunking_leans_each_piece_toward_its_turn():
    e = HashEmbedder()
    turns = [["Miso is grey.", "Tofu is white."], ["Book the Lisbon hotel."]]
    seen = []
    late = e.embed_late(turns, own=True, progress=seen.append)
    assert seen == [2, 1] and late.tokens == sum(e.count_tokens([t for turn in turns for t in turn]))
    assert [c.shape for c in late.context] == [(2, 256), (1, 256)]
    assert np.allclose(np.linalg.norm(late.context[0], axis=1), 1.0)
    alone = e.embed(["Miso is grey.", "Tofu is white."])
    # each piece read in its turn is nearer the other piece than the piece read alone is
    assert late.context[0][0] @ alone[1] > alone[0] @ alone[1]
    assert late.own[0] is None and np.allclose(late.own[1], e.embed(["Book the Lisbon hotel."]))
    assert e.embed_late(turns).own == [None, None]


def test_an_index_writes_and_finds_with_it(tmp_path):
    with ContextualIndex(tmp_path / "store", embedder=HashEmbedder(), progress=False) as index:
        assert index.config.context == "late" and index.config.model_id == "hash:256"
        index.add_messages(
            [
                {"role": "user", "content": "My cats are called Miso and Tofu."},
                {"role": "assistant", "content": "Noted."},
            ],
            thread_id="pets",
        )
        index.add_messages([{"role": "user", "content": "Book a hotel in Lisbon."}], thread_id="travel")
        (group,) = index.search("what are my cats called?", k=1)
        assert "Miso" in group.hits[0].text
    with pytest.raises(Exception, match="model_id"):  # another size: refused, not searched with
        with ContextualIndex(tmp_path / "store", embedder=HashEmbedder(64), progress=False) as other:
            other.search("cats")
