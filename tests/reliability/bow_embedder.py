"""A small deterministic embedder for the reliability tests' plumbing (no model): words hashed into buckets."""

from __future__ import annotations

import numpy as np


class SmallEmbedder:
    """A deterministic bag-of-words embedder (plumbing only); ``dims`` and the model id vary."""

    def __init__(self, dims: int = 16) -> None:
        self.dims = dims
        self.model_id = f"small-bow-{dims}"
        self.max_tokens = 512
        self.default_piece_bytes = 600
        self.default_score_threshold = 0.0

    def count_tokens(self, texts):
        return [len(t.split()) for t in texts]

    def embed(self, texts):
        out = np.zeros((len(texts), self.dims), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(word.encode("utf-8", "replace")) % self.dims] += 1.0
            out[i, 0] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    async def aembed(self, texts):
        return self.embed(texts)
