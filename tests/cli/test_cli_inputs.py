"""The CLI with real inputs: folders, document ids that do not depend on the working directory,
unknown threads, stats on any collection, size limits, calibrate's refusal of unlabelled data."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def tree(tmp_path):
    """docs/ with markdown in sub-folders, a thread file, and files to skip."""
    docs = tmp_path / "docs"
    (docs / "ops" / "runbooks").mkdir(parents=True)
    (docs / ".git").mkdir()
    (docs / "ops" / "oncall.md").write_text("# On call\nPriya is on call this week.\n", encoding="utf-8")
    (docs / "ops" / "runbooks" / "deploy.md").write_text("# Deploy\nRun make deploy from main.\n", encoding="utf-8")
    (docs / "notes.txt").write_text("Remember to renew the TLS certificate in May.\n", encoding="utf-8")
    (docs / "chat.jsonl").write_text(
        json.dumps({"role": "user", "content": "My dog is called Biscuit."}) + "\n", encoding="utf-8"
    )
    (docs / "image.png").write_bytes(b"\x89PNG\r\n")
    (docs / ".git" / "config").write_text("[core]\n", encoding="utf-8")
    (docs / "draft.md").write_text("# Draft\nNot ready.\n", encoding="utf-8")
    return docs


def _stats(run, store) -> dict:
    code, out, err = run("stats", "--json", "--store", store)
    assert code == 0, err
    return json.loads(out)


def test_a_folder_is_walked_with_include_and_exclude(run, tree, tmp_path):
    store = tmp_path / "s"
    code, out, err = run("index", tree, "--exclude", "draft.md", "--store", store)
    assert code == 0, err  # used to be "unsupported file type '(none)'"
    threads = set(_stats(run, store)["pieces_per_thread"])
    assert threads == {"ops/oncall.md", "ops/runbooks/deploy.md", "notes.txt", "chat"}
    code, _, err = run("index", tree, "--include", "*.png", "--store", tmp_path / "s2")
    assert code == 2 and "ctxret indexes" in err
    code, _, err = run("index", tree / "ops" / "none-here", "--store", tmp_path / "s3")
    assert code == 1 and "no such file or folder" in err


def test_document_ids_do_not_depend_on_the_working_directory(run, tree, tmp_path, monkeypatch):
    store = tmp_path / "s"
    monkeypatch.chdir(tmp_path)
    assert run("index", "docs/ops/oncall.md", "--store", store)[0] == 0
    monkeypatch.chdir(tree / "ops")
    assert run("index", "oncall.md", "--store", store)[0] == 0  # the same file from another folder
    stats = _stats(run, store)
    assert set(stats["pieces_per_thread"]) == {"oncall.md"}  # one document, not two
    monkeypatch.chdir(tmp_path)
    assert run("index", "docs", "--root", "docs", "--store", tmp_path / "r")[0] == 0
    assert "ops/oncall.md" in _stats(run, tmp_path / "r")["pieces_per_thread"]
    code, _, err = run("index", "docs/ops/oncall.md", "--root", "docs/ops/runbooks", "--store", tmp_path / "r")
    assert code == 2 and "not inside" in err


def test_an_unknown_thread_is_an_error_naming_the_threads_there(run, tree, tmp_path):
    store = tmp_path / "s"
    assert run("index", tree / "chat.jsonl", "--store", store)[0] == 0
    code, out, err = run("search", "dog", "--thread", "nobody", "--store", store)
    assert code == 1 and "no thread 'nobody'" in err and "'chat'" in err and not out
    code, out, err = run("search", "dog", "--thread", "nobody", "--thread", "chat", "--store", store)
    assert code == 0 and "'nobody' is not in the collection" in err and "Biscuit" in out


def test_stats_opens_a_collection_built_with_other_options(run, tree, tmp_path):
    store = tmp_path / "s"
    assert run("index", tree / "notes.txt", "--store", store)[0] == 0
    stored = _stats(run, store)["config"]["weight"]
    code, out, err = run("stats", "--store", store, "--weight", "0.6")
    assert code == 0, err  # used to refuse: the options differ from the collection's
    assert "weight" in out and f"stored {stored!r}" in out and "differ" in out
    stats = json.loads(run("stats", "--json", "--store", store, "--weight", "0.6")[1])
    assert stats["config"]["weight"] == stored and stats["mismatch"]["weight"] == {"stored": stored, "asked": 0.6}
    assert run("search", "certificate", "--store", store, "--weight", "0.6")[0] == 1  # searching it still refuses


def test_max_bytes_refuses_a_huge_turn_before_writing(run, tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"role": "user", "content": "word " * 3000}) + "\n", encoding="utf-8")
    small = tmp_path / "small.jsonl"
    small.write_text(json.dumps({"role": "user", "content": "a small message"}) + "\n", encoding="utf-8")
    code, _, err = run("index", small, big, "--max-bytes", "10000", "--store", tmp_path / "s")
    assert code == 1 and "over the 10,000-byte limit" in err and "--max-bytes" in err
    assert "nothing was written" in err
    assert run("index", small, big, "--max-bytes", "0", "--store", tmp_path / "s")[0] == 0


def test_search_help_matches_the_output(run, tree, tmp_path):
    code, out, _ = run("search", "--help")
    assert code == 0 and "fused" in out and "raw cosine" in out
    store = tmp_path / "s"
    run("index", tree / "notes.txt", "--store", store)
    code, out, _ = run("search", "certificate", "--store", store)
    assert code == 0 and "fused" in out and "cos" in out


def test_calibrate_refuses_unlabelled_threads_in_either_jsonl_form(run, tree, tmp_path):
    per_message = tree / "chat.jsonl"  # the form `ctxret index` reads: one message per line
    code, _, err = run("eval", "calibrate", per_message, "--quiet")
    assert code == 1 and "no labelled facts or questions" in err and "nan" not in err.lower()
    threads = tmp_path / "threads.jsonl"
    threads.write_text(json.dumps({"thread_id": "t", "messages": [{"role": "user", "content": "hi there"}]}) + "\n")
    code, _, err = run("eval", "calibrate", threads, "--quiet")
    assert code == 1 and "no labelled facts or questions" in err


def test_eval_controlled_runs_on_the_bundled_fixture(run):
    code, out, err = run("eval", "controlled", "--limit-families", "2", "--representations", "blend,whole", "--quiet")
    assert code == 0, err
    assert "controlled_fixture.json" in out and "| blend" in out


def test_progress_shows_from_the_first_batch(local_embedder, capsys):
    from ctxret.embedders.fitting import EMBED_CHUNK, embed_in_batches

    texts = [f"text number {i}" for i in range(EMBED_CHUNK + 5)]
    vecs = embed_in_batches(local_embedder, texts, progress=True, desc="embedding pieces")
    err = capsys.readouterr().err
    assert f"{EMBED_CHUNK}/{len(texts)}" in err and f"{len(texts)}/{len(texts)}" in err
    assert vecs.shape == (len(texts), local_embedder.dims)
    assert abs(float(vecs[3] @ local_embedder.embed([texts[3]])[0]) - 1.0) < 1e-5  # rows in input order
    assert os.environ.get("CTXRET_FAULT_AT") is None
