"""A ctxret embedder (the local model by default) as a LangChain ``Embeddings``, for any vector store."""

from __future__ import annotations

from ctxret import Embedder
from ctxret.adapters import truncate_to_fit
from langchain_core.embeddings import Embeddings

__all__ = ["CtxretEmbeddings"]


class CtxretEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over any ctxret :class:`~ctxret.embedders.base.Embedder`: the local MiniLM model
    (offline, CPU, no PyTorch) for langchain-chroma, FAISS or any other store.

    Args:
        embedder: the ctxret embedder; ``None`` (default) uses the process-wide
            ``LocalEmbedder()`` (all-MiniLM-L6-v2 int8, offline; needs ``ctxret[local]``).
        strict: ``False`` (default): a text over the model's input limit (256 tokens for the local model; a
            ``RecursiveCharacterTextSplitter(chunk_size=1000)`` chunk often is) is cut to its start that fits, with a
            warning, as sentence-transformers and Chroma's own MiniLM do. ``True``: such a text is refused with the
            embedder's error (:class:`ctxret.errors.InputTooLongError` for the local model), nothing embedded.

    Vectors are the embedder's unit rows as lists of floats. Documents and queries are embedded
    the same way (the model is symmetric).

    >>> from langchain_ctxret import CtxretEmbeddings                      # doctest: +SKIP
    >>> store = Chroma(embedding_function=CtxretEmbeddings())              # doctest: +SKIP
    """

    def __init__(self, embedder: Embedder | None = None, *, strict: bool = False) -> None:
        if embedder is None:
            from ctxret.adapters import shared_local_embedder

            embedder = shared_local_embedder()
        if not isinstance(strict, bool):
            raise ValueError(f"strict must be True or False, got {strict!r}")
        self.embedder = embedder
        self.strict = strict

    def __repr__(self) -> str:
        return f"CtxretEmbeddings(embedder={self.embedder!r}, strict={self.strict})"

    @property
    def model(self) -> str:
        """The embedder's ``model_id`` (read by ctxret's LangChainEmbedder for its own id)."""
        return self.embedder.model_id

    def _fit(self, texts: list[str]) -> list[str]:
        return list(texts) if self.strict else truncate_to_fit(self.embedder, texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order."""
        return self.embedder.embed(self._fit(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        """The vector of one text."""
        return self.embedder.embed(self._fit([text]))[0].tolist()

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order (the embedder's async path)."""
        return (await self.embedder.aembed(self._fit(texts))).tolist()

    async def aembed_query(self, text: str) -> list[float]:
        """The vector of one text (the embedder's async path)."""
        return (await self.embedder.aembed(self._fit([text])))[0].tolist()
