"""In-memory indexes are separate stores, and live beside the frameworks' own in-memory Chroma.

``ContextualIndex(in_memory=True)`` used to be one Chroma ephemeral system per process: a second
in-memory index saw the first one's pieces, ``clear()`` on one emptied the other, another embedder
was refused, and langchain-chroma's in-memory ``Chroma`` (``chromadb.Client(Settings())``) or
LlamaIndex's ``ChromaVectorStore`` over ``chromadb.EphemeralClient()`` could not be made in the same
process ("An instance of Chroma already exists for ephemeral with different settings"), in either
order. Those two run in subprocesses: inside this process, other tests hold Chroma's shared
ephemeral system with their own settings.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ctxret import ContextualIndex

from reliability.bow_embedder import SmallEmbedder

pytestmark = pytest.mark.slow
HERE = str(Path(__file__).parent)  # the subprocesses import bow_embedder from here


def _say(index: ContextualIndex, thread: str, text: str) -> None:
    index.add_messages([{"role": "user", "content": text}], thread_id=thread)


def test_two_in_memory_indexes_are_separate_stores():
    a = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
    b = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
    _say(a, "alpha", "the alpha team keeps its launch codes here")
    assert a.store.count() == 1
    assert b.store.count() == 0  # used to be 1: b saw a's piece
    assert sorted(b.lexical_index.ids()) == []  # the lexical ":memory:" files are separate too
    assert not b.search("alpha launch codes", score_threshold=None)[0].hits
    _say(b, "bravo", "bravo notes about the garden")
    b.clear()
    assert a.store.count() == 1  # used to be 0: clear() on b emptied a
    assert a.search("alpha launch codes", score_threshold=None)[0].hits
    a.close()
    b.close()


def test_in_memory_indexes_with_different_embedders_coexist():
    a = ContextualIndex(in_memory=True, embedder=SmallEmbedder(16))
    b = ContextualIndex(in_memory=True, embedder=SmallEmbedder(8))  # used to be a ConfigMismatchError
    _say(a, "t", "sixteen dimensions")
    _say(b, "t", "eight dimensions")
    assert a.config.dims == 16 and b.config.dims == 8
    assert a.store.count() == b.store.count() == 1
    a.close()
    b.close()


def test_closing_an_in_memory_index_leaves_the_others():
    a = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
    b = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
    _say(a, "t", "kept in a")
    _say(b, "t", "kept in b")
    a.close()
    assert b.store.count() == 1 and b.search("kept in b", score_threshold=None)[0].hits
    b.close()


#: What langchain-chroma 1.1 does for ``Chroma(collection_name=...)`` with no client, folder or host
#: (``langchain_chroma/vectorstores.py``: ``chromadb.Client(settings=client_settings or Settings())``),
#: and what LlamaIndex's documentation does for an in-memory ``ChromaVectorStore``
#: (``chromadb.EphemeralClient()``).
PEERS = textwrap.dedent(
    """
    import sys
    import chromadb
    import numpy as np
    from chromadb.config import Settings
    sys.path.insert(0, sys.argv[2])
    from bow_embedder import SmallEmbedder
    from ctxret import ContextualIndex

    def peers():
        langchain = chromadb.Client(settings=Settings())
        llamaindex = chromadb.EphemeralClient()
        for client, name in ((langchain, "langchain"), (llamaindex, "llamaindex")):
            col = client.get_or_create_collection(name)
            col.upsert(ids=[name], embeddings=np.ones((1, 4), np.float32), documents=[name])
        return langchain, llamaindex

    def ours():
        index = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
        index.add_messages([{"role": "user", "content": "ctxret piece"}], thread_id="t")
        return index

    if sys.argv[1] == "ctxret-first":
        index = ours()
        langchain, llamaindex = peers()
    else:
        langchain, llamaindex = peers()
        index = ours()
    # the peers share Chroma's process-wide ephemeral system; ctxret has a store of its own
    assert sorted(c.name for c in langchain.list_collections()) == ["langchain", "llamaindex"]
    assert index.store.chroma.names() == ["ctxret"], index.store.chroma.names()
    assert index.store.count() == 1
    assert not index.store.chroma.client.get_settings().anonymized_telemetry  # ours stays off
    index.close()
    assert langchain.get_collection("langchain").count() == 1  # closing ours leaves theirs
    print("OK")
    """
)


@pytest.mark.parametrize("order", ["ctxret-first", "peers-first"])
def test_in_memory_index_lives_beside_langchain_and_llamaindex_in_memory_chroma(order):
    proc = subprocess.run([sys.executable, "-c", PEERS, order, HERE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


REAL_PEERS = textwrap.dedent(
    """
    import sys
    import chromadb
    from langchain_chroma import Chroma
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from llama_index.vector_stores.chroma import ChromaVectorStore
    sys.path.insert(0, sys.argv[2])
    from bow_embedder import SmallEmbedder
    from ctxret import ContextualIndex

    def peers():
        lc = Chroma(collection_name="langchain", embedding_function=DeterministicFakeEmbedding(size=8))
        lc.add_texts(["from langchain"])
        li = ChromaVectorStore(chroma_collection=chromadb.EphemeralClient().get_or_create_collection("llamaindex"))
        return lc, li

    def ours():
        index = ContextualIndex(in_memory=True, embedder=SmallEmbedder())
        index.add_messages([{"role": "user", "content": "ctxret piece"}], thread_id="t")
        return index

    index, (lc, li) = (ours(), peers()) if sys.argv[1] == "ctxret-first" else (lambda p: (ours(), p))(peers())
    assert lc.similarity_search("from langchain", k=1)[0].page_content == "from langchain"
    assert index.store.count() == 1 and index.store.chroma.names() == ["ctxret"]
    print("OK")
    """
)


@pytest.mark.parametrize("order", ["ctxret-first", "peers-first"])
def test_with_the_real_langchain_chroma_and_llamaindex_chroma_store(order):
    """The same with the frameworks' own packages, where they are installed (not a ctxret dependency)."""
    pytest.importorskip("langchain_chroma")
    pytest.importorskip("llama_index.vector_stores.chroma")
    proc = subprocess.run([sys.executable, "-c", REAL_PEERS, order, HERE], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr
