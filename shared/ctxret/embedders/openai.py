"""OpenAI embeddings (``text-embedding-3-small`` by default) on the official ``openai`` client.

Requests are sized before sending (:func:`ctxret.embedders.batching.plan_batches`: at most ``max_inputs``
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
import itertools
import logging
import math
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import openai

from ..errors import EmbeddingError, InputError
from ..text import clean_text
from .base import EmbedderCapabilities
from .batching import MAX_BYTES_PER_REQUEST, MAX_INPUTS_PER_REQUEST, plan_batches, utf8_len
from .openai_answers import BadAnswer, describe_failure, endpoint_name, failure_fix, read_body, retry_after_seconds
from .openai_tokens import MODEL_ENCODINGS, check_input_sizes, offline_tiktoken

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
#: Statuses worth retrying: rate limit, request timeout, and server errors (5xx).
_RETRY_STATUSES = frozenset({408, 429})

_NO_KEY = "OpenAIEmbedder needs an API key: set OPENAI_API_KEY or pass api_key=... (or inject client= / async_client=)"


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

    Every answer is checked before any vector is used (:mod:`.openai_answers`): a malformed
    HTTP 200 is retried like a 5xx, then raised as :class:`EmbeddingError` naming what was wrong;
    vectors of another size than expected are refused at once (a configuration mismatch: the
    error names both sizes and the fix). A failed call returns nothing, so the index writes nothing.

    Token limit: see :func:`ctxret.embedders.openai_tokens.check_input_sizes` (exact with an
    offline tiktoken encoding, else a byte bound); a longer input is refused before sending.
    """

    #: The piece byte budget that fits this model.
    default_piece_bytes: int = 1200
    #: Starting cosine floor for OpenAI vectors (not measured in this repository: no OpenAI model runs offline
    #: here); calibrate it on your data (``ctxret eval calibrate``).
    default_score_threshold: float = 0.35
    #: No time limit of the index's on a write's calls (:mod:`.guard`): ``timeout``, ``max_retries`` and
    #: ``total_timeout`` bound every request.
    capabilities: EmbedderCapabilities = EmbedderCapabilities(embed_timeout=None)

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
                raise InputError(f"dimensions must be a positive integer or None, got {dimensions!r}")
            if native is not None and model not in MATRYOSHKA_MODELS:
                raise InputError(
                    f"{model} does not support dimensions; use text-embedding-3-small or "
                    "text-embedding-3-large, or leave dimensions=None"
                )
            if native is not None and dimensions > native:
                raise InputError(f"{model} has {native} dimensions; dimensions={dimensions} is over it")
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
        base = f", base_url={endpoint_name(self.base_url)!r}" if self.base_url else ""
        return f"OpenAIEmbedder(model={self.model!r}, dims={self._dims}{base})"

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
                return endpoint_name(url)
        url = self.base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        return endpoint_name(url)

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
        raw = self._sync_client().embeddings.with_raw_response.create(**self._request(inputs, timeout))
        return self._read(raw, where)

    async def _attempt_async(self, inputs: list[str], where: list[int], timeout: float) -> np.ndarray:
        raw = await self._async_client_().embeddings.with_raw_response.create(**self._request(inputs, timeout))
        return self._read(raw, where)

    @property
    def _encoding(self) -> Any | None:
        name = MODEL_ENCODINGS.get(self.model)
        return offline_tiktoken(name) if name else None

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Tokens per text: exact with an offline tiktoken encoding, else UTF-8 bytes (a bound)."""
        cleaned = self._clean_all(texts)
        encoding = self._encoding
        if encoding is None:
            return [utf8_len(t) for t in cleaned]
        return [len(ids) for ids in encoding.encode_ordinary_batch(cleaned)]

    @staticmethod
    def _clean_all(texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise InputError("expected a list of texts, got a single str; wrap it: embed([text])")
        return [clean_text(t) for t in texts]

    def _plan(self, texts: Sequence[str]) -> _Plan:
        cleaned = self._clean_all(texts)
        sent = [i for i, t in enumerate(cleaned) if t.strip()]
        sent_texts = [cleaned[i] for i in sent]
        check_input_sizes(sent, sent_texts, self._encoding, self.model, self.max_tokens, self.max_bytes)
        local = plan_batches(sent_texts, self.max_inputs, self.max_bytes)
        return _Plan(n=len(cleaned), texts=cleaned, batches=[[sent[j] for j in b] for b in local])

    def _read(self, raw: Any, where: list[int]) -> np.ndarray:
        """One HTTP 200 answer as ``(len(where), dims)`` float32 unit rows in request order.

        ``where`` holds the caller's input numbers (for messages). A malformed answer raises
        :class:`BadAnswer` (retried); vectors of the wrong size raise :class:`EmbeddingError`.
        """
        try:
            return read_body(
                raw.content,
                str(raw.headers.get("content-type") or ""),
                where,
                redact=self._redact,
                check_dims=self._check_dims,
            )
        except BadAnswer as exc:
            status = getattr(raw, "status_code", 200)
            exc.status = status if isinstance(status, int) else 200
            raise

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

    def _redact(self, message: str) -> str:
        if self._api_key:
            message = message.replace(self._api_key, "***")
        return message[:500]

    def _describe(self, exc: BaseException) -> str:
        return describe_failure(exc, self.timeout, self._redact)

    def _fix(self, exc: BaseException) -> str:
        """What to do when ``exc`` keeps happening."""
        return failure_fix(exc, self.endpoint)

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
            isinstance(exc, (BadAnswer, openai.APIConnectionError))
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
                f"embedding request to {self.model}{where} failed permanently: {self._describe(exc)}{hint}"
            ) from exc
        attempts = f"{attempt + 1} attempt{'s' if attempt else ''}"
        if attempt >= self.max_retries:
            raise EmbeddingError(
                f"embedding request to {self.model}{where} failed after {attempts} "
                f"({self.max_retries} retries): last error {self._describe(exc)}; "
                f"{self._fix(exc)}"
            ) from exc
        retry_after = retry_after_seconds(exc)
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
            except (openai.OpenAIError, BadAnswer) as exc:
                delay = self._retry_delay(exc, attempt, deadline)
            time.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _call_async(self, inputs: list[str], where: list[int]) -> np.ndarray:
        deadline = self._deadline()
        for attempt in itertools.count():
            try:
                return await self._attempt_async(inputs, where, self._attempt_timeout(deadline))
            except (openai.OpenAIError, BadAnswer) as exc:
                delay = self._retry_delay(exc, attempt, deadline)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def bounded(self, seconds: float) -> OpenAIEmbedder:
        """This embedder with every request given up after ``seconds`` in all (attempts, waits and
        retries included), sharing its clients: what a search with ``deadline_ms`` embeds with, so an
        abandoned request ends near the deadline instead of running to ``total_timeout``."""
        import copy

        twin = copy.copy(self)
        twin.timeout = max(0.001, min(self.timeout, float(seconds)))
        twin.total_timeout = twin.timeout if self.total_timeout is None else min(self.total_timeout, twin.timeout)
        twin._sync_client = self._sync_client  # type: ignore[method-assign]
        twin._async_client_ = self._async_client_  # type: ignore[method-assign]
        return twin

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
