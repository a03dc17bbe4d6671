"""The lexical tokenizer that indexing and querying share.

Rules:

* NFKC, then case folding (``ß`` → ``ss``, full-width ``ＡＢＣ`` → ``abc``);
* accents removed from Latin and Greek letters (``café`` → ``cafe``, ``ά`` → ``α``); the marks
  of other scripts (Devanagari vowel signs, Thai, Arabic) stay inside their words;
* words are runs of letters, digits and marks; a word over 64 characters is cut to 64;
* scripts written without spaces (Han, kana, Hangul, Thai, Lao, Khmer, Myanmar, ...) give every
  character a token and every pair of neighbouring characters a token (unigrams + bigrams);
* each pictographic symbol (emoji, ``©``) is a token of its own; other punctuation separates.

"""

from __future__ import annotations

import functools
import hashlib
import re
import unicodedata
from collections.abc import Sequence
from typing import Any

from ..errors import InputError

__all__ = [
    "MAX_QUERY_TOKENS",
    "MAX_TOKEN_CHARS",
    "Analysis",
    "analysis",
    "is_question",
    "normalize",
    "query_tokens",
    "tokenize",
]

#: Longest token, in characters; longer words (hashes, base64) are cut to this many.
MAX_TOKEN_CHARS = 64
#: At most this many distinct query tokens are searched per query part (the first ones).
MAX_QUERY_TOKENS = 256
# Accents removed: combining diacritical marks after a Latin or Greek letter (after NFKD).
_LATIN_GREEK = (
    "A-Za-z\u00aa\u00ba\u00c0-\u024f\u0370-\u03ff\u1d00-\u1dbf\u1e00-\u1fff\u2c60-\u2c7f\ua720-\ua7ff\uab30-\uab6f"
)
_DIACRITICS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_STRIP_ACCENTS = re.compile(f"(?<=[{_LATIN_GREEK}])[{_DIACRITICS}]+")
# Scripts written without spaces between words: one token per character, plus bigrams.
_UNSPACED = (
    "\u0e00-\u0e7f\u0e80-\u0eff\u0f00-\u0fff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u19e0-\u19ff"
    "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua000-\ua4cf\ua960-\ua97f\uaa60-\uaa7f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff"
    "\uff66-\uff9f\U0001b000-\U0001b16f\U00020000-\U0003134f"
)


_ASCII_WORD = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=1)
def _patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(token pattern, unspaced-unit pattern), built once from the Unicode database."""
    marks: list[tuple[int, int]] = []
    symbols: list[tuple[int, int]] = []

    def add(ranges: list[tuple[int, int]], cp: int) -> None:
        if ranges and ranges[-1][1] == cp - 1:
            ranges[-1] = (ranges[-1][0], cp)
        else:
            ranges.append((cp, cp))

    for cp in list(range(0x20000)) + list(range(0xE0100, 0xE01F0)):
        cat = unicodedata.category(chr(cp))
        if cat[0] == "M":
            add(marks, cp)
        elif cat == "So":
            add(symbols, cp)

    def cls(ranges: list[tuple[int, int]]) -> str:
        return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)

    m, so = cls(marks), cls(symbols)
    # A word starts with a letter or digit and goes on with letters, digits and marks; a symbol is one token.
    token = re.compile(f"[^\\W_](?:[^\\W_]|[{m}])*|[{so}]")
    unit = re.compile(f"[{_UNSPACED}][{m}]*")
    return token, unit


def normalize(text: str) -> str:
    """NFKC, case-folded, accents removed from Latin and Greek letters."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if not text.isascii():
        text = unicodedata.normalize("NFC", _STRIP_ACCENTS.sub("", unicodedata.normalize("NFKD", text)))
    return text


def tokenize(text: str) -> list[str]:
    """Lexical tokens of ``text`` in order, repeats kept (see the module docstring).

    Never raises on any ``str`` (lone surrogates, control characters, emoji included); every
    token is non-empty and free of whitespace.
    """
    if not isinstance(text, str):
        raise InputError(f"tokenize expects a string, got {type(text).__name__}")
    folded = normalize(text)
    if folded.isascii():
        return _ascii_tokens(folded)
    # A token never crosses white space, so the ASCII words around one that holds a non-ASCII character (a label's
    # "·", a name's accent that did not fold) take the fast route too; only that word takes the Unicode rules.
    tokens: list[str] = []
    ascii_run: list[str] = []
    for word in folded.split():
        if word.isascii():
            ascii_run.append(word)
            continue
        if ascii_run:
            tokens.extend(_ascii_tokens(" ".join(ascii_run)))
            ascii_run = []
        tokens.extend(unicode_tokens(word))
    if ascii_run:
        tokens.extend(_ascii_tokens(" ".join(ascii_run)))
    return tokens


