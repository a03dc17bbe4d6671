"""ctxret.batching: embedding requests sized before sending (DESIGN §4 "Requests")."""

from __future__ import annotations

import pytest
from ctxret import InputError, InputTooLongError
from ctxret.embedders.batching import MAX_BYTES_PER_REQUEST, MAX_INPUTS_PER_REQUEST, plan_batches, utf8_len
from hypothesis import given, settings
from hypothesis import strategies as st

PROPS = settings(max_examples=200, deadline=None)


def flatten(batches: list[list[int]]) -> list[int]:
    return [i for b in batches for i in b]


def test_limits_match_the_design():
    assert MAX_INPUTS_PER_REQUEST == 2048
    assert MAX_BYTES_PER_REQUEST == 300_000


def test_no_inputs_no_batches():
    assert plan_batches([]) == []


def test_small_inputs_fit_one_request():
    assert plan_batches(["a", "b", "c"]) == [[0, 1, 2]]


def test_input_count_limit():
    assert plan_batches(["x"] * 10, max_inputs=3) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]


def test_default_input_count_limit_is_2048():
    batches = plan_batches(["x"] * 5000)
    assert [len(b) for b in batches] == [2048, 2048, 904]
    assert flatten(batches) == list(range(5000))


def test_byte_limit_with_exact_fit():
    texts = ["0123456789"] * 7  # 10 bytes each
    assert plan_batches(texts, max_bytes=30) == [[0, 1, 2], [3, 4, 5], [6]]
    assert plan_batches(texts, max_bytes=29) == [[0, 1], [2, 3], [4, 5], [6]]


def test_default_byte_limit():
    texts = ["x" * 1200] * 600  # 720,000 bytes
    batches = plan_batches(texts)
    assert [len(b) for b in batches] == [250, 250, 100]
    assert all(sum(len(texts[i]) for i in b) <= 300_000 for b in batches)


def test_bytes_are_counted_in_utf8_not_characters():
    texts = ["中" * 10] * 4  # 10 characters, 30 bytes each
    assert plan_batches(texts, max_bytes=60) == [[0, 1], [2, 3]]
    assert plan_batches(["😀" * 5] * 3, max_bytes=40) == [[0, 1], [2]]


def test_lone_surrogates_count_as_the_replacement_character():
    # clean_text turns a lone surrogate into U+FFFD, 3 bytes: sizing must not undercount it
    assert utf8_len("\ud800") == len("\ufffd".encode("utf-8")) == 3
    assert utf8_len("a\udfffb") == 5
    with pytest.raises(InputTooLongError):
        plan_batches(["\ud800" * 10], max_bytes=29)


def test_over_size_single_input_is_refused_naming_its_index():
    texts = ["small", "b" * 101, "small"]
    with pytest.raises(InputTooLongError) as err:
        plan_batches(texts, max_bytes=100)
    msg = str(err.value)
    assert "input 1" in msg
    assert "101" in msg and "100" in msg
    assert isinstance(err.value, InputError)


def test_an_input_exactly_at_the_byte_limit_is_accepted():
    assert plan_batches(["a" * 50, "b" * 100, "c"], max_bytes=100) == [[0], [1], [2]]


@pytest.mark.parametrize("kwargs", [{"max_inputs": 0}, {"max_bytes": 0}, {"max_inputs": -1}])
def test_bad_limits_are_refused(kwargs):
    with pytest.raises(ValueError, match="positive"):
        plan_batches(["a"], **kwargs)


@PROPS
@given(
    texts=st.lists(st.text(alphabet=st.sampled_from(list("ab c中😀é")), max_size=60), max_size=80),
    max_inputs=st.integers(1, 12),
    max_bytes=st.integers(1, 400),
)
def test_property_order_kept_every_index_once_no_batch_over_limits(texts, max_inputs, max_bytes):
    sizes = [len(t.encode("utf-8")) for t in texts]
    if any(s > max_bytes for s in sizes):
        first = next(i for i, s in enumerate(sizes) if s > max_bytes)
        with pytest.raises(InputTooLongError, match=f"input {first} "):
            plan_batches(texts, max_inputs, max_bytes)
        return
    batches = plan_batches(texts, max_inputs, max_bytes)
    assert flatten(batches) == list(range(len(texts)))
    for b in batches:
        assert 1 <= len(b) <= max_inputs
        assert sum(sizes[i] for i in b) <= max_bytes
    # greedy: a batch was only closed because the next input would not fit
    for b, nxt in zip(batches, batches[1:], strict=False):
        assert len(b) == max_inputs or sum(sizes[i] for i in b) + sizes[nxt[0]] > max_bytes
