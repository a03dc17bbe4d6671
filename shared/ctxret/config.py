"""The configuration objects, re-exported from the stages that use them: what a collection is built with
(:class:`IndexConfig`, :mod:`ctxret.ingest.config`) and how a search runs (:class:`SearchSettings`,
:mod:`ctxret.query.settings`, with its hybrid part :class:`FusionSettings`, :mod:`ctxret.query.fusion`).
"""

from __future__ import annotations

from .ingest.config import COMPARED_KEYS, ContextStrategy, IndexConfig, check_piece_bytes
from .query.fusion import FusionMethod, FusionSettings
from .query.settings import SearchSettings

__all__ = [
    "IndexConfig",
    "SearchSettings",
    "FusionSettings",
    "ContextStrategy",
    "COMPARED_KEYS",
    "FusionMethod",
    "check_piece_bytes",
]
