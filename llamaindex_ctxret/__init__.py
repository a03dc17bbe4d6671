"""LlamaIndex adapter for ctxret: a node parser, a writer, a retriever and an embedding.

* :class:`ContextualNodeParser` — documents (text or chat) → the core's labelled pieces as
  ``TextNode`` s (node id = piece id); usable alone in an ``IngestionPipeline``.
* :func:`add_documents_to_index` — the same documents written with their blended vectors through
  ``ContextualIndex`` (the collection format LangChain and the CLI read too).
* :class:`ContextualIndexWriter` — the same write as the last step of an ``IngestionPipeline``
  (parse and store in one run).
* :class:`ContextualStoreIndex` — ``from_documents``, ``insert``, ``refresh_ref_docs``, ``delete_ref_doc``,
  ``ref_doc_info``, ``as_retriever``, ``as_query_engine``, ``as_chat_engine``.
* :class:`ContextualRetriever` — per-part groups of ``NodeWithScore`` (``score`` = the hit's
  relevance in [0, 1]), with ``MetadataFilters`` and a per-group ``rerank`` (any node postprocessor).
* :class:`CtxretEmbedding` — a ctxret embedder as a LlamaIndex ``BaseEmbedding``.
* :class:`CtxretMemoryBlock` — a memory block for ``llama_index.core.memory.Memory``: what it flushes is written to
  ctxret (appended), and recall for the latest message comes back as per-part groups of text.
"""

from __future__ import annotations

try:  # the framework is an extra: say which one, before any import of it fails deeper down
    import llama_index.core  # noqa: F401
except ImportError as _e:
    from ctxret.adapters import missing_extra

    raise missing_extra("llama-index-core", "llamaindex", "llamaindex_ctxret (the LlamaIndex adapter)") from _e

from .embeddings import CtxretEmbedding
from .filters import metadata_filters_to_where
from .memory import CtxretMemoryBlock
from .messages import chat_message_to_openai, chat_messages_to_openai
from .node_parser import (
    ContextualNodeParser,
    add_documents_to_index,
    documents_from_messages,
    documents_to_turns,
)
from .rerank import postprocessor_reranker
from .retriever import ContextualRetriever, groups_to_nodes
from .writer import ContextualIndexWriter, ContextualStoreIndex

__all__ = [
    "ContextualIndexWriter",
    "ContextualNodeParser",
    "ContextualStoreIndex",
    "metadata_filters_to_where",
    "postprocessor_reranker",
    "ContextualRetriever",
    "CtxretEmbedding",
    "CtxretMemoryBlock",
    "add_documents_to_index",
    "chat_message_to_openai",
    "chat_messages_to_openai",
    "documents_from_messages",
    "documents_to_turns",
    "groups_to_nodes",
]
