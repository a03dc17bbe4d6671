"""``ContextualRetriever``: a LlamaIndex retriever over a :class:`ctxret.ContextualIndex`.

It only translates: the query string goes to ``ContextualIndex.search`` (or ``asearch``), and each
hit of each group comes back as a ``NodeWithScore``. Splitting, blending, filtering and ranking
all happen in the core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ctxret.errors import InputError
from ctxret.index import ContextualIndex
from ctxret.results import Group
from ctxret.storage.schema import hit_metadata
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from .node_parser import piece_node

__all__ = ["ContextualRetriever", "groups_to_nodes"]

_OWN_ARGS = ("message", "k", "score_threshold", "thread_id", "where")


def groups_to_nodes(groups: Sequence[Group]) -> list[NodeWithScore]:
    """Core groups → ``NodeWithScore`` s, group by group, best first inside each group.

    Each node is the stored piece (node id = piece id, text = header + body, metadata = the
    stored metadata) plus ``group`` (the part's index, from 0), ``group_query`` (the part's text),
    ``group_rank`` (0 = the group's best hit), ``group_count`` (the number of parts),
    ``group_parts`` (every part's text) and one
    ``score_<name>`` per named score of the hit (``score_cosine``; with hybrid search also
    ``score_bm25`` and ``score_fused``), named as in ``langchain_ctxret``. These keys
    replace caller metadata of the same name. ``score`` is the hit's ranking score and
    ``score_scale`` in the metadata names it: ``"cosine"`` (raw cosine in [-1, 1]) for dense
    search, ``"fused"`` (in [0, 1], relative to the part's candidates) for hybrid search — the same
    convention as ``langchain_ctxret``. Scores are monotonic inside a group.
    """
    parts = [g.part for g in groups]
    out: list[NodeWithScore] = []
    for group in groups:
        for rank, hit in enumerate(group.hits):
            meta = hit_metadata(hit, group, rank, parts)
            out.append(NodeWithScore(node=piece_node(hit.id, hit.text, meta), score=float(hit.score)))
    return out


class ContextualRetriever(BaseRetriever):
    """Retrieve contextual pieces from a :class:`ctxret.ContextualIndex`, one group per query part.

    The query is split by the core into at most 8 parts; each part (blended with the whole query)
    searches on its own and keeps its own group of at most ``similarity_top_k`` hits. Nodes come
    back group by group (part 0's hits best first, then part 1's, …) with ``group``,
    ``group_query`` and ``group_rank`` in their metadata and the raw cosine as ``score`` (see
    :func:`groups_to_nodes`). A piece that supports two parts is returned once per group: the
    base class's de-duplication by node id is turned off for this retriever.

    Args:
        index: the index to search (any store: embedded folder, server, in memory).
        similarity_top_k: hits per part (the core's ``k``), not in total.
        score_threshold: cosine floor. ``"auto"`` (default) uses the index's floor, ``None``
            disables it, a float sets it.
        thread_id: one thread id or several; scopes the search inside the Chroma query.
        where: a Chroma ``where`` filter on piece metadata, combined with ``thread_id``.
        search_kwargs: more keyword arguments for ``ContextualIndex.search`` / ``asearch``
            (e.g. ``max_parts``, ``split``, or search options a newer core adds), passed as given.
            The arguments above cannot be repeated in it.

    ``QueryBundle.embedding`` is ignored: the core embeds each part and the whole query itself
    with the index's embedder (the collection's vectors are blends from that model), so a
    precomputed embedding could neither be split nor be trusted to come from the same model.
    ``QueryBundle.query_str`` is what is searched.
    """

    def __init__(
        self,
        index: ContextualIndex,
        *,
        similarity_top_k: int = 5,
        score_threshold: float | None | Literal["auto"] = "auto",
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        search_kwargs: Mapping[str, Any] | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(index, ContextualIndex):
            raise InputError(f"index must be a ctxret.ContextualIndex, got {type(index).__name__}")
        if (
            isinstance(similarity_top_k, bool)
            or not isinstance(similarity_top_k, int)
            or similarity_top_k < 1
        ):
            raise InputError(
                "similarity_top_k (hits per part) must be a positive integer, "
                f"got {similarity_top_k!r}"
            )
        if not (
            score_threshold is None
            or score_threshold == "auto"
            or (isinstance(score_threshold, (int, float)) and not isinstance(score_threshold, bool))
        ):
            raise InputError(
                f"score_threshold must be 'auto', None or a number, got {score_threshold!r}"
            )
        extra = dict(search_kwargs or {})
        clash = sorted(set(extra) & set(_OWN_ARGS))
        if clash:
            raise InputError(
                f"search_kwargs repeats {clash}; pass them as the retriever's own arguments "
                "(similarity_top_k, score_threshold, thread_id, where)"
            )
        self.index = index
        self.similarity_top_k = similarity_top_k
        self.score_threshold = score_threshold
        self.thread_id = thread_id
        self.where = dict(where) if where else None
        self.search_kwargs = extra
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _search_args(self) -> dict[str, Any]:
        return {
            "k": self.similarity_top_k,
            "score_threshold": self.score_threshold,
            "thread_id": self.thread_id,
            "where": self.where,
            **self.search_kwargs,
        }

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return groups_to_nodes(self.index.search(query_bundle.query_str, **self._search_args()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return groups_to_nodes(
            await self.index.asearch(query_bundle.query_str, **self._search_args())
        )

    # The base class drops repeated node ids after _retrieve; here a repeat is the same piece in
    # another part's group, which is the point. Our nodes are never IndexNodes, so there is no
    # recursive retrieval to do either.
    def _handle_recursive_retrieval(
        self, query_bundle: QueryBundle, nodes: list[NodeWithScore]
    ) -> list[NodeWithScore]:
        return nodes

    async def _ahandle_recursive_retrieval(
        self, query_bundle: QueryBundle, nodes: list[NodeWithScore]
    ) -> list[NodeWithScore]:
        return nodes
