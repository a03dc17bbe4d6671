"""Context strategies (mean, turn, late chunking) and parent-document expansion."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from ctxret import ContextualIndex, InputError, SearchSettings
from ctxret.ingest.context import context_vectors, late_context_vectors
from ctxret.ingest.messages import turns_from_messages
from ctxret.ingest.turns import label_pieces
from ctxret.query.parents import expand_parents, parent_texts

MESSAGES = [
    {"role": "user", "content": "Maria Chen, our CEO, was presented with a buyout proposal by Helix Capital."},
    {"role": "assistant", "content": "He refused the offer. The board accepted his resignation the following week."},
    {"role": "user", "content": "Order more printer paper for the second floor."},
    {"role": "assistant", "content": "Ordered ten reams of A4 paper for the second floor."},
]


def test_late_context_is_one_unit_vector_per_piece(local_embedder):
    turn = turns_from_messages(MESSAGES, "t")[0]
    pieces = label_pieces(turn, 600)
    late = late_context_vectors(local_embedder, pieces)
    assert late.shape == (len(pieces), local_embedder.dims)
    assert np.allclose(np.linalg.norm(late, axis=1), 1.0, atol=1e-5)
    alone = local_embedder.embed([p.text for p in pieces])
    cos = np.sum(late * alone, axis=1)
    # the late vector is still about the piece itself, but it has seen its neighbours
    assert np.all(cos > 0.5) and np.all(cos < 0.9999)


def test_late_context_moves_an_ambiguous_piece_toward_its_turn(local_embedder):
    turn = turns_from_messages(MESSAGES, "t")[0]
    pieces = label_pieces(turn, 600)
    late = late_context_vectors(local_embedder, pieces)
    alone = local_embedder.embed([p.text for p in pieces])
    query = local_embedder.embed(["What happened with the CEO's buyout offer?"])[0]
    # the pronoun piece ("He refused the offer ...") gains on the buyout query once it has seen its turn
    assert float(late[1] @ query) > float(alone[1] @ query)


def test_late_context_needs_token_output():
    class NoTokens:
        pass

    with pytest.raises(InputError, match="token-level"):
        late_context_vectors(NoTokens(), [])


def test_context_strategies_shapes(local_embedder):
    turns = turns_from_messages(MESSAGES, "t")
    pieces = [label_pieces(t, 600) for t in turns]
    vecs = local_embedder.embed([p.text for ps in pieces for p in ps])
    texts = [t.text for t in turns]
    mean = context_vectors("mean", local_embedder, pieces, vecs, texts)
    turn = context_vectors("turn", local_embedder, pieces, vecs, texts)
    late = context_vectors("late", local_embedder, pieces, vecs, texts)
    assert [m.shape for m in mean] == [(384,)] * 2 and [m.shape for m in turn] == [(384,)] * 2
    assert [m.shape for m in late] == [(len(ps), 384) for ps in pieces]
    with pytest.raises(InputError, match="unknown context strategy"):
        context_vectors("nope", local_embedder, pieces, vecs, texts)


def test_parent_expansion_reassembles_turns_and_dedupes(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "p", embedder=local_embedder, piece_bytes=200)
    long = " ".join(f"Step {i}: restart the ingest worker number {i} and check its queue depth." for i in range(12))
    index.add_messages(
        [{"role": "user", "content": long}, {"role": "assistant", "content": "All workers restarted."}], "ops"
    )
    index.add_messages(MESSAGES, "board")
    groups = index.search("restart the ingest worker and check queue depth", k=5, score_threshold=None, thread_id="ops")
    assert len({h.metadata["ctxret:parent_id"] for h in groups[0].hits}) == 1 and len(groups[0].hits) > 1
    expanded = expand_parents(index.store, groups)
    assert len(expanded[0].hits) == 1  # one hit per parent inside the group
    text = expanded[0].hits[0].parent_text
    assert text is not None and "Step 0:" in text and "Step 11:" in text and "All workers restarted." in text
    kept = expand_parents(index.store, groups, dedupe=False)
    assert len(kept[0].hits) == len(groups[0].hits) and all(h.parent_text == text for h in kept[0].hits)
    texts = parent_texts(
        index.store, [("board", "board#1"), ("board", "board#2"), ("board", "missing#9"), ("ops", "board#1")]
    )
    assert set(texts) == {("board", "board#1"), ("board", "board#2")}
    assert texts[("board", "board#1")].index("Maria Chen") < texts[("board", "board#1")].index("He refused")


def test_parents_never_cross_threads(tmp_path, local_embedder):
    """Two threads holding the same document id (the issue's case) share a parent id, not a parent."""
    index = ContextualIndex(tmp_path / "leak", embedder=local_embedder)
    index.add_documents(
        [{"id": "notes.md", "text": "# Notes\nAlice private: diagnosis confidential-alice-777."}], thread_id="alice"
    )
    index.add_documents([{"id": "notes.md", "text": "# Notes\nBob notes: buy milk."}], thread_id="bob")
    # a document whose id equals another thread's id: its parent id starts with that thread's id
    index.add_documents(
        [{"id": "alice", "text": "# Alice\nCarol's page about alice: nothing private."}], thread_id="carol"
    )
    for search in (index.search, lambda *a, **kw: asyncio.run(index.asearch(*a, **kw))):
        for thread, mine, theirs in (("bob", "buy milk", "confidential"), ("alice", "confidential", "buy milk")):
            groups = search("buy milk diagnosis notes", k=5, thread_id=thread, score_threshold=None, parents=True)
            texts = [h.parent_text for g in groups for h in g.hits]
            assert texts and all(mine in t and theirs not in t and "Carol" not in t for t in texts)
        groups = search("page about alice", k=5, thread_id="carol", score_threshold=None, parents=True)
        assert all("Carol" in h.parent_text and "confidential" not in h.parent_text for g in groups for h in g.hits)


@pytest.mark.parametrize("strategy", ["mean", "turn", "late"])
def test_index_with_each_context_strategy(tmp_path, local_embedder, strategy):
    index = ContextualIndex(tmp_path / strategy, embedder=local_embedder, context=strategy, lexical=False)
    index.add_messages(MESSAGES, "board")
    assert index.store.stored_config()["context"] == strategy
    vecs = [r["embedding"] for r in index.store.chroma.iter_records(None, include=("embeddings",))]
    assert np.allclose(np.linalg.norm(np.asarray(vecs), axis=1), 1.0, atol=1e-5)
    groups = index.search("Who offered to buy out the CEO? How much paper did we order?", k=1)
    assert "Helix" in groups[0].hits[0].text or "refused" in groups[0].hits[0].text
    assert "paper" in groups[1].hits[0].text.lower()


def test_late_context_with_zero_weight_is_pure_late_chunking(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "pure", embedder=local_embedder, context="late", weight=0.0, lexical=False)
    turn = turns_from_messages(MESSAGES[:2], "board")[0]
    index.add_turns([turn])
    pieces = index.fit_pieces(turn)
    expected = late_context_vectors(local_embedder, pieces)
    stored = {r["id"]: r["embedding"] for r in index.store.chroma.iter_records(None, include=("embeddings",))}
    for p, e in zip(pieces, expected, strict=True):
        assert float(np.dot(stored[p.id], e)) == pytest.approx(1.0, abs=1e-5)


def test_late_context_refused_for_an_embedder_without_tokens(tmp_path, local_embedder):
    from ctxret.embedders.wrappers import LangChainEmbedder

    from langchain_ctxret import CtxretEmbeddings

    emb = LangChainEmbedder(CtxretEmbeddings(), model_id="lc-local", dims=384)
    index = ContextualIndex(tmp_path / "nolate", embedder=emb, context="late", lexical=False)
    with pytest.raises(InputError, match="token-level"):
        index.add_messages(MESSAGES, "board")
    assert index.store.count() == 0


def test_search_with_parents(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "par", embedder=local_embedder, piece_bytes=200)
    long = " ".join(f"Step {i}: restart the ingest worker number {i} and check its queue depth." for i in range(12))
    index.add_messages([{"role": "user", "content": long}], "ops")
    groups = index.search("restart the ingest worker and check queue depth", k=5, score_threshold=None, parents=True)
    assert len(groups[0].hits) == 1 and "Step 11:" in groups[0].hits[0].parent_text
    import asyncio

    agroups = asyncio.run(
        index.asearch("restart the ingest worker and check queue depth", k=5, score_threshold=None, parents=True)
    )
    assert [h.id for h in agroups[0].hits] == [h.id for h in groups[0].hits]


def test_query_weight_is_separate_from_the_stored_weight(tmp_path, local_embedder):
    from ctxret.query.vectors import query_vectors

    message = "Who offered to buy out the CEO? How much paper did we order?"
    index = ContextualIndex(
        tmp_path / "qw",
        embedder=local_embedder,
        context="late",
        weight=0.0,
        lexical=False,
        settings=SearchSettings(query_weight=0.8),
    )
    parts, vecs = index.query_vectors(message)
    _, expected = query_vectors(local_embedder, message, weight=0.8)
    assert np.allclose(vecs, expected, atol=1e-6)
    _, whole_only = query_vectors(local_embedder, message, weight=0.0)  # what weight 0 alone would give
    assert not np.allclose(vecs[0], whole_only[0], atol=1e-3)
    assert index.store.stored_config()["weight"] == 0.0 and "query_weight" not in index.store.stored_config()
    with pytest.raises(InputError, match="query_weight"):
        SearchSettings(query_weight=1.5)
    with pytest.raises(InputError, match="'query_weight' is a search option"):
        ContextualIndex(tmp_path / "qw2", embedder=local_embedder, query_weight=0.8, lexical=False)
