"""``ContextualRetriever``: a LangChain retriever over a :class:`ctxret.index.ContextualIndex`.

Thin on purpose: every search goes through ``ContextualIndex.search`` / ``asearch`` (splitting,
blending, scoping, floors, hybrid options), and every write through the core's indexer. This module
only maps LangChain objects in and ``Group``/``Hit`` results out as Documents.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ctxret.errors import InputError
from ctxret.index import ContextualIndex
from ctxret.results import Group, Hit, IndexResult
from ctxret.storage.schema import METADATA_PREFIX, RETRIEVAL_KEYS, hit_metadata
from ctxret.text import MAX_PARTS
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import BaseRetriever
from pydantic import Field, field_validator

from .messages import messages_to_openai

__all__ = [
    "ContextualRetriever",
    "groups_to_documents",
    "hit_to_document",
    "OUTPUT_KEYS",
    "METADATA_PREFIX",
]

#: Metadata keys the retriever sets on every Document it returns (plus ``score_<name>`` for each
#: named score of the hit: ``score_cosine``; with hybrid search ``score_bm25``, ``score_fused``).
OUTPUT_KEYS = RETRIEVAL_KEYS
#: Search settings that are retriever fields (and ``invoke`` keywords), not ``search_kwargs`` keys.
_FIELD_KEYS = frozenset({"k", "score_threshold", "thread_id", "where", "max_parts"})


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Any = _Unset()


class ContextualRetriever(BaseRetriever):
    """Contextual chunk retrieval as a LangChain retriever: one group of results per message part.

    The incoming message is split by the index into at most ``max_parts`` parts; each part
    (blended with the whole message) searches on its own and keeps its own ``k`` results. The
    Documents come back ordered group by group; a piece that supports two parts appears in both
    groups. Each Document has ``page_content`` = the piece text (header + body), ``id`` = the
    piece id, and metadata = the piece's stored metadata plus:

    - ``group`` (int, 0-based part index), ``group_query`` (the part text), ``group_rank``
      (0-based rank inside its group), ``group_count`` (number of parts) and ``group_parts``
      (every part's text, so a renderer can show parts that found nothing);
    - ``score``: the hit's ranking score, ``score_scale``: its name (``"cosine"``: raw cosine in
      [-1, 1], higher is better — not a distance; ``"fused"`` with hybrid search), and
      ``score_<name>`` for every named score (``score_cosine`` always for dense search).

    ``k``, ``score_threshold``, ``thread_id``, ``where``, ``max_parts`` and ``search_kwargs``
    are fields and can be overridden per call: ``retriever.invoke(message, k=2, thread_id="u1")``.
    ``score_threshold="auto"`` uses the index's floor, ``None`` disables it. ``search_kwargs`` is
    passed to ``ContextualIndex.search`` as is (e.g. ``{"split": False}`` or hybrid options).

    >>> retriever = ContextualRetriever.from_path("./memory", thread_id="u42")   # doctest: +SKIP
    >>> retriever.add_messages(history, thread_id="u42")                         # doctest: +SKIP
    >>> docs = retriever.invoke("When is my flight? And what did the vet say?")     # doctest: +SKIP
    """

    index: ContextualIndex
    """The core index that stores the pieces and runs every search."""
    k: int = Field(default=5, ge=1)
    """Results per part (each group holds at most ``k`` Documents)."""
    score_threshold: float | Literal["auto"] | None = "auto"
    """Cosine floor: ``"auto"`` = the index's floor, ``None`` = no floor."""
    thread_id: str | list[str] | None = None
    """Search only these threads (one id or several); ``None`` searches all."""
    where: dict[str, Any] | None = None
    """A Chroma ``where`` filter on piece metadata, applied inside the query."""
    max_parts: int = Field(default=MAX_PARTS, ge=1)
    """At most this many parts per message."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further keyword arguments for ``ContextualIndex.search`` (forwarded unchanged)."""

    @field_validator("search_kwargs")
    @classmethod
    def _check_search_kwargs(cls, value: dict[str, Any]) -> dict[str, Any]:
        clash = sorted(set(value) & _FIELD_KEYS)
        if clash:
            raise ValueError(
                f"search_kwargs keys {clash} are retriever fields; set them directly, "
                f"e.g. ContextualRetriever(index=..., {clash[0]}=...)"
            )
        return value

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_path(
        cls, path: str | os.PathLike[str] | None = None, **kwargs: Any
    ) -> ContextualRetriever:
        """Build the :class:`ContextualIndex` and the retriever in one call.

        Keywords that are retriever fields (``k``, ``score_threshold``, ``thread_id``, ``where``,
        ``max_parts``, ``search_kwargs``, and LangChain's ``tags``/``metadata``) go to the
        retriever; everything else (``collection``, ``embedder``, ``in_memory``, ``host``, …) goes
        to ``ContextualIndex(path, ...)``.
        """
        fields = {
            name: kwargs.pop(name)
            for name in list(kwargs)
            if name in cls.model_fields and name != "index"
        }
        return cls(index=ContextualIndex(path, **kwargs), **fields)

    # -- ingest -----------------------------------------------------------------------------------
    def add_messages(
        self,
        messages: Iterable[BaseMessage | Mapping[str, Any]],
        thread_id: str = "default",
        *,
        first_turn: int = 1,
        metadata: Mapping[str, Any] | None = None,
        include_system: bool = False,
    ) -> IndexResult:
        """Index a chat thread: LangChain messages and/or OpenAI dicts (see ``messages_to_openai``).

        Same rules as ``ContextualIndex.add_messages``: pass the whole thread each time (unchanged
        turns cost nothing) or a slice with ``first_turn``. ``metadata`` keys reserved by ctxret
        (e.g. ``thread_id``, ``kind``, ``score``) are stored with the ``meta_`` prefix instead.
        """
        return self.index.add_messages(
            messages_to_openai(messages),
            thread_id,
            first_turn=first_turn,
            metadata=metadata,
            include_system=include_system,
        )

    def add_documents(
        self,
        documents: Sequence[Document],
        *,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> IndexResult:
        """Index LangChain Documents through the core's document indexer (split into sections).

        ``page_content`` → the text; ``metadata["title"]`` → the title (it labels the pieces and is
        not stored again as metadata); ``Document.id`` → the document id (re-adding the same id
        replaces changed sections). A Document without an id gets the core's default id, a hash
        of its title and text (the same id a LlamaIndex ``Document`` with that text and title
        gets): pages of one file that share a title stay apart.
        The rest of the metadata is stored as caller metadata (nested dicts flattened, lists
        JSON-encoded). Keys ctxret writes itself (``thread_id``, ``doc_id``, ``kind``,
        ``timestamp``, ``body``, … and the retrievers' output keys ``group*``/``score*``) are
        stored with the ``meta_`` prefix (``thread_id`` → ``meta_thread_id``), by the core's one
        policy (:mod:`ctxret.storage.schema`). ``thread_id`` (the search scope) defaults to
        each document's id, as in the core.
        """
        if isinstance(documents, Document):
            documents = [documents]
        items = []
        for i, doc in enumerate(documents):
            if not isinstance(doc, Document):
                raise InputError(
                    f"document {i}: expected a LangChain Document, got {type(doc).__name__}"
                )
            meta = dict(doc.metadata or {})
            title = meta.pop("title", None)
            item: dict[str, Any] = {"text": doc.page_content, "metadata": meta}
            if title not in (None, ""):
                item["title"] = str(title)
            if doc.id not in (None, ""):
                item["id"] = str(doc.id)
            items.append(item)
        return self.index.add_documents(items, thread_id=thread_id, metadata=metadata)

    # -- search -----------------------------------------------------------------------------------
    def _search_params(
        self,
        k: int | None,
        score_threshold: Any,
        thread_id: Any,
        where: Any,
        max_parts: int | None,
        search_kwargs: Mapping[str, Any] | None,
    ) -> dict[str, Any]:
        extra = {**self.search_kwargs, **dict(search_kwargs or {})}
        clash = sorted(set(extra) & _FIELD_KEYS)
        if clash:
            raise InputError(
                f"search_kwargs keys {clash} are retriever settings; "
                f"pass them as keywords, e.g. {clash[0]}=..."
            )
        return {
            **extra,
            "k": self.k if k is None else k,
            "score_threshold": self.score_threshold
            if score_threshold is _UNSET
            else score_threshold,
            "thread_id": self.thread_id if thread_id is _UNSET else thread_id,
            "where": self.where if where is _UNSET else where,
            "max_parts": self.max_parts if max_parts is None else max_parts,
        }

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        score_threshold: float | Literal["auto"] | None = _UNSET,
        thread_id: str | Sequence[str] | None = _UNSET,
        where: Mapping[str, Any] | None = _UNSET,
        max_parts: int | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
    ) -> list[Document]:
        params = self._search_params(k, score_threshold, thread_id, where, max_parts, search_kwargs)
        return groups_to_documents(self.index.search(query, **params))

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        score_threshold: float | Literal["auto"] | None = _UNSET,
        thread_id: str | Sequence[str] | None = _UNSET,
        where: Mapping[str, Any] | None = _UNSET,
        max_parts: int | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
    ) -> list[Document]:
        params = self._search_params(k, score_threshold, thread_id, where, max_parts, search_kwargs)
        return groups_to_documents(await self.index.asearch(query, **params))


# -- results → Documents ---------------------------------------------------------------------------
def groups_to_documents(groups: Sequence[Group]) -> list[Document]:
    """Flatten the core's groups into Documents, group by group (see ``ContextualRetriever``)."""
    parts = [g.part for g in groups]
    return [hit_to_document(hit, g, rank, parts) for g in groups for rank, hit in enumerate(g.hits)]


def hit_to_document(
    hit: Hit, group: Group, rank: int, parts: Sequence[str] | None = None
) -> Document:
    """One :class:`Hit` of ``group`` as a Document with the group and score keys in its metadata."""
    meta = hit_metadata(hit, group, rank, list(parts) if parts is not None else [group.part])
    return Document(page_content=hit.text, metadata=meta, id=str(hit.id))
