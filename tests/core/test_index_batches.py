"""Indexing many threads in one call: the same store as thread by thread, bounded write batches, one batched
write from every bulk path, and a failure part-way that leaves whole turns (the hashing embedder: what is asserted
is storage, not ranking; real Chroma)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.errors import EmbeddingError
from ctxret.ingest import writer
from ctxret.ingest.messages import turns_from_messages
from sample_threads import GARDEN, thread

THREADS = {
    "garden": GARDEN,
    "travel": thread(
        [
            (
                "Book the train to Lyon for the 3rd of May, leaving after 9 am.",
                "Booked the 9:42 to Lyon on May 3rd, seat 41.",
            ),
            ("Which hotel did we pick near the station?", "Hotel Perrache, two nights, breakfast included."),
            ("Add a reminder to buy euros before the trip. " * 30, "Reminder set: buy euros by May 1st."),
        ],
        day=2,
    ),
    "work": thread(
        [
            (
                "The quarterly report is due on Friday; Sam writes the revenue section.",
                "Noted: report Friday, Sam on revenue.",
            ),
            ("Move the design review to Wednesday at 11.", "Design review moved to Wednesday 11:00."),
        ],
        day=3,
    ),
    "cooking": thread(
        [("My sourdough starter smells of acetone.", "Feed it twice a day at a 1:5:5 ratio for a few days.")], day=4
    ),
}


class CountingEmbedder:
    """An embedder (the hashing one), counting the model calls it is asked for (what a bulk path costs in calls)."""

    def __init__(self, inner):
        self._inner = inner
        self.calls: list[tuple[str, int]] = []

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def embed(self, texts):
        self.calls.append(("embed", len(texts)))
        return self._inner.embed(texts)

    def embed_late(self, turns, **options):
        self.calls.append(("embed_late", len(turns)))
        return self._inner.embed_late(turns, **options)


def all_turns():
    return [t for tid, msgs in THREADS.items() for t in turns_from_messages(msgs, tid)]


def snapshot(index: ContextualIndex) -> dict:
    """Everything stored: per id its text, metadata and vector; the lexical rows; the views-free counts."""
    records = {
        r["id"]: (r["document"], r["metadata"], np.asarray(r["embedding"], np.float32))
        for r in index.store.records(("documents", "metadatas", "embeddings"))
    }
    rows = index.store.lexical._db.execute(
        "SELECT p.id, p.thread_id, p.turn_id, f.scope, f.tokens FROM pieces p JOIN pieces_fts f ON f.rowid = p.rowid"
    ).fetchall()
    return {"records": records, "lexical": sorted(rows), "pending": index.store.lexical.journal.pending}


def assert_same_store(a: dict, b: dict) -> None:
    assert a["records"].keys() == b["records"].keys()
    for pid, (doc, meta, vec) in a["records"].items():
        doc_b, meta_b, vec_b = b["records"][pid]
        assert doc == doc_b and meta == meta_b
        np.testing.assert_allclose(vec, vec_b, atol=2e-5)
    assert a["lexical"] == b["lexical"]
    assert a["pending"] is False and b["pending"] is False


@pytest.fixture
def make(tmp_path, hash_embedder):
    def make(embedder=None, **kwargs):
        return ContextualIndex(
            tmp_path / uuid.uuid4().hex[:8], embedder=embedder or hash_embedder, progress=False, **kwargs
        )

    return make


def test_one_call_in_batches_and_thread_by_thread_store_the_same(make, monkeypatch):
    """The default (late chunking) and the blend (mean, weight 0.8): one call, one call cut into many
    overlapped write batches, and one call per thread write the same ids, texts, metadata, vectors and
    lexical rows."""
    for options in ({}, {"context": "mean", "weight": 0.8}):
        one = make(**options)
        result = one.add_turns(all_turns())
        assert result.turns == result.turns_changed == len(all_turns()) and result.added == one.store.count()
        monkeypatch.setattr(
            writer, "WRITE_BATCH_PIECES", 3
        )  # several batches, each write overlapping the next embedding
        batched = make(**options)
        assert len(writer.write_batches(batched.check_turns(all_turns()))) > 3
        assert batched.add_turns(all_turns()) == result
        monkeypatch.undo()
        per_thread = make(**options)
        total = sum(
            # the messages as given (add_messages would give untimed ones the time they are added)
            (per_thread.add_turns(turns_from_messages(msgs, tid)) for tid, msgs in THREADS.items()),
            start=type(result)(),
        )
        assert (total.added, total.turns) == (result.added, result.turns)
        reference = snapshot(one)
        assert_same_store(reference, snapshot(batched))
        assert_same_store(reference, snapshot(per_thread))


def test_write_batches_are_bounded_and_keep_every_turn_whole(make, hash_embedder):
    index = make()
    planned = index.check_turns(all_turns())
    for max_pieces, max_bytes in ((1, 10**9), (4, 10**9), (10**9, 300), (10**9, 10**9)):
        batches = writer.write_batches(planned, max_pieces, max_bytes)
        assert sorted(p.key for b in batches for p in b) == sorted(p.key for p in planned)  # each turn once, whole
        for b in batches:
            pieces = sum(len(p.pieces) for p in b)
            size = sum(len(x.text.encode()) for p in b for x in p.pieces)
            assert len(b) == 1 or (pieces <= max_pieces and size <= max_bytes)
            order = [planned.index(p) for p in b]
            assert order == sorted(order)  # a batch keeps the given order
    assert len(writer.write_batches(planned)) == 1


def test_planned_turns_are_written_as_planned_and_replanned_when_they_do_not_fit(make):
    index = make()
    planned = index.check_turns(all_turns())
    assert index.add_turns(planned).added == sum(len(p.pieces) for p in planned)
    other = make(piece_bytes=300)  # another piece budget: the planned turns are planned again
    result = other.add_turns(planned)
    assert result.added == other.store.count() > sum(len(p.pieces) for p in planned)


def test_bulk_paths_make_one_batched_write(make, hash_embedder):
    """Each framework's bulk path hands all its documents or threads to the core in one call: the model sees
    one token pass over every turn (not one per document or thread)."""
    from langchain_core.documents import Document
    from llama_index.core.ingestion import IngestionPipeline

    from langchain_ctxret import ContextualRetriever, ContextualVectorStore
    from llamaindex_ctxret import (
        ContextualIndexWriter,
        ContextualNodeParser,
        ContextualStoreIndex,
        documents_from_messages,
    )

    texts = {tid: "\n".join(m["content"] for m in msgs) for tid, msgs in THREADS.items()}
    lc_docs = [Document(page_content=text, metadata={"title": tid}, id=tid) for tid, text in texts.items()]
    li_docs = [d for tid, msgs in THREADS.items() for d in documents_from_messages(msgs, tid)]
    paths = {
        "langchain retriever": lambda ix: ContextualRetriever(index=ix).add_documents(lc_docs),
        "langchain vector store": lambda ix: ContextualVectorStore(ix).add_documents(lc_docs),
        "langchain add_texts": lambda ix: ContextualVectorStore(ix).add_texts(list(texts.values()), ids=list(texts)),
        "llamaindex insert_documents": lambda ix: ContextualStoreIndex(ix).insert_documents(li_docs),
        "llamaindex from_documents": lambda ix: ContextualStoreIndex.from_documents(li_docs, index=ix),
        "llamaindex pipeline": lambda ix: IngestionPipeline(
            transformations=[ContextualNodeParser.from_index(ix), ContextualIndexWriter(ix)]
        ).run(documents=li_docs),
    }
    for name, add in paths.items():
        counting = CountingEmbedder(hash_embedder)
        index = make(counting)
        add(index)
        turns = {(m["thread_id"], m["turn_id"]) for m in (r["metadata"] for r in index.store.records())}
        assert len({t for t, _ in turns}) == len(THREADS), name
        assert counting.calls == [("embed_late", len(turns))], f"{name}: {counting.calls}"


async def test_async_bulk_path_makes_one_batched_write(make, hash_embedder):
    from langchain_core.documents import Document

    from langchain_ctxret import ContextualRetriever

    counting = CountingEmbedder(hash_embedder)
    index = make(counting)
    docs = [Document(page_content="\n".join(m["content"] for m in msgs), id=tid) for tid, msgs in THREADS.items()]
    await ContextualRetriever(index=index).aadd_documents(docs)
    assert [kind for kind, _ in counting.calls] == ["embed_late"]


class FailingEmbedder(CountingEmbedder):
    """The embedder, refusing any request that holds ``marker`` (an embedding service failing mid-way)."""

    def __init__(self, inner, marker: str):
        super().__init__(inner)
        self.marker = marker

    def _check(self, texts):
        if any(self.marker in t for t in texts):
            raise EmbeddingError("the embedding service failed (HTTP 503 after 5 retries)")

    def embed(self, texts):
        self._check(texts)
        return super().embed(texts)

    def embed_late(self, turns, **options):
        self._check([t for pieces in turns for t in pieces])
        return super().embed_late(turns, **options)


def test_a_failure_part_way_leaves_whole_turns_and_says_what_is_stored(make, hash_embedder, monkeypatch):
    """With many write batches, an embedding failure in a later batch: the batches before it are stored
    whole (every stored turn has all its pieces, Chroma and the lexical file agree), ``error.written``
    counts them, and the same call again ends where an uninterrupted one ends."""
    options = {"context": "mean", "weight": 0.8}
    monkeypatch.setattr(writer, "WRITE_BATCH_PIECES", 3)
    reference = make(**options)
    reference.add_turns(all_turns())
    batches = writer.write_batches(reference.check_turns(all_turns()))
    marker = batches[2][0].pieces[0].text  # the third batch fails
    failing = FailingEmbedder(hash_embedder, marker)
    index = make(failing, **options)
    with pytest.raises(EmbeddingError) as caught:
        index.add_turns(all_turns())
    written = caught.value.written
    message = str(caught.value)  # the same error type, saying how far it got and how to finish
    assert message.startswith("the embedding service failed (HTTP 503 after 5 retries)")
    assert f"stopped after {written.turns} of {len(all_turns())} turns were stored, each whole" in message
    assert "the same call again finishes it" in message and isinstance(caught.value.__cause__, EmbeddingError)
    stored = snapshot(index)
    expected = {x.id for b in batches[:2] for p in b for x in p.pieces}
    assert set(stored["records"]) == expected and {r[0] for r in stored["lexical"]} == expected
    assert stored["pending"] is False
    assert written.added == len(expected) and written.turns_changed == sum(len(b) for b in batches[:2])
    failing.marker = "\x00never"  # the service is back: the same call finishes the job
    again = index.add_turns(all_turns())
    assert again.unchanged == len(expected) and again.added == reference.store.count() - len(expected)
    assert_same_store(snapshot(reference), snapshot(index))


def test_one_batch_is_all_or_nothing(make, hash_embedder):
    failing = FailingEmbedder(hash_embedder, "sourdough")
    index = make(failing, context="mean", weight=0.8)
    with pytest.raises(EmbeddingError) as caught:
        index.add_turns(all_turns())
    assert index.store.count() == 0 and caught.value.written.added == 0
    assert f"stopped after 0 of {len(all_turns())} turns were stored" in str(caught.value)


def test_a_rebuild_that_fails_keeps_the_old_collection_and_its_message(make, hash_embedder):
    """A rebuild's refill is not a call to finish by adding again: its error keeps its own message."""
    failing = FailingEmbedder(hash_embedder, "\x00never")
    index = make(failing, context="mean", weight=0.8)
    index.add_turns(all_turns())
    before = snapshot(index)
    failing.marker = "sourdough"
    with pytest.raises(EmbeddingError) as caught:
        ContextualIndex.rebuild(index.store.location, embedder=failing, context="mean", weight=0.5, progress=False)
    assert "stopped after" not in str(caught.value)
    failing.marker = "\x00never"
    assert_same_store(before, snapshot(index))


