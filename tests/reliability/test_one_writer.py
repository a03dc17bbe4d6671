"""One process per embedded store folder: a second process is refused cleanly, never corrupts the first."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ctxret import ContextualIndex, InputError, StoreError

from reliability.bow_embedder import SmallEmbedder

pytestmark = pytest.mark.slow

OPEN_AND_WRITE = textwrap.dedent(
    """
    import sys
    from ctxret import ContextualIndex, StoreError
    try:
        index = ContextualIndex(sys.argv[1])
    except StoreError as e:
        print("REFUSED:", e)
        raise SystemExit(3)
    index.add_messages([{"role": "user", "content": "written by the second process"}], thread_id="second")
    print("WROTE")
    """
)


def second_process(store) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OPEN_AND_WRITE, str(store)], capture_output=True, text=True, timeout=300
    )


def test_second_process_is_refused_with_the_holder_and_the_fix(tmp_path, local_embedder):
    store = tmp_path / "store"
    index = ContextualIndex(store, embedder=local_embedder)
    index.add_messages([{"role": "user", "content": "the first process owns this folder"}], thread_id="first")
    before = sorted(r["id"] for r in index.store.records(include=()))
    proc = second_process(store)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "in use by process" in proc.stdout and "chroma run" in proc.stdout and "Traceback" not in proc.stderr
    # the first process is untouched and keeps working
    assert sorted(r["id"] for r in index.store.records(include=())) == before
    assert index.search("who owns this folder?", k=1)[0].hits
    index.close()
    # once the first process lets go, the second opens the folder
    after = second_process(store)
    assert after.returncode == 0 and "WROTE" in after.stdout, after.stderr


def test_one_process_may_open_a_folder_several_times(tmp_path, local_embedder):
    one = ContextualIndex(tmp_path / "s", embedder=local_embedder)
    two = ContextualIndex(tmp_path / "s", embedder=local_embedder)  # same process: shares the lock
    one.add_messages([{"role": "user", "content": "shared inside one process"}], thread_id="t")
    assert two.store.count() == one.store.count() > 0
    one.close()
    assert second_process(tmp_path / "s").returncode == 3  # `two` still holds the folder
    two.close()
    assert second_process(tmp_path / "s").returncode == 0


def test_two_cli_index_runs_on_a_new_folder(tmp_path):
    """Two `ctxret index` at once on a new folder: one writes, the other stops with a clear error."""
    data = tmp_path / "t.jsonl"
    data.write_text('{"role": "user", "content": "hello from a file"}\n', encoding="utf-8")
    cmd = [sys.executable, "-m", "ctxret", "index", str(data), "--store", str(tmp_path / "new")]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    errors = "".join(err for _, err in outs)
    assert "Traceback" not in errors, errors
    assert codes[0] == 0 and codes[1] in (0, 1), (codes, errors)  # both may succeed one after the other
    if codes[1] == 1:
        assert "in use by" in errors
    with ContextualIndex(tmp_path / "new") as index:
        assert index.store.count() >= 1


def test_store_error_is_a_ctxret_error():
    from ctxret import CtxretError

    assert issubclass(StoreError, CtxretError)


# -- every way to a folder, and waiting for it ---------------------------------------------------------------
HOLDER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    from bow_embedder import SmallEmbedder
    from ctxret import ContextualIndex
    index = ContextualIndex(sys.argv[1], embedder=SmallEmbedder())
    index.add_messages([{"role": "user", "content": "the holder wrote this"}], thread_id="holder")
    print("HOLDING", flush=True)
    sys.stdin.readline()  # holds the folder until the test says so
    index.close()
    print("RELEASED", flush=True)
    """
)
#: A second process that writes the folder through the way named in argv[3], with lock_timeout argv[4].
WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[2])
    import chromadb
    from bow_embedder import SmallEmbedder
    from ctxret import ContextualIndex, StoreError
    folder, way, wait = sys.argv[1], sys.argv[3], float(sys.argv[4])
    try:
        if way == "client":
            client = chromadb.PersistentClient(folder)
            index = ContextualIndex(client=client, embedder=SmallEmbedder(), lock_timeout=wait)
        elif way == "langchain":
            from langchain_ctxret import ContextualRetriever
            index = ContextualRetriever.from_path(folder, embedder=SmallEmbedder(), lock_timeout=wait).index
        elif way == "llamaindex":
            from llamaindex_ctxret import ContextualRetriever
            index = ContextualRetriever.from_path(folder, embed_model=SmallEmbedder(), lock_timeout=wait).index
        else:
            index = ContextualIndex(folder, embedder=SmallEmbedder(), lock_timeout=wait)
    except StoreError as e:
        print("REFUSED:", e)
        raise SystemExit(3)
    index.add_messages([{"role": "user", "content": "written by the second process"}], thread_id="second")
    print("WROTE")
    """
)
HERE = str(Path(__file__).parent)


@contextlib.contextmanager
def holder(store: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding ``store`` until the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(store), HERE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "HOLDING"
        yield proc
    finally:
        if proc.poll() is None:
            proc.communicate("go\n", timeout=120)


def writer(store: Path, way: str, wait: float = 0.0, **kwargs: Any) -> Any:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(store), HERE, way, str(wait)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def stored_threads(store: Path) -> set[str]:
    with ContextualIndex(store, embedder=SmallEmbedder()) as index:
        return {str(r["metadata"]["thread_id"]) for r in index.store.records()}


@pytest.mark.parametrize("way", ["client", "langchain", "llamaindex", "path"])
def test_every_way_to_a_held_folder_is_refused_with_the_fix(tmp_path, way):
    """``client=chromadb.PersistentClient(folder)`` used to write while another process held the folder."""
    store = tmp_path / "store"
    with holder(store):
        out, err = writer(store, way).communicate(timeout=300)
        assert out.startswith("REFUSED:") and "in use by process" in out, out + err
        assert "lock_timeout" in out and "--wait" in out  # the message names the way to wait
    assert stored_threads(store) == {"holder"}  # nothing of the second process's went in


@pytest.mark.parametrize("way", ["client", "langchain", "llamaindex"])
def test_lock_timeout_reaches_the_lock_from_every_way(tmp_path, way):
    store = tmp_path / "store"
    with holder(store):
        out, err = writer(store, way, wait=0.3).communicate(timeout=300)
    assert out.startswith("REFUSED:") and "(waited 0.3 s)" in out, out + err
    assert "waiting for it (up to 0.3 s)" in err  # it said it was waiting


@pytest.mark.parametrize("way", ["path", "client"])
def test_a_waiting_process_gets_the_folder_when_the_holder_lets_go(tmp_path, way):
    store = tmp_path / "store"
    with holder(store) as held:
        second = writer(store, way, wait=300)
        assert second.stderr is not None
        assert "waiting for it (up to 300 s)" in second.stderr.readline()  # blocked on the lock now
        held.communicate("go\n", timeout=120)  # the holder closes its index
        out, err = second.communicate(timeout=300)
    assert second.returncode == 0 and "WROTE" in out, out + err
    assert stored_threads(store) == {"holder", "second"}


def test_cli_wait(tmp_path):
    store = tmp_path / "store"
    data = tmp_path / "t.jsonl"
    data.write_text('{"role": "user", "content": "indexed once the folder is free"}\n', encoding="utf-8")
    cmd = [sys.executable, "-m", "ctxret", "index", str(data), "--store", str(store), "--collection", "cli"]
    with holder(store) as held:
        refused = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 1 and "in use by" in refused.stderr and "--wait" in refused.stderr
        waiting = subprocess.Popen([*cmd, "--wait", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert waiting.stderr is not None and "waiting for it" in waiting.stderr.readline()
        held.communicate("go\n", timeout=120)
        out, err = waiting.communicate(timeout=300)
    assert waiting.returncode == 0, out + err
    bad = subprocess.run([*cmd, "--wait", "soon"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--wait='soon'" in bad.stderr


def test_one_process_shares_its_hold_between_a_path_and_a_persistent_client(tmp_path):
    import chromadb

    store = tmp_path / "store"
    one = ContextualIndex(store, embedder=SmallEmbedder())
    # Chroma refuses a second client of a folder with other settings in one process: ctxret's turn telemetry off
    client = chromadb.PersistentClient(str(store), settings=chromadb.config.Settings(anonymized_telemetry=False))
    two = ContextualIndex(client=client, embedder=SmallEmbedder())
    one.close()
    assert writer(store, "path").communicate(timeout=300)[0].startswith("REFUSED:")  # `two` holds it still
    two.close()
    assert "WROTE" in writer(store, "path").communicate(timeout=300)[0]


@pytest.mark.parametrize("bad", [-1, float("nan"), "5", True])
def test_a_bad_lock_timeout_is_refused(tmp_path, bad):
    with pytest.raises(InputError, match="lock_timeout must be a number of seconds >= 0"):
        ContextualIndex(tmp_path / "s", embedder=SmallEmbedder(), lock_timeout=bad)
