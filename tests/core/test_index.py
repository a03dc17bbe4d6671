"""ContextualIndex end to end on real Chroma (embedded folder and a `chroma run` server): with the real local model
where a test asserts on what is found, the hashing embedder where it asserts on storage, ids and errors."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import uuid
from pathlib import Path

import ctxret.ingest.messages
import numpy as np
import pytest
from ctxret import ConfigMismatchError, ContextualIndex, EmbeddingError, InputError
from ctxret.query.floor import HIT_SHARE
from ctxret.results import cosine_to_distance, cosine_to_unit_interval, distance_to_cosine, unit_interval_to_cosine
from sample_threads import GARDEN, thread

DATA = Path(__file__).resolve().parents[1] / "data"


class CountingEmbedder:
    """A real embedder that counts the texts it was asked to embed (and can be told to fail)."""

    def __init__(self, inner, fail_after: int | None = None):
        self.inner = inner
        self.model_id = inner.model_id
        self.dims = inner.dims
        self.max_tokens = inner.max_tokens
        self.default_piece_bytes = inner.default_piece_bytes
        self.default_score_threshold = inner.default_score_threshold
        self.calls: list[int] = []
        self.fail_after = fail_after

    def embed(self, texts):
        if self.fail_after is not None and sum(self.calls) + len(texts) > self.fail_after:
            raise RuntimeError("embedding backend down")
        self.calls.append(len(texts))
        return self.inner.embed(texts)

    async def aembed(self, texts):
        return self.embed(texts)

    def count_tokens(self, texts):
        return self.inner.count_tokens(texts)


@pytest.fixture(params=["embedded", pytest.param("server", marks=pytest.mark.slow)])  # a server: slow
def make_index(request, tmp_path, local_embedder):
    """Build ContextualIndex objects on one backend: an embedded folder, or the shared Chroma server (the real
    model unless ``embedder=`` says otherwise: the plumbing tests pass the hashing one). All closed after the test."""
    collection = f"t-{uuid.uuid4().hex[:12]}"
    opened: list[ContextualIndex] = []

    def make(rebuild=False, **kwargs):
        kwargs.setdefault("embedder", local_embedder)
        kwargs.setdefault("collection", collection)
        kwargs.setdefault("lexical", False)  # the dense core; hybrid search is tested in test_hybrid.py
        opener = ContextualIndex.rebuild if rebuild else ContextualIndex
        if request.param == "embedded":
            index = opener(tmp_path / "store", **kwargs)
        else:
            server = request.getfixturevalue("chroma_server")
            index = opener(host=server.host, port=server.port, **kwargs)
        opened.append(index)
        return index

    make.backend = request.param
    try:
        yield make
    finally:
        for index in reversed(opened):
            index.close()


def all_ids(index: ContextualIndex, thread_id: str | None = None) -> set[str]:
    where = {"thread_id": thread_id} if thread_id else None
    return {r["id"] for r in index.store.chroma.iter_records(where)}


def test_add_then_search_groups_obey_k_threshold_and_order(make_index):
    index = make_index()
    result = index.add_messages(GARDEN, thread_id="home")
    assert result.added == index.store.count() > 0
    assert result.turns == 4 and result.turns_changed == 4
    groups = index.search(
        "When is the dentist appointment? Also what colour for the kitchen cabinets?", k=2, thread_id="home"
    )
    assert [g.part_index for g in groups] == [0, 1]
    for g in groups:
        assert len(g.hits) <= 2
        scores = [h.score for h in g.hits]
        assert scores == sorted(scores, reverse=True)
        cosines = [h.scores["cosine"] for h in g.hits]
        # the floor per part: a hit clears it, the group keeps hits down to half of it (ctxret.query.floor)
        assert max(cosines) >= index.cosine_floor and min(cosines) >= index.cosine_floor * HIT_SHARE
        # dense search: a score is a cosine of the group (an answer lifted above its question takes the question's)
        assert all(h.score in cosines for h in g.hits)
    assert "dentist" in groups[0].hits[0].text.lower()
    # the user's message first, the assistant's reply right under it (ctxret.query.answers: its own words follow)
    assert "cabinets" in groups[1].hits[0].text.lower() and "forest green" in groups[1].hits[1].text
    # labelled pieces: the header names turn, source and time
    assert groups[0].hits[0].text.startswith("[Turn 2 · ")
    assert groups[0].hits[0].metadata["thread_id"] == "home"


def test_no_padding_and_groups_kept_when_empty(make_index):
    index = make_index()
    index.add_messages(GARDEN, thread_id="home")
    message = "Tell me about the tomato blight. What about quantum chromodynamics lattice gauge theory?"
    groups = index.search(message, k=5, cosine_floor=0.45)
    assert len(groups) == 2
    assert all(h.score >= 0.45 for g in groups for h in g.hits)
    assert len(groups[0].hits) < 5  # a part with few good matches is not padded
    unfloored = index.search(message, k=5, score_threshold=None)
    assert [len(g.hits) for g in unfloored] == [5, 5]


def test_duplicates_across_groups_are_kept(make_index):
    index = make_index()
    index.add_messages(GARDEN, thread_id="home")
    groups = index.search(
        "The tomatoes have blight on the lower leaves. The tomato plants have blight on the lower leaves!",
        k=1,
        score_threshold=None,
    )
    assert len(groups) == 2
    assert groups[0].hits[0].id == groups[1].hits[0].id


def test_reindexing_same_content_is_idempotent_and_embeds_nothing(make_index, hash_embedder):
    counting = CountingEmbedder(hash_embedder)
    index = make_index(embedder=counting)
    first = index.add_messages(GARDEN, thread_id="home")
    ids = all_ids(index)
    calls = list(counting.calls)
    again = index.add_messages(GARDEN, thread_id="home")  # the same thread again: every message is known
    assert again.added == 0 and again.replaced == 0 and again.turns_changed == 0
    assert again.duplicates == len(GARDEN) and first.added > 0
    assert all_ids(index) == ids
    assert counting.calls == calls  # nothing re-embedded


def test_changed_turn_replaces_its_pieces_without_orphans(make_index, hash_embedder):
    index = make_index(embedder=hash_embedder)
    index.add_messages(GARDEN, thread_id="home")
    before = {r["id"]: r["metadata"] for r in index.store.chroma.iter_records({"turn_id": "home#2"})}
    edited = [dict(m) for m in GARDEN]
    edited[2] = {**edited[2], "content": "The orthodontist appointment moved to Friday at 10 am."}
    result = index.replace_messages(edited, thread_id="home")  # rewriting a stored message is explicit
    assert result.turns_changed == 1 and result.added >= 1 and result.replaced >= 1
    after = {r["id"]: r["metadata"] for r in index.store.chroma.iter_records({"turn_id": "home#2"})}
    bodies = [m["body"] for m in after.values()]
    assert any("orthodontist" in b for b in bodies)
    assert not any("dentist appointment moved to Thursday" in b for b in bodies)
    assert set(before) - set(after)  # the old user piece is gone
    # no orphans: exactly the pieces the core makes for the edited thread are stored (their bodies; the headers
    # carry the time each untimed message was first added), and writing it again changes nothing
    expected = [p.body for t in ctxret.ingest.messages.turns_from_messages(edited, "home") for p in index.fit_pieces(t)]
    stored = [r["metadata"]["body"] for r in index.store.records()]
    assert sorted(stored) == sorted(expected)
    again = index.replace_messages(edited, thread_id="home")
    assert (again.turns_changed, again.added, again.replaced) == (0, 0, 0)


def test_thread_scoping_never_leaks(make_index, hash_embedder):
    index = make_index(embedder=hash_embedder)
    names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    pets = [
        "a parrot named Kiwi",
        "a cat named Miso",
        "a tortoise named Atlas",
        "two goldfish",
        "a rabbit named Clover",
        "a hamster named Pip",
    ]
    for name, pet in zip(names, pets, strict=True):
        index.add_messages(
            thread([(f"I have {pet} at home.", "Lovely."), ("My flight to Lisbon leaves on Monday.", "Safe travels.")]),
            thread_id=name,
        )
    queries = [
        "What pet do I have?",
        "When is my flight? What is my pet called?",
        "Lisbon travel plans.",
        "Tell me about the tortoise.",
    ]
    for name in names:
        for q in queries:
            for g in index.search(q, k=5, score_threshold=None, thread_id=name):
                assert g.hits, "scope returned nothing"
                assert {h.metadata["thread_id"] for h in g.hits} == {name}
    both = index.search("What pet do I have?", k=8, score_threshold=None, thread_id=["alpha", "bravo"])
    assert {h.metadata["thread_id"] for h in both[0].hits} == {"alpha", "bravo"}
    where = index.search("What pet do I have?", k=8, score_threshold=None, where={"ctxret:source_kind": "assistant"})
    assert where[0].hits and all(h.metadata["ctxret:source_kind"] == "assistant" for h in where[0].hits)


def test_config_mismatch_is_refused_then_rebuilt_without_loss(make_index, hash_embedder):
    make_index = functools.partial(make_index, embedder=hash_embedder)
    index = make_index()
    index.add_messages(GARDEN, thread_id="home")
    texts = sorted(r["metadata"]["body"] for r in index.store.chroma.iter_records(None))
    with pytest.raises(ConfigMismatchError) as err:
        make_index(weight=0.9)
    assert "weight" in str(err.value) and "rebuild" in str(err.value)
    assert index.store.count() == len(texts)  # nothing lost by the refusal
    rebuilt = make_index(weight=0.9, rebuild=True)
    assert rebuilt.config.weight == 0.9
    assert sorted(r["metadata"]["body"] for r in rebuilt.store.chroma.iter_records(None)) == texts
    assert rebuilt.store.stored_config()["weight"] == 0.9
    # opening without naming the weight adopts the stored one
    assert make_index().weight == 0.9


def test_reindex_rebuilds_from_stored_pieces(make_index):
    index = make_index()
    index.add_messages(GARDEN, thread_id="home", metadata={"user": {"id": 7}, "tags": ["a", "b"]})
    before = {r["id"]: r["metadata"] for r in index.store.chroma.iter_records(None)}
    result = index.reindex()
    after = {r["id"]: r["metadata"] for r in index.store.chroma.iter_records(None)}
    assert result.added == len(before)
    assert set(after) == set(before)  # same packer, same budget: same pieces, same ids
    for pid, meta in after.items():
        assert meta["body"] == before[pid]["body"]
        assert meta["user.id"] == 7 and json.loads(meta["tags"]) == ["a", "b"]
    groups = index.search("When is the dentist?", k=1, thread_id="home")
    assert "dentist" in groups[0].hits[0].text.lower()


def test_delete_thread_only(make_index, hash_embedder):
    index = make_index(embedder=hash_embedder)
    index.add_messages(GARDEN, thread_id="home")
    index.add_messages(thread([("The quarterly report is due on Friday.", "I will draft it.")]), thread_id="work")
    n_work = len(all_ids(index, "work"))
    deleted = index.delete(thread_id="home")
    assert deleted > 0
    assert all_ids(index, "home") == set()
    assert len(all_ids(index, "work")) == n_work
    with pytest.raises(InputError):
        index.delete()


def test_writes_are_chunked_to_the_store_batch_size(make_index, hash_embedder):
    index = make_index(embedder=hash_embedder)
    index.store.chroma.max_batch = 3
    result = index.add_messages(GARDEN, thread_id="home")
    assert index.store.count() == result.added > 3


def test_failed_embedding_writes_nothing(make_index, hash_embedder):
    index = make_index(embedder=CountingEmbedder(hash_embedder, fail_after=0))
    with pytest.raises(EmbeddingError, match="CountingEmbedder") as e:  # naming the embedder, its error the cause
        index.add_messages(GARDEN, thread_id="home")
    assert isinstance(e.value.__cause__, RuntimeError)
    assert index.store.count() == 0


def test_reserved_metadata_keys_are_stored_under_a_prefix(make_index, hash_embedder):
    """One policy for every entry point: a caller key ctxret uses itself is kept as ``meta_<key>``, and found by the
    caller's name; ``thread_id`` is one key (the thread), so another thread in the metadata is an error."""
    index = make_index(embedder=hash_embedder)
    with pytest.raises(InputError, match="thread_id"):
        index.add_messages(GARDEN, thread_id="home", metadata={"thread_id": "other", "kind": "note"})
    assert index.store.count() == 0  # refused before anything was written
    index.add_messages(GARDEN, thread_id="home", metadata={"thread_id": "home", "kind": "note", "group": 3})
    metas = [r["metadata"] for r in index.store.chroma.iter_records(None)]
    assert metas and all(m["thread_id"] == "home" and m["kind"] == "turn" for m in metas)
    assert all((m["meta_kind"], m["meta_group"]) == ("note", 3) and "meta_thread_id" not in m for m in metas)
    found = index.search("dentist", k=1, where={"$and": [{"kind": "note"}, {"group": 3}]})[0].hits
    assert found and found[0].metadata["kind"] == "note"  # the caller's names find the caller's keys
    assert index.search("dentist", k=1, where={"ctxret:kind": "turn"})[0].hits  # and ctxret's fields by namespace
    assert index.search("dentist", k=1, where={"kind": "turn"})[0].hits == ()  # 'kind' is the caller's: 'note'


