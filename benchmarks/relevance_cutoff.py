"""What a relevance cutoff keeps, held out: the score the adapters show, on conversations and on documents.

A user thresholds the score both adapters show (``metadata["score"]``, ``NodeWithScore.score``: the hit's relevance,
never rising down a group; ``ctxret.query.relevance.shown_scores``) with one number read off the docs
(``SimilarityPostprocessor(similarity_cutoff=...)``, ``search_kwargs={"score_threshold": ...}``). This measures, at
each cutoff, on data the calibration was not fitted on, through the product itself (``ContextualIndex.search`` with
its defaults, k = 5):

* **LoCoMo** conversations not in the fit (default ``42,43``: ``ctxret eval calibrate --limit-conversations 3``
  fitted on the first three), each written as one chat (``evaluation.memory.conversation_sessions``: its first
  speaker the user, each utterance a message with its session's time and its id) and searched thread-scoped with
  every fact and question; a hit is right when it holds one of the query's evidence utterances;
* **SciFact** claims not in the fit (the fit's seeded sample of ``--skip-queries`` claims left out, the same seed),
  their cited abstracts plus ``--distractors`` others (seeded) as documents, each claim searched unscoped; a hit is
  right when its document is one the claim cites.

For each group that returns hits: whether its first hit is right, and the shown score of every hit. Per dataset
(LoCoMo: facts and questions too), at each cutoff: the share of right first hits kept, of wrong first hits dropped,
of right hits kept and of wrong hits dropped, with the median shown score of right first hits. ``--before`` runs the
same searches, on the same indexes, with the calibration shipped before (paired: the same hits, only the scores
differ). Indexes are kept under ``--cache`` (a rerun embeds nothing).

    python benchmarks/relevance_cutoff.py --locomo ../shared/data/locomo-dev --scifact ../shared/data/scifact-dev \\
        --before --json benchmarks/results/relevance-cutoff.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

#: The calibration shipped before the ``first`` feature (Dec 2 fit: LoCoMo dev, 100 scifact claims, the handbook).
BEFORE = {
    "hybrid": dict(
        intercept=-3.739,
        cosine_weight=5.375,
        coverage_weight=-0.615,
        coverage_sq_weight=4.095,
        top_weight=0.751,
        margin_weight=4.963,
    ),
    "dense": dict(intercept=-3.501, cosine_weight=6.000, top_weight=0.921, margin_weight=6.601),
}
CUTOFFS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def _before() -> Any:
    from ctxret.query.relevance import RelevanceCalibration, RelevanceModel

    return RelevanceCalibration(RelevanceModel(**BEFORE["hybrid"]), RelevanceModel(**BEFORE["dense"]), "before")


def _groups(index: Any, text: str, right: Any, settings: Any, **scope: Any) -> list[list[tuple[bool, float]]]:
    """``[(right, shown score), ...]`` of each group of ``text``'s search that returns hits."""
    from ctxret.query.relevance import shown_scores

    out = []
    for g in index.search(text, settings=settings, **scope):
        if g.hits:
            shown = shown_scores(g.hits)
            out.append([(bool(right(h)), float(s[0]) if s else 0.0) for h, s in zip(g.hits, shown, strict=True)])
    return out


def locomo_groups(path: Path, ids: list[str], cache: Path, calibrations: dict[str, Any]) -> dict[str, list[Any]]:
    from ctxret import ContextualIndex, SearchSettings
    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.datasets import load_threads
    from ctxret.evaluation.memory import conversation_sessions

    out: dict[str, list[Any]] = defaultdict(list)
    for conv in load_threads(path):
        if conv.id not in ids:
            continue
        sessions, where = conversation_sessions(conv)
        index = ContextualIndex(cache / f"locomo-{conv.id}", embedder=shared_local_embedder())
        index.add_messages([m for s in sessions for m in s], thread_id=conv.id, progress=False)  # again: nothing
        for qs, queries in (("facts", conv.facts), ("qa", conv.questions)):
            for q in queries:

                def right(h: Any, q: Any = q, where: Any = where) -> bool:
                    key = str(h.stored.get("message_key") or "")
                    return where.get(key[3:] if key.startswith("id:") else key, ("?", -1))[0] in q.evidence

                for name, cal in calibrations.items():
                    for g in _groups(index, q.text, right, SearchSettings(relevance=cal), thread_id=conv.id):
                        out[f"{name}|locomo-dev|{qs}"].append(g)
        index.close()
    return out


