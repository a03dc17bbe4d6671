"""LLM-written views and HyDE from a LlamaIndex LLM.

The core takes a LlamaIndex LLM directly (``ContextualIndex(..., views=["questions"],
view_writer=llm)``, ``index.search(..., hyde=llm)``, ``ContextualRetriever(...,
search_kwargs={"hyde": llm, "deadline_ms": 500})``): it calls ``llm.complete`` with the prompts of
:mod:`ctxret.ingest.views` and :mod:`ctxret.query.hyde`. These helpers (the core's) build the same
callables with your own prompts.
"""

from ctxret.adapters import HYDE_PROMPT, PROMPTS, llm_hyde, llm_view_writer, llm_view_writers

__all__ = ["PROMPTS", "HYDE_PROMPT", "llm_view_writer", "llm_view_writers", "llm_hyde"]
