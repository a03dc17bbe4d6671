"""ctxret — contextual chunk retrieval for agent memory and documents.

Stored pieces are small and labelled and carry 20% of their turn in their vector; an incoming
message is split into parts, each blended with the whole message, each searching on its own and
keeping its own group of results.

The public face is small: the :class:`ContextualIndex` facade and its :class:`Store`, its configuration
(:class:`IndexConfig`, :class:`SearchSettings`, :class:`FusionSettings`), its results
(:class:`Group`, :class:`Hit`, :class:`IndexResult`), the embedders and the errors. The method's
stages are plain functions under :mod:`ctxret.text` and :mod:`ctxret.blend` (the two primitives),
:mod:`ctxret.ingest`, :mod:`ctxret.query`, :mod:`ctxret.embedders` and :mod:`ctxret.storage`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_dir, lazy_getattr
from ._version import __version__
from .errors import (
    CallableError,
    ClosedError,
    ConfigMismatchError,
    CtxretError,
    EmbeddingError,
    InputError,
    InputTooLongError,
    MissingExtraError,
    StoreError,
)
from .results import (
    Group,
    Hit,
    IndexResult,
    cosine_to_distance,
    cosine_to_unit_interval,
    distance_to_cosine,
    unit_interval_to_cosine,
)

if TYPE_CHECKING:
    from .embedders import Embedder, LocalEmbedder, OpenAIEmbedder
    from .index import ContextualIndex
    from .ingest.config import IndexConfig
    from .query.fusion import FusionMethod, FusionSettings
    from .query.settings import SearchSettings
    from .store import Store

# Heavy parts (Chroma, onnxruntime, openai) load on first use, so `import ctxret` stays light; dir() lists them.
_LAZY = {
    "ContextualIndex": ".index",
    "Store": ".store",
    "IndexConfig": ".ingest.config",
    "SearchSettings": ".query.settings",
    "FusionSettings": ".query.fusion",
    "FusionMethod": ".query.fusion",
    "Embedder": ".embedders",
    "LocalEmbedder": ".embedders",
    "OpenAIEmbedder": ".embedders",
}
__getattr__ = lazy_getattr(__name__, _LAZY)
__dir__ = lazy_dir(globals(), _LAZY)

__all__ = [
    "__version__",
    # the facade and its configuration
    "ContextualIndex",
    "Store",
    "IndexConfig",
    "SearchSettings",
    "FusionSettings",
    "FusionMethod",
    # results and score scales
    "Group",
    "Hit",
    "IndexResult",
    "cosine_to_distance",
    "distance_to_cosine",
    "cosine_to_unit_interval",
    "unit_interval_to_cosine",
    # embedders
    "Embedder",
    "LocalEmbedder",
    "OpenAIEmbedder",
    # errors
    "CtxretError",
    "ClosedError",
    "InputError",
    "InputTooLongError",
    "ConfigMismatchError",
    "EmbeddingError",
    "CallableError",
    "StoreError",
    "MissingExtraError",
]
