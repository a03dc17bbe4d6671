"""The message splitter: a message → at most 8 search parts, one per subject, erring toward splitting; and whether
a part asks.

* :mod:`.splitter` — :func:`split_prompt_chunks` (the principle and the rule);
* :mod:`.words` — the words that tell questions, requests, fragments and topic switches apart, in six languages;
* :mod:`.asking` — :func:`asks`: whether a part asks (a question or a request), as the time windows, the answers
  lifted above stored questions and the latest fact first read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_getattr

if TYPE_CHECKING:
    from .asking import asks
    from .splitter import LONG_PART_WORDS, MAX_PARTS, MIN_PART_CHARS, WINDOW_WORDS, split_prompt_chunks

_NAMES = {
    "asks": ".asking", "LONG_PART_WORDS": ".splitter", "MAX_PARTS": ".splitter", "MIN_PART_CHARS": ".splitter",
    "WINDOW_WORDS": ".splitter", "split_prompt_chunks": ".splitter",
}  # fmt: skip
__getattr__ = lazy_getattr(__name__, _NAMES)
__all__ = ["LONG_PART_WORDS", "MAX_PARTS", "MIN_PART_CHARS", "WINDOW_WORDS", "asks", "split_prompt_chunks"]
