"""A Chroma server killed in the middle of indexing: a StoreError naming the fix, and nothing lost after a restart."""

from __future__ import annotations

import threading
import time

import pytest
from ctxret import ContextualIndex, StoreError

pytestmark = pytest.mark.slow


def _thread(n: int) -> list[dict[str, str]]:
    out = []
    for i in range(n):
        out += [
            {"role": "user", "content": f"Question {i}: where did we leave deployment {i}?"},
            {
                "role": "assistant",
                "content": f"Deployment {i} is paused at step {i % 7}; the rollback plan is in doc {i}.",
            },
        ]
    return out


def test_server_killed_mid_index_then_restarted(tmp_path, local_embedder):
    from chroma_server import run_chroma

    data = tmp_path / "data"
    with run_chroma(data) as server:
        index = ContextualIndex(host=server.host, port=server.port, collection="killed", embedder=local_embedder)
        index.add_messages(_thread(3), thread_id="before")
        kept = sorted(r["id"] for r in index.store.records(include=()))
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for i in range(2000):  # many small writes: the kill lands in the middle of one
                    index.add_messages(_thread(2 + i % 3), thread_id=f"during-{i}")
            except BaseException as e:  # noqa: BLE001  # what the caller sees is the point
                errors.append(e)

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(1.5)
        server.proc.kill()
        writer.join(timeout=300)
    assert errors and isinstance(errors[0], StoreError), errors
    message = str(errors[0])
    assert "chroma run" in message and str(server.port) in message
    with pytest.raises(StoreError, match="Chroma"):
        index.search("deployment", k=1)
    # restart on the same folder: everything written before is there, the write can be redone
    with run_chroma(data) as again:
        reopened = ContextualIndex(host=again.host, port=again.port, collection="killed", embedder=local_embedder)
        ids = {r["id"] for r in reopened.store.records(include=())}
        assert set(kept) <= ids
        reopened.add_messages(_thread(3), thread_id="before")  # unchanged: nothing to do, nothing duplicated
        assert {r["id"] for r in reopened.store.records(include=())} == ids
