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
import re
import unicodedata

from ..errors import InputError

__all__ = ["MAX_QUERY_TOKENS", "MAX_TOKEN_CHARS", "normalize", "query_tokens", "tokenize"]

#: Longest token, in characters; longer words (hashes, base64) are cut to this many.
MAX_TOKEN_CHARS = 64
#: At most this many distinct query tokens are searched per query part (the first ones).
MAX_QUERY_TOKENS = 256
# Accents removed: combining diacritical marks after a Latin or Greek letter (after NFKD).
_LATIN_GREEK = "A-Za-z\u00aa\u00ba\u00c0-\u024f\u0370-\u03ff\u1d00-\u1dbf\u1e00-\u1fff\u2c60-\u2c7f\ua720-\ua7ff\uab30-\uab6f"
_DIACRITICS = "\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f"
_STRIP_ACCENTS = re.compile(f"(?<=[{_LATIN_GREEK}])[{_DIACRITICS}]+")
# Scripts written without spaces between words: one token per character, plus bigrams.
_UNSPACED = (
    "\u0e00-\u0e7f\u0e80-\u0eff\u0f00-\u0fff\u1000-\u109f\u1100-\u11ff\u1780-\u17ff\u19e0-\u19ff"
    "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff\u31f0-\u31ff\u3400-\u4dbf"
    "\u4e00-\u9fff\ua000-\ua4cf\ua960-\ua97f\uaa60-\uaa7f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff"
    "\uff66-\uff9f\U0001b000-\U0001b16f\U00020000-\U0003134f"
)


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
    token_re, unit_re = _patterns()
    tokens: list[str] = []
    for word in token_re.findall(normalize(text)):
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
    tokens.extend((a + b)[:MAX_TOKEN_CHARS] for a, b in zip(run, run[1:]))


def query_tokens(text: str) -> list[str]:
    """The distinct tokens of a query, in first-seen order, at most :data:`MAX_QUERY_TOKENS`."""
    return list(dict.fromkeys(tokenize(text)))[:MAX_QUERY_TOKENS]


