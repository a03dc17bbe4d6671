"""A ctxret embedder (the local model by default) as a LangChain ``Embeddings``."""

from __future__ import annotations

from ctxret.embedders.base import Embedder
from langchain_core.embeddings import Embeddings

__all__ = ["CtxretEmbeddings"]


class CtxretEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over any ctxret :class:`~ctxret.embedders.base.Embedder`.

    Args:
        embedder: the ctxret embedder; ``None`` (default) uses the process-wide
            ``LocalEmbedder()`` (all-MiniLM-L6-v2 int8, offline; needs ``ctxret[local]``).

    Vectors are the embedder's unit rows as lists of floats. Documents and queries are embedded
    the same way (the model is symmetric).
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        if embedder is None:
            from ctxret.embedders.local import shared_local_embedder

            embedder = shared_local_embedder()
        self.embedder = embedder

    def __repr__(self) -> str:
        return f"CtxretEmbeddings(embedder={self.embedder!r})"

    @property
    def model(self) -> str:
        """The embedder's ``model_id`` (read by ctxret's LangChainEmbedder for its own id)."""
        return self.embedder.model_id

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        return self.embedder.embed(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text."""
        return self.embedder.embed([text])[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (the embedder's async path)."""
        return (await self.embedder.aembed(list(texts))).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        """The vector of one text (the embedder's async path)."""
        return (await self.embedder.aembed([text]))[0].tolist()
