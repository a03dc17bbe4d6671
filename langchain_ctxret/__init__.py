"""LangChain adapter for ctxret: a grouped retriever, message conversion, group-keeping prompts.

>>> from langchain_ctxret import ContextualRetriever, render_groups     # doctest: +SKIP
>>> retriever = ContextualRetriever.from_path("./memory")               # doctest: +SKIP
>>> chain = retriever | render_groups                                   # doctest: +SKIP
>>> context = chain.invoke("Where do I fly? What did the vet say?")      # doctest: +SKIP
"""

from __future__ import annotations

try:  # the framework is an extra: say which one, before any import of it fails deeper down
    import langchain_core  # noqa: F401
except ImportError as _e:
    from ctxret.adapters import missing_extra

    raise missing_extra("langchain-core", "langchain", "langchain_ctxret (the LangChain adapter)") from _e

from typing import TYPE_CHECKING, Any

from .contextual import llm_contextualizer
from .history import CtxretChatMessageHistory
from .messages import message_to_openai, messages_to_openai
from .prompt import (
    DocumentGroup,
    format_document_item,
    format_groups,
    group_documents,
    render_groups,
    render_groups_runnable,
)
from .rerank import compressor_reranker
from .retriever import ContextualRetriever, groups_to_documents, hit_to_document

if TYPE_CHECKING:
    from .vectorstore import ContextualVectorStore

if TYPE_CHECKING:
    from .embeddings import CtxretEmbeddings
    from .middleware import CtxretMemoryMiddleware
    from .store import CtxretStore

__all__ = [
    # retrieval
    "ContextualRetriever",
    "ContextualVectorStore",
    "compressor_reranker",
    "groups_to_documents",
    "hit_to_document",
    # memory and messages
    "CtxretChatMessageHistory",
    "messages_to_openai",
    "message_to_openai",
    # agents: create_agent's middleware and a LangGraph store (need ctxret[langgraph]; loaded on first use)
    "CtxretMemoryMiddleware",
    "CtxretStore",
    # prompts
    "DocumentGroup",
    "group_documents",
    "format_groups",
    "format_document_item",
    "render_groups",
    "render_groups_runnable",
    # embeddings (loaded on first use)
    "CtxretEmbeddings",
    # LLM-written context (ContextualIndex(context="llm", contextualizer=...))
    "llm_contextualizer",
]


def __dir__() -> list[str]:
    """The module's names and the ones loaded on first use (tab completion sees every name it offers)."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str) -> Any:
    if name == "CtxretEmbeddings":
        from .embeddings import CtxretEmbeddings

        return CtxretEmbeddings
    if name == "ContextualVectorStore":
        from .vectorstore import ContextualVectorStore

        return ContextualVectorStore
    if name == "CtxretMemoryMiddleware":  # langchain and langgraph: ctxret[langgraph]
        from .middleware import CtxretMemoryMiddleware

        return CtxretMemoryMiddleware
    if name == "CtxretStore":
        from .store import CtxretStore

        return CtxretStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
