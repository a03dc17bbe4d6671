"""The ``ctxret`` command end to end on temp stores: in this process through ``cli.main`` (``cli_inprocess``), and
a few subprocess smoke tests (``python -m ctxret``, the console script; marked ``slow``)."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_inprocess import clean_env, run_cli
from ctxret import cli
from ctxret.cli import demo as cli_demo
from ctxret.cli import settings as cli_settings

pytestmark = pytest.mark.timeout(900)

PETS = [
    {
        "role": "user",
        "content": "Set a reminder to water the plants every Sunday.",
        "timestamp": "2026-10-01T09:00:00",
    },
    {"role": "assistant", "content": "Done: a weekly reminder to water the plants on Sundays."},
    {
        "role": "user",
        "content": "For the record, my cats are called Miso and Tofu. Miso is the grey one.",
        "timestamp": "2026-10-02T18:30:00",
    },
    {"role": "assistant", "content": "Noted: Miso (grey) and Tofu."},
]
TRAVEL = [
    {
        "role": "user",
        "content": "Book a hotel in Lisbon from the 15th to the 18th.",
        "timestamp": "2026-10-05T12:00:00",
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "book_hotel",
                    "arguments": '{"city": "Lisbon", "from": "2026-11-15", "to": "2026-11-18"}',
                },
            }
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "Reservation confirmed. Casa do Miradouro, Alfama. Confirmation code HTL-58213-LX.",
    },
    {
        "role": "assistant",
        "content": "Booked Casa do Miradouro in Alfama; confirmation code HTL-58213-LX.",
    },
]
RUNBOOK = """# Runbook

## Rollback
Run deploy.sh with --rollback, wait for the health checks, then purge the CDN cache.

