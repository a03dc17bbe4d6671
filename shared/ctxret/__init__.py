"""ctxret — contextual chunk retrieval for agent memory and documents.

Stored pieces are small and labelled and carry 20% of their turn in their vector; an incoming
message is split into parts, each blended with the whole message, each searching on its own and
keeping its own group of results.
"""

from __future__ import annotations

from ._version import __version__
from .batching import MAX_BYTES_PER_REQUEST, MAX_INPUTS_PER_REQUEST, plan_batches
from .blend import CHUNK_FOCUS_WEIGHT, chunk_search_vector, mean_vector, truncate_dims, unit
from .documents import document_turns, split_sections
from .errors import (
    ConfigMismatchError,
    CtxretError,
    EmbeddingError,
    InputError,
    InputTooLongError,
    MissingExtraError,
)
from .text import clean_text, pack_text_pieces, split_prompt_chunks, tail_utf8
from .turns import Piece, Source, Turn, label_pieces, piece_id, turns_from_messages

__all__ = [
    "__version__",
    # blending
    "CHUNK_FOCUS_WEIGHT",
    "unit",
    "chunk_search_vector",
    "mean_vector",
    "truncate_dims",
    # text
    "clean_text",
    "split_prompt_chunks",
    "tail_utf8",
    "pack_text_pieces",
    # turns, documents, pieces
    "Source",
    "Turn",
    "Piece",
    "turns_from_messages",
    "label_pieces",
    "piece_id",
    "document_turns",
    "split_sections",
    # requests
    "plan_batches",
    "MAX_INPUTS_PER_REQUEST",
    "MAX_BYTES_PER_REQUEST",
    # errors
    "CtxretError",
    "InputError",
    "InputTooLongError",
    "ConfigMismatchError",
    "EmbeddingError",
    "MissingExtraError",
]
