"""How much disk a store takes while its documents are edited again and again (issue 35, item 6).

A set of documents (SciFact dev abstracts, each cut into sections) is indexed, then edited round after round: in each
round a share of the documents gets one section rewritten and is added again under its id, which replaces the stored
document (the changed section's pieces written, the old ones deleted). After every ``--every`` rounds the folder is
measured by part: Chroma's SQLite file (with its ``-wal``), Chroma's segment folders (the HNSW graph files), the
lexical file (with its ``-wal``). At the end the store is closed and opened again, and measured once more.

The embedder is a 384-dimensional word-hash model (the local model's vector size; disk use does not depend on what the
numbers are), so the run measures the store, not the model.

    python benchmarks/bench_space.py --docs 60 --rounds 100 --share 0.3 --every 10 --dir /work/cache/faults/space
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact-dev" / "corpus.jsonl"


class WordHash384:
    """A word-hash bag of words with the local model's 384 dimensions (unit rows)."""

    model_id = "bench-hash-384"
    dims = 384
    max_tokens = 100_000
    default_piece_bytes = 600
    default_score_threshold = 0.0
    embed_timeout = None

    def embed(self, texts):
        out = np.zeros((len(texts), self.dims), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                out[i, int(hashlib.md5(word.encode()).hexdigest()[:8], 16) % self.dims] += 1.0
            out[i, 0] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    async def aembed(self, texts):
        return self.embed(texts)

    def count_tokens(self, texts):
        return [len(t.encode("utf-8")) for t in texts]


def documents(n: int) -> list[dict[str, str]]:
    """The first ``n`` SciFact abstracts as markdown documents of three sections."""
    out = []
    with DATA.open(encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            sentences = re.split(r"(?<=[.!?])\s+", row["text"])
            if len(sentences) < 3:
                continue
            third = max(1, len(sentences) // 3)
            parts = [sentences[:third], sentences[third : 2 * third], sentences[2 * third :]]
            text = f"# {row['title']}\n" + "\n".join(f"## Part {i}\n{' '.join(p)}" for i, p in enumerate(parts))
            out.append({"id": f"doc-{row['_id']}.md", "text": text})
            if len(out) == n:
                break
    return out


def edited(doc: dict[str, str], round_no: int, rnd: random.Random) -> dict[str, str]:
    """``doc`` with one section's text changed, its size kept: the section's closing note names the round."""
    sections = doc["text"].split("\n## ")
    i = rnd.randrange(1, len(sections))
    body = re.sub(r" Revised in round \d+: \d\.\d+\.$", "", sections[i])
    sections[i] = f"{body} Revised in round {round_no:03d}: {rnd.random():.6f}."
    return {"id": doc["id"], "text": "\n## ".join(sections)}


def sizes(folder: Path) -> dict[str, int]:
    """Bytes on disk by part of the store folder."""
    out = {"chroma.sqlite3": 0, "segments": 0, "lexical": 0, "other": 0}
    for p in folder.rglob("*"):
        if not p.is_file():
            continue
        n = p.stat().st_size
        if p.name.startswith("chroma.sqlite3"):
            out["chroma.sqlite3"] += n
        elif p.parent != folder:
            out["segments"] += n
        elif p.name.startswith("ctxret-lexical-") and ".damaged-" not in p.name:
            out["lexical"] += n
        else:
            out["other"] += n
    out["total"] = sum(out.values())
    return out


def mb(n: int) -> str:
    return f"{n / 1e6:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--share", type=float, default=0.3, help="share of the documents edited in each round")
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--dir", type=Path, required=True, help="a scratch folder (emptied)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--no-compact", action="store_true", help="turn the automatic compaction off (the code before it)")
    args = ap.parse_args()

    import logging

    from ctxret import ContextualIndex

    compactions: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("compacted"):
                compactions.append(record.getMessage())

    logging.getLogger("ctxret.storage.compact").addHandler(Seen())
    logging.getLogger("ctxret.storage.compact").setLevel(logging.INFO)

    shutil.rmtree(args.dir, ignore_errors=True)
    folder = args.dir / "store"
    rnd = random.Random(35)
    docs = documents(args.docs)
    index = ContextualIndex(folder, embedder=WordHash384(), progress=False)
    index.store.auto_compact = not args.no_compact
    index.add_documents(docs)
    rows = [{"round": 0, "pieces": index.store.count(), **sizes(folder)}]
    started = time.perf_counter()
    for r in range(1, args.rounds + 1):
        chosen = rnd.sample(range(len(docs)), max(1, int(len(docs) * args.share)))
        for i in chosen:
            docs[i] = edited(docs[i], r, rnd)
        index.add_documents([docs[i] for i in chosen])
        if r % args.every == 0 or r == args.rounds:
            rows.append({"round": r, "pieces": index.store.count(), **sizes(folder)})
            print(f"round {r}: {mb(rows[-1]['total'])} MB", file=sys.stderr)
    index.close()
    rows.append({"round": "closed", "pieces": rows[-1]["pieces"], **sizes(folder)})
    index = ContextualIndex(folder, embedder=WordHash384(), progress=False)
    n = index.store.count()
    hits = index.search("cerebral white matter", k=5, score_threshold=None)[0].hits
    index.close()
    rows.append({"round": "reopened", "pieces": n, **sizes(folder)})
    print("| round | pieces | total MB | chroma.sqlite3 | segments (HNSW) | lexical | other |")
    print("|--:|--:|--:|--:|--:|--:|--:|")
    for row in rows:
        cells = [mb(row[k]) for k in ("total", "chroma.sqlite3", "segments", "lexical", "other")]
        print(f"| {row['round']} | {row['pieces']:,} | " + " | ".join(cells) + " |")
    edited_docs = max(1, int(len(docs) * args.share))
    took = time.perf_counter() - started
    print(f"\n{args.rounds} rounds of {edited_docs} edited documents in {took:.0f} s; a search after reopening:")
    print(f"{len(hits)} hits; {len(compactions)} automatic compaction(s):")
    for line in compactions:
        print(f"- {line}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
