"""Indexing speed against langchain-chroma with the same model, paired (ABBA) in one run, on real documents and chats.

Two data sets, each indexed from scratch into an embedded store by every case:

* ``docs``: SciFact dev's abstracts as markdown documents (``# title`` + abstract; ``--docs N``, default 1,000,
  0 for all 5,183);
* ``chat``: LoCoMo dev's sessions as chat threads, one message per utterance (the first speaker the user), 128
  threads and 2,760 messages.

Cases (each run in its own process; the timing covers the indexing call only, not imports or the model's load):

* ``ctxret``: this checkout's default (``ContextualIndex(folder)``: the local model, late chunking at weight 0,
  Chroma + the lexical file), one ``add_documents`` call / one ``add_turns`` call of every thread's turns;
* ``ctxret_old`` (with ``--old PATH``, a checkout of an earlier commit): the same call with that code;
* ``lc_pieces``: langchain-chroma's ``Chroma.add_texts`` of the very piece texts ctxret stores (labels included),
  embedded by the same local model (``langchain_ctxret.CtxretEmbeddings``), ids given;
* ``lc_chunks``: langchain-chroma on its usual chunks: ``RecursiveCharacterTextSplitter(chunk_size=1000,
  chunk_overlap=200)`` of each document (of each chat session's transcript, ``speaker: text`` lines), same model
  (a chunk over its 256 tokens cut, as sentence-transformers cuts it);
* ``raw_ctxret``: the model alone replaying exactly the model runs ``ctxret`` made (recorded in a warm-up run):
  what indexing costs at the model's speed;
* ``raw_pieces``: the model alone embedding the piece texts (``LocalEmbedder.embed``): ``lc_pieces``'s model work.

Every round runs the cases in one order and then in the reverse (A B C … C B A); a case's time in a round is the
sum of its two runs, and each ratio is the median over rounds of the per-round ratios (with the range, and a
bootstrap 95% interval over rounds from 3 rounds on). Reported per case: wall and CPU seconds (the process's user
+ system, every thread), pieces (or chunks) per second, the model's tokens per second (the tokens it read, padding
excluded), and for ctxret the tokens the model read per token of its pieces read alone (``[CLS]``/``[SEP]``
included) and the padding share of its runs. Needs ``langchain-chroma`` and ``langchain-text-splitters`` (not
ctxret dependencies: ``pip install langchain-chroma langchain-text-splitters``); without them only the ctxret and
raw cases run, with a message.

    python benchmarks/bench_index_peers.py --rounds 3 --out index_peers.json
    python benchmarks/bench_index_peers.py --sets docs --docs 0 --cases ctxret ctxret_old --old /tmp/old --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
CASES = ("ctxret", "ctxret_old", "lc_pieces", "lc_chunks", "raw_ctxret", "raw_pieces")
PEERS = ("lc_pieces", "lc_chunks")


# -- data ---------------------------------------------------------------------------------------------------------
def scifact_docs(folder: Path, n: int) -> list[dict[str, str]]:
    docs = []
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            docs.append({"id": str(d["_id"]), "text": f"# {d['title'].strip()}\n\n{d['text'].strip()}"})
            if n and len(docs) >= n:
                break
    return docs


def locomo_threads(folder: Path) -> list[tuple[str, list[dict[str, str]]]]:
    """Every LoCoMo session as a thread of messages (the first speaker's utterances as the user's)."""
    out = []
    for path in sorted(folder.glob("*.json")):
        conv = json.loads(path.read_text(encoding="utf-8"))
        conv = conv.get("conversation", conv)
        first = conv["speaker_a"]
        keys = [k for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)]
        for number in sorted(int(k.split("_")[1]) for k in keys):
            msgs = []
            for utt in conv[f"session_{number}"]:
                text = str(utt.get("text") or "")
                if utt.get("blip_caption"):
                    text += f" [shares a photo: {utt['blip_caption']}]"
                role = "user" if utt.get("speaker") == first else "assistant"
                msgs.append({"role": role, "content": text, "speaker": str(utt.get("speaker"))})
            out.append((f"locomo-{path.stem}-s{number}", msgs))
    return out


def prepare(kind: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """The data set's inputs, its piece texts (as this checkout stores them) and langchain's usual chunks."""
    from ctxret import ContextualIndex
    from ctxret.embedders.local import LocalEmbedder
    from ctxret.ingest.documents import read_documents
    from ctxret.ingest.messages import turns_from_messages

    if kind == "docs":
        docs = scifact_docs(args.scifact, args.docs)
        turns, _ = read_documents(docs)
        raw_texts = [d["text"] for d in docs]
        inputs: Any = docs
        what = f"{len(docs):,} SciFact abstracts"
    else:
        threads = locomo_threads(args.locomo)
        turns = [
            t
            for tid, msgs in threads
            for t in turns_from_messages([{"role": m["role"], "content": m["content"]} for m in msgs], tid)
        ]
        raw_texts = ["\n".join(f"{m['speaker']}: {m['content']}" for m in msgs) for _, msgs in threads]
        inputs = [(tid, [{"role": m["role"], "content": m["content"]} for m in msgs]) for tid, msgs in threads]
        what = f"{len(threads)} LoCoMo sessions, {sum(len(m) for _, m in threads):,} messages"
    embedder = LocalEmbedder()
    probe = ContextualIndex(in_memory=True, embedder=embedder, progress=False)
    pieces = [p.text for t in turns for p in probe.fit_pieces(t)]
    probe.close()
    chunks: list[str] = []
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
        chunks = [c for text in raw_texts for c in splitter.split_text(text)]
    except ImportError:
        pass
    spec = {
        "kind": kind,
        "what": what,
        "inputs": inputs,
        "pieces": pieces,
        "chunks": chunks,
        "piece_tokens": sum(embedder.count_tokens(pieces)),
    }
    path = work / f"{kind}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return {**spec, "path": str(path)}


# -- one run (a worker process) -----------------------------------------------------------------------------------
def worker(case: str, spec_path: str, threads: int | None, record: str | None) -> dict[str, Any]:
    """Index the data set once as ``case``; returns wall and CPU seconds of the call and the model's counts."""
    import numpy as np
    from ctxret.embedders.local import LocalEmbedder

    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    embedder = LocalEmbedder(threads=threads)
    counts = {"runs": 0, "tokens": 0, "cells": 0}
    recorded: list[tuple[Any, Any]] = []
    run = embedder._run

    def counted(ids: Any, mask: Any) -> Any:
        counts["runs"] += 1
        counts["tokens"] += int(mask.sum())
        counts["cells"] += int(ids.size)
        if record:
            recorded.append((ids.copy(), mask.copy()))
        return run(ids, mask)

    embedder._run = counted  # type: ignore[method-assign]
    folder = Path(tempfile.mkdtemp(prefix=f"bench-peers-{case}-", dir="/tmp"))
    try:
        if case == "raw_ctxret":
            with np.load(record or "", allow_pickle=False) as saved:
                runs = [(saved[f"ids{i}"], saved[f"mask{i}"]) for i in range(int(saved["n"]))]
            timed = lambda: [embedder._run(i, m) for i, m in runs]  # noqa: E731
        elif case == "raw_pieces":
            timed = lambda: embedder.embed(spec["pieces"])  # noqa: E731
        elif case in ("ctxret", "ctxret_old"):
            from ctxret import ContextualIndex

            index = ContextualIndex(str(folder / "store"), embedder=embedder, progress=False)
            if spec["kind"] == "docs":
                timed = lambda: index.add_documents(spec["inputs"])  # noqa: E731
            else:
                from ctxret.ingest.messages import turns_from_messages

                turns = [t for tid, msgs in spec["inputs"] for t in turns_from_messages(msgs, tid)]
                timed = lambda: index.add_turns(turns)  # noqa: E731
        else:
            import chromadb
            from chromadb.config import Settings
            from langchain_chroma import Chroma

            from langchain_ctxret import CtxretEmbeddings

            texts = spec["pieces"] if case == "lc_pieces" else spec["chunks"]
            if case == "lc_chunks":  # a chunk over the model's 256 tokens is cut, as sentence-transformers does
                import logging

                embedder.truncate = True
                logging.getLogger("ctxret.embedders.local").setLevel(logging.ERROR)
            client = chromadb.PersistentClient(str(folder / "chroma"), settings=Settings(anonymized_telemetry=False))
            store = Chroma(
                "bench",
                embedding_function=CtxretEmbeddings(embedder),
                client=client,
                collection_metadata={"hnsw:space": "cosine"},
            )
            ids = [f"c{i}" for i in range(len(texts))]
            timed = lambda: store.add_texts(texts, ids=ids)  # noqa: E731
        t = os.times()
        wall = time.perf_counter()
        timed()
        wall = time.perf_counter() - wall
        u = os.times()
        out = {"wall": wall, "cpu": (u.user - t.user) + (u.system - t.system), **counts}
        if record and case == "ctxret":
            np.savez(
                record,
                n=len(recorded),
                **{f"ids{i}": a for i, (a, _) in enumerate(recorded)},
                **{f"mask{i}": b for i, (_, b) in enumerate(recorded)},
            )
        return out
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_case(case: str, spec: dict[str, Any], args: argparse.Namespace, record: str | None = None) -> dict[str, Any]:
    """One worker process; the old checkout's code for ``ctxret_old``."""
    env = dict(os.environ)
    paths = [str(ROOT / "shared"), str(ROOT)]
    if case == "ctxret_old":
        paths = [str(Path(args.old) / "shared"), str(args.old)]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", case, "--spec", spec["path"]]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if record:
        cmd += ["--record", record]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{case} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- the paired run -----------------------------------------------------------------------------------------------
