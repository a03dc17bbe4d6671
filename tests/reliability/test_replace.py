"""A document re-added under its id replaces the stored one whole, through every entry point.

The defect: the writer compared turn by turn, so re-adding an edited document whose last section was
deleted reported it ``unchanged`` and kept the deleted section searchable ("The admin password is in
Vault ..."). Now the sections a document no longer has are removed, in the core, both adapters and
the CLI, and ``replace=False`` keeps the old behaviour for who asks for it. Threads keep their rule:
the turns a call gives replace their stored versions, the others are kept.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from ctxret import ContextualIndex, cli
from ctxret.ingest import document_turns

from .hash_embedder import HashEmbedder

SECRET = "The admin password is in Vault under ops/admin."
V1 = (
    "# Runbook\n\n## Deploys\nDeploy with make ship on a green build.\n\n"
    "## Rollback\nRoll back with make undo and page the on-call.\n\n"
    f"## Access\n{SECRET}\n"
)
V2 = (
    "# Runbook\n\n## Deploys\nDeploy with make ship on a green build.\n\n"
    "## Rollback\nRoll back with make undo and page the on-call.\n"
)


def make_index(tmp_path: Path, **kwargs) -> ContextualIndex:
    kwargs.setdefault("embedder", HashEmbedder())
    return ContextualIndex(tmp_path / f"store-{uuid.uuid4().hex[:6]}", **kwargs)


def stored_texts(index: ContextualIndex) -> list[str]:
    return sorted(r["document"] for r in index.store.records(("documents",)))


def found(index: ContextualIndex, text: str, **kwargs) -> bool:
    """Whether any search (unscoped, through the lexical file too, and thread-scoped) returns ``text``."""
    scopes = [None, *(kwargs.pop("threads", []))]
    for thread in scopes:
        groups = index.search("admin password Vault ops", k=10, score_threshold=None, thread_id=thread)
        if any(text in h.text for g in groups for h in g.hits):
            return True
    return False


def test_core_add_documents_removes_the_sections_a_document_lost(tmp_path):
    index = make_index(tmp_path)
    index.add_documents({"id": "runbook.md", "text": V1})
    assert found(index, SECRET, threads=["runbook.md"])
    again = index.add_documents({"id": "runbook.md", "text": V2})
    assert again.replaced >= 1 and again.added == 0, again  # before: unchanged, nothing replaced
    assert not any("admin password" in t for t in stored_texts(index))
    assert not found(index, SECRET, threads=["runbook.md"])
    assert index.store.lexical is not None and index.store.lexical.count() == index.store.count()
    index.close()


def test_replace_false_adds_sections_and_keeps_the_others(tmp_path):
    index = make_index(tmp_path)
    index.add_documents({"id": "runbook.md", "text": V1})
    before = index.store.count()
    kept = index.add_documents({"id": "runbook.md", "text": V2}, replace=False)
    assert kept.replaced == 0 and index.store.count() == before and found(index, SECRET)
    with pytest.raises(Exception, match="replace must be True or False"):
        index.add_documents({"id": "runbook.md", "text": V2}, replace="no")
    index.close()


def test_an_emptied_document_is_removed_and_other_threads_keep_theirs(tmp_path):
    index = make_index(tmp_path)
    index.add_documents({"id": "notes.md", "text": V1}, thread_id="alice")
    index.add_documents({"id": "notes.md", "text": V1}, thread_id="bob")
    n = index.store.count()
    gone = index.add_documents({"id": "notes.md", "text": ""}, thread_id="bob")
    assert gone.replaced == n // 2 and index.store.count() == n // 2
    assert {r["metadata"]["thread_id"] for r in index.store.records()} == {"alice"}  # the same id in alice stays
    index.close()


def test_add_turns_with_section_turns_replaces_the_document(tmp_path):
    index = make_index(tmp_path)
    index.add_turns(document_turns(V1, doc_id="runbook.md"))
    index.add_turns(document_turns(V2, doc_id="runbook.md"))
    assert not any("admin password" in t for t in stored_texts(index))
    index.close()


def test_threads_keep_turns_a_call_does_not_give(tmp_path):
    index = make_index(tmp_path)
    chat = [{"role": "user", "content": f"note {i}: {w}"} for i, w in enumerate(["alpha", "bravo", "charlie"])]
    index.add_messages(chat, thread_id="t")
    index.add_messages(chat[:2], thread_id="t", first_turn=1)  # a shorter slice: the third turn is kept
    assert any("charlie" in t for t in stored_texts(index))
    edited = index.add_messages([{"role": "user", "content": "note 1: bravo, edited"}], thread_id="t", first_turn=2)
    assert edited.replaced == 1 and sum("bravo" in t for t in stored_texts(index)) == 1
    index.close()


def test_llamaindex_insert_refresh_and_from_documents_replace_whole(tmp_path):
    from llama_index.core import Document

    from llamaindex_ctxret import ContextualStoreIndex

    index = make_index(tmp_path)
    store = ContextualStoreIndex(index)
    assert store.insert(Document(text=V1, id_="runbook.md")) == "runbook.md"
    assert found(index, SECRET)
    store.insert(Document(text=V2, id_="runbook.md"))
    assert not found(index, SECRET)
    store.insert_documents([Document(text=V1, id_="runbook.md")])
    assert found(index, SECRET)
    assert store.refresh_ref_docs([Document(text=V2, id_="runbook.md"), Document(text="Other doc.", id_="o.md")]) == [
        True,
        True,
    ]
    assert not found(index, SECRET)
    assert store.refresh_ref_docs([Document(text=V2, id_="runbook.md")]) == [False]  # nothing changed
    again = ContextualStoreIndex.from_documents([Document(text=V1, id_="runbook.md")], index=index)
    assert found(again.index, SECRET)
    ContextualStoreIndex.from_documents([Document(text=V2, id_="runbook.md")], index=index)
    assert not found(index, SECRET)
    index.close()


def test_langchain_retriever_and_vector_store_replace_whole(tmp_path):
    from langchain_core.documents import Document

    from langchain_ctxret import ContextualRetriever, ContextualVectorStore

    index = make_index(tmp_path)
    retriever = ContextualRetriever(index=index)
    retriever.add_documents([Document(page_content=V1, id="runbook.md")])
    assert found(index, SECRET)
    retriever.add_documents([Document(page_content=V2, id="runbook.md")])
    assert not found(index, SECRET)
    vectors = ContextualVectorStore(index)
    vectors.add_documents([Document(page_content=V1, id="runbook.md", metadata={"team": "ops"})])
    assert found(index, SECRET)
    vectors.add_documents([Document(page_content=V2, id="runbook.md", metadata={"team": "ops"})])
    assert not found(index, SECRET)
    vectors.add_documents([Document(page_content=V2, id="runbook.md", metadata={"team": "sre"})])
    assert {r["metadata"]["team"] for r in index.store.records()} == {"sre"}  # metadata rewritten, as before
    index.close()


def test_cli_index_of_an_edited_file_and_prune_of_a_gone_one(tmp_path, capsys):
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "runbook.md").write_text(V1, encoding="utf-8")
    (docs / "sub" / "faq.md").write_text("# FAQ\n\nAsk in #help.\n", encoding="utf-8")
    (docs / "sub" / "old.md").write_text("# Old\n\nThe legacy cluster is called Ravel.\n", encoding="utf-8")
    store = tmp_path / "store"
    base = ["--store", str(store), "index"]
    assert cli.main([*base, str(docs)]) == 0
    (docs / "runbook.md").write_text(V2, encoding="utf-8")
    capsys.readouterr()
    assert cli.main([*base, str(docs)]) == 0
    assert re.search(r"[1-9][0-9]* replaced", capsys.readouterr().out)  # before: 0 replaced, the section kept
    index = ContextualIndex(store)
    assert not any("admin password" in t for t in stored_texts(index))
    index.close()
    (docs / "sub" / "old.md").unlink()
    assert cli.main([*base, "--prune", "--dry-run", str(docs)]) == 0
    out = capsys.readouterr().out
    assert "sub/old.md" in out and "dry run" in out
    index = ContextualIndex(store)
    assert any("Ravel" in t for t in stored_texts(index))  # a dry run writes nothing
    index.close()
    assert cli.main([*base, "--prune", str(docs)]) == 0
    pruned = [line for line in capsys.readouterr().out.splitlines() if "prune" in line]
    assert pruned and all("sub/old.md" in line and "runbook.md" not in line for line in pruned), pruned
    index = ContextualIndex(store)
    texts = stored_texts(index)
    assert not any("Ravel" in t for t in texts) and any("#help" in t for t in texts)
    index.close()
