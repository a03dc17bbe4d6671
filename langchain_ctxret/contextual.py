"""LLM-written context (contextual retrieval) from any LangChain LLM or chat model.

``llm_contextualizer(llm)`` returns the callable ``ContextualIndex(..., context="llm",
contextualizer=...)`` needs: one LLM call per turn or section (the passage goes in once; every
piece gets its line from the same answer), asking for one short line per piece that situates it in
the passage. The line becomes the piece's context vector and is indexed for BM25 with the piece.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ctxret.adapters import numbered_chunks, parse_view_lines
from langchain_core.callbacks import Callbacks
from langchain_core.runnables import RunnableConfig

DEFAULT_PROMPT = """<document>
{passage}
</document>
Here are numbered chunks of the document above:
{chunks}

For every chunk, write one short sentence (at most 40 words) that situates it within the document,
to improve search retrieval of the chunk: name the people, things, dates and topics it refers to.
Answer with one line per chunk, in order, formatted as "N. context", and nothing else."""


def parse_numbered_lines(text: str, n: int) -> list[str]:
    """Lines ``"N. context"`` → a list of ``n`` strings (``""`` where the answer has no line ``N``)."""
    return [lines[0] if lines else "" for lines in parse_view_lines(text, n, many=False)]


def llm_contextualizer(
    llm: Any,
    *,
    prompt: str = DEFAULT_PROMPT,
    max_passage_chars: int = 24_000,
    config: RunnableConfig | None = None,
    callbacks: Callbacks = None,
) -> Callable[[str, Sequence[str]], list[str]]:
    """A contextualizer calling ``llm.invoke`` once per passage (an LLM returns text, a chat model a message).

    ``prompt`` is formatted with ``passage`` (cut to its last ``max_passage_chars`` characters) and
    ``chunks`` (``"1. body"`` lines). A chunk the answer has no line for gets ``""``, and the index
    falls back to the mean context for that piece.

    ``config`` (a ``RunnableConfig``: ``callbacks``, ``tags``, ``metadata``, ``run_name``,
    ``max_concurrency``, …) is passed to every ``llm.invoke``, so the calls are traced and
    counted like the rest of your chain; ``callbacks`` is a shortcut for ``config["callbacks"]``.
    The default run name is ``"ctxret_contextualizer"``.
    """
    cfg: dict[str, Any] = {"run_name": "ctxret_contextualizer", **dict(config or {})}
    if callbacks is not None:
        if cfg.get("callbacks") is not None:
            raise ValueError("pass callbacks either as callbacks= or in config, not both")
        cfg["callbacks"] = callbacks

    def contextualize(passage: str, bodies: Sequence[str]) -> list[str]:
        if not bodies:
            return []
        chunks = numbered_chunks(bodies)
        answer = llm.invoke(prompt.format(passage=passage[-max_passage_chars:], chunks=chunks), config=cfg)
        text = answer if isinstance(answer, str) else str(getattr(answer, "content", answer))
        return parse_numbered_lines(text, len(bodies))

    return contextualize
