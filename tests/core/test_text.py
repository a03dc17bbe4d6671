"""ctxret.text: cleaning, the query splitter, the UTF-8 tail cap, the sentence packer (DESIGN §4, §6) and the text
given back exactly from its packed pieces."""

from __future__ import annotations

import json
import re

import pytest
from ctxret import InputError
from ctxret.query.split import LONG_PART_WORDS, MIN_PART_CHARS, WINDOW_WORDS, split_prompt_chunks
from ctxret.text import (
    MAX_PARTS,
    MIN_PIECE_BYTES,
    PIECE_MAX_BYTES,
    WHOLE_MESSAGE_MAX_BYTES,
    clean_text,
    cut_within_bytes,
    exact_patches,
    pack_text_pieces,
    restore_text,
    tail_utf8,
)
from hypothesis import given, settings
from hypothesis import strategies as st

PROPS = settings(max_examples=150, deadline=None)


def nonws(text: str) -> str:
    return "".join(c for c in text if not c.isspace())


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


_CJK_END = re.compile(
    "[\u3002\uff01\uff1f\uff61]"  # a CJK full stop, exclamation or question mark
    "[\u3002\uff01\uff1f\uff61!?\"'\u201d\u2019\u00bb\u300d\u300f\uff09)\\]}\u203a]*$"  # closing marks after it
)


def words_kept(parts: list[str], text: str) -> bool:
    """Every whitespace-separated word of ``text``, in order; a word may be cut only right after a
    CJK sentence end (``。！？``), which needs no space after it."""
    got = " ".join(parts).split()
    i = 0
    for word in text.split():
        acc = ""
        while acc != word:
            if i >= len(got) or not word.startswith(acc + got[i]):
                return False
            if acc and not _CJK_END.search(acc):
                return False
            acc += got[i]
            i += 1
    return i == len(got)


def words(n: int, prefix: str = "w") -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(n)]


def sentence_of(n_chars: int, end: str = ".") -> str:
    """A sentence of exactly ``n_chars`` characters (ending with ``end``), no inner line breaks."""
    body = ("lorem ipsum dolor sit amet consectetur adipiscing elit " * 20)[: n_chars - 1].rstrip()
    body = body + "x" * (n_chars - 1 - len(body))
    s = body + end
    assert len(s) == n_chars
    return s


# --------------------------------------------------------------------------- constants


def test_constants_match_the_design():
    assert LONG_PART_WORDS == 60
    assert WINDOW_WORDS == 40
    assert MIN_PART_CHARS == 24
    assert MAX_PARTS == 8
    assert WHOLE_MESSAGE_MAX_BYTES == 8000
    assert PIECE_MAX_BYTES == 1200


# --------------------------------------------------------------------------- clean_text


def test_clean_text_keeps_ordinary_text_tabs_and_line_breaks():
    text = "Hello\tworld\nsecond line\r\nthird — 中文 😀 «ok»\u2028next"
    assert clean_text(text) == text


def test_clean_text_replaces_control_characters_with_spaces():
    assert clean_text("a\x00b\x07c\x1bd\x7fe\x9bf") == "a b c d e f"


def test_clean_text_replaces_lone_surrogates():
    out = clean_text("abc\ud800def\udfffg")
    assert out == "abc\ufffddef\ufffdg"
    out.encode("utf-8")  # must not raise


