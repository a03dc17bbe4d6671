"""``ContextualRetriever``: a LlamaIndex retriever over a :class:`ctxret.ContextualIndex`.

It only translates: the query string goes to ``ContextualIndex.search`` (or ``asearch``), and each
hit of each group comes back as a ``NodeWithScore``. Splitting, blending, filtering and ranking
all happen in the core.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxret import ContextualIndex, Group, InputError, SearchSettings, Store
from ctxret.adapters import check_search_options, open_store_arguments, scored_metadata, shown_groups
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo
from llama_index.core.vector_stores.types import MetadataFilters

from .filters import metadata_filters_to_where
from .node_parser import piece_node, stored_ref_id
from .rerank import as_reranker

__all__ = ["ContextualRetriever", "groups_to_nodes", "settings_embed_model"]

_OWN_ARGS = ("message", "k", "score_threshold", "cosine_floor", "thread_id", "where", "rerank", "rerank_candidates")
#: ``ContextualIndex.search`` keywords ``search_kwargs`` may hold beside the search options.
_INDEX_KEYS = ("settings",)


def settings_embed_model() -> Any:
    """LlamaIndex's ``Settings.embed_model`` when you set it, else ``None`` (never LlamaIndex's
    default, which would load OpenAI): what ``llamaindex_ctxret`` embeds with when it builds a
    :class:`ctxret.ContextualIndex` for you and you pass no ``embed_model``."""
    from llama_index.core import Settings

    return getattr(Settings, "_embed_model", None)


def open_index(
    path: Store | str | os.PathLike[str] | None = None, *, embed_model: Any = None, **kwargs: Any
) -> ContextualIndex:
    """``ContextualIndex(store, embedder=embed_model or Settings.embed_model or the local model, **kwargs)``, the
    :class:`ctxret.Store` built from ``path`` (or given as ``path``) and the store's keywords (``collection``, ...);
    no path, ``host`` or ``client``: in memory, as a ``VectorStoreIndex`` is."""
    model = embed_model if embed_model is not None else settings_embed_model()
    store = open_store_arguments(path, kwargs, default="memory")
    return ContextualIndex(store, embedder=model, **kwargs)


def groups_to_nodes(groups: Sequence[Group]) -> list[NodeWithScore]:
    """Core groups → ``NodeWithScore`` s, group by group, best first inside each group.

    Each node is the stored piece (node id = piece id, text = header + body, metadata = the
    stored metadata) plus ``group`` (the part's index, from 0), ``group_query`` (the part's text),
    ``group_rank`` (0 = the group's best hit), ``group_count`` (the number of parts),
    ``group_parts`` (every part's text) and one
    ``score_<name>`` per named score of the hit (``score_cosine``; with hybrid search also
    ``score_bm25``, ``score_fused`` and ``score_coverage``; ``score_relevance``; ``score_rerank``
    when a reranker ran), named as in ``langchain_ctxret``. These keys replace caller metadata of
    the same name.

    ``NodeWithScore.score`` is the hit's **relevance** in [0, 1] (``score_scale = "relevance"`` in
    the metadata): a logistic function of its cosine and lexical coverage, calibrated on LoCoMo dev,
    the same for the same hit whatever else the part found (:mod:`ctxret.query.relevance`) — so a
    ``SimilarityPostprocessor(similarity_cutoff=...)`` behaves the same in any store. It is not the
    cosine (``score_cosine``) and not the fused score (``score_fused``, min–max relative to the
    part's candidates). Nodes are in each group's ranking order (``group_rank``: by the fused
    score, or the reranker's), which can differ from the order of ``score``.
    """
    parts = [g.part for g in groups]
    out: list[NodeWithScore] = []
    for group, hits in shown_groups(groups):
        for rank, hit in enumerate(hits):
            meta = scored_metadata(hit, group, rank, parts)
            node = piece_node(hit.id, hit.text, meta)
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=stored_ref_id(hit.stored))
            out.append(NodeWithScore(node=node, score=float(meta["score"])))
    return out


class ContextualRetriever(BaseRetriever):
    """Retrieve contextual pieces from a :class:`ctxret.ContextualIndex`, one group per query part.

    The query is split by the core into at most 8 parts; each part (blended with the whole query)
    searches on its own and keeps its own group of at most ``similarity_top_k`` hits. Nodes come
    back group by group (part 0's hits best first, then part 1's, …) with ``group``,
    ``group_query`` and ``group_rank`` in their metadata and the hit's relevance in [0, 1] as
    ``score`` (see :func:`groups_to_nodes`). A piece that supports two parts is returned once per group: the
    base class's de-duplication by node id is turned off for this retriever.

    Args:
        index: the index to search (any store: embedded folder, server, in memory).
        similarity_top_k: hits per part (the core's ``k``), not in total.
        score_threshold: a floor on ``NodeWithScore.score``, the relevance in [0, 1] (as LangChain's
            retriever and the core mean it): ``"auto"`` (default) sets none (the cosine floor still applies),
            ``None`` turns every floor off (the cosine floor too, unless ``cosine_floor`` is a number).
        cosine_floor: the core's cosine floor per hit (``score_cosine``): ``"auto"`` (default) the index's,
            ``None`` none, a number in [-1, 1].
        thread_id: one thread id or several; scopes the search inside the Chroma query.
        where: a Chroma ``where`` filter on piece metadata, combined with ``thread_id``.
        filters: LlamaIndex ``MetadataFilters`` (``==`` ``!=`` ``>`` ``>=`` ``<`` ``<=`` ``in``
            ``nin``, ``and``/``or``, nested), translated to the same Chroma filter
            (:func:`llamaindex_ctxret.filters.metadata_filters_to_where`) and combined with
            ``where``.
        rerank: a LlamaIndex ``BaseNodePostprocessor`` (``SentenceTransformerRerank``,
            ``LLMRerank``, ``SimilarityPostprocessor``, …) or a callable ``(part, hits) -> scores``,
            run inside each group on its top ``rerank_candidates`` candidates before the cut to
            ``similarity_top_k`` (:mod:`llamaindex_ctxret.rerank`). A query engine's
            ``node_postprocessors`` run after retrieval on all groups' nodes at once instead.
        per: ``"document"``: one node per document (node id and ``ref_doc_id`` = the document's id, text = its
            best piece, ``similarity_top_k`` documents per part, ranked by the core's document rule);
            ``"section"``: one per section; ``"piece"`` (default): the pieces (``SearchSettings.per``).
        search_kwargs: more search options for ``ContextualIndex.search`` / ``asearch`` (e.g. ``max_parts``,
            ``split``: any :class:`ctxret.SearchSettings` option), checked now: an unknown key is an error naming the
            accepted ones, a bad value the option's own error. The arguments above cannot be repeated in it.

    ``QueryBundle.embedding`` is ignored: the core embeds each part and the whole query itself
    with the index's embedder (the collection's vectors are blends from that model), so a
    precomputed embedding could neither be split nor be trusted to come from the same model.
    ``QueryBundle.query_str`` is what is searched.

    Example:
        ```python
        from ctxret import ContextualIndex, Store
        from llamaindex_ctxret import ContextualRetriever

        index = ContextualIndex(Store.memory())
        index.add_documents(["The cat sleeps on the red sofa.", "The train to Porto leaves at 8:15 from platform 4."])
        retriever = ContextualRetriever(index, similarity_top_k=1)
        nodes = retriever.retrieve("Which platform does the Porto train use? Where does the cat sleep?")
        print([(n.node.metadata["group"], n.node.get_content().splitlines()[-1]) for n in nodes])
        # prints: [(0, 'The train to Porto leaves at 8:15 from platform 4.'), (1, 'The cat sleeps on the red sofa.')]
        ```
    """

    def __init__(
        self,
        index: ContextualIndex,
        *,
        similarity_top_k: int = 5,
        score_threshold: float | None | Literal["auto"] = "auto",
        cosine_floor: float | None | Literal["auto"] = "auto",
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        filters: MetadataFilters | None = None,
        rerank: Any = None,
        rerank_candidates: int = 20,
        search_kwargs: Mapping[str, Any] | None = None,
        per: str = "piece",
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(index, ContextualIndex):
            raise InputError(f"index must be a ctxret.ContextualIndex, got {type(index).__name__}")
        if isinstance(similarity_top_k, bool) or not isinstance(similarity_top_k, int) or similarity_top_k < 1:
            raise InputError(f"similarity_top_k (hits per part) must be a positive integer, got {similarity_top_k!r}")
        # both floors are checked now (not at the first retrieve), by the core's one reading of them
        SearchSettings(cosine_floor=cosine_floor, score_threshold=score_threshold)
        extra = dict(search_kwargs or {})
        clash = sorted(set(extra) & set(_OWN_ARGS))
        if clash:
            raise InputError(
                f"search_kwargs repeats {clash}; pass them as the retriever's own arguments "
                "(similarity_top_k, score_threshold, cosine_floor, thread_id, where)"
            )
        # unknown keys and bad values fail now, not at the first retrieve (the keys and checks: SearchSettings')
        check_search_options(extra, extra=_INDEX_KEYS)
        self.index = index
        self.similarity_top_k = similarity_top_k
        self.score_threshold = score_threshold
        self.cosine_floor = cosine_floor
        self.thread_id = thread_id
        translated = metadata_filters_to_where(filters)
        clauses = [c for c in (dict(where) if where else None, translated) if c]
        self.where = None if not clauses else clauses[0] if len(clauses) == 1 else {"$and": clauses}
        self.filters = filters
        self.rerank = as_reranker(rerank)  # a clear error now for anything that cannot rerank
        if isinstance(rerank_candidates, bool) or not isinstance(rerank_candidates, int) or rerank_candidates < 1:
            raise InputError(f"rerank_candidates must be a positive integer, got {rerank_candidates!r}")
        self.rerank_candidates = rerank_candidates
        if per != "piece":
            if "per" in extra:
                raise InputError("per is given twice (the retriever's per= and search_kwargs); give it once")
            extra["per"] = SearchSettings(per=per).per  # validated: an InputError names the choices
        self.search_kwargs = extra
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_path(
        cls, path: Store | str | os.PathLike[str] | None = None, *, embed_model: Any = None, **kwargs: Any
    ) -> ContextualRetriever:
        """Open (or create) the index and the retriever in one call.

        The embedder is ``embed_model`` (any LlamaIndex ``BaseEmbedding``), else
        ``Settings.embed_model`` when you set it, else the local model. Keywords that are this
        retriever's arguments go to it; the rest (``collection``, ``in_memory``, ``host``, …) to
        :class:`ctxret.ContextualIndex`.
        """
        own = {
            "similarity_top_k",
            "score_threshold",
            "cosine_floor",
            "thread_id",
            "where",
            "filters",
            "rerank",
            "rerank_candidates",
            "search_kwargs",
            "callback_manager",
            "verbose",
        }
        mine = {k: kwargs.pop(k) for k in list(kwargs) if k in own}
        return cls(open_index(path, embed_model=embed_model, **kwargs), **mine)

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> Any:
        """A ``RetrieverQueryEngine`` over this retriever (``llm``: default ``Settings.llm``;
        ``kwargs``: ``RetrieverQueryEngine.from_args``'s, e.g. ``response_mode``,
        ``node_postprocessors``, ``text_qa_template``). The LLM sees the nodes group by group."""
        from llama_index.core.query_engine import RetrieverQueryEngine

        return RetrieverQueryEngine.from_args(self, llm=llm, **kwargs)

    def _search_args(self) -> dict[str, Any]:
        args = {
            "k": self.similarity_top_k,
            "score_threshold": self.score_threshold,
            "cosine_floor": self.cosine_floor,
            "thread_id": self.thread_id,
            "where": self.where,
            **self.search_kwargs,
        }
        if self.rerank is not None:
            args["rerank"] = self.rerank
            args["rerank_candidates"] = self.rerank_candidates
        return args

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return groups_to_nodes(self.index.search(query_bundle.query_str, **self._search_args()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return groups_to_nodes(await self.index.asearch(query_bundle.query_str, **self._search_args()))

    # The base class drops repeated node ids after _retrieve; here a repeat is the same piece in
    # another part's group, which is the point. Our nodes are never IndexNodes, so there is no
    # recursive retrieval to do either.
    def _handle_recursive_retrieval(self, query_bundle: QueryBundle, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        return nodes

    async def _ahandle_recursive_retrieval(
        self, query_bundle: QueryBundle, nodes: list[NodeWithScore]
    ) -> list[NodeWithScore]:
        return nodes
