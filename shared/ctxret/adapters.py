"""The API the framework adapters are written against.

``langchain_ctxret`` and ``llamaindex_ctxret`` import the core from two places only: the public package
(``from ctxret import ContextualIndex, Group, InputError, ...``) and this module, never a deeper module and
never a private name (``tests/test_adapter_imports.py`` checks both). What is here is what an adapter needs
besides the public face: the write and read helpers it translates framework objects with, the metadata
schema's names, the scores it shows, and the LLM prompts of the views and HyDE. The adapters hold no
retrieval logic: every name below is the core's own function or constant, re-exported unchanged (one is
renamed: :func:`hit_document_key`, to tell it from the ingest side's :func:`document_key`).

A core module moved or renamed means one line changed here, not one in each adapter. Every name loads its
module on first use, so importing this module costs nothing (the local model's runtime, Chroma and the
frameworks load only when a name that needs them is used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .agent_memory import DEFAULT_MAX_CHARS, DEFAULT_TEMPLATE, AgentMemory, Recall
    from .embedders.local import shared_local_embedder
    from .embedders.truncation import truncate_to_fit
    from .embedders.wrappers import framework_model
    from .errors import missing_extra
    from .ingest.append import thread_messages
    from .ingest.documents import document_id, document_key, document_turns, documents_to_turns
    from .ingest.messages import turns_from_messages
    from .ingest.pieces import piece_metadata
    from .ingest.progress import progress_option
    from .ingest.turns import MIN_BODY_BYTES, Piece, Turn, label_pieces
    from .ingest.views import PROMPTS, llm_view_writer, llm_view_writers, numbered_chunks, parse_view_lines
    from .ingest.writer import turns_from_records
    from .items import ItemStore, ItemWrite, StoredItem
    from .query.documents import PIECES_PER_DOCUMENT
    from .query.documents import document_key as hit_document_key
    from .query.hyde import HYDE_PROMPT, llm_hyde
    from .query.nearest import nearest
    from .query.relevance import calibration_for, scored_metadata, shown_groups, shown_scores
    from .query.render import (
        DEFAULT_EMPTY_GROUP,
        DEFAULT_HEADING,
        DEFAULT_NO_RESULTS,
        MEMORY_NOTE,
        Entry,
        check_max_chars,
        entry_of,
        neutralize,
        render_entry,
        render_groups,
        render_sections,
    )
    from .query.settings import check_search_keys, check_search_options
    from .storage.schema import (
        FIELD_PREFIX,
        METADATA_PREFIX,
        RESERVED_KEYS,
        RETRIEVAL_KEYS,
        SHARED_KEYS,
        Scope,
        as_list,
        caller_keys,
        caller_view,
        candidate_metadata,
        stored_where,
    )
    from .store import open_store_arguments
    from .text import MAX_PARTS

#: name -> ``module`` (relative to ``ctxret``), or ``module:attribute`` for a name re-exported under another.
_SOURCES: dict[str, str] = {
    # errors
    "missing_extra": ".errors",
    # embedders
    "shared_local_embedder": ".embedders.local",
    "truncate_to_fit": ".embedders.truncation",
    "framework_model": ".embedders.wrappers",
    # writes: turns, documents, messages, pieces
    "Turn": ".ingest.turns",
    "Piece": ".ingest.turns",
    "MIN_BODY_BYTES": ".ingest.turns",
    "label_pieces": ".ingest.turns",
    "turns_from_messages": ".ingest.messages",
    "document_id": ".ingest.documents",
    "document_key": ".ingest.documents",
    "document_turns": ".ingest.documents",
    "documents_to_turns": ".ingest.documents",
    "piece_metadata": ".ingest.pieces",
    "turns_from_records": ".ingest.writer",
    "thread_messages": ".ingest.append",
    "progress_option": ".ingest.progress",
    # the metadata schema
    "FIELD_PREFIX": ".storage.schema",
    "METADATA_PREFIX": ".storage.schema",
    "RESERVED_KEYS": ".storage.schema",
    "RETRIEVAL_KEYS": ".storage.schema",
    "SHARED_KEYS": ".storage.schema",
    "Scope": ".storage.schema",
    "as_list": ".storage.schema",
    "caller_keys": ".storage.schema",
    "caller_view": ".storage.schema",
    "candidate_metadata": ".storage.schema",
    "stored_where": ".storage.schema",
    # reads: searches, scores, documents, rendering
    "MAX_PARTS": ".text",
    "nearest": ".query.nearest",
    "PIECES_PER_DOCUMENT": ".query.documents",
    "hit_document_key": ".query.documents:document_key",
    "calibration_for": ".query.relevance",
    "scored_metadata": ".query.relevance",
    "shown_groups": ".query.relevance",
    "shown_scores": ".query.relevance",
    "render_groups": ".query.render",
    "render_sections": ".query.render",
    "render_entry": ".query.render",
    "check_max_chars": ".query.render",
    "entry_of": ".query.render",
    "Entry": ".query.render",
    "neutralize": ".query.render",
    "MEMORY_NOTE": ".query.render",
    "DEFAULT_HEADING": ".query.render",
    "DEFAULT_EMPTY_GROUP": ".query.render",
    "DEFAULT_NO_RESULTS": ".query.render",
    "check_search_keys": ".query.settings",
    "check_search_options": ".query.settings",
    # LLM prompts: views and HyDE
    "PROMPTS": ".ingest.views",
    "llm_view_writer": ".ingest.views",
    "llm_view_writers": ".ingest.views",
    "numbered_chunks": ".ingest.views",
    "parse_view_lines": ".ingest.views",
    "HYDE_PROMPT": ".query.hyde",
    "llm_hyde": ".query.hyde",
    # stores, items, agent memory
    "open_store_arguments": ".store",
    "ItemStore": ".items",
    "ItemWrite": ".items",
    "StoredItem": ".items",
    "AgentMemory": ".agent_memory",
    "Recall": ".agent_memory",
    "DEFAULT_MAX_CHARS": ".agent_memory",
    "DEFAULT_TEMPLATE": ".agent_memory",
}

__all__ = [
    # errors
    "missing_extra",
    # embedders
    "shared_local_embedder",
    "truncate_to_fit",
    "framework_model",
    # writes: turns, documents, messages, pieces
    "Turn",
    "Piece",
    "MIN_BODY_BYTES",
    "label_pieces",
    "turns_from_messages",
    "document_id",
    "document_key",
    "document_turns",
    "documents_to_turns",
    "piece_metadata",
    "turns_from_records",
    "thread_messages",
    "progress_option",
    # the metadata schema
    "FIELD_PREFIX",
    "METADATA_PREFIX",
    "RESERVED_KEYS",
    "RETRIEVAL_KEYS",
    "SHARED_KEYS",
    "Scope",
    "as_list",
    "caller_keys",
    "caller_view",
    "candidate_metadata",
    "stored_where",
    # reads: searches, scores, documents, rendering
    "MAX_PARTS",
    "nearest",
    "PIECES_PER_DOCUMENT",
    "hit_document_key",
    "calibration_for",
    "scored_metadata",
    "shown_groups",
    "shown_scores",
    "render_groups",
    "render_sections",
    "render_entry",
    "check_max_chars",
    "entry_of",
    "Entry",
    "neutralize",
    "MEMORY_NOTE",
    "DEFAULT_HEADING",
    "DEFAULT_EMPTY_GROUP",
    "DEFAULT_NO_RESULTS",
    "check_search_keys",
    "check_search_options",
    # LLM prompts: views and HyDE
    "PROMPTS",
    "llm_view_writer",
    "llm_view_writers",
    "numbered_chunks",
    "parse_view_lines",
    "HYDE_PROMPT",
    "llm_hyde",
    # stores, items, agent memory
    "open_store_arguments",
    "ItemStore",
    "ItemWrite",
    "StoredItem",
    "AgentMemory",
    "Recall",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_TEMPLATE",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = source.partition(":")
    value = getattr(importlib.import_module(module, "ctxret"), attribute or name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCES))