def test_empty_message_and_bad_k(make_index, hash_embedder):
    index = make_index(embedder=hash_embedder)
    index.add_messages(GARDEN, thread_id="home")
    assert index.search("   \n ") == []
    with pytest.raises(InputError, match="k"):
        index.search("dentist", k=0)


def test_async_search_matches_sync(make_index):
    index = make_index()
    index.add_messages(GARDEN, thread_id="home")
    message = "When is the dentist appointment? Also what colour for the kitchen cabinets?"
    sync = index.search(message, k=3, thread_id="home")
    async_ = asyncio.run(index.asearch(message, k=3, thread_id="home"))
    assert [[h.id for h in g.hits] for g in sync] == [[h.id for h in g.hits] for g in async_]
    assert np.allclose([h.score for g in sync for h in g.hits], [h.score for g in async_ for h in g.hits], atol=1e-6)


def test_documents_sections_are_context(make_index):
    index = make_index()
    doc = (
        "# Runbook\n\n## Rollback\nRun deploy.sh --rollback and page the on-call.\n\n"
        "## Backups\nSnapshots run nightly at 2 am."
    )
    result = index.add_documents(
        [{"text": doc, "title": "Ops runbook", "id": "runbook", "metadata": {"team": "infra"}}]
    )
    assert result.turns == 2
    groups = index.search("How do I roll back a deploy?", k=1, where={"team": "infra"})
    hit = groups[0].hits[0]
    assert hit.text.startswith("[Ops runbook · Runbook › Rollback]")
    assert hit.metadata["doc_id"] == "runbook" and hit.metadata["ctxret:kind"] == "section"
    # re-adding an edited document with the same id replaces its changed section only
    edited = doc.replace("Snapshots run nightly at 2 am.", "Snapshots run hourly.")
    again = index.add_documents(
        [{"text": edited, "title": "Ops runbook", "id": "runbook", "metadata": {"team": "infra"}}]
    )
    assert again.turns_changed == 1 and again.replaced == 1
    bodies = [r["metadata"]["body"] for r in index.store.chroma.iter_records({"doc_id": "runbook"})]
    assert any("hourly" in b for b in bodies) and not any("nightly" in b for b in bodies)


