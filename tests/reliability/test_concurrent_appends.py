"""Appenders to one thread at once lose and duplicate nothing: threads in one process, and processes sharing a
Chroma server (which claim their turn numbers, ``ctxret.storage.claims``). Turn numbers stay dense, each writer's
exchanges keep the order it sent them, and retries add nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import uuid

import pytest
from ctxret import ContextualIndex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .hash_embedder import HashEmbedder


def exchange(writer: int, n: int) -> list[dict]:
    return [
        {
            "role": "user",
            "content": f"writer {writer} question {n}: status of task {writer}-{n}?",
            "id": f"w{writer}-{n}-q",
        },
        {"role": "assistant", "content": f"task {writer}-{n} is done.", "id": f"w{writer}-{n}-a"},
    ]


def check(index: ContextualIndex, thread: str, sent: dict[int, int]) -> None:
    """Every exchange once, turns 1..n dense, each writer's exchanges in its order."""
    metas = [r["metadata"] for r in index.store.records() if r["metadata"]["thread_id"] == thread]
    questions = [m for m in metas if m["source_kind"] == "user"]
    keys = [m["message_key"] for m in questions]
    assert len(keys) == len(set(keys)) == sum(sent.values())
    assert sorted({m["turn_index"] for m in metas}) == list(range(1, sum(sent.values()) + 1))
    for w in sent:
        mine = sorted(
            (m["turn_index"], int(m["body"].split(":")[0].split()[-1]))
            for m in questions
            if m["body"].startswith(f"writer {w} ")
        )
        assert [n for _, n in mine] == list(range(sent[w]))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plans=st.lists(st.lists(st.integers(1, 3), min_size=1, max_size=5), min_size=2, max_size=3))
def test_threads_appending_to_one_thread_with_retries_lose_and_duplicate_nothing(plans):
    """Each writer sends its exchanges in order, each one 1 to 3 times (retries), all writers at once."""
    index = ContextualIndex(in_memory=True, embedder=HashEmbedder())
    errors: list[BaseException] = []
    start = threading.Barrier(len(plans))

    def writer(w: int, sends: list[int]) -> None:
        try:
            start.wait()
            for n, times in enumerate(sends):
                for _ in range(times):
                    index.add_messages(exchange(w, n), thread_id="shared")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(w, p)) for w, p in enumerate(plans)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    check(index, "shared", {w: len(p) for w, p in enumerate(plans)})


APPENDER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[6])
    from ctxret import ContextualIndex
    from reliability.hash_embedder import HashEmbedder
    from reliability.test_concurrent_appends import exchange
    host, port, collection, writer, n = sys.argv[1:6]
    index = ContextualIndex(host=host, port=int(port), collection=collection, embedder=HashEmbedder())
    for i in range(int(n)):
        index.add_messages(exchange(int(writer), i), thread_id="shared")
        if i % 3 == 0:
            index.add_messages(exchange(int(writer), i), thread_id="shared")  # a retry
    index.close()
    """
)


@pytest.mark.slow
def test_processes_on_a_chroma_server_appending_to_one_thread_lose_and_duplicate_nothing(chroma_server):
    from pathlib import Path

    collection = f"appends-{uuid.uuid4().hex[:8]}"
    tests = str(Path(__file__).resolve().parents[1])
    n = 12
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                APPENDER,
                chroma_server.host,
                str(chroma_server.port),
                collection,
                str(w),
                str(n),
                tests,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    index = ContextualIndex(
        host=chroma_server.host, port=chroma_server.port, collection=collection, embedder=HashEmbedder()
    )
    check(index, "shared", {w: n for w in range(3)})
    assert index.store.claims is not None
    left = list(index.store.backend.iter_records(None, name=index.store.claims.collection()))
    assert [r["metadata"]["kind"] for r in left] == ["head"]  # every claim was released after its write: the
    assert left[0]["metadata"]["head"] == 3 * n  # thread's head record is left, at its last turn
    index.close()
