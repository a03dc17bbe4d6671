# ruff: noqa: T201  (a command-line tool: it prints)
"""The commands ``index``, ``search``, ``stats``, ``reindex`` and ``delete``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..errors import CtxretError, InputError
from .readers import FileProblem, check_paths, read_input_file
from .render import clip, error, floor_text, hit_line, one_line, search_json, terminal_width, warn
from .settings import EXIT_ERROR, EXIT_OK, UsageError, make_embedder, open_index, resolve_settings


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
        for problem in problems:
            error(str(problem))
        error(f"nothing was written ({len(problems)} of {len(paths)} file(s) had problems)")
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
        for problem in problems:
            error(str(problem))
        error(f"nothing was written ({len(problems)} of {len(paths)} file(s) had problems)")
        return EXIT_ERROR
    done: list[str] = []
    for f in files:
        if not f.turns:
            warn(f"{f.path}: nothing to index (no text)")
            continue
        started = time.perf_counter()
        try:
            result = index.add_turns(f.turns)
        except CtxretError as e:  # e.g. the embedding service failed: this file was not written
            error(f"{f.path}: {e}")
            written = ", ".join(done) if done else "none"
            error(f"{f.path} and the files after it were not written (already indexed: {written})")
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
            json.dumps(search_json(message, groups, args.k, floor), ensure_ascii=False, indent=2)
        )
        return EXIT_OK
    if not groups:
        print("(empty message: nothing to search)")
        return EXIT_OK
    width = terminal_width()
    for group in groups:
        print(clip(f"Part {group.part_index + 1}: {one_line(group.part)}", width))
        if not group.hits:
            print(f"  (no hit{floor_text(floor)})")
        for hit in group.hits:
            print(hit_line(hit, width))
    return EXIT_OK


def cmd_stats(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    index = open_index(settings, must_exist=True)
    stats = index.stats()
    per_thread: dict[str, int] = stats["pieces_per_thread"]
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
    from ..errors import ConfigMismatchError

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