@pytest.mark.parametrize("path", ["langchain", "llamaindex"])
def test_an_adapter_bulk_call_that_fails_part_way_raises_the_ctxret_error_that_says_so(
    make, hash_embedder, monkeypatch, path
):
    """The adapters stay thin: their bulk add raises the core's error, which says what is stored and how to
    finish, and the same call again completes the store."""
    from langchain_core.documents import Document

    from langchain_ctxret import ContextualRetriever
    from llamaindex_ctxret import ContextualStoreIndex, documents_from_messages

    monkeypatch.setattr(writer, "WRITE_BATCH_PIECES", 3)
    texts = {tid: "\n".join(m["content"] for m in msgs) for tid, msgs in THREADS.items()}
    if path == "langchain":
        docs = [Document(page_content=text, id=tid) for tid, text in texts.items()]

        def add(ix):
            ContextualRetriever(index=ix).add_documents(docs)
    else:
        li_docs = [d for tid, msgs in THREADS.items() for d in documents_from_messages(msgs, tid)]

        def add(ix):
            ContextualStoreIndex(ix).insert_documents(li_docs)

    reference = make()
    add(reference)
    failing = FailingEmbedder(hash_embedder, "buy euros")  # the longest turn: the last write batch
    index = make(failing)
    with pytest.raises(EmbeddingError, match=r"stopped after \d+ of \d+ turns were stored, each whole") as caught:
        add(index)
    assert 0 < caught.value.written.turns_changed and index.store.count() == caught.value.written.added
    failing.marker = "\x00never"
    add(index)
    assert_same_store(snapshot(reference), snapshot(index))
