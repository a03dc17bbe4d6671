"""Any LangChain ``Embeddings`` or LlamaIndex ``BaseEmbedding`` as a ctxret :class:`Embedder`.

Duck-typed: no framework is imported here. A LangChain object needs ``embed_documents`` (and
optionally ``aembed_documents``); a LlamaIndex object needs ``get_text_embedding_batch`` (and
optionally ``aget_text_embedding_batch``). Output rows are float32 and unit-normalised (a zero
row stays zero); a row with NaN or infinite numbers raises :class:`EmbeddingError` naming it.
Empty and whitespace-only texts are not sent (many APIs reject ``""``): their rows are zero.

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
from .batching import utf8_len

logger = logging.getLogger(__name__)

__all__ = ["LangChainEmbedder", "LlamaIndexEmbedder"]

#: Text embedded once to learn the dimension when ``dims`` is not given.
DIMENSION_PROBE = "dimension probe"


class _WrappedEmbedder:
    """Shared logic: cleaning, the lazy dimension probe, checking and normalising rows."""

    _framework = ""
    _sync_method = ""
    _async_method = ""

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
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, dims={self._dims})"

    @property
    def dims(self) -> int:
        """Numbers per vector: given, or learnt by embedding :data:`DIMENSION_PROBE` once."""
        if self._dims is None:
            with self._lock:
                if self._dims is None:
                    rows = self._call_sync([DIMENSION_PROBE])
                    self._dims = self._check(rows, 1, learn=True).shape[1]
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

    def _check(self, rows: Any, expected: int, *, learn: bool = False) -> np.ndarray:
        """``rows`` as an ``(expected, dims)`` float32 array of unit rows, or EmbeddingError."""
        who = f"{type(self.model).__name__}.{self._sync_method}"
        try:
            arr = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                f"{who} returned vectors of different lengths or non-numbers"
            ) from exc
        if arr.ndim != 2 or arr.shape[0] != expected:
            raise EmbeddingError(
                f"{who} returned {arr.shape[0] if arr.ndim else 0} vectors of shape "
                f"{arr.shape[1:]} "
                f"for {expected} texts; expected one vector per text"
            )
        if not learn:
            dims = self._dims
            if dims is not None and arr.shape[1] != dims:
                raise EmbeddingError(
                    f"{who} returned {arr.shape[1]}-dimensional vectors, expected {dims}; "
                    "pass the right dims= (or leave it None to probe)"
                )
        bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
        if bad.size:
            raise EmbeddingError(
                f"{who} returned NaN or infinite numbers in row {int(bad[0])} "
                f"({bad.size} bad row(s)); check the embedding model"
            )
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        return (arr / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _assemble(self, cleaned: list[str], sent: list[int], rows: Any) -> np.ndarray:
        out = np.zeros((len(cleaned), self.dims), dtype=np.float32)
        if sent:
            out[sent] = self._check(rows, len(sent))
        return out

    @staticmethod
    def _to_send(cleaned: list[str]) -> list[int]:
        return [i for i, t in enumerate(cleaned) if t.strip()]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, dims)`` float32 unit rows in input order; empty/whitespace texts give zero rows."""
        cleaned = self._clean_all(texts)
        sent = self._to_send(cleaned)
        self.dims  # noqa: B018 - learns the dimension once (a probe) when it was not given
        rows = self._call_sync([cleaned[i] for i in sent]) if sent else None
        return self._assemble(cleaned, sent, rows)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`embed`, through the model's async method (or a worker thread without one)."""
        cleaned = self._clean_all(texts)
        if self._dims is None:
            rows = await self._call_async([DIMENSION_PROBE])
            with self._lock:
                if self._dims is None:
                    self._dims = self._check(rows, 1, learn=True).shape[1]
        sent = self._to_send(cleaned)
        rows = await self._call_async([cleaned[i] for i in sent]) if sent else None
        return self._assemble(cleaned, sent, rows)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """UTF-8 byte lengths: an upper bound on tokens (the wrapped tokenizer is unknown)."""
        return [utf8_len(t) for t in self._clean_all(texts)]


class LangChainEmbedder(_WrappedEmbedder):
    """A LangChain ``Embeddings`` (``embed_documents`` / ``aembed_documents``) as a ctxret Embedder.

    ``model_id`` defaults to ``langchain:<class name>:<model or model_name attribute>``;
    ``dims`` is probed once (by embedding ``"dimension probe"``) when not given; ``max_tokens``
    defaults to 8191.
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
