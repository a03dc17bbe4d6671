"""Memory you can trust: no writer but the item store writes an item, a chat scope never reads one, and a write whose
text is unchanged but whose metadata (or item value) changed is stored.

Every writer (the core's messages, documents and turns, LangChain's vector store, LlamaIndex's writer and node
parser, the CLI) is sent the item fields an attacker would forge (``item_ns_0``, ``item_value``, ...): the item
store (LangGraph's ``CtxretStore``) never returns them, ``delete`` has nothing to remove, and no other caller gets an
error. A store written before items had their own threads (its item pieces in the namespace's thread, a broken one
among them) still reads, its items are left out of chat scopes, and a reindex moves them.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

import chromadb
import pytest
from ctxret import ContextualIndex, InputError, Store
from ctxret.agent_memory import AgentMemory
from ctxret.ingest import turns_from_messages
from ctxret.items import ItemStore
from langchain_core.documents import Document
from llama_index.core import Document as LIDocument

from langchain_ctxret import ContextualVectorStore, CtxretStore
from llamaindex_ctxret import ContextualIndexWriter, ContextualNodeParser, add_documents_to_index
from reliability.hash_embedder import HashEmbedder

NS = ("users", "alice")
T_FORGED = "2099-01-01T00:00:00+00:00"
#: Every field an item's pieces carry, for ("users", "alice") / "pin": what a forger writes as metadata.
FORGED = {
    "item_id": json.dumps([*NS, "pin"]),
    "item_key": "pin",
    "item_namespace": json.dumps(list(NS)),
    "item_depth": 2,
    "item_ns_0": "users",
    "item_ns_1": "alice",
    "item_value": json.dumps({"pin": "0000", "note": "forged"}),
    "item_created_at": T_FORGED,
    "item_updated_at": T_FORGED,
    "item_indexed": True,
}
#: Half an item: what made list_namespaces() and prefix searches raise for every caller.
HALF = {"item_depth": 1, "item_ns_0": "users"}


@pytest.fixture
def index(tmp_path):
    ix = ContextualIndex(Store.embedded(tmp_path / "memory"), embedder=HashEmbedder())
    yield ix
    ix.close()


def _forge_through_every_writer(ix: ContextualIndex, tmp_path) -> None:
    forged_text = "the pin of alice is 0000"
    ix.add_messages([{"role": "user", "content": forged_text}], thread_id="chat", metadata=FORGED)
    ix.add_messages([{"role": "user", "content": "half an item"}], thread_id="chat-half", metadata=HALF)
    ix.add_messages([{"role": "user", "content": forged_text}], thread_id="chat-n", first_turn=3, metadata=FORGED)
    ix.add_turns(turns_from_messages([{"role": "user", "content": forged_text}], "turns"), metadata=FORGED)
    # a document stored where the namespace's thread was, under the item's key, with every field
    ix.add_documents([{"id": "pin", "text": forged_text, "metadata": FORGED}], thread_id="users.alice")
    ix.add_documents([{"id": "half", "text": "half an item", "metadata": HALF}])
    ContextualVectorStore(index=ix).add_texts([forged_text], metadatas=[FORGED], ids=["lc-pin"])
    ContextualVectorStore(index=ix).add_documents([Document(forged_text, metadata=HALF)], ids=["lc-half"])
    add_documents_to_index(ix, [LIDocument(text=forged_text, metadata=FORGED, id_="li-pin")])
    ContextualIndexWriter(ix)([LIDocument(text=forged_text, metadata=HALF, id_="li-half")])
    nodes = ContextualNodeParser(index=ix).get_nodes_from_documents([LIDocument(text=forged_text, metadata=FORGED)])
    assert nodes and ContextualIndexWriter(ix)(nodes)  # parsed, then written: the caller's keys, not an item


def test_no_writer_but_the_item_store_writes_an_item(index, tmp_path, caplog):
    store = CtxretStore(index)
    _forge_through_every_writer(index, tmp_path)
    assert store.get(NS, "pin") is None
    assert store.search(NS) == [] and store.search(("users",)) == [] and store.search(()) == []
    assert store.search(("users",), query="what is the pin of alice") == []
    assert store.list_namespaces() == [] and store.list_namespaces(prefix=("users",)) == []
    store.put(NS, "pin", {"pin": "4321"})
    assert store.get(NS, "pin").value == {"pin": "4321"}
    assert [it.value for it in store.search(("users",), query="pin of alice")] == [{"pin": "4321"}]
    assert store.list_namespaces() == [NS]
    store.delete(NS, "pin")
    assert store.get(NS, "pin") is None and store.search(()) == [] and store.list_namespaces() == []
    # the forged fields are the callers' own keys, by the names they gave, on their own pieces
    hits = index.search("the pin of alice", thread_id="chat", k=1, where={"item_key": "pin"})
    assert hits[0].hits and hits[0].hits[0].metadata["item_key"] == "pin"
    assert index.search("the pin of alice", k=3, where={"item_ns_1": "alice"})[0].hits  # a filter on the caller's name
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and "item" in r.getMessage()]
    # no writer may write into an item namespace's thread
    for write in (
        lambda: index.add_messages([{"role": "user", "content": "x"}], thread_id="ctxret:items:users.alice"),
        lambda: index.add_documents([{"id": "pin", "text": "x"}], thread_id="ctxret:items:users.alice"),
        lambda: index.add_turns(turns_from_messages([{"role": "user", "content": "x"}], "ctxret:items:users.alice")),
        lambda: ContextualVectorStore(index=index).add_texts(["x"], thread_id="ctxret:items:users.alice"),
    ):
        with pytest.raises(InputError, match="ctxret:items:"):
            write()


def test_a_chat_scope_never_reads_an_item_namespace(index):
    CtxretStore(index).put(("memories", "alice"), "bank", {"text": "Alice's bank PIN is 4321"})
    memory = AgentMemory(index, max_chars=2_000)
    recall = memory.recall([{"role": "user", "content": "What is Alice's bank PIN?"}], "memories.alice")
    assert recall.text == ""  # was: the item's value, recalled into a chat
    assert not index.search("bank PIN", thread_id="memories.alice", k=3, score_threshold=None)[0].hits
    memory.write([{"role": "user", "content": "My bank is Nordbank."}], "memories.alice")  # a chat of that name
    assert "4321" not in memory.recall([{"role": "user", "content": "Which bank? PIN?"}], "memories.alice").text
    assert CtxretStore(index).get(("memories", "alice"), "bank").value == {"text": "Alice's bank PIN is 4321"}
    with pytest.raises(InputError, match="ctxret:items:"):
        memory.write([{"role": "user", "content": "x"}], "ctxret:items:memories.alice")


# -- a store written before items had their own threads ----------------------------------------------------------
def _as_written_before(folder, collection: str = "ctxret") -> None:
    """Rewrite the store's item pieces the way earlier versions stored them: in the namespace's plain thread, kind
    ``section``, the item fields listed as caller keys; and add one piece with half an item's fields."""
    client = chromadb.PersistentClient(str(folder), settings=chromadb.config.Settings(anonymized_telemetry=False))
    col = client.get_collection(collection)
    got = col.get(where={"item_depth": {"$gte": 1}}, include=["metadatas", "documents", "embeddings"])
    assert got["ids"]
    metas = []
    for meta in got["metadatas"]:
        meta = dict(meta)
        ns = json.loads(meta["item_namespace"])
        old_thread = ".".join(ns)
        key = meta["doc_id"]
        fields = sorted(k for k in meta if k.startswith("item_"))
        meta.update(thread_id=old_thread, kind="section", caller_keys=",".join(fields))
        meta.update(turn_id=f"{key}#1", parent_id=f"{key}#1")
        metas.append(meta)
    col.delete(ids=got["ids"])
    col.add(
        ids=[f"old-{i}" for i in got["ids"]], embeddings=got["embeddings"], documents=got["documents"], metadatas=metas
    )
    half = {k: v for k, v in metas[0].items() if not k.startswith("item_")} | {**HALF, "item_value": "{broken"}
    half.update(thread_id="notes", kind="turn", caller_keys="item_depth,item_ns_0,item_value")
    col.add(ids=["old-half"], embeddings=[got["embeddings"][0]], documents=["half"], metadatas=[half])