def test_clean_text_refuses_non_strings():
    with pytest.raises(InputError, match="str"):
        clean_text(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="NoneType"):
        clean_text(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- split_prompt_chunks


@pytest.mark.parametrize("message", ["", " ", "   \n\t \r\n ", "\u3000\xa0\n"])
def test_splitter_empty_or_whitespace_gives_no_parts(message):
    assert split_prompt_chunks(message) == []


def test_splitter_splits_on_line_breaks_and_after_sentence_ends():
    a = "This is the first sentence of it."
    b = "Where is the second sentence here?"  # a question that leans on the sentence before ("Is this ...?") joins it
    c = "Yes and this is the third one!"
    d = "A fourth line without punctuation"
    assert split_prompt_chunks(f"{a} {b}  {c}\n{d}") == [a, b, c, d]


def test_splitter_does_not_split_inside_a_token():
    msg = "Version 1.2.3 of the tool is installed on host example.com today"
    assert split_prompt_chunks(msg) == [msg]


def test_splitter_collapses_whitespace():
    assert split_prompt_chunks("many   spaces\tand\u3000tabs in this one line") == [
        "many spaces and tabs in this one line"
    ]


def test_splitter_sixty_words_stay_whole():
    sentence = " ".join(words(60))
    assert split_prompt_chunks(sentence) == [sentence]


def test_splitter_sixty_one_words_become_windows_of_40_and_21():
    w = words(61)
    parts = split_prompt_chunks(" ".join(w))
    assert [len(p.split()) for p in parts] == [40, 21]
    assert parts == [" ".join(w[:40]), " ".join(w[40:])]


def test_splitter_long_transcript_windows_then_short_tail_joins():
    # 121 words -> windows 40, 40, 40, 1; the 1-word window is under 24 characters and joins.
    w = words(121)
    parts = split_prompt_chunks(" ".join(w))
    assert [len(p.split()) for p in parts] == [40, 40, 41]
    assert " ".join(parts).split() == w


def test_splitter_23_characters_join_the_piece_before():
    first = sentence_of(40)
    short = sentence_of(23)
    assert split_prompt_chunks(f"{first} {short}") == [f"{first} {short}"]


def test_splitter_24_characters_stay_on_their_own():
    first = sentence_of(40)
    ok = sentence_of(24)
    assert split_prompt_chunks(f"{first} {ok}") == [first, ok]


def test_splitter_short_pieces_chain_onto_the_previous_one():
    first = sentence_of(40)
    assert split_prompt_chunks(f"{first} Yes. No. Maybe.") == [f"{first} Yes. No. Maybe."]


def test_splitter_short_first_piece_joins_the_piece_after():
    long = sentence_of(40)
    assert split_prompt_chunks(f"Hi!\n{long}") == [f"Hi! {long}"]


def test_splitter_a_lone_short_message_is_one_part():
    assert split_prompt_chunks("Or anything about them?") == ["Or anything about them?"]


def test_splitter_twenty_sentences_become_eight_runs_in_order():
    sentences = [f"This is sentence number {i:02d} of the message." for i in range(20)]
    assert all(len(s) >= MIN_PART_CHARS for s in sentences)
    parts = split_prompt_chunks(" ".join(sentences))
    assert len(parts) == 8
    # 20 = 8 * 2 + 4: the first four runs get the extra sentence.
    assert [p.count("sentence number") for p in parts] == [3, 3, 3, 3, 2, 2, 2, 2]
    assert " ".join(parts) == " ".join(sentences)


def test_splitter_exactly_eight_pieces_are_not_merged():
    sentences = [f"This is sentence number {i:02d} of the message." for i in range(8)]
    assert split_prompt_chunks("\n".join(sentences)) == sentences


@pytest.mark.parametrize("max_parts", [1, 2, 3, 5, 20])
def test_splitter_max_parts(max_parts):
    sentences = [f"This is sentence number {i:02d} of the message." for i in range(10)]
    parts = split_prompt_chunks(" ".join(sentences), max_parts=max_parts)
    assert len(parts) == min(max_parts, 10)
    assert " ".join(parts) == " ".join(sentences)


def test_splitter_refuses_max_parts_below_one():
    with pytest.raises(InputError, match="max_parts"):
        split_prompt_chunks("Some message here that is long enough.", max_parts=0)


def test_splitter_refuses_non_strings():
    with pytest.raises(InputError, match="str"):
        split_prompt_chunks(["a list"])  # type: ignore[arg-type]


def test_splitter_long_unpunctuated_voice_transcript_is_searched_everywhere():
    w = words(1000)
    parts = split_prompt_chunks(" ".join(w))
    assert len(parts) == 8
    assert " ".join(parts).split() == w


def test_splitter_cjk_and_emoji():
    msg = "我的狗叫什么名字？它们喜欢在公园里玩耍。\nWhat are my dogs called again? 🐶🐶 They love the park!"
    parts = split_prompt_chunks(msg)
    assert 1 <= len(parts) <= 8
    assert words_kept(parts, msg)


def test_splitter_control_characters_and_surrogates():
    parts = split_prompt_chunks("first\x00part of a message\ud800 here. And the second sentence follows!")
    assert parts == ["first part of a message\ufffd here.", "And the second sentence follows!"]
    for p in parts:
        p.encode("utf-8")


# --------------------------------------------------------------------------- tail_utf8


def test_tail_short_text_is_unchanged():
    assert tail_utf8("hello") == "hello"
    assert tail_utf8("") == ""


def test_tail_default_cap_is_8000_bytes_keeping_the_end():
    text = "".join(str(i % 10) for i in range(9000))
    out = tail_utf8(text)
    assert out == text[-8000:]


def test_tail_cjk_three_byte_chars_with_a_cap_not_a_multiple_of_three():
    text = "中文字符测试"  # 6 chars, 18 bytes
    assert tail_utf8(text, 10) == "符测试"  # 9 bytes; a 4th char would need 12
    assert tail_utf8(text, 9) == "符测试"
    assert tail_utf8(text, 8) == "测试"
    assert tail_utf8(text, 2) == ""
    assert tail_utf8(text, 0) == ""


def test_tail_default_cap_on_long_cjk_text():
    text = "中" * 3000  # 9,000 bytes
    out = tail_utf8(text)
    assert out == "中" * 2666  # 7,998 bytes: 2,667 chars would be 8,001
    assert nbytes(out) <= 8000


def test_tail_mixed_widths_and_emoji():
    assert tail_utf8("a中b", 4) == "中b"
    assert tail_utf8("a中b", 3) == "b"
    assert tail_utf8("x😀y", 5) == "😀y"
    assert tail_utf8("x😀y", 4) == "y"


def test_tail_refuses_a_negative_cap():
    with pytest.raises(InputError, match="max_bytes"):
        tail_utf8("abc", -1)


def test_tail_lone_surrogate_gives_valid_utf8():
    out = tail_utf8("abc\ud800", 4)
    assert out == "c\ufffd"
    out.encode("utf-8")


_text = st.text(
    alphabet=st.one_of(
        st.characters(),
        st.sampled_from(list("中文字符測試日本語한국어😀🐶🎉👍🏽.!?,;:—«»")),
        st.sampled_from([" ", "\n", "\t", "\r", "\u3000", "\xa0", "\u2028", "\x85"]),
    ),
    max_size=200,
)


@PROPS
@given(text=_text, cap=st.integers(0, 120))
def test_tail_property(text, cap):
    out = tail_utf8(text, cap)
    full = clean_text(text)
    data = out.encode("utf-8")  # valid UTF-8
    assert len(data) <= cap
    assert full.endswith(out)
    if out != full:
        # the longest such suffix: one more character would not fit
        longer = full[len(full) - len(out) - 1 :]
        assert nbytes(longer) > cap


# --------------------------------------------------------------------------- cut_within_bytes (internal)


def test_cut_within_bytes_at_the_last_word_that_fits():
    assert cut_within_bytes("aaaa bbbb cccc dddd", 16) == ["aaaa bbbb cccc", "dddd"]
    # a space exactly at the budget: the first run uses the whole budget
    assert cut_within_bytes("a" * 16 + " b", 16) == ["a" * 16, "b"]


def test_cut_within_bytes_single_word_at_character_boundaries():
    assert cut_within_bytes("x" * 40, 16) == ["x" * 16, "x" * 16, "x" * 8]
    assert cut_within_bytes("中" * 10, 16) == ["中" * 5, "中" * 5]
    assert cut_within_bytes("😀" * 5, 17) == ["😀" * 4, "😀"]


# --------------------------------------------------------------------------- pack_text_pieces


@pytest.mark.parametrize("text", ["", " ", "\n\n\t  \r\n", "\u3000"])
def test_pack_empty_or_whitespace_gives_no_pieces(text):
    assert pack_text_pieces(text) == []


def test_pack_joiners_newline_between_lines_space_between_sentences():
    text = "First line here.\nSecond line. Third sentence!\n\n\nFourth? Yes."
    assert pack_text_pieces(text) == ["First line here.\nSecond line. Third sentence!\nFourth? Yes."]


def test_pack_collapses_whitespace_and_line_break_kinds():
    text = "a   b\t\tc\r\nd\u2028e  \u3000 f"
    assert pack_text_pieces(text) == ["a b c\nd\ne f"]


def test_pack_fills_up_to_the_budget_exactly_then_starts_a_new_piece():
    s = "Aaaaaaaaa."  # 10 bytes
    # 10 + 1 + 10 + 1 + 10 = 32: three sentences fill 32 bytes exactly; the fourth starts a piece.
    assert pack_text_pieces(" ".join([s] * 4), 32) == [" ".join([s] * 3), s]
    assert pack_text_pieces(" ".join([s] * 4), 31) == [" ".join([s] * 2), " ".join([s] * 2)]


def test_pack_new_piece_never_starts_with_a_joiner():
    pieces = pack_text_pieces("Aaaaaaaaa.\nBbbbbbbbb.\nCcccccccc.", 21)
    assert pieces == ["Aaaaaaaaa.\nBbbbbbbbb.", "Ccccccccc."]


def test_pack_over_budget_sentence_cut_at_the_last_word_that_fits():
    assert pack_text_pieces("aaaa bbbb cccc dddd", 16) == ["aaaa bbbb cccc", "dddd"]
    assert pack_text_pieces("aaaa bbbb cccc dd", 16) == ["aaaa bbbb cccc", "dd"]


def test_pack_over_budget_sentence_after_a_short_one():
    assert pack_text_pieces("Hi. aaaa bbbb cccc dddd eeee", 16) == ["Hi.", "aaaa bbbb cccc", "dddd eeee"]


def test_pack_single_word_over_budget_cut_at_character_boundaries():
    assert pack_text_pieces("x" * 40, 16) == ["x" * 16, "x" * 16, "x" * 8]
    assert pack_text_pieces("中" * 10, 16) == ["中" * 5, "中" * 5]  # 15 bytes each, never 16
    assert pack_text_pieces("😀" * 5, 17) == ["😀" * 4, "😀"]
    mixed = "é" * 9  # 18 bytes of 2-byte characters
    assert pack_text_pieces(mixed, 17) == ["é" * 8, "é"]


def test_pack_refuses_a_budget_below_the_minimum():
    with pytest.raises(InputError, match="max_bytes"):
        pack_text_pieces("some text", MIN_PIECE_BYTES - 1)


def test_pack_refuses_non_strings():
    with pytest.raises(InputError, match="str"):
        pack_text_pieces(12345)  # type: ignore[arg-type]


def test_pack_control_characters_and_lone_surrogates():
    pieces = pack_text_pieces("tab\tand nul\x00 and bell\x07 and surrogate \ud83d here.", 64)
    assert pieces == ["tab and nul and bell and surrogate \ufffd here."]
    for p in pieces:
        p.encode("utf-8")
        assert not any(ord(c) < 32 and c != "\n" for c in p)


def test_pack_ten_megabytes_without_punctuation():
    unit_text = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod "
    text = unit_text * (10_000_000 // len(unit_text) + 1)
    assert len(text) >= 10_000_000
    pieces = pack_text_pieces(text)
    assert all(nbytes(p) <= PIECE_MAX_BYTES for p in pieces)
    assert all(p and p == p.strip() for p in pieces)
    assert "".join(pieces).replace(" ", "") == nonws(text)
    assert len(pieces) >= len(text) // PIECE_MAX_BYTES


def test_pack_two_megabytes_in_one_word():
    text = "abc中😀" * 200_000  # no whitespace at all: cut at character boundaries only
    pieces = pack_text_pieces(text, 1000)
    assert all(nbytes(p) <= 1000 for p in pieces)
    assert "".join(pieces) == text


@pytest.mark.slow  # ten megabytes: the full suite's
def test_splitter_ten_megabytes_without_punctuation():
    unit_text = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod "
    text = unit_text * (10_000_000 // len(unit_text) + 1)
    parts = split_prompt_chunks(text)
    assert len(parts) == 8
    assert " ".join(parts) == text.strip()


_packer_text = st.one_of(
    _text,
    st.lists(
        st.one_of(
            st.text(alphabet=st.sampled_from(list("abcxyz中文測試😀🐶é")), min_size=1, max_size=120),
            st.sampled_from([" ", "  ", "\n", "\n\n", "\t", ". ", "! ", "? ", ".\n", "\x00", "\ud800", "\u3000"]),
        ),
        max_size=60,
    ).map("".join),
)


@PROPS
@given(text=_packer_text, max_bytes=st.integers(16, 400))
def test_pack_property_nothing_dropped_and_every_piece_within_budget(text, max_bytes):
    pieces = pack_text_pieces(text, max_bytes)
    for p in pieces:
        assert p and p == p.strip()
        assert nbytes(p) <= max_bytes
    # every non-whitespace character of the (cleaned) input is in exactly one piece, in order
    assert nonws("".join(pieces)) == nonws(clean_text(text))
    assert (pieces == []) == (nonws(clean_text(text)) == "")


@PROPS
@given(text=_packer_text, max_parts=st.integers(1, 10))
def test_splitter_property(text, max_parts):
    parts = split_prompt_chunks(text, max_parts=max_parts)
    cleaned = clean_text(text)
    if nonws(cleaned) == "":
        assert parts == []
        return
    assert 1 <= len(parts) <= max_parts
    for p in parts:
        assert p and p == p.strip()
        assert "\n" not in p
    # every word of the message, in order; a word is only cut after a CJK sentence end
    assert words_kept(parts, cleaned)


def test_splitter_cuts_after_a_cjk_sentence_end_without_a_space():
    # Changed from the seed's rule, which only cut after ".!?" + whitespace: CJK text has no spaces.
    msg = "VPNは落ちていますか？ランブックはどこですか？"
    parts = split_prompt_chunks(msg)
    assert parts == ["VPNは落ちていますか？", "ランブックはどこですか？"]
    assert words_kept(parts, msg)
    assert not words_kept(["VPNは落ち", "ていますか？ランブックはどこですか？"], msg)


@PROPS
@given(text=_packer_text)
def test_splitter_property_default_is_at_most_eight(text):
    parts = split_prompt_chunks(text)
    assert len(parts) <= 8
    assert (parts == []) == (nonws(clean_text(text)) == "")


# -- the text exactly as given -----------------------------------------------------------------------------------
_WHITESPACE = st.sampled_from([" ", "  ", "\n", "\n\n", "\t", " \n ", "\r\n", "\u00a0", "\u2028", "\x1f", " " * 40])
_WORDS = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@st.composite
def _spaced_texts(draw):
    """Texts made of words and whitespace runs of every kind (leading, trailing, blank lines, long runs)."""
    parts = draw(st.lists(st.one_of(_WORDS, _WHITESPACE, st.just("Ende. "), st.just("\x1b[31m")), max_size=40))
    return "".join(parts)


@given(st.one_of(st.text(max_size=400), _spaced_texts()), st.integers(min_value=16, max_value=200))
@settings(max_examples=300, deadline=None)
def test_the_packed_pieces_give_back_the_text_exactly(text, budget):
    bodies = pack_text_pieces(text, budget)
    if not bodies:
        return
    patches = exact_patches(text, bodies)
    assert len(patches) == len(bodies) and restore_text(bodies, patches) == text
    assert restore_text(bodies, [None] * len(bodies)) == "\n".join(bodies)  # a store written before: the packed text
    repacked = [b for body in bodies for b in pack_text_pieces(body, max(16, budget // 2))]  # fit_pieces re-packs
    assert restore_text(repacked, exact_patches(text, repacked)) == text


def test_a_patch_is_only_where_the_text_differs_and_stays_small():
    plain = "Booked TAP flight TP 541. It departs at 09:40 on October 20."
    assert exact_patches(plain, pack_text_pieces(plain, 100)) == [None]
    assert exact_patches(plain, pack_text_pieces(plain, 40)) == [None, '{"g":[[0," "]]}']  # a space, not a newline
    given = "Booked TAP flight TP 541.\n" + " " * 100_000 + "\n\n\x1b[1mIt departs at 09:40.\x1b[0m  \n"
    bodies = pack_text_pieces(given, 1200)
    patches = exact_patches(given, bodies)
    assert restore_text(bodies, patches) == given and sum(len(p or "") for p in patches) < 120
    tool = json.dumps({"rows": [{"id": i, "name": f"item {i}", "tags": ["a", "b"]} for i in range(4000)]}, indent=2)
    bodies = pack_text_pieces(tool, 1200)
    patches = exact_patches(tool, bodies)
    assert restore_text(bodies, patches) == tool
    assert sum(len(p or "") for p in patches) < len(tool) // 2  # the indentation, not the text
    assert exact_patches("other text", pack_text_pieces(tool, 1200)[:2]) == [None, None]  # not its bodies: none
