"""Start-up of each ``ctxret`` command, paired and interleaved, on one store.

Runs ``ctxret --help``, ``ctxret search --help``, ``ctxret stats``, ``ctxret delete --thread <none>`` (a
thread that is not there: the store is not changed) and ``ctxret search MESSAGE`` as subprocesses, one of each
per round, ``--rounds`` times, and reports the median wall time of each with its ratio to ``search`` per round
(median of the per-round ratios, so load that drifts between rounds cancels), and the same for the CPU time
of each command's process (``getrusage`` of the children), with a 95% interval of the median ratio; rounds
alternate the order of the commands (ABBA). One more run of each under
``python -X importtime`` gives the import time of its top-level modules and which heavy packages it imports
(onnxruntime and tokenizers mean a model was loaded).

    python benchmarks/bench_cli_startup.py --store DIR [--rounds 7] [--out benchmarks/results/cli_startup.json]
    python benchmarks/bench_cli_startup.py --synthetic 100000 [--rounds 5]

Without ``--store`` a store is built in a temporary folder: from the bundled demo threads, or with
``--synthetic N`` from N synthetic chat pieces (``bench_scale``'s corpus: its vectors, texts and metadata, written
through ``PieceStore.write``) under the local model's index config, so that ``search`` opens it as its own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAVY = ("chromadb", "onnxruntime", "tokenizers", "openai", "ctxret.index", "ctxret.evaluation")


def commands(store: str, message: str) -> dict[str, list[str]]:
    ctxret = [sys.executable, "-m", "ctxret"]
    return {
        "--help": [*ctxret, "--help"],
        "search --help": [*ctxret, "search", "--help"],
        "stats": [*ctxret, "--store", store, "stats"],
        "delete (nothing)": [*ctxret, "--store", store, "delete", "--thread", "no-such-thread-bench"],
        "search": [*ctxret, "--store", store, "search", message],
    }


def imports(cmd: list[str]) -> tuple[float, list[str]]:
    """Seconds of top-level imports under ``-X importtime`` and the heavy packages among them."""
    proc = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, check=True)
    total, heavy = 0, set()
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| ( *)(\S+)", line)
        if not m:
            continue
        if not m.group(2):  # a top-level import: its cumulative time counts once
            total += int(m.group(1))
        name = m.group(3)
        heavy.update(h for h in HEAVY if name == h or name.startswith(h + "."))
    return total / 1e6, sorted(heavy)


def build_synthetic(path: Path, n: int) -> None:
    """``n`` synthetic pieces in ``n // 100`` threads, recorded under the local model's default config."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    from bench_scale import Corpus, chat_pieces
    from ctxret.cli.settings import describe_embedder, resolve_settings
    from ctxret.config import IndexConfig
    from ctxret.storage.pieces import open_piece_store

    corpus = Corpus(n, max(1, n // 100))
    store = open_piece_store(path, collection="ctxret")
    store.open(IndexConfig.resolve(describe_embedder(resolve_settings(argparse.Namespace(), {})), None).as_dict())
    rng, counter = np.random.default_rng(7), np.zeros(corpus.threads, np.int64)
    for start in range(0, n, 5000):
        end = min(n, start + 5000)
        docs, metas = chat_pieces(corpus, start, end, rng, counter)
        store.write([f"p{start + i:08d}" for i in range(end - start)], corpus.vectors(start, end), docs, metas)
    store.close()


def _median_interval(values: list[float]) -> tuple[float, float]:
    """A distribution-free ~95% interval of the median of sorted ``values`` (order statistics of the
    binomial(n, 1/2)); the whole range when there are too few."""
    n = len(values)
    if n < 6:
        return values[0], values[-1]
    half = 0.98 * n**0.5  # 1.96 * sqrt(n) / 2
    lo, hi = max(0, int(n / 2 - half)), min(n - 1, int(math.ceil(n / 2 + half)) - 1)
    return values[lo], values[hi]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", help="an existing embedded store (default: the demo threads in a temporary one)")
    ap.add_argument("--synthetic", type=int, default=None, metavar="N", help="build a store of N synthetic pieces")
    ap.add_argument("--message", default="What did she say about the adoption agency?")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None, help="write the numbers as JSON")
    args = ap.parse_args()
    tmp = None
    store = args.store
    if store is None:
        tmp = tempfile.TemporaryDirectory(prefix="ctxret-bench-")
        store = str(Path(tmp.name) / "store")
        if args.synthetic:
            build_synthetic(Path(store), args.synthetic)
        else:
            data = Path(__file__).resolve().parents[1] / "shared" / "ctxret" / "data" / "demo_threads.jsonl"
            subprocess.run(
                [sys.executable, "-m", "ctxret", "--store", store, "index", str(data)], check=True, capture_output=True
            )
    cmds = commands(store, args.message)
    env = dict(os.environ)
    for cmd in cmds.values():  # warm the file cache and the bytecode once
        subprocess.run(cmd, capture_output=True, check=True, env=env)
    times: dict[str, list[float]] = {name: [] for name in cmds}
    cpu: dict[str, list[float]] = {name: [] for name in cmds}
    names = list(cmds)
    for i in range(args.rounds):  # ABBA: every other round runs the commands in reverse order
        for name in names if i % 2 == 0 else names[::-1]:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run(cmds[name], capture_output=True, check=True, env=env)
            times[name].append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    rows = []
    for name, cmd in cmds.items():
        ratios = [t / s for t, s in zip(times[name], times["search"], strict=True)]
        cpu_ratios = sorted(t / s for t, s in zip(cpu[name], cpu["search"], strict=True))
        imported, heavy = imports(cmd)
        lo, hi = _median_interval(cpu_ratios)
        rows.append(
            {
                "command": name,
                "median_s": statistics.median(times[name]),
                "min_s": min(times[name]),
                "ratio_to_search": statistics.median(ratios),
                "cpu_median_s": statistics.median(cpu[name]),
                "cpu_ratio_to_search": statistics.median(cpu_ratios),
                "cpu_ratio_interval": [lo, hi],
                "imports_s": imported,
                "heavy_imports": heavy,
            }
        )
    print(f"store {store}, {args.rounds} interleaved rounds (ABBA), {os.cpu_count()} CPUs")
    print(
        "| command | median wall | ratio to `search` (wall) | median CPU | ratio to `search` (CPU, 95% interval) "
        "| imports | heavy packages imported |"
    )
    print("|:--|--:|--:|--:|--:|--:|:--|")
    for r in rows:
        lo, hi = r["cpu_ratio_interval"]
        print(
            f"| `ctxret {r['command']}` | {r['median_s']:.2f} s | {r['ratio_to_search']:.2f} | "
            f"{r['cpu_median_s']:.2f} s | {r['cpu_ratio_to_search']:.2f} ({lo:.2f}–{hi:.2f}) | "
            f"{r['imports_s']:.2f} s | {', '.join(r['heavy_imports']) or '—'} |"
        )
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"store": store, "rounds": args.rounds, "rows": rows}, indent=2))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
