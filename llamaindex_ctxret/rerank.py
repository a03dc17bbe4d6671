"""A LlamaIndex node postprocessor (a reranker) as the core's per-group ``rerank`` callable.

``postprocessor_reranker(postprocessor)`` returns ``rerank(part, hits) -> scores`` for
``SearchSettings(rerank=...)``: each group's candidates go to
``postprocessor.postprocess_nodes(nodes, query_bundle=QueryBundle(part))`` as ``NodeWithScore`` s
(the piece node, ``score`` = its relevance in [0, 1]). A returned node's ``score`` is its rerank
score (``SentenceTransformerRerank``, ``LLMRerank``, Cohere, … set it; filters such as
``SimilarityPostprocessor`` keep the relevance); a node returned without a score is scored by its
position (``1 / (1 + position)``). Nodes it leaves out are dropped from the group (so a
reranker's ``top_n`` caps the group: keep it at least ``similarity_top_k``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ctxret import Hit, InputError
from ctxret.adapters import candidate_metadata
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from .node_parser import piece_node

__all__ = ["as_reranker", "postprocessor_reranker"]


def hit_node(hit: Hit, part: str) -> NodeWithScore:
    """What a postprocessor sees for one candidate."""
    meta = candidate_metadata(hit, part)
    score = hit.relevance if hit.relevance is not None else float(hit.score)
    return NodeWithScore(node=piece_node(hit.id, hit.text, meta), score=score)


def postprocessor_reranker(postprocessor: BaseNodePostprocessor) -> Callable[[str, Sequence[Hit]], list[float | None]]:
    """The core's ``rerank`` callable running ``postprocessor`` on each group (see the module docstring)."""
    if not isinstance(postprocessor, BaseNodePostprocessor):
        raise InputError(f"expected a LlamaIndex BaseNodePostprocessor, got {type(postprocessor).__name__}")

    def rerank(part: str, hits: Sequence[Hit]) -> list[float | None]:
        nodes = [hit_node(h, part) for h in hits]
        position = {n.node.node_id: i for i, n in enumerate(nodes)}
        out = postprocessor.postprocess_nodes(nodes, query_bundle=QueryBundle(part))
        scores: list[float | None] = [None] * len(hits)
        for rank, n in enumerate(out):
            i = position.get(n.node.node_id)
            if i is None or scores[i] is not None:
                continue  # a node it made up, or a repeat
            s = n.score
            if s is not None and not isinstance(s, bool) and math.isfinite(float(s)):
                scores[i] = float(s)
            else:
                scores[i] = 1.0 / (1.0 + rank)
        return scores

    rerank.__name__ = f"rerank_{type(postprocessor).__name__}"
    return rerank


def as_reranker(value: Any) -> Any:
    """A postprocessor as the core's callable; a callable (or ``None``) as it is."""
    if value is None:
        return None
    if isinstance(value, BaseNodePostprocessor):
        return postprocessor_reranker(value)
    if callable(value):
        return value
    raise InputError(
        "rerank must be a LlamaIndex BaseNodePostprocessor or a callable (part, hits) -> scores, "
        f"got {type(value).__name__}"
    )
