# ruff: noqa: T201  (a command-line tool: it prints)
"""CLI settings: flags, then environment variables, then defaults; the embedder and index they describe.

Every command, ``eval`` included, builds its embedder and index here, so one option vocabulary
means the same thing everywhere.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from ..embedders.registry import EmbedderOptions, build_embedder, choices_text, embedder_kinds
from ..embedders.registry import describe_embedder as describe_kind
from ..errors import CtxretError, StoreError

if TYPE_CHECKING:
    from ..embedders.base import Embedder
    from ..storage.pieces import PieceStore

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
    "wait": "CTXRET_WAIT",
    "openai_timeout": "CTXRET_OPENAI_TIMEOUT",
    "openai_retries": "CTXRET_OPENAI_RETRIES",
}
DEFAULT_OPENAI_TIMEOUT = 60.0
DEFAULT_OPENAI_RETRIES = 5


def add_common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
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
    store.add_argument(
        "--wait",
        metavar="SECONDS",
        default=default(None),
        help="if another process holds the store folder, wait up to SECONDS for it instead of failing at once "
        f"('inf': until it lets go) [env {ENV['wait']}; default 0]",
    )

    emb = parser.add_argument_group("embedder")
    emb.add_argument(
        "--embedder",
        choices=embedder_kinds(),
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
        help=f"share of a piece's own vector in its stored vector, 0..1 [env {ENV['weight']}; default: the "
        "collection's, else 0 for the local model (late chunking: the piece's tokens read in their whole turn), "
        "0.8 for OpenAI (blended with the turn's mean)]",
    )
    emb.add_argument(
        "--openai-timeout",
        metavar="SECONDS",
        default=default(None),
        help=(
            "seconds one OpenAI request attempt may take "
            f"[env {ENV['openai_timeout']}; default {DEFAULT_OPENAI_TIMEOUT:g}]"
        ),
    )
    emb.add_argument(
        "--openai-retries",
        metavar="N",
        default=default(None),
        help="retries of a failed OpenAI request (429, 5xx, timeouts, malformed answers) "
        f"[env {ENV['openai_retries']}; default {DEFAULT_OPENAI_RETRIES}]",
    )

    out = parser.add_argument_group("output")
    out.add_argument("-v", "--verbose", action="store_true", default=default(False), help="log progress details")


class CliParser(argparse.ArgumentParser):
    """An argument parser whose errors take one line: the command, the problem and where to read the usage
    (argparse prints the whole usage first, some 30 lines for ``search``, above its one-line error). Its subcommands'
    parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class UsageError(Exception):
    """Bad flags or settings: reported with the usage line, exit code 2."""


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
    openai_timeout: float = DEFAULT_OPENAI_TIMEOUT
    openai_retries: int = DEFAULT_OPENAI_RETRIES
    wait: float = 0.0


def resolve_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
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
        raise UsageError("choose one store: --store PATH (embedded folder) or --chroma-host HOST (Chroma server)")
    if flag("store") is not None:
        store, host = flag("store"), None
    elif flag("chroma_host") is not None:
        store, host = None, flag("chroma_host")
    else:
        store, host = env.get(ENV["store"]) or None, env.get(ENV["chroma_host"]) or None
        if store and host:
            raise UsageError(f"both {ENV['store']} and {ENV['chroma_host']} are set; unset one of them")
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
    embedder = (embedder or embedder_kinds()[0]).lower()
    if embedder not in embedder_kinds():
        raise UsageError(f"{embedder_from}={embedder!r}: choose {choices_text()}")
    model, model_from = pick("model")
    dims_text, dims_from = pick("dims")
    dims = None
    if dims_text is not None:
        try:
            dims = int(dims_text)
        except ValueError:
            raise UsageError(f"{dims_from}={dims_text!r} is not a whole number of dimensions") from None
        if dims < 1:
            raise UsageError(f"{dims_from}={dims_text!r}: dimensions must be positive")
    if embedder == "local":
        # Only a flag is an error here: a variable may be set for another embedder's use.
        if flag("dims") is not None:
            raise UsageError("--dims applies to --embedder openai; the local model always has 384 dimensions")
        if flag("model") is not None:
            raise UsageError("--model applies to --embedder openai; the local model is all-MiniLM-L6-v2")
        dims, model = None, None
    weight_text, weight_from = pick("weight")
    weight = None
    if weight_text is not None:
        try:
            weight = float(weight_text)
        except ValueError:
            raise UsageError(f"{weight_from}={weight_text!r} is not a number between 0 and 1") from None
        if not 0.0 <= weight <= 1.0:
            raise UsageError(f"{weight_from}={weight_text!r}: the weight is between 0 and 1 (default 0.8)")
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
        openai_timeout=_number(pick("openai_timeout"), float, DEFAULT_OPENAI_TIMEOUT, "a number of seconds > 0"),
        openai_retries=_number(pick("openai_retries"), int, DEFAULT_OPENAI_RETRIES, "a whole number >= 0"),
        wait=_number(pick("wait"), float, 0.0, "a number of seconds >= 0", zero=True),
    )