def test_a_store_written_before_still_reads_and_moves_its_items(tmp_path, caplog):
    folder = tmp_path / "old"
    with ContextualIndex(Store.embedded(folder), embedder=HashEmbedder()) as ix:
        store = CtxretStore(ix)
        store.put(("memories", "alice"), "bank", {"text": "Alice's bank PIN is 4321"})
        store.put(("memories", "alice"), "pet", {"text": "Alice has a cat called Miso"})
        ix.add_messages([{"role": "user", "content": "Alice asked about her bank"}], thread_id="memories.alice")
    _as_written_before(folder)
    with ContextualIndex(Store.embedded(folder), embedder=HashEmbedder()) as ix:
        store = CtxretStore(ix)
        with caplog.at_level(logging.WARNING):
            assert store.list_namespaces() == [("memories", "alice")]  # the broken piece left out, with a warning
        assert any("left out" in r.getMessage() for r in caplog.records)
        assert store.get(("memories", "alice"), "bank").value == {"text": "Alice's bank PIN is 4321"}
        assert [it.key for it in store.search(("memories",))] == ["bank", "pet"]
        # the chat scope of the same name reads its chat, never the old items
        hits = ix.search("Alice bank PIN", thread_id="memories.alice", k=5, score_threshold=None)[0].hits
        assert hits and all(h.metadata["ctxret:kind"] == "turn" for h in hits)
        # a put moves the item to its own thread (its old copy goes)
        store.put(("memories", "alice"), "bank", {"text": "Alice's bank PIN is 9876"})
        assert store.get(("memories", "alice"), "bank").value == {"text": "Alice's bank PIN is 9876"}
        bank = [r["metadata"] for r in ix.store.records() if r["metadata"].get("item_key") == "bank"]
        assert bank and {m["thread_id"] for m in bank} == {"ctxret:items:memories.alice"}
        ix.reindex()  # moves the rest
        threads = {r["metadata"]["thread_id"] for r in ix.store.records() if "item_id" in r["metadata"]}
        assert threads == {"ctxret:items:memories.alice"}
        assert [it.key for it in store.search(("memories",))] == ["bank", "pet"]
        assert store.get(("memories", "alice"), "pet").value == {"text": "Alice has a cat called Miso"}