def scifact_groups(
    path: Path, skip: int, distractors: int, seed: int, limit: int | None, cache: Path, calibrations: dict[str, Any]
) -> dict[str, list[Any]]:
    from ctxret import ContextualIndex, SearchSettings
    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.calibrate import load_docs_set

    every = load_docs_set(path, seed=seed)  # every claim, in the seeded order the fit sampled its first ``skip`` of
    held = every.queries[skip:][:limit] if limit else every.queries[skip:]
    need = set().union(*(r for _, _, r in held))
    others = [d for d in every.documents if d["id"] not in need]
    random.Random(seed).shuffle(others)
    docs = [d for d in every.documents if d["id"] in need] + others[:distractors]
    index = ContextualIndex(cache / f"scifact-{skip}-{len(held)}-{distractors}", embedder=shared_local_embedder())
    index.add_documents(docs, progress=False)  # indexed before: nothing embedded again
    out: dict[str, list[Any]] = defaultdict(list)
    for _, text, relevant in held:
        for name, cal in calibrations.items():
            for g in _groups(
                index, text, lambda h, r=relevant: h.metadata.get("doc_id") in r, SearchSettings(relevance=cal)
            ):
                out[f"{name}|scifact-dev|claims"].append(g)
    index.close()
    return out


def table(groups: list[list[tuple[bool, float]]], cutoffs: tuple[float, ...]) -> dict[str, Any]:
    first = [g[0] for g in groups]
    every = [h for g in groups for h in g]
    right_first = [s for ok, s in first if ok]
    wrong_first = [s for ok, s in first if not ok]
    right = [s for ok, s in every if ok]
    wrong = [s for ok, s in every if not ok]

    def share(xs: list[float], keep: bool, c: float) -> float:
        return sum((s >= c) == keep for s in xs) / len(xs) if xs else float("nan")

    return {
        "groups": len(groups),
        "right_first": len(right_first),
        "median_right_first": statistics.median(right_first) if right_first else float("nan"),
        "cutoffs": {
            f"{c:g}": {
                "right_first_kept": share(right_first, True, c),
                "wrong_first_dropped": share(wrong_first, False, c),
                "right_kept": share(right, True, c),
                "wrong_dropped": share(wrong, False, c),
            }
            for c in cutoffs
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--locomo", type=Path, help="the LoCoMo dev folder")
    ap.add_argument("--conversations", default="42,43", help="held-out LoCoMo conversations (default 42,43)")
    ap.add_argument("--scifact", type=Path, help="the scifact-dev BEIR folder")
    ap.add_argument("--skip-queries", type=int, default=300, help="claims the fit sampled (left out; default 300)")
    ap.add_argument("--distractors", type=int, default=1200, help="uncited abstracts beside the cited ones")
    ap.add_argument("--limit-queries", type=int, default=None, help="the first N held-out claims (a quick loop)")
    ap.add_argument("--seed", type=int, default=0, help="the fit's seed (default 0)")
    ap.add_argument("--cutoffs", default=",".join(f"{c:g}" for c in CUTOFFS), help="comma-separated cutoffs")
    ap.add_argument("--before", action="store_true", help="also score the same hits with the calibration before")
    ap.add_argument("--cache", type=Path, default=Path("benchmarks/results/relevance-cutoff"), help="index folder")
    ap.add_argument("--json", type=Path, help="write the tables here")
    args = ap.parse_args()
    from ctxret.query.relevance import LOCAL_MINILM

    cutoffs = tuple(float(c) for c in args.cutoffs.split(","))
    calibrations = {"now": LOCAL_MINILM, **({"before": _before()} if args.before else {})}
    args.cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    found: dict[str, list[Any]] = {}
    if args.locomo:
        found.update(locomo_groups(args.locomo, args.conversations.split(","), args.cache, calibrations))
    if args.scifact:
        found.update(
            scifact_groups(
                args.scifact,
                args.skip_queries,
                args.distractors,
                args.seed,
                args.limit_queries,
                args.cache,
                calibrations,
            )
        )
    for key in [k for k in found if k.endswith(("|facts", "|qa"))]:  # LoCoMo as one dataset too
        name = key.split("|")[0]
        found.setdefault(f"{name}|locomo-dev|all", []).extend(found[key])
    tables = {key: table(groups, cutoffs) for key, groups in sorted(found.items())}
    print(f"held out, k = 5, the score the adapters show ({time.perf_counter() - started:.0f} s)")
    print("right first kept / wrong first dropped / right kept / wrong dropped, at each cutoff")
    for key, t in tables.items():
        cells = "  ".join(
            f"{c}: {v['right_first_kept'] * 100:.0f}/{v['wrong_first_dropped'] * 100:.0f}/{v['right_kept'] * 100:.0f}/"
            f"{v['wrong_dropped'] * 100:.0f}"
            for c, v in t["cutoffs"].items()
        )
        print(
            f"{key:34s} groups {t['groups']:4d}, right first {t['right_first']:4d} "
            f"(median {t['median_right_first']:.2f})"
        )
        print(f"    {cells}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"tables": tables, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1)
        )
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