def _number(picked: tuple[str | None, str], kind: type, default: Any, what: str, *, zero: bool = False) -> Any:
    text, source = picked
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(f"{source}={text!r} is not {what}") from None
    if not value >= 0 or (kind is float and value == 0 and not zero):
        raise UsageError(f"{source}={text!r} is not {what}")
    return value


def embedder_options(settings: Settings) -> EmbedderOptions:
    """What the settings say about the embedder (``OPENAI_BASE_URL`` read here); each kind reads what applies."""
    return EmbedderOptions(
        model=settings.model,
        dimensions=settings.dims,
        base_url=os.environ.get("OPENAI_BASE_URL") or None,
        timeout=settings.openai_timeout,
        max_retries=settings.openai_retries,
    )


def make_embedder(settings: Settings, *, shared: bool = False) -> Embedder:
    """The embedder the settings name, from the registry (:mod:`ctxret.embedders.registry`; OpenAI reads
    ``OPENAI_API_KEY``/``OPENAI_BASE_URL``). ``shared``: the process's one instance where the kind has one (the
    local model)."""
    return build_embedder(settings.embedder, embedder_options(settings), shared=shared)


def describe_embedder(settings: Settings) -> Any:
    """What the settings' embedder would record and default to (``model_id``, ``dims``, ``max_tokens``, its
    defaults), for ``stats``: the local model is described from its class, never loaded; OpenAI's embedder is
    built (a client: no request is sent)."""
    return describe_kind(settings.embedder, embedder_options(settings))


def _location(settings: Settings, store: str | None, must_exist: bool) -> tuple[bool, dict[str, Any]]:
    """``(server?, the store's ChromaStore keywords)``; ``must_exist``: a missing folder is an error."""
    if settings.chroma_host is not None and store is None:
        return True, {"host": settings.chroma_host, "port": settings.chroma_port}
    path = Path(store if store is not None else (settings.store or DEFAULT_STORE)).expanduser()
    if must_exist:
        from ..storage.config_copy import holds_store

        if not holds_store(path):  # checked before anything opens it: nothing is created in the folder
            what = "no such folder" if not path.exists() else "the folder holds no ctxret store"
            raise CtxretError(
                f"no index at {str(path)!r} ({what}); create one with `ctxret index FILE... --store {path}`, "
                "or pass --store PATH of an existing one"
            )
    return False, {"path": path, "lock_timeout": settings.wait}


def _connect(settings: Settings, server: bool, make: Any) -> Any:
    """``make()``; on a server, a connection failure becomes a StoreError that says how to fix it."""
    if not server:
        return make()
    try:
        return make()
    except CtxretError:
        raise
    except Exception as e:  # chromadb raises plain ValueError/ConnectionError subclasses here
        raise StoreError(
            f"cannot use the Chroma server at {settings.chroma_host}:{settings.chroma_port} "
            f"({e}); start one with `chroma run --path DIR --port PORT` "
            "or fix --chroma-host/--chroma-port"
        ) from e


def _require_collection(
    settings: Settings, server: bool, where: dict[str, Any], collection: str, *, keep: bool = False
) -> Any:
    """Refuse a collection that does not exist (the error names those that do); ``keep``: return the open
    :class:`~ctxret.storage.chroma.ChromaStore` instead of closing it (a second client costs ~0.5 s)."""
    from ..storage.chroma import ChromaStore

    probe = _connect(settings, server, lambda: ChromaStore(collection=collection, **where))
    try:
        if not probe.exists():
            names = probe.names()
            there = ", ".join(names) if names else "none"
            raise CtxretError(
                f"no collection {collection!r} at {probe.location} (collections there: {there}); "
                "create it with `ctxret index FILE...` or choose one with --collection"
            )
    except BaseException:
        probe.close()
        raise
    if keep:
        return probe
    probe.close()
    return None


