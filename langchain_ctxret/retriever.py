"""``ContextualRetriever``: a LangChain retriever over a :class:`ctxret.index.ContextualIndex`.

Thin on purpose: every search goes through ``ContextualIndex.search`` / ``asearch`` (splitting,
blending, scoping, floors, hybrid options), and every write through the core's indexer. This module
only maps LangChain objects in and ``Group``/``Hit`` results out as Documents.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from ctxret import ContextualIndex, Group, Hit, IndexResult, InputError, Store
from ctxret.adapters import (
    MAX_PARTS,
    METADATA_PREFIX,
    RETRIEVAL_KEYS,
    as_list,
    check_search_keys,
    check_search_options,
    document_id,
    open_store_arguments,
    progress_option,
    scored_metadata,
    shown_groups,
)
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.messages import BaseMessage
from langchain_core.retrievers import BaseRetriever, LangSmithRetrieverParams
from pydantic import Field, field_validator, model_validator

from .messages import messages_to_openai
from .rerank import as_reranker

__all__ = [
    "ContextualRetriever",
    "groups_to_documents",
    "hit_to_document",
    "OUTPUT_KEYS",
    "METADATA_PREFIX",
    "SEARCH_TYPES",
    "documents_to_items",
]

#: Metadata keys the retriever sets on every Document it returns (plus ``score_<name>`` for each
#: named score of the hit: ``score_cosine``; with hybrid search ``score_bm25``, ``score_fused``).
OUTPUT_KEYS = RETRIEVAL_KEYS
#: ``search_type`` values, as LangChain's ``VectorStoreRetriever`` names them.
SEARCH_TYPES = ("similarity", "similarity_score_threshold", "mmr")
#: ``search_kwargs`` keys with LangChain's meaning (translated to the core's options); any other key
#: is a :class:`ctxret.SearchSettings` option, passed as is.
LANGCHAIN_KEYS = ("k", "filter", "score_threshold", "fetch_k", "lambda_mult")
#: ``search_kwargs`` keys that scope the search (beside the search options of :class:`ctxret.SearchSettings`).
SCOPE_KEYS = ("filter", "where", "thread_id")


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
    - ``score``: the hit's ``relevance`` in [0, 1] (``score_scale = "relevance"``): calibrated
      from its cosine and lexical coverage, the same for the same hit whatever else the part
      found, so it can be thresholded (:mod:`ctxret.query.relevance`). Documents stay in the
      group's ranking order (``group_rank``), which is by the fused score (or the reranker's) and
      may differ from ``score``'s order; every named score is kept as ``score_<name>``
      (``score_cosine``, ``score_bm25``, ``score_fused``, ``score_coverage``, ``score_relevance``,
      ``score_rerank``).

    ``k``, ``score_threshold``, ``thread_id``, ``where``, ``max_parts`` and ``search_kwargs``
    are fields and can be overridden per call: ``retriever.invoke(message, k=2, thread_id="u1")``; so can every
    ``search_kwargs`` key, given as a keyword of the call (``invoke(message, filter={...}, now=..., per="document")``:
    merged over ``search_kwargs``).
    ``score_threshold`` is a floor on ``metadata["score"]`` (the relevance), the same scale as
    ``search_kwargs["score_threshold"]``; ``None`` turns every floor off. ``cosine_floor`` is the core's
    cosine floor (``"auto"``: the index's, ``None``: none).

    ``search_type`` and ``search_kwargs`` follow LangChain's ``VectorStoreRetriever``:
    ``search_kwargs={"k": 1, "filter": {"source": "runbook"}}`` (``filter`` is a Chroma ``where`` on
    piece metadata, like ``where``), ``search_type="similarity_score_threshold"`` with
    ``search_kwargs={"score_threshold": 0.3}`` (a floor on ``score``, the relevance — not the
    cosine floor above), ``search_type="mmr"`` with ``fetch_k`` and ``lambda_mult`` (maximal
    marginal relevance **inside each group**). Any other key is a core search option
    (``{"split": False}``, ``{"parents": True}``, hybrid options), checked when the retriever is
    built.

    ``rerank``: a LangChain ``BaseDocumentCompressor`` (a cross-encoder, Cohere, FlashRank, an LLM
    reranker) or a callable ``(part, hits) -> scores``, run inside each group on its top
    ``rerank_candidates`` candidates before the cut to ``k`` (:mod:`ctxret.query.rerank`).

    Args:
        index: the :class:`ctxret.ContextualIndex` that stores the pieces and runs every search
            (:meth:`from_path` builds it).
        k: results per part (each group holds at most ``k`` Documents).
        score_threshold: a floor on ``metadata["score"]``, the relevance in [0, 1] (``"auto"``: none;
            ``None``: no floor at all).
        cosine_floor: the core's cosine floor (``"auto"``: the index's; ``None``: none).
        thread_id: search only these threads (one id or several).
        where: a Chroma ``where`` filter on piece metadata.
        max_parts: at most this many parts per message.
        search_type: ``"similarity"``, ``"similarity_score_threshold"`` or ``"mmr"`` (inside each group).
        search_kwargs: LangChain's keys (``k``, ``filter``, ``score_threshold``, ``fetch_k``, ``lambda_mult``)
            and any core search option.
        rerank: a ``BaseDocumentCompressor`` or a callable ``(part, hits) -> scores``, run inside each group.
        rerank_candidates: candidates per group handed to ``rerank``.

    Example:
        ```python
        from ctxret import ContextualIndex, Store
        from langchain_ctxret import ContextualRetriever

        index = ContextualIndex(Store.memory())
        index.add_documents(["The cat sleeps on the red sofa.", "The train to Porto leaves at 8:15 from platform 4."])
        retriever = ContextualRetriever(index=index, k=1)
        docs = retriever.invoke("Which platform does the Porto train use? Where does the cat sleep?")
        print([(d.metadata["group"], d.page_content.splitlines()[-1]) for d in docs])
        # prints: [(0, 'The train to Porto leaves at 8:15 from platform 4.'), (1, 'The cat sleeps on the red sofa.')]
        ```
    """

    index: ContextualIndex
    """The core index that stores the pieces and runs every search."""
    k: int = Field(default=5, ge=1)
    """Results per part (each group holds at most ``k`` Documents)."""
    score_threshold: float | Literal["auto"] | None = "auto"
    """A floor on ``metadata["score"]`` (the relevance, in [0, 1]), as ``search_kwargs["score_threshold"]``:
    ``"auto"`` = none (the cosine floor still applies), ``None`` = no floor at all (nor the cosine floor, unless
    ``cosine_floor`` is set)."""
    cosine_floor: float | Literal["auto"] | None = "auto"
    """The core's cosine floor (``SearchSettings.cosine_floor``): ``"auto"`` = the index's, ``None``: none."""
    thread_id: str | list[str] | None = None
    """Search only these threads (one id or several); ``None`` searches all."""
    where: dict[str, Any] | None = None
    """A Chroma ``where`` filter on piece metadata, applied inside the query."""
    max_parts: int = Field(default=MAX_PARTS, ge=1)
    """At most this many parts per message."""
    search_type: Literal["similarity", "similarity_score_threshold", "mmr"] = "similarity"
    """LangChain's search types: ``"mmr"`` runs maximal marginal relevance inside each group."""
    search_kwargs: dict[str, Any] = Field(default_factory=dict)
    """LangChain's keys (``k``, ``filter``, ``score_threshold``, ``fetch_k``, ``lambda_mult``) and
    any core search option (see the class docstring)."""
    rerank: Any = None
    """A ``BaseDocumentCompressor`` or a callable ``(part, hits) -> scores``, run inside each group."""
    rerank_candidates: int = Field(default=20, ge=1)
    """Candidates per group handed to ``rerank``."""

    @field_validator("score_threshold")
    @classmethod
    def _check_score_threshold(cls, value: Any) -> Any:
        return _relevance_floor(value)

    @field_validator("rerank")
    @classmethod
    def _check_rerank(cls, value: Any) -> Any:
        as_reranker(value)  # a clear error for anything that cannot rerank
        return value

    @model_validator(mode="after")
    def _check_search(self) -> ContextualRetriever:
        sk = self.search_kwargs
        explicit = self.model_fields_set
        for key, field in (
            ("k", "k"),
            ("filter", "where"),
            ("where", "where"),
            ("thread_id", "thread_id"),
            ("max_parts", "max_parts"),
        ):
            if key in sk and field in explicit and sk[key] != getattr(self, field):
                raise ValueError(
                    f"search_kwargs[{key!r}]={sk[key]!r} disagrees with {field}={getattr(self, field)!r}; "
                    "set one of them"
                )
        if "filter" in sk and "where" in sk and sk["filter"] != sk["where"]:
            raise ValueError("search_kwargs has both 'filter' and 'where'; they are the same filter, give one")
        if self.search_type == "similarity_score_threshold":
            t = sk.get("score_threshold")
            if isinstance(t, bool) or not isinstance(t, (int, float)):
                raise ValueError(
                    "search_type='similarity_score_threshold' needs search_kwargs={'score_threshold': R}, "
                    "R a relevance between 0 and 1 (the scale of metadata['score'])"
                )
        try:  # unknown keys and bad values fail here, not at the first invoke (the keys and checks: SearchSettings')
            check_search_keys(sk, extra=SCOPE_KEYS)
        except InputError as e:
            raise ValueError(str(e)) from None
        try:
            checked: dict[str, Any] = {k: sk[k] for k in ("k", "max_parts") if k in sk}
            check_search_options({**self._core_options(self.search_type, sk), **checked})
        except InputError as e:
            raise ValueError(f"search_kwargs: {e}") from None
        return self

    @staticmethod
    def _core_options(search_type: str, search_kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """LangChain's ``search_kwargs`` as the core's search options: ``score_threshold`` →
        ``min_relevance``, ``search_type="mmr"`` → ``mmr=True`` (with ``fetch_k``, ``lambda_mult``);
        the scope keys (``filter``/``where``, ``thread_id``) and ``k``/``max_parts`` are left to the caller."""
        scope = ("filter", "where", "thread_id", "k", "max_parts", "score_threshold")
        out = {k: v for k, v in search_kwargs.items() if k not in scope}
        if "score_threshold" in search_kwargs:
            out["min_relevance"] = search_kwargs["score_threshold"]
        if search_type == "mmr":
            out["mmr"] = True
        return out

    # -- construction ---------------------------------------------------------------------------
    @classmethod
    def from_path(cls, path: Store | str | os.PathLike[str] | None = None, **kwargs: Any) -> ContextualRetriever:
        """Build the :class:`ContextualIndex` and the retriever in one call.

        Keywords that are retriever fields (``k``, ``score_threshold``, ``thread_id``, ``where``,
        ``max_parts``, ``search_kwargs``, and LangChain's ``tags``/``metadata``) go to the
        retriever; the store's (``collection``, ``in_memory``, ``host``, …) build the
        :class:`ctxret.Store` (or pass one as ``path``; no path, ``host`` or ``client``: in memory, as
        langchain-chroma's ``Chroma()``); the rest (``embedder``, ``weight``, …) go to ``ContextualIndex(store, ...)``.
        """
        fields = {name: kwargs.pop(name) for name in list(kwargs) if name in cls.model_fields and name != "index"}
        store = open_store_arguments(path, kwargs, default="memory")  # Store.embedded(path, ...), Store.memory()
        return cls(index=ContextualIndex(store, **kwargs), **fields)

    # -- ingest -----------------------------------------------------------------------------------
    def add_messages(
        self,
        messages: Iterable[BaseMessage | Mapping[str, Any]],
        thread_id: str = "default",
        *,
        first_turn: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        include_system: bool = False,
        progress: bool | None = None,
        show_progress: bool | None = None,
    ) -> IndexResult:
        """Add LangChain messages and/or OpenAI dicts (see ``messages_to_openai``) to the end of a thread:
        ``ContextualIndex.add_messages`` (the next turns; a message sent again adds nothing; ``first_turn=n``:
        numbered turns instead). ``metadata`` keys keep their names (``thread_id`` in it must be the thread).
        ``CtxretChatMessageHistory`` is the same write as a LangChain chat history.
        ``progress`` / ``show_progress``: a progress bar (``None``: on a terminal or in a notebook)."""
        return self.index.add_messages(
            messages_to_openai(messages),
            thread_id,
            first_turn=first_turn,
            metadata=metadata,
            include_system=include_system,
            progress=progress_option(progress, show_progress),
        )

    async def aadd_messages(
        self,
        messages: Iterable[BaseMessage | Mapping[str, Any]],
        thread_id: str = "default",
        **kwargs: Any,
    ) -> IndexResult:
        """Async :meth:`add_messages`."""
        return await self.index.aadd_messages(messages_to_openai(messages), thread_id, **kwargs)

    def replace_messages(
        self,
        messages: Iterable[BaseMessage | Mapping[str, Any]],
        thread_id: str = "default",
        **kwargs: Any,
    ) -> IndexResult:
        """Make the thread exactly ``messages`` (``ContextualIndex.replace_messages``)."""
        return self.index.replace_messages(messages_to_openai(messages), thread_id, **kwargs)

    async def areplace_messages(
        self,
        messages: Iterable[BaseMessage | Mapping[str, Any]],
        thread_id: str = "default",
        **kwargs: Any,
    ) -> IndexResult:
        """Async :meth:`replace_messages`."""
        return await self.index.areplace_messages(messages_to_openai(messages), thread_id, **kwargs)

    def add_documents(
        self,
        documents: Sequence[Document],
        *,
        ids: Sequence[str] | None = None,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        replace: bool = True,
        progress: bool | None = None,
        show_progress: bool | None = None,
    ) -> list[str]:
        """Index LangChain Documents through the core's document indexer; returns their document ids.

        ``page_content`` → the text (split into sections by markdown headings);
        ``metadata["title"]`` → the title (it labels the pieces and is not stored again as
        metadata); the document id is ``ids[i]``, else ``Document.id``, else the core's default (a
        hash of title and text, the same id a LlamaIndex ``Document`` with that text and title
        gets): pages of one file that share a title stay apart. Re-adding an id replaces the stored
        document whole: changed sections are re-embedded (unchanged ones cost nothing) and sections it
        no longer has are removed (``replace=False`` keeps them); ``delete(ids=...)`` removes a document.
        The rest of the metadata is stored as your metadata (nested dicts flattened, lists
        JSON-encoded), filtered on and returned under the names you gave (``kind``, ``timestamp``, …; ctxret's own
        fields are ``ctxret:<field>``: :mod:`ctxret.storage.schema`). ``thread_id`` and ``doc_id`` are one key for you
        and ctxret: ``metadata["thread_id"]`` is the document's thread (the search scope; default: its id) and
        ``metadata["doc_id"]`` its id when ``ids`` and ``Document.id`` name none (an argument that disagrees is an
        error). ``ContextualIndex.add_documents`` returns the counts (:class:`ctxret.IndexResult`) instead.
        ``progress`` / ``show_progress``: a progress bar (``None``: on a terminal or in a notebook).
        """
        items, doc_ids = documents_to_items(documents, ids)
        self.index.add_documents(
            items,
            thread_id=thread_id,
            metadata=metadata,
            replace=replace,
            progress=progress_option(progress, show_progress),
        )
        return doc_ids

    async def aadd_documents(
        self,
        documents: Sequence[Document],
        *,
        ids: Sequence[str] | None = None,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        replace: bool = True,
        progress: bool | None = None,
        show_progress: bool | None = None,
    ) -> list[str]:
        """:meth:`add_documents` off the event loop."""
        return await asyncio.to_thread(
            self.add_documents,
            documents,
            ids=ids,
            thread_id=thread_id,
            metadata=metadata,
            replace=replace,
            progress=progress,
            show_progress=show_progress,
        )

    def delete(
        self,
        ids: Sequence[str] | None = None,
        *,
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> int:
        """Delete documents by id (every piece of each), or every piece of ``thread_id`` or matching
        ``where``; returns the number of pieces deleted. Ids that are not stored are ignored."""
        clauses: list[dict[str, Any]] = []
        if ids is not None:
            ids = [ids] if isinstance(ids, str) else [str(i) for i in as_list(ids, "ids", "document ids")]
            if not ids:
                return 0
            clauses.append({"doc_id": ids[0]} if len(ids) == 1 else {"doc_id": {"$in": ids}})
        if where:
            clauses.append(dict(where))
        combined = None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
        return self.index.delete(thread_id=thread_id, where=combined)

    async def adelete(
        self,
        ids: Sequence[str] | None = None,
        *,
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
    ) -> int:
        """:meth:`delete` off the event loop."""
        return await asyncio.to_thread(self.delete, ids, thread_id=thread_id, where=where)

    # -- search -----------------------------------------------------------------------------------
    def _search_params(
        self,
        k: int | None,
        score_threshold: Any,
        thread_id: Any,
        where: Any,
        max_parts: int | None,
        search_kwargs: Mapping[str, Any] | None,
        callbacks: Any = None,
    ) -> dict[str, Any]:
        sk = {**self.search_kwargs, **dict(search_kwargs or {})}
        options = self._core_options(self.search_type, sk)
        scope_where = sk.get("filter", sk.get("where", self.where))
        floor = _relevance_floor(self.score_threshold if score_threshold is _UNSET else score_threshold)
        cosine = self.cosine_floor
        if floor is None and "cosine_floor" not in self.model_fields_set:
            cosine = None  # score_threshold=None: no floor at all
        if isinstance(floor, float):
            options["min_relevance"] = max(floor, options.get("min_relevance") or 0.0)
        params = {
            **options,
            "k": k if k is not None else sk.get("k", self.k),
            "cosine_floor": cosine,
            "thread_id": sk.get("thread_id", self.thread_id) if thread_id is _UNSET else thread_id,
            "where": scope_where if where is _UNSET else where,
            "max_parts": max_parts if max_parts is not None else sk.get("max_parts", self.max_parts),
        }
        if self.rerank is not None and "rerank" not in options:
            params["rerank"] = as_reranker(self.rerank, callbacks=callbacks)
            params.setdefault("rerank_candidates", self.rerank_candidates)
        elif "rerank" in options:
            params["rerank"] = as_reranker(options["rerank"], callbacks=callbacks)
        return params

    def _get_ls_params(self, **kwargs: Any) -> LangSmithRetrieverParams:
        """LangSmith's standard retriever parameters: the store and the embedding model."""
        params = super()._get_ls_params(**kwargs)
        embedder = self.index.embedder
        model = getattr(embedder, "model", None)  # a wrapped LangChain / LlamaIndex model
        params["ls_vector_store_provider"] = "Chroma"
        wrapped = model is not None and not isinstance(model, str)
        params["ls_embedding_provider"] = type(model if wrapped else embedder).__name__
        params["ls_embedding_model"] = str(embedder.model_id)
        return params

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
        **options: Any,
    ) -> list[Document]:
        per_call = {**dict(search_kwargs or {}), **options}
        callbacks = run_manager.get_child()
        params = self._search_params(k, score_threshold, thread_id, where, max_parts, per_call, callbacks)
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
        **options: Any,
    ) -> list[Document]:
        per_call = {**dict(search_kwargs or {}), **options}
        callbacks = run_manager.get_child()
        params = self._search_params(k, score_threshold, thread_id, where, max_parts, per_call, callbacks)
        return groups_to_documents(await self.index.asearch(query, **params))


