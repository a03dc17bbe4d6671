# ruff: noqa: T201  (a command-line tool: it prints)
"""The ``ctxret`` command (also ``python -m ctxret``).

Subcommands: ``index``, ``search``, ``stats``, ``reindex``, ``delete``, ``demo`` and ``eval``.
Every subcommand sets ``func(args) -> int`` on its parser; :func:`main` dispatches to it.

Settings come from flags, else environment variables, else defaults (see :data:`ENV`). Store and
embedder options are accepted before or after the subcommand (``ctxret --store X search ...`` and
``ctxret search ... --store X`` are the same), ``eval`` included.

Exit codes: 0 ok, 1 error (bad file, ctxret error, unreachable store), 2 usage (bad flags or
environment values, unknown file type).

Modules: :mod:`.settings` (flags + environment → embedder and index), :mod:`.parser`,
:mod:`.readers` (input files), :mod:`.commands`, :mod:`.demo`, :mod:`.render` (output).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

from ..errors import CtxretError
from .parser import build_parser
from .readers import FileProblem, read_input_file
from .render import error
from .settings import (
    ENV,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Settings,
    UsageError,
    make_embedder,
    open_index,
    resolve_settings,
)

__all__ = [
    "main",
    "build_parser",
    "open_index",
    "make_embedder",
    "resolve_settings",
    "read_input_file",
    "FileProblem",
    "Settings",
    "UsageError",
    "ENV",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ctxret`` command; returns the exit code (0 ok, 1 error, 2 usage)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help/--version (0) or a usage error (2)
        return int(e.code or 0) if isinstance(e.code, int) else EXIT_USAGE
    pkg_logger = logging.getLogger("ctxret")
    handler = logging.StreamHandler(sys.stderr)  # for this run only: removed again below
    handler.setFormatter(logging.Formatter("%(levelname)s: %(name)s: %(message)s"))
    old_level = pkg_logger.level
    pkg_logger.addHandler(handler)
    pkg_logger.setLevel(logging.INFO if getattr(args, "verbose", False) else logging.WARNING)
    try:
        return int(args.func(args) or 0)
    except UsageError as e:
        print(
            f"ctxret: error: {e} (see ctxret {getattr(args, 'command', '')} --help)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except CtxretError as e:
        error(str(e))
        return EXIT_ERROR
    except BrokenPipeError:  # `ctxret search ... | head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        pkg_logger.removeHandler(handler)
        pkg_logger.setLevel(old_level)
