"""``ctxret eval controlled|threads|calibrate``: the harness on the command line.

The main CLI calls :func:`register_eval` with its subparsers; each command sets ``func(args) ->
int`` (the exit code, the ``ctxret`` contract: 0 ok, 1 error — a ctxret error such as bad input
or a missing file, reported on stderr —, 2 usage — bad flags, from argparse).
The harness itself (:mod:`ctxret.evaluation`) knows nothing of the command line.

    ctxret eval controlled FIXTURE.json [--json OUT] [--plot OUT.png]
    ctxret eval threads PATH [--json OUT] [--plot OUT.png]
    ctxret eval calibrate PATH [--json OUT] [--plot OUT.png]
    ctxret eval docs PATH [--split test] [--queries FILE] [--json OUT]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any

from ..blend import OWN_WEIGHT
from ..errors import CtxretError
from ..query.fusion import (
    DEFAULT_CANDIDATES,
    DEFAULT_LEXICAL_FLOOR,
    DEFAULT_LEXICAL_WEIGHT,
    DEFAULT_RRF_K,
    FusionSettings,
)
from .settings import CliParser, add_common_options, resolve_settings

#: Exit codes (the main ``ctxret`` CLI's contract).
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


def make_embedder(args: argparse.Namespace) -> Any:
    """The embedder the common options name (``--embedder``, ``--model``, ``--dims``, env), as every ctxret
    command builds it."""
    from .settings import make_embedder as build

    return build(resolve_settings(args), shared=True)  # one local model per process: the harness embeds a lot


def _weight(args: argparse.Namespace) -> float:
    """The blend weight: ``--weight`` / ``CTXRET_WEIGHT`` (the common option), default 0.8."""
    weight = resolve_settings(args).weight
    return OWN_WEIGHT if weight is None else weight


def _fusion(args: argparse.Namespace) -> FusionSettings:
    """The hybrid flags (``--lexical-weight``, ``--rrf-k``, ``--candidates``, ``--lexical-floor``) as one setting."""
    return FusionSettings(
        lexical_weight=args.lexical_weight,
        rrf_k=args.rrf_k,
        candidates=args.candidates,
        lexical_floor=args.lexical_floor,
    )


def _csv(value: str | None) -> list[str] | None:
    if not value:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _unit_float(value: str) -> float:
    x = float(value)
    if not 0.0 <= x <= 1.0 or math.isnan(x):
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {value}")
    return x


def _floor_or_none(value: str) -> float | None:
    if value.strip().lower() == "none":
        return None
    return _unit_float(value)


def _positive_int(value: str) -> int:
    x = int(value)
    if x < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return x


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("-k", type=_positive_int, default=5, help="results per part (default 5)")
    p.add_argument(
        "--piece-bytes", type=_positive_int, default=None, help="piece byte budget (default: the embedder's)"
    )
    p.add_argument(
        "--threshold", type=float, default=None, help="cosine floor (default: the embedder's default_score_threshold)"
    )
    p.add_argument("--representations", default=None, help="comma-separated representations (default: all)")
    p.add_argument(
        "--lexical-weight",
        type=_unit_float,
        default=DEFAULT_LEXICAL_WEIGHT,
        help=f"lexical weight of hybrid_weighted / hybrid_convex (default {DEFAULT_LEXICAL_WEIGHT})",
    )
    p.add_argument("--rrf-k", type=float, default=DEFAULT_RRF_K, help=f"RRF constant (default {DEFAULT_RRF_K:g})")
    p.add_argument(
        "--candidates",
        type=_positive_int,
        default=DEFAULT_CANDIDATES,
        help=f"candidates per side before fusion (default {DEFAULT_CANDIDATES})",
    )
    p.add_argument(
        "--lexical-floor",
        type=_floor_or_none,
        default=DEFAULT_LEXICAL_FLOOR,
        help="hybrid: a hit under the cosine floor is kept if it holds this share of its part's "
        "IDF-weighted words and its cosine is at least half the floor; 'none' applies the cosine "
        "floor to every hit "
        f"(default {DEFAULT_LEXICAL_FLOOR})",
    )
    p.add_argument("--limit-conversations", type=_positive_int, default=None, help="use only the first N conversations")
    p.add_argument(
        "--limit-queries", type=_positive_int, default=None, help="first N facts and questions per conversation"
    )
    p.add_argument("--seed", type=int, default=0, help="seed for distractors and composite messages (default 0)")
    p.add_argument("--json", dest="json_out", default=None, help='write {"rows": [...], "config": {...}} here')
    p.add_argument("--plot", default=None, help="write a PNG figure here")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def register_eval(subparsers: Any, common: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """Add ``eval`` with ``controlled``, ``threads`` and ``calibrate`` to a CLI's subparsers.

    ``common``: the parser holding the store and embedder options every ctxret command shares
    (``--embedder``, ``--model``, ``--dims``, ``--weight``, ...); built here when not given.
    """
    if common is None:
        common = argparse.ArgumentParser(add_help=False)
        add_common_options(common, suppress=True)
    parents = [common]
    ev = subparsers.add_parser(
        "eval",
        help="measure retrieval on fixtures or threads",
        parents=parents,
        description="Evaluation harness: the controlled test, the thread protocol, calibration. "
        "The embedder options (--embedder, --model, --dims, --weight) are the "
        "same as for every ctxret command.",
    )
    sub = ev.add_subparsers(dest="eval_command", metavar="{controlled,threads,calibrate,docs,longmemeval}")
    sub.required = True

    c = sub.add_parser(
        "controlled", parents=parents, help="one sentence in four contexts: does the right context come first?"
    )
    c.add_argument(
        "fixture",
        nargs="?",
        default=None,
        help="controlled fixture JSON (see ctxret.evaluation.controlled; default: the bundled 24 families)",
    )
    _common(c)
    c.add_argument("--conditions", default=None, help="comma-separated conditions (default: all)")
    c.add_argument("--limit-families", type=_positive_int, default=None, help="use only the first N families")
    c.set_defaults(func=cmd_controlled)

    t = sub.add_parser(
        "threads", parents=parents, help="the production-thread protocol on LoCoMo files and JSONL threads"
    )
    t.add_argument("path", help="a LoCoMo .json, a .jsonl threads file, or a folder of them")
    _common(t)
    t.add_argument(
        "--query-sets",
        default=None,
        help="comma-separated: facts,qa,composite,time,time_qa,distracted,foreign,updates,updates_twice "
        "(default: facts,qa,composite)",
    )
    t.add_argument(
        "--incremental",
        action="store_true",
        help="also write each conversation into the product's store as an agent does, one add_messages "
        "call per session, beside the same messages in one call: are the pieces the same, and "
        "the recall of facts and questions searched there? (see ctxret.evaluation.memory)",
    )
    t.set_defaults(func=cmd_threads)

    cal = sub.add_parser(
        "calibrate", parents=parents, help="sweep blend weight, piece budget, floor and fusion on your threads"
    )
    cal.add_argument("path", help="a LoCoMo .json, a .jsonl threads file, or a folder of them")
    _common(cal)
    cal.add_argument(
        "--sweeps", default=None, help="comma-separated: weight,piece_bytes,threshold,fusion,relevance (default: all)"
    )
    cal.add_argument(
        "--docs",
        action="append",
        default=[],
        metavar="FOLDER",
        help="relevance sweep: also fit on a documents set (a BEIR folder, or a folder of .md/.txt "
        "files with queries.jsonl); repeatable; each dataset weighs the same",
    )
    cal.add_argument("--docs-split", default="train", help="BEIR qrels split of --docs (default train)")
    cal.add_argument(
        "--docs-limit-queries", type=_positive_int, default=None, help="BEIR: a seeded sample of N queries of --docs"
    )
    cal.add_argument(
        "--docs-distractors",
        type=int,
        default=None,
        help="BEIR: the corpus cut to the sampled queries' relevant documents plus N others (seeded)",
    )
    cal.set_defaults(func=cmd_calibrate)

    d = sub.add_parser(
        "docs", parents=parents, help="documents: a BEIR folder or your own .md/.txt folder, with the peers in the run"
    )
    d.add_argument(
        "path",
        help="a BEIR folder (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv) or a folder of "
        ".md/.txt files with a queries file",
    )
    d.add_argument("--split", default="test", help="BEIR: the qrels file qrels/SPLIT.tsv (default test)")
    d.add_argument(
        "--queries",
        default=None,
        help='a folder of files: the JSONL queries file, {"query": ..., "relevant": ["file.md", ...]} '
        "a line (default PATH/queries.jsonl)",
    )
    d.add_argument("--depth", type=_positive_int, default=100, help="documents ranked per query (default 100)")
    d.add_argument(
        "--cache",
        default=None,
        help="folder for the product's index and the peers' vectors, reused by the next run "
        "(default: ctxret-eval-docs in the temp folder)",
    )
    d.add_argument("--no-cache", action="store_true", help="index in memory, keep nothing")
    d.add_argument(
        "--rule",
        default=None,
        choices=("max", "max_mean", "top2", "sum"),
        help="how hits become a document ranking (ctxret.query.documents; default: its DEFAULT_RULE)",
    )
    d.add_argument("--limit-queries", type=_positive_int, default=None, help="score only the first N queries")
    d.add_argument("--json", dest="json_out", default=None, help='write {"rows": [...], "config": {...}} here')
    d.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    d.set_defaults(func=cmd_docs)

    lme = sub.add_parser(
        "longmemeval",
        parents=parents,
        help="LongMemEval: each history written one session per call, asked at its date, "
        "beside the paper's BM25 and BM25 done well",
    )
    lme.add_argument("path", help="a LongMemEval .json / .json.gz file (or the folder holding it)")
    lme.add_argument(
        "--cache",
        default=None,
        help="folder of the product's store, reused by the next run: nothing is embedded twice "
        "(default: ctxret-eval-longmemeval in the temp folder)",
    )
    lme.add_argument(
        "--depth",
        type=_positive_int,
        default=50,
        help="hits the product's search returns per part (its k; sessions are ranked from them)",
    )
    lme.add_argument("--limit", type=_positive_int, default=None, help="only the first N questions")
    lme.add_argument("--types", default=None, help="comma-separated question types (default: all)")
    lme.add_argument(
        "--per-type",
        type=_positive_int,
        default=None,
        help="the first N questions of each type (a quick, balanced loop)",
    )
    lme.add_argument("--json", dest="json_out", default=None, help='write {"rows": [...], "config": {...}} here')
    lme.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    lme.set_defaults(func=cmd_longmemeval)
    return ev


def _run(fn: Any, args: argparse.Namespace) -> int:
    """Run a command: ctxret errors (bad input, missing files) exit 1 with the message on stderr;
    bad settings (``UsageError``) go to the caller, which exits 2."""
    _weight(args)  # settings are checked before any work
    try:
        return fn(args)
    except CtxretError as exc:
        print(f"ctxret eval: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"ctxret eval: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def cmd_controlled(args: argparse.Namespace) -> int:
    return _run(_controlled, args)


def cmd_threads(args: argparse.Namespace) -> int:
    return _run(_threads, args)


def cmd_calibrate(args: argparse.Namespace) -> int:
    return _run(_calibrate, args)


def cmd_longmemeval(args: argparse.Namespace) -> int:
    return _run(_longmemeval, args)


def _longmemeval(args: argparse.Namespace) -> int:
    import tempfile

    from ..evaluation.longmemeval import load_longmemeval, run_longmemeval
    from ..evaluation.report import markdown_table, paired_table, pct, write_json

    questions = load_longmemeval(args.path)
    cache = args.cache or str(Path(tempfile.gettempdir()) / "ctxret-eval-longmemeval")
    res = run_longmemeval(
        questions,
        make_embedder(args),
        cache=cache,
        depth=args.depth,
        limit=args.limit,
        types=_csv(args.types),
        per_type=args.per_type,
        progress=not args.quiet,
    )
    c = res.config["counts"]
    print(
        f"LongMemEval — {args.path}: {c.get('questions', 0)} questions ({c.get('abstention (not scored)', 0)} "
        f"abstention, not scored), {c.get('sessions', 0)} sessions written one call each "
        f"({c.get('pieces_embedded', 0)} pieces embedded in this run); embedder {res.config['embedder']}, "
        f"search depth {args.depth}; store: {cache}"
    )
    metrics = [
        "recall_all@5",
        "recall_all@10",
        "ndcg_any@5",
        "ndcg_any@10",
        "turn_recall_all@5",
        "turn_ndcg_any@5",
        "latest_first",
        "newer_first",
    ]
    body = [[r["system"], r["type"], str(r["n"]), *(pct(r[m]) if m in r else "—" for m in metrics)] for r in res.rows]
    print()
    print(
        markdown_table(
            [
                "System",
                "Type",
                "n",
                "Session R_all@5",
                "R_all@10",
                "nDCG_any@5",
                "nDCG_any@10",
                "Turn R_all@5",
                "Turn nDCG@5",
                "Latest first",
                "Newer above older",
            ],
            body,
            ["l", "l", "r", *["r"] * len(metrics)],
        )
    )
    print()
    print(
        "ctxret's default against each peer and against itself with the latest fact first off (ctxret_no_latest) and "
        "the user's own word first off (ctxret_no_user), paired per question "
        "(points; 95% intervals; the bootstrap resamples within question types):"
    )
    print()
    print(paired_table(res.config["comparison"]))
    if args.json_out:
        write_json(args.json_out, res.rows, {**res.config, "per_query": res.per_query})
    return 0


def cmd_docs(args: argparse.Namespace) -> int:
    return _run(_docs, args)


def _docs(args: argparse.Namespace) -> int:
    from ..evaluation.docs import DEFAULT_CACHE, docs_peer_table, docs_table, load_docs, run_docs
    from ..evaluation.report import write_json

    ds = load_docs(args.path, split=args.split, queries=args.queries)
    res = run_docs(
        ds,
        make_embedder(args),
        cache_dir=None if args.no_cache else (args.cache or DEFAULT_CACHE),
        depth=args.depth,
        rule=args.rule,
        limit_queries=args.limit_queries,
        progress=not args.quiet,
    )
    c = res.config
    print(
        f"Documents — {c['source']}: {c['documents']:,} documents ({c['pieces']:,} pieces), {c['queries']:,} "
        f"queries; embedder {c['embedder']}, depth {c['depth']}"
    )
    if c["notes"]:
        print("Dropped on reading: " + "; ".join(f"{k}: {v}" for k, v in sorted(c["notes"].items())))
    print(f"Document ranking of hybrid_default: {c['document_rule']}; fusion of its pieces: {c['fusion']}")
    print()
    print(docs_table(res.rows))
    print()
    print("The runtime default (hybrid_default) against the peers, paired per query (points; 95% intervals):")
    print()
    print(docs_peer_table(c["peer_comparison"]))
    if args.json_out:
        write_json(args.json_out, res.rows, {k: v for k, v in c.items() if k != "query_ids"})
        print(f"\nwrote {os.fspath(args.json_out)}")
    return 0


def _controlled(args: argparse.Namespace) -> int:
    from ..evaluation.controlled import CONDITIONS, REPRESENTATIONS, load_fixture, run_controlled
    from ..evaluation.report import controlled_table, plot_controlled, write_json

    fixture = load_fixture(args.fixture or bundled_fixture())
    res = run_controlled(
        fixture,
        make_embedder(args),
        representations=_csv(args.representations) or REPRESENTATIONS,
        conditions=_csv(args.conditions) or CONDITIONS,
        weight=_weight(args),
        seed=args.seed,
        fusion=_fusion(args),
        limit_families=args.limit_families,
    )
    counts = res.config["counts"]
    print(
        f"Controlled test — {fixture.source}: {counts['families']} families, {counts['records']} records, "
        f"embedder {res.config['embedder']}, weight {_weight(args):g}, seed {args.seed}"
    )
    print()
    print(controlled_table(res.rows, "all"))
    for block in counts["blocks"]:
        print()
        print(f"Block {block}:")
        print(controlled_table(res.rows, block))
    _outputs(args, res.rows, res.config, lambda path: plot_controlled(res.rows, path), write_json)
    return 0


def _threads(args: argparse.Namespace) -> int:
    from ..evaluation.datasets import DEFAULT_QUERY_SETS, load_threads
    from ..evaluation.report import distracted_table, paired_table, peer_table, plot_threads, threads_table, write_json
    from ..evaluation.threads import run_threads

    convs = load_threads(args.path)
    res = run_threads(
        convs,
        make_embedder(args),
        representations=_csv(args.representations),  # None: every one the embedder can run
        query_sets=_csv(args.query_sets) or DEFAULT_QUERY_SETS,
        **_conversation_run(args),
    )
    c = res.config["counts"]
    print(
        f"Threads — {args.path}: {c.get('conversations', 0)} conversations, {c.get('sections', 0)} sections, "
        f"{c.get('pieces', 0)} pieces; {c.get('facts', 0)} facts, {c.get('qa', 0)} questions, "
        f"{c.get('composite_messages', 0)} composite messages ({c.get('composite_facts', 0)} facts)"
        + "".join(f", {c[s]} {s} queries" for s in ("time", "time_qa", "distracted") if s in c)
        + "; "
        f"embedder {res.config['embedder']}, k={args.k}, weight {_weight(args):g}, "
        f"piece bytes {res.config['piece_bytes']}, floor {res.config['threshold']:g}"
    )
    if res.config["data_notes"]:
        print("Data repairs: " + "; ".join(f"{k}: {v}" for k, v in sorted(res.config["data_notes"].items())))
    if res.config.get("skipped_representations"):
        print(f"Skipped (the embedder gives no token vectors): {', '.join(res.config['skipped_representations'])}")
    print()
    print(threads_table(res.rows))
    if res.config.get("peer_comparison"):
        print()
        print("The runtime default (hybrid_default) against the peers, paired per query (points; 95% intervals):")
        print()
        print(peer_table(res.config["peer_comparison"]))
    if res.config.get("time_comparison"):
        print()
        print(
            "Time-aware search against the default and the store as of now, paired per query (points; 95% intervals):"
        )
        print()
        print(paired_table(res.config["time_comparison"]))
    _extra_reports(res)
    if res.config.get("distracted_comparison"):
        print()
        print("Distracted: each question after two statements of its thread and a topic switch:")
        print()
        print(distracted_table(res.rows))
        print()
        print(paired_table(res.config["distracted_comparison"]))
    if args.incremental:
        from ..evaluation.memory import run_memory

        mem = run_memory(
            convs,
            make_embedder(args),
            k=args.k,
            limit_conversations=args.limit_conversations,
            limit_queries=args.limit_queries,
            seed=args.seed,
            progress=not args.quiet,
        )
        res.config["memory"] = {"rows": mem.rows, **mem.config}
        print()
        print(memory_report(mem))
    _outputs(args, res.rows, res.config, lambda path: plot_threads(res.rows, path), write_json)
    return 0


def memory_report(mem: Any) -> str:
    """The memory protocol's section of ``eval threads --incremental``: the stores compared, then recall both ways."""
    from ..evaluation.report import paired_table, threads_table

    c = mem.config["counts"]
    lines = [
        f"Memory as written (the product's store; {c.get('sessions', 0)} sessions of {c.get('conversations', 0)} "
        f"conversations, {c.get('messages', 0)} messages): one add_messages call per session against one call "
        "for all messages"
    ]
    for cid, s in mem.config["structure"].items():
        lines.append(
            f"  {cid}: {s['pieces']} pieces (one call: {s['one_call_pieces']}), only incremental "
            f"{s['only_incremental']}, only one call {s['only_one_call']}, text or metadata differ "
            f"{s['text_or_metadata_differ']}, largest vector difference {s['max_vector_diff']:.1e}: "
            + ("identical" if s["identical"] else "DIFFERENT")
        )
    lines += ["", threads_table(mem.rows), "", paired_table(mem.config["comparison"])]
    return "\n".join(lines)


