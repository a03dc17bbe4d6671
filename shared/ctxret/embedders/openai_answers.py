"""Reading an OpenAI-compatible embeddings answer: every HTTP 200 checked before a vector is used.

A body that is empty, not JSON, cut short, without ``data``, with the wrong number of vectors,
missing or repeated indices, undecodable base64, ragged rows, NaN, infinite or all-zero vectors
raises :class:`BadAnswer`, which the embedder retries like a 5xx and then reports as an
``EmbeddingError`` naming the problem and the fix.
"""

from __future__ import annotations

import base64
import binascii
import email.utils
import json
import math
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import openai

__all__ = [
    "FIX_ENDPOINT",
    "BadAnswer",
    "describe_failure",
    "failure_fix",
    "decode_embedding",
    "describe_body",
    "endpoint_name",
    "read_body",
    "retry_after_seconds",
]


def retry_after_seconds(exc: BaseException) -> float | None:
    """The server's ``Retry-After`` (or ``retry-after-ms``) in seconds, if it sent one."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            seconds = float(value) / 1000.0
        else:
            value = headers.get("retry-after")
            if value is None:
                return None
            try:
                seconds = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                seconds = when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


class BadAnswer(Exception):
    """An HTTP 200 answer that holds no usable vectors; retried like a 5xx.

    ``problem`` completes "HTTP 200 with ..."; ``fix`` is what to check if it keeps happening.
    """

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.status = 200


#: What to check when answers keep coming back malformed.
FIX_ENDPOINT = "check that base_url (or OPENAI_BASE_URL) points at an OpenAI-compatible /v1 endpoint"
#: What to check when vectors keep coming back NaN, infinite or all zero.
FIX_VECTORS = (
    "the server's model produced unusable vectors (NaN, infinite or all-zero vectors are never "
    "stored); check the server and its model"
)


def endpoint_name(url: Any) -> str:
    """``scheme://host[:port]/path`` of a base URL: no user, password, query or fragment."""
    parts = urlsplit(str(url))
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port is not None else host
    if not netloc:
        return "(an unparsable base_url)"
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))


def describe_body(content: bytes, content_type: str) -> str:
    """``text/html, 1,234 bytes: '<html>...'``: what an unusable body looked like (short)."""
    kind = content_type.split(";")[0].strip() or "no content type"
    head = " ".join(content[:120].decode("utf-8", "replace").split())
    snippet = f": {head[:80]!r}" if head else ""
    return f"{kind}, {len(content):,} bytes{snippet}"


def read_body(
    content: bytes,
    content_type: str,
    where: list[int],
    *,
    redact: Callable[[str], str],
    check_dims: Callable[[int], None],
) -> np.ndarray:
    """One HTTP 200 body as ``(len(where), dims)`` float32 unit rows in request order.

    ``where`` holds the caller's input numbers (for messages). A malformed answer raises
    :class:`BadAnswer` (retried); ``check_dims`` refuses vectors of the wrong size."""
    if not content.strip():
        raise BadAnswer(f"an empty body ({describe_body(content, content_type)})")
    try:
        body = json.loads(content)
    except (ValueError, UnicodeDecodeError) as exc:
        if content.lstrip()[:1] in (b"{", b"["):
            raise BadAnswer(
                "JSON that does not parse, probably cut short "
                f"({describe_body(content, content_type)}; {redact(str(exc))[:80]})"
            ) from exc
        raise BadAnswer(f"a body that is not JSON ({describe_body(content, content_type)})") from exc
    expected = len(where)
    if not isinstance(body, dict):
        raise BadAnswer(f"a JSON {type(body).__name__} instead of an object with 'data'")
    data = body.get("data")
    if not isinstance(data, list):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            detail = f" but an error: {redact(str(error['message']))[:200]!r}"
        else:
            keys = ", ".join(sorted(map(str, body))[:8]) or "none"
            detail = f" (keys: {keys})"
        raise BadAnswer(f"a JSON object without a 'data' list of vectors{detail}")
    if len(data) != expected:
        raise BadAnswer(f"{len(data)} vector{'' if len(data) == 1 else 's'} for {expected} inputs")
    rows: list[np.ndarray | None] = [None] * expected
    for position, item in enumerate(data):
        index = item.get("index") if isinstance(item, dict) else None
        if isinstance(index, bool) or not isinstance(index, int):
            raise BadAnswer(f"a vector without an integer 'index' (data[{position}] has index {index!r})")
        if not 0 <= index < expected:
            raise BadAnswer(
                f"a vector with index {index} for a request of {expected} inputs (indices must be 0..{expected - 1})"
            )
        if rows[index] is not None:
            raise BadAnswer(f"two vectors with index {index} (each index must come once)")
        rows[index] = decode_embedding(item.get("embedding"), where[index])
    sizes = sorted({row.size for row in rows if row is not None})
    if len(sizes) > 1:
        raise BadAnswer(f"vectors of different lengths in one answer ({', '.join(map(str, sizes))} numbers)")
    vectors = np.stack([row for row in rows if row is not None])
    check_dims(vectors.shape[1])
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if bad.size:
        raise BadAnswer(
            f"NaN or infinite numbers in the vector of input {where[int(bad[0])]} "
            f"({bad.size} such vector{'s' if bad.size > 1 else ''})",
            FIX_VECTORS,
        )
    norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
    zero = np.flatnonzero(norms[:, 0] == 0)
    if zero.size:
        raise BadAnswer(
            f"an all-zero vector for input {where[int(zero[0])]} "
            f"({zero.size} such vector{'s' if zero.size > 1 else ''})",
            FIX_VECTORS,
        )
    return (vectors / norms).astype(np.float32)


