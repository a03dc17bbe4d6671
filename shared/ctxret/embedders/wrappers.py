"""Any LangChain ``Embeddings`` or LlamaIndex ``BaseEmbedding`` as a ctxret :class:`Embedder`.

Duck-typed: no framework is imported here. A LangChain object needs ``embed_documents`` (and
optionally ``aembed_documents``); a LlamaIndex object needs ``get_text_embedding_batch`` (and
optionally ``aget_text_embedding_batch``). Output rows are float32 and unit-normalised.
Every answer of the wrapped model is checked before it is used, and refused with
:class:`EmbeddingError` naming the problem and the fix: the wrong number of vectors, vectors of
different lengths, non-numbers, vectors of another size than ``dims`` (given, or learnt from
the first vector the model returned), NaN or infinite numbers, and all-zero vectors (a zero
vector matches nothing, so it is never handed to the index). Empty and whitespace-only texts
are not sent (many APIs reject ``""``): their rows are zero.

The wrapped model's tokenizer is unknown, so ``count_tokens`` returns UTF-8 byte lengths, an
upper bound for BPE/WordPiece tokenizers (every token is at least one byte).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import EmbeddingError, InputError
from ..text import clean_text
from .base import EmbedderCapabilities
from .batching import utf8_len

logger = logging.getLogger(__name__)

__all__ = ["LangChainEmbedder", "LlamaIndexEmbedder", "as_embedder", "framework_model"]

#: Text embedded once to learn the dimension when ``dims`` is not given.
DIMENSION_PROBE = "dimension probe"


class _WrappedEmbedder:
    """Shared logic: cleaning, the lazy dimension probe, checking and normalising rows."""

    _framework = ""
    _sync_method = ""
    _async_method = ""
    #: The defaults: a remote model's call of a write is bounded by ``DEFAULT_EMBED_TIMEOUT`` (:mod:`.guard`).
    capabilities: EmbedderCapabilities = EmbedderCapabilities()

    def __init__(
        self,
        model: Any,
        *,
        model_id: str | None,
        dims: int | None,
        max_tokens: int | None,
        default_piece_bytes: int,
        default_score_threshold: float,
    ) -> None:
        if not callable(getattr(model, self._sync_method, None)):
            raise InputError(
                f"{type(self).__name__} wraps a {self._framework} embedding model with a "
                f"{self._sync_method}() method; got {type(model).__name__}, which has none"
            )
        if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
            raise InputError(f"dims must be a positive integer or None, got {dims!r}")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise InputError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")
        self.model = model
        name = getattr(model, "model", None) or getattr(model, "model_name", None) or ""
        self.model_id = model_id or f"{self._framework}:{type(model).__name__}:{name}"
        self.max_tokens = max_tokens if max_tokens is not None else 8191
        self.default_piece_bytes = default_piece_bytes
        self.default_score_threshold = default_score_threshold
        self._dims = dims
        self._dims_source = f"dims={dims} was given" if dims is not None else ""
        self._lock = threading.RLock()  # held by the probe in ``dims`` while _check sets it

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dims={self._dims})"

    @property
    def dims(self) -> int:
        """Numbers per vector: given, learnt from the first vectors returned, or (read before any
        embedding) learnt by embedding :data:`DIMENSION_PROBE` once."""
        if self._dims is None:
            with self._lock:
                if self._dims is None:
                    self._check(self._call_sync([DIMENSION_PROBE]), [0])
        assert self._dims is not None  # learnt by _check
        return self._dims

    @staticmethod
    def _clean_all(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise InputError("expected a list of texts, got a single str; wrap it: embed([text])")
        return [clean_text(t) for t in texts]

    def _call_sync(self, texts: list[str]) -> Any:
        return getattr(self.model, self._sync_method)(texts)

    async def _call_async(self, texts: list[str]) -> Any:
        method: Callable[..., Any] | None = getattr(self.model, self._async_method, None)
        if method is None:
            return await asyncio.to_thread(self._call_sync, texts)
        return await method(texts)

    def _check(self, rows: Any, where: list[int]) -> np.ndarray:
        """``rows`` as ``(len(where), dims)`` float32 unit rows, or :class:`EmbeddingError`.

        ``where`` holds the caller's row numbers of the texts sent (for messages). The first
        vectors checked set ``dims`` when it was not given.
        """
        who = f"{type(self.model).__name__}.{self._sync_method}"
        expected = len(where)
        fix = "check the embedding model"
        try:
            arr = np.asarray(rows)
        except (TypeError, ValueError):  # ragged nested lists (numpy refuses them)
            arr = np.asarray(None)
        if arr.dtype == object:
            sizes = _row_sizes(rows)
            if sizes is not None and len(sizes) > 1:
                raise EmbeddingError(
                    f"{who} returned vectors of different lengths ({_join(sizes)} numbers) for "
                    f"{expected} texts; every vector must have the same length: {fix}"
                )
            raise EmbeddingError(
                f"{who} returned {type(rows).__name__} that is not a list of vectors of numbers; "
                f"expected {expected} vectors (one per text): {fix}"
            )
        if arr.dtype.kind not in "iuf":
            raise EmbeddingError(
                f"{who} returned {arr.dtype} values, not numbers; expected {expected} vectors of "
                f"numbers (one per text): {fix}"
            )
        if arr.ndim != 2 or arr.shape[0] != expected:
            got = (
                f"one flat list of {arr.size} numbers"
                if arr.ndim == 1 and arr.size
                else f"{arr.shape[0] if arr.ndim else 0} vectors of shape {arr.shape[1:]}"
            )
            raise EmbeddingError(
                f"{who} returned {got} for {expected} texts; expected one vector per text, in order: {fix}"
            )
        got_dims = arr.shape[1]
        if got_dims == 0:
            raise EmbeddingError(f"{who} returned empty vectors for {expected} texts: {fix}")
        with self._lock:
            if self._dims is None:
                self._dims = got_dims
                self._dims_source = "the first vectors it returned had that size"
        if got_dims != self._dims:
            raise EmbeddingError(
                f"{who} returned {got_dims}-dimensional vectors, expected {self._dims} "
                f"({self._dims_source}); nothing was returned. Pass dims={got_dims} if this is "
                f"the model you meant (an index built with {self._dims}-dimensional vectors "
                "must then be rebuilt), or wrap the model the index was built with"
            )
        arr = arr.astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
        if bad.size:
            raise EmbeddingError(
                f"{who} returned NaN or infinite numbers in row {where[int(bad[0])]} "
                f"({bad.size} bad row(s)); nothing was returned: {fix}"
            )
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        zero = np.flatnonzero(norms[:, 0] == 0)
        if zero.size:
            raise EmbeddingError(
                f"{who} returned an all-zero vector in row {where[int(zero[0])]} for a non-empty "
                f"text ({zero.size} such row(s)); a zero vector matches nothing and is never "
                f"stored, so nothing was returned: {fix}"
            )
        return (arr / norms).astype(np.float32)

    def _assemble(self, cleaned: list[str], sent: list[int], rows: Any) -> np.ndarray:
        checked = self._check(rows, sent) if sent else None
        out = np.zeros((len(cleaned), self.dims), dtype=np.float32)
        if checked is not None:
            out[sent] = checked
        return out

    @staticmethod
    def _to_send(cleaned: list[str]) -> list[int]:
        return [i for i, t in enumerate(cleaned) if t.strip()]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, dims)`` float32 unit rows in input order; empty/whitespace texts give zero rows."""
        cleaned = self._clean_all(texts)
        sent = self._to_send(cleaned)
        rows = self._call_sync([cleaned[i] for i in sent]) if sent else None
        return self._assemble(cleaned, sent, rows)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`embed`, through the model's async method (or a worker thread without one)."""
        cleaned = self._clean_all(texts)
        sent = self._to_send(cleaned)
        if not sent and self._dims is None:
            self._check(await self._call_async([DIMENSION_PROBE]), [0])
        rows = await self._call_async([cleaned[i] for i in sent]) if sent else None
        return self._assemble(cleaned, sent, rows)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """UTF-8 byte lengths: an upper bound on tokens (the wrapped tokenizer is unknown)."""
        return [utf8_len(t) for t in self._clean_all(texts)]


