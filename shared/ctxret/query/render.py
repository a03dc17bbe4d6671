"""Groups → prompt text: one section per part, its hits under it, within a size budget.

What an agent's model reads of its memory: the groups of a search kept apart (a part that found nothing says so),
each hit with the score an adapter shows (:func:`.relevance.shown_scores`). LangChain's ``format_groups`` renders
Documents the same way; the memory classes (LlamaIndex's memory block, the LangChain agent middleware) render the
core's groups with :func:`render_groups`.

A budget (``max_chars``) is spent rank by rank across the parts: every part's best hit first, then every part's
second, and so on, so a long first group never crowds out the others; a hit that does not fit whole is left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .relevance import shown_scores

__all__ = ["DEFAULT_EMPTY_GROUP", "DEFAULT_HEADING", "DEFAULT_NO_RESULTS", "render_groups"]

DEFAULT_HEADING = "### Part {number}: {query}"
DEFAULT_EMPTY_GROUP = "(no memories were found for this part)"
DEFAULT_NO_RESULTS = "(no memories were found)"


def _item(text: str, score: tuple[float, str] | None, show_scores: bool) -> str:
    body = text.strip().replace("\n", "\n  ")
    return f"- [score {score[0]:.2f}] {body}" if show_scores and score is not None else f"- {body}"


def render_groups(
    groups: Sequence[Any],
    *,
    heading: str = DEFAULT_HEADING,
    show_scores: bool = True,
    empty_group: str = DEFAULT_EMPTY_GROUP,
    no_results: str = DEFAULT_NO_RESULTS,
    separator: str = "\n\n",
    max_chars: int | None = None,
) -> str:
    """Render :class:`~ctxret.results.Group` s as text: ``heading`` (``str.format`` with ``number``, ``index``,
    ``query``) then one bullet per hit (``- [score 0.61] <piece text>``), best first; ``max_chars`` bounds the
    whole text (the headings always fit first; hits are taken rank by rank across the parts while they fit)."""
    if not groups:
        return no_results
    heads = [heading.format(number=g.part_index + 1, index=g.part_index, query=g.part) for g in groups]
    items = [[_item(h.text, s, show_scores) for h, s in zip(g.hits, shown_scores(g.hits), strict=True)] for g in groups]
    kept = [len(x) for x in items]
    if max_chars is not None:
        used = sum(len(h) + 1 for h in heads) + len(separator) * (len(groups) - 1)
        used += sum(len(empty_group) for x in items if not x)
        kept = [0] * len(groups)
        for rank in range(max((len(x) for x in items), default=0)):
            for i, x in enumerate(items):
                if rank < len(x) and kept[i] == rank:
                    cost = len(x[rank]) + (1 if rank else 0)
                    if used + cost <= max_chars:
                        kept[i] += 1
                        used += cost
    sections = []
    for head, x, n in zip(heads, items, kept, strict=True):
        body = "\n".join(x[:n]) if x else empty_group
        sections.append(f"{head}\n{body}" if body else head)
    return separator.join(sections)
