"""The one write path: turns → fitted, labelled pieces → what changed → context → one embedding pass → blend → store.

Everything is packed and validated before anything is written; re-adding unchanged turns embeds
nothing; a changed turn replaces its pieces (the new ones are written, then the stale ones
removed, in the store's Chroma-then-lexical order).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from ..blend import chunk_search_vector
from ..config import IndexConfig
from ..embedders.base import Embedder
from ..embedders.fitting import embed_in_batches, fit_pieces
from ..errors import EmbeddingError, InputError
from ..results import IndexResult
from ..storage.schema import check_id, piece_metadata
from ..text import clean_text
from .context import Contextualizer, context_vectors, contextualize
from .views import VIEWS_KEY, ViewWriter, stored_views, views_json, write_views
from .turns import Piece, Source, Turn, parse_time

__all__ = ["PieceSink", "PlannedTurn", "plan_turns", "turns_from_records", "write_turns"]


class PieceSink(Protocol):
    """Where the writer puts pieces (``PieceStore`` implements it)."""

    def existing(self, turn_ids: Sequence[str], name: str | None = None) -> Mapping[tuple[str, str], set[str]]: ...

    def write(
        self,
        ids: Sequence[str],
        vectors: np.ndarray,
        documents: Sequence[str],
        metadatas: Sequence[Mapping[str, Any]],
        *,
        stale: Sequence[str] = (),
        name: str | None = None,
        views: Any = None,
    ) -> None: ...


@dataclass
class PlannedTurn:
    """A turn with its fitted pieces and their metadata, validated and ready to embed."""

    turn: Turn
    pieces: list[Piece]
    metadatas: list[dict[str, Any]]

    @property
    def key(self) -> tuple[str, str]:
        return (self.turn.thread_id, self.turn.turn_id)


#: A turn or section over this many UTF-8 bytes is refused (``max_turn_bytes``; ``None``: no limit).
#: 2 MB is about 3,800 pieces of the local model: a minute of embedding on a laptop.
DEFAULT_MAX_TURN_BYTES = 2_000_000


def plan_turns(
    turns: Sequence[Turn],
    embedder: Embedder,
    config: IndexConfig,
    metadata: Mapping[str, Any] | None = None,
    *,
    max_turn_bytes: int | None = DEFAULT_MAX_TURN_BYTES,
) -> list[PlannedTurn]:
    """Fit and label every turn's pieces and build their metadata; raises before anything is written."""
    for turn in turns:
        if not isinstance(turn, Turn):
            raise InputError(f"add_turns takes ctxret Turns (from turns_from_messages or document_turns), got {type(turn).__name__}")
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
    keys = [(t.thread_id, t.turn_id) for t in turns]
    if len(set(keys)) != len(keys):
        raise InputError("the same turn appears twice in one call; pass each turn (thread, number) once")
    planned = []
    for turn in turns:
        if metadata:
            turn = replace(turn, metadata={**dict(metadata), **dict(turn.metadata)})
        pieces = fit_pieces(turn, embedder, config.piece_bytes)
        planned.append(PlannedTurn(turn, pieces, [piece_metadata(turn, p) for p in pieces]))
    return planned


