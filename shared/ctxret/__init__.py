"""ctxret — contextual chunk retrieval for agent memory and documents.

Stored pieces are small and labelled and carry 20% of their turn in their vector; an incoming
message is split into parts, each blended with the whole message, each searching on its own and
keeping its own group of results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from .results import (
    Group,
    Hit,
    IndexResult,
    cosine_to_distance,
    cosine_to_relevance,
    distance_to_cosine,
    relevance_to_cosine,
)
from .turns import Piece, Source, Turn, label_pieces, piece_id, turns_from_messages

if TYPE_CHECKING:
    from .embedders import Embedder, LocalEmbedder, OpenAIEmbedder
    from .fusion import FusionMethod
    from .index import ContextualIndex
    from .lexical import LexicalIndex

# Heavy parts (Chroma, onnxruntime, openai) load on first use, so `import ctxret` stays light.
_LAZY = {
    "ContextualIndex": ".index",
    "LexicalIndex": ".lexical",
    "FusionMethod": ".fusion",
    "Embedder": ".embedders",
    "LocalEmbedder": ".embedders",
    "OpenAIEmbedder": ".embedders",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "__version__",
    # the index and its results
    "ContextualIndex",
    "Group",
    "Hit",
    "IndexResult",
    "cosine_to_distance",
    "distance_to_cosine",
    "cosine_to_relevance",
    "relevance_to_cosine",
    # hybrid search
    "LexicalIndex",
    "FusionMethod",
    # embedders
    "Embedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
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
