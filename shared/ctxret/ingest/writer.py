"""The one write path: turns → fitted, labelled pieces → what changed → context → one embedding pass → blend → store.

The plan and the diff (turns → pieces and metadata; what changed, by write unit) are :mod:`.plan`;
this module batches what changed, embeds each batch and writes it. Everything is packed and
validated before anything is written; re-adding unchanged turns embeds
nothing; a changed turn replaces its pieces, and a document re-added under its id replaces the
stored document whole (``replace=True``): its changed sections are written, and the stored sections
it no longer has are removed, in one store write (the new pieces are written, then the stale ones
removed, in the store's Chroma-then-lexical order). What is stale is decided under the store's
write lock: a write that finds another write happened since it read what was stored reads again
(``PieceStore.generation``), so concurrent writers of one turn or document leave one version.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..blend import blend_with_context
from ..embedders.base import Embedder, check_vectors
from ..embedders.fitting import EMBED_CHUNK, embed_in_batches
from ..errors import CtxretError
from ..results import IndexResult
from ..storage.rebuild import rebuild
from ..storage.replay import repair_writes
from ..text import clean_text
from .config import IndexConfig
from .context import Contextualizer, context_vectors, contextualize, late_passes
from .plan import (
    DEFAULT_MAX_TURN_BYTES,
    PlannedTurn,
    StoredReader,
    WriteUnit,
    diff_units,
    plan_turns,
    stored_pieces,
    turns_from_records,
    write_units,
)
from .progress import progress_bar
from .turns import Turn
from .views import VIEWS_KEY, ViewWriter, stored_views, views_json, write_views

if TYPE_CHECKING:
    from ..storage.pieces import PieceStore

# PlannedTurn, plan_turns, turns_from_records, DEFAULT_MAX_TURN_BYTES: from .plan, for the index's imports
__all__ = [
    "DEFAULT_MAX_TURN_BYTES",
    "PieceSink",
    "PlannedTurn",
    "plan_turns",
    "rebuild_store",
    "turns_from_records",
    "write_batches",
    "write_turns",
]


class PieceSink(StoredReader, Protocol):
    """Where the writer puts pieces (``PieceStore`` implements it)."""

    @property
    def generation(self) -> int: ...

    def writing(self) -> AbstractContextManager[Any]: ...

    def write(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        stale: Sequence[str] = (),
        new: Collection[str] | None = None,
        name: str | None = None,
        views: Any = None,
    ) -> None: ...


#: One write batch holds at most this many pieces and this much piece text (UTF-8 bytes): one
#: embedding pass and one store write each, so memory stays bounded however many turns one call
#: adds (the pieces, their vectors and metadata; late chunking holds ~1.5 KB per token only for the
#: turns in its current model runs), and while a batch is written the next one embeds. Turns are
#: batched by size, so the model's length-sorted runs pad as little as in one pass over everything.
WRITE_BATCH_PIECES = 2_048
WRITE_BATCH_BYTES = 256_000


def write_turns(
    sink: PieceSink,
    embedder: Embedder,
    config: IndexConfig,
    turns: Sequence[Turn | PlannedTurn],
    *,
    metadata: Mapping[str, Any] | None = None,
    contextualizer: Contextualizer | None = None,
    progress: bool | None = None,
    name: str | None = None,
    max_turn_bytes: int | None = DEFAULT_MAX_TURN_BYTES,
    view_writers: Mapping[str, ViewWriter] | None = None,
    known_views: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    replace: bool = True,
    documents: Iterable[tuple[str, str]] = (),
    threads: Iterable[str] = (),
) -> IndexResult:
    """Index ``turns`` into ``sink`` under ``config`` (``name``: another collection, for a rebuild).

    Every turn is planned and checked first, then the changed ones are embedded and written in
    batches (:data:`WRITE_BATCH_PIECES`, :data:`WRITE_BATCH_BYTES`; a turn, and the sections of one
    document, are never split), each batch's store write overlapping the next batch's embedding on
    one background thread. A call that fits in one batch writes all or nothing; a larger one that
    fails part-way leaves the batches before the failure stored (whole turns, Chroma and the lexical
    index in step); the error (a ctxret error keeps its type, its message then says how many turns
    are stored and how to finish) has a ``written`` attribute, the :class:`IndexResult` of what is
    stored: run the same call again to finish (unchanged turns cost nothing).

    ``replace`` (default): the sections of a document (turns with a ``doc_id``) are the whole
    document: stored sections of that ``(thread_id, doc_id)`` that the call does not give are
    removed; ``documents`` names more ``(thread_id, doc_id)`` to replace (a document now empty:
    every stored section goes). ``replace=False`` writes the given sections and keeps the others.
    Chat turns are replaced one by one: turns a call does not give are kept, but in ``threads`` (threads given
    whole: ``replace_messages``), whose chat turns become exactly the given ones, in one store write (a crash leaves
    the thread old or new; a search sees it before or after).

    With ``config.views``, each changed turn's pieces get their LLM-written views
    (:mod:`.views`): from ``known_views`` (piece id → ``{kind: texts}``, what a rebuild read from
    the stored pieces) when every piece of the turn has them, else from ``view_writers`` (one call
    per kind and turn).
    """
    documents, threads = list(documents), list(threads)
    if not turns and not documents and not threads:
        return IndexResult()
    planned = plan_turns(turns, embedder, config, metadata, max_turn_bytes=max_turn_bytes) if turns else []
    units = write_units(planned, replace, documents, threads)
    generation = sink.generation  # before the read: a write after it makes the write below read again
    # What is stored? One filtered read per 256 turns and per 256 documents.
    diff_units(units, stored_pieces(sink, units, name))
    changed = [u for u in units if u.changed]
    written = {t.key for u in changed for t in u.write}
    unchanged = sum(len(p.pieces) for p in planned if p.key not in written)
    stored = IndexResult(unchanged=unchanged, turns=len(planned) - len(written))
    if not changed:
        return stored
    batches = _unit_batches(changed)
    bar = progress_bar(progress, sum(len(p.pieces) for u in changed for p in u.write))
    views = (view_writers or {}, known_views or {})

    def embed(batch: list[WriteUnit]) -> _Ready:
        return _embed_batch(batch, embedder, config, contextualizer, bar, *views)

    writes = _Writes(sink, embed, generation, overlap=len(batches) > 1 and OVERLAP_WRITES)
    try:
        for batch in batches:
            writes.put(embed(batch), name)
        writes.finish()
    except BaseException as e:
        writes.finish(quiet=True)  # the write in flight completes (or fails) before the error goes up
        stopped = _stopped(e, stored + writes.done, len(planned), rebuild=name is not None)
        if stopped is e:
            raise
        raise stopped from e.__cause__ or e  # the copy of a ctxret error keeps its cause (an embedder's own error)
    finally:
        if bar is not None:
            bar.close()
    return stored + writes.done


#: Whether a batch's store write runs on a background thread while the next batch embeds.
OVERLAP_WRITES = True


def _stopped(e: BaseException, written: IndexResult, total: int, *, rebuild: bool) -> BaseException:
    """The error a call that stopped part-way raises: ``e`` with ``written`` (what is stored: the
    batches before the failure, and the turns that were stored unchanged) and, for a ctxret error
    of a write to the store's own collection, a message that says how far it got and how to finish
    (the same type, raised from ``e``). Other exceptions keep their type and message (a note says it)."""
    note = (
        f"indexing stopped after {written.turns:,} of {total:,} turns were stored, each whole (the vector store and "
        "any lexical index in step); the same call again finishes it: the stored turns are unchanged and cost nothing"
    )
    out = e
    if not rebuild and isinstance(e, CtxretError):
        try:
            out = type(e)(f"{e} ({note})")
            out.__dict__.update(e.__dict__)  # what else the error carries
        except Exception:  # an error type built from something other than its message
            out = e
    elif not rebuild and isinstance(e, Exception) and hasattr(e, "add_note"):
        e.add_note(note)
    try:
        out.written = written  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type that takes no attributes
        pass
    return out


def write_batches(
    changed: Sequence[PlannedTurn], max_pieces: int | None = None, max_bytes: int | None = None
) -> list[list[PlannedTurn]]:
    """The write batches of ``changed``: turns taken by size (so the model's length-sorted runs pad as
    little as in one pass) until a batch would exceed ``max_pieces`` or ``max_bytes`` of piece text
    (a bigger turn, or document, is a batch of its own); the sections of one document stay in one
    batch; in each batch the turns keep their given order."""
    units = write_units(changed, True, ())
    for u in units:
        u.write = list(u.turns)
    order = {p.key: i for i, p in enumerate(changed)}
    batches = _unit_batches(units, max_pieces, max_bytes)
    return [sorted((p for u in b for p in u.write), key=lambda p: order[p.key]) for b in batches]


def _unit_batches(
    units: Sequence[WriteUnit], max_pieces: int | None = None, max_bytes: int | None = None
) -> list[list[WriteUnit]]:
    """:func:`write_batches` of write units (the turns each writes)."""
    max_pieces = WRITE_BATCH_PIECES if max_pieces is None else max_pieces
    max_bytes = WRITE_BATCH_BYTES if max_bytes is None else max_bytes
    counts = [sum(len(p.pieces) for p in u.write) for u in units]
    sizes = [sum(len(x.text.encode("utf-8", "surrogatepass")) for p in u.write for x in p.pieces) for u in units]
    batches: list[list[int]] = []
    current: list[int] = []
    pieces = size = 0
    for i in sorted(range(len(units)), key=sizes.__getitem__):
        n = counts[i]
        if current and (pieces + n > max_pieces or size + sizes[i] > max_bytes):
            batches.append(current)
            current, pieces, size = [], 0, 0
        current.append(i)
        pieces += n
        size += sizes[i]
    if current:
        batches.append(current)
    return [[units[i] for i in sorted(b)] for b in batches]


@dataclass
class _Ready:
    """One batch embedded and blended: what its store write takes (the stale and new ids are worked
    out at write time, from its units), and the turns it counts."""

    ids: list[str]
    vectors: np.ndarray
    documents: list[str]
    metadatas: list[dict[str, Any]]
    views: Any
    units: list[WriteUnit]

    def result(self) -> tuple[IndexResult, list[str], set[str]]:
        """``(counts, stale ids, new ids)`` against the units' stored pieces."""
        old: set[str] = set().union(*(u.old for u in self.units))
        stale = sorted(set().union(*(u.stale for u in self.units)))
        new = set(self.ids) - old
        rewritten = len(set(self.ids) & set().union(*(u.updated for u in self.units)))  # same text, new metadata
        turns = sum(len(u.write) for u in self.units)
        counts = IndexResult(
            added=len(new) + rewritten,
            unchanged=len(self.ids) - len(new) - rewritten,
            replaced=len(stale),
            turns=turns,
            turns_changed=turns,
            changed=tuple(k for u in self.units for k in u.changed_keys),
        )
        return counts, stale, new


