"""The blend: a vector mixed with its context's vector, both unit-normalised first.

``blend_with_context(own, context, w) = unit(w * unit(own) + (1 - w) * unit(context))`` — the same
function builds stored vectors (a piece + its turn) and query vectors (a part + the whole message).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import InputError

#: Weight of a piece's (or a part's) own embedding in the blend (the rest is its context's).
OWN_WEIGHT = 0.8

ArrayLike = np.ndarray | Sequence[float] | Sequence[Sequence[float]]


def _as_array(v: ArrayLike, name: str) -> np.ndarray:
    try:
        arr = np.asarray(v)
    except (ValueError, TypeError) as exc:  # ragged rows: vectors of different lengths
        raise InputError(
            f"{name} is not a vector or a 2-D array of equal-length vectors ({exc}); "
            "all vectors must come from the same embedding model at the same dimensions"
        ) from None
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise InputError(f"{name} must be a numeric vector or 2-D array, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise InputError(f"{name} must be 1-D (one vector) or 2-D (one vector per row), got shape {arr.shape}")
    if arr.shape[-1] == 0:
        raise InputError(f"{name} has zero dimensions")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise InputError(
            f"{name} contains NaN or infinite values; the embedder returned a broken vector. "
            "Re-embed the text or check the embedding backend."
        )
    return arr


def unit(v: ArrayLike) -> np.ndarray:
    """Scale a vector (or each row of a 2-D array) to length one. A zero vector stays zero."""
    arr = _as_array(v, "vector")
    # Divide by the largest magnitude first so squaring can neither overflow (float32 above ~1e19
    # would give an infinite norm and a zero vector) nor underflow (tiny values would give norm 0).
    scale = np.max(np.abs(arr), axis=-1, keepdims=True)
    scaled = arr / np.where(scale > 0, scale, 1)
    norm = np.linalg.norm(scaled, axis=-1, keepdims=True)
    safe = np.where(norm > 0, norm, 1)
    return (scaled / safe).astype(arr.dtype, copy=False)


def blend_with_context(own: ArrayLike, context: ArrayLike, weight: float = OWN_WEIGHT) -> np.ndarray:
    """Blend ``own`` (a piece's or a part's vector) with its ``context`` (its turn's, or the whole
    message's): ``unit(w*unit(own) + (1-w)*unit(context))``.

    Works on one vector, or row-wise on 2-D arrays: ``own`` of shape ``(n, d)`` with ``context``
    of shape ``(d,)`` (one context for all rows) or ``(n, d)`` (one context per row).
    """
    if not (0.0 <= float(weight) <= 1.0) or weight != weight:
        raise InputError(f"blend weight must be between 0 and 1, got {weight!r}")
    a = _as_array(own, "own vector")
    b = _as_array(context, "context vector")
    if a.shape[-1] != b.shape[-1]:
        raise InputError(
            f"dimension mismatch: the own vector has {a.shape[-1]} numbers, the context {b.shape[-1]}; "
            "both must come from the same embedding model at the same dimensions"
        )
    if b.ndim == 2 and a.ndim == 2 and a.shape[0] != b.shape[0]:
        raise InputError(f"row mismatch: {a.shape[0]} own vectors but {b.shape[0]} context vectors")
    if b.ndim == 2 and a.ndim == 1:
        raise InputError("the context is 2-D but the own vector is 1-D; pass one context vector per row")
    dtype = np.result_type(a.dtype, b.dtype)
    mixed = weight * unit(a).astype(np.float64) + (1.0 - weight) * unit(b).astype(np.float64)
    return unit(mixed).astype(dtype, copy=False)


def mean_vector(vectors: ArrayLike) -> np.ndarray:
    """The unit mean of unit vectors: the default context vector of a turn."""
    arr = _as_array(vectors, "vectors")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.shape[0] == 0:
        raise InputError("mean_vector needs at least one vector")
    return unit(unit(arr).astype(np.float64).mean(axis=0)).astype(arr.dtype, copy=False)


def truncate_dims(v: ArrayLike, dims: int) -> np.ndarray:
    """Keep the first ``dims`` numbers and renormalise (Matryoshka truncation, like OpenAI's ``dimensions``)."""
    arr = _as_array(v, "vector")
    if not isinstance(dims, (int, np.integer)) or dims < 1:
        raise InputError(f"dims must be a positive integer, got {dims!r}")
    if dims > arr.shape[-1]:
        raise InputError(f"cannot truncate a {arr.shape[-1]}-dimensional vector to {dims} dimensions")
    return unit(arr[..., :dims])
