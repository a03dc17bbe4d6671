"""Two processes on one Chroma server: what one writes, the other's next search sees — adds, replaced
turns, deletes — through its thread cache and its own lexical file, with nothing stale or duplicated."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import pytest
from ctxret import ContextualIndex

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import sys
    from ctxret import ContextualIndex
    host, port, collection, lexical, op, code = sys.argv[1:7]
    index = ContextualIndex(host=host, port=int(port), collection=collection, lexical_path=lexical)
    messages = [
        {"role": "user", "content": "Which locker did I get at the gym?"},
        {"role": "assistant", "content": f"Your gym locker code is {code}."},
    ]
    if op == "add":
        index.add_messages(messages, thread_id="gym")
    elif op == "replace":  # rewrite turn 2 (the first add made it)
        index.add_messages(messages, thread_id="gym", first_turn=2)
    elif op == "delete":
        index.delete(thread_id="gym")
    index.close()
    """
)


def _hits(index, query, **kw):
    return [h.text for g in index.search(query, k=5, score_threshold=None, **kw) for h in g.hits]


def test_a_write_on_one_host_is_seen_by_the_others_next_search(chroma_server, tmp_path, local_embedder):
    collection = f"hosts-{uuid.uuid4().hex[:8]}"
    here = ContextualIndex(
        host=chroma_server.host,
        port=chroma_server.port,
        collection=collection,
        embedder=local_embedder,
        lexical_path=tmp_path / "here.sqlite3",
    )
    here.add_messages([{"role": "user", "content": "Remember that my dentist is Dr. Alvarez."}], thread_id="gym")
    assert any("Alvarez" in t for t in _hits(here, "dentist", thread_id="gym"))  # the thread is now cached here

    def other(op: str, code: str = "") -> None:
        args = [chroma_server.host, str(chroma_server.port), collection, str(tmp_path / "other.sqlite3"), op, code]
        proc = subprocess.run([sys.executable, "-c", WRITER, *args], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr

    other("add", "5521")  # another process (another host's lexical file) writes
    assert any("5521" in t for t in _hits(here, "gym locker code", thread_id="gym"))  # the cached thread was dropped
    lexical = here.lexical_index.search("locker 5521", 10)
    assert lexical and all(pid in {r["id"] for r in here.store.records(include=())} for pid, _ in lexical)

    other("replace", "7730")  # the same turn, changed: its old pieces are replaced
    texts = _hits(here, "gym locker code", thread_id="gym") + _hits(here, "gym locker code 5521", lexical=True)
    assert any("7730" in t for t in texts) and not any("5521" in t for t in texts)  # nothing stale
    ids = [h.id for g in here.search("gym locker code", k=5, score_threshold=None, thread_id="gym") for h in g.hits]
    assert len(ids) == len(set(ids))  # no duplicate inside a group
    assert here.lexical_index.ids() == {r["id"] for r in here.store.records(include=())}  # no duplicate, no orphan
    held = {
        r["id"]: (r["document"], r["metadata"])
        for r in here.store.chroma.iter_records(None, include=("documents", "metadatas"))
    }
    assert here.lexical_index.copies.stored(list(held)) == held  # the other host's pieces, copied as Chroma holds them
    unscoped = [h for g in here.search("gym locker code", k=5, score_threshold=None) for h in g.hits]
    assert any("7730" in h.text for h in unscoped) and all((h.text, h.stored) == held[h.id] for h in unscoped)

    other("delete")  # the whole thread goes
    assert _hits(here, "gym locker code", thread_id="gym") == []
    assert not here.lexical_index.search("locker 7730 dentist alvarez", 10)


def test_a_change_record_chroma_refuses_is_kept_and_sent_at_the_next_call(chroma_server, tmp_path, local_embedder):
    import chromadb
    from ctxret import StoreError

    collection = f"unsent-{uuid.uuid4().hex[:8]}"
    here = ContextualIndex(
        host=chroma_server.host,
        port=chroma_server.port,
        collection=collection,
        embedder=local_embedder,
        lexical_path=tmp_path / "here.sqlite3",
    )
    here.add_messages([{"role": "user", "content": "My dentist is Dr. Alvarez."}], thread_id="a")
    admin = chromadb.HttpClient(host=chroma_server.host, port=chroma_server.port)
    admin.delete_collection(f"{collection}-changes")  # the log goes away under the writer's cached handle

    with pytest.raises(StoreError, match="the pieces themselves are stored") as failed:
        here.add_messages([{"role": "user", "content": "The gym locker code is 5521."}], thread_id="b")
    assert "next write or search" in str(failed.value)
    assert any("5521" in t for t in _hits(here, "gym locker code", thread_id="b"))  # the data did land

    here.add_messages([{"role": "user", "content": "The boat is called Marigold."}], thread_id="c")
    log = admin.get_collection(f"{collection}-changes").get(include=["documents"])
    threads = sorted(t for doc in log["documents"] for t in __import__("json").loads(doc).get("threads", []))
    assert threads == ["b", "c"]  # the kept record went first (at the search), then the new one; none lost, none twice

    reader = ContextualIndex(
        host=chroma_server.host,
        port=chroma_server.port,
        collection=collection,
        embedder=local_embedder,
        lexical_path=tmp_path / "reader.sqlite3",
    )
    assert any("5521" in t for t in _hits(reader, "gym locker code 5521", lexical=True))
    reader.close()
    here.close()
