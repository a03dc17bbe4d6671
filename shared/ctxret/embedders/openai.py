"""OpenAI embeddings (``text-embedding-3-small`` by default) on the official ``openai`` client.

Requests are sized before sending (:func:`ctxret.batching.plan_batches`: at most ``max_inputs``
inputs and ``max_bytes`` UTF-8 bytes each); an input over the model's token limit is refused
before anything is sent. Retries are ours, not the client's (the clients are built with
``max_retries=0``): 429, 408, 5xx, timeouts, connection errors (refused, reset mid-body) and
malformed HTTP 200 answers (not JSON, cut short, no ``data``, wrong count or ``index``, bad
base64, NaN/infinite/all-zero vectors) are retried with exponential backoff and jitter,
honouring ``Retry-After`` (capped), at most ``max_retries`` times and within ``total_timeout``
seconds per request; any other 4xx, and vectors of an unexpected size, fail at once. Every
failure is raised as :class:`~ctxret.errors.EmbeddingError` naming the problem, the endpoint
(never with credentials) and the fix. The API key is never logged, never put in an error
message and never shown by ``repr``.

Token counting: exact with ``tiktoken`` when the model's encoding loads *offline* (from
tiktoken's cache, or the copy of ``cl100k_base`` that llama-index-core ships); otherwise the
UTF-8 byte length, an upper bound (every BPE token is at least one byte).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import email.utils
import functools
import hashlib
import importlib.util
import itertools
import json
import logging
import math
import os
import random
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import openai

from ..errors import EmbeddingError, InputError, InputTooLongError
from ..text import clean_text
from .batching import MAX_BYTES_PER_REQUEST, MAX_INPUTS_PER_REQUEST, plan_batches, utf8_len

logger = logging.getLogger(__name__)

__all__ = ["OpenAIEmbedder", "NATIVE_DIMS"]

#: Native vector size of OpenAI's embedding models.
NATIVE_DIMS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
#: Models trained for Matryoshka truncation (they accept ``dimensions``).
MATRYOSHKA_MODELS = frozenset({"text-embedding-3-small", "text-embedding-3-large"})
#: tiktoken encoding of each known model (an unknown model is counted in bytes).
MODEL_ENCODINGS = {model: "cl100k_base" for model in NATIVE_DIMS}
#: Where tiktoken fetches each encoding from (its cache file is named by the URL's sha1).
_ENCODING_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
#: Without a tokenizer, an input of more than this many UTF-8 bytes per allowed token is refused.
BYTES_PER_TOKEN_REFUSAL = 4
#: Statuses worth retrying: rate limit, request timeout, and server errors (5xx).
_RETRY_STATUSES = frozenset({408, 429})

_NO_KEY = (
    "OpenAIEmbedder needs an API key: set OPENAI_API_KEY or pass api_key=... "
    "(or inject client= / async_client=)"
)

_tiktoken_lock = threading.Lock()


def _tiktoken_dirs() -> list[Path]:
    """Directories that may hold tiktoken's cached encoding files, without touching the network."""
    dirs: list[Path] = []
    if "TIKTOKEN_CACHE_DIR" in os.environ:
        if os.environ["TIKTOKEN_CACHE_DIR"]:
            dirs.append(Path(os.environ["TIKTOKEN_CACHE_DIR"]))
    elif os.environ.get("DATA_GYM_CACHE_DIR"):
        dirs.append(Path(os.environ["DATA_GYM_CACHE_DIR"]))
    else:
        dirs.append(Path(tempfile.gettempdir()) / "data-gym-cache")
    try:  # llama-index-core (a dependency) ships cl100k_base for offline use
        spec = importlib.util.find_spec("llama_index.core")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs.append(Path(spec.origin).parent / "_static" / "tiktoken_cache")
    return dirs