def _embed_batch(
    units: Sequence[WriteUnit],
    embedder: Embedder,
    config: IndexConfig,
    contextualizer: Contextualizer | None,
    bar: Any,
    view_writers: Mapping[str, ViewWriter],
    known_views: Mapping[str, Mapping[str, Sequence[str]]],
) -> _Ready:
    """LLM-written context lines (``context="llm"``) and views, one embedding pass, context, blend."""
    batch = [p for u in units for p in u.write]
    if not any(p.pieces for p in batch):  # only removals: nothing to embed
        return _Ready([], np.zeros((0, config.dims), np.float32), [], [], None, list(units))
    lines: list[list[str]] | None = None
    if config.context == "llm":
        lines = [
            contextualize(contextualizer, clean_text(p.turn.text), p.pieces, f"turn {p.turn.turn_id!r}") for p in batch
        ]
        for p, turn_lines in zip(batch, lines, strict=False):
            for meta, line in zip(p.metadatas, turn_lines, strict=False):
                if line:
                    meta["context_text"] = line
    view_records = _view_records(batch, embedder, config, view_writers, known_views)
    vectors, contexts = _passes(batch, embedder, config, lines, bar)
    # one blend over the batch: each piece's row with its turn's context (one vector, or one per piece)
    dims = vectors.shape[1]
    rows = [np.broadcast_to(ctx, (len(p.pieces), dims)) for p, ctx in zip(batch, contexts, strict=True) if p.pieces]
    blended = blend_with_context(vectors, np.concatenate(rows), config.weight) if rows else np.zeros((0, config.dims))
    ids = [x.id for p in batch for x in p.pieces]
    docs = [x.text for p in batch for x in p.pieces]
    metas = [m for p in batch for m in p.metadatas]
    return _Ready(ids, np.asarray(blended, dtype=np.float32), docs, metas, view_records, list(units))


