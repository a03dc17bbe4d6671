# ruff: noqa: T201  (a command-line tool: it prints)
"""The ``ctxret`` command (also ``python -m ctxret``).

Subcommands: ``index``, ``search``, ``stats``, ``reindex``, ``delete``, ``demo`` and ``eval``.
Every subcommand sets ``func(args) -> int`` on its parser; :func:`main` dispatches to it.

Settings come from flags, else environment variables, else defaults (see :data:`ENV`). Store and
embedder options are accepted before or after the subcommand (``ctxret --store X search ...`` and
``ctxret search ... --store X`` are the same).

Exit codes: 0 ok, 1 error (bad file, ctxret error, unreachable store), 2 usage (bad flags or
environment values, unknown file type).
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import CtxretError, InputError
from .evaluation.cli import register_eval

if TYPE_CHECKING:
    from .embedders.base import Embedder
    from .index import ContextualIndex
    from .results import Group, Hit
    from .turns import Turn

__all__ = [
    "main",
    "build_parser",
    "open_index",
    "make_embedder",
    "read_input_file",
    "FileProblem",
    "ENV",
]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

DEFAULT_STORE = ".ctxret"
DEFAULT_COLLECTION = "ctxret"
DEFAULT_CHROMA_PORT = 8000
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
DEMO_COLLECTION = "ctxret-demo"

#: option dest -> environment variable (a flag beats the variable, the variable beats the default).
ENV = {
    "store": "CTXRET_STORE",
    "collection": "CTXRET_COLLECTION",
    "chroma_host": "CTXRET_CHROMA_HOST",
    "chroma_port": "CTXRET_CHROMA_PORT",
    "embedder": "CTXRET_EMBEDDER",
    "model": "CTXRET_OPENAI_MODEL",
    "dims": "CTXRET_DIMS",
    "weight": "CTXRET_WEIGHT",
    "lexical_path": "CTXRET_LEXICAL_PATH",
}

JSONL_SUFFIXES = (".jsonl",)
DOCUMENT_SUFFIXES = (".md", ".markdown", ".txt")

_JSONL_FIX = (
    'each line must be one JSON object: an OpenAI message ({"role": ..., "content": ...}) '
    'or a thread ({"thread_id": ..., "messages": [...]})'
)
_CORE_WHERE = re.compile(r"^message (\d+)(\S*): ")

logger = logging.getLogger(__name__)


class UsageError(Exception):
    """Bad flags or settings: reported with the usage line, exit code 2."""


class FileProblem(CtxretError):
    """A problem in an input file, located at ``path:line`` (the line may be unknown)."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


# ---------------------------------------------------------------------------------------------
# the parser
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The full ``ctxret`` parser (subcommands set ``func``)."""
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
    _add_common_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = argparse.ArgumentParser(add_help=False)
    _add_common_options(common, suppress=True)

    _add_index_parser(sub, common)
    _add_search_parser(sub, common)
    _add_stats_parser(sub, common)
    _add_reindex_parser(sub, common)
    _add_delete_parser(sub, common)
    _add_demo_parser(sub, common)
    register_eval(sub)
    return parser


def _add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    """Store, embedder and output options. On subcommands they default to SUPPRESS so that a value
    given before the subcommand is not overwritten."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    store = parser.add_argument_group("store (default: an embedded Chroma folder)")
    store.add_argument(
        "--store",
        metavar="PATH",
        default=default(None),
        help=f"embedded store folder [env {ENV['store']}; default ./{DEFAULT_STORE}]",
    )
    store.add_argument(
        "--collection",
        metavar="NAME",
        default=default(None),
        help=f"collection name [env {ENV['collection']}; default {DEFAULT_COLLECTION}]",
    )
    store.add_argument(
        "--chroma-host",
        metavar="HOST",
        default=default(None),
        help=f"use a Chroma server instead of a folder [env {ENV['chroma_host']}]",
    )
    store.add_argument(
        "--chroma-port",
        metavar="PORT",
        default=default(None),
        help=f"Chroma server port [env {ENV['chroma_port']}; default {DEFAULT_CHROMA_PORT}]",
    )
    store.add_argument(
        "--lexical-path",
        metavar="FILE",
        default=default(None),
        help="SQLite file of the BM25 index for hybrid search (embedded stores keep one inside the "
        f"store folder; a Chroma server gets one only with this) [env {ENV['lexical_path']}]",
    )

    emb = parser.add_argument_group("embedder")
    emb.add_argument(
        "--embedder",
        choices=("local", "openai"),
        default=default(None),
        help=f"local MiniLM (offline) or OpenAI [env {ENV['embedder']}; default local]; "
        "openai reads OPENAI_API_KEY and OPENAI_BASE_URL",
    )
    emb.add_argument(
        "--model",
        metavar="NAME",
        default=default(None),
        help=f"OpenAI model [env {ENV['model']}; default {DEFAULT_OPENAI_MODEL}]",
    )
    emb.add_argument(
        "--dims",
        metavar="N",
        default=default(None),
        help=f"OpenAI `dimensions` (Matryoshka) [env {ENV['dims']}; default: the model's]",
    )
    emb.add_argument(
        "--weight",
        metavar="W",
        default=default(None),
        help=f"share of a piece's own vector in its stored vector, 0..1 [env {ENV['weight']}; "
        "default 0.8, or the collection's]",
    )

    out = parser.add_argument_group("output")
    out.add_argument(
        "-v", "--verbose", action="store_true", default=default(False), help="log progress details"
    )


