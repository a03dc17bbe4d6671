"""LLM-written views of a piece: the questions it answers and a one-line summary (question and summary
indexes), written once at indexing time.

A *view* is a short text about one piece, embedded as an extra vector that points to the piece:
a search matches a part against the piece's own vector and its views, and a hit is always the
piece, scored by the better of the two (:mod:`ctxret.query.views`). Views are written by a *view
writer* per kind — ``writer(passage_text, piece_bodies) -> one list of texts per piece`` — called
once per changed turn or section with the whole passage (like the ``llm`` contextualizer of
:mod:`.context`); any LangChain LLM or chat model (``invoke``) or LlamaIndex LLM (``complete``) is
turned into one with the prompts below.

The texts are stored with the piece (metadata ``view_texts``, JSON ``{kind: [texts]}``), so that a
piece and its views are written in one Chroma upsert: an unchanged turn is never sent to the LLM
again, and a rebuild re-embeds the stored texts without calling the LLM. Their vectors live in the
collection's companion ``<collection>-views`` (:mod:`ctxret.storage.views`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import CtxretError, InputError, callable_error

__all__ = [
    "VIEW_KINDS",
    "VIEWS_KEY",
    "ViewWriter",
    "call_llm",
    "is_llm",
    "llm_view_writer",
    "llm_view_writers",
    "normalize_views",
    "parse_view_lines",
    "resolve_view_writers",
    "stored_views",
    "write_views",
]

#: The view kinds an index can hold, in the order they are recorded.
VIEW_KINDS = ("questions", "summary")
#: The piece metadata key holding a piece's view texts (JSON ``{kind: [texts]}``).
VIEWS_KEY = "view_texts"
#: At most this many views of one kind per piece, each at most this many characters (longer is cut at a word).
MAX_VIEWS_PER_KIND = 8
MAX_VIEW_CHARS = 500

#: ``writer(passage_text, piece_bodies) -> one list of view texts per piece`` (a str counts as a list of one).
ViewWriter = Callable[[str, Sequence[str]], Sequence[Any]]

QUESTIONS_PROMPT = """<document>
{passage}
</document>
Here are numbered chunks of the document above:
{chunks}

For every chunk, write {n} short questions that the chunk answers, the way a user would ask them
later (name the people, things and dates; do not say "the chunk"). Answer with one question per
line, formatted as "N. question" where N is the chunk's number, and nothing else."""

SUMMARY_PROMPT = """<document>
{passage}
</document>
Here are numbered chunks of the document above:
{chunks}

For every chunk, write a one-sentence summary (at most 30 words) of what it says, naming the
people, things and dates it refers to. Answer with one line per chunk, in order, formatted as
"N. summary", and nothing else."""

PROMPTS = {"questions": QUESTIONS_PROMPT, "summary": SUMMARY_PROMPT}

_LINE = re.compile(r"^\s*(?:chunk\s*)?(\d+)\s*[.):\-]\s*(.*\S)\s*$", re.IGNORECASE)


def normalize_views(views: Any) -> tuple[str, ...]:
    """``None``/``""``/``"questions,summary"``/``["summary", "questions"]`` → the kinds, in :data:`VIEW_KINDS` order."""
    if views is None or views == "" or views is False:
        return ()
    if isinstance(views, str):
        names = [v.strip() for v in views.split(",") if v.strip()]
    elif isinstance(views, Iterable) and not isinstance(views, Mapping):
        names = list(views)
    else:
        raise InputError(f"views must be a list of view kinds from {VIEW_KINDS} (or None), got {views!r}")
    bad = [v for v in names if v not in VIEW_KINDS]
    if bad:
        raise InputError(f"unknown view kind(s) {bad}; views are chosen from {VIEW_KINDS}")
    return tuple(k for k in VIEW_KINDS if k in names)


def is_llm(obj: Any) -> bool:
    """Whether ``obj`` is a LangChain LLM / chat model (``invoke``) or a LlamaIndex LLM (``complete``)."""
    return callable(getattr(obj, "invoke", None)) or callable(getattr(obj, "complete", None))


