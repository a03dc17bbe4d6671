"""The small marks the splitter's modules share: the punctuation around sentences and words, list markers, the
wh-words and auxiliaries, how a word is compared (:func:`norm_word`) and how wide a text is (:func:`width`, a CJK
character counting 2)."""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "AUXILIARIES",
    "CLOSERS",
    "INLINE_ENUM",
    "LIST_MARKER",
    "OPEN_PUNCT",
    "WH_WORDS",
    "WORD_PUNCT",
    "has_cjk",
    "norm_word",
    "width",
]

#: Closing quotes and brackets that stay with the sentence end before them.
CLOSERS = "\"'\u201d\u2019\u00bb\u300d\u300f\uff09)]}\u203a"
#: An inline enumeration's item number: ``1)``, ``(2)``.
INLINE_ENUM = re.compile(r"(?:(?<=\s)|^)\(?(\d{1,2})\)(?=\s)")
#: A list marker at the start of a line: bullets (with an optional checkbox), ``1.``, ``1)``, ``(1)``, ``a)``.
LIST_MARKER = re.compile(
    r"^\s*(?:[-*+\u2022\u2023\u25e6\u25aa\u2013\u00b7](?:\s+\[[ xX]\])?|\(?\d{1,3}[.)]|[A-Za-z][.)])(?=\s)\s*"
)
OPEN_PUNCT = "¿¡\"'“‘«(「『[ "
WORD_PUNCT = ".,:;!?¿¡…\"'“”‘’«»()[]{}「」『』？！。、，：；"
WH_WORDS = frozenset("what where who whom whose when why how which".split())
AUXILIARIES = frozenset("is are was were am do does did can could will would should has have had".split())


#: Characters that may be wide (East Asian width W or F): no ASCII character is.
_MAYBE_WIDE = re.compile(r"[^\x00-\x7f]")


def width(text: str) -> int:
    """Length in characters, a wide (CJK) character counting 2."""
    return len(text) + sum(unicodedata.east_asian_width(c) in "WF" for c in _MAYBE_WIDE.findall(text))


def has_cjk(text: str) -> bool:
    return any(unicodedata.east_asian_width(c) in "WF" and c.isalpha() for c in _MAYBE_WIDE.findall(text))


def norm_word(word: str) -> str:
    return word.strip(WORD_PUNCT).lower().replace("\u2019", "'")