def ratio_summary(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Median of the per-round ratios ``a / b``, their range, and a bootstrap 95% interval of the median (3+ rounds)."""
    rs = [x / y for x, y in zip(a, b, strict=True)]
    out: dict[str, Any] = {"median": statistics.median(rs), "min": min(rs), "max": max(rs), "rounds": len(rs)}
    if len(rs) >= 3:
        rng = random.Random(0)
        meds = sorted(statistics.median(rng.choices(rs, k=len(rs))) for _ in range(2000))
        out["ci95"] = [meds[49], meds[1949]]
    return out


def fmt_ratio(r: dict[str, Any]) -> str:
    ci = f", 95% [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]" if "ci95" in r else ""
    return f"{r['median']:.2f} (rounds {r['min']:.2f}–{r['max']:.2f}{ci})"


def bench_set(kind: str, args: argparse.Namespace, work: Path, have_lc: bool) -> dict[str, Any]:
    spec = prepare(kind, args, work)
    cases = [c for c in args.cases if c in CASES and (c != "ctxret_old" or args.old)]
    cases = [c for c in cases if have_lc or c not in PEERS]
    if "raw_ctxret" in cases and "ctxret" not in cases:
        cases.remove("raw_ctxret")
    record = str(work / f"{kind}-runs.npz")
    print(
        f"\n== {kind}: {spec['what']}, {len(spec['pieces']):,} pieces ({spec['piece_tokens']:,} tokens read alone), "
        f"{len(spec['chunks']):,} langchain chunks; cases {', '.join(cases)}",
        flush=True,
    )
    if "ctxret" in cases:  # a warm-up run records the model runs raw_ctxret replays
        warm = run_case("ctxret", spec, args, record=record)
        print(f"  warm-up ctxret {warm['wall']:.1f} s ({warm['runs']} model runs)", flush=True)
    wall: dict[str, list[float]] = {c: [] for c in cases}
    cpu: dict[str, list[float]] = {c: [] for c in cases}
    model: dict[str, dict[str, int]] = {}
    for r in range(args.rounds):
        order = cases if r % 2 == 0 else cases[::-1]
        got: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
        for case in [*order, *order[::-1]]:
            res = run_case(case, spec, args, record=record if case == "raw_ctxret" else None)
            got[case].append(res)
            model[case] = {k: res[k] for k in ("runs", "tokens", "cells")}
            print(f"  round {r + 1}: {case} {res['wall']:.1f} s wall, {res['cpu']:.1f} s cpu", flush=True)
        for c in cases:
            wall[c].append(sum(x["wall"] for x in got[c]) / 2)
            cpu[c].append(sum(x["cpu"] for x in got[c]) / 2)
    units = {c: len(spec["chunks"]) if c == "lc_chunks" else len(spec["pieces"]) for c in cases}
    rows = []
    for c in cases:
        w = statistics.median(wall[c])
        m = model.get(c, {})
        rows.append(
            {
                "case": c,
                "wall_s": w,
                "cpu_s": statistics.median(cpu[c]),
                "units": units[c],
                "units_per_s": units[c] / w,
                "model_tokens": m.get("tokens", 0),
                "model_tokens_per_s": m.get("tokens", 0) / w,
                "padding": 1 - m["tokens"] / m["cells"] if m.get("cells") else None,
            }
        )
    ratios = {}
    pairs = [("ctxret", p) for p in (*PEERS, "raw_ctxret")] + [("ctxret_old", "ctxret"), ("lc_pieces", "raw_pieces")]
    for a, b in pairs:
        if a in wall and b in wall:
            ratios[f"{a} / {b}"] = {"wall": ratio_summary(wall[a], wall[b]), "cpu": ratio_summary(cpu[a], cpu[b])}
    read = model.get("ctxret", {}).get("tokens", 0) / spec["piece_tokens"] if "ctxret" in model else None
    print(f"\n{kind}: {spec['what']}; model tokens read per piece token (ctxret): " + (f"{read:.3f}" if read else "—"))
    print("| case | wall s | CPU s | pieces/s | model tokens/s | padding |")
    print("|:--|--:|--:|--:|--:|--:|")
    for row in rows:
        pad = f"{100 * row['padding']:.1f}%" if row["padding"] is not None else "—"
        unit = "chunks" if row["case"] == "lc_chunks" else ""
        print(
            f"| {row['case']} | {row['wall_s']:.1f} | {row['cpu_s']:.1f} | {row['units_per_s']:.1f} {unit}| "
            f"{row['model_tokens_per_s']:,.0f} | {pad} |"
        )
    print("\n| paired ratio | wall | CPU |")
    print("|:--|--:|--:|")
    for name, r in ratios.items():
        print(f"| {name} | {fmt_ratio(r['wall'])} | {fmt_ratio(r['cpu'])} |")
    return {
        "what": spec["what"],
        "pieces": len(spec["pieces"]),
        "piece_tokens": spec["piece_tokens"],
        "chunks": len(spec["chunks"]),
        "tokens_read_per_piece_token": read,
        "rows": rows,
        "ratios": ratios,
        "wall_s": wall,
        "cpu_s": cpu,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=("docs", "chat"), default=["docs", "chat"])
    ap.add_argument("--docs", type=int, default=1000, help="SciFact abstracts (0: all 5,183)")
    ap.add_argument("--cases", nargs="+", default=[c for c in CASES if c != "ctxret_old"], help=", ".join(CASES))
    ap.add_argument("--old", default=None, help="a checkout of an earlier commit: adds the case ctxret_old")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (default: its own)")
    ap.add_argument("--scifact", type=Path, default=DATA / "scifact-dev")
    ap.add_argument("--locomo", type=Path, default=DATA / "locomo-dev")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--spec", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--record", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.spec, args.threads, args.record)))
        return 0
    if args.old:
        args.cases = [*args.cases, "ctxret_old"] if "ctxret_old" not in args.cases else args.cases
    try:
        import langchain_chroma  # noqa: F401
        import langchain_text_splitters  # noqa: F401

        have_lc = True
    except ImportError:
        have_lc = False
        print(
            "langchain-chroma or langchain-text-splitters is not installed: the langchain cases are skipped "
            "(pip install langchain-chroma langchain-text-splitters)",
            file=sys.stderr,
        )
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="bench-index-peers-"))
    out: dict[str, Any] = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": started,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }
    try:
        for kind in args.sets:
            out[kind] = bench_set(kind, args, work, have_lc)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out["loadavg"] = {"start": load, "end": os.getloadavg()}
    print(f"\n{started}; load average at start {load[0]:.1f}, at the end {os.getloadavg()[0]:.1f}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
