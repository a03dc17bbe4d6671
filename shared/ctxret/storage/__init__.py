"""Storage: the metadata schema, Chroma, the lexical (BM25) index, and ``PieceStore`` which owns the two together.

Nothing outside this package touches a Chroma client or collection object.
"""

from __future__ import annotations

from .schema import METADATA_PREFIX, RESERVED_KEYS, RETRIEVAL_KEYS, Scope, flatten_metadata

__all__ = ["METADATA_PREFIX", "RESERVED_KEYS", "RETRIEVAL_KEYS", "Scope", "flatten_metadata"]