def _extra_reports(res: Any) -> None:
    """The floor's costs (every run), the updates set and the ranking steps against the default (when run)."""
    from ..evaluation.floorset import floor_table
    from ..evaluation.report import paired_table
    from ..evaluation.updates import updates_table

    if res.config.get("floor_report"):
        print()
        print(
            "The floor: what it costs on answerable queries and what it empties (the runtime's part floor; 'cut': "
            "every hit under the cosine floor dropped, as before), paired per query (points; 95% intervals):"
        )
        print()
        print(floor_table(res.config["floor_report"]))
    if any(r["query_set"] == "updates" for r in res.per_query):
        print()
        print("Updates: a fact stated, then changed in a later section (ctxret.evaluation.updates):")
        print()
        print(updates_table(res.per_query))
    if any(r["query_set"] == "updates_twice" for r in res.per_query):
        print()
        print(
            "A fact changed twice: stated, changed, then changed again in later sections (ctxret.evaluation.updates):"
        )
        print()
        print(updates_table(res.per_query, "updates_twice"))
    if res.config.get("ranking_comparison"):
        print()
        print(
            "Answers above questions and the latest fact first, each turned off, paired per query "
            "(points; 95% intervals):"
        )
        print()
        print(paired_table(res.config["ranking_comparison"]))


