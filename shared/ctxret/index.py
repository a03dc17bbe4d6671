"""``ContextualIndex``: the facade users make with one line — index turns and documents, search by parts.

It wires the stages together and holds their settings; the stages themselves live in
:mod:`ctxret.ingest` (turns, documents, pieces, context, the write path), :mod:`ctxret.query`
(query vectors, hybrid search, fusion, parents), :mod:`ctxret.embedders` and
:mod:`ctxret.storage` (Chroma + the lexical index as one ``PieceStore``). See ARCHITECTURE.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

from .embedders.base import Embedder
from .embedders.guard import check_embed_timeout, for_writes, guarded
from .embedders.local import shared_local_embedder
from .embedders.wrappers import as_embedder
from .errors import ConfigMismatchError, InputError
from .ingest.append import append_messages, replace_thread, write_numbered
from .ingest.config import ContextStrategy, IndexConfig, check_piece_bytes
from .ingest.context import Contextualizer
from .ingest.documents import read_documents
from .ingest.items import chat_scope
from .ingest.pieces import fit_pieces
from .ingest.progress import check_progress
from .ingest.turns import Piece, Turn
from .ingest.views import resolve_view_writers
from .ingest.writer import DEFAULT_MAX_TURN_BYTES, PlannedTurn, plan_turns, rebuild_store, write_turns
from .query.deadline import arun_search, run_search
from .query.relevance import calibration_for
from .query.search import SearchPlan, plan_search, prepare_search, said_empty
from .query.settings import SearchSettings
from .query.vectors import query_vectors
from .results import Group, IndexResult
from .storage.lexical_sync import SyncReport
from .storage.pieces import ClosedStore, PieceStore
from .storage.rebuild import recover
from .storage.schema import Scope, as_list, check_metadata_arg, stored_where
from .store import STORE_ARGUMENTS, Store, refuse_unknown

logger = logging.getLogger(__name__)

#: Seconds :meth:`ContextualIndex.close` waits for the writes handed to the background (agent memory).
CLOSE_FLUSH_SECONDS = 60.0

__all__ = ["ContextualIndex", "INDEX_ARGUMENTS"]

#: What the constructor takes besides the store (``progress``, ``max_turn_bytes``, ``embed_timeout``: write options).
INDEX_ARGUMENTS = tuple(
    "store embedder weight context piece_bytes views view_writer contextualizer settings progress max_turn_bytes "
    "embed_timeout".split()
)


class ContextualIndex:
    """Contextual chunk retrieval over a Chroma collection.

    Args:
        store: where the pieces live: a :class:`~ctxret.store.Store`, a folder path, or ``None`` (the store's
            arguments as keywords; default ``./.ctxret``).
        embedder: the local MiniLM model when ``None``; any ctxret embedder, LangChain ``Embeddings`` or
            LlamaIndex ``BaseEmbedding``.
        weight: the share of the turn's context in each piece's vector (recorded; ``None``: the collection's).
        context: the context strategy (``"mean"``, ``"turn"``, ``"late"``, ``"llm"``; recorded).
        piece_bytes: the size a piece is packed to (recorded).
        views: LLM-written views to store with each piece (``"questions"``, ``"summary"``; recorded).
        view_writer: what writes the views (an LLM, a callable, or a dict of them by kind).
        contextualizer: what writes the context for ``context="llm"``.
        settings: the search defaults (a :class:`~ctxret.query.settings.SearchSettings`), overridable per search.
        **options: the store's arguments (``collection``, ``in_memory``, ``lock_timeout``, ...) and the write
            options ``progress``, ``max_turn_bytes`` and ``embed_timeout``.

    Raises:
        ConfigMismatchError: a recorded value given differently (:meth:`rebuild` re-embeds).
        InputError: a misspelt or misplaced argument, named with its family (store, index or search).

    Example:
        ```python
        from ctxret import ContextualIndex, Store

        index = ContextualIndex(Store.memory())
        index.add_messages(
            [
                {"role": "user", "content": "Book me a flight from Berlin to Lisbon for October 20."},
                {"role": "assistant", "content": "Booked TAP flight TP 541, departing at 09:40 on October 20."},
                {"role": "user", "content": "My dog Biscuit needs his vaccinations next week."},
                {"role": "assistant", "content": "Biscuit's vet appointment is on Thursday at 4 PM at Green Paws."},
            ],
            thread_id="user-42",
        )
        for group in index.search("When does my flight leave? When is the vet?", k=2, thread_id="user-42"):
            request, reply = group.hits  # the user's message, then the assistant's reply that answers it
            print(group.part, "->", reply.body)
        # prints: When does my flight leave? -> Booked TAP flight TP 541, departing at 09:40 on October 20.
        ```

    ``store``: a :class:`~ctxret.store.Store` (``Store.embedded(path)``, ``.server(host, port)``, ``.from_client(c)``,
    ``.memory()``), or the shorthand: a folder path, or no store and the store's arguments as keywords
    (``ContextualIndex("./memory", collection=...)``, ``ContextualIndex(in_memory=True)``; default ``./.ctxret``).
    ``embedder``: the local MiniLM model by default; any ctxret embedder, LangChain ``Embeddings`` or LlamaIndex
    ``BaseEmbedding`` (:func:`ctxret.embedders.wrappers.as_embedder`).

    Index config (recorded in the collection, :class:`~ctxret.ingest.config.IndexConfig`): ``weight``, ``context``,
    ``piece_bytes`` and ``views`` left as ``None`` take the collection's recorded values (or the defaults for a new
    collection); values you pass must match, else :class:`ConfigMismatchError` (:meth:`rebuild` re-embeds).
    ``context="llm"`` needs a ``contextualizer``; ``views=["questions", "summary"]`` a ``view_writer`` (an LLM, a
    callable or a dict of them by kind; :mod:`ctxret.ingest.views`). Write options: ``progress`` (``None``: a bar
    on a terminal or in a notebook; each write call may override it), ``max_turn_bytes`` (a longer turn is refused;
    ``None`` / 0: no limit) and ``embed_timeout`` (seconds an embedding call of a write may take; ``None``: the
    embedder's default; see :mod:`ctxret.embedders.guard`).

    Search defaults: ``settings=SearchSettings(...)`` (never recorded); each :meth:`search` may override them. A
    misspelt or misplaced argument is an :class:`InputError` naming its family (store, index or search).

    Messages are appended (:meth:`add_messages`: the next turns of their thread; a message sent again adds nothing);
    a document re-added under its id replaces the stored one whole; a crash leaves one version. Searches
    run in parallel with writes; writes to one store are serialized in the process, not across a server's clients.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        embedder: Embedder | Any | None = None,
        weight: float | None = None,
        context: ContextStrategy | None = None,
        piece_bytes: int | None = None,
        views: Sequence[str] | str | None = None,
        view_writer: Any = None,
        contextualizer: Contextualizer | None = None,
        settings: SearchSettings | None = None,
        _rebuild: bool = False,
        **options: Any,
    ) -> None:  # _rebuild: from rebuild() only, open a collection whose config differs to re-embed it
        progress, max_turn_bytes = options.pop("progress", None), options.pop("max_turn_bytes", DEFAULT_MAX_TURN_BYTES)
        self.embed_timeout = check_embed_timeout(options.pop("embed_timeout", None))  # seconds per call of a write
        refuse_unknown({k: v for k, v in options.items() if k not in STORE_ARGUMENTS}, "index", INDEX_ARGUMENTS)
        spec = Store.of(options.pop("path", None) if store is None else store, **options)
        self.embedder: Embedder = shared_local_embedder() if embedder is None else as_embedder(embedder)
        if settings is not None and not isinstance(settings, SearchSettings):
            raise InputError(f"settings must be a SearchSettings, got {type(settings).__name__}")
        check_progress(progress)
        if max_turn_bytes is not None and (type(max_turn_bytes) is not int or max_turn_bytes < 0):
            raise InputError(f"max_turn_bytes must be a number of bytes (0 or None: no limit), got {max_turn_bytes!r}")
        #: The search defaults of this index (override per call).
        self.settings: SearchSettings = settings or SearchSettings()
        self.contextualizer, self.view_writer = contextualizer, view_writer  # context="llm" / views writers
        self.progress, self.max_turn_bytes = progress, max_turn_bytes or None
        self._flushes: list[Callable[[float | None], bool]] = []  # writes handed to the background (agent memory)
        self.store: PieceStore = spec.open()
        recover(self.store)  # finish an interrupted rebuild first: its collection holds the config to read
        stored = self.store.stored_config()
        self.config: IndexConfig = IndexConfig.resolve(
            self.embedder, stored, weight=weight, context=context, piece_bytes=piece_bytes, views=views
        )
        resolve_view_writers(self.config.view_kinds, view_writer)  # a bad writer fails now, not at the first write
        self._stored_differs = bool(stored is not None and self.config.differences(stored))
        if self._stored_differs and not _rebuild:
            at = self.store
            raise ConfigMismatchError(self.config.mismatch_message(stored or {}, at.collection_name, at.location))
        if not self._stored_differs:
            self.store.open(self.config.as_dict())
            self.store.sync_lexical()  # a crash between the two writes, or lexical newly on: repair

    @classmethod
    def rebuild(cls, store: Store | str | os.PathLike[str] | None = None, **kwargs: Any) -> ContextualIndex:
        """Open a collection under new settings and re-embed every stored piece under them.

        Takes :class:`ContextualIndex`'s arguments. The new collection is built beside the old one
        and swapped in only when complete: a failure or a crash part-way leaves the old one
        usable (an interrupted swap is finished on the next open).
        """
        self = cls(store, _rebuild=True, **kwargs)
        self.reindex()
        return self

    weight = property(lambda self: self.config.weight, doc="The collection's blend weight.")
    piece_bytes = property(lambda self: self.config.piece_bytes, doc="The collection's piece byte budget.")

    @property
    def cosine_floor(self) -> float | None:
        """The default cosine floor: the settings' ``cosine_floor``, or the embedder's for ``"auto"``."""
        t = self.settings.cosine_floor
        return float(self.embedder.default_score_threshold) if t == "auto" else t

    @property
    def lexical_index(self) -> Any:
        """The BM25 file kept in step with the collection (unscoped searches), or ``None``."""
        return self.store.lexical

    def on_flush(self, flush: Callable[[float | None], bool]) -> None:
        """Register what :meth:`flush` and :meth:`close` call: ``flush(timeout)`` of a writer that stores writes in the
        background (agent memory's :class:`~ctxret.agent_memory.BackgroundWriter`)."""
        self._flushes.append(flush)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write handed to the background on this index is stored (agent memory with
        ``background=True``: ``CtxretMemoryMiddleware``, ``CtxretMemoryBlock``), ``timeout`` seconds at most; ``True``
        when none is left. :meth:`close` does it first."""
        return all([f(timeout) for f in list(self._flushes)])

    def close(self) -> None:
        """Release the store (its lexical file and folder lock) once the writes handed to the background are stored
        (:meth:`flush`, a minute at most); afterwards every call that needs the store raises
        :class:`~ctxret.errors.ClosedError` (closing again does nothing)."""
        store = self.store
        if isinstance(store, ClosedStore):
            return
        if not self.flush(CLOSE_FLUSH_SECONDS):
            logger.error("closing the index before its background writes were stored (they kept failing)")
        self.store = ClosedStore(store.location, store.collection_name)  # type: ignore[assignment]
        store.close()

    def __enter__(self) -> ContextualIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_messages(
        self,
        messages: Iterable[Mapping[str, Any]],
        thread_id: str = "default",
        *,
        first_turn: int | None = None,
        metadata: Mapping[str, Any] | None = None,
        include_system: bool = False,
        progress: bool | None = None,
    ) -> IndexResult:
        """Add chat messages (OpenAI chat or Responses, Anthropic, LangChain's) to the end of ``thread_id``: its next
        turns, as an agent writes memory one exchange or session at a time. Nothing stored changes, but the last
        turn when the messages continue it (a reply sent after its question); a message sent again adds nothing
        (known by its ``id``, else its content and time, else its content and position; ``IndexResult.duplicates``);
        a message without a time gets the time of the last timed message before it in the call, else the time it is
        first added (:mod:`.ingest.append`). ``first_turn=n`` writes
        them as turns ``n, n + 1, …`` instead, replacing those; :meth:`replace_messages` rewrites a whole thread.
        (:meth:`add_turns` with :func:`~.ingest.messages.turns_from_messages` writes messages exactly as given.)

        Args:
            messages: chat messages as dicts (OpenAI chat or Responses, Anthropic, LangChain's ``message_to_dict``).
            thread_id: the thread they continue.
            first_turn: write them as turns ``first_turn, first_turn + 1, …`` instead of appending, replacing those.
            metadata: your keys, stored on every piece written (filter on them with ``where``).
            include_system: store system messages too (left out by default).
            progress: show a progress bar (``None``: on a terminal or in a notebook).

        Returns:
            An :class:`~ctxret.results.IndexResult`: pieces added, unchanged and replaced, turns, ``duplicates``.

        Example:
            ```python
            from ctxret import ContextualIndex, Store

            index = ContextualIndex(Store.memory())
            chat = [
                {"role": "user", "content": "Where should we hold the offsite?"},
                {"role": "assistant", "content": "Lisbon: the venue holds 40 people and costs 9,000 euros."},
            ]
            print(index.add_messages(chat, thread_id="team"))
            # prints: IndexResult(added=2, unchanged=0, replaced=0, turns=1, turns_changed=1, duplicates=0)
            print(index.add_messages(chat, thread_id="team").duplicates)  # prints: 2
            ```
        """
        check_metadata_arg(metadata)
        write = functools.partial(self.add_turns, metadata=metadata, progress=progress)
        if first_turn is not None:
            return write_numbered(
                self.store, messages, thread_id, first_turn, include_system=include_system, write=write
            )[0]
        return append_messages(self.store, messages, thread_id, include_system=include_system, write=write)

    def replace_messages(
        self,
        messages: Iterable[Mapping[str, Any]],
        thread_id: str = "default",
        *,
        metadata: Mapping[str, Any] | None = None,
        include_system: bool = False,
        progress: bool | None = None,
    ) -> IndexResult:
        """Make ``thread_id``'s chat turns exactly ``messages`` (:func:`.ingest.append.replace_thread`)."""
        write = functools.partial(self.add_turns, metadata=metadata, progress=progress)
        return replace_thread(self.store, messages, thread_id, include_system=include_system, write=write)

    async def aadd_messages(self, messages: Iterable[Mapping[str, Any]], *args: Any, **kwargs: Any) -> IndexResult:
        """Async :meth:`add_messages` (the write runs in a worker thread, off the event loop)."""
        return await asyncio.to_thread(
            self.add_messages, as_list(messages, "messages", "message dicts"), *args, **kwargs
        )

    async def areplace_messages(self, messages: Iterable[Mapping[str, Any]], *args: Any, **kwargs: Any) -> IndexResult:
        """Async :meth:`replace_messages`."""
        return await asyncio.to_thread(
            self.replace_messages, as_list(messages, "messages", "message dicts"), *args, **kwargs
        )

    def add_documents(
        self,
        documents: Iterable[str | Mapping[str, Any]] | str | Mapping[str, Any],
        *,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        replace: bool = True,
        progress: bool | None = None,
    ) -> IndexResult:
        """Index plain-text or markdown documents (strings or ``{"text", "title"?, "id"?, "metadata"?}``), split into
        sections. The id defaults to a hash of title and text (give an ``id`` so that an edited document replaces its
        old version); ``thread_id`` (the scope) defaults to the id. A document re-added under its id replaces the
        stored one whole, in one write (unchanged sections cost nothing); ``replace=False`` keeps its other sections.

        Args:
            documents: one document or several: strings, or dicts ``{"text", "title"?, "id"?, "metadata"?}``.
            thread_id: the scope to store them under (default: each document's id).
            metadata: your keys, stored on every piece written (a document's own ``metadata`` adds to them).
            replace: a document re-added under its id replaces the stored one whole (``False``: its other sections
                stay).
            progress: show a progress bar (``None``: on a terminal or in a notebook).

        Returns:
            An :class:`~ctxret.results.IndexResult` (pieces added, unchanged, replaced).

        Example:
            ```python
            from ctxret import ContextualIndex, Store

            index = ContextualIndex(Store.memory())
            text = "Staff get 30 days of paid leave a year. Unused days expire in March."
            print(index.add_documents([{"id": "leave", "title": "Leave policy", "text": text}]))
            # prints: IndexResult(added=1, unchanged=0, replaced=0, turns=1, turns_changed=1, duplicates=0)
            hit = index.search("How many days of leave do I get?", k=1)[0].hits[0]
            print(hit.metadata["doc_id"])  # prints: leave
            ```
        """
        turns, keys = read_documents(documents, thread_id=thread_id, metadata=metadata)
        return self._write(turns, None, replace, keys, progress)

    def add_turns(
        self,
        turns: Sequence[Turn | PlannedTurn],
        *,
        metadata: Mapping[str, Any] | None = None,
        replace: bool = True,
        documents: Iterable[tuple[str, str]] = (),
        progress: bool | None = None,
        threads: Iterable[str] = (),
    ) -> IndexResult:
        """Index prepared turns (or sections) of any threads: the one write path every ingest goes through, in bounded
        batches (a failure part-way says what is stored: :func:`.ingest.writer.write_turns`). Chat turns replace their
        own stored version; the sections of a document (``doc_id``) are the whole document, as in :meth:`add_documents`.
        ``documents``: more ``(thread_id, doc_id)`` given whole (one with no section here loses every stored one).
        ``threads``: threads whose chat turns are given whole: their stored chat turns not given are removed, in the
        same store write (what :meth:`replace_messages` does; their documents stay).
        ``progress``: a bar on (``True``) or off (``False``) for this call; ``None``: the index's setting."""
        return self._write(turns, metadata, replace, documents, progress, threads)

    def _write(
        self,
        turns: Sequence[Turn | PlannedTurn],
        metadata: Mapping[str, Any] | None,
        replace: bool,
        documents: Iterable[tuple[str, str]],
        progress: bool | None = None,
        threads: Iterable[str] = (),
    ) -> IndexResult:
        if not isinstance(replace, bool):
            raise InputError(f"replace must be True or False, got {replace!r}")
        if isinstance(threads, str):
            raise InputError(f"threads must be a list of thread ids, got the string {threads!r}: pass [{threads!r}]")
        return write_turns(
            self.store,
            for_writes(self.embedder, self.embed_timeout),
            self.config,
            as_list(turns, "turns", "Turns (from turns_from_messages)"),
            metadata=metadata,
            contextualizer=self.contextualizer,
            max_turn_bytes=self.max_turn_bytes,
            progress=self.progress if check_progress(progress) is None else progress,
            view_writers=resolve_view_writers(self.config.view_kinds, self.view_writer),
            replace=replace,
            documents=documents,
            threads=threads,
        )

    def write_items(self, turns: Sequence[Turn], documents: Iterable[tuple[str, str]]) -> IndexResult:
        """The item store's write (:class:`ctxret.items.ItemStore`): item turns (:func:`.ingest.items.item_turn`)
        and the ``(thread_id, key)`` documents they replace whole (a deleted item: one with no turn here). Every
        turn must be an item's, stored where its fields say (:func:`.ingest.items.check_item_turn`)."""
        for turn in turns:
            if not isinstance(turn, Turn) or turn.item is None:
                raise InputError("write_items writes item turns only (ctxret.ingest.items.item_turn)")
        return self._write(list(turns), None, True, documents, None)

    def check_turns(self, turns: Sequence[Turn]) -> list[PlannedTurn]:
        """Raise the :class:`InputError` that :meth:`add_turns` would raise for ``turns``, writing nothing;
        else return them planned (fitted pieces and metadata), which :meth:`add_turns` takes as they are."""
        return plan_turns(list(turns), guarded(self.embedder), self.config, max_turn_bytes=self.max_turn_bytes)

    def fit_pieces(self, turn: Turn, max_bytes: int | None = None) -> list[Piece]:
        """The pieces of ``turn`` as this index stores them (labelled, re-packed to the model's limit)."""
        return fit_pieces(turn, self.embedder, self.piece_bytes if max_bytes is None else check_piece_bytes(max_bytes))

    # -- search -------------------------------------------------------------------------------------
    def query_vectors(self, message: str, *, max_parts: int | None = None, split: bool = True) -> tuple[list[str], Any]:
        """The parts of ``message`` and their blended query vectors (one embedding request)."""
        s = self.settings.with_options(split=split, **({} if max_parts is None else {"max_parts": max_parts}))
        weight = self.weight if s.query_weight is None else s.query_weight
        return query_vectors(guarded(self.embedder), message, weight=weight, max_parts=s.max_parts, split=s.split)

    def plan(
        self, settings: SearchSettings | None = None, *, has_lexical: bool | None = None, **options: Any
    ) -> SearchPlan:
        """This index's search plan for ``settings`` (default: its own) with ``options`` applied."""
        resolved = (settings or self.settings).with_options(**options)
        return plan_search(
            resolved,
            default_floor=float(self.embedder.default_score_threshold),
            stored_weight=self.weight,
            has_lexical=self.store.has_lexical if has_lexical is None else has_lexical,
            relevance=calibration_for(self.embedder),
        )

    def search(
        self,
        message: str,
        k: int | None = None,
        score_threshold: float | None | Literal["auto"] | Any = ...,
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        settings: SearchSettings | None = None,
        **options: Any,
    ) -> list[Group]:
        """Split ``message`` into parts; each part keeps its own group of at most ``k`` hits (never padded,
        never de-duplicated across parts; an empty message returns ``[]``).

        ``thread_id`` (one id or several) and ``where`` (a Chroma filter on metadata: your keys by the names you gave
        them, ctxret's fields as ``ctxret:<field>``, :mod:`.storage.schema`) scope the search. ``score_threshold`` is a
        floor on the hits' relevance in [0, 1] (the score the adapters show; ``None``: no floor at all), the same as
        the adapters'; the cosine floor is ``cosine_floor=`` (``"auto"``: the embedder's, ``None``: none). Every
        other search option is a keyword here or a field of ``settings=SearchSettings(...)``
        (:class:`~ctxret.query.settings.SearchSettings`: ``lexical``, ``fusion``, ``parents``, ``rerank``, ``mmr``,
        ``hyde``, ``deadline_ms``, ...). ``Hit.scores`` names every score; ``Group.stages`` / ``Group.degraded`` say
        which stages ran (:mod:`ctxret.query.executor`).

        Args:
            message: the incoming message (several questions or requests are searched part by part).
            k: hits per part, not in total (``None``: the settings' ``k``).
            score_threshold: a floor on the hits' relevance in [0, 1] (``None``: no floor at all).
            thread_id: one thread id or several: the scope.
            where: a Chroma filter on metadata.
            settings: the search settings for this call (default: the index's).
            **options: any :class:`~ctxret.query.settings.SearchSettings` field (``lexical``, ``parents``, ...).

        Returns:
            One :class:`~ctxret.results.Group` per part, in the message's order, each with its hits best first.

        Raises:
            InputError: an unknown option or a bad value, named.
            EmbeddingError: the embedder failed.

        Example:
            ```python
            from ctxret import ContextualIndex, Store

            index = ContextualIndex(Store.memory())
            index.add_documents(["The cat sleeps on the red sofa.", "The train to Porto leaves from platform 4."])
            for group in index.search("Which platform does the Porto train use? Where does the cat sleep?", k=1):
                print(group.part_index, group.hits[0].body)
            # prints: 0 The train to Porto leaves from platform 4.
            ```
        """
        request = prepare_search(
            self.settings if settings is None else settings,
            k=k,
            score_threshold=score_threshold,
            thread_id=thread_id,
            where=stored_where(where),
            options=options,
        )
        plan = self.plan(request.settings, has_lexical=True)  # the backends say per search (SearchPlan.for_backends)
        scope = chat_scope(self.store, request.scope)  # a chat scope never reads an item namespace's thread
        # errors: EmbeddingError (guarded)
        return said_empty(run_search(plan, message, scope, guarded(self.embedder), self.store), where)

    async def asearch(
        self,
        message: str,
        k: int | None = None,
        score_threshold: Any = ...,
        thread_id: Any = None,
        where: Mapping[str, Any] | None = None,
        *,
        settings: SearchSettings | None = None,
        **options: Any,
    ) -> list[Group]:
        """Async :meth:`search`: the embedding on the embedder's async path, the store queries off the event loop."""
        request = prepare_search(
            self.settings if settings is None else settings,
            k=k,
            score_threshold=score_threshold,
            thread_id=thread_id,
            where=stored_where(where),
            options=options,
        )
        plan = self.plan(request.settings, has_lexical=True)  # the backends say per search (SearchPlan.for_backends)
        scope = chat_scope(self.store, request.scope)  # a chat scope never reads an item namespace's thread
        return said_empty(await arun_search(plan, message, scope, guarded(self.embedder), self.store), where)

    # -- maintenance --------------------------------------------------------------------------------
    def sync_lexical(self) -> SyncReport:
        """Compare the lexical index with the collection id by id and repair it from Chroma's stored texts
        (opening does it when counts or the pending-write marker disagree): after writes behind ctxret's back."""
        if not self.store.has_lexical:
            raise InputError("this index has no lexical index; open it with lexical=True (or lexical_path=...)")
        return self.store.sync_lexical(full=True)

    def delete(self, thread_id: str | Sequence[str] | None = None, where: Mapping[str, Any] | None = None) -> int:
        """Delete every piece of ``thread_id`` (or matching ``where``); returns how many were deleted."""
        scope = Scope(thread_id, stored_where(where))
        if scope.everything:
            raise InputError("delete needs thread_id= or where=; to remove everything use clear()")
        return self.store.delete(scope)

    def clear(self) -> None:
        """Remove every piece (the collection and its config stay)."""
        self.store.clear()

    def stats(self) -> dict[str, Any]:
        """Counts (pieces, turns, threads, pieces per thread), the index config and where the store is."""
        out = {**self.store.stats(), "cosine_floor": self.cosine_floor, "config": self.config.as_dict()}
        if self.config.view_kinds:
            out["views"] = self.store.views.count()
        return out

    def reindex(self) -> IndexResult:
        """Rebuild the whole collection from its stored pieces under this index's config: the new one is
        built beside the old one and swapped in only when complete (a failure leaves the old one untouched)."""
        result = rebuild_store(
            self.store,
            for_writes(self.embedder, self.embed_timeout),
            self.config,
            contextualizer=self.contextualizer,
            progress=self.progress,
            view_writers=resolve_view_writers(self.config.view_kinds, self.view_writer),
        )
        self._stored_differs = False
        logger.info("rebuilt %s: %d turns, %d pieces", self.store.collection_name, result.turns, result.added)
        return result
