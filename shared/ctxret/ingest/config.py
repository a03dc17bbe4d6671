"""What a collection is built with: :class:`IndexConfig`, recorded on the collection and compared when it is opened.

Vectors built with another model, dimension, blend weight, context strategy, piece budget, packer or views are never
mixed (:class:`~ctxret.errors.ConfigMismatchError` names each difference; ``ContextualIndex.rebuild`` re-embeds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from .._version import __version__
from ..blend import OWN_WEIGHT
from ..embedders.base import capabilities_of
from ..errors import InputError
from ..text import PACKER_VERSION
from .context import CONTEXT_STRATEGIES
from .turns import MIN_BODY_BYTES
from .views import normalize_views

__all__ = ["IndexConfig", "ContextStrategy", "COMPARED_KEYS", "MAX_INT", "check_piece_bytes"]

ContextStrategy = Literal["mean", "turn", "late", "llm"]
#: Config keys that must match between a collection and the index that opens it.
COMPARED_KEYS = ("model_id", "dims", "weight", "context", "piece_bytes", "packer", "views")
#: What a compared key means on a collection recorded before the key existed.
_ABSENT = {"views": ""}
#: The largest count or size an option takes (Chroma's and SQLite's limits are 32- or 64-bit; a
#: larger number is a mistake, not a wish).
MAX_INT = 2**31 - 1


@dataclass(frozen=True)
class IndexConfig:
    """How a collection's vectors were made. Recorded on the collection, compared on open."""

    model_id: str
    dims: int
    weight: float = OWN_WEIGHT
    context: str = "mean"
    piece_bytes: int = 600
    packer: str = PACKER_VERSION
    max_tokens: int = 256
    version: str = __version__
    #: LLM-written views stored beside each piece (``"questions"``, ``"summary"``, comma-joined; ``""``: none).
    views: str = ""

    def __post_init__(self) -> None:
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0.0 <= float(w) <= 1.0:
            raise InputError(f"weight must be between 0 and 1, got {w!r}")
        if self.context not in CONTEXT_STRATEGIES:
            raise InputError(f"context must be one of {CONTEXT_STRATEGIES}, got {self.context!r}")
        check_piece_bytes(self.piece_bytes)
        object.__setattr__(self, "weight", float(w))
        object.__setattr__(self, "dims", int(self.dims))
        object.__setattr__(self, "max_tokens", int(self.max_tokens))
        object.__setattr__(self, "views", ",".join(normalize_views(self.views)))

    @property
    def view_kinds(self) -> tuple[str, ...]:
        """The view kinds of :attr:`views`, in order (``()``: none)."""
        return tuple(k for k in self.views.split(",") if k)

    @classmethod
    def resolve(
        cls,
        embedder: Any,
        stored: Mapping[str, Any] | None,
        *,
        weight: float | None = None,
        context: str | None = None,
        piece_bytes: int | None = None,
        views: Any = None,
    ) -> IndexConfig:
        """The config an index opens with: what you asked, else the collection's, else the defaults."""
        stored = stored or {}
        # an embedder may name its best stored side (the local model: late chunking at weight 0);
        # the weight default goes with the context default, else it is 0.8
        capabilities = capabilities_of(embedder)
        default_context = str(capabilities.context)
        chosen: dict[str, Any] = {
            "context": context if context is not None else stored.get("context", default_context),
            "piece_bytes": (
                piece_bytes if piece_bytes is not None else stored.get("piece_bytes", int(embedder.default_piece_bytes))
            ),
        }
        if weight is not None:
            chosen["weight"] = weight
        elif "weight" in stored:
            chosen["weight"] = stored["weight"]
        elif chosen["context"] == default_context:
            chosen["weight"] = float(OWN_WEIGHT if capabilities.weight is None else capabilities.weight)
        else:
            chosen["weight"] = OWN_WEIGHT
        return cls(
            model_id=str(embedder.model_id),
            dims=int(embedder.dims),
            max_tokens=int(embedder.max_tokens),
            weight=chosen["weight"],
            context=chosen["context"],
            piece_bytes=chosen["piece_bytes"],
            views=views if views is not None else stored.get("views", ""),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def mismatch_message(self, stored: Mapping[str, Any], collection: str, location: str) -> str:
        """Why a collection built under ``stored`` cannot be opened with this config, and the fix."""
        lines = ", ".join(f"{k}: stored {old!r} vs asked {new!r}" for k, (old, new) in self.differences(stored).items())
        return (
            f"collection {collection!r} at {location} was built with another index config ({lines}). Open it with "
            "the same embedder and settings, or rebuild it under the new ones with ContextualIndex.rebuild(...) "
            "(same arguments; CLI: `ctxret reindex` with the new options); a rebuild re-embeds every stored piece "
            "and loses nothing."
        )

    def differences(self, stored: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
        """``{key: (stored, this)}`` for every compared key that differs."""
        mine = self.as_dict()
        return {
            k: (stored.get(k, _ABSENT.get(k)), mine[k])
            for k in COMPARED_KEYS
            if stored.get(k, _ABSENT.get(k)) != mine[k]
        }


def check_piece_bytes(value: Any) -> int:
    """``value`` as a piece byte budget (room for a header and a body), else an :class:`InputError`."""
    if isinstance(value, bool) or not isinstance(value, int) or not MIN_BODY_BYTES + 64 <= value <= MAX_INT:
        raise InputError(f"piece_bytes must be an integer from {MIN_BODY_BYTES + 64} to {MAX_INT:,}, got {value!r}")
    return value
