# ruff: noqa: T201  (a command-line tool: it prints)
"""``ctxret demo``: index the bundled sample threads and compare per-part groups with one whole-message vector."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .readers import read_input_file
from .render import clip, floor_text, hit_line, one_line, rule, terminal_width
from .settings import DEMO_COLLECTION, EXIT_OK, open_index, resolve_settings

if TYPE_CHECKING:
    from ..index import ContextualIndex
    from ..results import Group, Hit


def demo_files() -> tuple[Path, Path]:
    """The bundled sample threads and messages."""
    data = resources.files("ctxret") / "data"
    return Path(str(data / "demo_threads.jsonl")), Path(str(data / "demo_queries.json"))


def cmd_demo(args: argparse.Namespace) -> int:
    settings = resolve_settings(args)
    threads_path, queries_path = demo_files()
    queries = json.loads(queries_path.read_text(encoding="utf-8"))
    sample = read_input_file(threads_path)
    # Only an explicit --store/--chroma-host is used: CTXRET_STORE must not get the samples.
    explicit_store = getattr(args, "store", None) is not None or getattr(args, "chroma_host", None) is not None
    collection = getattr(args, "collection", None) or DEMO_COLLECTION
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxret-demo-", ignore_cleanup_errors=True) as tmp:
        index = open_index(settings, store=None if explicit_store else tmp, collection=collection, progress=False)
        result = index.add_turns(sample.turns)
        where = index.store.location if explicit_store else "a temporary folder"
        floor = index.cosine_floor
        names = ", ".join(sample.threads)
        print(
            f"ctxret demo: indexed {len(sample.threads)} sample agent threads ({names}): "
            f"{result.turns} turns, {result.added + result.unchanged} labelled pieces"
        )
        print(f"in {where} ({time.perf_counter() - started:.1f}s).")
        cfg = index.config.as_dict()
        print(
            f"embedder {cfg['model_id']} ({cfg['dims']} dims), weight {index.weight}, "
            f"k = {args.k} per part{floor_text(floor)}; dense search on both sides (the last "
            "line of each message adds the default hybrid search), scores are raw cosine"
        )
        for n, query in enumerate(queries, start=1):
            _demo_query(index, query, n, len(queries), args.k, floor)
        print()
        print(
            f"done in {time.perf_counter() - started:.1f}s. "
            'Index your own: ctxret index FILE.jsonl; then ctxret search "your message"'
        )
    return EXIT_OK


def _demo_query(index: ContextualIndex, query: dict[str, Any], n: int, total: int, k: int, floor: float | None) -> None:
    width = terminal_width()
    message, thread = query["message"], query.get("thread_id")
    focus = _expected(query)
    dense = _dense_only(index)
    groups = index.search(message, k=k, thread_id=thread, **dense)
    budget = max(k, sum(len(g) for g in groups))
    single = index.search(message, k=budget, thread_id=thread, split=False, **dense)
    single_hits = single[0].hits if single else ()
    print()
    print(rule(f" {n}/{total} · thread {thread} ", width))
    print(
        clip(
            f'Message ({len(message):,} characters, {len(groups)} part(s)): "{one_line(message)}"',
            width,
        )
    )
    if query.get("note"):
        print(clip(f"Look for: {one_line(query['note'])}", width, lines=2))
    print(f"-- per-part groups (each part searches on its own, up to {k} hits each):")
    for group in groups:
        print(clip(f"Part {group.part_index + 1}: {one_line(group.part)}", width))
        if not group.hits:
            print(f"  (no hit{floor_text(floor)})")
        for hit in group.hits:
            print(hit_line(hit, width, focus))
    shown = min(len(single_hits), max(k, 5))
    print(
        f"-- one whole-message vector (the same budget: up to {budget} hits; "
        f"{len(single_hits)} above the floor, first {shown} shown):"
    )
    for hit in single_hits[:shown]:
        print(hit_line(hit, width, focus))
    if not single_hits:
        print(f"  (no hit{floor_text(floor)})")
    print(_verdict(query, groups, single_hits, width, deeper=lambda fact: _deeper(index, query, k, fact, dense)))
    if focus and getattr(index, "lexical_index", None) is not None:
        hybrid = index.search(message, k=k, thread_id=thread)  # the product default
        found = "; ".join(
            f"{fact!r}: {_found_in_groups(hybrid, fact, _deeper(index, query, k, fact, {}))}" for fact in focus
        )
        print(clip(f"   with hybrid search (the default: BM25 fused inside each group): {found}", width, lines=2))


def _expected(query: dict[str, Any]) -> list[str]:
    """The facts a demo message should bring back (optional ``expect``: a string or a list)."""
    expect = query.get("expect") or []
    return [expect] if isinstance(expect, str) else [str(e) for e in expect]


def _dense_only(index: ContextualIndex) -> dict[str, Any]:
    """Search keywords that turn hybrid (BM25) search off: the demo compares vectors with vectors."""
    return {"lexical": False}


#: How deep the demo looks for an expected fact its groups do not show (to say where it is).
DEEPER_K = 10


def _deeper(index: ContextualIndex, query: dict[str, Any], k: int, fact: str, options: dict[str, Any]) -> str:
    """Where ``fact`` ranks when each part keeps :data:`DEEPER_K` hits (``""`` when it is not there either)."""
    if k >= DEEPER_K:
        return ""
    groups = index.search(query["message"], k=DEEPER_K, thread_id=query.get("thread_id"), **options)
    for g in groups:
        for rank, hit in enumerate(g.hits, start=1):
            if fact.lower() in hit.text.lower():
                return f"Part {g.part_index + 1} #{rank} at k={DEEPER_K}"
    return ""


def _found_in_groups(groups: Sequence[Group], fact: str, deeper: str = "") -> str:
    for g in groups:
        for rank, hit in enumerate(g.hits, start=1):
            if fact.lower() in hit.text.lower():
                return f"yes (Part {g.part_index + 1}, #{rank})"
    k = max((len(g.hits) for g in groups), default=0)
    return f"not in the top {k} ({deeper})" if deeper else "NO"


def _verdict(
    query: dict[str, Any], groups: Sequence[Group], single: Sequence[Hit], width: int, deeper: Any = None
) -> str:
    """One line: where the expected facts are in the groups and in the single vector's list."""
    expect = _expected(query)
    if not expect:  # no facts named: where does each part's best hit rank in the single list?
        ranks = {hit.id: rank for rank, hit in enumerate(single, start=1)}
        leaders = [
            f"Part {g.part_index + 1} #{ranks[g.hits[0].id]}"
            if g.hits[0].id in ranks
            else f"Part {g.part_index + 1} absent"
            for g in groups
            if g.hits
        ]
        listing = ", ".join(leaders) or "none"
        return clip(
            f"=> rank of each part's best hit in the single vector's top {len(single)}: {listing}",
            width,
            lines=2,
        )

    def found_in_single(fact: str) -> str:
        for rank, hit in enumerate(single, start=1):
            if fact.lower() in hit.text.lower():
                return f"yes (#{rank} of {len(single)})"
        return f"NO (not in its top {len(single)})"

    def in_groups(fact: str) -> str:
        found = _found_in_groups(groups, fact)
        return _found_in_groups(groups, fact, deeper(fact)) if found == "NO" and deeper is not None else found

    parts = [f"{fact!r}: groups {in_groups(fact)} | single vector {found_in_single(fact)}" for fact in expect]
    return clip("=> " + "; ".join(parts), width, lines=3)
