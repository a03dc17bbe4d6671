"""Kill -9 at every named step of a write, a delete and a rebuild; reopening loses nothing.

For each step of ``ctxret._faults.POINTS`` a subprocess runs the operation with
``CTXRET_FAULT_AT`` set and dies there (SIGKILL: no cleanup, no finally). Then the store is
reopened (which finishes or undoes an interrupted write, repairs the lexical index, or finishes an
interrupted rebuild) and must be consistent — Chroma and the lexical index hold the same ids, no
rebuild leftovers, and every turn (and the document the write replaces) holds exactly one version:
the old one or the new one, never both, never a mix; a write of one batch is all there or not at
all — and running the operation again must end exactly where an uninterrupted run ends: same ids,
nothing lost, duplicated or stale.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from ctxret._faults import POINTS

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("faults_worker.py")
OPERATION_OF = {point: point.split(":")[0] for point in POINTS}
OPERATION_OF.update({p: "rebuild" for p in POINTS if p.startswith("swap:")})


def run(store: Path, op: str, fault: str | None = None, *, lexical: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "CTXRET_TEST_LEXICAL": "1" if lexical else "0"}
    env.pop("CTXRET_FAULT_AT", None)
    if fault is not None:
        env["CTXRET_FAULT_AT"] = fault
    return subprocess.run(
        [sys.executable, str(WORKER), str(store), op], env=env, capture_output=True, text=True, timeout=300
    )


def state(store: Path, *, lexical: bool = True) -> dict:
    proc = run(store, "check", lexical=lexical)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mixed(after: dict, old: dict, new: dict) -> list[str]:
    """The turns (``thread/turn`` -> ids) that hold neither their old version alone nor their new one
    (a turn absent from a version is that version's: it may be absent)."""
    return sorted(t for t in set(after) | set(old) | set(new) if after.get(t) not in (old.get(t), new.get(t)))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, dict]:
    """Where each operation ends when nothing interrupts it."""
    out = {}
    for op in ("write", "delete", "rebuild", "append"):
        store = tmp_path_factory.mktemp(f"ref-{op}") / "store"
        assert run(store, "setup").returncode == 0
        done = run(store, op)
        assert done.returncode == 0, done.stderr
        out[op] = state(store)
    return out


@pytest.mark.parametrize("point", POINTS)
def test_kill_at_each_step_then_reopen_and_redo(point, tmp_path, reference):
    op = OPERATION_OF[point]
    store = tmp_path / "store"
    setup = run(store, "setup")
    assert setup.returncode == 0, setup.stderr
    before = state(store)
    killed = run(store, op, fault=point)
    assert killed.returncode == -signal.SIGKILL, (
        f"{point}: the operation did not reach its step ({killed.stderr[-500:]})"
    )
    after = state(store)  # reopening repairs / finishes
    assert after["chroma"] == after["lexical"], f"{point}: Chroma and the lexical index differ after reopening"
    assert after["pending"] is False
    assert after["copy_differs"] == [], f"{point}: the lexical file's copy differs from Chroma after reopening"
    assert not [c for c in after["collections"] if c.endswith(("-rebuild", "-previous"))], after["collections"]
    if op == "rebuild":  # either the old collection or the new one, never a mix, never a loss
        assert after["chroma"] in (before["chroma"], reference["rebuild"]["chroma"])
        assert after["weight"] in (before["weight"], 0.7)
    else:  # one write (or delete) of one batch: all of it or none of it, every turn in one version
        assert after["turns"] in (before["turns"], reference[op]["turns"]), (
            f"{point}: turns {mixed(after['turns'], before['turns'], reference[op]['turns'])} hold neither the old "
            "version alone nor the new one"
        )
    assert len(after["chroma"]) == len(set(after["chroma"]))
    redo = run(store, op)
    assert redo.returncode == 0, redo.stderr
    final = state(store)
    assert final == reference[op], f"{point}: redoing the operation did not end where an uninterrupted run ends"


@pytest.mark.parametrize("point", ["write:between-upserts", "write:after-upsert", "delete:between-chunks"])
def test_a_store_without_a_lexical_file_is_repaired_from_its_journal(point, tmp_path, reference):
    """``lexical=False``: the announcements live in a journal file beside Chroma's, and a killed write is
    finished or undone on open all the same."""
    op = OPERATION_OF[point]
    store = tmp_path / "store"
    assert run(store, "setup", lexical=False).returncode == 0
    before = state(store, lexical=False)
    killed = run(store, op, fault=point, lexical=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-500:]
    after = state(store, lexical=False)
    assert after["lexical"] is None and (store / "ctxret-journal-ctxret.sqlite3").exists()
    assert after["turns"] in (before["turns"], reference[op]["turns"]), (
        f"{point}: turns {mixed(after['turns'], before['turns'], reference[op]['turns'])} hold two versions"
    )


@pytest.mark.parametrize("point", [p for p in POINTS if p.startswith("write:")])
def test_kill_during_an_append_leaves_the_thread_as_before_or_as_after(point, tmp_path, reference):
    """An append that continues the thread's last turn and adds a new one (one call): killed at each step of its
    write, the reopened thread holds its turns exactly as before or exactly as after, and sending the same call
    again ends where an uninterrupted append ends (its messages carry ids: nothing is added twice)."""
    store = tmp_path / "store"
    assert run(store, "setup").returncode == 0
    before = state(store)
    killed = run(store, "append", fault=point)
    assert killed.returncode == -signal.SIGKILL, f"{point}: the append did not reach its step ({killed.stderr[-500:]})"
    after = state(store)
    assert after["chroma"] == after["lexical"] and after["pending"] is False and after["copy_differs"] == []
    assert after["turns"] in (before["turns"], reference["append"]["turns"]), (
        f"{point}: turns {mixed(after['turns'], before['turns'], reference['append']['turns'])} hold neither the "
        "old version alone nor the new one"
    )
    redo = run(store, "append")
    assert redo.returncode == 0, redo.stderr
    assert state(store) == reference["append"]