def _add_index_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "index",
        parents=[common],
        help="index JSONL threads and .md/.txt documents",
        description=(
            "Index files. JSONL: one OpenAI-format message per line (the file is one thread, named "
            "by --thread or the file name), or one thread object per line "
            '{"thread_id": ..., "messages": [...]}. Documents (.md, .markdown, .txt): split into '
            "sections by headings; the document id, and its thread (search scope) unless --thread "
            "is given, is its path relative to the working directory. Every file is read and "
            "checked before anything is written: if one is bad, nothing is written. A file is a "
            "whole thread: index it again when it changes (unchanged turns cost nothing)."
        ),
    )
    p.add_argument(
        "paths", nargs="+", metavar="PATH", help="files to index (.jsonl, .md, .markdown, .txt)"
    )
    p.add_argument(
        "--thread", metavar="ID", help="thread id (search scope) for everything in these files"
    )
    p.set_defaults(func=cmd_index)


def _add_search_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "search",
        parents=[common],
        help="search: one group of hits per part of the message",
        description=(
            "Split MESSAGE into at most 8 parts; each part (blended with the whole message) keeps "
            "its own group of at most k hits. The text output shows each hit's raw cosine; --json "
            "has every named score (with hybrid search a group is ranked by its fused score)."
        ),
    )
    p.add_argument(
        "message", metavar="MESSAGE", help='the incoming message ("-" reads it from stdin)'
    )
    p.add_argument(
        "-k", type=_positive_int, default=5, metavar="K", help="hits per part (default 5)"
    )
    p.add_argument(
        "--threshold",
        type=_threshold,
        default="auto",
        metavar="COS",
        help="cosine floor per hit: a number, 'none', or 'auto' (the embedder's default; default)",
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


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


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


# ---------------------------------------------------------------------------------------------
# settings -> embedder and index
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Settings:
    """Resolved store and embedder settings (flag > environment > default)."""

    store: str | None
    collection: str
    chroma_host: str | None
    chroma_port: int
    embedder: str
    model: str
    dims: int | None
    weight: float | None
    lexical_path: str | None = None


def resolve_settings(
    args: argparse.Namespace, environ: Mapping[str, str] | None = None
) -> Settings:
    """Combine flags and environment variables; a bad value raises :class:`UsageError`."""
    env = os.environ if environ is None else environ

    def flag(name: str) -> Any:
        return getattr(args, name, None)

    def pick(name: str) -> tuple[str | None, str]:
        value = flag(name)
        if value is not None:
            return str(value), f"--{name.replace('_', '-')}"
        value = env.get(ENV[name])
        if value is not None and value.strip() != "":
            return value.strip(), ENV[name]
        return None, ""

    # Store: a flag beats a variable; a folder and a server chosen at the same level is an error.
    if flag("store") is not None and flag("chroma_host") is not None:
        raise UsageError(
            "choose one store: --store PATH (embedded folder) or --chroma-host HOST (Chroma server)"
        )
    if flag("store") is not None:
        store, host = flag("store"), None
    elif flag("chroma_host") is not None:
        store, host = None, flag("chroma_host")
    else:
        store, host = env.get(ENV["store"]) or None, env.get(ENV["chroma_host"]) or None
        if store and host:
            raise UsageError(
                f"both {ENV['store']} and {ENV['chroma_host']} are set; unset one of them"
            )
    if flag("chroma_port") is not None and host is None:
        raise UsageError("--chroma-port needs --chroma-host (or CTXRET_CHROMA_HOST)")
    port_text, port_from = pick("chroma_port")
    port = DEFAULT_CHROMA_PORT
    if port_text is not None:
        try:
            port = int(port_text)
        except ValueError:
            raise UsageError(f"{port_from}={port_text!r} is not a port number") from None
        if not 0 < port < 65536:
            raise UsageError(f"{port_from}={port_text!r} is not a port number (1-65535)")

    collection = pick("collection")[0] or DEFAULT_COLLECTION

    embedder, embedder_from = pick("embedder")
    embedder = (embedder or "local").lower()
    if embedder not in ("local", "openai"):
        raise UsageError(f"{embedder_from}={embedder!r}: choose 'local' or 'openai'")
    model, model_from = pick("model")
    dims_text, dims_from = pick("dims")
    dims = None
    if dims_text is not None:
        try:
            dims = int(dims_text)
        except ValueError:
            raise UsageError(
                f"{dims_from}={dims_text!r} is not a whole number of dimensions"
            ) from None
        if dims < 1:
            raise UsageError(f"{dims_from}={dims_text!r}: dimensions must be positive")
    if embedder == "local":
        # Only a flag is an error here: a variable may be set for another embedder's use.
        if flag("dims") is not None:
            raise UsageError(
                "--dims applies to --embedder openai; the local model always has 384 dimensions"
            )
        if flag("model") is not None:
            raise UsageError(
                "--model applies to --embedder openai; the local model is all-MiniLM-L6-v2"
            )
        dims, model = None, None
    weight_text, weight_from = pick("weight")
    weight = None
    if weight_text is not None:
        try:
            weight = float(weight_text)
        except ValueError:
            raise UsageError(
                f"{weight_from}={weight_text!r} is not a number between 0 and 1"
            ) from None
        if not 0.0 <= weight <= 1.0:
            raise UsageError(
                f"{weight_from}={weight_text!r}: the weight is between 0 and 1 (default 0.8)"
            )
    return Settings(
        store=store,
        collection=collection,
        chroma_host=host,
        chroma_port=port,
        embedder=embedder,
        model=model or DEFAULT_OPENAI_MODEL,
        dims=dims,
        weight=weight,
        lexical_path=pick("lexical_path")[0] or None,
    )


def make_embedder(settings: Settings) -> Embedder:
    """The embedder the settings name (OpenAI reads ``OPENAI_API_KEY``/``OPENAI_BASE_URL``)."""
    if settings.embedder == "openai":
        from .embedders.openai import OpenAIEmbedder

        return OpenAIEmbedder(
            model=settings.model,
            dimensions=settings.dims,
            base_url=os.environ.get("OPENAI_BASE_URL") or None,
        )
    from .embedders.local import LocalEmbedder

    return LocalEmbedder()


def open_index(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    must_exist: bool = False,
    rebuild: bool = False,
    progress: bool | None = None,
    store: str | None = None,
    collection: str | None = None,
) -> ContextualIndex:
    """Open the index the settings describe (``store`` overrides them with an embedded folder).

    ``must_exist``: refuse to create a store folder or a collection (for search, stats, reindex,
    delete); the error names the collections that do exist.
    """
    from .index import ContextualIndex
    from .store import ChromaStore

    collection = collection or settings.collection
    server = settings.chroma_host is not None and store is None
    if server:
        where: dict[str, Any] = {"host": settings.chroma_host, "port": settings.chroma_port}
    else:
        path = Path(store if store is not None else (settings.store or DEFAULT_STORE)).expanduser()
        if must_exist and not path.exists():
            raise CtxretError(
                f"no index at {str(path)!r}; create it with `ctxret index FILE...` "
                "or pass --store PATH"
            )
        where = {"path": path}

    def connect(make: Any) -> Any:
        if not server:
            return make()
        try:
            return make()
        except CtxretError:
            raise
        except Exception as e:  # chromadb raises plain ValueError/ConnectionError subclasses here
            raise CtxretError(
                f"cannot use the Chroma server at {settings.chroma_host}:{settings.chroma_port} "
                f"({e}); start one with `chroma run --path DIR --port PORT` "
                "or fix --chroma-host/--chroma-port"
            ) from e

    if must_exist:
        probe = connect(lambda: ChromaStore(collection=collection, **where))
        if not probe.exists():
            names = sorted(
                c if isinstance(c, str) else c.name for c in probe.client.list_collections()
            )
            there = ", ".join(names) if names else "none"
            raise CtxretError(
                f"no collection {collection!r} at {probe.location} (collections there: {there}); "
                "create it with `ctxret index FILE...` or choose one with --collection"
            )
    return connect(
        lambda: ContextualIndex(
            **where,
            collection=collection,
            embedder=embedder if embedder is not None else make_embedder(settings),
            weight=settings.weight,
            rebuild=rebuild,
            progress=progress,
            lexical_path=settings.lexical_path,
        )
    )


# ---------------------------------------------------------------------------------------------
# reading input files
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class InputFile:
    """One file read and checked: its turns (not yet written) and the threads they belong to."""

    path: Path
    turns: list[Turn]
    threads: list[str]
    kind: str  # "messages", "threads" or "document"


def check_paths(paths: Sequence[str]) -> list[Path]:
    """Existing files of a supported type; an unknown type raises :class:`UsageError`."""
    out = []
    for name in paths:
        path = Path(name)
        suffix = path.suffix.lower()
        if suffix not in JSONL_SUFFIXES + DOCUMENT_SUFFIXES:
            supported = ", ".join(JSONL_SUFFIXES + DOCUMENT_SUFFIXES)
            raise UsageError(
                f"{name}: unsupported file type {suffix or '(none)'!r}; ctxret indexes {supported}"
            )
        if path.is_dir():
            raise UsageError(f"{name}: is a folder; pass its files (e.g. {name}/*.jsonl)")
        if not path.exists():
            raise FileProblem(name, None, "no such file")
        out.append(path)
    return out


def read_input_file(path: Path, thread: str | None = None) -> InputFile:
    """Read and check one file completely; any problem raises :class:`FileProblem` with its line."""
    if path.suffix.lower() in JSONL_SUFFIXES:
        return _read_jsonl(path, thread)
    return _read_document(path, thread)


def _decode_lines(path: Path) -> list[tuple[int, str]]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FileProblem(path, None, f"cannot read it ({e.strerror or e})") from e
    lines = []
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise FileProblem(
                path,
                number,
                f"not valid UTF-8 (byte {e.start + 1} of the line); save the file as UTF-8",
            ) from None
        if number == 1:
            text = text.removeprefix("\ufeff")
        lines.append((number, text))
    return lines


def _read_jsonl(path: Path, thread: str | None) -> InputFile:
    from .turns import turns_from_messages

    records: list[tuple[int, dict[str, Any]]] = []
    kind: str | None = None
    for number, text in _decode_lines(path):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise FileProblem(
                path, number, f"invalid JSON at column {e.colno} ({e.msg}); {_JSONL_FIX}"
            ) from None
        if not isinstance(obj, dict):
            raise FileProblem(
                path, number, f"expected a JSON object, got {type(obj).__name__}; {_JSONL_FIX}"
            )
        this = "threads" if "messages" in obj else "messages" if "role" in obj else None
        if this is None:
            raise FileProblem(
                path, number, f"the object has neither 'role' nor 'messages'; {_JSONL_FIX}"
            )
        if kind is None:
            kind = this
        elif this != kind:
            first = "thread objects" if kind == "threads" else "single messages"
            raise FileProblem(
                path,
                number,
                f"the file started with {first} but this line is not one; use one form per file",
            )
        records.append((number, obj))
    if not records:
        return InputFile(path, [], [], kind or "messages")

    turns: list[Turn] = []
    next_turn: dict[str, int] = {}

    def convert(
        messages: list[Any], thread_id: str, line_of_message: Any, line: int, label: str
    ) -> None:
        """Turns of ``messages``; a core error is located at the line of the message it names."""
        first = next_turn.get(thread_id, 1)
        try:
            new = turns_from_messages(messages, thread_id, first_turn=first)
        except InputError as e:
            text = str(e)
            m = _CORE_WHERE.match(text)
            if m is None:
                raise FileProblem(path, line, f"{label}{text}") from None
            i, field = int(m.group(1)), m.group(2).lstrip(".")
            if label:  # a thread object: the line holds many messages, name the one at fault
                where = f"{label}message {i}{m.group(2)}: "
            else:  # one message per line: the line is the message
                where = f"{field}: " if field else ""
            raise FileProblem(path, line_of_message(i), where + text[m.end() :]) from None
        turns.extend(new)
        if new:
            next_turn[thread_id] = new[-1].index + 1

    if kind == "messages":
        thread_id = thread or path.stem
        convert([obj for _, obj in records], thread_id, lambda i: records[i][0], records[0][0], "")
    else:
        for number, obj in records:
            messages = obj["messages"]
            if not isinstance(messages, list):
                raise FileProblem(
                    path,
                    number,
                    f"'messages' must be a list of message objects, got {type(messages).__name__}",
                )
            own = obj.get("thread_id")
            if thread is None and (not isinstance(own, str) or not own.strip()):
                raise FileProblem(
                    path,
                    number,
                    "the thread object needs a non-empty string 'thread_id' "
                    f"(got {own!r}), or pass --thread",
                )
            label = f"thread {own!r}, " if isinstance(own, str) and own.strip() else "thread, "
            convert(messages, thread or own, lambda i, n=number: n, number, label)
    threads = sorted({t.thread_id for t in turns})
    return InputFile(path, turns, threads, kind)


def document_key(path: Path) -> str:
    """A document file's id: its path relative to the working directory (else absolute), with ``/``.

    Indexing the same file again replaces its changed sections; the id is also the default thread.
    """
    resolved = path.resolve()
    try:
        return resolved.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return resolved.as_posix()


def _read_document(path: Path, thread: str | None) -> InputFile:
    from .documents import document_turns

    lines = _decode_lines(path)  # checks the encoding line by line
    text = "\n".join(line for _, line in lines)
    try:
        turns = document_turns(text, title=path.name, doc_id=document_key(path), thread_id=thread)
    except InputError as e:
        raise FileProblem(path, None, str(e)) from None
    return InputFile(path, turns, sorted({t.thread_id for t in turns}), "document")


# ---------------------------------------------------------------------------------------------
# commands
# ---------------------------------------------------------------------------------------------
def cmd_index(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    if args.thread is not None and not args.thread.strip():
        raise UsageError("--thread needs a non-empty id")
    paths = check_paths(args.paths)
    files, problems = [], []
    for path in paths:  # read and check everything before anything is written
        try:
            files.append(read_input_file(path, args.thread))
        except FileProblem as e:
            problems.append(e)
    if problems:
        for e in problems:
            _error(str(e))
        _error(f"nothing was written ({len(problems)} of {len(paths)} file(s) had problems)")
        return EXIT_ERROR
    index = open_index(settings)
    for f in files:  # pieces are sized to the model before anything is written, too
        for turn in f.turns:
            try:
                index.fit_pieces(turn)
            except InputError as e:
                problems.append(FileProblem(f.path, None, f"{turn.label}: {e}"))
                break
    if problems:
        for e in problems:
            _error(str(e))
        _error(f"nothing was written ({len(problems)} of {len(paths)} file(s) had problems)")
        return EXIT_ERROR
    done: list[str] = []
    for f in files:
        if not f.turns:
            _warn(f"{f.path}: nothing to index (no text)")
            continue
        started = time.perf_counter()
        try:
            result = index.add_turns(f.turns)
        except CtxretError as e:  # e.g. the embedding service failed: this file was not written
            _error(f"{f.path}: {e}")
            written = ", ".join(done) if done else "none"
            _error(f"{f.path} and the files after it were not written (already indexed: {written})")
            return EXIT_ERROR
        done.append(str(f.path))
        threads = ", ".join(f.threads[:5])
        if len(f.threads) > 5:
            threads += f" and {len(f.threads) - 5} more"
        unit = "section" if f.kind == "document" else "turn"
        print(
            f"{f.path}: {result.turns} {unit}(s) in thread {threads}: "
            f"{result.added} piece(s) added, {result.unchanged} unchanged, "
            f"{result.replaced} replaced ({time.perf_counter() - started:.1f}s)"
        )
    store = index.store
    print(f"store {store.location} (collection {store.collection_name}): {store.count()} pieces")
    return EXIT_OK


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ContextualIndex.search`` keywords from the ``search`` flags (new search flags map here)."""
    hybrid = {
        key: value
        for key, value in (
            ("lexical", getattr(args, "lexical", None)),
            ("fusion", getattr(args, "fusion", None)),
            ("lexical_weight", getattr(args, "lexical_weight", None)),
        )
        if value is not None
    }
    return {
        "k": args.k,
        "score_threshold": args.threshold,
        "thread_id": args.thread,
        "split": args.split,
        **hybrid,
    }


def cmd_search(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    message = sys.stdin.read() if args.message == "-" else args.message
    index = open_index(settings, must_exist=True)
    groups = index.search(message, **search_options(args))
    floor = index.score_threshold if args.threshold == "auto" else args.threshold
    if args.json:
        print(
            json.dumps(_search_json(message, groups, args.k, floor), ensure_ascii=False, indent=2)
        )
        return EXIT_OK
    if not groups:
        print("(empty message: nothing to search)")
        return EXIT_OK
    width = _width()
    for group in groups:
        print(_clip(f"Part {group.part_index + 1}: {_one_line(group.part)}", width))
        if not group.hits:
            print(f"  (no hit{_floor_text(floor)})")
        for hit in group.hits:
            print(_hit_line(hit, width))
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    index = open_index(settings, must_exist=True)
    stats = index.stats()
    per_thread: dict[str, int] = {}
    for rec in index.store.iter_records(None):
        tid = str((rec["metadata"] or {}).get("thread_id"))
        per_thread[tid] = per_thread.get(tid, 0) + 1
    stats["pieces_per_thread"] = dict(sorted(per_thread.items()))
    if args.json:
        print(json.dumps(stats, ensure_ascii=False, indent=2, default=str))
        return EXIT_OK
    cfg = stats["config"]
    floor = stats["score_threshold"]
    rows = [
        ("store", f"{stats['store']} (collection {stats['collection']})"),
        ("pieces", stats["pieces"]),
        ("turns", stats["turns"]),
        ("threads", stats["threads"]),
        ("embedder", f"{cfg.get('model_id')} ({cfg.get('dims')} dims)"),
        ("weight", cfg.get("weight")),
        ("context", cfg.get("context")),
        ("piece bytes", cfg.get("piece_bytes")),
        (
            "floor",
            "none"
            if floor is None
            else f"cosine {floor:.2f} (the default for search --threshold auto)",
        ),
    ]
    for name, value in rows:
        print(f"{name:<12} {value}")
    shown = list(per_thread.items())[:20]
    for tid, n in sorted(shown):
        print(f"  {tid:<30} {n} pieces")
    if len(per_thread) > len(shown):
        print(f"  ... and {len(per_thread) - len(shown)} more threads (--json lists all)")
    return EXIT_OK


def cmd_reindex(args: argparse.Namespace) -> int:
    from .errors import ConfigMismatchError

    settings = resolve_settings(args)
    embedder = make_embedder(settings)
    started = time.perf_counter()
    try:
        index = open_index(settings, embedder=embedder, must_exist=True)
    except ConfigMismatchError:
        # New options: opening with rebuild=True re-embeds every stored piece under them.
        index = open_index(settings, embedder=embedder, must_exist=True, rebuild=True)
        result = None
    else:
        result = index.reindex()
    stats = index.stats()
    cfg = index.config
    done = (
        f"{result.turns} turns, {result.added} pieces"
        if result is not None
        else f"{stats['turns']} turns, {stats['pieces']} pieces"
    )
    print(
        f"rebuilt {index.store.location} (collection {index.store.collection_name}): {done} "
        f"re-embedded with {cfg['model_id']} ({cfg['dims']} dims), weight {cfg['weight']} "
        f"({time.perf_counter() - started:.1f}s)"
    )
    return EXIT_OK


def cmd_delete(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    index = open_index(settings, must_exist=True)
    for thread in args.thread:
        n = index.delete(thread_id=thread)
        print(
            f"deleted {n} piece(s) of thread {thread!r}"
            if n
            else f"thread {thread!r}: nothing to delete"
        )
    return EXIT_OK


# ---------------------------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------------------------
def demo_files() -> tuple[Path, Path]:
    """The bundled sample threads and messages."""
    data = resources.files("ctxret") / "data"
    return Path(str(data / "demo_threads.jsonl")), Path(str(data / "demo_queries.json"))


def cmd_demo(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    threads_path, queries_path = demo_files()
    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    sample = read_input_file(threads_path)
    # Only an explicit --store/--chroma-host is used: CTXRET_STORE must not get the samples.
    explicit_store = (
        getattr(args, "store", None) is not None or getattr(args, "chroma_host", None) is not None
    )
    collection = getattr(args, "collection", None) or DEMO_COLLECTION
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxret-demo-", ignore_cleanup_errors=True) as tmp:
        index = open_index(
            settings, store=None if explicit_store else tmp, collection=collection, progress=False
        )
        result = index.add_turns(sample.turns)
        where = index.store.location if explicit_store else "a temporary folder"
        floor = index.score_threshold
        names = ", ".join(sample.threads)
        print(
            f"ctxret demo: indexed {len(sample.threads)} sample agent threads ({names}): "
            f"{result.turns} turns, {result.added + result.unchanged} labelled pieces"
        )
        print(f"in {where} ({time.perf_counter() - started:.1f}s).")
        cfg = index.config
        print(
            f"embedder {cfg['model_id']} ({cfg['dims']} dims), weight {index.weight}, "
            f"k = {args.k} per part{_floor_text(floor)}; dense search on both sides (the last "
            "line of each message adds the default hybrid search), scores are raw cosine"
        )
        for n, query in enumerate(queries, start=1):
            _demo_query(index, query, n, len(queries), args.k, floor)
        print()
        print(
            f"done in {time.perf_counter() - started:.1f}s. "
            'Index your own: ctxret index FILE.jsonl; then ctxret search "your message"'
        )
    return EXIT_OK


def _demo_query(
    index: ContextualIndex, query: dict[str, Any], n: int, total: int, k: int, floor: float | None
) -> None:
    width = _width()
    message, thread = query["message"], query.get("thread_id")
    focus = _expected(query)
    dense = _dense_only(index)
    groups = index.search(message, k=k, thread_id=thread, **dense)
    budget = max(k, sum(len(g) for g in groups))
    single = index.search(message, k=budget, thread_id=thread, split=False, **dense)
    single_hits = single[0].hits if single else ()
    print()
    print(_rule(f" {n}/{total} · thread {thread} ", width))
    print(
        _clip(
            f'Message ({len(message):,} characters, {len(groups)} part(s)): "{_one_line(message)}"',
            width,
        )
    )
    if query.get("note"):
        print(_clip(f"Look for: {_one_line(query['note'])}", width, lines=2))
    print(f"-- per-part groups (each part searches on its own, up to {k} hits each):")
    for group in groups:
        print(_clip(f"Part {group.part_index + 1}: {_one_line(group.part)}", width))
        if not group.hits:
            print(f"  (no hit{_floor_text(floor)})")
        for hit in group.hits:
            print(_hit_line(hit, width, focus))
    shown = min(len(single_hits), max(k, 5))
    print(
        f"-- one whole-message vector (the same budget: up to {budget} hits; "
        f"{len(single_hits)} above the floor, first {shown} shown):"
    )
    for hit in single_hits[:shown]:
        print(_hit_line(hit, width, focus))
    if not single_hits:
        print(f"  (no hit{_floor_text(floor)})")
    print(_verdict(query, groups, single_hits, width))
    if focus and getattr(index, "lexical_index", None) is not None:
        hybrid = index.search(message, k=k, thread_id=thread)  # the product default
        found = "; ".join(f"{fact!r}: {_found_in_groups(hybrid, fact)}" for fact in focus)
        print(_clip(f"   with hybrid search (the default: BM25 fused inside each group): {found}", width, lines=2))


def _expected(query: dict[str, Any]) -> list[str]:
    """The facts a demo message should bring back (optional ``expect``: a string or a list)."""
    expect = query.get("expect") or []
    return [expect] if isinstance(expect, str) else [str(e) for e in expect]


def _dense_only(index: ContextualIndex) -> dict[str, Any]:
    """Search keywords that turn hybrid (BM25) search off, when this core has it: the demo compares
    vectors with vectors."""
    return {"lexical": False} if "lexical" in inspect.signature(index.search).parameters else {}


def _found_in_groups(groups: Sequence[Group], fact: str) -> str:
    for g in groups:
        for rank, hit in enumerate(g.hits, start=1):
            if fact.lower() in hit.text.lower():
                return f"yes (Part {g.part_index + 1}, #{rank})"
    return "NO"


def _verdict(
    query: dict[str, Any], groups: Sequence[Group], single: Sequence[Hit], width: int
) -> str:
    """One line: where the expected facts are in the groups and in the single vector's list."""
    expect = _expected(query)
    if not expect:  # no facts named: where does each part's best hit rank in the single list?
        ranks = {hit.id: rank for rank, hit in enumerate(single, start=1)}
        leaders = [
            f"Part {g.part_index + 1} #{ranks[g.hits[0].id]}"
            if g.hits[0].id in ranks
            else f"Part {g.part_index + 1} absent"
            for g in groups
            if g.hits
        ]
        listing = ", ".join(leaders) or "none"
        return _clip(
            f"=> rank of each part's best hit in the single vector's top {len(single)}: {listing}",
            width,
            lines=2,
        )

    def found_in_single(fact: str) -> str:
        for rank, hit in enumerate(single, start=1):
            if fact.lower() in hit.text.lower():
                return f"yes (#{rank} of {len(single)})"
        return f"NO (not in its top {len(single)})"

    parts = [
        f"{fact!r}: groups {_found_in_groups(groups, fact)} | single vector {found_in_single(fact)}"
        for fact in expect
    ]
    return _clip("=> " + "; ".join(parts), width, lines=3)


# ---------------------------------------------------------------------------------------------
# output helpers
# ---------------------------------------------------------------------------------------------
def _search_json(
    message: str, groups: Sequence[Group], k: int, floor: float | None
) -> dict[str, Any]:
    return {
        "message": message,
        "k": k,
        "score_threshold": floor,
        # what each hit's "score" is: the raw cosine, or the fused score with hybrid search
        "score_scale": "fused" if any("fused" in h.scores for g in groups for h in g) else "cosine",
        "groups": [
            {
                "part_index": g.part_index,
                "part": g.part,
                "hits": [
                    {
                        "id": h.id,
                        "score": h.score,
                        "scores": dict(h.scores),
                        "header": str(h.metadata.get("header", "")),
                        "text": h.text,
                        "metadata": dict(h.metadata),
                    }
                    for h in g.hits
                ],
            }
            for g in groups
        ],
    }


def _hit_line(hit: Hit, width: int, focus: Sequence[str] = ()) -> str:
    """``  0.612  [Turn 4 · Tool logistics_export · …]  snippet…`` with the hit's cosine.

    With hybrid search a group is ranked by its fused score, so the line shows both:
    ``  fused 0.913 cos 0.552  [header]  snippet`` (``--json`` has every named score). With
    ``focus``, the snippet starts near the first focus word the body contains.
    """
    cosine = hit.scores.get("cosine", hit.score)
    header = str(hit.metadata.get("header", ""))
    if "fused" in hit.scores:
        lead = f"  fused {hit.scores['fused']:5.3f} cos {cosine:6.3f}  {header}  "
    else:
        lead = f"  {cosine:6.3f}  {header}  "
    body = _one_line(hit.body)
    room = width - len(lead)
    for word in focus:
        at = body.lower().find(word.lower())
        if at >= 0 and at + len(word) > room - 1:
            start = max(0, at - max(10, (room - len(word)) // 3))
            body = "…" + body[start:]
            break
    return _clip(lead + body, width)


def _floor_text(floor: float | None) -> str:
    return "" if floor is None else f" at cosine >= {floor:.2f}"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _clip(text: str, width: int, lines: int = 1) -> str:
    limit = width * lines
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _rule(title: str, width: int) -> str:
    return ("=" * 3 + title).ljust(min(width, 100), "=")


def _width() -> int:
    return max(60, min(160, shutil.get_terminal_size((100, 24)).columns))


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``ctxret`` command; returns the exit code (0 ok, 1 error, 2 usage)."""
    parser = build_parser()
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
        _error(str(e))
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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