def call_llm(llm: Any, prompt: str) -> str:
    """The text an LLM answers to ``prompt``: LangChain ``invoke`` (a string or a message's ``content``),
    LlamaIndex ``complete`` (``.text``), or a plain ``fn(prompt) -> str``."""
    if callable(getattr(llm, "invoke", None)):
        answer = llm.invoke(prompt)
    elif callable(getattr(llm, "complete", None)):
        answer = llm.complete(prompt)
    elif callable(llm):
        answer = llm(prompt)
    else:
        raise InputError(f"expected an LLM (LangChain, LlamaIndex) or a callable, got {type(llm).__name__}")
    return _answer_text(answer)


async def acall_llm(llm: Any, prompt: str) -> str:
    """Async :func:`call_llm`: ``ainvoke`` / ``acomplete`` when the LLM has them."""
    if callable(getattr(llm, "ainvoke", None)):
        return _answer_text(await llm.ainvoke(prompt))
    if callable(getattr(llm, "acomplete", None)):
        return _answer_text(await llm.acomplete(prompt))
    import asyncio

    return await asyncio.to_thread(call_llm, llm, prompt)


def _answer_text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    for attr in ("content", "text"):
        value = getattr(answer, attr, None)
        if isinstance(value, str):
            return value
    return str(answer)


def numbered_chunks(bodies: Sequence[str]) -> str:
    """The prompt's ``{chunks}``: one ``"N. body"`` line per piece, its whitespace folded."""
    return "\n".join(f"{i}. {' '.join(b.split())}" for i, b in enumerate(bodies, start=1))


def parse_view_lines(text: str, n: int, *, many: bool) -> list[list[str]]:
    """Lines ``"N. text"`` → one list per chunk (``many=False``: the first line of each chunk only)."""
    out: list[list[str]] = [[] for _ in range(n)]
    for raw in text.splitlines():
        m = _LINE.match(raw)
        if m:
            i = int(m.group(1)) - 1
            if 0 <= i < n and (many or not out[i]):
                out[i].append(m.group(2))
    return out


def llm_view_writer(
    llm: Any, kind: str, *, prompt: str | None = None, questions: int = 3, max_passage_chars: int = 24_000
) -> ViewWriter:
    """A view writer of ``kind`` calling ``llm`` once per passage.

    ``prompt`` (default :data:`PROMPTS` ``[kind]``) is formatted with ``passage`` (its last
    ``max_passage_chars`` characters), ``chunks`` (``"1. body"`` lines) and ``n`` (``questions``).
    A chunk the answer has no line for gets no view of this kind.
    """
    (kind,) = normalize_views([kind])
    template = prompt if prompt is not None else PROMPTS[kind]

    def write(passage: str, bodies: Sequence[str]) -> list[list[str]]:
        if not bodies:
            return []
        chunks = numbered_chunks(bodies)
        text = call_llm(llm, template.format(passage=passage[-max_passage_chars:], chunks=chunks, n=questions))
        return parse_view_lines(text, len(bodies), many=kind == "questions")

    write.__qualname__ = f"llm_view_writer[{kind}]"
    return write


def llm_view_writers(
    llm: Any, kinds: Sequence[str] = ("questions", "summary"), **options: Any
) -> dict[str, ViewWriter]:
    """``{kind: llm_view_writer(llm, kind, **options)}`` for ``ContextualIndex(..., view_writer=...)``."""
    return {kind: llm_view_writer(llm, kind, **options) for kind in normalize_views(kinds)}


