"""LlamaIndex adapter for ctxret: a node parser, a writer, a retriever and an embedding.

* :class:`ContextualNodeParser` — documents (text or chat) → the core's labelled pieces as
  ``TextNode`` s (node id = piece id); usable alone in an ``IngestionPipeline``.
* :func:`add_documents_to_index` — the same documents written with their blended vectors through
  ``ContextualIndex`` (the collection format LangChain and the CLI read too).
* :class:`ContextualRetriever` — per-part groups of ``NodeWithScore`` (raw cosine ``score``).
* :class:`CtxretEmbedding` — a ctxret embedder as a LlamaIndex ``BaseEmbedding``.
"""

from __future__ import annotations

from .embeddings import CtxretEmbedding
from .node_parser import (
    ContextualNodeParser,
    add_documents_to_index,
    documents_from_messages,
    documents_to_turns,
)
from .retriever import ContextualRetriever, groups_to_nodes

__all__ = [
    "ContextualNodeParser",
    "ContextualRetriever",
    "CtxretEmbedding",
    "add_documents_to_index",
    "documents_from_messages",
    "documents_to_turns",
    "groups_to_nodes",
]
