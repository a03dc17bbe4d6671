"""``ctxret stats`` on an embedded store answers from the lexical file alone: chromadb is not imported, the
model is not loaded, and what it prints is what Chroma would say (``ctxret.storage.config_copy``)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest
from ctxret.cli import commands as cli_commands
from ctxret.storage import config_copy
from ctxret.storage.lexical import LexicalIndex, default_lexical_path

DOGS = [
    {"role": "user", "content": "My dogs are called Rex and Bella.", "timestamp": "2026-10-01T09:00:00"},
    {"role": "assistant", "content": "Noted: Rex and Bella."},
    {"role": "user", "content": "The VPN host is vpn.example.internal, port 1194."},
    {"role": "assistant", "content": "Saved the VPN host."},
]
HEAVY = ("chromadb", "onnxruntime", "tokenizers", "openai")


@pytest.fixture
def store(run, tmp_path):
    path = tmp_path / "threads.json"
    path.write_text(json.dumps([{"thread_id": "a", "messages": DOGS[:2]}, {"thread_id": "b", "messages": DOGS}]))
    folder = tmp_path / "store"
    assert run("index", path, "--store", folder)[0] == 0
    return folder


def _stats_in_a_fresh_process(folder, *extra: str) -> tuple[dict, list[str]]:
    code = (
        "import json, sys\n"
        "from ctxret.cli import main\n"
        f"rc = main(['--store', {str(folder)!r}, 'stats', '--json', *{list(extra)!r}])\n"
        f"heavy = sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m == 'ctxret.index')\n"
        "sys.stderr.write('HEAVY=' + json.dumps(heavy) + '\\n')\n"
        "sys.exit(rc)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXRET_", "OPENAI_"))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    heavy = json.loads(proc.stderr.rsplit("HEAVY=", 1)[1])
    return json.loads(proc.stdout), heavy


def test_stats_imports_neither_chromadb_nor_the_model(store):
    info, heavy = _stats_in_a_fresh_process(store)
    assert heavy == []  # before: chromadb was imported to read the collection's config
    assert info["pieces"] == 6 and info["threads"] == 2 and info["pieces_per_thread"] == {"a": 2, "b": 4}
    assert info["config"]["context"] == "late" and info["config"]["model_id"].startswith("local:")
    assert info["cosine_floor"] == 0.3 and info["mismatch"] == {}


def test_stats_from_the_file_is_what_chroma_says(store, run, monkeypatch):
    code, fast, err = run("stats", "--store", store, "--json")
    assert code == 0, err
    assert config_copy.quick_stats(store, default_lexical_path(store, "ctxret"), "ctxret") is not None
    monkeypatch.setattr(cli_commands, "quick_store_stats", lambda settings: None)  # the Chroma path
    code, slow, err = run("stats", "--store", store, "--json")
    assert code == 0, err
    assert json.loads(fast) == json.loads(slow)


def test_stats_asks_chroma_when_the_file_cannot_answer_alone(store, run):
    lexical_path = default_lexical_path(store, "ctxret")
    lexical = LexicalIndex(lexical_path)
    lexical.journal.mark_pending(["x"])  # a writer announced a write and has not settled it
    lexical.close()
    assert config_copy.quick_stats(store, lexical_path, "ctxret") is None
    info = json.loads(run("stats", "--store", store, "--json")[1])
    assert info["pieces"] == 6 and info["config"]["context"] == "late"  # from Chroma
    with sqlite3.connect(lexical_path) as db:
        db.execute("DELETE FROM pending_writes")
        db.execute(f"DROP TABLE {config_copy.TABLE}")  # a file written before the copy existed
    assert config_copy.quick_stats(store, lexical_path, "ctxret") is None
    info = json.loads(run("stats", "--store", store, "--json")[1])
    assert info["pieces"] == 6 and info["config"]["context"] == "late"


def test_a_missing_collection_is_still_named(store, run):
    code, _, err = run("stats", "--store", store, "--collection", "other")
    assert code != 0 and "no collection 'other'" in err


def test_the_copy_follows_a_rebuild(store, run):
    code, _, err = run("reindex", "--store", store, "--weight", "0.5")
    assert code == 0, err
    info, heavy = _stats_in_a_fresh_process(store)
    assert heavy == [] and info["config"]["weight"] == 0.5
    assert info["pieces"] == 6
