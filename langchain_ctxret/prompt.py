"""Prompt assembly that keeps the retriever's groups intact: one section per query part.

``ContextualRetriever`` returns a flat list of Documents, ordered group by group, each carrying
``group`` (part index), ``group_query`` (part text), ``group_rank`` and ``group_parts`` (every
part's text, so parts that found nothing are not lost). :func:`group_documents` turns the list
back into groups; :func:`format_groups` renders them; :data:`render_groups` is the same as an LCEL
runnable: ``retriever | render_groups``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from ctxret import Group
from ctxret.adapters import (
    DEFAULT_EMPTY_GROUP,
    DEFAULT_HEADING,
    DEFAULT_NO_RESULTS,
    Entry,
    entry_of,
    neutralize,
    render_entry,
    render_sections,
)
from langchain_core.documents import Document
from langchain_core.runnables import RunnableLambda

from .retriever import hit_to_document

__all__ = [
    "DocumentGroup",
    "group_documents",
    "format_groups",
    "format_document_item",
    "render_groups_runnable",
    "render_groups",
    "DEFAULT_HEADING",
    "DEFAULT_EMPTY_GROUP",
    "DEFAULT_NO_RESULTS",
]


class DocumentGroup(NamedTuple):
    """The documents of one query part, best first (``index`` 0-based, ``query`` the part text)."""

    index: int  # type: ignore[assignment]  # the field shadows tuple.index on purpose: the part's number
    query: str
    documents: list[Document]


def group_documents(docs: Sequence[Document]) -> list[DocumentGroup]:
    """Turn the retriever's flat list back into groups, ordered by part index.

    Documents keep their order inside each group (so a reranker's order survives). Parts that found
    nothing come back as empty groups when the documents carry ``group_parts`` (the retriever
    always sets it). Raises ``ValueError`` for a document without an integer ``group`` (not the
    output of ``ContextualRetriever``).
    """
    by_index: dict[int, DocumentGroup] = {}
    parts: list[str] | None = None
    for i, doc in enumerate(docs):
        meta = doc.metadata or {}
        index = meta.get("group")
        if isinstance(index, bool) or not isinstance(index, int):
            raise ValueError(
                f"document {i} has no integer 'group' in its metadata (got {index!r}); "
                "group_documents expects the output of ContextualRetriever "
                "(or documents that keep its metadata)"
            )
        if parts is None and isinstance(meta.get("group_parts"), (list, tuple)):
            parts = [str(p) for p in meta["group_parts"]]
        if index not in by_index:
            by_index[index] = DocumentGroup(index, str(meta.get("group_query", "")), [])
        by_index[index].documents.append(doc)
    for index, query in enumerate(parts or []):
        by_index.setdefault(index, DocumentGroup(index, query, []))
    return [by_index[i] for i in sorted(by_index)]


def _entry(doc: Document) -> Entry:
    score = (doc.metadata or {}).get("score")
    shown = float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None
    return entry_of(doc.page_content, doc.metadata or {}, shown)


def format_document_item(
    doc: Document, *, show_scores: bool = True, now: datetime | str | None = None, dates: bool = True
) -> str:
    """``- [score 0.53 · Oct 16, 2026 (3 days ago)] [Turn 1 · User]`` and the text, each line quoted (``  > ``) and
    every tag escaped: one bullet, as :func:`format_groups` renders it (``now``: what "ago" counts from)."""
    return render_entry(_entry(doc), now=now, show_scores=show_scores, dates=dates)


def format_groups(
    docs_or_groups: Sequence[Document] | Sequence[DocumentGroup] | Sequence[Group],
    *,
    heading: str = DEFAULT_HEADING,
    item: Callable[[Document], str] | None = None,
    show_scores: bool = True,
    empty_group: str = DEFAULT_EMPTY_GROUP,
    no_results: str = DEFAULT_NO_RESULTS,
    separator: str = "\n\n",
    max_chars: int | None = None,
    now: datetime | str | None = None,
    dates: bool = True,
    conversation: str | None = None,
) -> str:
    """Render one section per query part, its documents under it.

    Accepts the retriever's Documents, :class:`DocumentGroup` s, or the core's
    :class:`ctxret.results.Group` s. ``heading`` is a ``str.format`` template with ``number``
    (1-based), ``index`` (0-based) and ``query``; each document is a bullet (:func:`format_document_item`: its
    score, its date and how long before ``now``, its conversation when the documents come from several or from
    another than ``conversation``, its text quoted with every tag escaped), or ``item(doc)`` (``doc`` with its
    tags escaped; the rest of its text is yours). A part with no documents gets its section with ``empty_group``
    under it; with no parts at all (an empty list) the result is ``no_results``. ``max_chars`` bounds the text
    (documents taken rank by rank across the parts while they fit; ``dates=False`` leaves the dates out).

    >>> print(format_groups(docs))                                 # doctest: +SKIP
    ### Part 1: When is my flight to Lisbon?
    - [score 0.61 · Oct 16, 2026 (3 days ago)] [Turn 1 · Tool search_flights · Oct 16, 2026, 2:02 PM]
      > search_flights arguments: ...
    """
    groups = _as_groups(docs_or_groups)
    if not groups:
        return no_results
    docs: dict[int, Document] = {}
    sections = []
    for g in groups:
        entries = []
        for d in g.documents:
            entry = _entry(d)
            docs[id(entry)] = d
            entries.append(entry)
        sections.append((g.index, g.query, entries))

    def custom(entry: Entry) -> str:
        assert item is not None
        doc = docs[id(entry)]
        return item(Document(page_content=neutralize(doc.page_content), metadata=doc.metadata, id=doc.id))

    return render_sections(
        sections,
        heading=heading,
        show_scores=show_scores,
        empty_group=empty_group,
        no_results=no_results,
        separator=separator,
        max_chars=max_chars,
        now=now,
        dates=dates,
        conversation=conversation,
        item=custom if item is not None else None,
    ).text


def render_groups_runnable(**format_kwargs: Any) -> RunnableLambda:
    """Make a runnable ``list[Document] → str`` that calls ``format_groups(docs, **format_kwargs)``.

    >>> chain = retriever | render_groups_runnable(show_scores=False)   # doctest: +SKIP
    """
    inspect.signature(format_groups).bind([], **format_kwargs)  # a bad keyword fails here, not at invoke

    def _render(docs: Sequence[Document]) -> str:
        return format_groups(docs, **format_kwargs)

    async def _arender(docs: Sequence[Document]) -> str:
        return format_groups(docs, **format_kwargs)

    return RunnableLambda(_render, afunc=_arender, name="render_groups")


def _as_groups(items: Sequence[Any]) -> list[DocumentGroup]:
    items = list(items)
    if not items:
        return []
    if all(isinstance(x, DocumentGroup) for x in items):
        return sorted(items, key=lambda g: g.index)
    if all(isinstance(x, Group) for x in items):
        parts = [g.part for g in sorted(items, key=lambda g: g.part_index)]
        return [
            DocumentGroup(
                g.part_index,
                g.part,
                [hit_to_document(h, g, rank, parts) for rank, h in enumerate(g.hits)],
            )
            for g in sorted(items, key=lambda g: g.part_index)
        ]
    if all(isinstance(x, Document) for x in items):
        return group_documents(items)
    kinds = sorted({type(x).__name__ for x in items})
    raise ValueError(f"format_groups takes Documents, DocumentGroups or ctxret Groups (not mixed); got {kinds}")


#: ``retriever | render_groups``: the default rendering as a runnable.
render_groups = render_groups_runnable()
