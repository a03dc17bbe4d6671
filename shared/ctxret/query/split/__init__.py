"""The message splitter: a message → at most 8 search parts, one per subject, erring toward splitting
(:func:`split_prompt_chunks`); and whether a part asks (:func:`asks`).

* :mod:`.splitter` — :func:`split_prompt_chunks`: the principle and the rule;
* :mod:`.units` — the cutting half: sentences, list items, blocks, clauses, windows;
* :mod:`.groups` — the joining half: each unit's role, fragments and lead-ins joined, at most ``max_parts`` parts;
* :mod:`.kinds` — what a unit is: a question, a request, an alternative, a fragment; a question leaning back;
* :mod:`.switches` — topic switches and the cuts inside a sentence (a spoken run-on's next ask);
* :mod:`.words` — the punctuation, list markers and words the others share;
* :mod:`.asking` — :func:`asks`: whether a part asks, as the time windows, the answers lifted above stored
  questions and the latest fact first read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_dir, lazy_getattr

if TYPE_CHECKING:
    from ...text import MAX_PARTS
    from .asking import asks
    from .groups import MIN_PART_CHARS
    from .splitter import split_prompt_chunks
    from .units import LONG_PART_WORDS, WINDOW_WORDS

_NAMES = {
    "split_prompt_chunks": ".splitter",
    "asks": ".asking",
    "LONG_PART_WORDS": ".units",
    "WINDOW_WORDS": ".units",
    "MIN_PART_CHARS": ".groups",
    "MAX_PARTS": "...text",
}
__getattr__ = lazy_getattr(__name__, _NAMES)
__dir__ = lazy_dir(globals(), _NAMES)
__all__ = ["LONG_PART_WORDS", "MAX_PARTS", "MIN_PART_CHARS", "WINDOW_WORDS", "asks", "split_prompt_chunks"]
