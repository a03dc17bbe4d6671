"""Kill -9 in the middle of one call that indexes many threads in several write batches.

The call (``faults_worker.py STORE bulk``: five threads, two of them changed, cut into batches of a
few pieces, each batch's store write overlapping the next batch's embedding) is killed at a named
step of its first, second or a later write (``CTXRET_FAULT_AT=<point>#<n>``), or between two Chroma
calls of one write. Reopening (which finishes a write whose new pieces all reached Chroma and undoes
any other) must leave Chroma and the lexical index holding the same ids with no write pending, and
every turn in exactly one version: as it was before the call or as the call writes it, never both,
never a part of either; the batches written before the kill stay written. Running the call again
ends exactly where an uninterrupted run ends.
"""

from __future__ import annotations

import signal

import pytest

from .test_kills import mixed, run, state

pytestmark = pytest.mark.slow

KILLS = (
    "write:before-chroma",
    "write:between-upserts",
    "write:between-upserts#4",
    "write:after-upsert",
    "write:after-upsert#3",
    "write:after-stale-delete#2",
    "write:after-lexical#2",
    "write:before-chroma#5",
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    store = tmp_path_factory.mktemp("ref-bulk") / "store"
    assert run(store, "setup").returncode == 0
    done = run(store, "bulk")
    assert done.returncode == 0, done.stderr
    return state(store)


@pytest.mark.parametrize("point", KILLS)
def test_kill_during_a_bulk_write_leaves_whole_turns(point, tmp_path, reference):
    store = tmp_path / "store"
    assert run(store, "setup").returncode == 0
    before = state(store)
    killed = run(store, "bulk", fault=point)
    assert killed.returncode == -signal.SIGKILL, f"{point}: the call did not reach its step ({killed.stderr[-500:]})"
    after = state(store)
    assert after["chroma"] == after["lexical"], f"{point}: Chroma and the lexical index differ after reopening"
    assert after["pending"] is False
    assert after["copy_differs"] == [], f"{point}: the lexical file's copy differs from Chroma after reopening"
    old, new = before["turns"], reference["turns"]
    assert not mixed(after["turns"], old, new), f"{point}: turns {mixed(after['turns'], old, new)} hold two versions"
    lost = [turn for turn in old if turn not in after["turns"]]  # a replaced turn keeps its old or new pieces
    assert not lost, f"{point}: turns {lost} were lost"
    written = [t for t, ids in after["turns"].items() if ids == new.get(t) and old.get(t) != ids]
    batch = int(point.partition("#")[2] or 1)
    if point.startswith("write:after-lexical") or batch > 2:
        assert written, f"{point}: the batches written before the kill are gone"
    redo = run(store, "bulk")
    assert redo.returncode == 0, redo.stderr
    assert state(store) == reference, f"{point}: redoing the call did not end where an uninterrupted run ends"
