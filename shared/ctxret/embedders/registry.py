"""Embedders by name: what a configuration string (``--embedder``, ``CTXRET_EMBEDDER``) builds.

A kind of embedder is one :func:`register_embedder` call: its name and a factory from
:class:`EmbedderOptions` (what a command line or the environment says about the embedder; each kind reads what
applies to it). The command line's choices, its check of the name and ``make_embedder`` all read this registry.
The two kinds ctxret ships are registered below: ``local`` (the default) and ``openai``. Their modules load only
when a factory runs, so importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from ..errors import InputError
from .base import Embedder

__all__ = [
    "EmbedderKind",
    "EmbedderOptions",
    "build_embedder",
    "describe_embedder",
    "embedder_kind",
    "embedder_kinds",
    "register_embedder",
]


@dataclass(frozen=True)
class EmbedderOptions:
    """What the configuration says about the embedder; a kind reads what applies to it (``None``: its default).

    ``model`` and ``dimensions``: the model and its output size; ``base_url``: the service's address; ``timeout``
    and ``max_retries``: seconds per request attempt and retries of a failed request."""

    model: str | None = None
    dimensions: int | None = None
    base_url: str | None = None
    timeout: float | None = None
    max_retries: int | None = None


#: A kind's factory: the options → a new embedder.
EmbedderFactory = Callable[[EmbedderOptions], Embedder]


@dataclass(frozen=True)
class EmbedderKind:
    """A registered kind: ``build`` makes a new embedder; ``shared`` (optional) returns the process's one instance,
    for callers that embed a lot (the harness: one local model per process); ``describe`` (optional) says what the
    embedder would record and default to — ``model_id``, ``dims``, ``max_tokens``, ``default_piece_bytes``,
    ``default_score_threshold``, ``capabilities`` — without loading a model (``ctxret stats``); without it, the
    embedder is built."""

    name: str
    build: EmbedderFactory
    shared: EmbedderFactory | None = None
    describe: Callable[[EmbedderOptions], Any] | None = None


_KINDS: dict[str, EmbedderKind] = {}


def register_embedder(
    name: str,
    build: EmbedderFactory,
    *,
    shared: EmbedderFactory | None = None,
    describe: Callable[[EmbedderOptions], Any] | None = None,
) -> EmbedderKind:
    """Register a kind of embedder under ``name`` (lowercase, as configurations name it). A name is registered once:
    registering it again is an :class:`InputError`."""
    if not isinstance(name, str) or not name or name != name.strip().lower():
        raise InputError(f"an embedder kind's name is a non-empty lowercase word, got {name!r}")
    if name in _KINDS:
        raise InputError(f"an embedder kind named {name!r} is already registered; choose another name")
    kind = _KINDS[name] = EmbedderKind(name, build, shared, describe)
    return kind


def embedder_kinds() -> tuple[str, ...]:
    """The registered names, in the order they were registered (the first is the default)."""
    return tuple(_KINDS)


def choices_text() -> str:
    """The registered names as a sentence names them: ``'local' or 'openai'``."""
    names = [repr(n) for n in _KINDS]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def embedder_kind(name: str) -> EmbedderKind:
    """The kind registered as ``name``; another name is an :class:`InputError` naming the registered ones."""
    kind = _KINDS.get(name)
    if kind is None:
        raise InputError(f"no embedder kind {name!r}: choose {choices_text()}")
    return kind


def build_embedder(name: str, options: EmbedderOptions | None = None, *, shared: bool = False) -> Embedder:
    """A new embedder of the kind ``name`` (``shared``: the process's one instance, where the kind has one)."""
    kind = embedder_kind(name)
    factory = kind.shared if shared and kind.shared is not None else kind.build
    return factory(options or EmbedderOptions())


def describe_embedder(name: str, options: EmbedderOptions | None = None) -> Any:
    """What an embedder of the kind ``name`` would record and default to (see :class:`EmbedderKind`)."""
    kind = embedder_kind(name)
    describe = kind.describe or kind.build
    return describe(options or EmbedderOptions())


# -- the kinds ctxret ships --------------------------------------------------------------------------------------
def _local(options: EmbedderOptions) -> Embedder:
    from .local import LocalEmbedder

    return LocalEmbedder()


def _shared_local(options: EmbedderOptions) -> Embedder:
    from .local import shared_local_embedder

    return shared_local_embedder()


def _describe_local(options: EmbedderOptions) -> Any:
    """The local model described from its class, never loaded."""
    from .local import DEFAULT_MAX_TOKENS, LocalEmbedder

    names = ("model_id", "dims", "default_piece_bytes", "default_score_threshold", "capabilities")
    return SimpleNamespace(max_tokens=DEFAULT_MAX_TOKENS, **{n: getattr(LocalEmbedder, n) for n in names})


def _openai(options: EmbedderOptions) -> Embedder:
    """OpenAI's embeddings (the key from ``OPENAI_API_KEY``); a client is made, no request sent."""
    from .openai import OpenAIEmbedder

    given = {
        "dimensions": options.dimensions,
        "base_url": options.base_url,
        "timeout": options.timeout,
        "max_retries": options.max_retries,
    }
    keywords: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if options.model is not None:
        return OpenAIEmbedder(options.model, **keywords)
    return OpenAIEmbedder(**keywords)


register_embedder("local", _local, shared=_shared_local, describe=_describe_local)
register_embedder("openai", _openai)
