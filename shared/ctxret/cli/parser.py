"""The ``ctxret`` argument parser: common store and embedder options, one subparser per command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from .._version import __version__
from .commands import cmd_delete, cmd_index, cmd_reindex, cmd_search, cmd_stats
from .demo import cmd_demo
from .readers import DEFAULT_INCLUDE, SUPPORTED_SUFFIXES
from .search_flags import add_search_flags
from .settings import DEMO_COLLECTION, CliParser, add_common_options

__all__ = ["build_parser"]


#: The ``eval`` command's line in ``ctxret --help`` (the same words as :func:`ctxret.cli.evaluate.register_eval`'s).
EVAL_HELP = "measure retrieval on fixtures or threads"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``ctxret`` parser (subcommands set ``func``).

    ``argv``: the arguments it will parse. Unless they name ``eval``, the ``eval`` command is a placeholder
    that only lists it (importing the harness costs a third of ``stats``' start-up); ``None`` builds it whole.
    """
    parser = CliParser(
        prog="ctxret",
        description=(
            "Contextual chunk retrieval: index agent threads and documents as labelled pieces "
            "blended with their turn, search with one group of results per part of a message."
        ),
        epilog=(
            "Store and embedder options may also follow the subcommand. "
            "Exit codes: 0 ok, 1 error, 2 usage. Run `ctxret demo` to see it work."
        ),
    )
    parser.add_argument("--version", action="version", version=f"ctxret {__version__}")
    add_common_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    add_common_options(common, suppress=True)

    _add_index_parser(sub, common)
    _add_search_parser(sub, common)
    _add_stats_parser(sub, common)
    _add_reindex_parser(sub, common)
    _add_delete_parser(sub, common)
    _add_demo_parser(sub, common)
    if argv is not None and "eval" not in argv:
        sub.add_parser("eval", help=EVAL_HELP, add_help=False)  # never parsed: "eval" is not in argv
        return parser
    from .evaluate import register_eval  # here, not at import: it loads the harness

    register_eval(sub, common)
    return parser


def _add_index_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "index",
        parents=[common],
        help="index JSONL threads and .md/.txt documents",
        description=(
            "Index files and folders (walked recursively). JSONL: one OpenAI-format message per line "
            "(the file is one thread, named by --thread or the file name), or one thread object per "
            'line {"thread_id": ..., "messages": [...]}. JSON (.json): a chat export (a list of messages, a '
            "thread object or a list of them, ChatGPT's and LangChain's exports). Documents (.md, .markdown, .txt): "
            "split into "
            "sections by headings; the document id, and its thread (search scope) unless --thread "
            "is given, is its path relative to --root (default: the common folder of the documents "
            "given), never to the working directory. Every file is read and checked before anything "
            "is written: if one is bad, nothing is written. Turns of all files are embedded "
            "together. A file is a whole thread: index it again when it changes (unchanged turns "
            "cost nothing). A document file replaces its stored version whole (sections it no longer "
            "has are removed); --prune removes the documents of a folder whose file is gone."
        ),
    )
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help=f"files or folders to index ({', '.join(SUPPORTED_SUFFIXES)})"
    )
    p.add_argument(
        "--include",
        action="append",
        metavar="GLOB",
        help=f"in folders, index files matching GLOB (repeatable; default {' '.join(DEFAULT_INCLUDE)})",
    )
    p.add_argument(
        "--exclude", action="append", metavar="GLOB", help="in folders, skip files matching GLOB (repeatable)"
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        help="document ids are paths relative to DIR (default: the common folder of the documents given); "
        "pass the same root every time you index parts of one tree",
    )
    p.add_argument(
        "--max-bytes",
        type=_byte_limit,
        default=None,
        metavar="N",
        help="refuse a turn or section over N bytes (default 2000000; 0 for no limit)",
    )
    p.add_argument("--thread", metavar="ID", help="thread id (search scope) for everything in these files")
    p.add_argument(
        "--prune",
        action="store_true",
        help="also remove the stored documents of the folders given whose file is gone (listed before removal)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="read and check everything, list what --prune removes, write nothing"
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress (default: a bar on a terminal, else a line every few seconds with pieces/s and time left)",
    )
    p.set_defaults(func=cmd_index)


def _add_search_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "search",
        parents=[common],
        help="search: one group of hits per part of the message",
        description=(
            "Split MESSAGE into at most 8 parts; each part (blended with the whole message) keeps "
            "its own group of at most k hits. Each hit line shows the score its group is ranked by: "
            "with hybrid search (the default for an embedded store) `fused F cos C`, the fused score "
            "and the raw cosine; with dense search the raw cosine. --json has every named score."
        ),
    )
    p.add_argument("message", metavar="MESSAGE", help='the incoming message ("-" reads it from stdin)')
    p.add_argument(
        "--where",
        type=_where,
        default=None,
        metavar="JSON",
        help="a filter on metadata (a Chroma where): your keys by the names you gave them, ctxret's fields as "
        """'ctxret:<field>', e.g. '{"team": "ops"}' or '{"ctxret:source_kind": "tool"}'""",
    )
    p.add_argument("--thread", action="append", metavar="ID", help="search only this thread (repeatable)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_search_flags(p)  # every search option, generated from SearchSettings
    p.set_defaults(func=cmd_search)


def _add_stats_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("stats", parents=[common], help="counts, threads and the index config")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=cmd_stats)


def _add_reindex_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "reindex",
        parents=[common],
        help="rebuild the collection from its stored pieces (e.g. with new --embedder/--weight)",
        description=(
            "Re-embed every stored piece under the current options and swap the new collection in "
            "when it is complete (a failure leaves the old one untouched)."
        ),
    )
    p.set_defaults(func=cmd_reindex)


def _add_delete_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("delete", parents=[common], help="delete every piece of a thread")
    p.add_argument(
        "--thread",
        action="append",
        metavar="ID",
        required=True,
        help="thread to delete (repeatable)",
    )
    p.set_defaults(func=cmd_delete)


def _add_demo_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "demo",
        parents=[common],
        help="index bundled sample threads; compare per-part groups with one whole-message vector",
        description=(
            "Index three sample agent threads shipped with ctxret (into a temporary folder unless "
            f"--store/--chroma-host is given; collection {DEMO_COLLECTION!r} unless --collection "
            "is given) and run a few messages both ways, dense search only."
        ),
    )
    p.add_argument("-k", type=_positive_int, default=2, metavar="K", help="hits per part (default 2)")
    p.set_defaults(func=cmd_demo)


def _byte_limit(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of bytes, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 (no limit) or a positive number of bytes, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _where(text: str) -> dict[str, Any]:
    """A ``--where`` filter: a JSON object that holds to Chroma's ``where`` grammar (else exit 2)."""
    from ..errors import InputError
    from ..storage.schema import stored_where

    try:
        where = json.loads(text)
        if not isinstance(where, dict):
            raise InputError(f"a filter is a JSON object, got {type(where).__name__}")
        stored_where(where)
    except (ValueError, InputError) as e:
        raise argparse.ArgumentTypeError(f"""expected a JSON filter such as '{{"team": "ops"}}': {e}""") from None
    return where
