"""The embedder protocol: any backend that turns texts into unit vectors, in input order.

Beyond the protocol's members, an embedder may say what it prefers and what more it can do:

* its preferences, in one typed value: ``capabilities`` (an :class:`EmbedderCapabilities`: the stored side a
  new collection gets, the time one call of a write may take, its own relevance curve), read through
  :func:`capabilities_of` (the defaults for an embedder that declares none);
* the optional methods, each a protocol checked by one function: late chunking (:class:`LateChunkingEmbedder`,
  :func:`can_embed_late`), token output (:class:`TokenEmbedder`, :func:`gives_tokens`; with
  ``embed_tokens_many``, :func:`gives_token_batches`), requests bounded for a search's deadline
  (:class:`BoundableEmbedder`, :func:`can_bound`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeGuard, runtime_checkable

import numpy as np

from ..errors import EmbeddingError


@runtime_checkable
class Embedder(Protocol):
    """What the index needs from an embedding backend.

    ``embed`` returns an ``(n, dims)`` float32 array of unit rows (a row of an empty text may be
    zero), in input order. ``model_id`` is recorded in the index config so a collection is never
    searched with vectors from another model. ``max_tokens`` is the model's input limit; the
    index sizes pieces so that ``count_tokens`` never exceeds it (``count_tokens`` may return an
    upper bound when the exact tokenizer is unavailable, never an underestimate).

    What an embedder prefers beyond this (its default stored side, its write timeout, its relevance curve) is
    its ``capabilities`` (:class:`EmbedderCapabilities`, read through :func:`capabilities_of`): optional, so
    that any object with these members is an embedder.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dims(self) -> int: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def default_piece_bytes(self) -> int:
        """The piece byte budget that fits this model (the index's default for it)."""
        ...

    @property
    def default_score_threshold(self) -> float:
        """A sensible default cosine floor for this model's vectors (calibrate on your data)."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    async def aembed(self, texts: Sequence[str]) -> np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> list[int]: ...


#: Seconds one call of a write may take when the embedder does not say (``EmbedderCapabilities.embed_timeout``):
#: a remote model's answer for one write batch, with its own retries, comes well within it.
DEFAULT_EMBED_TIMEOUT = 300.0


@dataclass(frozen=True)
class EmbedderCapabilities:
    """What an embedder prefers, beyond the protocol: an embedder's ``capabilities`` (a class attribute), read
    through :func:`capabilities_of`. Every field has the default an embedder that declares nothing gets.

    ``context``: the context strategy a new collection gets with this embedder (``"mean"``; the local model:
    ``"late"``). ``weight``: the blend weight that goes with that default context (``None``: the blend's own,
    0.8). ``embed_timeout``: seconds one embedding call of a write may take (``None``: no limit — the local model
    runs in this process, OpenAI's client bounds its own requests). ``relevance``: the embedder's own
    relevance curve, a :class:`ctxret.query.relevance.RelevanceCalibration` (``None``: a fitted one for its
    model family, else the placeholder).
    """

    context: str = "mean"
    weight: float | None = None
    embed_timeout: float | None = DEFAULT_EMBED_TIMEOUT
    relevance: object | None = None


#: The capabilities of an embedder that declares none.
NO_CAPABILITIES = EmbedderCapabilities()
#: The older form, one attribute per field (``default_context``, ``default_weight``, ``embed_timeout``,
#: ``default_relevance``): still read from an embedder that declares no ``capabilities``.
_ATTRIBUTES = {
    "context": "default_context",
    "weight": "default_weight",
    "embed_timeout": "embed_timeout",
    "relevance": "default_relevance",
}


def capabilities_of(embedder: Any) -> EmbedderCapabilities:
    """``embedder``'s declared :class:`EmbedderCapabilities` (a wrapper that forwards attributes: the wrapped
    embedder's), else the defaults, with what it says in the older one-attribute-per-field form."""
    declared = getattr(embedder, "capabilities", None)
    if isinstance(declared, EmbedderCapabilities):
        return declared
    missing = object()
    given: dict[str, Any] = {field: getattr(embedder, name, missing) for field, name in _ATTRIBUTES.items()}
    if all(value is missing for value in given.values()):
        return NO_CAPABILITIES
    return EmbedderCapabilities(**{field: value for field, value in given.items() if value is not missing})


# -- the optional methods ----------------------------------------------------------------------------------------
@runtime_checkable
class LateChunkingEmbedder(Protocol):
    """An embedder that reads each turn's pieces in one token pass (:meth:`ctxret.embedders.LocalEmbedder.embed_late`:
    per turn, its pieces' context vectors and, with ``own``, their own embeddings where the pass gives them)."""

    def embed_late(
        self, turns: Sequence[Sequence[str]], *, own: bool = False, progress: Callable[[int], object] | None = None
    ) -> Any: ...


@runtime_checkable
class TokenEmbedder(Protocol):
    """An embedder with token-level output (:meth:`ctxret.embedders.LocalEmbedder.embed_tokens`): a text's token
    vectors and their character spans, what late chunking pools."""

    def embed_tokens(self, text: str) -> Any: ...


@runtime_checkable
class TokenBatchEmbedder(TokenEmbedder, Protocol):
    """A :class:`TokenEmbedder` that reads many texts in one call (``embed_tokens_many``)."""

    def embed_tokens_many(self, texts: Sequence[str]) -> list[Any]: ...


@runtime_checkable
class BoundableEmbedder(Protocol):
    """An embedder whose requests can be given up after ``seconds`` (:meth:`ctxret.embedders.OpenAIEmbedder.bounded`):
    what a search with ``deadline_ms`` embeds with."""

    def bounded(self, seconds: float) -> Any: ...


# Checked by presence (``callable``), not ``isinstance``: a wrapper that forwards attributes (``__getattr__``) offers
# its embedder's methods, which ``isinstance`` on a protocol does not see from Python 3.12 on.
def can_embed_late(embedder: Any) -> TypeGuard[LateChunkingEmbedder]:
    """Whether ``embedder`` does late chunking in one pass per turn (``embed_late``)."""
    return callable(getattr(embedder, "embed_late", None))


def gives_tokens(embedder: Any) -> TypeGuard[TokenEmbedder]:
    """Whether ``embedder`` gives token-level output (``embed_tokens``)."""
    return callable(getattr(embedder, "embed_tokens", None))


def gives_token_batches(embedder: Any) -> TypeGuard[TokenBatchEmbedder]:
    """Whether ``embedder`` gives token-level output for many texts in one call (``embed_tokens_many``)."""
    return gives_tokens(embedder) and callable(getattr(embedder, "embed_tokens_many", None))


def can_bound(embedder: Any) -> TypeGuard[BoundableEmbedder]:
    """Whether ``embedder`` can bound its requests for a search's deadline (``bounded``)."""
    return callable(getattr(embedder, "bounded", None))


def embedder_name(embedder: Any) -> str:
    """How errors name an embedder: its type and model id (a guard's: the embedder it guards, :mod:`.guard`)."""
    embedder = getattr(embedder, "guarded_embedder", embedder)
    try:
        model = getattr(embedder, "model_id", "?")
    except Exception:  # an embedder whose model_id fails: named by its type  # noqa: BLE001
        model = "?"
    return f"{type(embedder).__name__} ({model})"


def check_vectors(vectors: Any, n: int, dims: int, model: str) -> np.ndarray:
    """An embedder's answer for ``n`` texts as the ``(n, dims)`` float32 array the protocol promises.

    Anything else (another count or size, a flat or ragged answer, NaN or infinity) is an
    :class:`EmbeddingError` naming the embedder (``model``) and the fix: nothing is truncated,
    padded, stored or searched with. Every embedding goes through it, written or searched.
    """
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 2 or arr.shape[0] != n:
        got = "a ragged or non-numeric answer" if arr is None else f"an array of shape {arr.shape}"
        raise EmbeddingError(
            f"the embedder {model} returned {got} for {n} texts; it must return one {dims}-dimensional vector "
            "per text, in order (an (n, dims) array): check its embed() and aembed()"
        )
    if arr.shape[1] != dims:
        raise EmbeddingError(
            f"the embedder {model} returned {arr.shape[1]}-dimensional vectors but this index holds "
            f"{dims}-dimensional ones; use the embedder (and dimensions) the index was built with, or rebuild it"
        )
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise EmbeddingError(
            f"the embedder {model} returned vectors with NaN or infinite values ({len(bad)} of {n}, the first for "
            f"text {int(bad[0])}); nothing was stored or searched with them: check the model and its inputs"
        )
    return arr
