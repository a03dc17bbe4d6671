"""The current fact first in an agent's memory: realistic agent histories, the default against its ranking steps off.

Each history of ``ctxret.evaluation.agent_history`` (a user and an assistant over three months: a job, a city, plans
that change; facts that never change; once the assistant's stale answer) is written through ``AgentMemory`` one
conversation per call, then each question is asked at the history's end with the defaults and with one step off
(``user_first=False``: the agent-memory step of the latest stage; ``latest_first=False``: the whole latest stage;
``answers_first=False``). Per question: which value the group shows first (``current_first``: the first hit naming
a value of the fact names its current one), whether the user said it (``user_first``), the top hit. Then the default
paired with each variant over the questions (95% intervals; ``ctxret.evaluation.stats.compare``), for the
development history and the held-out ones apart, and the facts that changed and those that did not apart.

    python benchmarks/eval_agent_histories.py
    python benchmarks/eval_agent_histories.py --json benchmarks/results/agent_histories.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

VARIANTS = {
    "default": {},
    "user_first_off": {"user_first": False},
    "latest_off": {"latest_first": False},
    "answers_off": {"answers_first": False},
}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--json", type=Path, default=None, help="write the per-question rows here")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each group's hits")
    args = ap.parse_args()

    from ctxret.embedders.local import shared_local_embedder
    from ctxret.evaluation.agent_history import run_histories
    from ctxret.evaluation.report import markdown_table, pct
    from ctxret.evaluation.stats import compare

    rows = run_histories(shared_local_embedder(), VARIANTS)
    by: dict[str, dict[str, dict]] = {v: {} for v in VARIANTS}
    for r in rows:
        by[r["representation"]][r["query_id"]] = r
    print("Per question (current_first / user said it), each variant:")
    print()
    body = []
    for qid, r in by["default"].items():
        cells = [f"{by[v][qid]['current_first']:.0f}/{by[v][qid]['user_first']:.0f}" for v in VARIANTS]
        split = "held out" if r["held_out"] else "dev"
        body.append([qid, split, "changed" if r["changed"] else "never", r["question"], *cells])
    print(
        markdown_table(["id", "set", "fact", "question", *VARIANTS], body, ["l", "l", "l", "l", *["r"] * len(VARIANTS)])
    )
    if args.verbose:
        for qid, r in by["default"].items():
            print(f"\n{qid} {r['question']}")
            for line in r["top"]:
                print(f"    {line[:110]}")
    print()
    print("The default against each variant, paired per question (points; 95% interval):")
    print()
    out = []
    subsets = {
        "dev, changed": lambda r: not r["held_out"] and r["changed"],
        "held out, changed": lambda r: r["held_out"] and r["changed"],
        "all, changed": lambda r: r["changed"],
        "all, never changed": lambda r: not r["changed"],
    }
    for name, keep in subsets.items():
        mine = {i: r for i, r in by["default"].items() if keep(r)}
        for v in VARIANTS:
            if v == "default":
                continue
            for metric in ("current_first", "user_first"):
                cmp = compare(mine, by[v], metric, changed=True)
                if cmp is None:
                    continue
                d = cmp["diff"]
                out.append(
                    [
                        name,
                        v,
                        metric,
                        str(d["n"]),
                        pct(cmp["system_value"]),
                        pct(cmp["peer_value"]),
                        f"{100 * d['mean']:+.1f} [{100 * d['lo']:+.1f}, {100 * d['hi']:+.1f}]",
                        str(cmp["changed"]),
                    ]
                )
    headers = ["questions", "against", "metric", "n", "default", "variant", "Δ", "changed"]
    print(markdown_table(headers, out, ["l", "l", "l", "r", "r", "r", "r", "r"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
