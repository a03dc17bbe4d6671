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
from ..storage.schema import caller_view, check_id, check_metadata_arg
from ..text import restore_text
from .config import IndexConfig
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
        check_id(turn.thread_id)
        if turn.doc_id is not None:
            check_id(turn.doc_id, "document id")
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
        if metadata:
            turn = replace(turn, metadata={**dict(metadata), **dict(turn.metadata)})
        check_shared_keys(turn)
        pieces = fit_pieces(turn, embedder, config.piece_bytes)
        planned.append(PlannedTurn(turn, pieces, [piece_metadata(turn, p) for p in pieces], plan))
    return planned


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
    """What one write replaces whole: a document (``doc_id``: every section it has) or one turn.

    ``write`` (the turns to embed and write: new or changed) and ``old`` (the piece ids stored for
    the unit) come from :func:`diff_units`."""

    thread_id: str
    doc_id: str | None
    turns: list[PlannedTurn]
    write: list[PlannedTurn] = field(default_factory=list)
    old: set[str] = field(default_factory=set)

    @property
    def key(self) -> tuple[str, str]:
        return (self.thread_id, self.doc_id if self.doc_id is not None else self.turns[0].turn.turn_id)

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


def write_units(planned: Sequence[PlannedTurn], replace: bool, documents: Iterable[tuple[str, str]]) -> list[WriteUnit]:
    """The write units of a call: with ``replace``, one per document (its sections together), else one per turn."""
    units: list[WriteUnit] = []
    docs: dict[tuple[str, str], WriteUnit] = {}
    for p in planned:
        if replace and p.turn.doc_id is not None:
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
        self, turns: Iterable[tuple[str, str]] = (), documents: Iterable[tuple[str, str]] = (), name: str | None = None
    ) -> StoredPieces: ...


def stored_pieces(sink: StoredReader, units: Sequence[WriteUnit], name: str | None) -> StoredPieces:
    """The stored piece ids of ``units`` (:meth:`StoredReader.existing`, in collection ``name``)."""
    turns = [u.turns[0].key for u in units if u.doc_id is None]
    return sink.existing(turns, [u.key for u in units if u.doc_id is not None], name=name)


def diff_units(units: Sequence[WriteUnit], stored: StoredPieces) -> None:
    """Set each unit's ``write`` (turns whose pieces differ from the stored ones) and ``old``."""
    for u in units:
        if u.doc_id is None:
            by_turn = {u.turns[0].turn.turn_id: stored.turns.get(u.turns[0].key, set())}
        else:
            by_turn = stored.documents.get(u.key, {})
        u.old = set().union(*by_turn.values())
        u.write = [p for p in u.turns if {x.id for x in p.pieces} != by_turn.get(p.turn.turn_id, set())]


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
        turns.append(
            Turn(
                thread_id=key[0],
                index=index,
                sources=tuple(srcs),
                label=str(first.get("turn_label", f"Turn {index}")),
                kind=str(first.get("kind", "turn")),
                timestamp=parse_time(first.get("timestamp")),
                doc_id=first.get("doc_id"),
                metadata=caller_view(first),  # by the caller's names: written again under the same stored ones
            )
        )
    turns.sort(key=lambda t: (t.thread_id, t.doc_id or "", t.index))
    return turns
