"""Planning a write: turns → fitted, labelled pieces with their metadata (:func:`plan_turns`), and what
changed against the store, by write unit (a document whole, or one chat turn: :func:`diff_units`).

Everything here runs before anything is embedded or written: a bad turn fails the call whole. The
write path (:mod:`.writer`) embeds and writes what the diff says changed. :func:`turns_from_records`
goes the other way, stored pieces back into their turns (what a rebuild plans again).
"""

from __future__ import annotations

import logging
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..embedders.base import Embedder
from ..errors import InputError
from ..storage.base import StoredPieces
from ..storage.schema import (
    MAX_ID_BYTES,
    MAX_LABEL_BYTES,
    caller_view,
    check_id,
    check_metadata_arg,
    check_size,
    check_writable_thread,
    shown,
)
from ..text import restore_text
from .config import IndexConfig
from .items import check_item_turn, legacy_item_fields
from .pieces import fit_pieces, piece_metadata
from .turns import Piece, Source, Turn, parse_time

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MAX_TURN_BYTES",
    "PlannedTurn",
    "StoredReader",
    "WriteUnit",
    "diff_units",
    "plan_turns",
    "same_metadata",
    "stored_pieces",
    "turns_from_records",
    "write_units",
]


@dataclass
class PlannedTurn:
    """A turn with its fitted pieces and their metadata, validated and ready to embed.

    ``plan`` names what the pieces were fitted to (model, piece budget, turn limit): a planned
    turn handed back to :func:`~.writer.write_turns` (``ContextualIndex.check_turns`` returns them) is
    written as planned when it matches, and planned again otherwise.
    """

    turn: Turn
    pieces: list[Piece]
    metadatas: list[dict[str, Any]]
    plan: tuple[Any, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.turn.thread_id, self.turn.turn_id)


#: A turn or section over this many UTF-8 bytes is refused (``max_turn_bytes``; ``None``: no limit).
#: 2 MB is about 3,800 pieces of the local model: a minute of embedding on a laptop.
DEFAULT_MAX_TURN_BYTES = 2_000_000


def plan_turns(
    turns: Sequence[Turn | PlannedTurn],
    embedder: Embedder,
    config: IndexConfig,
    metadata: Mapping[str, Any] | None = None,
    *,
    max_turn_bytes: int | None = DEFAULT_MAX_TURN_BYTES,
) -> list[PlannedTurn]:
    """Fit and label every turn's pieces and build their metadata; raises before anything is written.

    A :class:`PlannedTurn` planned under the same model, piece budget and turn limit (and no
    ``metadata`` to add) is taken as it is.
    """
    check_metadata_arg(metadata)
    plan = (str(config.model_id), config.piece_bytes, int(embedder.max_tokens), max_turn_bytes)
    ready = {i: t for i, t in enumerate(turns) if isinstance(t, PlannedTurn) and t.plan == plan and not metadata}
    raw = [t.turn if isinstance(t, PlannedTurn) else t for t in turns]
    for i, turn in enumerate(raw):
        if i in ready:
            continue
        if not isinstance(turn, Turn):
            raise InputError(
                f"add_turns takes ctxret Turns (from turns_from_messages or document_turns), got {type(turn).__name__}"
            )
        if turn.item is None:
            check_writable_thread(turn.thread_id)  # no chat or document thread in an item store's threads
        else:
            check_id(turn.thread_id)
        check_item_turn(turn)
        if turn.doc_id is not None:
            check_id(turn.doc_id, "document id")
        check_labels(turn)
        size = sum(len(s.text.encode("utf-8", "surrogatepass")) for s in turn.sources)
        if max_turn_bytes is not None and size > max_turn_bytes:
            raise InputError(
                f"{turn.label} of thread {turn.thread_id!r} is {size:,} bytes, over the {max_turn_bytes:,}-byte limit "
                f"for one turn or section ({size // 1_200:,}+ pieces to embed); split it, or raise the limit with "
                "ContextualIndex(..., max_turn_bytes=N) (CLI: --max-bytes N; None / 0 for no limit)"
            )
    keys = [(t.thread_id, t.turn_id) for t in raw]
    if len(set(keys)) != len(keys):
        raise InputError("the same turn appears twice in one call; pass each turn (thread, number) once")
    planned = []
    for i, turn in enumerate(raw):
        if i in ready:
            planned.append(ready[i])
            continue
        if metadata and turn.item is None:
            turn = replace(turn, metadata={**dict(metadata), **dict(turn.metadata)})
        check_shared_keys(turn)
        pieces = fit_pieces(turn, embedder, config.piece_bytes)
        planned.append(PlannedTurn(turn, pieces, [piece_metadata(turn, p) for p in pieces], plan))
    return planned


