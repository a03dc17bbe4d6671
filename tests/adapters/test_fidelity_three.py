"""The frameworks' habits, round three: a chat history gives back each message exactly as added (as LangChain's own
histories do), documents read from files are named by their file in headers, and ``dir()`` lists lazy names."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from ctxret import ContextualIndex  # noqa: E402
from ctxret.embedders.hashing import HashEmbedder  # noqa: E402
from ctxret.text import clean_text  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402

from langchain_ctxret import CtxretChatMessageHistory  # noqa: E402

#: What people paste into a chat: code, indented JSON, tables, blank lines, trailing newlines, tabs, double spaces.
GIVEN = [
    HumanMessage("My dog is  Biscuit.\n\nHe is 4.\n"),
    AIMessage("", tool_calls=[{"name": "lookup", "args": {"q": "vet"}, "id": "c1"}]),
    ToolMessage(
        json.dumps({"vets": [{"name": "Green Paws", "open": ["Mon", "Thu"]}]}, indent=2) + "\nResult: cached\n",
        tool_call_id="c1",
    ),
    AIMessage("  Green Paws:\tMon, Thu.\n\n| day | hours |\n|-----|-------|\n| Mon | 9-5   |\n"),
    HumanMessage("```python\ndef f(x):\n    return  x * 2\n```"),
]


def test_history_gives_back_each_message_exactly_as_added():
    history = CtxretChatMessageHistory(ContextualIndex(in_memory=True, embedder=HashEmbedder()), "u1")
    history.add_messages(GIVEN)
    back = history.messages
    assert [type(m) for m in back] == [type(m) for m in GIVEN]
    assert [m.content for m in back] == [m.content for m in GIVEN]  # whitespace, newlines and tabs as given
    assert back[1].tool_calls[0]["args"] == {"q": "vet"}


def test_what_is_embedded_is_unchanged_and_the_patch_is_never_shown(local_embedder):
    from langchain_ctxret import ContextualRetriever

    index = ContextualIndex(in_memory=True, embedder=local_embedder)
    CtxretChatMessageHistory(index, "u1").add_messages(GIVEN)
    stored = list(index.store.chroma.iter_records(None, include=("documents", "metadatas")))
    assert any(r["metadata"].get("exact_patch") for r in stored)  # kept beside the pieces
    assert all("  " not in r["document"] and "\t" not in r["document"] for r in stored)  # packed, as before
    docs = ContextualRetriever(index=index, thread_id="u1", score_threshold=None).invoke("Which vet is open?")
    assert docs and all(not any("exact_patch" in k for k in d.metadata) for d in docs)


def test_a_store_written_before_reads_its_packed_text(monkeypatch):
    import ctxret.ingest.pieces as pieces

    monkeypatch.setattr(pieces, "_exact", lambda turn, ps: ps)  # what the earlier writer stored: no patch
    history = CtxretChatMessageHistory(ContextualIndex(in_memory=True, embedder=HashEmbedder()), "u1")
    history.add_messages(GIVEN[:1])
    assert [m.content for m in history.messages] == ["My dog is Biscuit.\nHe is 4."]  # best effort: as packed


_TEXT = st.text(
    alphabet=st.one_of(st.characters(blacklist_categories=("Cs",)), st.sampled_from(" \n\t\r\u00a0")), max_size=300
)


# a message with nothing left once control characters are cleaned is skipped with a warning (nothing to store)
@given(st.lists(_TEXT.filter(lambda t: clean_text(t).strip() and "\x00" not in t), min_size=1, max_size=3))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_any_text_comes_back_byte_for_byte(texts):
    history = CtxretChatMessageHistory(ContextualIndex(in_memory=True, embedder=HashEmbedder()), "u1")
    sent = [HumanMessage(t) if i % 2 == 0 else AIMessage(t) for i, t in enumerate(texts)]
    history.add_messages(sent)
    assert [m.content for m in history.messages] == texts


# -- documents read from files --------------------------------------------------------------------------------
def test_documents_read_from_files_are_named_by_their_file(tmp_path, local_embedder):
    from ctxret.adapters import document_id
    from llama_index.core import SimpleDirectoryReader

    from llamaindex_ctxret import ContextualStoreIndex

    (tmp_path / "runbook.md").write_text("# Rollback\nRun deploy.sh --rollback, then purge the CDN.\n")
    (tmp_path / "pets.md").write_text("# Vet\nBiscuit's vaccinations are on Thursday.\n")
    docs = SimpleDirectoryReader(str(tmp_path)).load_data()
    texts = {d.metadata["file_name"]: d.text for d in docs}
    store = ContextualStoreIndex(ContextualIndex(in_memory=True, embedder=local_embedder))
    store.insert_documents(docs, show_progress=False)
    node = store.as_retriever(similarity_top_k=1).retrieve("How do I roll back a deploy?")[0].node
    assert node.metadata["ctxret:header"] == "[runbook.md · Rollback]"  # was [doc-… · Rollback]
    assert node.text.startswith("[runbook.md · Rollback]\n") and node.metadata["file_name"] == "runbook.md"
    assert node.ref_doc_id == document_id(texts["runbook.md"], None)  # the document keeps the id it always had
    again = store.insert_documents(SimpleDirectoryReader(str(tmp_path)).load_data(), show_progress=False)
    assert again.added == 0 and store.index.store.count() == 2  # read again: the same pieces, nothing twice
    by_path = SimpleDirectoryReader(str(tmp_path), filename_as_id=True).load_data()  # the path is the id
    other = ContextualStoreIndex(ContextualIndex(in_memory=True, embedder=local_embedder))
    other.insert_documents(by_path, show_progress=False)
    node = other.as_retriever(similarity_top_k=1).retrieve("When are Biscuit's vaccinations?")[0].node
    assert node.metadata["ctxret:header"] == "[pets.md · Vet]" and node.ref_doc_id.endswith("pets.md")  # not the path
