"""Progress on every write path: the switch (``progress=`` / ``show_progress=``, per index and per call), where a bar
shows by default (a terminal, a notebook; never a pipe unless asked), in the core and both adapters. The output is
captured stderr; nothing here is timed."""

from __future__ import annotations

import sys
import types

import pytest
from ctxret import ContextualIndex
from ctxret.errors import InputError
from ctxret.ingest import progress

#: 70 one-piece documents: more than one embedding chunk (64 pieces), so a default bar shows where watched.
DOCS = [f"Parcel {i} left warehouse {i % 7} on route {i % 11} with {i} boxes of tiles." for i in range(70)]
MESSAGES = [
    {"role": "user" if i % 2 == 0 else "assistant", "content": f"Note {i}: parcel {i} goes to dock {i % 5}."}
    for i in range(140)
]


@pytest.fixture
def lines(monkeypatch):
    """Log lines at every step (instead of every few seconds)."""
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)


@pytest.fixture
def make(local_embedder):
    made = []

    def make(**kwargs):
        index = ContextualIndex(in_memory=True, embedder=local_embedder, **kwargs)
        made.append(index)
        return index

    yield make
    for index in made:
        index.close()


def progress_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("indexing: ")]


def assert_reported(err: str, pieces: int) -> None:
    found = progress_lines(err)
    assert found, err
    assert all("pieces/s" in line for line in found)
    assert any("left" in line for line in found[:-1]) or len(found) == 1
    assert f"{pieces:,}/{pieces:,} pieces (100%)" in found[-1] and "done in" in found[-1]


def test_core_calls_report_when_asked_and_stay_quiet_in_a_pipe_by_default(make, capsys, lines):
    index = make()
    result = index.add_documents(DOCS, progress=True)
    assert_reported(capsys.readouterr().err, result.added)
    result = index.add_messages(MESSAGES, thread_id="ops", progress=True)
    assert_reported(capsys.readouterr().err, result.added)
    index.add_documents([d + " (again)" for d in DOCS])  # default: stderr is a pipe here, nobody watches
    assert progress_lines(capsys.readouterr().err) == []


def test_a_call_overrides_the_index_setting(make, capsys, lines):
    quiet = make(progress=False)
    result = quiet.add_documents(DOCS, progress=True)
    assert_reported(capsys.readouterr().err, result.added)
    loud = make(progress=True)
    loud.add_documents(DOCS, progress=False)
    assert progress_lines(capsys.readouterr().err) == []
    result = loud.add_documents([d + " (v2)" for d in DOCS])  # the index's own setting
    assert_reported(capsys.readouterr().err, result.added)


def test_bad_switch_values_are_refused(make):
    index = make()
    with pytest.raises(InputError, match="progress must be True .*got 'yes'"):
        index.add_documents(DOCS[:1], progress="yes")
    with pytest.raises(InputError, match="progress must be"):
        ContextualIndex(in_memory=True, progress=1)
    with pytest.raises(InputError, match="name the same switch"):
        progress.progress_option(True, False)
    assert progress.progress_option(None, True) is True and progress.progress_option(False, None) is False


def test_a_terminal_gets_a_tqdm_bar_with_pieces_per_second(make, capsys, monkeypatch):
    monkeypatch.setattr(progress, "watched", lambda: "terminal")
    make().add_documents(DOCS)  # default: shown, since someone watches
    err = capsys.readouterr().err
    assert "indexing" in err and "piece/s" in err and "70/70" in err
    make().add_documents(DOCS[:3])  # one chunk or less: no bar by default
    assert capsys.readouterr().err == ""


def test_a_notebook_kernel_is_watched_and_gets_tqdm_auto(monkeypatch):
    """Under IPython with a kernel (Jupyter, Colab) stderr is no terminal, yet someone watches."""
    shell = types.SimpleNamespace(kernel=object())
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert progress.watched() == "notebook"
    bar = progress.progress_bar(None, 100)
    try:
        assert type(bar).__module__.startswith("tqdm") and bar.total == 100 and bar.unit == "piece"
    finally:
        bar.close()
    assert progress.progress_bar(False, 100) is None
    shell.kernel = None  # a plain IPython terminal: judged by stderr
    monkeypatch.setattr(sys, "stderr", types.SimpleNamespace(isatty=lambda: False, write=print, flush=lambda: None))
    assert progress.watched() is None


@pytest.mark.slow  # the LangChain adapters' bulk paths with the real model
def test_langchain_bulk_paths_take_the_switch(make, capsys, lines):
    from langchain_core.documents import Document

    from langchain_ctxret import ContextualRetriever, ContextualVectorStore

    store = ContextualVectorStore(make())
    store.add_texts(DOCS, show_progress=True)
    assert_reported(capsys.readouterr().err, len(DOCS))
    store.add_documents([Document(page_content=d + " (2)") for d in DOCS], progress=True)
    assert_reported(capsys.readouterr().err, len(DOCS))
    with pytest.raises(InputError, match="name the same switch"):
        store.add_texts(DOCS[:1], progress=True, show_progress=False)
    other = ContextualVectorStore.from_texts(DOCS, index=make(progress=True), progress=False)
    assert progress_lines(capsys.readouterr().err) == [] and other.index.store.count() == len(DOCS)
    ContextualVectorStore.from_documents([Document(page_content=d) for d in DOCS], index=make(), show_progress=True)
    assert_reported(capsys.readouterr().err, len(DOCS))
    retriever = ContextualRetriever(index=make())
    result = retriever.add_messages(MESSAGES, thread_id="ops", progress=True)
    assert_reported(capsys.readouterr().err, result.added)
    retriever.add_documents([Document(page_content=d) for d in DOCS], show_progress=True)
    assert_reported(capsys.readouterr().err, len(DOCS))


@pytest.mark.slow  # the LlamaIndex adapters' bulk paths with the real model
def test_llamaindex_bulk_paths_take_the_switch(make, capsys, lines):
    from llama_index.core import Document
    from llama_index.core.ingestion import IngestionPipeline

    from llamaindex_ctxret import ContextualIndexWriter, ContextualNodeParser, ContextualStoreIndex

    docs = [Document(text=d) for d in DOCS]
    store = ContextualStoreIndex(make(), show_progress=True)
    result = store.insert_documents(docs)
    assert_reported(capsys.readouterr().err, result.added)
    store.insert_documents([Document(text=d + " (2)") for d in DOCS], show_progress=False)
    assert progress_lines(capsys.readouterr().err) == []
    ContextualStoreIndex.from_documents(
        docs, index=None, in_memory=True, show_progress=True, embed_model=store.index.embedder
    ).index.close()
    assert_reported(capsys.readouterr().err, len(DOCS))
    index = make()
    writer = ContextualIndexWriter(index, show_progress=False)
    pipeline = IngestionPipeline(transformations=[ContextualNodeParser.from_index(index), writer])
    pipeline.run(documents=docs)  # the writer's own setting
    assert progress_lines(capsys.readouterr().err) == []
    pipeline.run(documents=[Document(text=d + " (3)") for d in DOCS], progress=True)  # asked for this run
    assert_reported(capsys.readouterr().err, len(DOCS))
    loud = ContextualIndexWriter(index, show_progress=True)
    assert ContextualIndexWriter(index).show_progress is None
    loud([Document(text=d + " (4)") for d in DOCS], show_progress=False)  # LlamaIndex's "not asked"
    assert_reported(capsys.readouterr().err, len(DOCS))
    loud([Document(text=d + " (5)") for d in DOCS], progress=False)
    assert progress_lines(capsys.readouterr().err) == []
