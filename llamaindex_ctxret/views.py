"""LLM-written views and HyDE from a LlamaIndex LLM.

The core takes a LlamaIndex LLM directly (``ContextualIndex(..., views=["questions"],
view_writer=llm)``, ``index.search(..., hyde=llm)``, ``ContextualRetriever(...,
search_kwargs={"hyde": llm, "deadline_ms": 500})``): it calls ``llm.complete`` with the prompts of
:mod:`ctxret.ingest.views` and :mod:`ctxret.query.hyde`. These helpers build the same callables
with your own prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ctxret.ingest.views import PROMPTS, llm_view_writer, normalize_views
from ctxret.query.hyde import HYDE_PROMPT, llm_hyde

__all__ = ["PROMPTS", "HYDE_PROMPT", "llm_view_writer", "llm_view_writers", "llm_hyde"]


def llm_view_writers(llm: Any, kinds: Sequence[str] = ("questions", "summary"), **options: Any) -> dict[str, Any]:
    """``{kind: llm_view_writer(llm, kind, **options)}`` for ``ContextualIndex(..., view_writer=...)``."""
    return {kind: llm_view_writer(llm, kind, **options) for kind in normalize_views(kinds)}
