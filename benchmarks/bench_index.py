"""Indexing throughput: what ``ContextualIndex`` costs beyond the raw model time, in one call and thread by thread.

60 threads of real chat (the LoCoMo dev sessions, one session per thread, when
``../shared/data/locomo-dev`` is there; else the bundled demo threads copied with distinct
text) are indexed with the default local model and its default stored side (late chunking,
weight 0) in several ways, and each is paired with the raw model time of exactly the model work
it did:

* ``raw`` -- the embedder alone replaying the model calls indexing made (the same texts, token
  passes and batching, recorded in a warm-up run of the same path on a fresh store);
* ``one_call`` -- ``ContextualIndex.add_turns`` of every thread in one call, on an embedded store
  (Chroma folder + the SQLite lexical file) and in memory (``one_call_memory``);
* ``per_thread`` -- one ``add_turns`` call per thread (embedded store);
* ``cli`` -- ``ctxret index`` of 60 JSONL files (a subprocess); its start (imports, model load)
  is measured by indexing one one-line file (``cli_start``) and subtracted;
* adapters -- LlamaIndex ``ContextualStoreIndex.insert_documents`` of the 60 threads as chat
  documents and an ``IngestionPipeline`` (parser + ``ContextualIndexWriter``), paired with the
  one-call raw time (the same turns); LangChain ``ContextualRetriever.add_documents`` and
  ``ContextualVectorStore.add_documents`` of the 60 sessions as text documents, paired with the
  core's ``add_documents`` of the same texts (``core_documents``) and its raw time;
* ``--variants``: the one call with the writes not overlapped, and with other write-batch sizes.

Every case runs once per round on a fresh store; rounds repeat the cases interleaved (rotated
order) so a noisy machine hits all of them alike. Overheads are medians over rounds of the
per-round paired ratios, in wall time and in CPU time (this process's, or the subprocess's, user
+ system: what the work costs whatever else the machine runs). ``--profile`` adds a cProfile of
one one-call ``add_turns`` grouped by where the time goes.

    python benchmarks/bench_index.py --repeat 5 --profile --out benchmarks/results/index.json
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import platform
import pstats
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOCOMO = ROOT.parent / "shared" / "data" / "locomo-dev"
DEMO = ROOT / "shared" / "ctxret" / "data" / "demo_threads.jsonl"
Thread = tuple[str, list[dict[str, Any]]]
Timing = tuple[float, float]  # (wall s, cpu s)


# -- data ---------------------------------------------------------------------------------------
def locomo_threads(folder: Path, n: int) -> list[Thread]:
    """``n`` LoCoMo sessions as chat threads (round robin over the conversations): the first
    speaker's utterances are user messages, the second's assistant messages."""
    sessions: dict[str, list[tuple[int, list[dict[str, Any]]]]] = {}
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        conv = data.get("conversation", data)
        first = conv["speaker_a"]
        keys = [k for k in conv if re.fullmatch(r"session_\d+", k) and isinstance(conv[k], list)]
        for number in sorted(int(k.split("_")[1]) for k in keys):
            msgs = []
            for utt in conv[f"session_{number}"]:
                text = str(utt.get("text") or "")
                if utt.get("blip_caption"):
                    text += f" [shares a photo: {utt['blip_caption']}]"
                msgs.append({"role": "user" if utt.get("speaker") == first else "assistant", "content": text})
            sessions.setdefault(path.stem, []).append((number, msgs))
    out: list[Thread] = []
    while len(out) < n and any(sessions.values()):
        for conv_id, left in sessions.items():
            if left and len(out) < n:
                number, msgs = left.pop(0)
                out.append((f"locomo-{conv_id}-s{number}", msgs))
    return out


def demo_threads(n: int) -> list[Thread]:
    """The bundled demo threads copied until there are ``n``, each copy's text made distinct."""
    base = [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines() if line.strip()]
    out = []
    for i in range(n):
        t = base[i % len(base)]
        out.append(
            (f"{t['thread_id']}-{i}", [{**m, "content": f"{m.get('content') or ''} (copy {i})"} for m in t["messages"]])
        )
    return out