def _conversation_run(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments ``eval threads`` and ``eval calibrate`` pass alike to their run (from the shared flags)."""
    return {
        "k": args.k,
        "weight": _weight(args),
        "piece_bytes": args.piece_bytes,
        "threshold": args.threshold,
        "fusion": _fusion(args),
        "limit_conversations": args.limit_conversations,
        "limit_queries": args.limit_queries,
        "seed": args.seed,
        "progress": not args.quiet,
    }


def _calibrate(args: argparse.Namespace) -> int:
    from ..evaluation.calibrate import load_docs_set, run_calibrate
    from ..evaluation.datasets import load_threads
    from ..evaluation.report import calibration_report, plot_calibration, write_json

    convs = load_threads(args.path)
    kwargs: dict[str, Any] = {}
    if _csv(args.sweeps):
        kwargs["sweeps"] = _csv(args.sweeps)
    if args.docs:
        kwargs["docs"] = [
            load_docs_set(
                d,
                split=args.docs_split,
                limit_queries=args.docs_limit_queries,
                distractors=args.docs_distractors,
                seed=args.seed,
            )
            for d in args.docs
        ]
    res = run_calibrate(
        convs,
        make_embedder(args),
        **_conversation_run(args),
        **kwargs,
    )
    print(
        f"Calibration — {args.path}: embedder {res.config['embedder']}, k={args.k}; each sweep varies one setting "
        f"(weight {_weight(args):g}, piece bytes {res.config['piece_bytes']}, "
        f"floor {res.config['threshold']:g} otherwise)"
    )
    print()
    print(calibration_report(res))
    config = {**res.config, "recommended": res.recommended, "notes": res.notes}
    _outputs(args, res.rows, config, lambda path: plot_calibration(res, path), write_json)
    return 0


def bundled_fixture() -> str:
    """The controlled-test fixture shipped with ctxret (24 families)."""
    from importlib import resources

    return str(resources.files("ctxret") / "data" / "controlled_fixture.json")


def _outputs(args: argparse.Namespace, rows: Any, config: Any, plot: Any, write_json: Any) -> None:
    if args.json_out:
        write_json(args.json_out, rows, config)
        print(f"\nwrote {os.fspath(args.json_out)}")
    if args.plot:
        plot(args.plot)
        print(f"wrote {os.fspath(args.plot)}")


def build_parser() -> argparse.ArgumentParser:
    """A parser with only the ``eval`` commands (what :func:`main` runs: ``main(["eval", "threads", PATH])``)."""
    parser = CliParser(prog="ctxret", description="ctxret evaluation harness")
    sub = parser.add_subparsers(dest="command", metavar="eval")
    sub.required = True
    register_eval(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .settings import UsageError

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"ctxret eval: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
