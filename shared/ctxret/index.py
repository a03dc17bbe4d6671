"""``ContextualIndex``: the facade users make with one line — index turns and documents, search by parts.

Ingest: turns → labelled pieces (sized to the embedder) → one batched embed → context vector per
turn (mean of its piece vectors by default) → ``chunk_search_vector`` → upsert with deterministic
ids. Query: message → parts (≤ 8) + whole message (≤ 8,000 bytes, the end kept) → one embedding
request → blend each part with the whole → one batched Chroma query → one :class:`Group` per part.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

import numpy as np

from ._version import __version__
from .blend import CHUNK_FOCUS_WEIGHT, chunk_search_vector, mean_vector, unit
from .context import CONTEXT_STRATEGIES, Contextualizer, context_vectors, contextualize
from .documents import document_turns
from .embedders.base import Embedder
from .errors import ConfigMismatchError, InputError
from .fusion import (
    DEFAULT_CANDIDATES,
    DEFAULT_FUSION,
    DEFAULT_LEXICAL_FLOOR,
    DEFAULT_LEXICAL_WEIGHT,
    DEFAULT_RRF_K,
    FusionMethod,
    FusionSettings,
    ahybrid_search,
    hybrid_search,
)
from .lexical import LexicalIndex, SyncReport, default_lexical_path, fts5_available, lexical_text, sync_from_store
from .store import DEFAULT_COLLECTION, ChromaStore, flatten_metadata
from .text import MAX_PARTS, MIN_PIECE_BYTES, PACKER_VERSION, WHOLE_MESSAGE_MAX_BYTES, clean_text, pack_text_pieces, split_prompt_chunks, tail_utf8
from .turns import MIN_BODY_BYTES, Piece, Source, Turn, label_pieces, parse_time, piece_id, turns_from_messages
from .parents import expand_parents
from .results import Group, Hit, IndexResult

logger = logging.getLogger(__name__)

ContextStrategy = Literal["mean", "turn", "late", "llm"]
#: Config keys that must match between a collection and the index that opens it.
COMPARED_KEYS = ("model_id", "dims", "weight", "context", "piece_bytes", "packer")
#: Metadata keys ctxret writes on every piece; caller metadata may not use them.
RESERVED_KEYS = frozenset(
    {
        "thread_id", "turn_id", "turn_index", "turn_label", "parent_id", "kind", "source_kind", "source_label",
        "source_name", "source_ordinal", "ordinal", "timestamp", "ts_epoch", "header", "body", "doc_id",
        "caller_keys", "context_text",
    }
)
_KEEP: Any = object()  # "use the index's setting" for options where None means something
_EMBED_CHUNK = 512  # texts per embed call while indexing (progress granularity)
_IN_CHUNK = 256  # values per $in filter


class ContextualIndex:
    """Contextual chunk retrieval over a Chroma collection.

    >>> index = ContextualIndex(path="./memory")                  # doctest: +SKIP
    >>> index.add_messages(messages, thread_id="user-42")         # doctest: +SKIP
    >>> for group in index.search("...", thread_id="user-42"):    # doctest: +SKIP
    ...     print(group.part, [h.score for h in group.hits])

    Store: ``path`` (embedded Chroma folder; default ``./.ctxret``), ``host``/``port`` (a Chroma
    server), ``client`` (your own Chroma client) or ``in_memory=True``. Embedder: defaults to the
    local MiniLM model (``ctxret[local]``). ``weight``, ``context`` and ``piece_bytes`` left as
    ``None`` take the collection's recorded values (or the defaults for a new collection); values
    you pass must match the collection, else :class:`ConfigMismatchError` — pass ``rebuild=True``
    to rebuild the collection under the new settings from its stored pieces.

    Hybrid search (:mod:`ctxret.fusion`): ``lexical`` (default on for an embedded or in-memory
    store, off for a Chroma server or custom client) keeps a BM25 index (:mod:`ctxret.lexical`,
    SQLite FTS5) in step with the collection — ``lexical_path`` (default
    ``<path>/ctxret-lexical-<collection>.sqlite3``; ``":memory:"`` in memory) names its file and
    switches it on for a server. Every query part then runs a lexical search beside its dense
    search, fused inside the part's group: ``fusion`` (``"convex"`` default, ``"rrf"``,
    ``"weighted_rrf"``), ``lexical_weight`` (0.7), ``rrf_k`` (60), ``candidates`` per side (50),
    ``lexical_floor`` (0.3: the share of a part's weighted words that lets a hit under the cosine
    floor through). These are query-time settings: they are not recorded in the collection and
    each :meth:`search` may override them.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        collection: str = DEFAULT_COLLECTION,
        embedder: Embedder | None = None,
        host: str | None = None,
        port: int | None = None,
        ssl: bool = False,
        headers: Mapping[str, str] | None = None,
        client: Any | None = None,
        in_memory: bool = False,
        weight: float | None = None,
        context: ContextStrategy | None = None,
        piece_bytes: int | None = None,
        score_threshold: float | None | Literal["auto"] = "auto",
        progress: bool | None = None,
        rebuild: bool = False,
        query_weight: float | None = None,
        contextualizer: Contextualizer | None = None,
        lexical: bool | None = None,
        lexical_path: str | os.PathLike[str] | None = None,
        fusion: FusionMethod | str = DEFAULT_FUSION,
        lexical_weight: float = DEFAULT_LEXICAL_WEIGHT,
        rrf_k: float = DEFAULT_RRF_K,
        candidates: int = DEFAULT_CANDIDATES,
        lexical_floor: float | None = DEFAULT_LEXICAL_FLOOR,
    ) -> None:
        if embedder is None:
            from .embedders.local import shared_local_embedder

            embedder = shared_local_embedder()
        self.embedder = embedder
        self.store = ChromaStore(
            path, collection=collection, host=host, port=port, ssl=ssl, headers=headers, client=client, in_memory=in_memory
        )
        self.progress = progress
        #: ``context="llm"``: writes one context line per piece (see :mod:`ctxret.context`).
        self.contextualizer = contextualizer
        #: Query-time hybrid settings (never recorded in the collection; override per search).
        self.fusion_settings = FusionSettings(fusion, lexical_weight, rrf_k, candidates, lexical_floor)
        #: The BM25 index kept in step with the collection, or ``None`` (dense search only).
        self.lexical_index: LexicalIndex | None = _open_lexical(
            self.store, collection, lexical, lexical_path, server=host is not None or client is not None, in_memory=in_memory
        )
        stored = self.store.stored_config()
        asked = {"weight": weight, "context": context, "piece_bytes": piece_bytes}
        defaults = {"weight": CHUNK_FOCUS_WEIGHT, "context": "mean", "piece_bytes": embedder.default_piece_bytes}
        config = {
            "model_id": embedder.model_id,
            "dims": int(embedder.dims),
            **{k: (v if v is not None else (stored or {}).get(k, defaults[k])) for k, v in asked.items()},
            "packer": PACKER_VERSION,
            "max_tokens": int(embedder.max_tokens),
            "version": __version__,
        }
        _validate_config(config)
        self.config = config
        if stored is not None:
            diff = {k: (stored.get(k), config[k]) for k in COMPARED_KEYS if stored.get(k) != config[k]}
            if diff and not rebuild:
                raise ConfigMismatchError(_mismatch_message(self.store, diff))
            if diff:
                self.store.open(stored)
                self._rebuild_into(config, old_config=stored)
        self.store.open(config)
        if self.lexical_index is not None:  # a crash between the two writes, or lexical newly on: repair
            sync_from_store(self.lexical_index, self.store)
        self.score_threshold = embedder.default_score_threshold if score_threshold == "auto" else score_threshold
        if query_weight is not None and not 0.0 <= float(query_weight) <= 1.0:
            raise InputError(f"query_weight must be between 0 and 1, got {query_weight!r}")
        #: Blend weight of a query part against its whole message; ``None``: the collection's weight.
        #: Query-time only (not recorded): e.g. ``weight=0, context="late"`` stores pure
        #: late-chunked vectors while parts keep 80% of their own vector.
        self.query_weight = query_weight

    # -- properties ----------------------------------------------------------------------------
    @property
    def weight(self) -> float:
        return float(self.config["weight"])

    @property
    def piece_bytes(self) -> int:
        return int(self.config["piece_bytes"])

    # -- ingest --------------------------------------------------------------------------------
    def add_messages(
        self,
        messages: Iterable[Mapping[str, Any]],
        thread_id: str = "default",
        *,
        first_turn: int = 1,
        metadata: Mapping[str, Any] | None = None,
        include_system: bool = False,
    ) -> IndexResult:
        """Index OpenAI-format chat messages as turns of ``thread_id``.

        Pass the whole thread each time (unchanged turns cost nothing; a changed turn replaces its
        old pieces), or a slice with ``first_turn`` set to the number of its first turn.
        """
        turns = turns_from_messages(messages, thread_id, first_turn=first_turn, include_system=include_system)
        return self.add_turns(turns, metadata=metadata)

    def add_documents(
        self,
        documents: Iterable[str | Mapping[str, Any]],
        *,
        thread_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> IndexResult:
        """Index plain-text or markdown documents, split into sections (each section is its pieces' context).

        Each document is a string or a dict ``{"text", "title"?, "id"?, "metadata"?}``. The
        document id defaults to a hash of its title and text; give an ``id`` so that re-adding an
        edited document replaces its changed sections. ``thread_id`` (the search scope) defaults to the id.
        """
        if isinstance(documents, (str, Mapping)):
            documents = [documents]
        turns: list[Turn] = []
        for i, doc in enumerate(documents):
            if isinstance(doc, str):
                text, title, doc_id, meta = doc, None, None, {}
            elif isinstance(doc, Mapping):
                if "text" not in doc:
                    raise InputError(f"document {i}: a dict document needs a 'text' key")
                text, title, doc_id = doc["text"], doc.get("title"), doc.get("id")
                meta = dict(doc.get("metadata") or {})
            else:
                raise InputError(f"document {i}: expected a string or a dict with 'text', got {type(doc).__name__}")
            merged = {**dict(metadata or {}), **meta}
            turns.extend(document_turns(text, title=title, doc_id=doc_id, thread_id=thread_id, metadata=merged))
        return self.add_turns(turns)

    def add_turns(self, turns: Sequence[Turn], *, metadata: Mapping[str, Any] | None = None) -> IndexResult:
        """Index prepared turns (or sections): the one write path every ingest goes through."""
        return self._write_turns(turns, metadata=metadata, collection=None, config=self.config)

    def _write_turns(
        self, turns: Sequence[Turn], *, metadata: Mapping[str, Any] | None, collection: Any, config: Mapping[str, Any]
    ) -> IndexResult:
        if not turns:
            return IndexResult()
        keys = [(t.thread_id, t.turn_id) for t in turns]
        if len(set(keys)) != len(keys):
            raise InputError("the same turn appears twice in one call; pass each turn (thread, number) once")
        # 1. Everything is packed and validated before anything is written.
        planned: list[tuple[Turn, list[Piece], list[dict[str, Any]]]] = []
        for turn in turns:
            if metadata:
                turn = replace(turn, metadata={**dict(metadata), **dict(turn.metadata)})
            pieces = self.fit_pieces(turn, int(config["piece_bytes"]))
            planned.append((turn, pieces, [self._piece_metadata(turn, p) for p in pieces]))
        # 2. Which turns changed? One filtered read per 256 turns.
        existing: dict[tuple[str, str], set[str]] = defaultdict(set)
        turn_ids = sorted({t.turn_id for t in turns})
        for start in range(0, len(turn_ids), _IN_CHUNK):
            chunk = turn_ids[start : start + _IN_CHUNK]
            where = {"turn_id": chunk[0]} if len(chunk) == 1 else {"turn_id": {"$in": chunk}}
            for rec in self.store.iter_records(where, collection=collection):
                meta = rec["metadata"] or {}
                existing[(str(meta.get("thread_id")), str(meta.get("turn_id")))].add(rec["id"])
        changed, unchanged = [], 0
        for turn, pieces, metas in planned:
            if {p.id for p in pieces} != existing.get((turn.thread_id, turn.turn_id), set()):
                changed.append((turn, pieces, metas))
            else:
                unchanged += len(pieces)
        if not changed:
            return IndexResult(unchanged=unchanged, turns=len(turns))
        # 3. LLM-written context lines (context="llm"), then one batched embedding pass.
        weight = float(config["weight"])
        strategy = str(config["context"])
        lines: list[list[str]] | None = None
        if strategy == "llm":
            lines = [contextualize(self.contextualizer, clean_text(t.text), p, f"turn {t.turn_id!r}") for t, p, _ in changed]
            for (_, _, metas), turn_lines in zip(changed, lines):
                for meta, line in zip(metas, turn_lines):
                    if line:
                        meta["context_text"] = line
        texts = [p.text for _, pieces, _ in changed for p in pieces]
        vectors = self._embed_with_progress(texts, desc="embedding pieces")
        # 4. Context per turn, blend, write; stale pieces are removed after the new ones are in.
        contexts = context_vectors(
            strategy, self.embedder, [p for _, p, _ in changed], vectors, [clean_text(t.text) for t, _, _ in changed], lines
        )
        ids, docs, metas_out, blended = [], [], [], []
        row = 0
        added = replaced = 0
        stale: list[str] = []
        for (turn, pieces, metas), ctx in zip(changed, contexts):
            n = len(pieces)
            if n:
                blended.append(chunk_search_vector(vectors[row : row + n], ctx, weight))
            row += n
            old = existing.get((turn.thread_id, turn.turn_id), set())
            new_ids = {p.id for p in pieces}
            added += len(new_ids - old)
            stale.extend(sorted(old - new_ids))
            replaced += len(old - new_ids)
            ids.extend(p.id for p in pieces)
            docs.extend(p.text for p in pieces)
            metas_out.extend(metas)
        lexical = self.lexical_index if collection is None else None  # a rebuild refills it after the swap
        if lexical is not None:
            lexical.mark_pending()
        if ids:
            self.store.upsert(ids, np.vstack(blended), docs, metas_out, collection=collection)
        if stale:
            col = collection if collection is not None else self.store.collection
            for start in range(0, len(stale), self.store.max_batch):
                col.delete(ids=stale[start : start + self.store.max_batch])
        if lexical is not None:  # after Chroma, in one transaction; clears the pending marker
            lexical.write(
                ids,
                [lexical_text(d, m) for d, m in zip(docs, metas_out)],
                [m["thread_id"] for m in metas_out],
                [m["turn_id"] for m in metas_out],
                delete=stale,
                settle=True,
            )
        kept = sum(len(existing.get((t.thread_id, t.turn_id), set()) & {p.id for p in ps}) for t, ps, _ in changed)
        return IndexResult(
            added=added, unchanged=unchanged + kept, replaced=replaced, turns=len(turns), turns_changed=len(changed)
        )

    def fit_pieces(self, turn: Turn, max_bytes: int | None = None) -> list[Piece]:
        """The pieces of ``turn`` as this index stores them (see :func:`fit_pieces`)."""
        return fit_pieces(turn, self.embedder, int(max_bytes or self.piece_bytes))

    def _piece_metadata(self, turn: Turn, p: Piece) -> dict[str, Any]:
        return piece_metadata(turn, p)

    def _embed_with_progress(self, texts: Sequence[str], desc: str) -> np.ndarray:
        show = self.progress if self.progress is not None else (len(texts) > _EMBED_CHUNK and sys.stderr.isatty())
        if len(texts) <= _EMBED_CHUNK or not show:
            return np.asarray(self.embedder.embed(list(texts)), dtype=np.float32)
        from tqdm.auto import tqdm

        parts = []
        with tqdm(total=len(texts), desc=desc, unit="piece", disable=not show) as bar:
            for start in range(0, len(texts), _EMBED_CHUNK):
                batch = list(texts[start : start + _EMBED_CHUNK])
                parts.append(np.asarray(self.embedder.embed(batch), dtype=np.float32))
                bar.update(len(batch))
        return np.vstack(parts)

    def embed_fitting(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts in one pass (see :func:`embed_fitting`)."""
        return embed_fitting(self.embedder, texts)

    # -- search --------------------------------------------------------------------------------
    def query_vectors(self, message: str, *, max_parts: int = MAX_PARTS, split: bool = True) -> tuple[list[str], np.ndarray]:
        """The parts of ``message`` and their blended query vectors (see :func:`query_vectors`)."""
        weight = self.weight if self.query_weight is None else self.query_weight
        return query_vectors(self.embedder, message, weight=weight, max_parts=max_parts, split=split)

    def search(
        self,
        message: str,
        k: int = 5,
        score_threshold: float | None | Literal["auto"] = "auto",
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        max_parts: int = MAX_PARTS,
        split: bool = True,
        lexical: bool | None = None,
        fusion: FusionMethod | str | None = None,
        lexical_weight: float | None = None,
        rrf_k: float | None = None,
        candidates: int | None = None,
        lexical_floor: float | None | Any = _KEEP,
        parents: bool = False,
    ) -> list[Group]:
        """Split ``message`` into parts; each part keeps its own group of at most ``k`` hits.

        Scores are raw cosine (see :mod:`ctxret.results` for conversions). ``score_threshold``:
        ``"auto"`` uses the index's floor (the embedder's default unless you set one), ``None``
        disables it. ``thread_id`` (one id or several) and ``where`` (a Chroma filter) scope the
        search inside the query. Groups are never padded and never de-duplicated across parts.
        An empty message returns ``[]``.

        Hybrid search (on when the index has a lexical index; ``lexical=False`` turns it off for
        this call): each part also runs a BM25 search, fused with its dense search inside the
        part's group (``fusion``, ``lexical_weight``, ``rrf_k``, ``candidates`` override the
        index's settings for this call). ``Hit.score`` is then the fused score and
        ``Hit.scores`` holds ``cosine``, ``bm25`` and ``fused``. The floor stays a cosine: a hit
        under it is kept only if it holds at least ``lexical_floor`` (default 0.3) of the part's
        IDF-weighted words (``lexical_floor=None``: the cosine floor for every hit).

        ``parents=True`` (small-to-big): each hit also carries its whole turn or section in
        ``Hit.parent_text``, and a group keeps only its best hit per parent (one read for all).
        """
        groups = self._search(message, k, score_threshold, thread_id, where, max_parts, split, lexical, fusion, lexical_weight, rrf_k, candidates, lexical_floor)
        return expand_parents(self.store, groups) if parents and groups else groups

    def _search(
        self, message, k, score_threshold, thread_id, where, max_parts, split, lexical, fusion, lexical_weight, rrf_k, candidates, lexical_floor
    ) -> list[Group]:
        k = _check_k(k)
        floor = self.score_threshold if score_threshold == "auto" else score_threshold
        settings = self._hybrid_settings(lexical, fusion, lexical_weight, rrf_k, candidates, lexical_floor)
        combined = scope_filter(thread_id, where)
        parts, qvecs = self.query_vectors(message, max_parts=max_parts, split=split)
        if not parts:
            return []
        if settings is not None:
            return hybrid_search(
                self.store, self.lexical_index, parts, qvecs, k, floor,
                thread_ids=_thread_ids(thread_id), where=combined, has_filter=bool(where), settings=settings,
            )  # fmt: skip
        rows = self.store.query(qvecs, k, combined)
        return _groups(parts, rows, k, floor)

    async def asearch(
        self,
        message: str,
        k: int = 5,
        score_threshold: float | None | Literal["auto"] = "auto",
        thread_id: str | Sequence[str] | None = None,
        where: Mapping[str, Any] | None = None,
        *,
        max_parts: int = MAX_PARTS,
        split: bool = True,
        lexical: bool | None = None,
        fusion: FusionMethod | str | None = None,
        lexical_weight: float | None = None,
        rrf_k: float | None = None,
        candidates: int | None = None,
        lexical_floor: float | None | Any = _KEEP,
        parents: bool = False,
    ) -> list[Group]:
        """Async :meth:`search`: the embedding runs on the embedder's async path, the store query off the event loop."""
        groups = await self._asearch(message, k, score_threshold, thread_id, where, max_parts, split, lexical, fusion, lexical_weight, rrf_k, candidates, lexical_floor)
        if parents and groups:
            return await asyncio.to_thread(expand_parents, self.store, groups)
        return groups

    async def _asearch(
        self, message, k, score_threshold, thread_id, where, max_parts, split, lexical, fusion, lexical_weight, rrf_k, candidates, lexical_floor
    ) -> list[Group]:
        k = _check_k(k)
        floor = self.score_threshold if score_threshold == "auto" else score_threshold
        settings = self._hybrid_settings(lexical, fusion, lexical_weight, rrf_k, candidates, lexical_floor)
        combined = scope_filter(thread_id, where)
        weight = self.weight if self.query_weight is None else self.query_weight
        parts, qvecs = await aquery_vectors(self.embedder, message, weight=weight, max_parts=max_parts, split=split)
        if not parts:
            return []
        if settings is not None:  # the dense and lexical queries run together, off the event loop
            return await ahybrid_search(
                self.store, self.lexical_index, parts, qvecs, k, floor,
                thread_ids=_thread_ids(thread_id), where=combined, has_filter=bool(where), settings=settings,
            )  # fmt: skip
        rows = await asyncio.to_thread(self.store.query, qvecs, k, combined)
        return _groups(parts, rows, k, floor)

    def _hybrid_settings(
        self, lexical: bool | None, fusion: Any, lexical_weight: Any, rrf_k: Any, candidates: Any, lexical_floor: Any = _KEEP
    ) -> FusionSettings | None:
        """This call's fusion settings, or ``None`` for dense search only."""
        if lexical is not None and not isinstance(lexical, bool):
            raise InputError(f"lexical must be True, False or None, got {lexical!r}")
        if lexical is False or (lexical is None and self.lexical_index is None):
            return None
        if self.lexical_index is None:
            raise InputError(
                "lexical=True but this index has no lexical index (a Chroma server or custom client gets none by "
                "default); open it with lexical_path='<local file>.sqlite3' to add one"
            )
        base = self.fusion_settings
        return FusionSettings(
            base.method if fusion is None else fusion,
            base.lexical_weight if lexical_weight is None else lexical_weight,
            base.rrf_k if rrf_k is None else rrf_k,
            base.candidates if candidates is None else candidates,
            base.lexical_floor if lexical_floor is _KEEP else lexical_floor,
        )

    def sync_lexical(self) -> SyncReport:
        """Compare the lexical index with the collection id by id and repair it from Chroma's stored texts.

        Opening an index already does this when cheap signals (counts, the pending-write marker)
        disagree; call it after writing to the collection behind ctxret's back.
        """
        if self.lexical_index is None:
            raise InputError("this index has no lexical index; open it with lexical=True (or lexical_path=...)")
        return sync_from_store(self.lexical_index, self.store, full=True)

    # -- maintenance ---------------------------------------------------------------------------
    def delete(self, thread_id: str | Sequence[str] | None = None, where: Mapping[str, Any] | None = None) -> int:
        """Delete every piece of ``thread_id`` (or matching ``where``); returns how many were deleted."""
        if thread_id is None and not where:
            raise InputError("delete needs thread_id= or where=; to remove everything use clear()")
        ids = list(self.store.ids_where(scope_filter(thread_id, where)))
        if self.lexical_index is not None:
            self.lexical_index.mark_pending()
        self.store.delete_ids(ids)
        if self.lexical_index is not None:
            self.lexical_index.delete(ids, settle=True)
        return len(ids)

    def clear(self) -> None:
        """Remove every piece (the collection and its config stay)."""
        ids = [r["id"] for r in self.store.iter_records(None, include=())]
        if self.lexical_index is not None:
            self.lexical_index.mark_pending()
        self.store.delete_ids(ids)
        if self.lexical_index is not None:
            self.lexical_index.clear(settle=True)

    def stats(self) -> dict[str, Any]:
        """Counts (pieces, turns, threads), the index config and where the store is."""
        threads: set[str] = set()
        turns: set[tuple[str, str]] = set()
        n = 0
        for rec in self.store.iter_records(None):
            meta = rec["metadata"] or {}
            threads.add(str(meta.get("thread_id")))
            turns.add((str(meta.get("thread_id")), str(meta.get("turn_id"))))
            n += 1
        return {
            "pieces": n,
            "turns": len(turns),
            "threads": len(threads),
            "collection": self.store.collection_name,
            "store": self.store.location,
            "score_threshold": self.score_threshold,
            "config": dict(self.config),
            "lexical": self.lexical_index.path if self.lexical_index is not None else None,
        }

    def reindex(self) -> IndexResult:
        """Rebuild the whole collection from its stored pieces under the current config.

        The new collection is built beside the old one and swapped in only when complete, so a
        failure part-way leaves the old collection untouched.
        """
        return self._rebuild_into(self.config, old_config=self.store.stored_config() or self.config)

    def _rebuild_into(self, config: Mapping[str, Any], old_config: Mapping[str, Any]) -> IndexResult:
        turns, metas = stored_turns(self.store)
        temp = f"{self.store.collection_name}-rebuild"[:500]
        self.store.drop(temp)
        col = self.store.open(config, name=temp)
        try:
            result = IndexResult()
            for start in range(0, len(turns), 256):
                batch = [
                    replace(t, metadata={**metas.get((t.thread_id, t.turn_id), {}), **dict(t.metadata)})
                    for t in turns[start : start + 256]
                ]
                result += self._write_turns(batch, metadata=None, collection=col, config=config)
        except BaseException:
            self.store.drop(temp)
            raise
        if self.lexical_index is not None:
            self.lexical_index.mark_pending()
        self.store.drop(self.store.collection_name)
        self.store.rename(temp, self.store.collection_name)
        if self.lexical_index is not None:  # the new pieces' stored texts, in one transaction
            sync_from_store(self.lexical_index, self.store, full=True, rebuild=True)
        logger.info("rebuilt %s: %d turns, %d pieces", self.store.collection_name, result.turns, result.added)
        return result


# -- the pipeline as functions (used by the index, the adapters and the evaluation harness) ------
def piece_metadata(turn: Turn, p: Piece) -> dict[str, Any]:
    """The flat Chroma metadata ctxret stores with a piece (caller keys may not clash with RESERVED_KEYS)."""
    caller = flatten_metadata(p.metadata) if p.metadata else {}
    clash = sorted(set(caller) & RESERVED_KEYS)
    if clash:
        raise InputError(f"metadata keys {clash} are reserved by ctxret; rename them (e.g. 'user_{clash[0]}')")
    meta: dict[str, Any] = {
        **caller,
        "thread_id": p.thread_id,
        "turn_id": p.turn_id,
        "parent_id": p.turn_id,
        "turn_index": p.turn_index,
        "turn_label": turn.label,
        "kind": p.kind,
        "source_kind": p.source_kind,
        "source_label": p.source_label,
        "source_ordinal": p.source_ordinal,
        "ordinal": p.ordinal,
        "header": p.header,
        "body": p.body,
    }
    if caller:
        meta["caller_keys"] = ",".join(sorted(caller))
    if p.source_name:
        meta["source_name"] = p.source_name
    if p.doc_id is not None:
        meta["doc_id"] = p.doc_id
    if p.timestamp is not None:
        meta["timestamp"] = p.timestamp.isoformat()
        meta["ts_epoch"] = _epoch(p.timestamp)
    return meta


def fit_pieces(turn: Turn, embedder: Embedder, max_bytes: int) -> list[Piece]:
    """Label ``turn``'s pieces at ``max_bytes`` and re-pack any piece over the embedder's token limit.

    An over-limit piece is re-packed at a smaller budget until every part fits, so nothing is
    ever truncated inside the model. Ordinals and ids are assigned after fitting.
    """
    pieces = label_pieces(turn, max_bytes)
    if not pieces:
        return pieces
    limit = int(embedder.max_tokens)
    counts = embedder.count_tokens([p.text for p in pieces])
    if max(counts) <= limit:
        return pieces
    out: list[Piece] = []
    for piece, count in zip(pieces, counts):
        out.extend([piece] if count <= limit else _split_to_fit(embedder, piece, count, limit))
    seen: dict[int, int] = defaultdict(int)
    fitted = []
    for p in out:
        ordinal = seen[p.source_ordinal]
        seen[p.source_ordinal] += 1
        pid = piece_id(turn.thread_id, turn.index, p.source_ordinal, ordinal, p.text, turn.doc_id)
        fitted.append(replace(p, ordinal=ordinal, id=pid))
    return fitted


def _split_to_fit(embedder: Embedder, piece: Piece, count: int, limit: int) -> list[Piece]:
    body_bytes = len(piece.body.encode("utf-8"))
    budget = max(MIN_PIECE_BYTES, int(body_bytes * limit / count * 0.9))
    while True:
        bodies = pack_text_pieces(piece.body, budget)
        texts = [f"{piece.header}\n{b}" for b in bodies]
        if max(embedder.count_tokens(texts)) <= limit:
            return [replace(piece, text=t, body=b) for t, b in zip(texts, bodies)]
        if budget <= MIN_PIECE_BYTES:
            raise InputError(
                f"cannot fit a piece of turn {piece.turn_id!r} into {limit} tokens even at {budget} bytes; "
                "shorten the header (title, source names) or use an embedder with a larger input limit"
            )
        budget = max(MIN_PIECE_BYTES, budget * 2 // 3)


def _fitting_plan(embedder: Embedder, texts: Sequence[str]) -> tuple[list[str], list[int]]:
    """Texts to send, and which input each belongs to: an over-limit text becomes windows that fit."""
    limit = int(embedder.max_tokens)
    counts = embedder.count_tokens(texts)
    flat: list[str] = []
    owner: list[int] = []
    for i, (text, count) in enumerate(zip(texts, counts)):
        if count <= limit:
            flat.append(text)
            owner.append(i)
            continue
        size = len(text.encode("utf-8"))
        budget = max(MIN_PIECE_BYTES, int(size * limit / count * 0.9))
        while True:
            windows = pack_text_pieces(text, budget)
            if max(embedder.count_tokens(windows)) <= limit or budget <= MIN_PIECE_BYTES:
                break
            budget = max(MIN_PIECE_BYTES, budget * 2 // 3)
        flat.extend(windows)
        owner.extend([i] * len(windows))
    return flat, owner


def _combine_windows(vecs: np.ndarray, owner: Sequence[int], n: int) -> np.ndarray:
    vecs = np.asarray(vecs, dtype=np.float32)
    out = np.zeros((n, vecs.shape[1]), np.float32)
    owner_arr = np.asarray(owner)
    for i in range(n):
        rows = vecs[owner_arr == i]
        out[i] = rows[0] if len(rows) == 1 else mean_vector(rows)
    return out


def embed_fitting(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Embed texts in one pass; a text over the model's token limit is embedded as the unit mean of windows that fit."""
    texts = [clean_text(t) for t in texts]
    if not texts:
        return np.zeros((0, int(embedder.dims)), np.float32)
    flat, owner = _fitting_plan(embedder, texts)
    return _combine_windows(embedder.embed(flat), owner, len(texts))


async def aembed_fitting(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Async :func:`embed_fitting`: awaits the embedder's async path."""
    texts = [clean_text(t) for t in texts]
    if not texts:
        return np.zeros((0, int(embedder.dims)), np.float32)
    flat, owner = _fitting_plan(embedder, texts)
    return _combine_windows(await embedder.aembed(flat), owner, len(texts))


def _query_texts(message: str, max_parts: int, split: bool) -> tuple[list[str], str]:
    if not isinstance(message, str):
        raise InputError(f"message must be a string, got {type(message).__name__}")
    whole = tail_utf8(clean_text(message), WHOLE_MESSAGE_MAX_BYTES).strip()
    if not whole:
        return [], ""
    return (split_prompt_chunks(message, max_parts) if split else [whole]), whole


def _blend_parts(vecs: np.ndarray, split: bool, weight: float) -> np.ndarray:
    if not split:
        return vecs
    return chunk_search_vector(vecs[:-1], vecs[-1], weight).astype(np.float32)


def query_vectors(
    embedder: Embedder, message: str, *, weight: float = CHUNK_FOCUS_WEIGHT, max_parts: int = MAX_PARTS, split: bool = True
) -> tuple[list[str], np.ndarray]:
    """The parts of ``message`` and their blended query vectors, from one embedding request.

    Parts come from :func:`split_prompt_chunks`; the whole message is capped at 8,000 UTF-8 bytes
    keeping the end; each part is blended with the whole. With ``split=False`` the single part is
    the whole message and its vector the unblended whole-message vector: the one-vector baseline.
    An empty or whitespace-only message gives no parts.
    """
    parts, whole = _query_texts(message, max_parts, split)
    if not parts:
        return [], np.zeros((0, int(embedder.dims)), np.float32)
    vecs = embed_fitting(embedder, parts + [whole] if split else parts)
    return parts, _blend_parts(vecs, split, weight)


async def aquery_vectors(
    embedder: Embedder, message: str, *, weight: float = CHUNK_FOCUS_WEIGHT, max_parts: int = MAX_PARTS, split: bool = True
) -> tuple[list[str], np.ndarray]:
    """Async :func:`query_vectors`: the embedding request awaits the embedder's async path."""
    parts, whole = _query_texts(message, max_parts, split)
    if not parts:
        return [], np.zeros((0, int(embedder.dims)), np.float32)
    vecs = await aembed_fitting(embedder, parts + [whole] if split else parts)
    return parts, _blend_parts(vecs, split, weight)


# -- helpers ----------------------------------------------------------------------------------
def scope_filter(thread_id: str | Sequence[str] | None, where: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Combine a thread scope with a caller's Chroma ``where`` filter (applied inside the query)."""
    clauses: list[dict[str, Any]] = []
    if thread_id is not None:
        if isinstance(thread_id, str):
            clauses.append({"thread_id": thread_id})
        else:
            ids = [str(t) for t in thread_id]
            if not ids:
                raise InputError("thread_id is an empty list; pass at least one thread id or None")
            clauses.append({"thread_id": ids[0]} if len(ids) == 1 else {"thread_id": {"$in": ids}})
    if where:
        if not isinstance(where, Mapping):
            raise InputError(f"where must be a Chroma filter dict, got {type(where).__name__}")
        clauses.append(dict(where))
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _groups(parts: Sequence[str], rows: Sequence[Sequence[tuple[str, str, float, dict[str, Any]]]], k: int, floor: float | None) -> list[Group]:
    groups = []
    for i, (part, row) in enumerate(zip(parts, rows)):
        hits = tuple(
            Hit(rid, doc, score, meta, {"cosine": score})
            for rid, doc, score, meta in row[:k]
            if floor is None or score >= floor
        )
        groups.append(Group(i, part, hits))
    return groups


def _thread_ids(thread_id: str | Sequence[str] | None) -> list[str] | None:
    if thread_id is None:
        return None
    return [thread_id] if isinstance(thread_id, str) else [str(t) for t in thread_id]


def _open_lexical(
    store: ChromaStore,
    collection: str,
    lexical: bool | None,
    lexical_path: str | os.PathLike[str] | None,
    *,
    server: bool,
    in_memory: bool,
) -> LexicalIndex | None:
    """The lexical index an index opens: on by default for an embedded or in-memory store.

    A Chroma server or custom client gets none unless ``lexical_path`` names a local file: the
    SQLite file lives on one machine (several processes there may share it), while a server's
    clients may be anywhere.
    """
    if lexical is not None and not isinstance(lexical, bool):
        raise InputError(f"lexical must be True, False or None, got {lexical!r}")
    if lexical is False:
        return None
    if lexical is None and lexical_path is None and not fts5_available():
        logger.warning("this Python's SQLite has no FTS5: hybrid search is off (dense search only)")
        return None
    if lexical_path is not None:
        return LexicalIndex(lexical_path)
    if in_memory:
        return LexicalIndex(":memory:")
    if not server and store.path is not None:
        return LexicalIndex(default_lexical_path(store.path, collection))
    if lexical:
        raise InputError(
            "lexical=True with a Chroma server or custom client needs lexical_path='<local file>.sqlite3' "
            "(the BM25 index is a local SQLite file; processes on one machine can share it)"
        )
    return None


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k (results per part) must be a positive integer, got {k!r}")
    return int(k)


def _epoch(ts: datetime) -> float:
    if ts.tzinfo is None:
        return (ts - datetime(1970, 1, 1)).total_seconds()
    return ts.timestamp()


def _validate_config(config: Mapping[str, Any]) -> None:
    w = config["weight"]
    if not isinstance(w, (int, float)) or not 0.0 <= float(w) <= 1.0:
        raise InputError(f"weight must be between 0 and 1, got {w!r}")
    if config["context"] not in CONTEXT_STRATEGIES:
        raise InputError(f"context must be one of {CONTEXT_STRATEGIES}, got {config['context']!r}")
    pb = config["piece_bytes"]
    if not isinstance(pb, int) or pb < MIN_BODY_BYTES + 64:
        raise InputError(f"piece_bytes must be an integer of at least {MIN_BODY_BYTES + 64}, got {pb!r}")


def _mismatch_message(store: ChromaStore, diff: Mapping[str, tuple[Any, Any]]) -> str:
    lines = ", ".join(f"{k}: stored {old!r} vs asked {new!r}" for k, (old, new) in diff.items())
    return (
        f"collection {store.collection_name!r} at {store.location} was built with another index config ({lines}). "
        "Open it with the same embedder and settings, or rebuild it under the new ones with "
        "ContextualIndex(..., rebuild=True) (CLI: `ctxret reindex` with the new options); "
        "a rebuild re-embeds every stored piece and loses nothing."
    )


def stored_turns(store: ChromaStore) -> tuple[list[Turn], dict[tuple[str, str], dict[str, Any]]]:
    """Rebuild turns (sources re-assembled from their pieces' bodies) from a collection's records."""
    by_turn: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for rec in store.iter_records(None):
        meta = rec["metadata"] or {}
        by_turn[(str(meta["thread_id"]), str(meta["turn_id"]))].append(meta)
    turns: list[Turn] = []
    caller_meta: dict[tuple[str, str], dict[str, Any]] = {}
    for key, metas in by_turn.items():
        metas.sort(key=lambda m: (int(m["source_ordinal"]), int(m["ordinal"])))
        first = metas[0]
        sources: dict[int, list[dict[str, Any]]] = defaultdict(list)
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
        keys = [k for k in str(first.get("caller_keys", "")).split(",") if k]
        caller_meta[key] = {k: first[k] for k in keys if k in first}
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
            )
        )
    turns.sort(key=lambda t: (t.thread_id, t.doc_id or "", t.index))
    return turns, caller_meta