def index_exists(settings: Settings) -> bool:
    """Whether the store the settings name holds their collection, found without creating anything: an embedded
    folder's database file read as it is (any doubt: ``False``), a server asked. ``ctxret index`` opens (and so
    creates) the store only once everything it will write is checked."""
    server, where = _location(settings, None, must_exist=False)
    if not server:
        from ..storage.config_copy import lists_collection

        return lists_collection(where["path"], settings.collection)
    from ..storage.chroma import ChromaStore

    probe = _connect(settings, server, lambda: ChromaStore(collection=settings.collection, **where))
    try:
        return bool(probe.exists())
    finally:
        probe.close()


def quick_store_stats(settings: Settings) -> dict[str, Any] | None:
    """``stats`` of an embedded store from its lexical file alone (counts and the config copy; see
    :mod:`ctxret.storage.config_copy`), or ``None`` when the file cannot answer on its own (a server, no
    file, a write announced, no copy yet): then :func:`open_store` asks Chroma."""
    from ..storage.config_copy import quick_stats
    from ..storage.lexical import default_lexical_path

    server, where = _location(settings, None, must_exist=True)
    if server:
        return None
    folder = where["path"]
    lexical = settings.lexical_path or default_lexical_path(folder, settings.collection)
    return quick_stats(folder, lexical, settings.collection)


def open_store(settings: Settings, *, writable: bool = False) -> PieceStore:
    """The existing collection the settings name, as a store, without an embedder (``stats``, ``delete``).

    Read-only (default): whatever config the collection was built with, nothing repaired or written (the
    lexical file only gives the counts, when it is in step). ``writable``: opened as an index opens them (an
    interrupted rebuild finished, the lexical file repaired if a crash left it behind), so that a delete keeps
    both in step. The BM25 postings are never read into memory (only searches do that).
    """
    from ..storage.lexical import LexicalIndex, default_lexical_path
    from ..storage.pieces import PieceStore, open_piece_store
    from ..storage.rebuild import recover

    server, where = _location(settings, None, must_exist=True)
    if not writable:
        chroma = _require_collection(settings, server, where, settings.collection, keep=True)
        lexical_path = settings.lexical_path
        if lexical_path is None and not server:
            lexical_path = str(default_lexical_path(where["path"], settings.collection))
        lexical = None
        if lexical_path and Path(lexical_path).is_file():
            try:
                lexical = LexicalIndex(lexical_path)
            except CtxretError:  # e.g. a Python whose SQLite has no FTS5: the counts come from Chroma
                lexical = None
        return PieceStore(chroma, lexical)
    _require_collection(settings, server, where, settings.collection)
    store: PieceStore = _connect(
        settings,
        server,
        lambda: open_piece_store(**where, collection=settings.collection, lexical_path=settings.lexical_path),
    )
    try:
        recover(store)  # an interrupted rebuild's collection holds the config to read
        store.open(store.stored_config() or {})
        store.sync_lexical()
    except BaseException:
        store.close()
        raise
    return store


def open_index(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    must_exist: bool = False,
    rebuild: bool = False,
    progress: bool | None = None,
    store: str | None = None,
    collection: str | None = None,
    max_turn_bytes: int | None = None,
) -> Any:
    """Open the index the settings describe (``store`` overrides them with an embedded folder).

    ``must_exist``: refuse to create a store folder or a collection (for search and reindex); the error
    names the collections that do exist. (``stats`` and ``delete`` need no model: :func:`open_store`.)
    """
    from ..index import ContextualIndex
    from ..ingest.plan import DEFAULT_MAX_TURN_BYTES

    collection = collection or settings.collection
    server, where = _location(settings, store, must_exist)
    if must_exist:
        _require_collection(settings, server, where, collection)
    opener = ContextualIndex.rebuild if rebuild else ContextualIndex
    return _connect(
        settings,
        server,
        lambda: opener(
            **where,
            collection=collection,
            embedder=embedder if embedder is not None else make_embedder(settings),
            weight=settings.weight,
            progress=progress,
            lexical_path=settings.lexical_path,
            max_turn_bytes=DEFAULT_MAX_TURN_BYTES if max_turn_bytes is None else max_turn_bytes,
        ),
    )