# -- updates are never dropped ------------------------------------------------------------------------------------
def test_an_item_put_again_in_the_same_minute_is_stored(index):
    store = ItemStore(index)
    at = datetime(2026, 3, 1, 9, 0, 0, tzinfo=timezone.utc)
    from ctxret.items import ItemWrite

    store.write([ItemWrite(NS, "pin", {"pin": "1111", "text": "the pin"}, [("text", "the pin")])], now=at)
    # the indexed text is the same, the value and time are not (the header shows the minute only)
    result = store.write(
        [ItemWrite(NS, "pin", {"pin": "2222", "text": "the pin"}, [("text", "the pin")])], now=at.replace(second=30)
    )
    assert result.turns_changed == 1 and result.unchanged == 0  # was: IndexResult(unchanged=1), the value dropped
    (item,) = store.read([(NS, "pin")])
    assert item is not None and item.value["pin"] == "2222" and item.updated_at == at.replace(second=30)
    found = store.search(NS, "the pin")
    assert [it.value["pin"] for it in found] == ["2222"]
    assert CtxretStore(index).get(NS, "pin").value["pin"] == "2222"


def test_a_document_added_again_with_new_metadata_is_stored(index):
    doc = {"id": "policy", "title": "Leave", "text": "Staff get 30 days of paid leave a year."}
    index.add_documents([{**doc, "metadata": {"owner": "hr", "v": 1}}])
    result = index.add_documents([{**doc, "metadata": {"owner": "legal", "v": 2}}])
    assert result.added == 1 and result.unchanged == 0 and result.turns_changed == 1
    hit = index.search("paid leave", k=1)[0].hits[0]
    assert hit.metadata["owner"] == "legal" and hit.metadata["v"] == 2
    index.add_documents([{**doc, "metadata": {"owner": "legal"}}])  # a key removed is removed
    assert "v" not in index.search("paid leave", k=1)[0].hits[0].metadata
    again = index.add_documents([{**doc, "metadata": {"owner": "legal"}}])
    assert again.unchanged == 1 and again.turns_changed == 0  # and the same write again costs nothing
    # LangChain's vector store: the same text under its id, new metadata
    vs = ContextualVectorStore(index=index)
    vs.add_texts(["Lisbon hosts the offsite."], metadatas=[{"status": "draft"}], ids=["offsite"])
    vs.add_texts(["Lisbon hosts the offsite."], metadatas=[{"status": "final"}], ids=["offsite"])
    assert [d.metadata["status"] for d in vs.get_by_ids(["offsite"])] == ["final"]


def test_messages_written_again_with_new_metadata_are_stored(index):
    chat = [{"role": "user", "content": "The offsite is in Lisbon."}, {"role": "assistant", "content": "Noted."}]
    index.add_messages(chat, thread_id="t", metadata={"status": "draft"})
    for write in (
        lambda: index.add_messages(chat, thread_id="t", first_turn=1, metadata={"status": "final"}),
        lambda: index.replace_messages(chat, thread_id="t", metadata={"status": "checked"}),
        lambda: index.add_turns(turns_from_messages(chat, "t"), metadata={"status": "turns"}),
    ):
        result = write()
        assert result.turns_changed == 1 and result.unchanged == 0
    metas = [r["metadata"] for r in index.store.records() if r["metadata"]["thread_id"] == "t"]
    assert len(metas) == 2 and {m["status"] for m in metas} == {"turns"}


def test_the_cli_writes_no_item(tmp_path, local_embedder):
    from cli_inprocess import run_cli

    chat = [{"role": "user", "content": "the pin of alice is 0000"}, {"role": "assistant", "content": "noted"}]
    (tmp_path / "chats.jsonl").write_text(json.dumps({"thread_id": "users.alice", "messages": chat}) + "\n")
    (tmp_path / "forged.jsonl").write_text(json.dumps({"thread_id": "ctxret:items:users.alice", "messages": chat}))
    store = str(tmp_path / "store")
    assert run_cli("index", "chats.jsonl", "--store", store, cwd=tmp_path).returncode == 0
    proc = run_cli("index", "forged.jsonl", "--store", store, cwd=tmp_path)
    assert proc.returncode != 0 and "ctxret:items:" in proc.stderr and "Traceback" not in proc.stderr
    with ContextualIndex(Store.embedded(store), embedder=local_embedder) as ix:
        items = CtxretStore(ix)
        assert items.search(()) == [] and items.list_namespaces() == [] and items.get(NS, "pin") is None
        assert {r["metadata"]["thread_id"] for r in ix.store.records()} == {"users.alice"}
