"""Throughput of LocalEmbedder (all-MiniLM-L6-v2 int8 ONNX) on this machine.

Measures texts/s and tokens/s (tokens as the model reads them, [CLS]/[SEP] included) for every
combination of batch size, text length and onnxruntime intra-op thread count. Each cell embeds
batches of ``batch`` texts (one model run per call, ``batch_size=batch``) for at least
``--seconds`` after one warm-up call. Prints a markdown table and writes JSON.

With ``--budgets`` the columns are tokens per model run instead (``LocalEmbedder(batch_tokens=...)``, as many
texts as fit): each call embeds 64 texts in the runs the embedder forms. The cells of one table run in rotation,
``--rounds`` times, each cell's figure the median of its rounds (a shared machine slows all cells alike).

    python benchmarks/bench_embedders.py --out benchmarks/results/embedders.json
    python benchmarks/bench_embedders.py --budgets 128,256,512,1024,2048,4096 --lengths 32,128,256 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

WORDS = (
    "the a retrieval pieces turn context vector memory agent tool call result export shipment "
    "invoice warehouse customer order delayed Tuesday because weather storm route driver "
    "database timeout error retry service latency percentile budget quarterly revenue growth "
    "cloud sales model embedding chunk query message split part group cosine floor threshold "
    "Berlin Tokyo Paris 2024 42 3.5 kg cats dogs violin concert bread dough orbit Mars"
).split()


def make_texts(embedder, target_tokens: int, count: int, seed: int) -> list[str]:
    """``count`` distinct texts of exactly ``target_tokens`` tokens (incl. [CLS]/[SEP]) each."""
    rng = random.Random(seed)
    texts = []
    while len(texts) < count:
        words = [rng.choice(WORDS) for _ in range(target_tokens)]
        text = " ".join(words)
        # trim word by word until it fits, then check it is exactly on target (else retry)
        while embedder.count_tokens([text])[0] > target_tokens:
            words.pop()
            text = " ".join(words)
        if embedder.count_tokens([text])[0] == target_tokens:  # else a multi-piece word overshot
            texts.append(text)
    return texts


def measure(embedder, texts: list[str], batch: int, seconds: float, budget: int | None = None) -> dict[str, float]:
    """``batch`` texts a call; one model run a call unless ``budget`` (tokens a run) cuts it into several."""
    embedder.batch_size = batch if budget is None else 10**6
    embedder.batch_tokens = 10**9 if budget is None else budget
    tokens_per_text = embedder.count_tokens(texts[:1])[0]
    embedder.embed(texts[:batch])  # warm-up (and shape planning)
    done = 0
    calls = 0
    start = time.perf_counter()
    while True:
        offset = (calls * batch) % (len(texts) - batch + 1)
        embedder.embed(texts[offset : offset + batch])
        done += batch
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return {
        "texts_per_s": done / elapsed,
        "tokens_per_s": done * tokens_per_text / elapsed,
        "ms_per_call": 1000 * elapsed / calls,
        "calls": calls,
    }


def machine() -> dict[str, object]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    import onnxruntime

    return {
        "nproc": os.cpu_count(),
        "cpu": cpu or platform.processor(),
        "ram_gb": ram_gb,
        "python": platform.python_version(),
        "onnxruntime": onnxruntime.__version__,
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results/embedders.json", help="JSON output path")
    parser.add_argument("--batch-sizes", default="1,8,32,64")
    parser.add_argument("--lengths", default="16,64,200", help="tokens per text, incl. specials")
    parser.add_argument("--threads", default="1,2", help="onnxruntime intra-op threads")
    parser.add_argument("--seconds", type=float, default=1.5, help="minimum timed seconds a cell")
    parser.add_argument("--budgets", default="", help="tokens a model run (columns), instead of batch sizes")
    parser.add_argument("--rounds", type=int, default=1, help="with --budgets: rounds of every cell in rotation")
    args = parser.parse_args(argv)
    if args.budgets:
        return budgets_table(args)

    from ctxret.embedders.local import LocalEmbedder

    batch_sizes = [int(x) for x in args.batch_sizes.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    threads_list = [int(x) for x in args.threads.split(",")]
    info = machine()
    results = []
    t0 = time.perf_counter()
    for threads in threads_list:
        embedder = LocalEmbedder(threads=threads)
        for length in lengths:
            texts = make_texts(embedder, length, max(batch_sizes) * 2, seed=length)
            for batch in batch_sizes:
                row = {"threads": threads, "tokens": length, "batch": batch}
                row.update(measure(embedder, texts, batch, args.seconds))
                results.append(row)
                print(  # noqa: T201 - progress
                    f"threads={threads} tokens={length} batch={batch}: "
                    f"{row['texts_per_s']:.1f} texts/s, {row['tokens_per_s']:.0f} tokens/s",
                    file=sys.stderr,
                )
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = round(time.perf_counter() - t0, 1)

    lines = [
        "| threads | tokens/text | " + " | ".join(f"batch {b}" for b in batch_sizes) + " |",
        "|---:|---:|" + "---:|" * len(batch_sizes),
    ]
    for threads in threads_list:
        for length in lengths:
            cells = []
            for batch in batch_sizes:
                r = next(
                    x for x in results if x["threads"] == threads and x["tokens"] == length and x["batch"] == batch
                )
                cells.append(f"{r['texts_per_s']:.0f} texts/s · {r['tokens_per_s'] / 1000:.1f}k tok/s")
            lines.append(f"| {threads} | {length} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)  # noqa: T201 - a script's output

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": info, "seconds_per_cell": args.seconds, "results": results}, indent=2))
    print(f"\nwrote {out}", file=sys.stderr)  # noqa: T201
    return 0


def budgets_table(args: argparse.Namespace) -> int:
    """Tokens/s by tokens a model run (``batch_tokens``), text length and threads; cells in rotation, medians."""
    import statistics

    from ctxret.embedders.local import LocalEmbedder

    budgets = [int(x) for x in args.budgets.split(",")]
    lengths = [int(x) for x in args.lengths.split(",")]
    threads_list = [int(x) for x in args.threads.split(",")]
    info = machine()
    embedders = {t: LocalEmbedder(threads=t) for t in threads_list}
    texts = {n: make_texts(embedders[threads_list[0]], n, 128, seed=n) for n in lengths}
    cells = [(t, n, b) for t in threads_list for n in lengths for b in budgets]
    got: dict[tuple[int, int, int], list[float]] = {c: [] for c in cells}
    t0 = time.perf_counter()
    for r in range(args.rounds):
        for t, n, b in cells[r % len(cells) :] + cells[: r % len(cells)]:
            row = measure(embedders[t], texts[n], 64, args.seconds, budget=b)
            got[(t, n, b)].append(row["tokens_per_s"])
            print(
                f"round {r + 1} threads={t} tokens={n} budget={b}: {row['tokens_per_s']:.0f} tokens/s", file=sys.stderr
            )  # noqa: T201 - progress
    info["loadavg_end"] = list(os.getloadavg())
    info["wall_s"] = round(time.perf_counter() - t0, 1)
    lines = [
        "| threads | tokens/text | " + " | ".join(f"{b} tokens a run" for b in budgets) + " |",
        "|---:|---:|" + "---:|" * len(budgets),
    ]
    for t in threads_list:
        for n in lengths:
            best = max(statistics.median(got[(t, n, b)]) for b in budgets)
            cells_txt = []
            for b in budgets:
                v = statistics.median(got[(t, n, b)])
                cells_txt.append(f"{'**' if v == best else ''}{v / 1000:.1f}k{'**' if v == best else ''}")
            lines.append(f"| {t} | {n} | " + " | ".join(cells_txt) + " |")
    print("\n".join(lines))  # noqa: T201 - a script's output
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"threads": t, "tokens": n, "batch_tokens": b, "tokens_per_s": got[(t, n, b)]} for t, n, b in cells]
    out.write_text(
        json.dumps(
            {"machine": info, "seconds_per_cell": args.seconds, "rounds": args.rounds, "results": rows}, indent=2
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
