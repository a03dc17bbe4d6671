"""``Store``: where an index's pieces live, described once and handed to ``ContextualIndex(store, ...)``.

>>> store = Store.embedded("./memory", collection="notes")   # doctest: +SKIP
>>> index = ContextualIndex(store, embedder=OpenAIEmbedder())   # doctest: +SKIP

The store's arguments are on the store (the folder, the server, the client, the collection, the folder lock's wait, the
lexical file), the index's on the index, the search's on ``search`` / ``SearchSettings``: a misspelt argument is named
with the family it belongs to (:func:`refuse_unknown`). ``ContextualIndex("./memory", collection=...)`` and
``ContextualIndex(in_memory=True)`` are shorthands for :meth:`Store.of`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from .errors import InputError
from .storage.base import DEFAULT_COLLECTION
from .storage.lock import check_lock_timeout
from .storage.pieces import BACKENDS, PieceStore, open_piece_store

__all__ = ["Store", "refuse_unknown", "open_store_arguments", "STORE_ARGUMENTS"]

#: The keywords the shorthand ``ContextualIndex(path, **store_arguments)`` takes (:meth:`Store.of`).
STORE_ARGUMENTS = (
    "path",
    "collection",
    "host",
    "port",
    "ssl",
    "headers",
    "client",
    "in_memory",
    "lock_timeout",
    "lexical",
    "lexical_path",
    "read_only",
    "backend",
)


@dataclass(frozen=True)
class Store:
    """Where the pieces live: an embedded Chroma folder, a Chroma server, your own Chroma client, or memory.

    Build it with :meth:`embedded`, :meth:`server`, :meth:`from_client` or :meth:`memory`. Opening it
    (:meth:`open`, which ``ContextualIndex`` does) locks an embedded folder for this process
    (``lock_timeout``: seconds to wait for another process that holds it); each opening of a memory store is a
    separate, empty store. ``lexical`` (on by default for an embedded or in-memory store) keeps a BM25 file in step
    with the collection; ``lexical_path`` names that file (and switches it on for a server or a client).
    ``read_only=True`` refuses every write; an embedded folder opened read-only (or one this process cannot write:
    read-only media) is searched in a private copy, without its lock (:mod:`ctxret.storage.snapshot`).

    Args:
        kind: ``"embedded"``, ``"server"``, ``"client"`` or ``"memory"`` (set by the constructors).
        path: the embedded folder.
        collection: the Chroma collection's name.
        host: the Chroma server's host (with ``port``, ``ssl`` and ``headers``).
        port: the Chroma server's port.
        ssl: connect to the server over TLS.
        headers: HTTP headers sent to the server.
        client: your own Chroma client (:meth:`from_client`).
        lock_timeout: seconds to wait for another process that holds an embedded folder's lock.
        lexical: keep a BM25 file in step with the collection (``None``: on for embedded and memory stores).
        lexical_path: the BM25 file (switches it on for a server or a client).
        read_only: refuse every write.

    Raises:
        InputError: a bad value, or an argument that does not apply to this kind of store.

    Example:
        ```python
        from ctxret import ContextualIndex, Store

        store = Store.memory(collection="notes")
        print(store.kind, store.collection)  # prints: memory notes
        print(Store.of("./memory").kind)  # prints: embedded
        index = ContextualIndex(store)
        index.add_documents(["Backups run every night at 02:00."])
        print(index.search("When do backups run?", k=1)[0].hits[0].body)  # prints: Backups run every night at 02:00.
        ```
    """

    kind: Literal["embedded", "server", "client", "memory"] = "embedded"
    path: str | None = None
    collection: str = DEFAULT_COLLECTION
    host: str | None = None
    port: int | None = None
    ssl: bool = False
    headers: tuple[tuple[str, str], ...] | None = None
    client: Any = None
    lock_timeout: float = 0.0
    lexical: bool | None = None
    lexical_path: str | None = None
    read_only: bool = False
    backend: str = "chroma"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lock_timeout", check_lock_timeout(self.lock_timeout))
        if self.lexical is not None and not isinstance(self.lexical, bool):
            raise InputError(f"lexical must be True, False or None (on for an embedded store), got {self.lexical!r}")
        if not isinstance(self.read_only, bool):
            raise InputError(f"read_only must be True or False, got {self.read_only!r}")
        if self.read_only and self.kind == "memory":
            raise InputError("an in-memory store starts empty: read_only=True does not apply to it")
        if self.backend not in BACKENDS:
            raise InputError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {self.backend!r}")
        if self.backend != "chroma" and self.kind != "memory":
            raise InputError(
                f"backend={self.backend!r} keeps the pieces in this process's memory: use Store.memory(backend="
                f"{self.backend!r}) (or in_memory=True); a folder, a server or a client is Chroma's"
            )

    @classmethod
    def embedded(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        collection: str = DEFAULT_COLLECTION,
        lock_timeout: float = 0.0,
        lexical: bool | None = None,
        lexical_path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        **unknown: Any,
    ) -> Store:
        """An embedded Chroma folder (default ``./.ctxret``), with its BM25 file beside the collection (``read_only``:
        searched in a private copy, writes refused)."""
        refuse_unknown(unknown, "store", ("collection", "lock_timeout", "lexical", "lexical_path", "read_only"))
        return cls(
            "embedded",
            _path(path, "path"),
            collection,
            lock_timeout=lock_timeout,
            lexical=lexical,
            lexical_path=_path(lexical_path, "lexical_path"),
            read_only=read_only,
        )

    @classmethod
    def server(
        cls,
        host: str,
        port: int | None = None,
        *,
        ssl: bool = False,
        headers: Mapping[str, str] | None = None,
        collection: str = DEFAULT_COLLECTION,
        lexical: bool | None = None,
        lexical_path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        **unknown: Any,
    ) -> Store:
        """A Chroma server (``chroma run``; ``port`` 8000 by default, ``headers`` for auth). Its unscoped searches are
        dense unless ``lexical_path`` names a local BM25 file; thread-scoped searches are hybrid either way
        (``read_only``: this process's writes are refused)."""
        refuse_unknown(unknown, "store", ("ssl", "headers", "collection", "lexical", "lexical_path", "read_only"))
        pairs = tuple(headers.items()) if isinstance(headers, Mapping) else headers
        return cls(
            "server",
            None,
            collection,
            host,
            port,
            ssl,
            pairs,
            lexical=lexical,
            lexical_path=_path(lexical_path, "lexical_path"),
            read_only=read_only,
        )

    @classmethod
    def from_client(
        cls,
        client: Any,
        *,
        collection: str = DEFAULT_COLLECTION,
        lock_timeout: float = 0.0,
        lexical: bool | None = None,
        lexical_path: str | os.PathLike[str] | None = None,
        read_only: bool = False,
        **unknown: Any,
    ) -> Store:
        """Your own Chroma client (a ``PersistentClient``'s folder is locked like an embedded one; ``read_only``: this
        process's writes are refused)."""
        refuse_unknown(unknown, "store", ("collection", "lock_timeout", "lexical", "lexical_path", "read_only"))
        if client is None:
            raise InputError("Store.from_client needs a Chroma client (chromadb.PersistentClient(...), HttpClient...)")
        return cls(
            "client",
            None,
            collection,
            client=client,
            lock_timeout=lock_timeout,
            lexical=lexical,
            lexical_path=_path(lexical_path, "lexical_path"),
            read_only=read_only,
        )

    @classmethod
    def memory(
        cls,
        *,
        collection: str = DEFAULT_COLLECTION,
        lexical: bool | None = None,
        backend: str = "chroma",
        **unknown: Any,
    ) -> Store:
        """In memory: every index opened on it is a separate, empty store (tests, notebooks). ``backend="inprocess"``:
        the vectors in dicts searched exactly with numpy (:mod:`ctxret.storage.inprocess`) instead of an in-memory
        Chroma."""
        refuse_unknown(unknown, "store", ("collection", "lexical", "backend"))
        return cls("memory", None, collection, lexical=lexical, backend=backend)

    @classmethod
    def of(cls, path: Any = None, **arguments: Any) -> Store:
        """The store the shorthand ``ContextualIndex(path, collection=..., host=..., in_memory=..., ...)`` names."""
        if isinstance(path, Store):
            if arguments:
                raise InputError(
                    f"store argument(s) {sorted(arguments)} given beside a Store: pass them to the Store itself "
                    "(Store.embedded(path, collection=...), Store.server(host, port, ...), Store.memory(...))"
                )
            return path
        a = dict(arguments)
        in_memory, host, client = a.pop("in_memory", False), a.pop("host", None), a.pop("client", None)
        backend = a.pop("backend", "chroma")
        if backend != "chroma" and not in_memory:
            raise InputError(
                f"backend={backend!r} keeps the pieces in this process's memory: give in_memory=True with it "
                "(a folder, a server or a client is Chroma's)"
            )
        if not isinstance(in_memory, bool):
            raise InputError(f"in_memory must be True or False, got {in_memory!r}")
        chosen = [
            name
            for name, on in (
                ("path", path is not None),
                ("host", host is not None),
                ("client", client is not None),
                ("in_memory", in_memory),
            )
            if on
        ]
        if len(chosen) > 1:
            raise InputError(f"choose one store: path=, host=/port=, client= or in_memory=True (got {chosen})")
        if host is not None:
            if "lock_timeout" in a:
                raise InputError("lock_timeout is for an embedded folder or a client on one; a server has no lock")
            return cls.server(host, **a)
        if "port" in a or "ssl" in a or "headers" in a:
            raise InputError("port=, ssl= and headers= need host= (a Chroma server): Store.server(host, port, ...)")
        if client is not None:
            return cls.from_client(client, **a)
        if in_memory:
            if "lock_timeout" in a or "lexical_path" in a or a.get("read_only"):
                raise InputError(
                    "an in-memory store has no folder: lock_timeout=, lexical_path= and read_only= do not apply"
                )
            a.pop("read_only", None)
            return cls.memory(backend=backend, **a)
        return cls.embedded(path, **a)

    def open(self) -> PieceStore:
        """The opened store (Chroma + the lexical file) ``ContextualIndex`` uses (memory: a new one each time)."""
        return open_piece_store(
            self.path,
            collection=self.collection,
            host=self.host,
            port=self.port,
            ssl=self.ssl,
            headers=None if self.headers is None else dict(self.headers),
            client=self.client,
            in_memory=self.kind == "memory",
            lock_timeout=self.lock_timeout,
            lexical=self.lexical,
            lexical_path=self.lexical_path,
            read_only=self.read_only,
            backend=self.backend,
        )


def _path(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
        raise InputError(f"{name} must be a path (str or pathlib.Path), got {value!r}")
    return str(os.fspath(value))


#: The families of arguments, for the error that names where a misspelt one belongs.
def _families() -> dict[str, tuple[str, ...]]:
    from .query.settings import SearchSettings

    return {
        "store": tuple(f.name for f in fields(Store) if f.name != "kind") + ("in_memory",),
        "search": tuple(SearchSettings.option_names()),
    }


def refuse_unknown(unknown: Mapping[str, Any], family: str, valid: Iterable[str]) -> None:
    """An :class:`InputError` for the first of ``unknown`` (arguments of ``family``): the closest valid name, or the
    family it belongs to (a search option given to a constructor goes to ``search()`` / ``SearchSettings``)."""
    if not unknown:
        return
    name = sorted(unknown)[0]
    families = _families()
    if family != "search" and name in families["search"]:
        raise InputError(
            f"{name!r} is a search option: pass it to search() or settings=SearchSettings({name}=...) (the index's "
            "defaults); the constructor takes where the pieces live and how they are embedded"
        )
    if family != "store" and name in families["store"]:
        raise InputError(
            f"{name!r} is a store argument: pass it to the Store (Store.embedded(path, {name}=...), Store.server(host, "
            "port, ...), Store.memory(...)), or use the shorthand without a Store: ContextualIndex(path, {name}=...)"
        )
    everything = [*valid, *(n for names in families.values() for n in names)]
    close = difflib.get_close_matches(name, everything, n=1, cutoff=0.75)
    hint = f" — did you mean {close[0]!r}?" if close else f"; valid {family} arguments: {', '.join(valid)}."
    raise InputError(f"unknown {family} argument {name!r}{hint} search options go to search()/SearchSettings")


def open_store_arguments(
    path: Any, arguments: dict[str, Any], *, default: Literal["embedded", "memory"] = "embedded"
) -> Store:
    """The :class:`Store` a ``from_path(path, **arguments)`` names, its store arguments taken out of ``arguments``.

    ``default``: the store when none is named (no path, ``host``, ``client`` or ``in_memory``): ``"embedded"`` is
    ``./.ctxret`` (the core and the CLI), ``"memory"`` an in-memory store, as the frameworks' own stores and indexes
    are when given no folder (langchain-chroma's ``Chroma()``, LlamaIndex's ``VectorStoreIndex``): the adapters'."""
    picked = {k: arguments.pop(k) for k in list(arguments) if k in STORE_ARGUMENTS}
    named = path is not None or "in_memory" in picked
    named = named or any(picked.get(k) is not None for k in ("path", "host", "client"))
    if default == "memory" and not named:
        if picked.get("lock_timeout") is not None or picked.get("lexical_path") is not None:
            raise InputError(
                "lock_timeout= and lexical_path= are for a store folder, and none is named (no path: in memory); "
                "give the folder (path=... or persist_directory=...)"
            )
        picked["in_memory"] = True
    return Store.of(path, **picked)
