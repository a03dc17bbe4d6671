"""Throughput of LocalEmbedder (all-MiniLM-L6-v2 int8 ONNX) on this machine.

Measures texts/s and tokens/s (tokens as the model reads them, [CLS]/[SEP] included) for every
combination of batch size, text length and onnxruntime intra-op thread count. Each cell embeds
batches of ``batch`` texts (one model run per call, ``batch_size=batch``) for at least
``--seconds`` after one warm-up call. Prints a markdown table and writes JSON.

    python benchmarks/bench_embedders.py --out benchmarks/results/embedders.json
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


def measure(embedder, texts: list[str], batch: int, seconds: float) -> dict[str, float]:
    embedder.batch_size = batch
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
    parser.add_argument(
        "--out", default="benchmarks/results/embedders.json", help="JSON output path"
    )
    parser.add_argument("--batch-sizes", default="1,8,32,64")
    parser.add_argument("--lengths", default="16,64,200", help="tokens per text, incl. specials")
    parser.add_argument("--threads", default="1,2", help="onnxruntime intra-op threads")
    parser.add_argument("--seconds", type=float, default=1.5, help="minimum timed seconds a cell")
    args = parser.parse_args(argv)

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
                    x
                    for x in results
                    if x["threads"] == threads and x["tokens"] == length and x["batch"] == batch
                )
                cells.append(
                    f"{r['texts_per_s']:.0f} texts/s · {r['tokens_per_s'] / 1000:.1f}k tok/s"
                )
            lines.append(f"| {threads} | {length} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)  # noqa: T201 - a script's output

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"machine": info, "seconds_per_cell": args.seconds, "results": results}, indent=2
        )
    )
    print(f"\nwrote {out}", file=sys.stderr)  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