class _Writes:
    """The store writes of one call, in batch order; with ``overlap`` each runs on one background
    thread while the next batch embeds (the next write waits for it: one write at a time, each in
    the store's own crash-safe order).

    Each write holds the store's write lock while it works out what is stale and writes. If another
    write happened since this call read what was stored (``sink.generation`` moved), it reads the
    batch's turns and documents again first; a turn that this batch kept as it was but another
    writer changed meanwhile is embedded again, under the lock (``embed``; rare)."""

    def __init__(
        self, sink: PieceSink, embed: Callable[[list[WriteUnit]], _Ready], generation: int, *, overlap: bool
    ) -> None:
        self.sink = sink
        self.embed = embed
        self.generation = generation
        self.done = IndexResult()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ctxret-write") if overlap else None
        self._pending: Future[IndexResult] | None = None

    def _write(self, ready: _Ready, name: str | None) -> IndexResult:
        with self.sink.writing():
            if self.sink.generation != self.generation:
                ready = self._rebase(ready, name)
            result, stale, new = ready.result()
            r = ready
            if not r.ids and not stale:
                pass  # another writer already stored this version
            elif r.views is None:
                self.sink.write(r.ids, r.vectors, r.documents, r.metadatas, stale=stale, new=new, name=name)
            else:
                self.sink.write(
                    r.ids, r.vectors, r.documents, r.metadatas, stale=stale, new=new, name=name, views=r.views
                )
            self.generation = self.sink.generation
        return result

    def _rebase(self, ready: _Ready, name: str | None) -> _Ready:
        """``ready`` against what is stored now (under the write lock)."""
        fresh = [WriteUnit(u.thread_id, u.doc_id, u.turns, whole=u.whole) for u in ready.units]
        diff_units(fresh, stored_pieces(self.sink, fresh, name))
        embedded = {p.key for u in ready.units for p in u.write}
        if all(p.key in embedded for u in fresh for p in u.write):
            for u, f in zip(ready.units, fresh, strict=True):
                u.old = f.old  # the turns embedded are written (those now stored as they are: the same again)
            return ready
        return self.embed([u for u in fresh if u.changed])

    def put(self, ready: _Ready, name: str | None) -> None:
        self._wait()
        if self._pool is None:
            self.done += self._write(ready, name)
        else:
            self._pending = self._pool.submit(self._write, ready, name)

    def _wait(self) -> None:
        if self._pending is not None:
            future = self._pending
            self._pending = None
            self.done += future.result()  # a failed write raises here

    def finish(self, *, quiet: bool = False) -> None:
        try:
            self._wait()
        except BaseException:
            if not quiet:
                raise
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None


