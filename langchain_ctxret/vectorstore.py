"""``ContextualVectorStore``: a LangChain ``VectorStore`` over a :class:`ctxret.ContextualIndex`.

For code that expects a vector store (``from_documents``, ``similarity_search``, ``get_by_ids``,
``as_retriever``, LangChain's indexing API). The store's own searches are the **flat** view of the
index: the whole query is one part (``split=False``), so ``k`` means k in total, as every vector
store does; the Documents come back as you added them (``page_content`` = the matched piece's
text without its label, ``metadata`` = your metadata, ``id`` = the document id). Scores follow
langchain-chroma: ``similarity_search_with_score`` gives Chroma's cosine distance (``1 - cosine``, lower
first), ``similarity_search_with_relevance_scores`` the hits' ``relevance`` in [0, 1] (higher is better,
:mod:`ctxret.query.relevance`). The ``_by_vector`` searches take a vector made with :attr:`embeddings`
(:mod:`ctxret.query.nearest`). langchain-chroma's constructor names are accepted: ``collection_name``,
``persist_directory``, ``client``, ``embedding_function`` (``Chroma(collection_name, embedding_function)``).

:meth:`ContextualVectorStore.as_retriever` is LangChain's ``VectorStoreRetriever`` (the documents as
added); :meth:`ContextualVectorStore.as_grouped_retriever` returns the **grouped** retriever
(:class:`langchain_ctxret.ContextualRetriever`) over the same index: the message split into parts,
one group per part, pieces with their labels and every group and score key.

Documents are stored by the core's document indexer (sections by markdown heading, labelled
pieces blended with their section). Adding a document id again replaces that document (upsert), as
every ctxret entry point does: changed sections are rewritten and removed ones deleted in one write;
a document whose metadata changed is deleted, then written again; an unchanged one costs nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

from ctxret import ContextualIndex, Hit, InputError, cosine_to_distance
from ctxret.adapters import (
    PIECES_PER_DOCUMENT,
    Scope,
    as_list,
    calibration_for,
    caller_view,
    check_search_keys,
    documents_to_turns,
    framework_model,
    hit_document_key,
    nearest,
    open_store_arguments,
    progress_option,
    shown_groups,
    shown_scores,
    stored_where,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore

from .retriever import ContextualRetriever, documents_to_items

__all__ = ["ContextualVectorStore"]


class ContextualVectorStore(VectorStore):
    """A LangChain ``VectorStore`` over a ctxret index (see the module docstring).

    Args:
        index: the :class:`ctxret.ContextualIndex` to use; built from ``embedding`` and
            ``index_kwargs`` when not given.
        embedding: a LangChain ``Embeddings`` (any: it is wrapped); ``None`` = the local model.
        **index_kwargs: ``ContextualIndex`` arguments (``path``, ``collection``, ``in_memory``,
            ``host``, ``weight``, …).

    Example:
        ```python
        from ctxret import ContextualIndex, Store
        from langchain_core.documents import Document
        from langchain_ctxret import ContextualVectorStore

        store = ContextualVectorStore(ContextualIndex(Store.memory()))
        docs = [Document("The cat sleeps on the red sofa.", id="cat"), Document("Trains leave at 8.", id="train")]
        print(store.add_documents(docs))  # prints: ['cat', 'train']
        print([d.id for d in store.similarity_search("Where does the cat sleep?", k=1)])  # prints: ['cat']
        retriever = store.as_retriever(search_kwargs={"k": 1})
        print([d.page_content for d in retriever.invoke("Where does the cat sleep?")])
        # prints: ['The cat sleeps on the red sofa.']
        ```

    ``as_grouped_retriever(search_kwargs={"k": 3})`` gives the grouped retriever (one group per part).
    """

    def __init__(
        self, index: ContextualIndex | str | None = None, embedding: Embeddings | None = None, **index_kwargs: Any
    ) -> None:
        embedding = _chroma_names(index_kwargs, embedding)
        if isinstance(index, str):  # langchain-chroma's first argument: Chroma(collection_name, embedding_function)
            if "collection" in index_kwargs:
                raise InputError("the collection is named twice (first argument and collection=); give one")
            index_kwargs["collection"], index = index, None
        if index is None:  # no folder, server or client named: in memory, as langchain-chroma's Chroma() is
            store = open_store_arguments(index_kwargs.pop("path", None), index_kwargs, default="memory")
            index = ContextualIndex(store, embedder=cast(Any, embedding), **index_kwargs)
        elif not isinstance(index, ContextualIndex):
            raise InputError(f"index must be a ctxret.ContextualIndex, got {type(index).__name__}")
        elif embedding is not None or index_kwargs:
            raise InputError("pass either index= or the arguments to build one (embedding=, path=, ...), not both")
        self.index = index
        self._embedding = embedding

    @property
    def embeddings(self) -> Embeddings | None:
        """The LangChain ``Embeddings`` the index embeds with (its ctxret embedder, wrapped)."""
        if self._embedding is not None:
            return self._embedding
        embedder = self.index.embedder
        model = framework_model(embedder)
        if isinstance(model, Embeddings):
            return model
        from .embeddings import CtxretEmbeddings

        return CtxretEmbeddings(embedder)

    # -- writes -------------------------------------------------------------------------------------
    def add_texts(
        self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str] | None = None, **kwargs: Any
    ) -> list[str]:
        texts = as_list(texts, "texts", "strings")
        bad = [t for t in texts if not isinstance(t, str)]
        if bad:
            raise InputError(f"texts must be strings, got a {type(bad[0]).__name__}")
        metas = as_list(metadatas, "metadatas", "dicts") if metadatas is not None else [{} for _ in texts]
        if len(metas) != len(texts):
            raise InputError(f"{len(metas)} metadatas for {len(texts)} texts")
        docs = [Document(page_content=t, metadata=dict(m or {})) for t, m in zip(texts, metas, strict=False)]
        return self.add_documents(docs, ids=ids, **kwargs)

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        """Add or replace documents (upsert by id); returns their ids.

        The id is ``ids[i]``, else ``Document.id``, else a new random id (what LangChain's vector
        stores do). ``thread_id`` (keyword) sets the search scope of all of them (default: each
        document's id). ``metadata["title"]`` labels the pieces and stays in the metadata.
        ``progress`` / ``show_progress`` (keywords): a progress bar with pieces/s and the time left (``None``,
        the default: on a terminal or in a notebook; ``True`` always; ``False`` never).
        """
        ids = kwargs.pop("ids", None)
        thread_id = kwargs.pop("thread_id", None)
        progress = progress_option(kwargs.pop("progress", None), kwargs.pop("show_progress", None))
        if kwargs:
            raise InputError(f"unknown keyword(s) {sorted(kwargs)}; add_documents takes ids=, thread_id= and progress=")
        documents = as_list(documents, "documents", "LangChain Documents")
        bad = [d for d in documents if not isinstance(d, Document)]
        if bad:
            raise InputError(f"documents must be LangChain Documents, got a {type(bad[0]).__name__}")
        if ids is None:
            ids = [d.id or _metadata_id(d) or str(uuid.uuid4()) for d in documents]
        items, doc_ids = documents_to_items(documents, ids, keep_title=True)
        self._upsert(items, doc_ids, thread_id, progress)
        return doc_ids

    def _upsert(
        self, items: list[dict[str, Any]], doc_ids: list[str], thread_id: str | None, progress: bool | None = None
    ) -> None:
        if len(set(doc_ids)) != len(doc_ids):
            raise InputError("the same document id appears twice in one call; give each document its own id")
        turns = documents_to_turns(items, thread_id=thread_id)
        planned = self.index.check_turns(turns)  # planned once: add_turns takes them as they are
        # a document is (thread, id): another thread's document of the same id is never read or touched
        threads = sorted({t.thread_id for t in turns})
        new: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
        for p in planned:
            for piece, meta in zip(p.pieces, p.metadatas, strict=True):
                new[(p.turn.thread_id, str(p.turn.doc_id))][piece.id] = meta
        old: dict[tuple[str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
        for r in self.index.store.records(("metadatas",), Scope(threads, _doc_where(doc_ids))):
            meta = r["metadata"]
            old[(str(meta.get("thread_id")), str(meta.get("doc_id")))][r["id"]] = meta
        # the core replaces a document whose sections changed (in one write); one whose pieces keep their
        # text but not their metadata is deleted first, so that it is written again whole
        stale: dict[str, list[str]] = defaultdict(list)
        for (thread, doc), pieces in old.items():
            mine = new.get((thread, doc), {})
            if any(pid in mine and mine[pid] != meta for pid, meta in pieces.items()):
                stale[thread].append(doc)
        for thread, docs in stale.items():
            self.index.delete(thread_id=thread, where=_doc_where(docs))
        self.index.add_turns(planned, progress=progress)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        """Delete documents by id (all their pieces); ids that are not stored are ignored. With
        ``thread_id=`` only that thread's documents of those ids, else every thread's."""
        thread_id = kwargs.pop("thread_id", None)
        if kwargs:
            raise InputError(f"unknown keyword(s) {sorted(kwargs)}; delete takes ids and thread_id=")
        if ids is None:
            raise InputError("delete needs ids=[...]; to remove everything use store.index.clear()")
        ids = [ids] if isinstance(ids, str) else as_list(ids, "ids", "document ids")
        if ids:
            self.index.delete(thread_id=thread_id, where=_doc_where([str(i) for i in ids]))
        return True

    # -- reads --------------------------------------------------------------------------------------
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The stored documents with these ids (missing ids are left out), as added: the text re-assembled from
        their pieces (sections in order, each under its markdown headings, pieces joined by line breaks; the
        whitespace inside a line as ctxret stores it) and the metadata as given. A document is one thread's:
        an id stored in several threads gives one Document per thread, never one text of both."""
        ids = [str(i) for i in ([ids] if isinstance(ids, str) else as_list(ids, "ids", "document ids"))]
        if not ids:
            return []
        by_doc: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
        for r in self.index.store.records(("metadatas",), Scope(where=_doc_where(ids))):
            meta = r["metadata"]
            by_doc[str(meta.get("doc_id"))][str(meta.get("thread_id"))].append(meta)
        out = []
        for doc_id in dict.fromkeys(ids):
            for _, metas in sorted(by_doc.get(doc_id, {}).items()):
                metas.sort(
                    key=lambda m: (
                        int(m.get("turn_index", 0)),
                        int(m.get("source_ordinal", 0)),
                        int(m.get("ordinal", 0)),
                    )
                )
                out.append(Document(page_content=document_text(metas), metadata=caller_view(metas[0]), id=doc_id))
        return out

    # A vector store returns documents: each search gives k distinct documents (a document's best piece stands for
    # it: page_content is that piece's text), as langchain-chroma does with one chunk per document; per="piece" (a
    # keyword of any search) gives the k best pieces instead, several of one document possibly.
    @staticmethod
    def _options(k: int, filter: dict[str, Any] | None, kwargs: dict[str, Any], **defaults: Any) -> dict[str, Any]:
        check_search_keys(kwargs, extra=SEARCH_SCOPE_KEYS, what="search keyword")  # values: checked by the search
        options = {"score_threshold": None, "split": False, "per": "document", **defaults, **kwargs}  # ranks, no drop
        return {"k": k, "where": filter, **options}

    def _search(self, groups: list[Any]) -> list[tuple[Document, float]]:
        return [  # in the order of the score shown (the relevance; a reranker's score when one ran)
            (hit_view(h), (shown or (float(h.score), ""))[0])
            for _, hits in shown_groups(groups)
            for h, shown in zip(hits, shown_scores(hits), strict=True)
        ]

    @staticmethod
    def _distances(groups: list[Any]) -> list[tuple[Document, float]]:
        found = [(hit_view(h), cosine_to_distance(_cosine(h))) for g in groups for h in g.hits]
        return sorted(found, key=lambda pair: pair[1])

    def similarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` best documents for the whole query (one part), each once, in the search's own ranking (the one
        the evaluation measures; no score is shown, so nothing is re-ordered); ``per="piece"``: the ``k`` best
        pieces."""
        return [hit_view(h) for g in self.index.search(query, **self._options(k, filter, kwargs)) for h in g.hits]

    async def asimilarity_search(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """:meth:`similarity_search` on the index's async path."""
        groups = await self.index.asearch(query, **self._options(k, filter, kwargs))
        return [hit_view(h) for g in groups for h in g.hits]

    def similarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """The ``k`` documents nearest the query's vector with Chroma's cosine **distance** (``1 - cosine`` of the
        document's best piece, lower is better, lower first), as langchain-chroma returns them: a dense search (no
        lexical side unless ``lexical=True``). :meth:`similarity_search_with_relevance_scores` gives the relevance."""
        return self._distances(self.index.search(query, **self._options(k, filter, kwargs, lexical=False)))

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_with_score` on the index's async path."""
        return self._distances(await self.index.asearch(query, **self._options(k, filter, kwargs, lexical=False)))

    def _similarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return self._search(self.index.search(query, **self._options(k, kwargs.pop("filter", None), kwargs)))

    async def _asimilarity_search_with_relevance_scores(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        options = self._options(k, kwargs.pop("filter", None), kwargs)
        return self._search(await self.index.asearch(query, **options))

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance over the ``fetch_k`` best pieces (:mod:`ctxret.query.mmr`), in its selection
        order: the first ``k`` distinct documents (``per="piece"``: the ``k`` pieces)."""
        options = self._mmr_options(k, fetch_k, lambda_mult, filter, kwargs)
        return _distinct([h for g in self.index.search(query, **options) for h in g.hits], k, kwargs)

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search` on the index's async path."""
        options = self._mmr_options(k, fetch_k, lambda_mult, filter, kwargs)
        return _distinct([h for g in await self.index.asearch(query, **options) for h in g.hits], k, kwargs)

    def _mmr_options(
        self, k: int, fetch_k: int, lambda_mult: float, filter: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        # MMR picks pieces in its order; the first piece of each document keeps the document's place
        pieces = kwargs.get("per", "document") == "piece"
        extra = {k_: v for k_, v in kwargs.items() if k_ != "per"}
        ask = k if pieces else k * PIECES_PER_DOCUMENT
        mmr = {"mmr": True, "fetch_k": max(fetch_k, ask), "lambda_mult": lambda_mult}
        return self._options(ask, filter, extra, per="piece", **mmr)

    # -- by vector: the vector as given, no parts, no lexical side (ctxret.query.nearest) -----------------------
    def _nearest(
        self, embedding: Sequence[float], k: int, filter: Any, kwargs: dict[str, Any], **mmr: Any
    ) -> list[Hit]:
        thread_id, per = kwargs.pop("thread_id", None), kwargs.pop("per", "document")
        if kwargs:
            raise InputError(
                f"unknown keyword(s) {sorted(kwargs)}; a search by vector takes k, filter, thread_id= and per="
            )
        if per not in ("document", "piece"):
            raise InputError(f"per must be 'document' (k distinct documents) or 'piece' (k pieces), got {per!r}")
        ix = self.index
        calibration = ix.settings.relevance or calibration_for(ix.embedder)
        ask = k if per == "piece" else k * PIECES_PER_DOCUMENT
        if "fetch_k" in mmr:
            mmr["fetch_k"] = max(int(mmr["fetch_k"]), ask)
        hits = nearest(
            ix.store,
            embedding,
            ask,
            Scope(thread_id, stored_where(filter)),
            dims=ix.config.dims,
            calibration=calibration,
            **mmr,
        )
        return hits[:k] if per == "piece" else _first_of_each_document(hits, k)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """The ``k`` documents nearest ``embedding`` (made with :attr:`embeddings`), nearest first (``per="piece"``:
        the ``k`` nearest pieces)."""
        return [hit_view(h) for h in self._nearest(embedding, k, filter, kwargs)]

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[Document]:
        """:meth:`similarity_search_by_vector` off the event loop."""
        return await asyncio.to_thread(self.similarity_search_by_vector, embedding, k, filter, **kwargs)

    def similarity_search_by_vector_with_relevance_scores(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_by_vector` with each hit's relevance of its cosine alone (in [0, 1], higher is
        better; langchain-chroma returns the distance under this name, :meth:`similarity_search_with_score` does)."""
        return [(hit_view(h), float(h.relevance or 0.0)) for h in self._nearest(embedding, k, filter, kwargs)]

    async def asimilarity_search_by_vector_with_relevance_scores(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """:meth:`similarity_search_by_vector_with_relevance_scores` off the event loop."""
        return await asyncio.to_thread(
            self.similarity_search_by_vector_with_relevance_scores, embedding, k, filter, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """Maximal marginal relevance over the ``fetch_k`` pieces nearest ``embedding``: the first ``k`` distinct
        documents in its selection order (``per="piece"``: the ``k`` pieces)."""
        hits = self._nearest(embedding, k, filter, kwargs, fetch_k=fetch_k, lambda_mult=lambda_mult)
        return [hit_view(h) for h in hits]

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> list[Document]:
        """:meth:`max_marginal_relevance_search_by_vector` off the event loop."""
        return await asyncio.to_thread(
            self.max_marginal_relevance_search_by_vector, embedding, k, fetch_k, lambda_mult, filter, **kwargs
        )

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings | None = None,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str] | None = None,
        index: ContextualIndex | None = None,
        **kwargs: Any,
    ) -> ContextualVectorStore:
        """A store holding ``texts`` (``kwargs``: ``ContextualIndex`` arguments, e.g. ``in_memory=True``, ``path=``;
        ``thread_id``, and ``progress`` / ``show_progress`` for this write, as :meth:`add_documents`)."""
        thread_id = kwargs.pop("thread_id", None)
        progress = progress_option(kwargs.pop("progress", None), kwargs.pop("show_progress", None))
        store = cls(index, embedding=embedding, **kwargs) if index is None else cls(index)
        store.add_texts(texts, metadatas, ids=ids, thread_id=thread_id, progress=progress)
        return store

    @classmethod
    def from_documents(
        cls, documents: list[Document], embedding: Embeddings | None = None, **kwargs: Any
    ) -> ContextualVectorStore:
        """A store holding ``documents`` (ids from ``Document.id``; ``embedding=None``: the local model)."""
        return super().from_documents(documents, cast(Any, embedding), **kwargs)

    def as_grouped_retriever(self, **kwargs: Any) -> ContextualRetriever:
        """The grouped retriever over this index (:class:`ContextualRetriever`: the message split into parts, one group
        per part, pieces with their labels and every group and score key); ``search_type``, ``search_kwargs``,
        ``tags`` and any of its fields. :meth:`as_retriever` is LangChain's: the documents as added."""
        tags = list(kwargs.pop("tags", None) or []) + self._get_retriever_tags()
        return ContextualRetriever(index=self.index, tags=tags, **kwargs)


#: A search's keywords beside ``k``, ``filter`` and the search options of :class:`ctxret.SearchSettings`.
SEARCH_SCOPE_KEYS = ("thread_id", "where")
#: langchain-chroma's constructor names for what ctxret names otherwise.
CHROMA_NAMES = {"collection_name": "collection", "persist_directory": "path", "embedding_function": "embedding"}
#: langchain-chroma's constructor arguments ctxret does not take, and what to do instead.
CHROMA_REFUSED = {
    "client_settings": "ctxret makes its Chroma client itself (telemetry off); pass your own client= instead",
    "collection_metadata": "ctxret records its own config on the collection (cosine space, model, weight)",
    "collection_configuration": "ctxret sets the collection's index itself (HNSW, cosine space)",
    "relevance_score_fn": "ctxret's relevance is calibrated (ctxret.query.relevance; SearchSettings(relevance=...))",
    "create_collection_if_not_exists": "ctxret creates the collection on first open",
    "chroma_cloud_api_key": "Chroma Cloud is not supported; use a Chroma server (host=, port=) or a client=",
    "tenant": "pass a client= made for that tenant",
    "database": "pass a client= made for that database",
}


def _chroma_names(kwargs: dict[str, Any], embedding: Any) -> Any:
    """langchain-chroma's names (``collection_name``, ``persist_directory``, ``embedding_function``) as ctxret's, in
    place; returns the embedding. Its arguments ctxret has no use for are refused, saying what they are."""
    for name in sorted(set(kwargs) & set(CHROMA_REFUSED)):
        raise InputError(f"{name}= (langchain-chroma's) is not taken here: {CHROMA_REFUSED[name]}")
    for theirs, ours in CHROMA_NAMES.items():
        if theirs not in kwargs:
            continue
        if ours in kwargs or (ours == "embedding" and embedding is not None):
            raise InputError(f"{theirs}= and {ours}= name the same thing (langchain-chroma's and ctxret's); give one")
        value = kwargs.pop(theirs)
        if ours == "embedding":
            embedding = value
        else:
            kwargs[ours] = value
    return embedding


def _metadata_id(doc: Document) -> str | None:
    """``metadata["doc_id"]``: a document's id when nothing else names one (one key for the caller and ctxret)."""
    value = (doc.metadata or {}).get("doc_id")
    return value if isinstance(value, str) and value else None


def document_text(metas: Sequence[dict[str, Any]]) -> str:
    """A document's text from its pieces' metadata (in order): each section's pieces joined by line breaks, the
    sections one blank line apart, each under the markdown headings its heading path (``source_label``) opens (a
    heading's level is its depth in the path)."""
    sections: dict[int, tuple[str, list[str]]] = {}
    for m in metas:
        label = str(m.get("source_label") or "") if m.get("source_kind") == "section" else ""
        sections.setdefault(int(m.get("turn_index", 0)), (label, []))[1].append(str(m.get("body", "")))
    blocks: list[str] = []
    above: list[str] = []
    for _, (label, bodies) in sorted(sections.items()):
        path = label.split(" › ") if label else []
        same = 0
        while same < min(len(path), len(above)) and path[same] == above[same]:
            same += 1
        headings = [f"{'#' * (depth + 1)} {title}" for depth, title in enumerate(path) if depth >= same]
        blocks.append("\n".join([*headings, *bodies]))
        above = path
    return "\n\n".join(blocks)


def _first_of_each_document(hits: Sequence[Hit], k: int) -> list[Hit]:
    """The first hit of each document (a chat turn: its own), in order, at most ``k``."""
    seen: set[tuple[str, str]] = set()
    out = []
    for h in hits:
        key = hit_document_key(h)
        if key not in seen:
            seen.add(key)
            out.append(h)
            if len(out) == k:
                break
    return out


def _distinct(hits: Sequence[Hit], k: int, kwargs: dict[str, Any]) -> list[Document]:
    kept = list(hits[:k]) if kwargs.get("per", "document") == "piece" else _first_of_each_document(hits, k)
    return [hit_view(h) for h in kept]


def _cosine(hit: Hit) -> float:
    return float(hit.scores.get("cosine", hit.score))


def _doc_where(ids: Sequence[str]) -> dict[str, Any]:
    return {"doc_id": ids[0]} if len(ids) == 1 else {"doc_id": {"$in": list(ids)}}


def hit_view(hit: Hit) -> Document:
    """A hit as the vector store returns it: the piece body, the caller's metadata, the document id."""
    meta = hit.stored
    return Document(page_content=hit.body, metadata=caller_view(dict(meta)), id=str(meta.get("doc_id") or hit.id))


__all__ += ["caller_view", "document_text", "hit_view"]
