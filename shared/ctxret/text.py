"""Text handling shared by both sides: cleaning, the UTF-8 tail cap and the sentence packer.

Exact rules (splitting a message into parts is :mod:`ctxret.query.split`):

* ``tail_utf8`` keeps the end of a text within a UTF-8 byte cap, never cutting inside a character.
* ``pack_text_pieces`` packs sentences into pieces of at most ``max_bytes`` UTF-8 bytes; a
  sentence over the budget is cut at the last word that fits (a single word over the budget at a
  character boundary). Every non-whitespace character of the input is in exactly one piece.
"""

from __future__ import annotations

import re

from .errors import InputError

#: Default number of parts a message is split into at most.
MAX_PARTS = 8
#: Cap on the whole-message input, in UTF-8 bytes (the end is kept).
WHOLE_MESSAGE_MAX_BYTES = 8000
#: Default piece budget in UTF-8 bytes (the index sizes it to the embedder).
PIECE_MAX_BYTES = 1200
#: Smallest budget the packer accepts (one 4-byte character must always fit).
MIN_PIECE_BYTES = 16
#: Version of the packing rules; recorded in the index config.
PACKER_VERSION = "1"

LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x1c\x1d\x1e\x85]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WS = re.compile(r"\s+")
# Control characters other than tab and line breaks, and lone surrogates.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def check_unicode(text: str, what: str) -> str:
    """``text`` if it is valid Unicode (storable as UTF-8), else an :class:`InputError` saying that ``what``
    holds a lone surrogate. For ids, metadata and filters, which are kept exactly (unlike texts to embed,
    which :func:`clean_text` repairs)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{what} holds a lone surrogate (invalid Unicode, often a mis-decoded file or a bad JSON escape); "
            "pass valid UTF-8 text"
        ) from None
    return text


def clean_text(text: str) -> str:
    """Make text safe to embed and store: lone surrogates become U+FFFD, control characters a space.

    Tabs and line breaks are kept. Raises :class:`InputError` for non-string input.
    """
    if not isinstance(text, str):
        raise InputError(f"expected text (str), got {type(text).__name__}")
    text = _SURROGATE.sub("\ufffd", text)
    return _CONTROL.sub(" ", text)


def _sentences(line: str) -> list[str]:
    return [s for s in (_WS.sub(" ", raw).strip() for raw in _SENTENCE_END.split(line)) if s]


def tail_utf8(text: str, max_bytes: int = WHOLE_MESSAGE_MAX_BYTES) -> str:
    """The longest suffix of ``text`` that fits in ``max_bytes`` of UTF-8, never cutting inside a character."""
    if max_bytes < 0:
        raise InputError(f"max_bytes must be non-negative, got {max_bytes}")
    text = clean_text(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    cut = len(data) - max_bytes
    while cut < len(data) and (data[cut] & 0xC0) == 0x80:  # skip continuation bytes
        cut += 1
    return data[cut:].decode("utf-8")


def cut_within_bytes(sentence: str, max_bytes: int) -> list[str]:
    """Cut a whitespace-collapsed sentence into runs of at most ``max_bytes`` UTF-8 bytes.

    Cuts at the last space that fits; a single word over the budget is cut at a character boundary.
    """
    if max_bytes < 4:
        raise InputError(f"max_bytes must be at least 4 (one UTF-8 character), got {max_bytes}")
    data = sentence.encode("utf-8")
    if len(data) <= max_bytes:
        return [sentence] if sentence else []
    out: list[str] = []
    pos, n = 0, len(data)
    while n - pos > max_bytes:
        space = data.rfind(b" ", pos, pos + max_bytes + 1)
        if space > pos:
            out.append(data[pos:space].decode("utf-8"))
            pos = space + 1
        else:
            end = pos + max_bytes
            while end > pos and (data[end] & 0xC0) == 0x80:
                end -= 1
            out.append(data[pos:end].decode("utf-8"))
            pos = end
        while pos < n and data[pos] == 0x20:
            pos += 1
    if pos < n:
        out.append(data[pos:].decode("utf-8"))
    return out


def pack_text_pieces(text: str, max_bytes: int = PIECE_MAX_BYTES) -> list[str]:
    """Pack the sentences of ``text`` into pieces of at most ``max_bytes`` UTF-8 bytes.

    Lines are kept apart by a newline inside a piece, sentences by a space; whitespace is collapsed.
    Returns ``[]`` for empty or whitespace-only text. Nothing is dropped.
    """
    if max_bytes < MIN_PIECE_BYTES:
        raise InputError(f"max_bytes must be at least {MIN_PIECE_BYTES}, got {max_bytes}")
    text = clean_text(text)
    pieces: list[str] = []
    current: list[str] = []
    current_bytes = 0
    for line in LINE_BREAKS.split(text):
        sentences = [cut for s in _sentences(line) for cut in cut_within_bytes(s, max_bytes)]
        for index, sentence in enumerate(sentences):
            size = len(sentence.encode("utf-8"))
            joiner = "" if not current else ("\n" if index == 0 else " ")
            if current and current_bytes + len(joiner) + size > max_bytes:
                pieces.append("".join(current))
                current, current_bytes = [sentence], size
            else:
                current.append(joiner + sentence)
                current_bytes += len(joiner) + size
    if current:
        pieces.append("".join(current))
    return pieces
