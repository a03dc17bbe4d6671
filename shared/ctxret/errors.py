"""Errors raised by ctxret. Every message names the problem and the fix."""

from __future__ import annotations

from typing import Any


class CtxretError(Exception):
    """Base class for ctxret errors."""


class InputError(CtxretError, ValueError):
    """Bad input: the message says what is wrong with it and what to do instead."""


class InputTooLongError(InputError):
    """One input is over a request or model limit; nothing was sent."""


class ConfigMismatchError(CtxretError):
    """A collection was built with another index configuration than the one asked for."""


class StoreError(CtxretError):
    """The vector store failed or cannot be used (unreachable server, a folder another process holds)."""


class ClosedError(CtxretError):
    """An index (or store) used after ``close()``: open it again. Not an :class:`InputError`: nothing
    was wrong with the call's arguments, and not a :class:`StoreError`: the store is fine."""


class EmbeddingError(CtxretError):
    """The embedding backend failed permanently (after retries)."""


class CallableError(CtxretError):
    """A callable you passed raised (a ``rerank`` callable, ``hyde``, a view or context writer): the message names
    it in one line; what it raised is the cause (``raise ... from e``)."""


def callable_error(what: str, fn: Any, error: BaseException) -> CallableError:
    """The :class:`CallableError` for ``fn`` (the ``what``: ``"rerank callable"``) having raised ``error``; raise it
    ``from error``."""
    name = getattr(fn, "__qualname__", None) or f"{type(fn).__qualname__} object"
    module = getattr(fn, "__module__", None) or type(fn).__module__
    told = " ".join(str(error).split())
    told = told if len(told) <= 200 else told[:197] + "..."
    return CallableError(
        f"the {what} {module}.{name} raised {type(error).__name__}{': ' + told if told else ''}; fix it or leave it out"
    )


class MissingExtraError(CtxretError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


def missing_extra(package: str, extra: str, what: str) -> MissingExtraError:
    """Build the error for an optional package that is not installed."""
    return MissingExtraError(
        f"{what} needs the optional package {package!r}, which is not installed. "
        f'Install it with: pip install "ctxret[{extra}]"'
    )
