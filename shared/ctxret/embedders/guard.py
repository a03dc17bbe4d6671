"""Embedders that misbehave: every failure an :class:`~ctxret.errors.EmbeddingError`, every write's call bounded.

The core calls an embedder through :func:`guarded` (``ContextualIndex`` does, for its writes and searches), so
that whatever the embedder raises — a LangChain model's ``openai.APIConnectionError``, a ``KeyError`` in user
code, a ``RuntimeError`` from a model runtime — reaches the caller as :class:`~ctxret.errors.EmbeddingError`
naming the embedder, with the original as its cause (``raise ... from e``). ctxret's own errors pass unchanged
(an :class:`~ctxret.errors.InputTooLongError` says which input is too long, an :class:`EmbeddingError` already
names the embedder).

With a ``timeout``, each call (``embed``, ``aembed``, the token passes of late chunking) gets at most that many
seconds: a call that has not answered by then is an :class:`EmbeddingError`, and the write that asked for it
stores nothing of its batch (the call keeps running in a daemon thread, its answer thrown away; an async call
is cancelled). An embedder may say what its calls need in its capabilities
(``EmbedderCapabilities.embed_timeout``: seconds, or ``None``: no limit; :mod:`.base`): the local model has none
(it runs in this process), :class:`~.openai.OpenAIEmbedder` none (its own ``timeout``, ``max_retries`` and
``total_timeout`` bound every request). Any other embedder — a LangChain or LlamaIndex model, your own — gets
:data:`DEFAULT_EMBED_TIMEOUT` per call. A call of a write embeds at most one write batch (2,048 pieces, 256 KB
of text).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import CtxretError, EmbeddingError, InputError
from .base import DEFAULT_EMBED_TIMEOUT, EmbedderCapabilities, can_bound, capabilities_of, embedder_name

__all__ = [
    "DEFAULT_EMBED_TIMEOUT",
    "GuardedEmbedder",
    "check_embed_timeout",
    "embed_timeout_of",
    "for_writes",
    "guarded",
]

#: The embedder's methods a guard calls through (the rest of its attributes are read as they are).
_CALLS = ("embed_tokens", "embed_tokens_many")


def check_embed_timeout(value: Any) -> float | None:
    """``value`` as seconds per call (``None`` stays ``None``: the embedder's own default; ``math.inf``: no limit),
    else an :class:`InputError`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value <= 0:
        raise InputError(
            f"embed_timeout must be a number of seconds > 0 (how long one embedding call of a write may take; "
            f"math.inf: no limit; None: the embedder's default), got {value!r}"
        )
    return float(value)


def embed_timeout_of(embedder: Any, setting: float | None = None) -> float | None:
    """The seconds one call of ``embedder`` may take in a write: ``setting`` when given (``math.inf``: none), else
    the embedder's (``EmbedderCapabilities.embed_timeout``), else :data:`DEFAULT_EMBED_TIMEOUT`; ``None``: no limit."""
    seconds = check_embed_timeout(setting)
    if seconds is None:
        try:
            own = capabilities_of(embedder).embed_timeout
        except Exception:  # an embedder whose attributes fail: the default  # noqa: BLE001
            own = DEFAULT_EMBED_TIMEOUT
        seconds = None if own is None else check_embed_timeout(own)
    return None if seconds is None or math.isinf(seconds) else seconds


def guarded(embedder: Any, timeout: float | None = None) -> GuardedEmbedder:
    """``embedder`` behind a :class:`GuardedEmbedder` (a guard's own embedder, not a guard of a guard)."""
    if isinstance(embedder, GuardedEmbedder):
        if embedder.timeout == timeout:
            return embedder
        embedder = embedder.guarded_embedder
    return GuardedEmbedder(embedder, timeout)


def for_writes(embedder: Any, setting: float | None = None) -> GuardedEmbedder:
    """``embedder`` as a write calls it: guarded, each call bounded by ``embed_timeout_of(embedder, setting)``."""
    return guarded(embedder, embed_timeout_of(embedder, setting))


class GuardedEmbedder:
    """An embedder whose failures are :class:`EmbeddingError` naming it (the cause kept), each call bounded by
    ``timeout`` seconds (``None``: unbounded). Every other attribute is the embedder's own."""

    def __init__(self, embedder: Any, timeout: float | None = None) -> None:
        self.guarded_embedder = embedder
        self.timeout = timeout
        self.name = embedder_name(embedder)

    def __repr__(self) -> str:
        return f"GuardedEmbedder({self.guarded_embedder!r}, timeout={self.timeout})"

    # -- the protocol ------------------------------------------------------------------------------
    @property
    def model_id(self) -> str:
        return self._read("model_id")

    @property
    def dims(self) -> int:
        return self._read("dims")  # a wrapped framework model may embed a probe to learn it

    @property
    def max_tokens(self) -> int:
        return self._read("max_tokens")

    @property
    def default_piece_bytes(self) -> int:
        return self._read("default_piece_bytes")

    @property
    def default_score_threshold(self) -> float:
        return self._read("default_score_threshold")

    @property
    def capabilities(self) -> EmbedderCapabilities:
        """The guarded embedder's (:func:`~.base.capabilities_of`)."""
        try:
            return capabilities_of(self.guarded_embedder)
        except CtxretError:
            raise
        except Exception as e:
            raise self._failed("capabilities", e) from e

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._call("embed", self.guarded_embedder.embed, texts)

    async def aembed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            answer = self.guarded_embedder.aembed(texts)
            if self.timeout is None:
                return await answer
            return await asyncio.wait_for(answer, self.timeout)
        except asyncio.TimeoutError as e:
            if self.timeout is None:
                raise self._failed("aembed", e) from e
            raise self._late("aembed") from None
        except CtxretError:
            raise
        except Exception as e:
            raise self._failed("aembed", e) from e

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        try:
            return self.guarded_embedder.count_tokens(texts)
        except CtxretError:
            raise
        except Exception as e:
            raise self._failed("count_tokens", e) from e

    def bounded(self, seconds: float) -> GuardedEmbedder:
        """The embedder's own ``bounded(seconds)`` (a search with ``deadline_ms``), guarded the same way."""
        inner = self.guarded_embedder
        bounded = inner.bounded(seconds) if can_bound(inner) else inner
        return GuardedEmbedder(bounded, self.timeout)  # the search's clock bounds the call itself

    def __getattr__(self, name: str) -> Any:  # the embedder's other attributes (late chunking's token passes)
        if name == "guarded_embedder":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        value = getattr(self.guarded_embedder, name)
        if name in _CALLS and callable(value):
            return lambda *args: self._call(name, value, *args)
        return value

    # -- calls -------------------------------------------------------------------------------------
    def _read(self, name: str) -> Any:
        try:
            return getattr(self.guarded_embedder, name)
        except CtxretError:
            raise
        except Exception as e:
            raise self._failed(name, e) from e

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            if self.timeout is None:
                return fn(*args)
            return _within(self.timeout, fn, args, lambda: self._late(what))
        except CtxretError:
            raise
        except Exception as e:
            raise self._failed(what, e) from e

    def _failed(self, what: str, e: BaseException) -> EmbeddingError:
        return EmbeddingError(
            f"the embedder {self.name} failed in {what}() ({type(e).__name__}: {e}); nothing was stored or searched "
            "with its answer. Check the embedder (its service, key and model), then run the call again"
        )

    def _late(self, what: str) -> EmbeddingError:
        return EmbeddingError(
            f"the embedder {self.name} did not answer {what}() within {self.timeout:g} s; nothing was stored or "
            "searched with it. Check its service, or give it longer: ContextualIndex(..., embed_timeout=SECONDS) "
            "(math.inf: no limit)"
        )


def _within(timeout: float, fn: Callable[..., Any], args: tuple[Any, ...], late: Callable[[], Exception]) -> Any:
    """``fn(*args)`` in a daemon thread, waited for ``timeout`` seconds: its answer, its error, or ``late()``.

    A daemon thread, not a pool's: a call that never returns must not keep the interpreter from exiting."""
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001  # handed to the caller's thread
            box["error"] = e
        finally:
            done.set()

    context = contextvars.copy_context()  # what the caller's thread carries (a framework's tracing, say)
    threading.Thread(target=context.run, args=(run,), name="ctxret-embed", daemon=True).start()
    if not done.wait(timeout):
        raise late()
    if "error" in box:
        raise box["error"]
    return box["value"]
