"""The search flags, generated from the search options (:func:`ctxret.query.settings.search_options`): one flag per
option, its choices and help from the option's metadata, its value checked by the settings' own check (a bad value
is a usage error, exit 2, that names the flag and the fix)."""

from __future__ import annotations

import argparse
from dataclasses import MISSING, fields
from typing import Any

from ..errors import InputError
from ..query.fusion import FusionSettings
from ..query.options import Option
from ..query.settings import HYBRID_OPTIONS, SearchSettings, search_options

__all__ = ["add_search_flags", "flag_options", "search_flag_names"]

#: The argument group's title in ``--help``.
GROUP_TITLE = "search options (each a SearchSettings option: docs/cli.md)"


def add_search_flags(parser: argparse.ArgumentParser) -> None:
    """Every search option as a flag of ``parser``. A flag not given sets nothing (the index's default holds)."""
    group = parser.add_argument_group(GROUP_TITLE)
    for name, spec in search_options():
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": _help(name, spec)}
        if spec.switch:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _value_reader(name, spec)
            kwargs["metavar"] = spec.metavar or name.upper()
            choices = spec.choice_names()
            if choices is not None:
                kwargs["metavar"] = "{" + ",".join(choices) + "}"
        group.add_argument(*spec.flag_names(name), **kwargs)


def flag_options(args: argparse.Namespace) -> dict[str, Any]:
    """The search options the flags of ``args`` give (``SearchSettings.with_options`` keywords)."""
    given = vars(args)
    return {name: given[name] for name, _ in search_options() if name in given}


def search_flag_names() -> dict[str, tuple[str, ...]]:
    """Each search option's flag names (``--no-<x>`` too for a switch)."""
    out = {}
    for name, spec in search_options():
        flags = spec.flag_names(name)
        out[name] = flags + tuple(f"--no-{f[2:]}" for f in flags) if spec.switch else flags
    return out


def _value_reader(name: str, spec: Option) -> Any:
    choices = spec.choice_names()

    def read(text: str) -> Any:
        if choices is not None and text.strip() not in choices:
            raise argparse.ArgumentTypeError(f"choose one of {', '.join(choices)}, got {text!r}")
        try:
            value = spec.parse(text) if spec.parse is not None else text
            SearchSettings().with_options(**{name: value})  # the option's own check
        except (ValueError, InputError) as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return value

    read.__name__ = name  # argparse names the type in some errors
    return read


def _help(name: str, spec: Option) -> str:
    default = spec.shown_default if spec.shown_default is not None else _shown(_default(name))
    return f"{spec.help} (default: {default})"


def _default(name: str) -> Any:
    owner, field_name = (FusionSettings, HYBRID_OPTIONS[name]) if name in HYBRID_OPTIONS else (SearchSettings, name)
    for f in fields(owner):
        if f.name == field_name:
            return f.default if f.default is not MISSING else None
    return None


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(getattr(value, "value", value))