# -- measuring ----------------------------------------------------------------------------------
@contextlib.contextmanager
def clock(children: bool = False) -> Iterator[list[float]]:
    """Wall and CPU seconds (this process's, or its finished children's) of the block: ``[wall, cpu]``."""

    def cpu() -> float:
        t = os.times()
        return t.children_user + t.children_system if children else t.user + t.system

    out = [0.0, 0.0]
    wall, used = time.perf_counter(), cpu()
    yield out
    out[0], out[1] = time.perf_counter() - wall, cpu() - used


class Recorder:
    """Passes everything to ``inner`` and records its model calls (``embed``, ``embed_tokens_many``)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[tuple[str, list[str]]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def embed(self, texts: Any) -> Any:
        self.calls.append(("embed", list(texts)))
        return self._inner.embed(texts)

    def embed_tokens(self, text: str) -> Any:
        self.calls.append(("embed_tokens_many", [text]))
        return self._inner.embed_tokens(text)

    def embed_tokens_many(self, texts: Any) -> Any:
        self.calls.append(("embed_tokens_many", list(texts)))
        return self._inner.embed_tokens_many(texts)


def release() -> None:
    """Let go of the stores of finished cases (Chroma keeps each folder's system until told)."""
    from chromadb.api.client import SharedSystemClient

    SharedSystemClient.clear_system_cache()


@contextlib.contextmanager
def writer_settings(**values: Any) -> Iterator[None]:
    """``ctxret.ingest.writer`` constants set for the block (``--variants``)."""
    from ctxret.ingest import writer

    old = {k: getattr(writer, k) for k in values}
    for k, v in values.items():
        setattr(writer, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(writer, k, v)


# -- the paths ------------------------------------------------------------------------------------
class Bench:
    def __init__(self, embedder: Any, threads: list[Thread], work: Path) -> None:
        from ctxret.ingest.messages import turns_from_messages

        self.embedder = embedder
        self.threads = threads
        self.work = work
        self.per_thread = [turns_from_messages(msgs, tid) for tid, msgs in threads]
        self.turns = [t for turns in self.per_thread for t in turns]
        self.texts = [
            {"text": "\n".join(f"{m['role']}: {m['content']}" for m in msgs), "title": tid, "id": tid}
            for tid, msgs in threads
        ]

    def index(self, embedder: Any = None, *, in_memory: bool = False) -> Any:
        from ctxret import ContextualIndex

        emb = embedder or self.embedder
        if in_memory:
            return ContextualIndex(in_memory=True, collection=f"c{uuid.uuid4().hex[:10]}", embedder=emb, progress=False)
        return ContextualIndex(self.work / f"store-{uuid.uuid4().hex[:8]}", embedder=emb, progress=False)

    def one_call(self, index: Any) -> Any:
        return index.add_turns(self.turns)

    def thread_by_thread(self, index: Any) -> None:
        for turns in self.per_thread:
            index.add_turns(turns)

    def core_documents(self, index: Any) -> Any:
        return index.add_documents(self.texts)

    def llamaindex_insert(self, index: Any) -> None:
        from llamaindex_ctxret import ContextualStoreIndex, documents_from_messages

        docs = [d for tid, msgs in self.threads for d in documents_from_messages(msgs, tid)]
        ContextualStoreIndex(index).insert_documents(docs)

    def llamaindex_pipeline(self, index: Any) -> None:
        from llama_index.core.ingestion import IngestionPipeline

        from llamaindex_ctxret import ContextualIndexWriter, ContextualNodeParser, documents_from_messages

        docs = [d for tid, msgs in self.threads for d in documents_from_messages(msgs, tid)]
        steps = [ContextualNodeParser.from_index(index), ContextualIndexWriter(index)]
        IngestionPipeline(transformations=steps).run(documents=docs)

    def _lc_docs(self) -> list[Any]:
        from langchain_core.documents import Document

        return [Document(page_content=t["text"], metadata={"title": t["title"]}, id=t["id"]) for t in self.texts]

    def langchain_retriever(self, index: Any) -> None:
        from langchain_ctxret import ContextualRetriever

        ContextualRetriever(index=index).add_documents(self._lc_docs())

    def langchain_vectorstore(self, index: Any) -> None:
        from langchain_ctxret import ContextualVectorStore

        ContextualVectorStore(index).add_documents(self._lc_docs())

    # runs
    def run(self, fn: Callable[[Any], Any], *, in_memory: bool = False, **settings: Any) -> Timing:
        index = self.index(in_memory=in_memory)
        with writer_settings(**settings), clock() as t:
            fn(index)
        index.close()
        release()
        return t[0], t[1]

    def record(self, fn: Callable[[Any], Any], **settings: Any) -> list[tuple[str, list[str]]]:
        """The model calls ``fn`` makes on a fresh store (its warm-up run)."""
        rec = Recorder(self.embedder)
        index = self.index(rec)
        with writer_settings(**settings):
            fn(index)
        index.close()
        release()
        return rec.calls

    def replay(self, calls: list[tuple[str, list[str]]]) -> Timing:
        with clock() as t:
            for kind, texts in calls:
                getattr(self.embedder, kind)(texts)
        return t[0], t[1]

    # the CLI, in a subprocess
    def write_files(self) -> tuple[Path, Path]:
        folder = self.work / "files"
        folder.mkdir(exist_ok=True)
        for tid, msgs in self.threads:
            lines = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in msgs)
            (folder / f"{tid}.jsonl").write_text(lines, encoding="utf-8")
        tiny = self.work / "tiny"
        tiny.mkdir(exist_ok=True)
        (tiny / "tiny.jsonl").write_text(json.dumps({"role": "user", "content": "hello"}) + "\n", encoding="utf-8")
        return folder, tiny

    def cli(self, folder: Path, printed: list[float] | None = None) -> Timing:
        """``ctxret index FOLDER`` in a subprocess: wall and CPU seconds (``printed``: the indexing time it prints)."""
        path = [str(ROOT / "shared"), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
        store = self.work / f"store-{uuid.uuid4().hex[:8]}"
        with clock(children=True) as t:
            proc = subprocess.run(
                [sys.executable, "-m", "ctxret", "index", str(folder), "--store", str(store)],
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
        if proc.returncode != 0:
            raise SystemExit(f"ctxret index failed:\n{proc.stderr}")
        m = re.search(r"\(([\d.]+)s\); store", proc.stdout)
        if m and printed is not None:
            printed.append(float(m.group(1)))
        shutil.rmtree(store, ignore_errors=True)
        return t[0], t[1]


# -- profile --------------------------------------------------------------------------------------
BINDINGS = "'{}' of 'builtins.Bindings'"
CATEGORIES = (
    ("model (onnxruntime run)", ("onnxruntime_pybind11_state.run",)),
    ("chroma write", tuple(BINDINGS.format(m) for m in ("upsert", "add", "delete"))),
    ("chroma reads", tuple(BINDINGS.format(m) for m in ("get", "count"))),
    ("tokenizer (HF)", ("tokenizers.Tokenizer",)),
    ("lexical (SQLite + analysis)", ("storage/lexical.py", "storage/tokenize.py", "sqlite3", "Stemmer")),
    ("thread waits (overlapped writes)", ("acquire' of '_thread.lock", "threading.py")),
)


def profile_one_call(bench: Bench) -> dict[str, Any]:
    """cProfile of one one-call ``add_turns`` (the main thread: an overlapped write shows as a wait)."""
    index = bench.index()
    prof = cProfile.Profile()
    started = time.perf_counter()
    prof.enable()
    bench.one_call(index)
    prof.disable()
    total = time.perf_counter() - started
    index.close()
    release()
    by_cat: dict[str, float] = {name: 0.0 for name, _ in CATEGORIES}
    by_cat["other ctxret / python"] = 0.0
    rows = []
    for (filename, line, func), (_cc, _nc, tottime, _ct, _callers) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        where = f"{filename}:{line}({func})"
        rows.append((tottime, where))
        cat = next((name for name, needles in CATEGORIES if any(n in where for n in needles)), "other ctxret / python")
        by_cat[cat] += tottime
    rows.sort(reverse=True)
    return {
        "total_s": round(total, 3),
        "by_category_s": {k: round(v, 3) for k, v in by_cat.items()},
        "top_tottime": [(round(t, 3), w.replace(str(ROOT), ".")) for t, w in rows[:25]],
    }


# -- main -----------------------------------------------------------------------------------------
def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=60)
    ap.add_argument("--repeat", type=int, default=5, help="rounds (each runs every case once, interleaved)")
    ap.add_argument("--data", choices=("auto", "locomo", "demo"), default="auto", help="auto: LoCoMo when present")
    ap.add_argument("--locomo", type=Path, default=LOCOMO, help="the LoCoMo dev folder (../shared/data/locomo-dev)")
    ap.add_argument("--skip", nargs="*", default=[], help="cases to leave out: cli, adapters, memory, thread")
    ap.add_argument("--variants", action="store_true", help="also: writes not overlapped, other write-batch sizes")
    ap.add_argument("--profile", action="store_true", help="cProfile one one-call add_turns")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "index.json"))
    args = ap.parse_args()

    from ctxret.embedders.local import LocalEmbedder

    if args.data == "locomo" and not args.locomo.is_dir():
        raise SystemExit(f"no LoCoMo data at {args.locomo}")
    use_locomo = args.data == "locomo" or (args.data == "auto" and args.locomo.is_dir())
    threads = locomo_threads(args.locomo, args.threads) if use_locomo else demo_threads(args.threads)
    embedder = LocalEmbedder()
    work = Path(tempfile.mkdtemp(prefix="ctxret-bench-index-"))
    try:
        bench = Bench(embedder, threads, work)
        # name -> (path, raw recording it pairs with, in memory, writer settings)
        cases: dict[str, tuple[Callable[[Any], Any], str, bool, dict[str, Any]]] = {
            "one_call": (bench.one_call, "one_call", False, {}),
        }
        if "memory" not in args.skip:
            cases["one_call_memory"] = (bench.one_call, "one_call", True, {})
        if args.variants:
            cases["one_call_serial"] = (bench.one_call, "one_call", False, {"OVERLAP_WRITES": False})
            for pieces in (256, 512):
                cases[f"one_call_batch{pieces}"] = (
                    bench.one_call,
                    f"batch{pieces}",
                    False,
                    {"WRITE_BATCH_PIECES": pieces},
                )
                cases[f"one_call_batch{pieces}_serial"] = (
                    bench.one_call,
                    f"batch{pieces}",
                    False,
                    {"WRITE_BATCH_PIECES": pieces, "OVERLAP_WRITES": False},
                )
        if "thread" not in args.skip:
            cases["per_thread"] = (bench.thread_by_thread, "per_thread", False, {})
        if "adapters" not in args.skip:
            cases["core_documents"] = (bench.core_documents, "documents", False, {})
            cases["langchain_retriever"] = (bench.langchain_retriever, "documents", False, {})
            cases["langchain_vectorstore"] = (bench.langchain_vectorstore, "documents", False, {})
            cases["llamaindex_insert"] = (bench.llamaindex_insert, "one_call", False, {})
            cases["llamaindex_pipeline"] = (bench.llamaindex_pipeline, "one_call", False, {})
        # warm-up runs record each path's model calls (once per distinct recording)
        calls: dict[str, list[tuple[str, list[str]]]] = {}
        for fn, raw, _mem, settings in cases.values():
            if raw not in calls:
                calls[raw] = bench.record(fn, **settings)
        probe = bench.index()
        pieces = bench.one_call(probe).added
        probe.close()
        release()
        n_tokens = sum(sum(embedder.count_tokens(texts)) for _, texts in calls["one_call"])
        print(
            f"data: {'LoCoMo dev sessions' if use_locomo else 'demo threads'}, {len(threads)} threads, "
            f"{len(bench.turns)} turns, {pieces} pieces, {n_tokens:,} tokens in the token passes; model calls: "
            + ", ".join(f"{k} {len(v)}" for k, v in calls.items()),
            flush=True,
        )
        jobs: dict[str, Callable[[], Timing]] = {}
        for raw, recorded in calls.items():
            jobs[f"raw_{raw}"] = lambda recorded=recorded: bench.replay(recorded)
        for name, (fn, _raw, mem, settings) in cases.items():
            jobs[name] = lambda fn=fn, mem=mem, settings=settings: bench.run(fn, in_memory=mem, **settings)
        printed: list[float] = []
        if "cli" not in args.skip:
            folder, tiny = bench.write_files()
            jobs["cli_many_files"] = lambda: bench.cli(folder, printed)
            jobs["cli_start"] = lambda: bench.cli(tiny)
        wall: dict[str, list[float]] = {name: [] for name in jobs}
        cpu: dict[str, list[float]] = {name: [] for name in jobs}
        names = list(jobs)
        for r in range(args.repeat):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                w, c = jobs[name]()
                wall[name].append(w)
                cpu[name].append(c)
            print(
                f"round {r + 1}: " + ", ".join(f"{n} {wall[n][-1]:.2f}s/{cpu[n][-1]:.2f}cpu" for n in names), flush=True
            )
        if "cli" not in args.skip:  # the CLI's indexing: the run minus the start (imports, model load)
            for t in (wall, cpu):
                t["cli"] = [m - s for m, s in zip(t["cli_many_files"], t["cli_start"], strict=True)]
            cases["cli"] = (bench.one_call, "one_call", False, {})

        def ratio(t: dict[str, list[float]], a: str, b: str) -> float:
            """The median over rounds of ``a / b`` (paired: both from the same round)."""
            return median([x / y for x, y in zip(t[a], t[b], strict=True)])

        rows = []
        for name, (_fn, raw, _mem, _settings) in cases.items():
            rows.append(
                {
                    "case": name,
                    "raw": f"raw_{raw}",
                    "raw_s": round(median(wall[f"raw_{raw}"]), 2),
                    "s": round(median(wall[name]), 2),
                    "overhead_wall_pct": round(100 * (ratio(wall, name, f"raw_{raw}") - 1), 1),
                    "overhead_cpu_pct": round(100 * (ratio(cpu, name, f"raw_{raw}") - 1), 1),
                    "over_one_call": round(ratio(wall, name, "one_call"), 3),
                    "pieces_per_s": round(pieces / median(wall[name]), 1) if raw == "one_call" else None,
                }
            )
        out: dict[str, Any] = {
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "command": " ".join(sys.argv),
            "data": "locomo" if use_locomo else "demo",
            "threads": len(threads),
            "turns": len(bench.turns),
            "pieces": pieces,
            "tokens": n_tokens,
            "rows": rows,
            "cli_printed_s": printed,
            "wall_s": {k: [round(x, 3) for x in v] for k, v in wall.items()},
            "cpu_s": {k: [round(x, 3) for x in v] for k, v in cpu.items()},
        }
        if args.profile:
            out["profile_one_call"] = profile_one_call(bench)
        print(
            f"\n{'case':<28} {'raw s':>7} {'s':>7} {'over wall':>10} {'over cpu':>9} {'/one call':>10} {'pieces/s':>9}"
        )
        for r in rows:
            pps = "" if r["pieces_per_s"] is None else f"{r['pieces_per_s']:.0f}"
            print(
                f"{r['case']:<28} {r['raw_s']:>7.2f} {r['s']:>7.2f} {r['overhead_wall_pct']:>+9.1f}% "
                f"{r['overhead_cpu_pct']:>+8.1f}% {r['over_one_call']:>9.2f}x {pps:>9}"
            )
        if args.profile:
            print(json.dumps(out["profile_one_call"], indent=2))
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
