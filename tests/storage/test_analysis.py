"""The lexical analysis indexing and querying share: stopwords and Snowball stems on top of the tokenizer."""

from __future__ import annotations

import pytest
from ctxret.storage.tokenize import (
    LUCENE_EN,
    MAX_TOKEN_CHARS,
    NLTK_EN,
    Analysis,
    analysis,
    is_question,
    normalize,
    tokenize,
    unicode_tokens,
)
from hypothesis import given, settings
from hypothesis import strategies as st

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200)
WORDS = st.lists(
    st.sampled_from(
        [
            "running",
            "ran",
            "Caroline's",
            "café",
            "東京タワー",
            "the",
            "and",
            "2023",
            "b12",
            "Москва",
            "généreux",
            "don't",
            "LGBTQ",
            "👍",
            "a",
            "is",
            "counseling",
            "What",
            "did",
            "she",
        ]
    ),
    max_size=30,
).map(" ".join)
A = analysis()


@settings(max_examples=300, deadline=None)
@given(st.one_of(TEXT, WORDS))
def test_no_text_is_lost_for_words_that_are_not_stopwords(text):
    kept = [t for t in tokenize(text) if t not in A.index_stopwords]
    out = A.index_tokens(text)
    assert len(out) == len(kept)  # one token per kept word, in order: its stem or itself
    for word, token in zip(kept, out, strict=True):
        assert token and not any(c.isspace() for c in token)
        assert token == word or word.startswith(token[:1])


@settings(max_examples=300, deadline=None)
@given(st.one_of(TEXT, WORDS), st.one_of(TEXT, WORDS))
def test_the_analysis_is_context_free(a, b):
    assert A.index_tokens(a + " " + b) == A.index_tokens(a) + A.index_tokens(b)


ASCII_ISH = st.text(alphabet=st.one_of(st.characters(max_codepoint=127), st.sampled_from("ﬁﬀÅéÉßİ²①Ⅻ́‍")), max_size=300)


@settings(max_examples=500, deadline=None)
@given(st.one_of(TEXT, WORDS, ASCII_ISH, st.text(alphabet="aZ9_-'", min_size=60, max_size=140)))
def test_the_ascii_route_gives_the_unicode_rules_tokens(text):
    """tokenize's fast route for a text that folds to ASCII (ligatures, accents, width and case folded first) gives
    exactly the tokens of the Unicode rules, long words cut at the same length."""
    assert tokenize(text) == unicode_tokens(normalize(text))


def test_the_ascii_route_by_example():
    long = "x" * (MAX_TOKEN_CHARS + 5)
    assert tokenize(f"The ﬁnal Café_Bar, e-mail 42nd {long}!") == [
        "the",
        "final",
        "cafe",
        "bar",
        "e",
        "mail",
        "42nd",
        "x" * MAX_TOKEN_CHARS,
    ]
    assert tokenize("東京 tower") == unicode_tokens(normalize("東京 tower")) == ["東", "京", "東京", "tower"]


@settings(max_examples=200, deadline=None)
@given(WORDS, st.data())
def test_indexing_and_querying_agree(doc, data):
    """A query made of a piece's own words finds it: its terms are among the piece's tokens."""
    words = doc.split()
    if not words:
        return
    i = data.draw(st.integers(0, len(words) - 1))
    j = data.draw(st.integers(i + 1, len(words)))
    query = " ".join(words[i:j]) + data.draw(st.sampled_from(["", "?", " ?"]))
    assert set(A.query_terms(query)) <= set(A.index_tokens(doc))
    assert set(A.coverage_terms(query)) <= set(A.index_tokens(doc))


def test_unspaced_and_other_scripts_pass_unchanged():
    plain = Analysis(index_stopwords=[])
    for text in ["東京タワーに行きました", "Москва бегущий", "كتب", "🎉🎉"]:
        assert plain.index_tokens(text) == tokenize(text)


def test_stems_stopwords_and_question_parts():
    assert A.index_tokens("The runners were running to Caroline's adoption agencies") == [
        "runner",
        "were",
        "run",
        "carolin",
        "s",
        "adopt",
        "agenc",
    ]
    assert A.query_terms("What did she do?") == []  # a question drops NLTK's list too
    assert A.query_terms("What did she do") == ["what", "did", "she", "do"]  # a statement keeps them
    assert A.query_terms("When did Caroline go to the LGBTQ support group?") == [
        "carolin",
        "go",
        "lgbtq",
        "support",
        "group",
    ]
    assert is_question("Where is it?") and is_question("Where is it?)") and is_question("どこ？")
    assert not is_question("Fine.")
    assert len(set(LUCENE_EN)) == 33 and set(LUCENE_EN) <= set(NLTK_EN) | {
        "such",
        "then",
        "there",
        "these",
        "they",
        "this",
        "will",
        "with",
        "into",
        "if",
        "no",
        "not",
        "their",
        "that",
    }


def test_language_is_a_setting():
    german = Analysis("german", index_stopwords=[], question_stopwords=[])
    assert german.index_tokens("Häuser laufen") == ["haus", "lauf"]
    assert Analysis(None).index_tokens("running dogs") == ["running", "dogs"]
    assert german.version != A.version != Analysis(None).version
    with pytest.raises(ValueError, match="Snowball"):
        Analysis("klingon")


def test_bm25s_agrees_on_its_own_lists():
    bm25s = pytest.importorskip("bm25s")
    from bm25s.stopwords import STOPWORDS_EN

    assert set(LUCENE_EN) == set(STOPWORDS_EN)
    del bm25s
