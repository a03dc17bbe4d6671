"""Writing from LlamaIndex in one pass: an ``IngestionPipeline`` step and a small index object.

* :class:`ContextualIndexWriter` — the last transformation of an ``IngestionPipeline``: it takes
  the :class:`ContextualNodeParser`'s piece nodes (or documents, which it parses itself) and writes
  them with their blended vectors through the core's one write path, then returns the nodes as
  stored (node id = stored piece id). Parse and store in one ``pipeline.run``.
* :class:`ContextualStoreIndex` — what a ``VectorStoreIndex`` user reaches for: ``from_documents``,
  ``insert``, ``refresh_ref_docs``, ``delete_ref_doc``, ``ref_doc_info``, ``as_retriever``, ``as_query_engine``,
  ``as_chat_engine`` over a
  :class:`ctxret.ContextualIndex`.

Embedder: an index built here (no ``index=`` given) embeds with ``embed_model`` (any LlamaIndex
``BaseEmbedding``), else ``Settings.embed_model`` when you set it, else the local model. An
existing ``ContextualIndex`` keeps its embedder: a collection is always searched with the model
it was built with.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any, cast

from ctxret import ContextualIndex, IndexResult, InputError, Store
from ctxret.adapters import as_list, caller_view, progress_option, turns_from_records
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.schema import BaseNode, TransformComponent
from llama_index.core.storage.docstore.types import RefDocInfo

from .node_parser import ContextualNodeParser, add_documents_to_index, document_ref_id, index_documents, stored_ref_id
from .retriever import ContextualRetriever, open_index

logger = logging.getLogger(__name__)

__all__ = ["ContextualIndexWriter", "ContextualStoreIndex", "LLAMA_REFUSED"]

_PIECE_KEYS = ("turn_id", "header", "body", "thread_id", "turn_index", "source_ordinal", "ordinal")


def _is_piece(node: BaseNode) -> bool:
    return all(k in (node.metadata or {}) for k in _PIECE_KEYS)


class ContextualIndexWriter(TransformComponent):
    """Store the pieces of an ``IngestionPipeline`` run in a :class:`ctxret.ContextualIndex`.

    >>> pipeline = IngestionPipeline(transformations=[ContextualNodeParser.from_index(index),
    ...                                               ContextualIndexWriter(index)])    # doctest: +SKIP
    >>> nodes = pipeline.run(documents=docs)   # parsed and stored: node ids are stored ids  # doctest: +SKIP

    Input nodes are the parser's piece nodes (whole turns or sections, as it makes them) or
    documents (parsed here with the index's settings). The pieces are re-assembled into their
    turns and written through ``ContextualIndex.add_turns`` (unchanged turns cost nothing; a
    changed one replaces its pieces). Embeddings set on the nodes by an earlier step are not used:
    the index embeds with its own model and blends each piece with its turn. Metadata other steps
    add to piece nodes is not stored (a warning names the keys): put it on the documents.

    ``last_result`` holds the :class:`ctxret.IndexResult` of the last call. ``collection`` and
    ``location`` name the index in ``to_dict`` (the index object itself is not serialised). Run
    the pipeline without a cache, or with one you clear when the store is cleared: a cached
    pipeline skips steps it has seen, including this write.

    Progress (pieces, pieces/s, time left): ``show_progress`` here (``None``, the default: the index's setting, a
    bar on a terminal or in a notebook; ``True`` always; ``False`` never), or for one run a keyword the pipeline
    hands its steps, ``pipeline.run(documents=docs, progress=True)`` (``pipeline.run(show_progress=True)`` is
    LlamaIndex's own bar over the steps; a step called with ``show_progress=True`` shows this bar too).
    """

    collection: str = Field(default="", description="The index's collection (for to_dict and caching).")
    location: str = Field(default="", description="Where the index lives (for to_dict and caching).")
    show_progress: bool | None = Field(
        default=None, description="A progress bar (None: on a terminal or in a notebook; True: always; False: never)."
    )
    _index: ContextualIndex = PrivateAttr()
    _last: IndexResult | None = PrivateAttr(default=None)

    def __init__(self, index: ContextualIndex, **data: Any) -> None:
        if not isinstance(index, ContextualIndex):
            raise InputError(f"index must be a ctxret.ContextualIndex, got {type(index).__name__}")
        data.setdefault("collection", index.store.collection_name)
        data.setdefault("location", str(index.store.location))
        super().__init__(**data)
        self._index = index

    @classmethod
    def from_path(
        cls, path: Store | str | os.PathLike[str] | None = None, *, embed_model: Any = None, **kwargs: Any
    ) -> ContextualIndexWriter:
        """A writer over ``ContextualIndex(path, **kwargs)``, embedding with ``embed_model`` (or Settings')."""
        return cls(open_index(path, embed_model=embed_model, **kwargs))

    @classmethod
    def class_name(cls) -> str:
        return "ContextualIndexWriter"

    @property
    def index(self) -> ContextualIndex:
        return self._index

    @property
    def last_result(self) -> IndexResult | None:
        return self._last

    def __call__(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        nodes = list(nodes)
        pieces = [n for n in nodes if _is_piece(n)]
        others = [n for n in nodes if not _is_piece(n)]
        if others:  # documents: parse them the way the index stores them
            parser = ContextualNodeParser.from_index(self._index)
            pieces += parser.get_nodes_from_documents(cast(Any, others))
        extra = sorted({k for n in pieces for k in n.metadata} - {k for n in pieces for k in _stored_keys(n)})
        if extra:
            logger.warning("metadata keys added to piece nodes after parsing are not stored: %s", ", ".join(extra))
        turns = turns_from_records(_stored_metadata(n) for n in pieces)
        asked = progress_option(kwargs.get("progress"), kwargs.get("show_progress") or None)  # False: not asked
        self._last = self._index.add_turns(turns, progress=self.show_progress if asked is None else asked)
        return pieces

    async def acall(self, nodes: Sequence[BaseNode], **kwargs: Any) -> Sequence[BaseNode]:
        return await asyncio.to_thread(self.__call__, nodes, **kwargs)


def _stored_keys(node: BaseNode) -> list[str]:
    from ctxret.adapters import RESERVED_KEYS, caller_keys

    meta = node.metadata
    return [k for k in meta if k in RESERVED_KEYS] + caller_keys(meta)


def _stored_metadata(node: BaseNode) -> dict[str, Any]:
    return {k: node.metadata[k] for k in _stored_keys(node)}


class ContextualStoreIndex:
    """``from_documents`` / ``insert`` / ``delete_ref_doc`` / ``as_retriever`` / ``as_query_engine``
    over a :class:`ctxret.ContextualIndex` (see the module docstring for the embedder).

    Args:
        index: the index to use; built with ``path``, ``embed_model`` and ``index_kwargs``
            (``collection``, ``in_memory``, ``host``, …) when not given.

    A document's ``ref_doc_id`` is the id ctxret stores it under, and its ``id_``: ``metadata["doc_id"]``, else an
    ``id_`` you chose (``Document(id_=...)``, ``filename_as_id=True``), else the content id (a hash of title and
    text, the id LangChain's adapter and the core give the same text: one document whichever adapter wrote it). A
    Document whose ``id_`` is LlamaIndex's random default takes the content id as its ``id_`` when it is indexed or
    parsed, so ``node.ref_doc_id``, :meth:`delete_ref_doc`, :meth:`refresh_ref_docs` and :attr:`ref_doc_info` all
    know it by ``doc.id_``. A chat document's is ``chat:<thread_id>``.

    ``VectorStoreIndex``'s keyword arguments: ``show_progress`` is this object's progress bar for its writes
    (``None``, the default: the index's setting, a bar on a terminal or in a notebook; ``True`` always; ``False``
    never; each write may override it); the ones that name LlamaIndex's own storage or pipeline
    (``storage_context``, ``transformations``, ``use_async``, ...) are refused with what to do instead
    (:data:`LLAMA_REFUSED`).
    """

    def __init__(
        self,
        index: ContextualIndex | None = None,
        *,
        path: Store | str | os.PathLike[str] | None = None,
        embed_model: Any = None,
        **index_kwargs: Any,
    ) -> None:
        for name in sorted(set(index_kwargs) & set(LLAMA_REFUSED)):
            raise InputError(f"{name}= (VectorStoreIndex's) is not taken here: {LLAMA_REFUSED[name]}")
        #: The progress bar of this object's writes (``None``: the index's setting).
        self.show_progress = progress_option(show_progress=index_kwargs.pop("show_progress", None))
        if index is None:
            index = open_index(path, embed_model=embed_model, **index_kwargs)
        elif not isinstance(index, ContextualIndex):
            raise InputError(f"index must be a ctxret.ContextualIndex, got {type(index).__name__}")
        elif path is not None or embed_model is not None or index_kwargs:
            raise InputError("pass either index= or the arguments to build one (path=, embed_model=, ...), not both")
        self.index = index

    @classmethod
    def from_documents(cls, documents: Iterable[BaseNode], **kwargs: Any) -> ContextualStoreIndex:
        """An index holding ``documents`` (``kwargs``: as the constructor); over an existing store, each
        document replaces its stored version (as :meth:`insert`)."""
        store = cls(**kwargs)
        store.insert_documents(documents)
        return store

    def insert_documents(
        self, documents: Iterable[BaseNode], *, replace: bool = True, show_progress: bool | None = None
    ) -> IndexResult:
        """Index LlamaIndex documents (text or chat) in one batch; returns the counts. A text document
        replaces its stored version whole: sections it no longer has are removed (``replace=False``:
        kept). A chat document's turns replace theirs one by one (other stored turns are kept).
        ``show_progress``: this call's progress bar (``None``: this object's setting)."""
        return add_documents_to_index(
            self.index,
            as_list(documents, "documents", "LlamaIndex Documents"),
            replace=replace,
            show_progress=self._progress(show_progress),
        )

    def _progress(self, show_progress: Any) -> bool | None:
        asked = progress_option(show_progress=show_progress)
        return self.show_progress if asked is None else asked

    def insert(self, document: BaseNode, **kwargs: Any) -> str:
        """Index one document, replacing its stored version (see :meth:`insert_documents`; ``replace=False``
        keeps the sections it no longer has); returns its ``ref_doc_id``."""
        add_documents_to_index(
            self.index,
            [document],
            replace=kwargs.get("replace", True),
            show_progress=self._progress(kwargs.get("show_progress")),
        )
        return ref_doc_id(document)

    def refresh_ref_docs(self, documents: Sequence[BaseNode], **kwargs: Any) -> list[bool]:
        """Index documents in one batch, each replacing its stored version; returns, for each, whether
        anything was written or removed (``False``: stored as it is). LlamaIndex's ``refresh_ref_docs``."""
        return index_documents(
            self.index,
            list(documents),
            replace=kwargs.get("replace", True),
            show_progress=self._progress(kwargs.get("show_progress")),
        )[1]

    @property
    def ref_doc_info(self) -> dict[str, RefDocInfo]:
        """``{ref_doc_id: RefDocInfo(node_ids=[stored piece ids], metadata=the document's own metadata)}`` for every
        stored document (LlamaIndex's ``ref_doc_info``, read from the store: there is no separate docstore)."""
        out: dict[str, RefDocInfo] = {}
        for r in self.index.store.records(("metadatas",)):
            meta = r["metadata"]
            info = out.setdefault(stored_ref_id(meta), RefDocInfo(node_ids=[], metadata=caller_view(meta)))
            info.node_ids.append(r["id"])
        return out

    def delete_ref_doc(self, ref_doc_id: str, **kwargs: Any) -> int:
        """Delete every piece of a document (a chat document: its thread); returns how many. With
        ``thread_id=`` only that thread's document of this id, else every thread's. ``delete_from_docstore`` is
        accepted and means nothing more: the pieces are the only copy."""
        n = self.index.delete(thread_id=kwargs.get("thread_id"), where={"doc_id": str(ref_doc_id)})
        if not n and str(ref_doc_id).startswith("chat:"):
            n = self.index.delete(thread_id=str(ref_doc_id)[5:].split("@", 1)[0])
        return n

    # -- async twins: the writes run in a worker thread, off the event loop (VectorStoreIndex's ainsert, ...) --------
    async def ainsert_documents(self, documents: Iterable[BaseNode], *, replace: bool = True) -> IndexResult:
        """Async :meth:`insert_documents`."""
        return await asyncio.to_thread(self.insert_documents, list(documents), replace=replace)

    async def ainsert(self, document: BaseNode, **kwargs: Any) -> str:
        """Async :meth:`insert`."""
        return await asyncio.to_thread(self.insert, document, **kwargs)

    async def arefresh_ref_docs(self, documents: Sequence[BaseNode], **kwargs: Any) -> list[bool]:
        """Async :meth:`refresh_ref_docs`."""
        return await asyncio.to_thread(self.refresh_ref_docs, list(documents), **kwargs)

    async def adelete_ref_doc(self, ref_doc_id: str, **kwargs: Any) -> int:
        """Async :meth:`delete_ref_doc`."""
        return await asyncio.to_thread(self.delete_ref_doc, ref_doc_id, **kwargs)

    def as_retriever(self, **kwargs: Any) -> ContextualRetriever:
        """A :class:`ContextualRetriever` (``similarity_top_k``, ``filters``, ``rerank``, …)."""
        return ContextualRetriever(self.index, **kwargs)

    def as_chat_engine(self, chat_mode: Any = "condense_plus_context", llm: Any = None, **kwargs: Any) -> Any:
        """A chat engine over the retriever: ``chat_mode`` ``"condense_plus_context"`` (default; ``"best"`` means it
        here), ``"context"`` or ``"condense_question"``. Retriever arguments (``similarity_top_k``, ``filters``, ...)
        go to :meth:`as_retriever`, the rest to ``from_defaults`` (``llm``: ``Settings.llm`` by default)."""
        from llama_index.core.chat_engine import (
            CondensePlusContextChatEngine,
            CondenseQuestionChatEngine,
            ContextChatEngine,
        )

        mode = str(getattr(chat_mode, "value", chat_mode))
        retriever_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _RETRIEVER_KWARGS}
        if mode in ("condense_plus_context", "best"):
            return CondensePlusContextChatEngine.from_defaults(self.as_retriever(**retriever_kwargs), llm=llm, **kwargs)
        if mode == "context":
            return ContextChatEngine.from_defaults(self.as_retriever(**retriever_kwargs), llm=llm, **kwargs)
        if mode == "condense_question":
            engine = self.as_query_engine(llm=llm, **retriever_kwargs)
            return CondenseQuestionChatEngine.from_defaults(query_engine=engine, llm=llm, **kwargs)
        raise InputError(
            f"chat_mode {mode!r} is not offered here; use 'condense_plus_context', 'context' or 'condense_question' "
            "(an agent mode: build the agent yourself around as_query_engine() or as_retriever())"
        )

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> Any:
        """A ``RetrieverQueryEngine``: retriever arguments (``similarity_top_k``, ``filters``,
        ``rerank``, ``score_threshold``, ``thread_id``, …) go to the retriever, the rest to
        ``RetrieverQueryEngine.from_args`` (``llm`` defaults to ``Settings.llm``)."""
        retriever_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in _RETRIEVER_KWARGS}
        return self.as_retriever(**retriever_kwargs).as_query_engine(llm=llm, **kwargs)


#: What :meth:`ContextualStoreIndex.as_query_engine` / ``as_chat_engine`` hand to the retriever.
_RETRIEVER_KWARGS = frozenset(
    {
        "similarity_top_k",
        "score_threshold",
        "cosine_floor",
        "thread_id",
        "where",
        "filters",
        "rerank",
        "rerank_candidates",
        "search_kwargs",
        "per",
    }
)
#: ``VectorStoreIndex`` keyword arguments that name LlamaIndex's own storage or pipeline, and what to do instead.
LLAMA_REFUSED = {
    "storage_context": "a LlamaIndex StorageContext (docstore, vector store); ctxret keeps the pieces in its own "
    "Chroma collection: pass path=, a ctxret.Store or index= instead",
    "transformations": "ctxret parses documents itself (ContextualNodeParser); for other steps run an "
    "IngestionPipeline ending with ContextualIndexWriter",
    "use_async": "ctxret embeds each write in one batched pass; use the retriever's aretrieve for async searches",
    "store_nodes_override": "every piece is stored in the collection (there is no separate docstore)",
    "insert_batch_size": "the core sizes its own write batches (whole documents, within Chroma's limit)",
    "objects": "ctxret indexes documents and chat messages, not objects",
    "index_struct": "ctxret keeps no index struct: the collection is the index",
    "callback_manager": "pass it to as_retriever(callback_manager=...)",
}


def ref_doc_id(document: BaseNode) -> str:
    """The id ctxret stores a LlamaIndex document under (see :class:`ContextualStoreIndex`)."""
    return document_ref_id(document)
