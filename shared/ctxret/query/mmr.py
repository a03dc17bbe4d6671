"""Maximal marginal relevance inside one group: diverse hits for one query part.

``mmr_order`` picks, one at a time, the candidate that maximises
``lambda_mult · sim(part, hit) − (1 − lambda_mult) · max sim(hit, already picked)`` (Carbonell &
Goldstein; LangChain's ``maximal_marginal_relevance``), where ``sim(part, hit)`` is the hit's
cosine to the blended part vector and ``sim(hit, picked)`` the cosine between stored vectors.
``lambda_mult=1`` is the plain ranking by cosine, ``0`` the most diverse. It runs on each part's
candidates on its own (groups are never mixed) — the top ``fetch_k`` that pass the floor.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

__all__ = ["MMRSettings", "mmr_order"]

DEFAULT_FETCH_K = 20
DEFAULT_LAMBDA_MULT = 0.5


@dataclass(frozen=True)
class MMRSettings:
    """``fetch_k`` candidates per part go in, ``lambda_mult`` trades relevance (1) for diversity (0)."""

    fetch_k: int = DEFAULT_FETCH_K
    lambda_mult: float = DEFAULT_LAMBDA_MULT

    def __post_init__(self) -> None:
        check_fetch_k(self.fetch_k)
        object.__setattr__(self, "lambda_mult", check_lambda_mult(self.lambda_mult))


def check_fetch_k(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value < 2**31:
        raise InputError(
            f"fetch_k (MMR candidates per part) must be a positive integer (at most 2,147,483,647), got {value!r}"
        )
    return int(value)


def check_lambda_mult(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not (0.0 <= float(value) <= 1.0)
        or math.isnan(float(value))
    ):
        raise InputError(f"lambda_mult must be between 0 (most diverse) and 1 (most relevant), got {value!r}")
    return float(value)


def mmr_order(
    query_sims: Sequence[float], vectors: np.ndarray, k: int, lambda_mult: float = DEFAULT_LAMBDA_MULT
) -> list[int]:
    """Indices of at most ``k`` candidates in MMR order.

    ``query_sims[i]`` is candidate ``i``'s similarity to the query part, ``vectors[i]`` its stored
    vector (any length; normalised here). Ties go to the earlier candidate.
    """
    n = len(query_sims)
    if n == 0 or k < 1:
        return []
    q = np.asarray(query_sims, dtype=np.float64)
    v = np.asarray(vectors, dtype=np.float64).reshape(n, -1)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    v = v / np.where(norms > 0, norms, 1.0)
    sims = v @ v.T
    picked = [int(np.argmax(q))]
    best_to_picked = sims[picked[0]].copy()
    while len(picked) < min(k, n):
        score = lambda_mult * q - (1.0 - lambda_mult) * best_to_picked
        score[picked] = -np.inf
        nxt = int(np.argmax(score))
        picked.append(nxt)
        best_to_picked = np.maximum(best_to_picked, sims[nxt])
    return picked
