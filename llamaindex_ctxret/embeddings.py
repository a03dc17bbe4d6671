"""A ctxret embedder (the local model by default) as a LlamaIndex ``BaseEmbedding``."""

from __future__ import annotations

from typing import Any

from ctxret import Embedder
from ctxret.adapters import truncate_to_fit
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import Field, PrivateAttr

__all__ = ["CtxretEmbedding"]


class CtxretEmbedding(BaseEmbedding):
    """LlamaIndex ``BaseEmbedding`` over any ctxret :class:`~ctxret.embedders.base.Embedder`: the local MiniLM model
    (offline, CPU, no PyTorch) as ``Settings.embed_model`` or any index's ``embed_model``.

    Args:
        embedder: the ctxret embedder; ``None`` (default) uses the process-wide
            ``LocalEmbedder()`` (all-MiniLM-L6-v2 int8, offline; needs ``ctxret[local]``).
        embed_batch_size: texts per call to the embedder (LlamaIndex batches before calling;
            the embedder sorts and batches again inside).
        strict: ``False`` (default): a text over the model's input limit (256 tokens for the local model; the
            ``SentenceSplitter``'s default 1,024-token chunks are) is cut to its start that fits, with a warning, as
            sentence-transformers and Chroma's own MiniLM do. ``True``: such a text is refused with the embedder's
            error (:class:`ctxret.errors.InputTooLongError` for the local model), nothing embedded.
        **kwargs: other ``BaseEmbedding`` fields (``callback_manager``, ``num_workers``, ...).

    ``model_name`` is the embedder's ``model_id``. Queries and texts are embedded the same way.
    """

    strict: bool = Field(default=False, description="Refuse a text over the model's limit instead of cutting it.")
    _embedder: Any = PrivateAttr()

    def __init__(
        self, embedder: Embedder | None = None, *, embed_batch_size: int = 256, strict: bool = False, **kwargs: Any
    ):
        if embedder is None:
            from ctxret.adapters import shared_local_embedder

            embedder = shared_local_embedder()
        kwargs.setdefault("model_name", embedder.model_id)
        kwargs["strict"] = strict  # a field of this class (pydantic), not of BaseEmbedding
        super().__init__(embed_batch_size=embed_batch_size, **kwargs)
        self._embedder = embedder

    @classmethod
    def class_name(cls) -> str:
        return "CtxretEmbedding"

    @property
    def embedder(self) -> Embedder:
        """The wrapped ctxret embedder."""
        return self._embedder

    def _fit(self, texts: list[str]) -> list[str]:
        return list(texts) if self.strict else truncate_to_fit(self._embedder, texts)

    def _get_query_embedding(self, query: str) -> Embedding:
        return self._embedder.embed(self._fit([query]))[0].tolist()

    async def _aget_query_embedding(self, query: str) -> Embedding:
        return (await self._embedder.aembed(self._fit([query])))[0].tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        return self._embedder.embed(self._fit([text]))[0].tolist()

    async def _aget_text_embedding(self, text: str) -> Embedding:
        return (await self._embedder.aembed(self._fit([text])))[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return self._embedder.embed(self._fit(list(texts))).tolist()

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        return (await self._embedder.aembed(self._fit(list(texts)))).tolist()
