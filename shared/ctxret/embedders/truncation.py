"""Texts cut to an embedder's input limit, for the framework ``Embeddings`` wrappers used by other stores.

ctxret's own write path never cuts a text (pieces are packed to fit, :mod:`.fitting`). A LangChain or LlamaIndex
user who hands ``CtxretEmbeddings`` the chunks of another splitter (``RecursiveCharacterTextSplitter(chunk_size=1000)``
makes chunks of 200-300 tokens) expects what sentence-transformers and Chroma's own MiniLM do: the start of an
over-long text is embedded and a warning says so. :func:`truncate_to_fit` is that step; ``strict=True`` on the
wrappers skips it, so the embedder refuses such a text with its own error instead.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .base import Embedder, embedder_name

logger = logging.getLogger(__name__)

__all__ = ["truncate_to_fit"]


def truncate_to_fit(embedder: Embedder, texts: Sequence[str]) -> list[str]:
    """``texts`` with each one over ``embedder.max_tokens`` cut to its longest start that fits (found by bisection on
    the embedder's own ``count_tokens``, so it holds for any embedder); one warning names how many were cut.

    The cut is by characters: the start is kept whole, the end is not embedded (as a model that truncates its tokens
    does). Texts that fit are returned as they are."""
    out = list(texts)
    if not out:
        return out
    limit = int(embedder.max_tokens)
    counts = embedder.count_tokens(out)
    over = [i for i, n in enumerate(counts) if n > limit]
    if not over:
        return out
    lo = {i: 0 for i in over}  # the longest start known to fit (the empty text always does)
    hi = {i: len(out[i]) - 1 for i in over}  # the longest start that may
    while any(lo[i] < hi[i] for i in over):
        probe = [i for i in over if lo[i] < hi[i]]
        mids = {i: (lo[i] + hi[i] + 1) // 2 for i in probe}
        fits = embedder.count_tokens([out[i][: mids[i]] for i in probe])
        for i, n in zip(probe, fits, strict=True):
            if n <= limit:
                lo[i] = mids[i]
            else:
                hi[i] = mids[i] - 1
    first = over[0]
    logger.warning(
        "%d of %d input(s) are over %s's limit of %d tokens (the first: input %d, %d tokens) and were cut to fit: "
        "their ends are not embedded (pass strict=True to refuse them instead)",
        len(over),
        len(out),
        embedder_name(embedder),
        limit,
        first,
        counts[first],
    )
    for i in over:
        out[i] = out[i][: lo[i]]
    return out