@functools.lru_cache(maxsize=8)
def _offline_tiktoken(encoding_name: str) -> Any | None:
    """The tiktoken encoding if it loads without the network, else None (tried once, cached).

    tiktoken downloads a missing encoding file with no timeout, so it is only asked for an
    encoding whose file is already on disk.
    """
    url = _ENCODING_URLS.get(encoding_name)
    if url is None:
        return None
    key = hashlib.sha1(url.encode()).hexdigest()
    try:
        import tiktoken
    except ImportError:
        logger.debug("tiktoken is not installed; counting UTF-8 bytes instead of tokens")
        return None
    for directory in _tiktoken_dirs():
        if not (directory / key).is_file():
            continue
        with _tiktoken_lock:
            saved = os.environ.get("TIKTOKEN_CACHE_DIR")
            os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
            try:
                return tiktoken.get_encoding(encoding_name)
            except Exception as exc:  # noqa: BLE001 - any failure means "no offline tokenizer"
                logger.debug("tiktoken %s did not load from %s: %r", encoding_name, directory, exc)
            finally:
                if saved is None:
                    os.environ.pop("TIKTOKEN_CACHE_DIR", None)
                else:
                    os.environ["TIKTOKEN_CACHE_DIR"] = saved
    logger.debug("no offline copy of tiktoken %s; counting UTF-8 bytes instead", encoding_name)
    return None


def _retry_after_seconds(exc: BaseException) -> float | None:
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


@dataclass
class _Plan:
    """What one ``embed`` call sends: cleaned texts and requests (lists of input indices)."""

    n: int
    texts: list[str]
    #: Requests, each a list of indices into the caller's input list.
    batches: list[list[int]]


class _BadAnswer(Exception):
    """An HTTP 200 answer that holds no usable vectors; retried like a 5xx.

    ``problem`` completes "HTTP 200 with ..."; ``fix`` is what to check if it keeps happening.
    """

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix
        self.status = 200


#: What to check when answers keep coming back malformed.
_FIX_ENDPOINT = (
    "check that base_url (or OPENAI_BASE_URL) points at an OpenAI-compatible /v1 endpoint"
)
#: What to check when vectors keep coming back NaN, infinite or all zero.
_FIX_VECTORS = (
    "the server's model produced unusable vectors (NaN, infinite or all-zero vectors are never "
    "stored); check the server and its model"
)


def _endpoint_name(url: Any) -> str:
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


def _describe_body(content: bytes, content_type: str) -> str:
    """``text/html, 1,234 bytes: '<html>...'``: what an unusable body looked like (short)."""
    kind = content_type.split(";")[0].strip() or "no content type"
    head = " ".join(content[:120].decode("utf-8", "replace").split())
    snippet = f": {head[:80]!r}" if head else ""
    return f"{kind}, {len(content):,} bytes{snippet}"


