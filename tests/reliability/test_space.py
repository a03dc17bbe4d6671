"""Space: rewriting documents does not grow the store folder without bound.

The defect (BENCHMARKS.md "Space"): chromadb 1.5 never reuses a deleted vector's slot in its HNSW graph, and leaves a
dropped collection's graph folder on disk, so every rewrite grew the folder (20 rounds of edited documents: 2.1 ->
11.9 MB; here, 400 rounds: the graph 0.18 -> 13.2 MB for 284 live pieces). Now a store compacts itself when it has
deleted as many pieces as it holds (``storage/compact.py``: the live pieces, vectors as stored, copied into a new
collection and swapped in crash-safely), and a swap removes the graph folders no collection uses.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.storage import compact as compact_module

from .hash_embedder import HashEmbedder

WORKER = Path(__file__).with_name("faults_worker.py")


def views(passage, bodies):
    """A view writer standing in for an LLM: one question per piece."""
    return [[f"What does it say about {b.split()[0].lower()}?"] for b in bodies]


def document(i: int, revision: int) -> dict[str, str]:
    rnd = random.Random(i * 1000 + revision)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    sections = [" ".join(rnd.choice(words) for _ in range(25)) + f" rev {revision}." for _ in range(3)]
    return {"id": f"doc-{i}.md", "text": "# Doc\n" + "\n".join(f"## Part {j}\n{s}" for j, s in enumerate(sections))}


def snapshot(index: ContextualIndex) -> dict[str, tuple]:
    recs = index.store.chroma.iter_records(None, include=("embeddings", "documents", "metadatas"))
    return {r["id"]: (np.round(np.asarray(r["embedding"]), 6).tobytes(), r["document"], r["metadata"]) for r in recs}


def graph_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for d in folder.iterdir() if d.is_dir() for p in d.rglob("*") if p.is_file())


def test_compaction_keeps_every_piece_view_and_answer_and_frees_the_graph(tmp_path):
    folder = tmp_path / "store"
    index = ContextualIndex(folder, embedder=HashEmbedder(), progress=False, views=["questions"], view_writer=views)
    index.store.auto_compact = False
    for revision in range(12):
        index.add_documents([document(i, revision) for i in range(20)])
    grown = graph_bytes(folder)
    before = snapshot(index)
    views_before = index.store.views.count()
    answers = [
        [(h.id, round(h.score, 5)) for g in index.search(q, k=8, score_threshold=None) for h in g.hits]
        for q in ("alpha bravo rev 11", "what does it say about golf")
    ]
    report = index.store.compact()
    assert report.pieces == len(before) and report.views == views_before > 0
    assert snapshot(index) == before  # the same ids, vectors, documents and metadata: nothing re-embedded
    assert index.store.views.count() == views_before
    again = [
        [(h.id, round(h.score, 5)) for g in index.search(q, k=8, score_threshold=None) for h in g.hits]
        for q in ("alpha bravo rev 11", "what does it say about golf")
    ]
    assert again == answers
    assert index.store.lexical.ids() == set(before)
    assert graph_bytes(folder) < grown / 2  # the old graphs' folders are gone
    assert index.store.deleted_since_compact() == 0
    index.close()


def test_rewrites_compact_automatically_so_the_graph_stays_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(compact_module, "AUTO_COMPACT_MIN", 60)  # the rule's floor, small enough for a test
    folder = tmp_path / "store"
    index = ContextualIndex(folder, embedder=HashEmbedder(), progress=False)
    index.add_documents([document(i, 0) for i in range(10)])
    live = index.store.count()
    sizes = []
    for revision in range(1, 31):
        index.add_documents([document(i, revision) for i in range(10)])  # every piece rewritten
        assert index.store.count() == live
        sizes.append(graph_bytes(folder))
    assert index.store.deleted_since_compact() < max(live, 60) + live  # compacted whenever the rule said so
    first, last = max(sizes[:10]), max(sizes[-10:])
    assert last <= first * 1.5, sizes  # bounded: no growth from the first ten rounds to the last ten
    hits = index.search("alpha bravo rev 30", k=5, score_threshold=None)[0].hits
    assert hits and all(h.metadata["doc_id"].startswith("doc-") for h in hits)
    index.close()


def run(store: Path, op: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("CTXRET_FAULT_AT", None)
    if fault is not None:
        env["CTXRET_FAULT_AT"] = fault
    return subprocess.run(
        [sys.executable, str(WORKER), str(store), op], env=env, capture_output=True, text=True, timeout=300
    )


def state(store: Path) -> dict:
    proc = run(store, "check")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("point", ["rebuild:before-swap", "swap:after-rename-old", "swap:before-lexical"])
def test_a_compaction_killed_at_each_step_leaves_the_store_as_it_was(tmp_path, point):
    store = tmp_path / "store"
    assert run(store, "setup").returncode == 0
    before = state(store)
    killed = run(store, "compact", fault=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-500:]
    after = state(store)
    assert after["turns"] == before["turns"] and after["chroma"] == after["lexical"] == before["chroma"]
    assert after["collections"] == before["collections"] and after["copy_differs"] == []
    done = run(store, "compact")
    assert done.returncode == 0, done.stderr
    assert state(store)["turns"] == before["turns"]