def check_labels(turn: Turn) -> None:
    """Every name a turn stores besides its text (its label; each source's label, speaker or tool name, message and
    tool-call keys) is valid Unicode within its limit (:data:`~ctxret.storage.schema.MAX_LABEL_BYTES`, ids
    :data:`~ctxret.storage.schema.MAX_ID_BYTES`): an :class:`InputError` naming it, never a store error."""
    where = f"turn {turn.index} of thread {shown(turn.thread_id)}"
    if not isinstance(turn.label, str):
        raise InputError(f"{where}: its label must be a string, got {type(turn.label).__name__}")
    check_size(turn.label, f"{where}: its label (a title or heading)", MAX_LABEL_BYTES)
    for src in turn.sources:
        for what, value, limit in (
            ("label", src.label, MAX_LABEL_BYTES),
            ("name", src.name, MAX_LABEL_BYTES),
            ("message key", src.message_key, MAX_ID_BYTES + 64),
            ("tool call id", src.call_id, MAX_ID_BYTES),
            ("tool result key", src.result_key, MAX_ID_BYTES + 64),
        ):
            if value is not None:
                check_size(str(value), f"{where}: source {src.ordinal}'s {what}", limit)


def check_shared_keys(turn: Turn) -> None:
    """A caller's ``thread_id`` / ``doc_id`` metadata is the turn's own (one key for the caller and ctxret,
    :data:`~ctxret.storage.schema.SHARED_KEYS`): an :class:`InputError` when it names another thread or document."""
    meta = turn.metadata or {}
    for key, own, what in (("thread_id", turn.thread_id, "thread"), ("doc_id", turn.doc_id, "document")):
        value = meta.get(key)
        if value is None:
            continue
        if own is None:
            raise InputError(
                f"metadata {key!r} is {value!r} on {turn.label} of thread {turn.thread_id!r}, a chat turn: {key} is "
                "the document a section belongs to (ctxret's field and yours are one key), and a chat turn has none; "
                "rename your key (e.g. 'source_doc')"
            )
        if str(value) != own:
            raise InputError(
                f"metadata {key!r} is {value!r} but {turn.label} is in {what} {own!r}: {key} is one key for you and "
                f"ctxret (the {what} a piece belongs to; a filter on it is the {what}), so give one value (leave "
                f"the {key} argument out to take the metadata's), or rename your key"
            )


@dataclass(eq=False)
class WriteUnit:
    """What one write replaces whole: a document (``doc_id``: every section it has), one turn, or the chat turns of
    a thread (``whole``: every chat turn it has; its documents stay).

    ``write`` (the turns to embed and write: new or changed), ``old`` (the piece ids stored for the unit),
    ``updated`` and ``gone`` (a whole thread's stored chat turns it no longer has) come from :func:`diff_units`. A
    unit is never split between two store writes: a whole thread is replaced in one (all of it or nothing across a
    crash)."""

    thread_id: str
    doc_id: str | None
    turns: list[PlannedTurn]
    write: list[PlannedTurn] = field(default_factory=list)
    old: set[str] = field(default_factory=set)
    whole: bool = False
    gone: set[str] = field(default_factory=set)
    #: stored piece ids written again with other metadata (the same text: a new caller value, an item's new value)
    updated: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str]:
        if self.whole:
            return (self.thread_id, "")
        return (self.thread_id, self.doc_id if self.doc_id is not None else self.turns[0].turn.turn_id)

    @property
    def changed_keys(self) -> list[tuple[str, str]]:
        """What the unit writes or removes, as :attr:`~ctxret.results.IndexResult.changed` names it: its key, or a
        whole thread's ``(thread_id, turn_id)`` of each turn written or removed."""
        if not self.whole:
            return [self.key]
        return [(self.thread_id, t) for t in [p.turn.turn_id for p in self.write] + sorted(self.gone)]

    @property
    def ids(self) -> set[str]:
        """Every piece id the unit holds once written."""
        return {x.id for p in self.turns for x in p.pieces}

    @property
    def stale(self) -> set[str]:
        return self.old - self.ids

    @property
    def changed(self) -> bool:
        return bool(self.write) or bool(self.stale)


