"""Text handling shared by both sides: cleaning, the UTF-8 tail cap and the sentence packer.

Exact rules (splitting a message into parts is :mod:`ctxret.query.split`):

* ``tail_utf8`` keeps the end of a text within a UTF-8 byte cap, never cutting inside a character.
* ``pack_text_pieces`` packs sentences into pieces of at most ``max_bytes`` UTF-8 bytes; a
  sentence over the budget is cut at the last word that fits (a single word over the budget at a
  character boundary). Every non-whitespace character of the input is in exactly one piece.
* ``exact_patches`` / ``restore_text``: what turns the packed pieces back into the text exactly as given (its
  whitespace, its control characters), one small patch per piece, ``None`` for a piece whose share of the text is
  its body as packed (most pieces); what is packed and embedded is unchanged.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import re
import zlib
from collections.abc import Sequence
from typing import Any

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


# -- the text exactly as given --------------------------------------------------------------------------------
_GAP = re.compile(r"\s+")
_GAP_SPLIT = re.compile(r"(\s+)")
#: The characters :func:`clean_text` replaces, one for one.
_REPLACED = re.compile(f"{_CONTROL.pattern}|{_SURROGATE.pattern}")
#: A whitespace run (or a run of substituted characters) longer than this is stored run-length encoded.
_RLE_OVER = 32


def _gaps(text: str) -> tuple[dict[int, str], str]:
    """``({k: the whitespace run before the k-th non-whitespace character}, the non-whitespace characters)``; a run
    at the end has ``k`` = their number."""
    parts = _GAP_SPLIT.split(text)
    chars = parts[0::2]
    return dict(zip(itertools.accumulate(map(len, chars)), parts[1::2], strict=False)), "".join(chars)


def _runs(text: str) -> Any:
    """``text`` as stored in a patch: itself, or ``[[char, count], ...]`` when long (a run of one character)."""
    if len(text) <= _RLE_OVER:
        return text
    out: list[list[Any]] = []
    for ch in text:
        if out and out[-1][0] == ch:
            out[-1][1] += 1
        else:
            out.append([ch, 1])
    return out


def _unruns(value: Any) -> str:
    return value if isinstance(value, str) else "".join(str(ch) * int(n) for ch, n in value)


def exact_patches(text: str, bodies: Sequence[str]) -> list[str | None]:
    """For each of ``bodies`` (``text`` packed: :func:`pack_text_pieces`, or a re-packing of its pieces; every
    non-whitespace character of the cleaned text, in order), what :func:`restore_text` needs to give back its share
    of ``text`` exactly: a compact JSON string of the whitespace runs that differ from the packed ones (keyed by
    the non-whitespace character they precede) and the characters :func:`clean_text` replaced, or ``None`` when the
    share is the body as joined (``"\\n".join(bodies)`` is then ``text`` there). Sizes follow what differs, never
    the text's length (long runs are run-length encoded): a 10 MB tool result packed the usual way needs a patch
    only where its whitespace was more than one space. Bodies that do not hold ``text``'s characters: ``None`` for
    all (the packed text is what can be given back)."""
    if not bodies:
        return []
    cleaned = clean_text(text)
    gaps, chars = _gaps(cleaned)
    packed_gaps = [_gaps(b) for b in bodies]
    sizes = [len(c) for _, c in packed_gaps]
    if "".join(c for _, c in packed_gaps) != chars:
        return [None] * len(bodies)
    replaced = [] if cleaned == text else [m.start() for m in _REPLACED.finditer(text)]
    keys = sorted(gaps)
    before, total = [], 0  # whitespace characters of ``cleaned`` before each key
    for k in keys:
        before.append(total)
        total += len(gaps[k])

    def position(k: int) -> int:
        """Where the run before the k-th non-whitespace character starts in ``cleaned``."""
        i = bisect.bisect_left(keys, k)
        return k + (before[i] if i < len(keys) else total)

    out: list[str | None] = []
    start = 0
    for j, ((packed, _), size) in enumerate(zip(packed_gaps, sizes, strict=True)):
        last = j == len(bodies) - 1
        packed[0] = "" if j == 0 else "\n"
        if last:
            packed.setdefault(size, "")
        lo, hi = bisect.bisect_left(keys, start), bisect.bisect_left(keys, start + size + (1 if last else 0))
        local = {k - start for k in keys[lo:hi]} | set(packed)
        runs = [
            [k, _runs(gaps.get(start + k, ""))] for k in sorted(local) if gaps.get(start + k, "") != packed.get(k, "")
        ]
        seg_lo = position(start)
        seg_hi = len(cleaned) if last else position(start + size)
        a, b = bisect.bisect_left(replaced, seg_lo), bisect.bisect_left(replaced, seg_hi)
        subs: list[list[Any]] = []
        for i in replaced[a:b]:
            if subs and subs[-1][0] + subs[-1][2] == i - seg_lo and subs[-1][1] == text[i]:
                subs[-1][2] += 1
            else:
                subs.append([i - seg_lo, text[i], 1])
        patch: dict[str, Any] = {}
        if runs:
            patch["g"] = runs
        if subs:
            patch["s"] = subs
        out.append(_encode(patch) if patch else None)
        start += size
    return out


#: A patch longer than this is stored compressed (``z`` + base64 of its zlib-compressed JSON).
_COMPRESS_OVER = 96


def _encode(patch: dict[str, Any]) -> str:
    text = json.dumps(patch, ensure_ascii=True, separators=(",", ":"))
    if len(text) <= _COMPRESS_OVER:
        return text
    return "z" + base64.b64encode(zlib.compress(text.encode("ascii"), 9)).decode("ascii")


def _decode(patch: str) -> dict[str, Any]:
    if patch.startswith("z"):
        patch = zlib.decompress(base64.b64decode(patch[1:])).decode("ascii")
    data = json.loads(patch)
    return data if isinstance(data, dict) else {}


def restore_text(bodies: Sequence[str], patches: Sequence[str | None]) -> str:
    """The text ``bodies`` were packed from, exactly, with the :func:`exact_patches` of each (``None``, or a piece
    stored before patches existed: its body as packed). Without any patch: ``"\\n".join(bodies)``."""
    if not any(patches):
        return "\n".join(bodies)
    parts: list[str] = []
    for j, body in enumerate(bodies):
        patch = patches[j] if j < len(patches) else None
        last = j == len(bodies) - 1
        gaps, chars = _gaps(body)
        size = len(chars)
        gaps[0] = "" if j == 0 else "\n"
        if last:
            gaps.setdefault(size, "")
        subs: list[Any] = []
        if patch:
            data = _decode(patch)
            gaps.update((int(k), _unruns(run)) for k, run in data.get("g", ()))
            subs = data.get("s", [])
        keys = sorted(gaps)
        segment = "".join(gaps[k] + chars[k : keys[i + 1] if i + 1 < len(keys) else size] for i, k in enumerate(keys))
        if subs:
            cells = list(segment)
            for at, ch, count in subs:
                cells[int(at) : int(at) + int(count)] = str(ch) * int(count)
            segment = "".join(cells)
        parts.append(segment)
    return "".join(parts)