def _ascii_tokens(folded: str) -> list[str]:
    """An ASCII folded text's tokens: no marks, no "So" symbols, no unspaced script and lower case, so a word is a
    run of letters and digits, exactly what :func:`unicode_tokens` finds in it, found much faster."""
    return [word[:MAX_TOKEN_CHARS] for word in _ASCII_WORD.findall(folded)]


def unicode_tokens(folded: str) -> list[str]:
    """The tokens of an already :func:`normalize`-d text by the Unicode rules (any text; :func:`tokenize` takes a
    faster route to the same tokens when the folded text is ASCII)."""
    token_re, unit_re = _patterns()
    tokens: list[str] = []
    for word in token_re.findall(folded):
        units = unit_re.findall(word) if not word.isascii() else []
        if not units:
            tokens.append(word[:MAX_TOKEN_CHARS])
            continue
        # Split the word into runs of unspaced-script characters (unigrams + bigrams) and the rest.
        pos = 0
        run: list[str] = []
        for match in unit_re.finditer(word):
            if match.start() > pos:  # other characters between: they end a run
                _emit_run(tokens, run)
                run = []
                tokens.append(word[pos : match.start()][:MAX_TOKEN_CHARS])
            run.append(match.group())
            pos = match.end()
        _emit_run(tokens, run)
        if pos < len(word):
            tokens.append(word[pos:][:MAX_TOKEN_CHARS])
    return tokens