def write_units(
    planned: Sequence[PlannedTurn],
    replace: bool,
    documents: Iterable[tuple[str, str]],
    threads: Iterable[str] = (),
) -> list[WriteUnit]:
    """The write units of a call: with ``replace``, one per document (its sections together), else one per turn;
    the chat turns of each of ``threads`` are one unit (the thread's chat turns are exactly those given)."""
    units: list[WriteUnit] = []
    docs: dict[tuple[str, str], WriteUnit] = {}
    whole: dict[str, WriteUnit] = {}
    for thread in dict.fromkeys(str(t) for t in threads):
        whole[thread] = WriteUnit(thread, None, [], whole=True)
        units.append(whole[thread])
    for p in planned:
        if p.turn.doc_id is None and p.turn.thread_id in whole:
            whole[p.turn.thread_id].turns.append(p)
        elif replace and p.turn.doc_id is not None:
            key = (p.turn.thread_id, p.turn.doc_id)
            if key not in docs:
                docs[key] = WriteUnit(*key, [])
                units.append(docs[key])
            docs[key].turns.append(p)
        else:
            units.append(WriteUnit(p.turn.thread_id, None, [p]))
    for key in documents:
        if replace and key not in docs:
            docs[key] = WriteUnit(str(key[0]), str(key[1]), [])
            units.append(docs[key])
    return units


class StoredReader(Protocol):
    """What the diff reads of a store (``PieceStore.existing``)."""

    def existing(
        self,
        turns: Iterable[tuple[str, str]] = (),
        documents: Iterable[tuple[str, str]] = (),
        name: str | None = None,
        threads: Iterable[str] = (),
    ) -> StoredPieces: ...


def stored_pieces(sink: StoredReader, units: Sequence[WriteUnit], name: str | None) -> StoredPieces:
    """The stored piece ids of ``units`` (:meth:`StoredReader.existing`, in collection ``name``)."""
    turns = [u.turns[0].key for u in units if u.doc_id is None and not u.whole]
    documents = [u.key for u in units if u.doc_id is not None]
    threads = [u.thread_id for u in units if u.whole]
    if threads:
        return sink.existing(turns, documents, name=name, threads=threads)
    return sink.existing(turns, documents, name=name)


def diff_units(units: Sequence[WriteUnit], stored: StoredPieces) -> None:
    """Set each unit's ``write`` (turns whose pieces differ from the stored ones: other ids, or the same ids with
    other metadata, :func:`same_metadata`) ``old`` and ``gone``."""
    known = stored.metadata

    def same(p: PlannedTurn, u: WriteUnit) -> bool:
        if known is None:
            return True
        differ = False
        for x, m in zip(p.pieces, p.metadatas, strict=True):
            if x.id in known and not same_metadata(m, known[x.id]):
                differ = True
                u.updated.add(x.id)
                # Chroma's upsert merges metadata: a key the piece no longer has is written as None (removed)
                m.update(dict.fromkeys(set(known[x.id]) - set(m) - WRITER_KEYS))
        return not differ

    for u in units:
        if u.whole:
            by_turn = stored.threads.get(u.thread_id, {})
            u.gone = set(by_turn) - {p.turn.turn_id for p in u.turns}
        elif u.doc_id is None:
            by_turn = {u.turns[0].turn.turn_id: stored.turns.get(u.turns[0].key, set())}
        else:
            by_turn = stored.documents.get(u.key, {})
        u.old = set().union(*by_turn.values())
        u.updated = set()
        u.write = [
            p for p in u.turns if not same(p, u) or {x.id for x in p.pieces} != by_turn.get(p.turn.turn_id, set())
        ]


