"""LLM-written views and HyDE from a LlamaIndex LLM.

The core takes a LlamaIndex LLM directly (``ContextualIndex(..., views=["questions"],
view_writer=llm)``, ``index.search(..., hyde=llm)``, ``ContextualRetriever(...,
search_kwargs={"hyde": llm, "deadline_ms": 500})``): it calls ``llm.complete`` with the prompts of
:mod:`ctxret.ingest.views` and :mod:`ctxret.query.hyde`. These helpers (the core's) build the same
callables with your own prompts.
"""

from ctxret.ingest.views import PROMPTS, llm_view_writer, llm_view_writers
from ctxret.query.hyde import HYDE_PROMPT, llm_hyde

__all__ = ["PROMPTS", "HYDE_PROMPT", "llm_view_writer", "llm_view_writers", "llm_hyde"]