def _passes(
    batch: Sequence[PlannedTurn], embedder: Embedder, config: IndexConfig, lines: list[list[str]] | None, bar: Any
) -> tuple[np.ndarray, list[np.ndarray]]:
    """The model passes of a batch: the pieces' own vectors and every turn's context, each token read once
    where the stored vector allows it.

    ``late`` context: one token pass over every turn; at weight 0 the stored vector is that pass alone (the
    pieces' own vectors are not computed: zeros, never used); at weight > 0 a turn that is one piece in one
    window takes its own vector from the same pass (:func:`.context.late_passes` says why only those), the
    other pieces are embedded on their own. ``turn`` context at weight 0: the turns' vectors alone. Other
    contexts: the pieces' vectors, then the context (``mean`` reuses them)."""
    texts = [x.text for p in batch for x in p.pieces]
    dims = config.dims
    step = bar.update if bar is not None else None
    if config.context == "late":
        filled = [i for i, p in enumerate(batch) if p.pieces]
        contexts = [np.zeros((0, dims), np.float32) for _ in batch]
        own: list[np.ndarray | None] = [None] * len(batch)
        weighted = config.weight != 0.0

        def progress(n: int) -> None:  # pieces done; at weight > 0 those with both vectors (one-piece turns here)
            if step is not None and (not weighted or n == 1):
                step(n)

        late, owns = late_passes(embedder, [batch[i].pieces for i in filled], own=weighted, progress=progress)
        for i, ctx, mine in zip(filled, late, owns, strict=True):
            contexts[i] = ctx
            own[i] = mine
        vectors = np.zeros((len(texts), dims), np.float32)
        if weighted:
            starts = np.cumsum([0] + [len(p.pieces) for p in batch])
            rest: list[int] = []
            for i, mine in enumerate(own):
                if mine is not None:
                    vectors[starts[i]] = mine
                else:
                    rest.extend(range(starts[i], starts[i + 1]))
            if rest:
                vectors[rest] = embed_in_batches(
                    embedder, [texts[r] for r in rest], progress=bar is not None, desc="embedding pieces", bar=bar
                )
            check_vectors(vectors, len(texts), dims, str(config.model_id))
        return vectors, contexts
    if config.weight == 0.0 and config.context == "turn":
        # the stored vector is the context alone: the pieces' own vectors would not be used
        vectors = np.zeros((len(texts), dims), np.float32)
    else:
        vectors = embed_in_batches(embedder, texts, progress=bar is not None, desc="embedding pieces", bar=bar)
        check_vectors(vectors, len(texts), dims, str(config.model_id))
    return vectors, _contexts(batch, embedder, config, vectors, lines, bar)