def decode_embedding(embedding: Any, number: int) -> np.ndarray:
    """One ``embedding`` field (base64 of little-endian float32, or a list of numbers)."""
    if isinstance(embedding, str):
        try:
            packed = base64.b64decode(embedding, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise BadAnswer(
                f"an 'embedding' for input {number} that is not valid base64 ({len(embedding):,} characters)"
            ) from exc
        if not packed or len(packed) % 4:
            raise BadAnswer(
                f"a base64 'embedding' for input {number} of {len(packed):,} bytes, not a "
                "whole number of float32 values (4 bytes each)"
            )
        return np.frombuffer(packed, dtype="<f4").astype(np.float32)
    if isinstance(embedding, list) and embedding:
        vector = np.asarray(embedding)
        if vector.ndim == 1 and vector.dtype.kind in "iuf":
            return vector.astype(np.float32)  # a number past float32's range becomes inf
    raise BadAnswer(
        f"an 'embedding' for input {number} that is neither base64 nor a list of numbers ({type(embedding).__name__})"
    )


def describe_failure(exc: BaseException, timeout: float, redact: Callable[[str], str]) -> str:
    """One failed attempt in words (no secrets)."""
    if isinstance(exc, BadAnswer):
        return redact(f"HTTP {exc.status} with {exc.problem}")
    if isinstance(exc, openai.APITimeoutError):
        what = f"timed out after {timeout:g} s"
    elif isinstance(exc, openai.APIConnectionError):
        what = "connection error"
        cause = exc.__cause__
        if cause is not None:  # e.g. ConnectError (refused), ReadError (reset mid-body)
            what += f": {type(cause).__name__}" + (f": {cause}" if str(cause) else "")
    elif isinstance(exc, openai.APIResponseValidationError):
        what = "HTTP 200 with a body the openai client could not read"
    elif isinstance(exc, openai.APIStatusError):
        what = f"HTTP {exc.status_code}"
    else:
        what = type(exc).__name__
    detail = redact(str(getattr(exc, "message", None) or exc))
    return redact(f"{what} ({detail})" if detail else what)


def failure_fix(exc: BaseException, endpoint: str) -> str:
    """What to do when ``exc`` keeps happening."""
    if isinstance(exc, BadAnswer):
        return exc.fix or FIX_ENDPOINT
    if isinstance(exc, openai.APITimeoutError):
        return (
            f"check that the server at {endpoint} is up and not overloaded, or raise "
            "timeout= (seconds per attempt), max_retries= or total_timeout="
        )
    if isinstance(exc, openai.APIConnectionError):
        return (
            f"check that the server at {endpoint} is up and reachable and that "
            "base_url (or OPENAI_BASE_URL) is right; or raise max_retries="
        )
    if isinstance(exc, openai.APIResponseValidationError):
        return FIX_ENDPOINT
    return "try again later or raise max_retries/timeout"