def resolve_view_writers(kinds: Sequence[str], writer: Any) -> dict[str, ViewWriter]:
    """One writer per kind from what the caller passed: a dict ``{kind: writer or LLM}``, one LLM (prompted
    for every kind), or one plain writer (only when the index has a single view kind)."""
    if writer is None or not kinds:
        return {}
    if isinstance(writer, Mapping):
        unknown = sorted(set(writer) - set(VIEW_KINDS))
        if unknown:
            raise InputError(f"view_writer has unknown view kind(s) {unknown}; use keys from {VIEW_KINDS}")
        return {
            k: (llm_view_writer(w, k) if is_llm(w) else _checked_callable(w, k))
            for k, w in writer.items()
            if k in kinds
        }
    if is_llm(writer):
        return {k: llm_view_writer(writer, k) for k in kinds}
    if len(kinds) > 1:
        raise InputError(
            f"this index writes {len(kinds)} view kinds {tuple(kinds)}: pass one writer per kind, "
            "view_writer={'questions': fn_q, 'summary': fn_s}, or an LLM (prompted for each kind)"
        )
    return {kinds[0]: _checked_callable(writer, kinds[0])}


def _checked_callable(fn: Any, kind: str) -> ViewWriter:
    if not callable(fn):
        raise InputError(f"the view writer for {kind!r} must be a callable or an LLM, got {type(fn).__name__}")
    return fn


def write_views(
    writers: Mapping[str, ViewWriter], kinds: Sequence[str], passage: str, bodies: Sequence[str], where: str
) -> list[dict[str, list[str]]]:
    """Call each kind's writer once for one passage; one ``{kind: [texts]}`` per piece, checked and cleaned."""
    missing = [k for k in kinds if k not in writers]
    if missing:
        raise InputError(
            f"this index stores {tuple(kinds)} views and has no writer for {missing}; open it with "
            "ContextualIndex(..., view_writer=llm_or_fn) (an LLM, fn(passage, piece_bodies) -> one list of "
            "texts per piece, or a dict of them by kind; LangChain: langchain_ctxret.views.llm_view_writer(llm, kind))"
        )
    out: list[dict[str, list[str]]] = [{} for _ in bodies]
    if not bodies:
        return out
    for kind in kinds:
        try:
            answer = writers[kind](passage, list(bodies))
        except CtxretError:
            raise
        except Exception as e:
            raise callable_error(f"{kind!r} view writer", writers[kind], e) from e
        if isinstance(answer, str) or not isinstance(answer, Sequence) or len(answer) != len(bodies):
            got = (
                "a string"
                if isinstance(answer, str)
                else (f"{len(answer)} items" if isinstance(answer, Sequence) else type(answer).__name__)
            )
            raise InputError(
                f"the {kind!r} view writer returned {got} for {where}, which has {len(bodies)} pieces; it must return "
                "one list of texts (or one text) per piece, in order"
            )
        for i, texts in enumerate(answer):
            out[i][kind] = _clean_texts(texts, kind, where, i)
    return out


def _clean_texts(texts: Any, kind: str, where: str, i: int) -> list[str]:
    if texts is None:
        return []
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence):
        raise InputError(
            f"the {kind!r} view writer's item {i} for {where} is {type(texts).__name__}, not a list of str"
        )
    out: list[str] = []
    for t in texts:
        if not isinstance(t, str):
            raise InputError(f"the {kind!r} view writer's item {i} for {where} holds {type(t).__name__}, not str")
        t = " ".join(t.split())
        if len(t) > MAX_VIEW_CHARS:
            t = t[:MAX_VIEW_CHARS].rsplit(" ", 1)[0] or t[:MAX_VIEW_CHARS]
        if t and t not in out:
            out.append(t)
    return out[:MAX_VIEWS_PER_KIND]


def stored_views(metadata: Mapping[str, Any] | None) -> dict[str, list[str]] | None:
    """The view texts stored with a piece (``None``: the piece has no record of views)."""
    raw = (metadata or {}).get(VIEWS_KEY)
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): [str(t) for t in v] for k, v in value.items() if isinstance(v, list)}


def views_json(views: Mapping[str, Sequence[str]]) -> str:
    """The stored form of a piece's views (sorted keys: the same views give the same metadata)."""
    return json.dumps({k: list(v) for k, v in views.items()}, ensure_ascii=False, sort_keys=True)
