"""``ctxret search --parents`` and ``--deadline-ms``: the CLI reaches the core's parents and recall deadline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# `ctxret search` as a process (the console entry, the real model per call): the full suite's; the flags are
# checked in-process by test_cli_search_options.py in the fast loop.
pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

THREAD = [
    {"role": "user", "content": "Book a hotel in Lisbon from the 15th to the 18th, somewhere quiet in Alfama please."},
    {
        "role": "assistant",
        "content": "Booked Casa do Miradouro in Alfama; confirmation code HTL-58213-LX. "
        "Breakfast is included and check-in opens at 14:00.",
    },
]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXRET_", "OPENAI_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8", COLUMNS="120")
    proc = subprocess.run(
        [sys.executable, "-m", "ctxret", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[Path, list[str]]:
    root = tmp_path_factory.mktemp("cli-flags")
    path = root / "lisbon.jsonl"
    path.write_text(json.dumps({"thread_id": "trip", "messages": THREAD}) + "\n", encoding="utf-8")
    args = ["--store", str(root / "store")]
    proc = _run("index", str(path), *args, cwd=root)
    assert proc.returncode == 0, proc.stderr
    return root, args


def test_parents_attach_the_whole_turn(store):
    root, args = store
    plain = json.loads(_run("search", "hotel confirmation code", "-k", "1", "--json", *args, cwd=root).stdout)
    with_parents = json.loads(
        _run("search", "hotel confirmation code", "-k", "1", "--json", "--parents", *args, cwd=root).stdout
    )
    assert "parent_text" not in plain["groups"][0]["hits"][0]
    hit = with_parents["groups"][0]["hits"][0]
    assert "HTL-58213-LX" in hit["parent_text"] and "check-in opens at 14:00" in hit["parent_text"]
    assert "parents" in with_parents["groups"][0]["stages"]
    text = _run("search", "hotel confirmation code", "-k", "1", "--parents", *args, cwd=root).stdout
    assert "parent: " in text


def test_deadline_reports_what_ran(store):
    root, args = store
    out = json.loads(
        _run("search", "hotel confirmation code", "--json", "--deadline-ms", "60000", *args, cwd=root).stdout
    )
    group = out["groups"][0]
    assert group["degraded"] is False and group["skipped"] == []
    assert group["stages"][:3] == ["embed", "dense", "lexical"]
    bad = _run("search", "hotel", "--deadline-ms", "0", *args, cwd=root)
    assert bad.returncode != 0 and "positive number" in bad.stderr


def test_now_since_until_reach_the_core(tmp_path):
    # two stamped turns a week apart: --now makes "yesterday" the second, --since/--until pick by time
    thread = [
        {"role": "user", "content": "The locker code is 4411.", "timestamp": "2024-02-22T10:00:00"},
        {"role": "user", "content": "The locker code is 9033.", "timestamp": "2024-02-29T10:00:00"},
    ]
    path = tmp_path / "codes.jsonl"
    path.write_text(json.dumps({"thread_id": "gym", "messages": thread}) + "\n", encoding="utf-8")
    args = ["--store", str(tmp_path / "store")]
    assert _run("index", str(path), *args, cwd=tmp_path).returncode == 0
    q = "What was the locker code yesterday?"
    out = json.loads(
        _run("search", q, "--json", "--thread", "gym", "--now", "2024-03-01T12:00", *args, cwd=tmp_path).stdout
    )
    group = out["groups"][0]
    assert [h["text"] for h in group["hits"]] == ["The locker code is 9033."] or all(
        "9033" in h["text"] for h in group["hits"]
    )
    assert group["window"][0].startswith("2024-02-28")
    out = json.loads(
        _run(
            "search", "locker code", "--json", "--since", "2024-02-20", "--until", "2024-02-23", *args, cwd=tmp_path
        ).stdout
    )
    assert [h["text"] for h in out["groups"][0]["hits"]] and all("4411" in h["text"] for h in out["groups"][0]["hits"])
    bad = _run("search", "locker code", "--since", "soon", *args, cwd=tmp_path)
    assert bad.returncode != 0 and "since" in bad.stderr