def _row_sizes(rows: Any) -> list[int] | None:
    """The distinct lengths of ``rows``' items, or None when they have no length."""
    try:
        return sorted({len(row) for row in rows})
    except TypeError:
        return None


def _join(sizes: list[int]) -> str:
    return ", ".join(map(str, sizes[:5])) + (", ..." if len(sizes) > 5 else "")


class LangChainEmbedder(_WrappedEmbedder):
    """A LangChain ``Embeddings`` (``embed_documents`` / ``aembed_documents``) as a ctxret Embedder.

    ``model_id`` defaults to ``langchain:<class name>:<model or model_name attribute>``;
    ``dims``, when not given, is learnt from the first vectors the model returns (or, read before
    any embedding, by embedding ``"dimension probe"`` once), and every later vector is checked
    against it; ``max_tokens`` defaults to 8191.
    """

    _framework = "langchain"
    _sync_method = "embed_documents"
    _async_method = "aembed_documents"

    def __init__(
        self,
        embeddings: Any,
        *,
        model_id: str | None = None,
        dims: int | None = None,
        max_tokens: int | None = None,
        default_piece_bytes: int = 1200,
        default_score_threshold: float = 0.35,
    ) -> None:
        super().__init__(
            embeddings,
            model_id=model_id,
            dims=dims,
            max_tokens=max_tokens,
            default_piece_bytes=default_piece_bytes,
            default_score_threshold=default_score_threshold,
        )


