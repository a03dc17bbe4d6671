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
from .settings import DEMO_COLLECTION, add_common_options

__all__ = ["build_parser"]


#: The ``eval`` command's line in ``ctxret --help`` (the same words as :func:`ctxret.cli.evaluate.register_eval`'s).
EVAL_HELP = "measure retrieval on fixtures or threads"


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``ctxret`` parser (subcommands set ``func``).

    ``argv``: the arguments it will parse. Unless they name ``eval``, the ``eval`` command is a placeholder
    that only lists it (importing the harness costs a third of ``stats``' start-up); ``None`` builds it whole.
    """
    parser = argparse.ArgumentParser(
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
        "--include", action="append", metavar="GLOB",
        help=f"in folders, index files matching GLOB (repeatable; default {' '.join(DEFAULT_INCLUDE)})",
    )
    p.add_argument(
        "--exclude", action="append", metavar="GLOB", help="in folders, skip files matching GLOB (repeatable)"
    )
    p.add_argument(
        "--root", metavar="DIR",
        help="document ids are paths relative to DIR (default: the common folder of the documents given); "
        "pass the same root every time you index parts of one tree",
    )
    p.add_argument(
        "--max-bytes", type=_byte_limit, default=None, metavar="N",
        help="refuse a turn or section over N bytes (default 2000000; 0 for no limit)",
    )
    p.add_argument(
        "--thread", metavar="ID", help="thread id (search scope) for everything in these files"
    )
    p.add_argument(
        "--prune", action="store_true",
        help="also remove the stored documents of the folders given whose file is gone (listed before removal)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="read and check everything, list what --prune removes, write nothing"
    )
    p.add_argument(
        "-q", "--quiet", action="store_true",
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
    p.add_argument(
        "message", metavar="MESSAGE", help='the incoming message ("-" reads it from stdin)'
    )
    p.add_argument(
        "-k", type=_positive_int, default=5, metavar="K", help="hits per part (default 5)"
    )
    p.add_argument(
        "--cosine-floor",
        "--threshold",
        dest="threshold",
        type=_threshold,
        default="auto",
        metavar="COS",
        help="cosine floor: a part is empty unless one of its first hits clears it, hits are kept down to half of "
        "it; a number, 'none', or 'auto' (the embedder's default; default)",
    )
    p.add_argument(
        "--where",
        type=_where,
        default=None,
        metavar="JSON",
        help="a filter on metadata (a Chroma where): your keys by the names you gave them, ctxret's fields as "
        """'ctxret:<field>', e.g. '{"team": "ops"}' or '{"ctxret:source_kind": "tool"}'""",
    )
    p.add_argument(
        "--thread", action="append", metavar="ID", help="search only this thread (repeatable)"
    )
    p.add_argument(
        "--no-split",
        dest="split",
        action="store_false",
        help="one whole-message vector instead of per-part groups (the baseline)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--lexical",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="hybrid search: BM25 per part fused with the dense search (default: on for an "
        "embedded or in-memory store, off for a Chroma server)",
    )
    p.add_argument(
        "--fusion",
        choices=["convex", "rrf", "weighted_rrf"],
        default=None,
        help="how each part's dense and BM25 hits are fused (default convex)",
    )
    p.add_argument(
        "--lexical-weight",
        type=float,
        default=None,
        metavar="W",
        help="weight of the BM25 side for convex / weighted_rrf, 0-1 (default 0.7)",
    )
    p.add_argument(
        "--parents",
        action="store_true",
        help="attach each hit's whole turn or section (one hit per parent in a part; --json: parent_text)",
    )
    p.add_argument(
        "--deadline-ms",
        type=_positive_float,
        default=None,
        metavar="MS",
        help="return within MS milliseconds: a stage that would overrun (lexical, views, parents) is skipped "
        "and the output says so (default: no deadline)",
    )
    p.add_argument(
        "--per",
        choices=("piece", "section", "document"),
        default=None,
        help="what one hit is: a stored piece (default), a section, or a document (one hit per document, scored "
        "by its best piece + 0.25 x its second best; -k documents per part)",
    )
    p.add_argument(
        "--now",
        type=_time,
        default=None,
        metavar="TIME",
        help="the search's time, ISO 8601 (e.g. 2024-03-01T12:00): what 'yesterday' or 'last week' in the "
        "message are read against (default: the current time)",
    )
    p.add_argument(
        "--since", type=_time, default=None, metavar="TIME", help="only pieces stamped at or after TIME (ISO 8601)"
    )
    p.add_argument(
        "--until", type=_time, default=None, metavar="TIME", help="only pieces stamped before TIME (ISO 8601)"
    )
    p.add_argument(
        "--recency-half-life",
        type=float,
        default=None,
        metavar="SECONDS",
        help="blend recency into each part's order: a hit's score times 0.5 ** (age / SECONDS), e.g. 604800 "
        "for a week (default: off; see docs/time.md)",
    )
    # more search flags go here and into search_options()
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
    p.add_argument(
        "-k", type=_positive_int, default=2, metavar="K", help="hits per part (default 2)"
    )
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


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _time(text: str) -> str:
    """An ISO-8601 time (checked here: a bad one is a usage error, exit 2)."""
    from ..errors import InputError
    from ..ingest.turns import parse_time

    try:
        parsed = parse_time(text.strip(), "time") if text.strip() else None
    except InputError:
        parsed = None
    if parsed is None:
        raise argparse.ArgumentTypeError(f"expected an ISO-8601 time (e.g. 2026-10-16T14:02), got {text!r}")
    return text.strip()


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


def _threshold(text: str) -> float | str | None:
    low = text.strip().lower()
    if low == "auto":
        return "auto"
    if low in ("none", "off"):
        return None
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a cosine (e.g. 0.35), 'none' or 'auto', got {text!r}"
        ) from None
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a cosine floor is between -1 and 1, got {text!r}")
    return value


