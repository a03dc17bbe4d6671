"""Errors raised by ctxret. Every message names the problem and the fix."""

from __future__ import annotations


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


class MissingExtraError(CtxretError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""


def missing_extra(package: str, extra: str, what: str) -> MissingExtraError:
    """Build the error for an optional package that is not installed."""
    return MissingExtraError(
        f"{what} needs the optional package {package!r}, which is not installed. "
        f'Install it with: pip install "ctxret[{extra}]"'
    )
