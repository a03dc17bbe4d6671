"""OpenAI embeddings (``text-embedding-3-small`` by default) on the official ``openai`` client.

Requests are sized before sending (:func:`ctxret.batching.plan_batches`: at most ``max_inputs``
inputs and ``max_bytes`` UTF-8 bytes each); an input over the model's token limit is refused
before anything is sent. Retries are ours, not the client's (the clients are built with
``max_retries=0``): 429, 408, 5xx, timeouts and connection errors are retried with exponential
backoff and jitter, honouring ``Retry-After`` (capped); any other 4xx fails at once. The API key
is never logged, never put in an error message and never shown by ``repr``.

Token counting: exact with ``tiktoken`` when the model's encoding loads *offline* (from
tiktoken's cache, or the copy of ``cl100k_base`` that llama-index-core ships); otherwise the
UTF-8 byte length, an upper bound (every BPE token is at least one byte).
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import hashlib
import importlib.util
import itertools
import logging
import math
import os
import random
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import openai

from ..blend import truncate_dims
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

_T = TypeVar("_T")
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


class OpenAIEmbedder:
    """OpenAI (or an OpenAI-compatible server) as an :class:`~ctxret.embedders.base.Embedder`.

    Args:
        model: embedding model name.
        dimensions: sent as ``dimensions`` when set (Matryoshka truncation server-side); the
            vectors have this many numbers. ``None``: the model's native size (1536 for
            ``text-embedding-3-small`` and ``-ada-002``, 3072 for ``-3-large``; for another
            model it is learnt from the first response, probing once if needed).
        api_key: falls back to ``OPENAI_API_KEY``. Never logged or shown.
        base_url: an OpenAI-compatible server (``None``: OpenAI).
        timeout: seconds per request.
        max_retries: retries after the first attempt for 429/408/5xx/timeouts/connection errors.
        max_inputs, max_bytes: per-request limits (inputs, UTF-8 bytes), enforced before sending.
        max_tokens: per-input token limit; a longer input is refused before sending.
        client, async_client: inject ``openai.OpenAI`` / ``openai.AsyncOpenAI`` instances (their
            own retries are switched off with ``with_options(max_retries=0)``).
        retry_base_delay: first backoff delay in seconds (doubling per retry, with jitter).
        retry_max_delay: cap on one backoff delay.
        max_retry_after: cap on a server's ``Retry-After``.

    Empty or whitespace-only texts are not sent (the API rejects ``""``): their rows are zero.

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
        ):
            if not isinstance(value, int) or value < 1:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(max_retries, int) or max_retries < 0:
            raise InputError(f"max_retries must be a non-negative integer, got {max_retries!r}")
        if not timeout or timeout <= 0:
            raise InputError(f"timeout must be a positive number of seconds, got {timeout!r}")
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        if not key and client is None and async_client is None:
            raise InputError(_NO_KEY)
        self.model = model
        self.dimensions = dimensions
        self.base_url = base_url
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.max_inputs = max_inputs
        self.max_bytes = max_bytes
        self.max_tokens = max_tokens
        self.retry_base_delay = float(retry_base_delay)
        self.retry_max_delay = float(retry_max_delay)
        self.max_retry_after = float(max_retry_after)
        self._api_key = key or None
        self._dims: int | None = dimensions if dimensions is not None else native
        self._client = self._without_retries(client)
        self._async_client = self._without_retries(async_client)
        self._client_lock = threading.Lock()

    def __repr__(self) -> str:
        base = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"OpenAIEmbedder(model={self.model!r}, dims={self._dims}{base})"

    # -- identity ------------------------------------------------------------------------------

    @property
    def dims(self) -> int:
        """Numbers per vector (for an unknown model without ``dimensions``: probed once)."""
        if self._dims is None:
            self._learn_dims(self._call_sync(lambda: self._create_sync(["dimension probe"])))
        assert self._dims is not None  # set by _learn_dims
        return self._dims

    @property
    def model_id(self) -> str:
        """``openai:{model}@{dims}``, recorded in the index config."""
        return f"openai:{self.model}@{self.dims}"

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

    def _request(self, inputs: list[str]) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.model, "input": inputs}
        if self.dimensions is not None:
            request["dimensions"] = self.dimensions
        return request

    def _create_sync(self, inputs: list[str]) -> Any:
        return self._sync_client().embeddings.create(**self._request(inputs))

    async def _create_async(self, inputs: list[str]) -> Any:
        return await self._async_client_().embeddings.create(**self._request(inputs))

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

    def _vectors(self, response: Any, expected: int) -> np.ndarray:
        """One response's vectors, put in input order by their ``index`` field (raw, float32)."""
        data = list(getattr(response, "data", None) or [])
        if len(data) != expected:
            raise EmbeddingError(
                f"the embeddings server returned {len(data)} vectors for {expected} inputs; "
                "check that base_url points at an OpenAI-compatible embeddings endpoint"
            )
        rows: list[Any] = [None] * expected
        for item in data:
            index = getattr(item, "index", None)
            if not isinstance(index, int) or not 0 <= index < expected or rows[index] is not None:
                raise EmbeddingError(
                    f"the embeddings server returned a vector with index {index!r} for a request "
                    f"of {expected} inputs (indices must be 0..{expected - 1}, each once)"
                )
            rows[index] = item.embedding
        try:
            return np.asarray(rows, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise EmbeddingError(
                "the embeddings server returned vectors of different lengths or non-numbers"
            ) from exc

    def _learn_dims(self, response: Any) -> None:
        if self._dims is None:
            data = list(getattr(response, "data", None) or [])
            if not data:
                raise EmbeddingError(
                    "the embeddings server returned no vectors to learn the dimension from"
                )
            self._dims = len(data[0].embedding)
            logger.info("%s returns %d-dimensional vectors", self.model, self._dims)

    def _finish(self, plan: _Plan, parts: list[np.ndarray]) -> np.ndarray:
        dims = self._dims
        assert dims is not None  # known, or learnt from the first response before this
        out = np.zeros((plan.n, dims), dtype=np.float32)
        for batch, vectors in zip(plan.batches, parts, strict=True):
            got = vectors.shape[1] if vectors.ndim == 2 else 0
            if got < dims:
                raise EmbeddingError(
                    f"the embeddings server returned {got}-dimensional vectors, expected {dims}; "
                    "set dimensions= to what the model returns (or None for an unknown model)"
                )
            bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
            if bad.size:
                raise EmbeddingError(
                    f"the embeddings server returned NaN or infinite numbers for input "
                    f"{batch[bad[0]]}; "
                    "retry, or check the server"
                )
            if got > dims:
                vectors = truncate_dims(vectors, dims)
            norms = np.linalg.norm(vectors.astype(np.float64), axis=1, keepdims=True)
            out[batch] = (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)
        return out

    # -- retries (shared) ----------------------------------------------------------------------

    def _redact(self, message: str) -> str:
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return message[:500]

    def _describe(self, exc: BaseException) -> str:
        if isinstance(exc, openai.APITimeoutError):
            what = f"timed out after {self.timeout:g} s"
        elif isinstance(exc, openai.APIConnectionError):
            what = "connection error"
        elif isinstance(exc, openai.APIStatusError):
            what = f"HTTP {exc.status_code}"
        else:
            what = type(exc).__name__
        detail = self._redact(str(getattr(exc, "message", None) or exc))
        return f"{what} ({detail})" if detail else what

    def _retry_delay(self, exc: BaseException, attempt: int) -> float:
        """Seconds to wait before retrying after ``exc`` on attempt ``attempt`` (0-based).

        Raises :class:`EmbeddingError` (from ``exc``) when it is permanent or retries are spent.
        """
        status = getattr(exc, "status_code", None)
        transient = isinstance(exc, openai.APIConnectionError) or (
            isinstance(status, int) and (status in _RETRY_STATUSES or status >= 500)
        )
        where = f" at {self.base_url}" if self.base_url else ""
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
        if attempt >= self.max_retries:
            raise EmbeddingError(
                f"embedding request to {self.model}{where} failed after {attempt + 1} "
                f"attempt{'s' if attempt else ''} ({self.max_retries} retries): last error "
                f"{self._describe(exc)}; try again later "
                "or raise max_retries/timeout"
            ) from exc
        retry_after = _retry_after_seconds(exc)
        if retry_after is not None:
            delay = min(retry_after, self.max_retry_after)
        else:
            backoff = min(self.retry_max_delay, self.retry_base_delay * (2.0**attempt))
            delay = backoff * (0.5 + 0.5 * random.random())
        logger.warning(
            "embedding request to %s failed (%s); retry %d of %d in %.2f s",
            self.model,
            self._describe(exc),
            attempt + 1,
            self.max_retries,
            delay,
        )
        return delay

    def _call_sync(self, send: Callable[[], _T]) -> _T:
        for attempt in itertools.count():
            try:
                return send()
            except openai.OpenAIError as exc:
                delay = self._retry_delay(exc, attempt)
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_async(self, send: Callable[[], Awaitable[_T]]) -> _T:
        for attempt in itertools.count():
            try:
                return await send()
            except openai.OpenAIError as exc:
                delay = self._retry_delay(exc, attempt)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the Embedder protocol -----------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """``(n, dims)`` float32 unit rows in input order; empty/whitespace texts give zero rows."""
        plan = self._plan(texts)
        parts = []
        for batch in plan.batches:
            inputs = [plan.texts[i] for i in batch]
            response = self._call_sync(functools.partial(self._create_sync, inputs))
            self._learn_dims(response)
            parts.append(self._vectors(response, len(inputs)))
        if not parts and self._dims is None:
            return np.zeros((plan.n, self.dims), dtype=np.float32)
        return self._finish(plan, parts)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        """:meth:`embed` on the async client (requests are sent one after another)."""
        plan = self._plan(texts)
        parts = []
        for batch in plan.batches:
            inputs = [plan.texts[i] for i in batch]
            response = await self._call_async(functools.partial(self._create_async, inputs))
            self._learn_dims(response)
            parts.append(self._vectors(response, len(inputs)))
        if not parts and self._dims is None:
            probe = await self._call_async(
                functools.partial(self._create_async, ["dimension probe"])
            )
            self._learn_dims(probe)
        return self._finish(plan, parts)
