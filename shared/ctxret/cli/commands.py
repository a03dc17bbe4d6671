# ruff: noqa: T201  (a command-line tool: it prints)
"""The commands ``index``, ``search``, ``stats``, ``reindex`` and ``delete``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import CtxretError, InputError
from ..ingest.append import append_threads
from ..ingest.messages import titled_turn
from .readers import DEFAULT_INCLUDE, FileProblem, collect_paths, document_root, read_input_file, skipped_summary
from .render import clip, error, floor_text, hit_line, one_line, search_json, terminal_width, warn
from .search_flags import flag_options
from .settings import (
    EXIT_ERROR,
    EXIT_OK,
    UsageError,
    describe_embedder,
    index_exists,
    make_embedder,
    open_index,
    open_store,
    quick_store_stats,
    resolve_settings,
)

if TYPE_CHECKING:
    from ..ingest.plan import PlannedTurn


def cmd_index(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    if args.thread is not None and not args.thread.strip():
        raise UsageError("--thread needs a non-empty id")
    include, exclude = args.include or DEFAULT_INCLUDE, args.exclude or ()
    paths, skipped = collect_paths(args.paths, include, exclude)
    folders = [Path(name) for name in args.paths if Path(name).is_dir()]
    for line in skipped_summary(skipped, include, exclude):
        print(line, file=sys.stderr)
    root = document_root(paths, args.root)
    if args.prune:
        _check_prune(folders, paths, root, args.root)
    files, problems = [], []
    for path in paths:  # read and check everything before anything is written
        try:
            files.append(read_input_file(path, args.thread, root))
        except FileProblem as e:
            problems.append(e)
    if problems:
        return _refuse(problems, len(paths))
    embedder = make_embedder(settings)
    opened = index_exists(settings)  # else the store is created only when the write starts: a refusal creates nothing

    def open_for_write() -> Any:
        return open_index(settings, embedder=embedder, max_turn_bytes=args.max_bytes, progress=_progress(args))

    index = open_for_write() if opened else _planner(settings, embedder, args.max_bytes)
    planned: list[PlannedTurn] = []
    owner: dict[tuple[str, str], Path] = {}  # each turn's file
    for f in files:  # pieces are sized to the model, and limits checked, before anything is written
        try:
            mine = index.check_turns(f.turns)
        except InputError as e:
            problems.append(FileProblem(f.path, None, str(e)))
            continue
        if f.chats:  # chat messages are appended to their threads (files naming one thread: in the order given)
            continue
        clash = next((p.key for p in mine if owner.get(p.key, f.path) != f.path), None)
        if clash is not None:  # one call takes each turn once: two files must not give the same section
            problem = f"section {clash[1]!r} of {clash[0]!r} is also in {owner[clash]}"
            problems.append(FileProblem(f.path, None, f"{problem}: give each document its own id"))
            continue
        owner.update((p.key, f.path) for p in mine)
        planned += mine
    if problems:
        return _refuse(problems, len(paths))
    for f in files:
        unit = "section" if f.kind == "document" else "turn"
        if not f.turns:
            warn(f"{f.path}: nothing to index (no text)" + (": its stored sections are removed" * bool(f.document)))
        else:
            print(f"{f.path}: {len(f.turns)} {unit}(s) in {_threads(f.threads)}")
    documents = [f.document for f in files if f.document is not None]
    if args.prune:
        gone = _pruned(index, folders, root, args.thread, set(documents))
        where = ", ".join(str(d) for d in folders)
        listing = ", ".join(doc for _, doc in gone) if gone else "none"
        verb = "would prune (dry run)" if args.dry_run else "prune"
        print(f"{verb}: {len(gone)} stored document(s) under {where} whose file is gone: {listing}")
        documents += gone
    if args.dry_run:
        print("dry run: nothing written")
        return EXIT_OK
    if not opened:
        index.close()
        index = open_for_write()
    started = time.perf_counter()
    chats = [item for f in files for item in f.chats]
    titles = {thread: title for f in files for thread, title in f.titles.items()}

    def write(chat_turns: list[Any]) -> Any:  # a document replaces its stored version whole
        chat_turns = [titled_turn(t, titles.get(t.thread_id)) for t in chat_turns]  # a conversation's title: headers
        return index.add_turns([*planned, *chat_turns], documents=documents)

    try:  # one call: the turns of all files share embedding batches, written in bounded batches
        total = append_threads(index.store, chats, include_system=False, write=write) if chats else write([])
    except CtxretError as e:  # e.g. the embedding service failed: the batches before it are stored
        error(str(e))  # the core's message says how many turns are stored (whole turns)
        if getattr(e, "written", None) is not None:
            error("run the same command again to finish: the stored turns are unchanged and cost nothing")
        return EXIT_ERROR
    store = index.store
    print(
        f"indexed {total.turns:,} turn(s) from {len(files)} file(s): {total.added:,} piece(s) added, "
        f"{total.unchanged:,} unchanged, {total.replaced:,} replaced"
        + (f", {total.duplicates:,} message(s) already stored" if total.duplicates else "")
        + f" ({time.perf_counter() - started:.1f}s); "
        f"store {store.location} (collection {store.collection_name}): {store.count():,} pieces"
    )
    return EXIT_OK


def _planner(settings: Any, embedder: Any, max_bytes: int | None) -> Any:
    """An index in this process's memory with the config a new collection would get (the embedder's defaults, the
    settings' weight): it plans and checks the turns of a store that does not exist yet, creating nothing; the turns
    it plans are written as they are once the store is created."""
    from ..index import ContextualIndex
    from ..ingest.plan import DEFAULT_MAX_TURN_BYTES
    from ..store import Store

    return ContextualIndex(
        Store.memory(backend="inprocess"),
        embedder=embedder,
        weight=settings.weight,
        max_turn_bytes=DEFAULT_MAX_TURN_BYTES if max_bytes is None else max_bytes,
        progress=False,
    )


def _check_prune(folders: list[Path], paths: list[Path], root: Path, given_root: str | None) -> None:
    if not folders:
        raise UsageError("--prune needs a folder: it removes the stored documents of that folder whose file is gone")
    if given_root is None and document_root([*paths, *(f / "x.md" for f in folders)]) != root:
        raise UsageError(
            f"--prune: the documents found have ids relative to {root}, not to the folder(s) given; pass --root DIR "
            "(the root the folder was indexed with) so that no stored document is mistaken for a gone one"
        )


def _pruned(
    index: Any, folders: list[Path], root: Path, thread: str | None, kept: set[tuple[str, str]]
) -> list[tuple[str, str]]:
    """The stored documents (``(thread_id, doc_id)``) whose path under ``root`` is inside ``folders`` and
    whose file this run did not read (in the run's thread: ``--thread``, else each document's own id)."""
    from ..storage.schema import Scope

    inside = [f.resolve() for f in folders]
    gone: set[tuple[str, str]] = set()
    for rec in index.store.records(("metadatas",), Scope(where={"kind": "section"})):
        meta = rec["metadata"] or {}
        key = (str(meta.get("thread_id")), str(meta.get("doc_id")))
        if key in kept or key in gone or key[0] != (thread or key[1]):
            continue
        where = (root / key[1]).resolve()
        if any(where.is_relative_to(f) for f in inside):
            gone.add(key)
    return sorted(gone, key=lambda k: k[1])


def _progress(args: argparse.Namespace) -> bool | None:
    """A bar on a terminal (when there is more than a moment's work), a line every few seconds in a pipe or a
    log (``ingest.progress.ProgressLines``), nothing with ``--quiet``."""
    if getattr(args, "quiet", False):
        return False
    return None if sys.stderr.isatty() else True


def _refuse(problems: list[FileProblem], n_paths: int) -> int:
    for problem in problems:
        error(str(problem))
    error(f"nothing was written ({len(problems)} of {n_paths} file(s) had problems)")
    return EXIT_ERROR


def _threads(threads: list[str]) -> str:
    shown = ", ".join(threads[:5]) + (f" and {len(threads) - 5} more" if len(threads) > 5 else "")
    return f"thread {shown}" if len(threads) == 1 else f"threads {shown}"


def search_options(args: argparse.Namespace) -> dict[str, Any]:
    """``ContextualIndex.search`` keywords from the ``search`` flags: the scope (``--thread``, ``--where``) and every
    search option given (flags generated from ``SearchSettings``: :mod:`.search_flags`)."""
    return {"thread_id": args.thread, "where": getattr(args, "where", None), **flag_options(args)}


def cmd_search(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    message = sys.stdin.read() if args.message == "-" else args.message
    index = open_index(settings, must_exist=True)
    if not index.store.count():  # e.g. made by a refused `ctxret index` before nothing was created on a refusal
        raise CtxretError(
            f"the index at {index.store.location} (collection {index.store.collection_name!r}) holds nothing to "
            "search; index files into it with `ctxret index FILE...`"
        )
    if args.thread:
        missing = [t for t in args.thread if not index.store.has_thread(t)]
        if len(missing) == len(args.thread):
            known = index.store.thread_ids(limit=10)
            listing = ", ".join(repr(t) for t in known) + (" …" if len(known) == 10 else "") if known else "none"
            raise CtxretError(
                f"no thread {', '.join(repr(t) for t in missing)} in collection {index.store.collection_name!r} at "
                f"{index.store.location} (threads there: {listing}; `ctxret stats` lists them all)"
            )
        for t in missing:
            warn(f"thread {t!r} is not in the collection; searching the others")
    options = search_options(args)
    groups = index.search(message, **options)
    resolved = index.settings.with_options(**flag_options(args))
    floor = index.cosine_floor if resolved.cosine_floor == "auto" else resolved.cosine_floor
    if args.json:
        print(json.dumps(search_json(message, groups, resolved.k, floor), ensure_ascii=False, indent=2))
        return EXIT_OK
    if not groups:
        print("(empty message: nothing to search)")
        return EXIT_OK
    width = terminal_width()
    skipped = sorted({s for g in groups for s in g.skipped})
    if skipped:
        warn(f"the deadline skipped {', '.join(skipped)}: these results come from the stages that finished in time")
    for group in groups:
        print(clip(f"Part {group.part_index + 1}: {one_line(group.part)}", width))
        if not group.hits:
            print(f"  (no hit{floor_text(floor)})")
        for hit in group.hits:
            print(hit_line(hit, width))
            if hit.parent_text is not None:
                print(clip(f"      parent: {one_line(hit.parent_text)}", width, lines=3))
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    """Counts and the collection's config; opens any collection without loading a model or the BM25 postings
    (nothing is written). An embedded store whose lexical file is in step answers from that file alone
    (:func:`ctxret.storage.config_copy.quick_stats`): chromadb is not even imported."""
    from ..ingest.config import IndexConfig

    settings = resolve_settings(args)
    stats = quick_store_stats(settings)  # from the lexical file alone when it can answer: no chromadb import
    if stats is None:
        store = open_store(settings)
        try:
            stats = store.stats()
            stats["config"] = store.stored_config() or {}
        finally:
            store.close()
    cfg = stats["config"]
    floor: float | None = None
    try:  # would this environment's options open it? (the embedder described, not loaded; no network call)
        embedder = describe_embedder(settings)
        diff = IndexConfig.resolve(embedder, cfg, weight=settings.weight).differences(cfg)
        floor = None if "model_id" in diff else float(embedder.default_score_threshold)
    except CtxretError as e:
        diff, stats["open_check_error"] = {}, str(e)
    stats["mismatch"] = {k: {"stored": old, "asked": new} for k, (old, new) in diff.items()}
    stats["cosine_floor"] = floor
    per_thread: dict[str, int] = stats["pieces_per_thread"]
    if args.json:
        print(json.dumps(stats, ensure_ascii=False, indent=2, default=str))
        return EXIT_OK
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
            "(the embedder's default)"
            if floor is None
            else f"cosine {floor:.2f} (the default for search --threshold auto)",
        ),
    ]
    if diff:
        what = ", ".join(f"{k}: stored {old!r}, these options {new!r}" for k, (old, new) in diff.items())
        rows.append(
            (
                "note",
                f"these options differ from the collection's ({what}); search with the stored ones, "
                "or `ctxret reindex` with these to rebuild",
            )
        )
    for name, value in rows:
        print(f"{name:<12} {value}")
    shown = list(per_thread.items())[:20]
    for tid, n in sorted(shown):
        print(f"  {tid:<30} {n} pieces")
    if len(per_thread) > len(shown):
        print(f"  ... and {len(per_thread) - len(shown)} more threads (--json lists all)")
    return EXIT_OK


def cmd_reindex(args: argparse.Namespace) -> int:
    from ..errors import ConfigMismatchError

    settings = resolve_settings(args)
    embedder = make_embedder(settings)
    started = time.perf_counter()
    try:
        index = open_index(settings, embedder=embedder, must_exist=True, progress=_progress(args))
    except ConfigMismatchError:
        # New options: opening with rebuild=True re-embeds every stored piece under them.
        index = open_index(settings, embedder=embedder, must_exist=True, rebuild=True, progress=_progress(args))
        result = None
    else:
        result = index.reindex()
    stats = index.stats()
    cfg = index.config.as_dict()
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
    """Delete threads' pieces from Chroma and the lexical file (no model is loaded: nothing is embedded)."""
    from ..storage.schema import Scope

    settings = resolve_settings(args)
    store = open_store(settings, writable=True)
    try:
        for thread in args.thread:
            n = store.delete(Scope(thread))
            print(f"deleted {n} piece(s) of thread {thread!r}" if n else f"thread {thread!r}: nothing to delete")
    finally:
        store.close()
    return EXIT_OK