def same_metadata(planned: Mapping[str, Any], stored: Mapping[str, Any] | None) -> bool:
    """Whether a stored piece holds the metadata a write planned for it: every planned key with the same value, and
    no other key. The keys the write path adds after planning (context
    lines, views) are not compared: they follow from the text, which the piece id holds. A piece with the same text
    but a new caller key or value (a document re-added with new metadata, an item's new value) is written again."""
    if stored is None:
        return False
    if any(stored.get(k) != v for k, v in planned.items()):
        return False
    return not set(stored) - set(planned) - WRITER_KEYS


#: The keys the write path adds to a piece's metadata after planning (context lines, views): not compared.
WRITER_KEYS = frozenset({"context_text", "view_texts"})


def _source_text(metas: Sequence[Mapping[str, Any]]) -> str:
    """A stored source's text from its pieces (in order): exactly as it was given where the pieces carry what gives
    it back (``exact_patch``, chat messages), else their bodies as packed (documents, stores written before)."""
    bodies = [str(m["body"]) for m in metas]
    patches = [m.get("exact_patch") if isinstance(m.get("exact_patch"), str) else None for m in metas]
    try:
        return restore_text(bodies, patches)
    except (ValueError, TypeError, IndexError, zlib.error) as e:  # a damaged patch: the text as packed, never an error
        logger.warning("a stored message's exact text cannot be restored (%s); its packed text is used", e)
        return "\n".join(bodies)


def turns_from_records(records: Iterable[Mapping[str, Any]]) -> list[Turn]:
    """Turns re-assembled from stored pieces' metadata (sources from their bodies), caller metadata included.

    What a rebuild re-indexes: every piece of a collection back into its turn, in thread,
    document and turn order.
    """
    by_turn: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for meta in records:
        by_turn[(str(meta["thread_id"]), str(meta["turn_id"]))].append(meta)
    turns: list[Turn] = []
    for key, metas in by_turn.items():
        metas = sorted(metas, key=lambda m: (int(m["source_ordinal"]), int(m["ordinal"])))
        first = metas[0]
        sources: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
        for m in metas:
            sources[int(m["source_ordinal"])].append(m)
        srcs = []
        for new_ord, (_, ms) in enumerate(sorted(sources.items())):
            m0 = ms[0]
            srcs.append(
                Source(
                    kind=str(m0["source_kind"]),
                    label=str(m0.get("source_label", "")),
                    text=_source_text(ms),
                    ordinal=new_ord,
                    timestamp=parse_time(m0.get("timestamp")),
                    name=m0.get("source_name"),
                    message_key=m0.get("message_key"),
                    call_id=m0.get("tool_call_id"),
                    result_key=m0.get("result_key"),
                    stamped=bool(m0.get("time_added")),
                )
            )
        index = int(first["turn_index"])
        item = legacy_item_fields(first)
        if item is not None:  # an item's: its fields ctxret's again, in its own thread (a store written before moves)
            metadata: Mapping[str, Any] = {}
            thread, kind = item[0], "item"
        else:
            metadata = caller_view(first)
            thread, kind = key[0], str(first.get("kind", "turn"))
        turns.append(
            Turn(
                thread_id=thread,
                index=index,
                sources=tuple(srcs),
                label=str(first.get("turn_label", f"Turn {index}")),
                kind=kind,
                timestamp=parse_time(first.get("timestamp")),
                doc_id=first.get("doc_id"),
                metadata=metadata,  # by the caller's names: written again under the same stored ones
                item=None if item is None else item[1],
            )
        )
    turns.sort(key=lambda t: (t.thread_id, t.doc_id or "", t.index))
    return turns