## On call
Priya Raman is primary on call for platform next week; Tomasz covers Thursday afternoon.
"""
HOTEL_PART = "What is the confirmation code of the Lisbon hotel booking?"
QUESTION = HOTEL_PART + " Also, what were my cats called again?"


def _env(**extra: str) -> dict[str, str]:
    return clean_env(**extra)


def run(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
):
    """``ctxret ARGS`` in ``cwd``, in this process (:mod:`cli_inprocess`): the CompletedProcess (both streams)."""
    proc = run_cli(*args, cwd=cwd, env=env, stdin=stdin)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def run_subprocess(*args: str, cwd: Path, env: dict[str, str] | None = None, executable: list[str] | None = None):
    """``python -m ctxret ARGS`` (or ``executable ARGS``) as a real subprocess: the CompletedProcess."""
    proc = subprocess.run(
        [*(executable or [sys.executable, "-m", "ctxret"]), *args],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def ok(proc: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def stats(cwd: Path, *store_args: str, env: dict[str, str] | None = None) -> dict:
    return json.loads(ok(run("stats", "--json", *store_args, cwd=cwd, env=env)).stdout)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "threads": write_jsonl(
            tmp_path / "threads.jsonl",
            [{"thread_id": "pets", "messages": PETS}, {"thread_id": "travel", "messages": TRAVEL}],
        ),
        "messages": write_jsonl(tmp_path / "travel-log.jsonl", TRAVEL),
        "doc": _write(tmp_path / "runbook.md", RUNBOOK),
    }


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# -- the main path --------------------------------------------------------------------------------
def test_index_search_stats_reindex_delete(tmp_path, files):
    store = ("--store", str(tmp_path / "store"))
    out = ok(run("index", str(files["threads"]), str(files["doc"]), *store, cwd=tmp_path)).stdout
    assert "threads.jsonl" in out and "runbook.md" in out

    before = stats(tmp_path, *store)
    assert before["threads"] == 3  # pets, travel, runbook.md (a document's path is its id and default thread)
    assert set(before["pieces_per_thread"]) == {"pets", "travel", "runbook.md"}
    assert before["pieces"] == sum(before["pieces_per_thread"].values()) > 0

    # --json: groups in part order, each at most k hits, best first, all above the floor
    k = 2
    result = json.loads(ok(run("search", QUESTION, "-k", str(k), "--json", *store, cwd=tmp_path)).stdout)
    assert result["message"] == QUESTION
    groups = result["groups"]
    assert [g["part_index"] for g in groups] == list(range(len(groups))) and len(groups) == 2
    for g in groups:
        assert 0 < len(g["hits"]) <= k
        scores = [h["score"] for h in g["hits"]]  # the ranking score: cosine, or fused with hybrid search
        assert scores == sorted(scores, reverse=True)
        for h in g["hits"]:
            assert set(h) >= {"id", "score", "scores", "header", "text", "metadata"}
            assert h["score"] == h["scores"][result["score_scale"]] and "cosine" in h["scores"]
            # the floor holds for dense hits; hybrid search keeps a BM25 match whatever its cosine
            assert h["scores"]["cosine"] >= result["cosine_floor"] or "bm25" in h["scores"]
            assert h["text"].startswith(h["header"])
    hotel, cats = groups
    assert "hotel" in hotel["part"] and "cats" in cats["part"]
    assert any("HTL-58213-LX" in h["text"] for h in hotel["hits"])
    assert any("Miso" in h["text"] for h in cats["hits"])

    # text output: "Part N: part" then "  fused 0.944 cos  0.612  [header]  snippet" (hybrid, the default)
    text = ok(run("search", QUESTION, "-k", "1", "--thread", "pets", *store, cwd=tmp_path)).stdout
    lines = text.splitlines()
    assert lines[0].startswith("Part 1: What is the confirmation code")
    assert any(line.startswith("Part 2: Also, what were my cats called") for line in lines)
    hit_lines = [line for line in lines if line.startswith("  ") and "[" in line]
    assert hit_lines and all(line.split()[0] == "fused" and line.split()[2] == "cos" for line in hit_lines)
    assert all(0.0 <= float(line.split()[1]) <= 1.0 and float(line.split()[3]) <= 1.0 for line in hit_lines)
    dense = ok(run("search", QUESTION, "-k", "1", "--no-lexical", *store, cwd=tmp_path)).stdout
    dense_lines = [line for line in dense.splitlines() if line.startswith("  ") and "[" in line]
    assert dense_lines and all(float(line.split()[0]) <= 1.0 for line in dense_lines)
    assert "Miso" in text and "HTL-58213-LX" not in text  # --thread pets scopes the search

    # the stored config is reused and the rebuild keeps every piece
    ok(run("reindex", *store, cwd=tmp_path))
    assert stats(tmp_path, *store)["pieces"] == before["pieces"]

    out = ok(run("delete", "--thread", "travel", *store, cwd=tmp_path)).stdout
    assert f"deleted {before['pieces_per_thread']['travel']} piece(s)" in out
    after = stats(tmp_path, *store)
    assert after["pieces"] == before["pieces"] - before["pieces_per_thread"]["travel"]
    assert "travel" not in after["pieces_per_thread"]


def test_default_store_is_dot_ctxret_and_env_overrides(tmp_path, files):
    ok(run("index", str(files["messages"]), cwd=tmp_path))
    assert (tmp_path / ".ctxret").is_dir()
    assert stats(tmp_path)["pieces_per_thread"].keys() == {"travel-log"}  # message-per-line file: thread = file name

    env = _env(CTXRET_STORE=str(tmp_path / "elsewhere"), CTXRET_COLLECTION="notes")
    ok(run("index", str(files["doc"]), "--thread", "ops", cwd=tmp_path, env=env))
    moved = stats(tmp_path, env=env)
    assert moved["collection"] == "notes" and moved["pieces_per_thread"].keys() == {"ops"}
    assert Path(moved["store"]).resolve() == (tmp_path / "elsewhere").resolve()


def test_indexing_an_edited_file_again_replaces_its_changed_parts(tmp_path, files):
    store = ("--store", str(tmp_path / "s"))
    ok(run("index", str(files["doc"]), str(files["threads"]), *store, cwd=tmp_path))
    before = stats(tmp_path, *store)
    again = ok(run("index", str(files["doc"]), *store, cwd=tmp_path)).stdout
    assert "0 piece(s) added" in again and stats(tmp_path, *store) == before
    files["doc"].write_text(RUNBOOK.replace("Tomasz covers Thursday", "Ana covers Thursday"), encoding="utf-8")
    write_jsonl(files["threads"], [{"thread_id": "pets", "messages": PETS[:2]}])
    out = ok(run("index", str(files["doc"]), str(files["threads"]), *store, cwd=tmp_path)).stdout
    assert "1 replaced" in out
    after = stats(tmp_path, *store)
    assert after["pieces_per_thread"]["runbook.md"] == before["pieces_per_thread"]["runbook.md"]
    # a thread file that lost turns keeps the stored ones (indexing never deletes unseen turns)
    assert after["pieces_per_thread"]["pets"] == before["pieces_per_thread"]["pets"]


def test_reindex_with_new_weight_and_mismatch_message(tmp_path, files):
    store = ("--store", str(tmp_path / "s"))
    ok(run("index", str(files["messages"]), *store, cwd=tmp_path))
    n = stats(tmp_path, *store)["pieces"]
    refused = run("search", "hotel", "--weight", "0.9", *store, cwd=tmp_path)
    assert refused.returncode == 1
    assert "weight" in refused.stderr and "ctxret reindex" in refused.stderr
    ok(run("reindex", "--weight", "0.9", *store, cwd=tmp_path))
    after = stats(tmp_path, *store)
    assert after["config"]["weight"] == 0.9 and after["pieces"] == n
    ok(run("search", "hotel", *store, cwd=tmp_path))  # the collection's weight is taken when none is given


def test_message_from_stdin_and_no_split(tmp_path, files):
    store = ("--store", str(tmp_path / "s"))
    ok(run("index", str(files["threads"]), *store, cwd=tmp_path))
    out = json.loads(ok(run("search", "-", "--json", *store, cwd=tmp_path, stdin=QUESTION + "\n")).stdout)
    assert len(out["groups"]) == 2
    single = json.loads(
        ok(
            run(
                "search",
                QUESTION,
                "--no-split",
                "-k",
                "3",
                "--threshold",
                "none",
                "--json",
                *store,
                cwd=tmp_path,
            )
        ).stdout
    )
    assert len(single["groups"]) == 1 and single["groups"][0]["part"] == QUESTION
    assert len(single["groups"][0]["hits"]) == 3 and single["cosine_floor"] is None


# -- bad input ----------------------------------------------------------------------------------
def test_bad_jsonl_line_is_reported_and_nothing_is_written(tmp_path, files):
    store = ("--store", str(tmp_path / "s"))
    ok(run("index", str(files["doc"]), *store, cwd=tmp_path))
    before = stats(tmp_path, *store)

    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps(PETS[0]) + "\n" + json.dumps(PETS[1]) + "\n" + '{"role": "user", "content": "cut off\n',
        encoding="utf-8",
    )
    proc = run("index", str(files["messages"]), str(bad), *store, cwd=tmp_path)
    assert proc.returncode == 1
    assert f"{bad}:3: invalid JSON" in proc.stderr
    assert "nothing was written" in proc.stderr
    assert stats(tmp_path, *store) == before  # neither the bad file nor the good one beside it


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"role": "user", "content": "hi there, fine"}\n{"role": "robot", "content": "x"}\n',
            ":2: unknown role 'robot'",
        ),
        (
            '{"role": "user", "content": "hi", "timestamp": "last week"}\n',
            ":1: timestamp: cannot read 'last week'",
        ),
        ("[1, 2]\n", ":1: expected a JSON object, got list"),
        (
            '{"thread_id": "a", "messages": []}\n{"role": "user", "content": "x"}\n',
            ":2: the file started with thread objects",
        ),
        (
            '{"messages": [{"role": "user", "content": "x"}]}\n',
            ":1: the thread object needs a non-empty string 'thread_id'",
        ),
        (
            '{"thread_id": "t1", "messages": [{"role": "user", "content": "a"}, '
            '{"role": "user", "content": "b", '
            '"timestamp": "soon"}]}\n',
            ":1: thread 't1', message 1.timestamp: cannot read 'soon'",
        ),
        ('{"role": "user", "content": "caf\xe9"}\n', ":1: not valid UTF-8"),
    ],
    ids=["role", "timestamp", "not-object", "mixed", "no-thread-id", "thread-message", "encoding"],
)
def test_bad_file_names_file_and_line(tmp_path, content, expected):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(content.encode("latin-1") if "\xe9" in content else content.encode("utf-8"))
    proc = run("index", str(bad), "--store", str(tmp_path / "s"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {bad}{expected}"), proc.stderr
    assert not (tmp_path / "s").exists()  # the store was not even opened


@pytest.mark.parametrize(
    "args",
    [
        ["bogus"],
        [],
        ["index", "notes.pdf"],
        ["index"],
        ["search", "x", "-k", "0"],
        ["search", "x", "--threshold", "high"],
        ["search", "x", "--store", "a", "--chroma-host", "localhost"],
        ["stats", "--dims", "256"],
        ["delete"],
    ],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_usage_errors_exit_2(tmp_path, args):
    (tmp_path / "notes.pdf").write_bytes(b"%PDF-1.4")
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "error" in proc.stderr
    assert not (tmp_path / ".ctxret").exists()


def test_bad_environment_value_exits_2(tmp_path):
    proc = run("stats", cwd=tmp_path, env=_env(CTXRET_CHROMA_HOST="localhost", CTXRET_CHROMA_PORT="eighty"))
    assert proc.returncode == 2 and "CTXRET_CHROMA_PORT='eighty' is not a port number" in proc.stderr


def test_errors_exit_1(tmp_path):
    missing_store = run("search", "anything", "--store", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing_store.returncode == 1 and "no index at" in missing_store.stderr
    (tmp_path / "empty-store").mkdir()
    empty = run("stats", "--store", str(tmp_path / "empty-store"), cwd=tmp_path)
    assert empty.returncode == 1 and "the folder holds no ctxret store" in empty.stderr
    ok(run("index", str(_write(tmp_path / "a.md", "# A\nSome text.")), "--store", str(tmp_path / "s"), cwd=tmp_path))
    no_collection = run("stats", "--store", str(tmp_path / "s"), "--collection", "typo", cwd=tmp_path)
    assert no_collection.returncode == 1 and "no collection 'typo'" in no_collection.stderr
    missing_file = run("index", str(tmp_path / "absent.jsonl"), cwd=tmp_path)
    assert missing_file.returncode == 1 and "absent.jsonl: no such file" in missing_file.stderr
    no_key = run(
        "index",
        str(_write(tmp_path / "n.md", "# Notes\nSome text.")),
        "--embedder",
        "openai",
        cwd=tmp_path,
    )
    assert no_key.returncode == 1 and "OPENAI_API_KEY" in no_key.stderr


def test_help_and_version(tmp_path):
    assert "index" in ok(run("--help", cwd=tmp_path)).stdout
    assert ok(run("--version", cwd=tmp_path)).stdout.startswith("ctxret ")


@pytest.mark.slow
def test_python_m_ctxret_and_the_console_script_as_processes(tmp_path, files):
    """The smoke test of the real processes: ``python -m ctxret`` and the ``ctxret`` script, their exit codes."""
    assert ok(run_subprocess("--version", cwd=tmp_path)).stdout.startswith("ctxret ")
    store = ("--store", str(tmp_path / "s"))
    ok(run_subprocess("index", str(files["threads"]), *store, cwd=tmp_path))
    found = json.loads(ok(run_subprocess("search", QUESTION, "--json", *store, cwd=tmp_path)).stdout)
    assert any("HTL-58213-LX" in h["text"] for h in found["groups"][0]["hits"])
    usage = run_subprocess("search", "x", "-k", "0", *store, cwd=tmp_path)
    assert usage.returncode == 2 and "error" in usage.stderr
    missing = run_subprocess("search", "x", "--store", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 1 and "no index at" in missing.stderr
    script = Path(sys.executable).with_name("ctxret")
    if script.exists():  # the console script installed with the package
        assert ok(run_subprocess("--version", cwd=tmp_path, executable=[str(script)])).stdout.startswith("ctxret ")
        assert run_subprocess("bogus", cwd=tmp_path, executable=[str(script)]).returncode == 2


# -- other stores and embedders -----------------------------------------------------------------
@pytest.mark.slow  # a Chroma server
def test_chroma_server_by_flags_and_env(tmp_path, files, chroma_server):
    server = (
        "--chroma-host",
        chroma_server.host,
        "--chroma-port",
        str(chroma_server.port),
        "--collection",
        "cli-test",
    )
    ok(run("index", str(files["threads"]), *server, cwd=tmp_path))
    env = _env(
        CTXRET_CHROMA_HOST=chroma_server.host,
        CTXRET_CHROMA_PORT=str(chroma_server.port),
        CTXRET_COLLECTION="cli-test",
    )
    result = json.loads(ok(run("search", QUESTION, "--json", cwd=tmp_path, env=env)).stdout)
    assert any("Miso" in h["text"] for h in result["groups"][1]["hits"])
    assert stats(tmp_path, env=env)["store"].startswith("http://")
    assert not (tmp_path / ".ctxret").exists()
    assert result["score_scale"] == "cosine"  # a server gets no lexical index by default
    # --lexical-path gives a server deployment its BM25 half (filled from the server's texts on open)
    lex = str(tmp_path / "lexical.sqlite3")
    hybrid = json.loads(ok(run("search", QUESTION, "--json", "--lexical-path", lex, cwd=tmp_path, env=env)).stdout)
    assert hybrid["score_scale"] == "fused" and (tmp_path / "lexical.sqlite3").exists()
    assert any("Miso" in h["text"] for h in hybrid["groups"][1]["hits"])
    assert all("bm25" in h["scores"] for g in hybrid["groups"] for h in g["hits"])


def test_openai_embedder_through_env(tmp_path, files, fake_openai):
    secret = "sk-test-not-a-real-key-4242"
    env = _env(
        OPENAI_API_KEY=secret,
        OPENAI_BASE_URL=fake_openai.url,
        CTXRET_EMBEDDER="openai",
        CTXRET_DIMS="256",
    )
    store = ("--store", str(tmp_path / "s"))
    out = ok(run("index", str(files["threads"]), *store, cwd=tmp_path, env=env))
    found = ok(run("search", QUESTION, "--json", *store, cwd=tmp_path, env=env))
    info = stats(tmp_path, *store, env=env)
    assert info["config"]["dims"] == 256 and "text-embedding-3-small" in info["config"]["model_id"]
    assert any("HTL-58213-LX" in h["text"] for h in json.loads(found.stdout)["groups"][0]["hits"])
    assert fake_openai.requests and all(r.dimensions == 256 for r in fake_openai.requests)
    for proc in (out, found):
        assert secret not in proc.stdout + proc.stderr
    # the local model cannot search an OpenAI-built collection: a clear error, not a wrong answer
    wrong = run("search", "hotel", *store, cwd=tmp_path)
    assert wrong.returncode == 1 and "model_id" in wrong.stderr


# -- the demo -------------------------------------------------------------------------------------
@pytest.mark.slow  # the whole demo with the real model; its parts are checked below on one shared index
def test_demo_prints_groups_next_to_the_single_vector(tmp_path):
    started = time.monotonic()
    proc = ok(run("demo", cwd=tmp_path, env=_env(CTXRET_STORE=str(tmp_path / "must-not-be-used"))))
    elapsed = time.monotonic() - started
    out = proc.stdout
    queries = json.loads(cli_demo.demo_files()[1].read_text(encoding="utf-8"))
    assert out.count("-- per-part groups") == len(queries)
    assert out.count("-- one whole-message vector") == len(queries)
    dogs = out.split("Part 8: What were my dogs' names again?")[1].split("--")[0].splitlines()[1:]
    assert dogs and "[Turn 2 · User" in dogs[0]  # the dogs' own part brings back the turn that names them
    assert out.count("=> ") == len(queries)
    assert not (tmp_path / "must-not-be-used").exists() and not (tmp_path / ".ctxret").exists()
    assert proc.stderr == ""  # quiet: no progress bars, no warnings on the bundled samples
    assert elapsed < 240, f"the demo took {elapsed:.0f}s"


# -- settings resolution (in process, no model) ---------------------------------------------------
def _args(**flags) -> argparse.Namespace:
    return argparse.Namespace(**flags)


def test_settings_flag_beats_env_beats_default():
    env = {"CTXRET_STORE": "/from/env", "CTXRET_WEIGHT": "0.7", "CTXRET_COLLECTION": "envcol"}
    assert cli.resolve_settings(_args(), {}) == cli.Settings(
        store=None,
        collection="ctxret",
        chroma_host=None,
        chroma_port=8000,
        embedder="local",
        model=cli_settings.DEFAULT_OPENAI_MODEL,
        dims=None,
        weight=None,
    )
    s = cli.resolve_settings(_args(), env)
    assert (s.store, s.weight, s.collection) == ("/from/env", 0.7, "envcol")
    s = cli.resolve_settings(_args(store="/flag", weight="0.95"), env)
    assert (s.store, s.weight) == ("/flag", 0.95)
    # a server flag beats a store variable
    s = cli.resolve_settings(_args(chroma_host="db", chroma_port="9000"), env)
    assert (s.store, s.chroma_host, s.chroma_port) == (None, "db", 9000)
    s = cli.resolve_settings(_args(embedder="openai", dims="512"), {"CTXRET_OPENAI_MODEL": "text-embedding-3-large"})
    assert (s.embedder, s.dims, s.model) == ("openai", 512, "text-embedding-3-large")
    # CTXRET_DIMS is ignored by the local embedder (it may be set for OpenAI runs); --dims is not
    assert cli.resolve_settings(_args(), {"CTXRET_DIMS": "256"}).dims is None


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        (
            {},
            {"CTXRET_STORE": "a", "CTXRET_CHROMA_HOST": "b"},
            "both CTXRET_STORE and CTXRET_CHROMA_HOST",
        ),
        ({"chroma_port": "80"}, {}, "--chroma-port needs --chroma-host"),
        ({}, {"CTXRET_CHROMA_HOST": "h", "CTXRET_CHROMA_PORT": "99999"}, "not a port number"),
        ({}, {"CTXRET_EMBEDDER": "bert"}, "choose 'local' or 'openai'"),
        ({"weight": "1.5"}, {}, "the weight is between 0 and 1"),
        ({}, {"CTXRET_WEIGHT": "heavy"}, "CTXRET_WEIGHT='heavy'"),
        ({"embedder": "openai", "dims": "-3"}, {}, "dimensions must be positive"),
        ({"model": "text-embedding-3-large"}, {}, "--model applies to --embedder openai"),
    ],
)
def test_settings_errors_are_usage_errors(flags, env, message):
    with pytest.raises(cli.UsageError, match=message):
        cli.resolve_settings(_args(**flags), env)


def test_main_returns_exit_codes_in_process(capsys):
    assert cli.main(["--version"]) == 0
    assert cli.main(["nope"]) == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.fixture(scope="module")
def demo_index(local_embedder):
    """The demo's bundled threads indexed once with the real model (in memory), for the demo's unit tests."""
    from ctxret import ContextualIndex

    index = ContextualIndex(in_memory=True, collection="demo-unit", embedder=local_embedder, progress=False)
    try:
        index.add_turns(cli.read_input_file(cli_demo.demo_files()[0]).turns)
        yield index
    finally:
        index.close()


def test_demo_names_where_the_expected_facts_are(demo_index, capsys):
    """With ``expect`` in a demo message, snippets show the fact and one line says where it is."""
    index = demo_index
    queries = cli_demo.demo_files()[1]
    query = next(q for q in json.loads(queries.read_text(encoding="utf-8")) if "dogs' names" in q["message"])
    cli_demo._demo_query(index, {**query, "expect": ["Biscuit"]}, 1, 1, 2, index.cosine_floor)
    out = capsys.readouterr().out
    dogs = out.split("Part 8:")[1].splitlines()[1]
    assert "Biscuit" in dogs and "…" in dogs  # the snippet jumps to the fact
    verdict = [line for line in out.splitlines() if line.startswith("=> ")]
    assert verdict == [verdict[0]] and "'Biscuit': groups yes (Part 8, #1) | single vector " in verdict[0]
    # what the note says is what the output shows: the single vector finds it too, below the deploy.sh turns
    rank = int(re.search(r"single vector yes \(#(\d+) of", verdict[0]).group(1))
    single = out.split("-- one whole-message vector")[1].splitlines()[1:rank]
    assert rank > 1 and all("[Turn 4 · " in line for line in single), single  # turn 4: the deploy.sh turn
    assert "Biscuit and Pepper first" in query["note"] and "ranks the deploy.sh turns above it" in query["note"]
    assert "Seed" not in queries.read_text(encoding="utf-8")


def test_the_demo_control_notes_the_hits_it_shows(demo_index, capsys):
    index = demo_index
    queries = cli_demo.demo_files()[1]
    query = next(q for q in json.loads(queries.read_text(encoding="utf-8")) if "dentist" in q["message"])
    cli_demo._demo_query(index, query, 1, 1, 2, index.cosine_floor)
    out = capsys.readouterr().out
    groups = out.split("-- per-part groups")[1].split("-- one whole-message vector")
    hits = [line for line in groups[0].splitlines() if re.match(r"\s+\d\.\d{3}\s", line)]
    single = [line for line in groups[1].splitlines() if re.match(r"\s+\d\.\d{3}\s", line)]
    assert hits == single and len(hits) == 2  # the same hits both ways
    assert "[Turn 7 · " in hits[0] and "Riverside Dent" in hits[1]  # the move, then the booking it moved
    assert "moved the dentist appointment, and the Riverside Dental booking" in query["note"]


def test_a_failure_while_writing_says_what_is_stored_and_how_to_finish(tmp_path, files, monkeypatch, capsys):
    """An embedding failure in the second write batch: the batch before it stays stored (whole turns), the
    message says how many turns that is, and running the same command again finishes the job."""
    from ctxret.embedders.local import LocalEmbedder
    from ctxret.errors import EmbeddingError
    from ctxret.ingest import writer

    real = LocalEmbedder.embed_late
    calls = []
    monkeypatch.setattr(writer, "WRITE_BATCH_PIECES", 1)  # a batch per turn (a document's sections: one), so the
    # failure comes mid-way

    def flaky(self, turns, **options):
        calls.append(len(turns))
        if len(calls) == 2:
            raise EmbeddingError("the embedding service failed (HTTP 503 after 5 retries)")
        return real(self, turns, **options)

    monkeypatch.setattr(LocalEmbedder, "embed_late", flaky)
    monkeypatch.chdir(tmp_path)
    for name in cli.ENV.values():
        monkeypatch.delenv(name, raising=False)
    store = str(tmp_path / "s")
    code = cli.main(["index", str(files["messages"]), str(files["doc"]), "--store", store])
    err = capsys.readouterr().err
    assert code == 1
    assert "HTTP 503" in err and "run the same command again" in err
    stored, total = map(int, re.search(r"stopped after (\d+) of (\d+) turns were stored", err).groups())
    monkeypatch.setattr(LocalEmbedder, "embed_late", real)
    assert cli.main(["stats", "--json", "--store", store]) == 0
    assert 0 < json.loads(capsys.readouterr().out)["turns"] == stored < total
    assert cli.main(["index", str(files["messages"]), str(files["doc"]), "--store", store]) == 0
    capsys.readouterr()
    assert cli.main(["stats", "--json", "--store", store]) == 0
    after = json.loads(capsys.readouterr().out)
    assert after["turns"] == total and len(after["pieces_per_thread"]) == 2


def test_two_files_naming_one_thread_are_appended_in_order(tmp_path, files, monkeypatch, capsys):
    """``--thread`` over two message files puts both in one thread: the second file's turns follow the first's (as
    sessions written one file each), and indexing them again adds nothing."""
    other = write_jsonl(tmp_path / "pets-log.jsonl", PETS)
    monkeypatch.chdir(tmp_path)
    for name in cli.ENV.values():
        monkeypatch.delenv(name, raising=False)
    store = str(tmp_path / "s")
    assert cli.main(["index", str(files["messages"]), str(other), "--thread", "trip", "--store", store]) == 0
    capsys.readouterr()
    assert cli.main(["stats", "--json", "--store", store]) == 0
    first = json.loads(capsys.readouterr().out)
    assert set(first["pieces_per_thread"]) == {"trip"}
    from ctxret import ContextualIndex
    from ctxret.ingest.messages import turns_from_messages

    n1 = len(turns_from_messages([json.loads(x) for x in files["messages"].read_text().splitlines() if x], "t"))
    n2 = len(turns_from_messages(PETS, "t"))
    assert first["turns"] == n1 + n2
    assert cli.main(["index", str(files["messages"]), str(other), "--thread", "trip", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "0 piece(s) added" in out and "message(s) already stored" in out
    with ContextualIndex(store) as index:
        pets = [r["metadata"]["turn_index"] for r in index.store.records() if "Miso" in r["metadata"]["body"]]
    assert pets and min(pets) > n1  # the second file's turns come after the first's


def test_the_demo_says_where_an_expected_fact_is_when_its_groups_miss_it(demo_index, capsys):
    """The ops-agent message's EORI row is one line of an 80-row tool result: at k=2 the verdict says how deep
    it is (it used to print a bare NO, against the note's promise)."""
    index = demo_index
    queries = cli_demo.demo_files()[1]
    query = next(q for q in json.loads(queries.read_text(encoding="utf-8")) if "EORI" in q.get("expect", []))
    cli_demo._demo_query(index, query, 1, 1, 2, index.cosine_floor)
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("=> "))
    assert "'EORI': groups NO" not in verdict
    assert re.search(r"'EORI': groups not in the top 2 \(Part \d #\d+ at k=10\)", verdict), verdict
    assert "'Priya Raman': groups yes" in verdict
    assert "larger -k" in query["note"] and "--parents" in query["note"]