def write_turns(
    sink: PieceSink,
    embedder: Embedder,
    config: IndexConfig,
    turns: Sequence[Turn],
    *,
    metadata: Mapping[str, Any] | None = None,
    contextualizer: Contextualizer | None = None,
    progress: bool | None = None,
    name: str | None = None,
    max_turn_bytes: int | None = DEFAULT_MAX_TURN_BYTES,
    view_writers: Mapping[str, ViewWriter] | None = None,
    known_views: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> IndexResult:
    """Index ``turns`` into ``sink`` under ``config`` (``name``: another collection, for a rebuild).

    With ``config.views``, each changed turn's pieces get their LLM-written views
    (:mod:`.views`): from ``known_views`` (piece id → ``{kind: texts}``, what a rebuild read from
    the stored pieces) when every piece of the turn has them, else from ``view_writers`` (one call
    per kind and turn).
    """
    if not turns:
        return IndexResult()
    planned = plan_turns(turns, embedder, config, metadata, max_turn_bytes=max_turn_bytes)
    # Which turns changed? One filtered read per 256 turns.
    existing = sink.existing(sorted({p.turn.turn_id for p in planned}), name=name)
    changed = [p for p in planned if {x.id for x in p.pieces} != existing.get(p.key, set())]
    changed_keys = {p.key for p in changed}
    unchanged = sum(len(p.pieces) for p in planned if p.key not in changed_keys)
    if not changed:
        return IndexResult(unchanged=unchanged, turns=len(turns))
    # LLM-written context lines (context="llm"), then one batched embedding pass.
    lines: list[list[str]] | None = None
    if config.context == "llm":
        lines = [contextualize(contextualizer, clean_text(p.turn.text), p.pieces, f"turn {p.turn.turn_id!r}") for p in changed]
        for p, turn_lines in zip(changed, lines):
            for meta, line in zip(p.metadatas, turn_lines):
                if line:
                    meta["context_text"] = line
    view_records = _view_records(changed, embedder, config, view_writers or {}, known_views or {})
    texts = [x.text for p in changed for x in p.pieces]
    if config.weight == 0.0 and config.context in ("late", "turn"):
        # the stored vector is the context alone: the pieces' own vectors would not be used
        vectors = np.zeros((len(texts), config.dims), np.float32)
    else:
        vectors = embed_in_batches(embedder, texts, progress=progress, desc="embedding pieces")
        check_vectors(vectors, len(texts), config.dims, str(config.model_id))
    contexts = context_vectors(
        config.context, embedder, [p.pieces for p in changed], vectors, [clean_text(p.turn.text) for p in changed], lines
    )
    # Blend, then write; stale pieces are removed after the new ones are in.
    ids: list[str] = []
    docs: list[str] = []
    metas: list[dict[str, Any]] = []
    blended: list[np.ndarray] = []
    stale: list[str] = []
    row = added = kept = 0
    for p, ctx in zip(changed, contexts):
        n = len(p.pieces)
        if n:
            blended.append(chunk_search_vector(vectors[row : row + n], ctx, config.weight))
        row += n
        old = existing.get(p.key, set())
        new_ids = {x.id for x in p.pieces}
        added += len(new_ids - old)
        kept += len(new_ids & old)
        stale.extend(sorted(old - new_ids))
        ids.extend(x.id for x in p.pieces)
        docs.extend(x.text for x in p.pieces)
        metas.extend(p.metadatas)
    vecs = np.vstack(blended) if blended else np.zeros((0, config.dims), np.float32)
    if view_records is None:
        sink.write(ids, vecs, docs, metas, stale=stale, name=name)
    else:
        sink.write(ids, vecs, docs, metas, stale=stale, name=name, views=view_records)
    return IndexResult(added=added, unchanged=unchanged + kept, replaced=len(stale), turns=len(turns), turns_changed=len(changed))


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
        for piece, meta, views in zip(p.pieces, p.metadatas, per_piece):
            meta[VIEWS_KEY] = views_json(views)
            records.pieces.append(piece.id)
            for kind in kinds:
                for j, text in enumerate(views.get(kind, [])):
                    records.ids.append(view_id(piece.id, kind, j))
                    records.documents.append(text)
                    records.metadatas.append(
                        {"piece_id": piece.id, "thread_id": piece.thread_id, "turn_id": piece.turn_id,
                         "view_kind": kind, "view_ordinal": j}
                    )  # fmt: skip
    vectors = embed_fitting(embedder, records.documents)
    check_vectors(vectors, len(records.documents), config.dims, str(config.model_id))
    records.vectors = np.asarray(vectors, dtype=np.float32).reshape(len(records.documents), config.dims)
    return records


def check_vectors(vectors: np.ndarray, n: int, dims: int, model: str) -> None:
    """Refuse an embedder's answer that cannot be stored as is (nothing is truncated or padded)."""
    shape = getattr(vectors, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] != n:
        raise EmbeddingError(f"the embedder returned {shape} for {n} texts; it must return one vector per text, in order")
    if shape[1] != dims:
        raise EmbeddingError(
            f"the embedder returned {shape[1]}-dimensional vectors but this index holds {dims}-dimensional ones "
            f"from {model}; use the embedder (and dimensions) the index was built with, or rebuild it"
        )
    if not np.all(np.isfinite(vectors)):
        raise EmbeddingError("the embedder returned vectors with NaN or infinite values; nothing was written")


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
                    text="\n".join(str(m["body"]) for m in ms),
                    ordinal=new_ord,
                    timestamp=parse_time(m0.get("timestamp")),
                    name=m0.get("source_name"),
                )
            )
        caller_keys = [k for k in str(first.get("caller_keys", "")).split(",") if k]
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
                metadata={k: first[k] for k in caller_keys if k in first},
            )
        )
    turns.sort(key=lambda t: (t.thread_id, t.doc_id or "", t.index))
    return turns


def rebuild_store(
    store: Any, embedder: Embedder, config: IndexConfig, *, contextualizer: Contextualizer | None = None,
    progress: bool | None = None, view_writers: Mapping[str, ViewWriter] | None = None, batch_turns: int = 256,
) -> IndexResult:  # fmt: skip
    """Re-embed every stored piece of ``store`` under ``config`` into a new collection swapped in when
    complete (``PieceStore.rebuild``). The stored views are re-embedded, never written again (a piece
    is known by its id)."""
    records = list(store.records())
    turns = turns_from_records(r["metadata"] for r in records)
    known = {r["id"]: v for r in records if (v := stored_views(r["metadata"])) is not None}

    def refill(target: str) -> IndexResult:
        result = IndexResult()
        for start in range(0, len(turns), batch_turns):
            result += write_turns(
                store, embedder, config, turns[start : start + batch_turns],
                contextualizer=contextualizer, progress=progress, name=target, max_turn_bytes=None,
                view_writers=view_writers, known_views=known,
            )  # fmt: skip
        return result

    return store.rebuild(config.as_dict(), refill)