def _contexts(
    batch: Sequence[PlannedTurn],
    embedder: Embedder,
    config: IndexConfig,
    vectors: np.ndarray,
    lines: list[list[str]] | None,
    bar: Any,
) -> list[np.ndarray]:
    """Every turn's context (:func:`context_vectors`; not ``late``: :func:`_passes`). With a progress bar and the
    ``turn`` context, the turns go in steps of about :data:`EMBED_CHUNK` pieces, taken by size (so the model's
    length-sorted runs pad little) and the bar moves after each step, not once per write batch."""
    texts = [clean_text(p.turn.text) for p in batch]
    if bar is None or config.context != "turn":
        return context_vectors(config.context, embedder, [p.pieces for p in batch], vectors, texts, lines)
    starts = np.cumsum([0] + [len(p.pieces) for p in batch])
    out: list[np.ndarray] = [np.zeros(0, np.float32)] * len(batch)
    order = sorted(range(len(batch)), key=lambda i: len(texts[i]))
    step: list[int] = []
    for n, i in enumerate(order):
        step.append(i)
        if sum(len(batch[j].pieces) for j in step) < EMBED_CHUNK and n + 1 < len(order):
            continue
        rows = np.concatenate([np.arange(starts[j], starts[j + 1]) for j in step]).astype(np.int64)
        done = context_vectors(
            config.context,
            embedder,
            [batch[j].pieces for j in step],
            vectors[rows],
            [texts[j] for j in step],
            [lines[j] for j in step] if lines is not None else None,
        )
        for j, ctx in zip(step, done, strict=True):
            out[j] = ctx
        if config.weight == 0.0:  # the pieces' own vectors were not embedded: the context is their only pass
            bar.update(len(rows))
        step = []
    return out


def _view_records(
    changed: Sequence[PlannedTurn],
    embedder: Embedder,
    config: IndexConfig,
    writers: Mapping[str, ViewWriter],
    known: Mapping[str, Mapping[str, Sequence[str]]],
) -> Any:
    """The views of the changed turns' pieces (texts stored in their metadata, vectors as view records)."""
    kinds = config.view_kinds
    if not kinds:
        return None
    from ..embedders.fitting import embed_fitting
    from ..storage.views import ViewRecords, view_id

    records = ViewRecords()
    for p in changed:
        stored = [known.get(x.id) for x in p.pieces]
        if p.pieces and all(v is not None and all(k in v for k in kinds) for v in stored):
            per_piece = [{k: list(v[k]) for k in kinds} for v in stored if v is not None]
        else:
            bodies = [x.body for x in p.pieces]
            per_piece = write_views(writers, kinds, clean_text(p.turn.text), bodies, f"turn {p.turn.turn_id!r}")
        for piece, meta, views in zip(p.pieces, p.metadatas, per_piece, strict=False):
            meta[VIEWS_KEY] = views_json(views)
            records.pieces.append(piece.id)
            for kind in kinds:
                for j, text in enumerate(views.get(kind, [])):
                    records.ids.append(view_id(piece.id, kind, j))
                    records.documents.append(text)
                    records.metadatas.append(
                        {
                            "piece_id": piece.id,
                            "thread_id": piece.thread_id,
                            "turn_id": piece.turn_id,
                            "view_kind": kind,
                            "view_ordinal": j,
                        }
                    )
    vectors = embed_fitting(embedder, records.documents)
    check_vectors(vectors, len(records.documents), config.dims, str(config.model_id))
    records.vectors = np.asarray(vectors, dtype=np.float32).reshape(len(records.documents), config.dims)
    return records


def rebuild_store(
    store: PieceStore,
    embedder: Embedder,
    config: IndexConfig,
    *,
    contextualizer: Contextualizer | None = None,
    progress: bool | None = None,
    view_writers: Mapping[str, ViewWriter] | None = None,
) -> IndexResult:
    """Re-embed every stored piece of ``store`` under ``config`` into a new collection swapped in when
    complete (:func:`~ctxret.storage.rebuild.rebuild`). The stored views are re-embedded, never written again (a piece
    is known by its id)."""
    repair_writes(store)  # a turn a crash cut off holds one version before it is read back
    records = list(store.records())
    turns = turns_from_records(r["metadata"] for r in records)
    known = {r["id"]: v for r in records if (v := stored_views(r["metadata"])) is not None}

    def refill(target: str) -> IndexResult:  # one call: write_turns batches it (bounded memory, overlapped writes)
        return write_turns(
            store,
            embedder,
            config,
            turns,
            contextualizer=contextualizer,
            progress=progress,
            name=target,
            max_turn_bytes=None,
            view_writers=view_writers,
            known_views=known,
        )

    return rebuild(store, config.as_dict(), refill)