def _emit_run(tokens: list[str], run: list[str]) -> None:
    tokens.extend(u[:MAX_TOKEN_CHARS] for u in run)
    tokens.extend((a + b)[:MAX_TOKEN_CHARS] for a, b in zip(run, run[1:], strict=False))


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in first-seen order, at most :data:`MAX_QUERY_TOKENS`."""
    return list(dict.fromkeys(tokenize(text)))[:MAX_QUERY_TOKENS]


# -- the analysis: stopwords and Snowball stemming on top of tokenize() ----------------------------
#: Lucene's English stop set (bm25s ``stopwords="en"``, what LlamaIndex's BM25Retriever uses): removed at index time.
LUCENE_EN = (
    "a an and are as at be but by for if in into is it no not of on or such that the their then "
    "there these they this to was will with"
).split()
#: NLTK's English stopwords (bm25s ``"en_plus"``): removed from a query part that is a question. Question
#: scaffolding and pronouns ("when", "did", "she", "have") sit in fewer than half the pieces, so BM25's
#: idf gives them weight; dropping them from questions is measured to lift QA recall (BENCHMARKS.md).
NLTK_EN = (
    "a about above after again against ain all am an and any are aren as at be because been before "
    "being below between both but by can couldn d did didn do does doesn doing don down during each "
    "few for from further had hadn has hasn have haven having he her here hers herself him himself his "
    "how i if in into is isn it its itself just ll m ma me mightn more most mustn my myself needn no nor "
    "not now o of off on once only or other our ours ourselves out over own re s same shan she should "
    "shouldn so some such t than that the their theirs them themselves then there these they this those "
    "through to too under until up ve very was wasn we were weren what when where which while who whom "
    "why will with won wouldn y you your yours yourself yourselves"
).split()
_LATIN = "a-z\u00df-\u00f6\u00f8-\u00ff\u0100-\u024f"
#: Letters each Snowball language's stemmer handles (after normalize()); other tokens are never stemmed.
SCRIPTS: dict[str, str] = {
    **dict.fromkeys(
        (
            "english",
            "porter",
            "danish",
            "dutch",
            "dutch_porter",
            "finnish",
            "french",
            "german",
            "hungarian",
            "indonesian",
            "irish",
            "italian",
            "norwegian",
            "portuguese",
            "romanian",
            "spanish",
            "swedish",
            "turkish",
            "catalan",
            "basque",
            "czech",
            "estonian",
            "lithuanian",
            "polish",
            "esperanto",
        ),
        _LATIN,
    ),
    "russian": "\u0430-\u044f\u0451",
    "serbian": "\u0430-\u044f\u0452-\u045f" + _LATIN,
    "greek": "\u03b1-\u03c9\u03c2",
    "arabic": "\u0621-\u064a\u0660-\u0669\u0671-\u06d3",
    "armenian": "\u0561-\u0587",
    "hindi": "\u0900-\u097f",
    "nepali": "\u0900-\u097f",
    "tamil": "\u0b80-\u0bff",
    "yiddish": "\u05d0-\u05ea\u05f0-\u05f4\u05b0-\u05c7",
}
_QUESTION_END = re.compile(r"[?\uff1f\u061f\u037e][\"'\u201d\u2019\u00bb)\]\s]*$")


def is_question(part: str) -> bool:
    """Whether a query part is a question: it ends with a question mark (closing quotes/brackets aside)."""
    return bool(_QUESTION_END.search(part))


#: Query parts whose terms an :class:`Analysis` keeps (a search asks for each part's terms several times).
_RECENT_PARTS = 1024


class Analysis:
    """What BM25 indexes and searches: :func:`tokenize`, minus stopwords, Snowball-stemmed where the script fits.

    * index time (:meth:`index_tokens`): ``index_stopwords`` removed (Lucene's 33 by default), then
      every token made only of the language's letters is replaced by its stem (PyStemmer); digits,
      codes (``b12``), CJK unigrams and bigrams, other scripts and symbols pass unchanged;
    * query time (:meth:`query_terms`): the same, and for a question part also ``question_stopwords``
      (NLTK's 179 by default), distinct, in first-seen order, at most :data:`MAX_QUERY_TOKENS`.

    No text is lost: every base token that is not a stopword gives exactly one token (its stem, or
    itself), in order; the analysis is context-free, so indexing and querying agree. ``language=None``
    turns stemming off. :attr:`version` names the settings; an index written under another version is
    refilled from the stored texts.
    """

    def __init__(
        self,
        language: str | None = "english",
        index_stopwords: Sequence[str] | None = None,
        question_stopwords: Sequence[str] | None = None,
    ) -> None:
        self.language = language
        self.index_stopwords = frozenset(_single_tokens(LUCENE_EN if index_stopwords is None else index_stopwords))
        self.question_stopwords = self.index_stopwords | frozenset(
            _single_tokens(NLTK_EN if question_stopwords is None else question_stopwords)
        )
        self._stem: Any = None
        self._stemmable: Any = None
        self._recent: dict[tuple[str, str], tuple[str, ...]] = {}  # a search's parts -> their terms
        if language is not None:
            try:
                import Stemmer  # PyStemmer
            except ImportError as e:  # pragma: no cover - a dependency of ctxret
                raise InputError(
                    "stemming needs the PyStemmer package: pip install PyStemmer (or language=None)"
                ) from e
            if language not in Stemmer.algorithms():
                raise InputError(
                    f"no Snowball stemmer for language {language!r}; "
                    f"choose one of {sorted(Stemmer.algorithms())} or None"
                )
            self._stem = Stemmer.Stemmer(language).stemWords
            self._stemmable = re.compile(f"[{SCRIPTS.get(language, _LATIN)}]+").fullmatch
        digest = hashlib.sha256(
            "|".join([",".join(sorted(self.index_stopwords)), ",".join(sorted(self.question_stopwords))]).encode()
        ).hexdigest()[:8]
        self.version = f"snowball-{language or 'none'}-{digest}"

    def __repr__(self) -> str:
        return f"Analysis({self.version})"

    def _analyse(self, text: str, stop: frozenset[str]) -> list[str]:
        toks = [t for t in tokenize(text) if t not in stop]
        if self._stem is None or not toks:
            return toks
        idx = [i for i, t in enumerate(toks) if self._stemmable(t)]
        if idx:
            for i, stem in zip(idx, self._stem([toks[i] for i in idx]), strict=False):
                if stem:
                    toks[i] = stem
        return toks

    def index_tokens(self, text: str) -> list[str]:
        """The tokens a piece is indexed under, in order, repeats kept."""
        return self._analyse(text, self.index_stopwords)

    def query_terms(self, part: str) -> list[str]:
        """The distinct terms a query part searches for (questions also drop ``question_stopwords``)."""
        key = ("query", part)
        terms = self._recent.get(key)
        if terms is None:
            stop = self.question_stopwords if is_question(part) else self.index_stopwords
            terms = self._remember(key, tuple(dict.fromkeys(self._analyse(part, stop)))[:MAX_QUERY_TOKENS])
        return list(terms)

    def coverage_terms(self, part: str) -> list[str]:
        """The distinct terms of a part under the index analysis (the floor rule's lexical evidence)."""
        key = ("coverage", part)
        terms = self._recent.get(key)
        if terms is None:
            terms = self._remember(key, tuple(dict.fromkeys(self.index_tokens(part)))[:MAX_QUERY_TOKENS])
        return list(terms)

    def _remember(self, key: tuple[str, str], terms: tuple[str, ...]) -> tuple[str, ...]:
        """Keep a part's terms: one search asks for them several times (its lists, the scores of
        dense hits, the coverage of candidates). At most :data:`_RECENT_PARTS` parts are kept."""
        if len(self._recent) >= _RECENT_PARTS:
            self._recent.clear()
        self._recent[key] = terms
        return terms


def _single_tokens(words: Sequence[str]) -> list[str]:
    """Stopwords as :func:`tokenize` sees them (a word it splits, like "don't", cannot match one token)."""
    out = []
    for w in words:
        toks = tokenize(str(w))
        if len(toks) == 1:
            out.append(toks[0])
    return out


@functools.lru_cache(maxsize=16)
def analysis(language: str | None = "english") -> Analysis:
    """The shared :class:`Analysis` of a language (default stopword lists)."""
    return Analysis(language)