class OpenAIEmbedder:
    """OpenAI (or an OpenAI-compatible server) as an :class:`~ctxret.embedders.base.Embedder`.

    Args:
        model: embedding model name.
        dimensions: sent as ``dimensions`` when set (Matryoshka truncation server-side); the
            vectors have this many numbers. ``None``: the model's native size (1536 for
            ``text-embedding-3-small`` and ``-ada-002``, 3072 for ``-3-large``; for another
            model it is learnt from the first response, probing once if needed).
        api_key: falls back to ``OPENAI_API_KEY``. Never logged or shown.
        base_url: an OpenAI-compatible server (``None``: ``OPENAI_BASE_URL``, else OpenAI).
        timeout: seconds one attempt may take (connect, send, wait and read).
        max_retries: retries after the first attempt for 429/408/5xx, timeouts, connection
            errors and malformed HTTP 200 answers.
        total_timeout: seconds one request may take in all, its attempts and the waits between
            them included (``None``: no cap beyond ``timeout`` and ``max_retries``). An attempt
            never runs past it, and no retry is started that could not finish before it.
        max_concurrency: requests :meth:`aembed` keeps in flight at once.
        max_inputs, max_bytes: per-request limits (inputs, UTF-8 bytes), enforced before sending.
        max_tokens: per-input token limit; a longer input is refused before sending.
        client, async_client: inject ``openai.OpenAI`` / ``openai.AsyncOpenAI`` instances (their
            own retries are switched off with ``with_options(max_retries=0)``).
        retry_base_delay: first backoff delay in seconds (doubling per retry, with jitter).
        retry_max_delay: cap on one backoff delay.
        max_retry_after: cap on a server's ``Retry-After``.

    Empty or whitespace-only texts are not sent (the API rejects ``""``): their rows are zero.

    Every answer is checked before any vector is used: an HTTP 200 whose body is not JSON, is
    cut short, has no ``data``, the wrong number of vectors, a missing or repeated ``index``,
    base64 that does not decode to float32 numbers, vectors of different lengths, or a vector
    that is NaN, infinite or all zero is retried like a 5xx, then raised as
    :class:`EmbeddingError` naming what was wrong. Vectors of another size than expected (the
    ``dimensions`` asked for, the model's native size, or what the first answer had) are refused
    at once, without retrying: that is a configuration mismatch, and the error names both sizes
    and the fix. So a failed call returns nothing and a caller (the index) writes nothing.

    Token limit: with an offline tiktoken encoding an input is refused when it has more than
    ``max_tokens`` tokens. Without one, counts are UTF-8 byte lengths (an upper bound), and an
    input is refused only when its byte length is over ``4 * max_tokens`` -- English runs ~4
    bytes per token, so such an input is nearly always over the limit (text with long
    repeated-character tokens can be an exception) -- and a warning is logged for one between
    ``max_tokens`` and ``4 * max_tokens`` bytes (the server may still reject it: that is a 400,
    raised as :class:`EmbeddingError`).
    """

    #: The piece byte budget that fits this model.
    default_piece_bytes: int = 1200
    #: Seed cosine floor for OpenAI vectors (seed: 0.35 at 1,024 dims); calibrate on your data.
    default_score_threshold: float = 0.35

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        *,
        dimensions: int | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 5,
        total_timeout: float | None = 300.0,
        max_concurrency: int = 4,
        max_inputs: int = MAX_INPUTS_PER_REQUEST,
        max_bytes: int = MAX_BYTES_PER_REQUEST,
        max_tokens: int = 8191,
        client: Any | None = None,
        async_client: Any | None = None,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 30.0,
        max_retry_after: float = 60.0,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise InputError(f"model must be a non-empty model name, got {model!r}")
        native = NATIVE_DIMS.get(model)
        if dimensions is not None:
            if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
                raise InputError(
                    f"dimensions must be a positive integer or None, got {dimensions!r}"
                )
            if native is not None and model not in MATRYOSHKA_MODELS:
                raise InputError(
                    f"{model} does not support dimensions; use text-embedding-3-small or "
                    "text-embedding-3-large, or leave dimensions=None"
                )
            if native is not None and dimensions > native:
                raise InputError(
                    f"{model} has {native} dimensions; dimensions={dimensions} is over it"
                )
        for name, value in (
            ("max_inputs", max_inputs),
            ("max_bytes", max_bytes),
            ("max_tokens", max_tokens),
            ("max_concurrency", max_concurrency),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise InputError(f"max_retries must be a non-negative integer, got {max_retries!r}")
        for name, seconds in (("timeout", timeout), ("total_timeout", total_timeout)):
            if name == "total_timeout" and seconds is None:
                continue
            if (
                isinstance(seconds, bool)
                or not isinstance(seconds, (int, float))
                or not math.isfinite(seconds)
                or seconds <= 0
            ):
                raise InputError(
                    f"{name} must be a positive number of seconds, got {seconds!r}"
                    + ("; pass None for no overall cap" if name == "total_timeout" else "")
                )
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key and client is None and async_client is None:
            raise InputError(_NO_KEY)
        self.model = model
        self.dimensions = dimensions
        self.base_url = base_url
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.total_timeout = None if total_timeout is None else float(total_timeout)
        self.max_concurrency = max_concurrency
        self.max_inputs = max_inputs
        self.max_bytes = max_bytes
        self.max_tokens = max_tokens
        self.retry_base_delay = float(retry_base_delay)
        self.retry_max_delay = float(retry_max_delay)
        self.max_retry_after = float(max_retry_after)
        self._api_key = key or None
        self._dims: int | None = dimensions if dimensions is not None else native
        #: Why ``_dims`` is what it is (for the dimension-mismatch error).
        self._dims_source = (
            f"dimensions={dimensions} was asked for"
            if dimensions is not None
            else f"{model}'s native size"
            if native is not None
            else ""
        )
        self._client = self._without_retries(client)
        self._async_client = self._without_retries(async_client)
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        base = f", base_url={_endpoint_name(self.base_url)!r}" if self.base_url else ""
        return f"OpenAIEmbedder(model={self.model!r}, dims={self._dims}{base})"

    # -- identity ------------------------------------------------------------------------------

    @property
    def dims(self) -> int:
        """Numbers per vector (for an unknown model without ``dimensions``: probed once)."""
        if self._dims is None:
            self._call_sync(["dimension probe"], [0])
        assert self._dims is not None  # set by the first answer
        return self._dims

    @property
    def model_id(self) -> str:
        """``openai:{model}@{dims}``, recorded in the index config."""
        return f"openai:{self.model}@{self.dims}"

    @property
    def endpoint(self) -> str:
        """The embeddings server's base URL as errors name it (never with a user or password)."""
        for client in (self._client, self._async_client):
            url = getattr(client, "base_url", None)
            if url is not None:
                return _endpoint_name(url)
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return _endpoint_name(url)

    # -- clients -------------------------------------------------------------------------------

    @staticmethod
    def _without_retries(client: Any | None) -> Any | None:
        if client is None:
            return None
        with_options = getattr(client, "with_options", None)
        return with_options(max_retries=0) if callable(with_options) else client

    def _sync_client(self) -> Any:
        with self._client_lock:
            if self._client is None:
                if not self._api_key:
                    raise InputError(_NO_KEY)
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    timeout=self.timeout,
                    max_retries=0,
                )
            return self._client

    def _async_client_(self) -> Any:
        with self._client_lock:
            if self._async_client is None:
                if not self._api_key:
                    raise InputError(_NO_KEY)
                self._async_client = openai.AsyncOpenAI(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    timeout=self.timeout,
                    max_retries=0,
                )
            return self._async_client

    def _request(self, inputs: list[str], timeout: float) -> dict[str, Any]:
        # base64 is what the client asks for by default; asked for explicitly, the client hands
        # the body over as it came, and _read checks and decodes it.
        request: dict[str, Any] = {
            "model": self.model,
            "input": inputs,
            "encoding_format": "base64",
            "timeout": timeout,
        }
        if self.dimensions is not None:
            request["dimensions"] = self.dimensions
        return request

    def _attempt_sync(self, inputs: list[str], where: list[int], timeout: float) -> np.ndarray:
        raw = self._sync_client().embeddings.with_raw_response.create(
            **self._request(inputs, timeout)
        )
        return self._read(raw, where)

    async def _attempt_async(
        self, inputs: list[str], where: list[int], timeout: float
    ) -> np.ndarray:
        raw = await self._async_client_().embeddings.with_raw_response.create(
            **self._request(inputs, timeout)
        )
        return self._read(raw, where)

    # -- tokens --------------------------------------------------------------------------------

    @property
    def _encoding(self) -> Any | None:
        name = MODEL_ENCODINGS.get(self.model)
        return _offline_tiktoken(name) if name else None

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text: exact with an offline tiktoken encoding, else UTF-8 bytes (a bound)."""
        cleaned = self._clean_all(texts)
        encoding = self._encoding
        if encoding is None:
            return [utf8_len(t) for t in cleaned]
        return [len(ids) for ids in encoding.encode_ordinary_batch(cleaned)]

    # -- planning and assembling (shared by embed and aembed) ----------------------------------

    @staticmethod
    def _clean_all(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise InputError("expected a list of texts, got a single str; wrap it: embed([text])")
        return [clean_text(t) for t in texts]

    def _plan(self, texts: Sequence[str]) -> _Plan:
        cleaned = self._clean_all(texts)
        sent = [i for i, t in enumerate(cleaned) if t.strip()]
        sent_texts = [cleaned[i] for i in sent]
        encoding = self._encoding
        if encoding is not None:
            counts = [len(ids) for ids in encoding.encode_ordinary_batch(sent_texts)]
            for i, count in zip(sent, counts, strict=True):
                if count > self.max_tokens:
                    raise InputTooLongError(
                        f"input {i} is {count:,} tokens, over {self.model}'s limit of "
                        f"{self.max_tokens:,}; nothing was sent. Split it into smaller pieces "
                        "(pack_text_pieces) before embedding"
                    )
        else:
            hard = BYTES_PER_TOKEN_REFUSAL * self.max_tokens
            doubtful = []
            for i, text in zip(sent, sent_texts, strict=True):
                size = utf8_len(text)
                if size > hard:
                    raise InputTooLongError(
                        f"input {i} is {size:,} UTF-8 bytes, over {hard:,} bytes "
                        f"({BYTES_PER_TOKEN_REFUSAL} x {self.model}'s limit of {self.max_tokens:,} "
                        "tokens; no offline tokenizer to count exactly), so it is almost surely "
                        "too long; nothing was sent. Split it into pieces (pack_text_pieces)"
                    )
                if size > self.max_tokens:
                    doubtful.append(i)
            if doubtful:
                logger.warning(
                    "%d input(s) (first: input %d) are over %d UTF-8 bytes and may be over "
                    "%s's %d-token limit; no offline tokenizer to check (the server may refuse it)",
                    len(doubtful),
                    doubtful[0],
                    self.max_tokens,
                    self.model,
                    self.max_tokens,
                )
        for i, text in zip(sent, sent_texts, strict=True):
            size = utf8_len(text)
            if size > self.max_bytes:
                raise InputTooLongError(
                    f"input {i} is {size:,} UTF-8 bytes, over the {self.max_bytes:,}-byte request "
                    "limit; nothing was sent. Split it into pieces (pack_text_pieces)"
                )
        local = plan_batches(sent_texts, self.max_inputs, self.max_bytes)
        return _Plan(n=len(cleaned), texts=cleaned, batches=[[sent[j] for j in b] for b in local])

    def _read(self, raw: Any, where: list[int]) -> np.ndarray:
        """One HTTP 200 answer as ``(len(where), dims)`` float32 unit rows in request order.

        ``where`` holds the caller's input numbers (for messages). A malformed answer raises
        :class:`_BadAnswer` (retried); vectors of the wrong size raise :class:`EmbeddingError`.
        """
        try:
            return self._read_body(raw.content, str(raw.headers.get("content-type") or ""), where)
        except _BadAnswer as exc:
            status = getattr(raw, "status_code", 200)
            exc.status = status if isinstance(status, int) else 200
            raise

    def _read_body(self, content: bytes, content_type: str, where: list[int]) -> np.ndarray:
        """:meth:`_read` on the body's bytes and content type."""
        if not content.strip():
            raise _BadAnswer(f"an empty body ({_describe_body(content, content_type)})")
        try:
            body = json.loads(content)
        except (ValueError, UnicodeDecodeError) as exc:
            if content.lstrip()[:1] in (b"{", b"["):
                raise _BadAnswer(
                    "JSON that does not parse, probably cut short "
                    f"({_describe_body(content, content_type)}; {self._redact(str(exc))[:80]})"
                ) from exc
            raise _BadAnswer(
                f"a body that is not JSON ({_describe_body(content, content_type)})"
            ) from exc
        expected = len(where)
        if not isinstance(body, dict):
            raise _BadAnswer(f"a JSON {type(body).__name__} instead of an object with 'data'")
        data = body.get("data")
        if not isinstance(data, list):
            error = body.get("error")
            if isinstance(error, dict) and error.get("message"):
                detail = f" but an error: {self._redact(str(error['message']))[:200]!r}"
            else:
                keys = ", ".join(sorted(map(str, body))[:8]) or "none"
                detail = f" (keys: {keys})"
            raise _BadAnswer(f"a JSON object without a 'data' list of vectors{detail}")
        if len(data) != expected:
            raise _BadAnswer(
                f"{len(data)} vector{'' if len(data) == 1 else 's'} for {expected} inputs"
            )
        rows: list[np.ndarray | None] = [None] * expected
        for position, item in enumerate(data):
            index = item.get("index") if isinstance(item, dict) else None
            if isinstance(index, bool) or not isinstance(index, int):
                raise _BadAnswer(
                    f"a vector without an integer 'index' (data[{position}] has index {index!r})"
                )
            if not 0 <= index < expected:
                raise _BadAnswer(
                    f"a vector with index {index} for a request of {expected} inputs "
                    f"(indices must be 0..{expected - 1})"
                )
            if rows[index] is not None:
                raise _BadAnswer(f"two vectors with index {index} (each index must come once)")
            rows[index] = self._decode(item.get("embedding"), where[index])
        sizes = sorted({row.size for row in rows if row is not None})
        if len(sizes) > 1:
            raise _BadAnswer(
                f"vectors of different lengths in one answer ({', '.join(map(str, sizes))} numbers)"
            )
        vectors = np.stack([row for row in rows if row is not None])
        self._check_dims(vectors.shape[1])
        bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
        if bad.size:
            raise _BadAnswer(
                f"NaN or infinite numbers in the vector of input {where[int(bad[0])]} "
                f"({bad.size} such vector{'s' if bad.size > 1 else ''})",
                _FIX_VECTORS,
            )
        norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
        zero = np.flatnonzero(norms[:, 0] == 0)
        if zero.size:
            raise _BadAnswer(
                f"an all-zero vector for input {where[int(zero[0])]} "
                f"({zero.size} such vector{'s' if zero.size > 1 else ''})",
                _FIX_VECTORS,
            )
        return (vectors / norms).astype(np.float32)

    @staticmethod
    def _decode(embedding: Any, number: int) -> np.ndarray:
        """One ``embedding`` field (base64 of little-endian float32, or a list of numbers)."""
        if isinstance(embedding, str):
            try:
                packed = base64.b64decode(embedding, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise _BadAnswer(
                    f"an 'embedding' for input {number} that is not valid base64 "
                    f"({len(embedding):,} characters)"
                ) from exc
            if not packed or len(packed) % 4:
                raise _BadAnswer(
                    f"a base64 'embedding' for input {number} of {len(packed):,} bytes, not a "
                    "whole number of float32 values (4 bytes each)"
                )
            return np.frombuffer(packed, dtype="<f4").astype(np.float32)
        if isinstance(embedding, list) and embedding:
            vector = np.asarray(embedding)
            if vector.ndim == 1 and vector.dtype.kind in "iuf":
                return vector.astype(np.float32)  # a number past float32's range becomes inf
        raise _BadAnswer(
            f"an 'embedding' for input {number} that is neither base64 nor a list of numbers "
            f"({type(embedding).__name__})"
        )

    def _check_dims(self, got: int) -> None:
        """Learn the vector size from the first answer, or refuse another one (no retry)."""
        with self._client_lock:
            if self._dims is None:
                self._dims = got
                self._dims_source = "the first answer had that size"
                logger.info("%s returns %d-dimensional vectors", self.model, got)
                return
            expected, source = self._dims, self._dims_source
        if got == expected:
            return
        if self.dimensions is not None:
            fix = (
                f"The server may not honour dimensions: pass dimensions={got} to use its vectors "
                f"(an index built with {expected}-dimensional vectors must then be rebuilt), or "
                f"use a server and model that honour dimensions={expected}"
            )
        else:
            fix = (
                f"Pass dimensions={got} if this is the model you meant (an index built with "
                f"{expected}-dimensional vectors must then be rebuilt), or point base_url at "
                "the model the index was built with"
            )
        raise EmbeddingError(
            f"{self.model} at {self.endpoint} returned {got}-dimensional vectors but this "
            f"embedder expects {expected} ({source}); nothing was returned. {fix}"
        )

    def _finish(self, plan: _Plan, parts: list[np.ndarray]) -> np.ndarray:
        """The caller's ``(n, dims)`` array: each request's checked rows in their places."""
        out = np.zeros((plan.n, self.dims), dtype=np.float32)
        for batch, vectors in zip(plan.batches, parts, strict=True):
            out[batch] = vectors
        return out

    # -- retries (shared) ----------------------------------------------------------------------

    def _redact(self, message: str) -> str:
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return message[:500]

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, _BadAnswer):
            return self._redact(f"HTTP {exc.status} with {exc.problem}")
        if isinstance(exc, openai.APITimeoutError):
            what = f"timed out after {self.timeout:g} s"
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
        detail = self._redact(str(getattr(exc, "message", None) or exc))
        return self._redact(f"{what} ({detail})" if detail else what)

    def _fix(self, exc: BaseException) -> str:
        """What to do when ``exc`` keeps happening."""
        if isinstance(exc, _BadAnswer):
            return exc.fix or _FIX_ENDPOINT
        if isinstance(exc, openai.APITimeoutError):
            return (
                f"check that the server at {self.endpoint} is up and not overloaded, or raise "
                "timeout= (seconds per attempt), max_retries= or total_timeout="
            )
        if isinstance(exc, openai.APIConnectionError):
            return (
                f"check that the server at {self.endpoint} is up and reachable and that "
                "base_url (or OPENAI_BASE_URL) is right; or raise max_retries="
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return _FIX_ENDPOINT
        return "try again later or raise max_retries/timeout"

    def _deadline(self) -> float | None:
        return None if self.total_timeout is None else time.monotonic() + self.total_timeout

    def _attempt_timeout(self, deadline: float | None) -> float:
        if deadline is None:
            return self.timeout
        return max(0.001, min(self.timeout, deadline - time.monotonic()))

    def _retry_delay(self, exc: BaseException, attempt: int, deadline: float | None) -> float:
        """Seconds to wait before retrying after ``exc`` on attempt ``attempt`` (0-based).

        Raises :class:`EmbeddingError` (from ``exc``) when it is permanent, retries are spent,
        or the wait would run past ``deadline`` (``total_timeout``).
        """
        status = getattr(exc, "status_code", None)
        transient = (
            isinstance(exc, (_BadAnswer, openai.APIConnectionError))
            or isinstance(exc, openai.APIResponseValidationError)
            or (isinstance(status, int) and (status in _RETRY_STATUSES or status >= 500))
        )
        where = f" at {self.endpoint}"
        if not transient:
            hint = {
                401: "; check the API key (OPENAI_API_KEY or api_key=)",
                403: "; the key has no access to this model or project",
                404: "; check the model name and base_url",
            }.get(status if isinstance(status, int) else -1, "")
            raise EmbeddingError(
                f"embedding request to {self.model}{where} failed permanently: "
                f"{self._describe(exc)}{hint}"
            ) from exc
        attempts = f"{attempt + 1} attempt{'s' if attempt else ''}"
        if attempt >= self.max_retries:
            raise EmbeddingError(
                f"embedding request to {self.model}{where} failed after {attempts} "
                f"({self.max_retries} retries): last error {self._describe(exc)}; "
                f"{self._fix(exc)}"
            ) from exc
        retry_after = _retry_after_seconds(exc)
        if retry_after is not None:
            delay = min(retry_after, self.max_retry_after)
        else:
            backoff = min(self.retry_max_delay, self.retry_base_delay * (2.0**attempt))
            delay = backoff * (0.5 + 0.5 * random.random())
        if deadline is not None and time.monotonic() + delay >= deadline:
            raise EmbeddingError(
                f"embedding request to {self.model}{where} failed after {attempts} in "
                f"total_timeout={self.total_timeout:g} s: last error {self._describe(exc)}; "
                f"{self._fix(exc)}"
            ) from exc
        logger.warning(
            "embedding request to %s%s failed (%s); retry %d of %d in %.2f s",
            self.model,
            where,
            self._describe(exc),
            attempt + 1,
            self.max_retries,
            delay,
        )
        return delay

    def _call_sync(self, inputs: list[str], where: list[int]) -> np.ndarray:
        deadline = self._deadline()
        for attempt in itertools.count():
            try:
                return self._attempt_sync(inputs, where, self._attempt_timeout(deadline))
            except (openai.OpenAIError, _BadAnswer) as exc:
                delay = self._retry_delay(exc, attempt, deadline)
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_async(self, inputs: list[str], where: list[int]) -> np.ndarray:
        deadline = self._deadline()
        for attempt in itertools.count():
            try:
                return await self._attempt_async(inputs, where, self._attempt_timeout(deadline))
            except (openai.OpenAIError, _BadAnswer) as exc:
                delay = self._retry_delay(exc, attempt, deadline)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the Embedder protocol -----------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, dims)`` float32 unit rows in input order; empty/whitespace texts give zero rows.

        Raises :class:`EmbeddingError` when a request fails for good (nothing is returned).
        """
        plan = self._plan(texts)
        parts = [self._call_sync([plan.texts[i] for i in batch], batch) for batch in plan.batches]
        return self._finish(plan, parts)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed` on the async client, up to ``max_concurrency`` requests at once.

        Rows come back in input order whatever order the answers arrive in; the first request
        that fails for good cancels the others and its :class:`EmbeddingError` is raised.
        """
        plan = self._plan(texts)
        gate = asyncio.Semaphore(self.max_concurrency)

        async def send(batch: list[int]) -> np.ndarray:
            async with gate:
                return await self._call_async([plan.texts[i] for i in batch], batch)

        tasks = [asyncio.ensure_future(send(batch)) for batch in plan.batches]
        try:
            parts = list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        if self._dims is None:
            await self._call_async(["dimension probe"], [0])
        return self._finish(plan, parts)