class LlamaIndexEmbedder(_WrappedEmbedder):
    """A LlamaIndex ``BaseEmbedding`` (``get_text_embedding_batch``) as a ctxret Embedder.

    ``model_id`` defaults to ``llamaindex:<class name>:<model or model_name attribute>``; the
    rest as in :class:`LangChainEmbedder`.
    """

    _framework = "llamaindex"
    _sync_method = "get_text_embedding_batch"
    _async_method = "aget_text_embedding_batch"

    def __init__(
        self,
        embed_model: Any,
        *,
        model_id: str | None = None,
        dims: int | None = None,
        max_tokens: int | None = None,
        default_piece_bytes: int = 1200,
        default_score_threshold: float = 0.35,
    ) -> None:
        super().__init__(
            embed_model,
            model_id=model_id,
            dims=dims,
            max_tokens=max_tokens,
            default_piece_bytes=default_piece_bytes,
            default_score_threshold=default_score_threshold,
        )


def framework_model(embedder: Any) -> Any | None:
    """The framework model a :class:`LangChainEmbedder` or :class:`LlamaIndexEmbedder` wraps (what was passed in:
    a LangChain ``Embeddings``, a LlamaIndex ``BaseEmbedding``), else ``None`` (any other embedder)."""
    return embedder.model if isinstance(embedder, _WrappedEmbedder) else None


def as_embedder(model: Any) -> Any:
    """``model`` as a ctxret :class:`~ctxret.embedders.base.Embedder`: the ctxret embedder inside
    ``langchain_ctxret.CtxretEmbeddings`` / ``llamaindex_ctxret.CtxretEmbedding``, any other LangChain
    ``Embeddings`` (``embed_documents``) wrapped in :class:`LangChainEmbedder` and any LlamaIndex
    ``BaseEmbedding`` (``get_text_embedding_batch``) in :class:`LlamaIndexEmbedder` (their defaults:
    1,200-byte pieces, floor 0.35; wrap it yourself to set ``dims``, ``max_tokens`` or the defaults);
    any other object with ``embed`` is taken as a ctxret embedder. Anything else is an :class:`InputError`."""
    inner = getattr(model, "embedder", None)
    if type(model).__name__ in ("CtxretEmbeddings", "CtxretEmbedding") and callable(getattr(inner, "embed", None)):
        return inner
    if isinstance(model, _WrappedEmbedder):
        return model
    if callable(getattr(model, "embed_documents", None)):
        return LangChainEmbedder(model)
    if callable(getattr(model, "get_text_embedding_batch", None)):
        return LlamaIndexEmbedder(model)
    if callable(getattr(model, "embed", None)):
        return model
    raise InputError(
        f"embedder must be a ctxret Embedder (LocalEmbedder, OpenAIEmbedder), a LangChain Embeddings or a LlamaIndex "
        f"BaseEmbedding; got {type(model).__name__}"
    )
