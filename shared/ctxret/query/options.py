"""What a search option is beside its value: its help, its command-line flag and how a flag's text becomes a value.

Every option of :class:`~ctxret.query.settings.SearchSettings` (and every field of
:class:`~ctxret.query.fusion.FusionSettings`, reached by its flat name) carries an :class:`Option` in its dataclass
field's metadata (:func:`option`). The CLI's search flags, their choices and help are generated from it
(``ctxret.cli.search_flags``), and the adapters' ``search_kwargs`` checks read the same names
(:func:`ctxret.query.settings.check_search_options`); the value itself is checked by the settings, once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError

__all__ = ["Option", "option", "option_of", "parse_bool", "parse_float", "parse_int", "parse_python", "parse_time"]

#: Words a flag's value may use for ``None``, ``True`` and ``False``.
NONE_WORDS = ("none", "off")
TRUE_WORDS = ("true", "on", "yes", "1")
FALSE_WORDS = ("false", "off", "no", "0")


@dataclass(frozen=True)
class Option:
    """A search option's description.

    ``help``: one sentence for ``--help``; ``parse``: a flag's text -> the option's value (a ``ValueError`` or an
    ``InputError`` says what was expected; the settings check the value after it); ``metavar``; ``choices``: the
    values a flag takes (a callable: read when the flag is built, e.g. the fusion registry's names); ``flags``: the
    flag's names (default ``--<name with dashes>``); ``switch``: a True/False option, ``--x`` / ``--no-x``;
    ``shown_default``: the default as ``--help`` shows it (default: the field's)."""

    help: str
    parse: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    flags: tuple[str, ...] = ()
    switch: bool = False
    shown_default: str | None = None

    def flag_names(self, name: str) -> tuple[str, ...]:
        return self.flags or (f"--{name.replace('_', '-')}",)

    def choice_names(self) -> tuple[str, ...] | None:
        if self.choices is None:
            return None
        return tuple(self.choices() if callable(self.choices) else self.choices)


def option(default: Any = ..., *, default_factory: Any = None, **spec: Any) -> Any:
    """A dataclass field carrying its :class:`Option` (``spec``: the Option's arguments)."""
    metadata = {"option": Option(**spec)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def option_of(f: Any) -> Option | None:
    """The :class:`Option` of a dataclass field, or ``None``."""
    found = f.metadata.get("option") if f.metadata else None
    return found if isinstance(found, Option) else None


# -- a flag's text as a value (the settings check the value itself) -----------------------------------------------
def _none(text: str, none: bool) -> bool:
    return none and text.strip().lower() in NONE_WORDS


def parse_int(text: str, *, none: bool = False) -> int | None:
    """An integer (``none``: also ``none``/``off`` for ``None``)."""
    if _none(text, none):
        return None
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise ValueError(f"expected a whole number{' or none' * none}, got {text!r}") from None


def parse_float(text: str, *, none: bool = False, auto: bool = False) -> float | str | None:
    """A number (``none``: also ``none``/``off`` for ``None``; ``auto``: also ``auto``)."""
    low = text.strip().lower()
    if auto and low == "auto":
        return "auto"
    if _none(text, none):
        return None
    try:
        return float(low)
    except ValueError:
        words = "".join(f" or {w}" for w, on in (("none", none), ("auto", auto)) if on)
        raise ValueError(f"expected a number{words}, got {text!r}") from None


def parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def parse_time(text: str) -> str:
    """An ISO-8601 time, as text (the settings read it; a bad one is refused there, naming the option)."""
    return text.strip()


def parse_python(text: str) -> Any:
    """``module:attribute`` (e.g. ``mypackage.rerankers:cross_encoder``): the object a Python path names."""
    module, sep, attr = text.strip().partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"expected a Python object as module:attribute (e.g. mypackage.rerankers:score), got {text!r}")
    try:
        obj: Any = importlib.import_module(module)
        for name in attr.split("."):
            obj = getattr(obj, name)
    except (ImportError, AttributeError) as e:
        raise InputError(f"cannot load {text!r} ({e}); give module:attribute of an importable module") from None
    except Exception as e:  # the module's own code raised while it was imported
        raise InputError(
            f"cannot load {text!r}: importing {module!r} raised {type(e).__name__}: {' '.join(str(e).split())[:200]}"
        ) from e
    return obj
