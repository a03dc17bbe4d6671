"""LLM-written context (context="llm"): core with a plain contextualizer, LangChain with its own fake LLMs."""

from __future__ import annotations

import numpy as np
import pytest
from ctxret import CallableError, ContextualIndex, InputError
from ctxret.blend import blend_with_context
from ctxret.ingest.messages import turns_from_messages
from ctxret.storage.lexical import LexicalIndex
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from langchain_ctxret import llm_contextualizer
from langchain_ctxret.contextual import parse_numbered_lines

MESSAGES = [
    {"role": "user", "content": "Maria Chen, our CEO, received a buyout proposal from Helix Capital."},
    {"role": "assistant", "content": "He refused the offer. The board accepted the resignation the following week."},
]


def situate(passage: str, bodies):
    """A deterministic contextualizer (stands in for an LLM call): names the passage's subject per piece."""
    return [
        f"From the Zephyrine board minutes about the Helix Capital buyout: piece {i + 1}." for i in range(len(bodies))
    ]


def test_llm_context_is_stored_blended_and_indexed_for_bm25(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "llm", embedder=local_embedder, context="llm", contextualizer=situate)
    index.add_messages(MESSAGES, "board")
    records = list(index.store.chroma.iter_records(None, include=("metadatas", "documents", "embeddings")))
    assert records
    assert all(r["metadata"]["context_text"].startswith("From the Zephyrine board minutes") for r in records)
    # the shown/embedded piece text stays the original; the line is the context vector
    for r in records:
        assert "Zephyrine" not in r["document"]
        own = local_embedder.embed([r["document"]])[0]
        ctx = local_embedder.embed([r["metadata"]["context_text"]])[0]
        assert float(np.dot(r["embedding"], blend_with_context(own, ctx, 0.8))) == pytest.approx(1.0, abs=1e-4)
    # contextual BM25: a word only the context line holds finds the pieces lexically
    hits = index.lexical_index.search("Zephyrine", 5)
    assert {h[0] for h in hits} == {r["id"] for r in records}
    # and a lexical repair from Chroma keeps it (the line is stored with the piece)
    fresh = LexicalIndex(tmp_path / "repaired.sqlite3")
    from ctxret.storage.lexical_sync import sync_from_store

    sync_from_store(fresh, index.store.chroma, full=True)
    assert len(fresh.search("Zephyrine", 5)) == len(records)


def test_contextualizer_errors_write_nothing(tmp_path, local_embedder):
    index = ContextualIndex(
        tmp_path / "bad", embedder=local_embedder, context="llm", contextualizer=lambda p, b: ["only one"]
    )
    with pytest.raises(InputError, match="one context line"):
        index.add_messages(MESSAGES, "board")
    assert index.store.count() == 0

    def down(passage, bodies):
        raise RuntimeError("LLM unavailable")

    index.contextualizer = down
    with pytest.raises(CallableError, match=r"contextualizer .*down raised RuntimeError: LLM unavailable") as err:
        index.add_messages(MESSAGES, "board")
    assert isinstance(err.value.__cause__, RuntimeError)
    assert index.store.count() == 0
    index.contextualizer = None
    with pytest.raises(InputError, match="needs a contextualizer"):
        index.add_messages(MESSAGES, "board")


def test_unchanged_turns_are_not_sent_to_the_llm_again(tmp_path, local_embedder):
    calls = []

    def counting(passage, bodies):
        calls.append(len(bodies))
        return situate(passage, bodies)

    index = ContextualIndex(tmp_path / "count", embedder=local_embedder, context="llm", contextualizer=counting)
    index.add_messages(MESSAGES, "board")
    n = len(calls)
    assert index.add_messages(MESSAGES, "board").turns_changed == 0
    assert len(calls) == n


def test_parse_numbered_lines():
    text = "1. About the buyout.\nnoise\n3) The resignation.\nChunk 2: Maria Chen."
    assert parse_numbered_lines(text, 3) == ["About the buyout.", "Maria Chen.", "The resignation."]
    assert parse_numbered_lines("1. a\n9. out of range", 2) == ["a", ""]


@pytest.mark.parametrize("make", [FakeListLLM, FakeListChatModel])
def test_langchain_llm_contextualizer(tmp_path, local_embedder, make):
    turn = turns_from_messages(MESSAGES, "board")[0]
    llm = make(
        responses=["1. Helix Capital's buyout offer to CEO Maria Chen.\n2. Maria Chen refuses the Helix buyout."]
    )
    index = ContextualIndex(
        tmp_path / "lc", embedder=local_embedder, context="llm", contextualizer=llm_contextualizer(llm)
    )
    pieces = index.fit_pieces(turn)
    assert len(pieces) == 2
    index.add_messages(MESSAGES, "board")
    lines = sorted(r["metadata"]["context_text"] for r in index.store.chroma.iter_records(None))
    assert lines == ["Helix Capital's buyout offer to CEO Maria Chen.", "Maria Chen refuses the Helix buyout."]
    # the pronoun piece is found by the name its context line gives it
    groups = index.search("Did Maria Chen refuse the offer?", k=1, thread_id="board", lexical=False)
    assert "He refused" in groups[0].hits[0].text


def test_missing_line_falls_back_to_the_mean_context(tmp_path, local_embedder):
    llm = FakeListLLM(responses=["1. Helix Capital's buyout offer to CEO Maria Chen."])  # no line 2
    index = ContextualIndex(
        tmp_path / "fb", embedder=local_embedder, context="llm", contextualizer=llm_contextualizer(llm), lexical=False
    )
    index.add_messages(MESSAGES, "board")
    records = sorted(
        index.store.chroma.iter_records(None, include=("metadatas", "embeddings", "documents")),
        key=lambda r: r["metadata"]["source_ordinal"],
    )
    assert "context_text" in records[0]["metadata"] and "context_text" not in records[1]["metadata"]
    own = local_embedder.embed([r["document"] for r in records])
    mean = own.mean(axis=0)
    expected = blend_with_context(own[1], mean / np.linalg.norm(mean), 0.8)
    assert float(np.dot(records[1]["embedding"], expected)) == pytest.approx(1.0, abs=1e-4)
