"""LLM-written views and HyDE from any LangChain LLM or chat model.

The core takes a LangChain LLM directly (``ContextualIndex(..., views=["questions"],
view_writer=llm)``, ``index.search(..., hyde=llm)``, ``ContextualRetriever(...,
search_kwargs={"hyde": llm, "deadline_ms": 500})``): it calls ``llm.invoke`` with the prompts of
:mod:`ctxret.ingest.views` and :mod:`ctxret.query.hyde`. These helpers (the core's) build the same
callables with your own prompts.
"""

from ctxret.adapters import HYDE_PROMPT, PROMPTS, llm_hyde, llm_view_writer, llm_view_writers

__all__ = ["PROMPTS", "HYDE_PROMPT", "llm_view_writer", "llm_view_writers", "llm_hyde"]
