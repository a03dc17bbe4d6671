"""A small deterministic embedder for plumbing tests: a word-hash bag of words, unit rows, no model to load."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import numpy as np


class HashEmbedder:
    """Each word adds 1 to a dimension picked by its hash; rows are unit length (zero for no words)."""

    model_id = "test-hash-64"
    dims = 64
    max_tokens = 100_000
    default_piece_bytes = 400
    default_score_threshold = 0.0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % self.dims] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.encode("utf-8", "surrogatepass")) for t in texts]