def _relevance_floor(value: Any) -> float | Literal["auto"] | None:
    if value is None or value == "auto":
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(
            f"score_threshold is a floor on metadata['score'], the relevance in [0, 1] ('auto': none, None: no floor "
            f"at all; the cosine floor is cosine_floor=), got {value!r}"
        )
    return float(value)


# -- results → Documents ---------------------------------------------------------------------------
def groups_to_documents(groups: Sequence[Group]) -> list[Document]:
    """Flatten the core's groups into Documents, group by group (see ``ContextualRetriever``)."""
    parts = [g.part for g in groups]
    return [hit_to_document(hit, g, rank, parts) for g, hits in shown_groups(groups) for rank, hit in enumerate(hits)]


def hit_to_document(hit: Hit, group: Group, rank: int, parts: Sequence[str] | None = None) -> Document:
    """One :class:`Hit` of ``group`` as a Document with the group and score keys in its metadata."""
    meta = scored_metadata(hit, group, rank, list(parts) if parts is not None else [group.part])
    return Document(page_content=hit.text, metadata=meta, id=str(hit.id))


def documents_to_items(
    documents: Sequence[Document], ids: Sequence[str] | None = None, *, keep_title: bool = False
) -> tuple[list[dict[str, Any]], list[str]]:
    """LangChain Documents as the core's document dicts, and the document id of each.

    ``keep_title=True`` keeps ``metadata["title"]`` in the stored metadata too (the vector
    store's view returns Documents with their metadata as given)."""
    if isinstance(documents, Document):
        documents = [documents]
    documents = as_list(documents, "documents", "LangChain Documents")
    if ids is not None:
        ids = [ids] if isinstance(ids, str) else as_list(ids, "ids", "document ids")
        if len(ids) != len(documents):
            raise InputError(f"{len(ids)} ids for {len(documents)} documents; give one id per document")
    items: list[dict[str, Any]] = []
    out: list[str] = []
    for i, doc in enumerate(documents):
        if not isinstance(doc, Document):
            raise InputError(f"document {i}: expected a LangChain Document, got {type(doc).__name__}")
        meta = dict(doc.metadata or {})
        title = meta.get("title") if keep_title else meta.pop("title", None)
        item: dict[str, Any] = {"text": doc.page_content, "metadata": meta}
        if title not in (None, ""):
            item["title"] = str(title)
        chosen = ids[i] if ids is not None and ids[i] not in (None, "") else doc.id
        if chosen not in (None, ""):
            item["id"] = str(chosen)
        items.append(item)
        shared = meta.get("doc_id")  # the document id when nothing else names one (one key for you and ctxret)
        named = item.get("id") or (shared if isinstance(shared, str) and shared else None)
        out.append(named or document_id(doc.page_content, item.get("title")))
    return items, out