def test_stats(make_index, hash_embedder):
    index = make_index(embedder=hash_embedder)
    index.add_messages(GARDEN, thread_id="home")
    index.add_messages(thread([("Book a table for two.", "Done.")]), thread_id="other")
    stats = index.stats()
    assert stats["threads"] == 2 and stats["turns"] == 5 and stats["pieces"] == index.store.count()
    assert stats["config"]["model_id"] == index.embedder.model_id


def test_large_tool_result_is_packed_to_fit_the_model(make_index, local_embedder):
    index = make_index()
    rows = "\n".join(f"SHP-{4000 + i}, Rotterdam, delivered, {100 + i} kg" for i in range(400))
    rows = rows.replace("SHP-4271, Rotterdam, delivered", "SHP-4271, Reykjavik, held at customs: missing EORI number")
    messages = [
        {"role": "user", "content": "Export the shipments please."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "logistics_export", "arguments": '{"warehouse": "north"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": rows},
    ]
    index.add_messages(messages, thread_id="ops")
    records = list(index.store.chroma.iter_records(None, include=("metadatas", "documents")))
    texts = [r["document"] for r in records]
    assert max(local_embedder.count_tokens(texts)) <= local_embedder.max_tokens
    tool = sorted(
        (r["metadata"] for r in records if r["metadata"]["source_kind"] == "tool"), key=lambda m: m["ordinal"]
    )
    assert len(tool) > 10
    joined = "".join("".join(m["body"] for m in tool).split())
    assert "".join(rows.split()) in joined  # the whole result is stored, nothing truncated
    groups = index.search("Which shipment is held at customs?", k=3, thread_id="ops")
    assert any("Reykjavik" in h.text for h in groups[0].hits)


def test_the_seed_dogs_case(tmp_path, local_embedder):
    """A long engineering correction that also asks for the dogs' names: the dog part's group finds them;
    one vector does not."""
    case = json.loads((DATA / "dogs_thread.json").read_text())
    index = ContextualIndex(tmp_path / "dogs", embedder=local_embedder)
    index.add_messages(case["messages"], thread_id=case["thread_id"])
    fact = case["dog_fact_substring"]
    groups = index.search(case["message"], k=5, thread_id=case["thread_id"])
    assert len(groups) > 2
    dog_groups = [g for g in groups if "dog" in g.part.lower()]
    assert dog_groups, [g.part for g in groups]
    assert any(fact in h.text for g in dog_groups for h in g.hits[:1]), [
        (g.part, [h.text[:60] for h in g.hits]) for g in dog_groups
    ]
    single = index.search(case["message"], k=5, split=False, thread_id=case["thread_id"], score_threshold=None)
    assert fact not in single[0].hits[0].text
    # the same message as a voice transcript (no punctuation): the topic switch still gives the dogs their part
    spoken = re.sub(r"[.,?!]", "", case["message"]).lower()
    groups = index.search(spoken, k=5, thread_id=case["thread_id"])
    assert groups[-1].part == "oh and totally unrelated what were my dogs' names again"
    assert fact in groups[-1].hits[0].text, [h.text[:60] for h in groups[-1].hits]


def test_score_scales_convert_by_name():
    assert cosine_to_distance(0.5) == pytest.approx(0.5)
    assert distance_to_cosine(0.25) == pytest.approx(0.75)
    assert cosine_to_unit_interval(0.5) == pytest.approx(0.75)  # the seed's 0.75 floor is cosine 0.5
    assert unit_interval_to_cosine(0.75) == pytest.approx(0.5)


def test_invalid_collection_name_is_refused(tmp_path, hash_embedder):
    with pytest.raises(InputError, match="collection name"):
        ContextualIndex(tmp_path, embedder=hash_embedder, collection="x")


def test_flatten_metadata():
    from ctxret.storage.schema import flatten_metadata

    flat = flatten_metadata({"a": {"b": 1, "c": {"d": "x"}}, "l": [1, 2], "n": None, "f": 1.5, "t": True})
    assert flat == {"a.b": 1, "a.c.d": "x", "l": "[1, 2]", "f": 1.5, "t": True}
    with pytest.raises(InputError):
        flatten_metadata({"bad": float("nan")})


def test_async_search_awaits_the_embedders_async_path(tmp_path, local_embedder):
    class AsyncOnly(CountingEmbedder):
        def __init__(self, inner):
            super().__init__(inner)
            self.sync_allowed = True
            self.async_calls = 0

        def embed(self, texts):
            assert self.sync_allowed, "asearch used the sync embedding path"
            return super().embed(texts)

        async def aembed(self, texts):
            self.async_calls += 1
            return await self.inner.aembed(texts)

    emb = AsyncOnly(local_embedder)
    index = ContextualIndex(tmp_path / "a", embedder=emb)
    index.add_messages(GARDEN, thread_id="home")
    emb.sync_allowed = False
    groups = asyncio.run(
        index.asearch("When is the dentist appointment now? What colour are the kitchen cabinets?", k=1)
    )
    assert emb.async_calls == 1 and len(groups) == 2
