"""Hybrid search end to end: real LocalEmbedder, real embedded Chroma, the SQLite FTS5 lexical index.

Covers: the lexical index staying in step with Chroma through every write (add, replace a changed
turn, delete a thread, delete by filter, clear, reindex, rebuild), repair on open, persistence,
thread scoping, CJK, per-part groups, the caller's where filter, the floor with fusion, score
names, async, per-call overrides and the adapters passing the settings through.
"""

from __future__ import annotations

import asyncio
import uuid

import numpy as np
import pytest
from ctxret import ContextualIndex, InputError, SearchSettings
from ctxret.query.fusion import FusionMethod, FusionSettings
from ctxret.storage.lexical import default_lexical_path
from sample_threads import GARDEN, thread

TRAVEL = thread(
    [
        (
            "Book me a flight to Lisbon on the 3rd of December.",
            "Your flight TP1347 to Lisbon is booked for December 3rd.",
        ),
        (
            "The hotel booking reference is XJ42Q for the Alfama guesthouse.",
            "Saved: Alfama guesthouse, reference XJ42Q.",
        ),
        ("My passport expires in March, should I renew it?", "Yes, renew the passport before travelling."),
    ],
    day=2,
)
JAPANESE = thread(
    [
        ("昨日、東京タワーに行きました。夜景がとてもきれいでした。", "素敵ですね。"),
        ("明日は京都で会議があります。資料を準備してください。", "会議の資料を準備します。"),
        ("富士山の写真を友達に送りました。", "きっと喜ぶでしょう。"),
    ],
    day=3,
)
TENANTS = [f"tenant-{n}" for n in range(6)]


def tenant_thread(n: int) -> list[dict]:
    return thread(
        [
            (
                f"Invoice INV-{n}00 for the shipping of order {n}42 is overdue.",
                f"I flagged invoice INV-{n}00 as overdue.",
            ),
            (f"The refund for order {n}42 should go to account ending {n}{n}7.", "Refund noted."),
        ],
        day=4 + n,
    )


def chroma_ids(index: ContextualIndex) -> dict[str, str]:
    return {r["id"]: str(r["metadata"]["thread_id"]) for r in index.store.chroma.iter_records(None)}


def assert_in_step(index: ContextualIndex) -> None:
    """Chroma and the lexical index hold the same ids, each under the same thread."""
    lex = index.lexical_index
    assert lex is not None
    store = chroma_ids(index)
    assert lex.ids() == set(store)
    for th in set(store.values()):
        assert lex.ids(th) == {i for i, t in store.items() if t == th}
    assert not lex.journal.pending


def ids_of(groups) -> list[list[str]]:
    return [[h.id for h in g.hits] for g in groups]


@pytest.fixture
def make(tmp_path, local_embedder):
    def _make(path=None, rebuild=False, **kw) -> ContextualIndex:
        opener = ContextualIndex.rebuild if rebuild else ContextualIndex
        return opener(path or tmp_path / "store", embedder=local_embedder, **kw)

    return _make


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, local_embedder):
    """One embedded index with several threads, shared by the read-only tests."""
    index = ContextualIndex(tmp_path_factory.mktemp("hybrid") / "store", embedder=local_embedder)
    index.add_messages(GARDEN, thread_id="garden")
    index.add_messages(TRAVEL, thread_id="travel", metadata={"project": "trips"})
    index.add_messages(JAPANESE, thread_id="ja")
    for n, th in enumerate(TENANTS):
        index.add_messages(tenant_thread(n), thread_id=th)
    return index


# -- defaults per store ---------------------------------------------------------------------------
def test_lexical_defaults_per_store(tmp_path, local_embedder, make):
    import chromadb
    from chromadb.config import Settings

    embedded = make()
    assert embedded.lexical_index is not None
    assert embedded.lexical_index.path == str(default_lexical_path(tmp_path / "store", "ctxret"))
    assert (tmp_path / "store" / "ctxret-lexical-ctxret.sqlite3").exists()
    assert embedded.stats()["lexical"] == embedded.lexical_index.path

    memory = ContextualIndex(in_memory=True, collection=f"m-{uuid.uuid4().hex[:8]}", embedder=local_embedder)
    assert memory.lexical_index is not None and memory.lexical_index.path == ":memory:"

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    name = f"c-{uuid.uuid4().hex[:8]}"
    plain = ContextualIndex(client=client, collection=name, embedder=local_embedder)
    assert plain.lexical_index is None  # no file: unscoped searches are dense
    plain.add_messages(GARDEN[:2], thread_id="g")
    scoped = plain.search("tomatoes", thread_id="g", score_threshold=None)[0].hits
    assert scoped and "bm25" in scoped[0].scores  # a thread scope gets BM25 from the thread's pieces
    assert "bm25" not in plain.search("tomatoes", score_threshold=None)[0].hits[0].scores
    custom = ContextualIndex(
        client=client, collection=name, embedder=local_embedder, lexical_path=tmp_path / "c.sqlite3"
    )
    assert custom.lexical_index is not None

    off = make(tmp_path / "off", lexical=False)
    assert off.lexical_index is None
    assert not (tmp_path / "off" / "ctxret-lexical-ctxret.sqlite3").exists()
    off.add_messages(GARDEN[:2], thread_id="g")
    with pytest.raises(InputError, match="no lexical index"):
        off.search("tomatoes", lexical=True)
    with pytest.raises(InputError, match="lexical must be"):
        make(tmp_path / "bad", lexical="yes")


def test_without_fts5_the_default_falls_back_to_dense(tmp_path, make, monkeypatch):
    import ctxret.storage.pieces as pieces_module

    monkeypatch.setattr(pieces_module, "fts5_available", lambda: False)
    index = make(tmp_path / "nofts")
    assert index.lexical_index is None
    index.add_messages(GARDEN[:2], thread_id="g")
    assert set(index.search("tomatoes", score_threshold=None)[0].hits[0].scores) == {"cosine", "coverage", "relevance"}


@pytest.mark.slow  # a Chroma server
def test_chroma_server_gets_its_lexical_half_from_a_local_file(chroma_server, tmp_path, local_embedder):
    name = f"s-{uuid.uuid4().hex[:8]}"
    plain = ContextualIndex(host=chroma_server.host, port=chroma_server.port, collection=name, embedder=local_embedder)
    assert plain.lexical_index is None
    plain.add_messages(TRAVEL, thread_id="travel")
    # lexical switched on later for the existing server collection: filled from Chroma's stored texts
    hybrid = ContextualIndex(
        host=chroma_server.host,
        port=chroma_server.port,
        collection=name,
        embedder=local_embedder,
        lexical_path=tmp_path / "server-lexical.sqlite3",
    )
    assert_in_step(hybrid)
    top = hybrid.search("XJ42Q", k=1, thread_id="travel")[0].hits[0]
    assert "XJ42Q" in top.text and top.scores["bm25"] > 0


# -- keeping in step with Chroma ------------------------------------------------------------------
def test_add_replace_delete_clear_stay_in_step(make):
    index = make()
    r = index.add_messages(GARDEN, thread_id="garden")
    assert r.added > 0
    assert_in_step(index)
    index.add_messages(TRAVEL, thread_id="travel")
    assert_in_step(index)
    # unchanged turns: nothing written anywhere
    before = index.lexical_index.ids()
    assert index.add_messages(GARDEN, thread_id="garden").added == 0
    assert index.lexical_index.ids() == before
    # replace a changed turn: the old pieces leave both stores, the new text is searchable
    old_turn = {r["id"] for r in index.store.chroma.iter_records({"turn_id": "garden#2"})}
    changed = [dict(m) for m in GARDEN]
    changed[2]["content"] = "Our orthodontist appointment moved to Friday at 10 am."
    r = index.replace_messages(changed, thread_id="garden")
    assert r.replaced >= 1 and r.turns_changed == 1
    assert_in_step(index)
    new_turn = {r["id"] for r in index.store.chroma.iter_records({"turn_id": "garden#2"})}
    gone = old_turn - new_turn
    assert gone and not (gone & index.lexical_index.ids())
    assert new_turn <= index.lexical_index.ids()
    hit = index.search("orthodontist", k=1, thread_id="garden")[0].hits[0]
    assert "orthodontist" in hit.text and hit.scores["bm25"] > 0
    # delete a thread
    n = index.delete(thread_id="travel")
    assert n > 0
    assert_in_step(index)
    assert index.lexical_index.ids("travel") == set()
    assert all(not g.hits for g in index.search("XJ42Q Lisbon", thread_id="travel", score_threshold=None))
    # delete by filter
    index.delete(where={"ctxret:source_kind": "assistant"})
    assert_in_step(index)
    # clear
    index.clear()
    assert_in_step(index)
    assert index.lexical_index.count() == 0 == index.store.count()


def test_reindex_and_rebuild_stay_in_step(tmp_path, make):
    index = make()
    index.add_messages(GARDEN, thread_id="garden")
    index.add_messages(JAPANESE, thread_id="ja")
    old = set(chroma_ids(index))
    index.reindex()
    assert_in_step(index)
    assert set(chroma_ids(index)) == old
    # a rebuild under another piece budget changes every id; the lexical index follows
    rebuilt = make(piece_bytes=300, rebuild=True)
    assert_in_step(rebuilt)
    assert rebuilt.lexical_index.ids() == set(chroma_ids(rebuilt))
    assert rebuilt.search("東京タワー", k=1, thread_id="ja")[0].hits[0].scores["bm25"] > 0


def test_repair_on_open_after_a_crash_between_the_two_writes(tmp_path, make, monkeypatch):
    index = make()
    index.add_messages(GARDEN[:4], thread_id="garden")

    def crash(*args, **kwargs):
        raise RuntimeError("power cut")

    monkeypatch.setattr(index.lexical_index, "write", crash)
    with pytest.raises(RuntimeError, match="power cut"):
        index.add_messages(GARDEN, thread_id="garden")  # Chroma written, lexical not
    monkeypatch.undo()
    assert index.lexical_index.journal.pending
    assert index.lexical_index.ids() != set(chroma_ids(index))
    index.add_messages(TRAVEL, thread_id="travel")  # a later good write does not hide the gap
    assert index.lexical_index.journal.pending
    reopened = make()  # repairs from Chroma's stored documents, no re-embedding
    assert_in_step(reopened)
    assert reopened.search("car insurance November", k=1, thread_id="garden")[0].hits[0].scores["bm25"] > 0


def test_repair_on_open_when_lexical_is_switched_on_later(tmp_path, make, local_embedder):
    dense = make(lexical=False)
    dense.add_messages(TRAVEL, thread_id="travel")
    calls = []
    real_embed = local_embedder.embed

    class Counting:
        """The same embedder, counting calls: the repair must not embed pieces."""

        def __getattr__(self, name):
            return getattr(local_embedder, name)

        def embed(self, texts):
            calls.append(len(texts))
            return real_embed(texts)

    hybrid = ContextualIndex(tmp_path / "store", embedder=Counting())
    assert calls == []
    assert_in_step(hybrid)
    assert hybrid.search("XJ42Q", k=1)[0].hits[0].scores["bm25"] > 0


def test_orphans_never_surface_and_are_removed(make):
    index = make()
    index.add_messages(GARDEN[:2], thread_id="garden")
    index.lexical_index.upsert(["ghost"], ["ghostly phantom words"], ["garden"], ["garden#9"])
    groups = index.search("ghostly phantom", k=5, thread_id="garden", score_threshold=None)
    assert all(h.id != "ghost" for g in groups for h in g.hits)
    report = index.sync_lexical()
    assert report.removed == 1 and report.added == 0
    assert_in_step(index)
    # and on open: counts differ, so the id sets are compared
    index.lexical_index.upsert(["ghost2"], ["more ghost words"], ["garden"], ["garden#9"])
    assert_in_step(make())


# -- persistence ----------------------------------------------------------------------------------
def test_reopen_gives_the_same_lexical_results(tmp_path, make):
    index = make()
    index.add_messages(GARDEN, thread_id="garden")
    index.add_messages(JAPANESE, thread_id="ja")
    queries = ["kitchen cabinets green", "東京タワー 夜景", "car insurance"]
    before = [index.lexical_index.search(q, 10) for q in queries]
    hybrid_before = [[(h.id, h.scores["bm25"]) for g in index.search(q) for h in g.hits] for q in queries]
    reopened = make()
    assert not reopened.lexical_index.fresh
    assert reopened.sync_lexical().changed is False
    assert [reopened.lexical_index.search(q, 10) for q in queries] == before
    assert [[(h.id, h.scores["bm25"]) for g in reopened.search(q) for h in g.hits] for q in queries] == hybrid_before


# -- search behaviour ------------------------------------------------------------------------------
def test_thread_scoping_never_leaks(corpus):
    queries = [
        "invoice overdue shipping",
        "refund account",
        "tomatoes blight",
        "Lisbon flight",
        "東京タワー",
        "order 142",
    ]
    for th in [*TENANTS, "garden", "travel", "ja"]:
        for q in queries:
            for g in corpus.search(q, k=5, thread_id=th, score_threshold=None):
                assert all(h.metadata["thread_id"] == th for h in g.hits), (th, q)
    pair = ["tenant-1", "tenant-4"]
    for g in corpus.search("invoice INV-100 INV-400 overdue", k=8, thread_id=pair, score_threshold=None):
        assert {h.metadata["thread_id"] for h in g.hits} <= set(pair)
    # the tenant whose invoice number is asked for comes first inside its scope
    top = corpus.search("INV-300", k=1, thread_id="tenant-3")[0].hits[0]
    assert "INV-300" in top.text


def test_cjk_corpus_is_found_lexically(corpus):
    for query, expected in [("東京タワー", "東京タワー"), ("京都の会議", "京都"), ("富士山", "富士山")]:
        top = corpus.search(query, k=1, thread_id="ja")[0].hits[0]
        assert expected in top.text
        assert top.scores["bm25"] > 0
    # unscoped too: the Japanese pieces win over every English thread
    top = corpus.search("富士山の写真", k=1)[0].hits[0]
    assert top.metadata["thread_id"] == "ja"


def test_groups_never_exceed_k_and_keep_per_part_separation(corpus):
    message = (
        "What was wrong with the tomatoes in the garden?\n"
        "When does the car insurance renew?\n"
        "Which colour for the kitchen cabinets?"
    )
    for k in (1, 2, 3, 6):
        groups = corpus.search(message, k=k, thread_id="garden", score_threshold=None)
        assert [g.part_index for g in groups] == [0, 1, 2]
        assert all(len(g.hits) == k for g in groups)  # 8 pieces in the thread: never fewer than asked
        for g in groups:
            assert len({h.id for h in g.hits}) == len(g.hits)
            assert [h.score for h in g.hits] == sorted((h.score for h in g.hits), reverse=True)
    groups = corpus.search(message, k=2, thread_id="garden")
    assert "tomatoes" in groups[0].hits[0].text
    assert "insurance" in groups[1].hits[0].text
    assert "cabinets" in groups[2].hits[0].text or "green" in groups[2].hits[0].text


def test_where_filter_holds_for_lexical_hits(corpus):
    # the user pieces match these words best, but only assistant pieces may come back
    groups = corpus.search(
        "tomatoes blight lower leaves back garden", k=5, where={"ctxret:source_kind": "assistant"}, score_threshold=None
    )
    hits = [h for g in groups for h in g.hits]
    assert hits and all(h.metadata["ctxret:source_kind"] == "assistant" for h in hits)
    groups = corpus.search(
        "XJ42Q passport Lisbon invoice tomatoes", k=10, where={"project": "trips"}, score_threshold=None
    )
    hits = [h for g in groups for h in g.hits]
    assert hits and all(h.metadata["thread_id"] == "travel" for h in hits)
    # filter and thread scope together
    groups = corpus.search(
        "refund invoice", k=10, thread_id="tenant-2", where={"ctxret:source_kind": "user"}, score_threshold=None
    )
    hits = [h for g in groups for h in g.hits]
    assert hits and all(
        h.metadata["thread_id"] == "tenant-2" and h.metadata["ctxret:source_kind"] == "user" for h in hits
    )


def test_scores_are_named_and_exact(corpus):
    parts, qvecs = corpus.query_vectors("hotel booking reference XJ42Q")
    groups = corpus.search("hotel booking reference XJ42Q", k=5, thread_id="travel", score_threshold=None)
    hits = groups[0].hits
    vecs = corpus.store.chroma.get([h.id for h in hits], include=("embeddings",))
    by_id = {r["id"]: np.asarray(r["embedding"], dtype=np.float64) for r in vecs}
    q = qvecs[0] / np.linalg.norm(qvecs[0])
    for h in hits:
        assert set(h.scores) == {"cosine", "bm25", "fused", "coverage", "relevance"}
        assert h.score == h.scores["fused"]
        assert 0.0 <= h.scores["coverage"] <= 1.0 and 0.0 <= h.scores["relevance"] <= 1.0
        assert 0.0 <= h.score <= 1.0  # convex: a [0, 1] scale
        assert h.scores["bm25"] >= 0.0
        v = by_id[h.id]
        assert h.scores["cosine"] == pytest.approx(float(v @ q / np.linalg.norm(v)), abs=1e-4)
    assert "XJ42Q" in hits[0].text
    dense = corpus.search("hotel booking reference XJ42Q", k=5, thread_id="travel", lexical=False, score_threshold=None)
    for h in dense[0].hits:
        assert set(h.scores) == {"cosine", "coverage", "relevance"} and h.scores["cosine"] == h.score


def test_floor_with_fusion_keeps_strong_lexical_hits_and_empty_parts(corpus):
    floor = corpus.cosine_floor
    # a piece holding the part's rare words is kept although no cosine reaches 0.99 ...
    hits = corpus.search("Alfama guesthouse reference", k=10, thread_id="travel", cosine_floor=0.99)[0].hits
    assert hits and all("Alfama" in h.text for h in hits)
    dense_only = corpus.search(
        "Alfama guesthouse reference", k=10, thread_id="travel", cosine_floor=0.99, lexical=False
    )
    assert dense_only[0].hits == ()
    # ... unless the lexical exemption is off: then the cosine floor holds for every hit
    strict = corpus.search(
        "Alfama guesthouse reference", k=10, thread_id="travel", cosine_floor=0.99, lexical_floor=None
    )
    assert strict[0].hits == ()
    # a part about nothing in memory still comes back empty (common words weigh nothing)
    groups = corpus.search(
        "How long is my flight to Lisbon? Explain lattice QCD gluon propagators in detail.", k=3, thread_id="travel"
    )
    assert len(groups) == 2 and groups[0].hits and groups[1].hits == ()
    # every kept hit clears the cosine floor or holds >= 30% of its part's term weight
    for q in ["something about my passport", "the hotel and the flight", "order 142 refund"]:
        for th in ["travel", "tenant-1"]:
            for g in corpus.search(q, k=10, thread_id=th):
                cov = corpus.lexical_index.coverage(g.part, [h.id for h in g.hits])
                for h in g.hits:
                    assert h.scores["cosine"] >= floor or cov[h.id] >= 0.3, (q, h.text, h.scores, cov[h.id])
    # no floor at all: k hits
    unfloored = corpus.search("lattice QCD gluon propagators", k=3, thread_id="travel", score_threshold=None)
    assert len(unfloored[0].hits) == 3


def test_dense_only_behaviour_is_unchanged(corpus, local_embedder):
    plain = ContextualIndex(corpus.store.chroma.path, embedder=local_embedder, lexical=False)
    for q in ["tomatoes blight", "Lisbon flight. Passport renewal?", "東京タワー"]:
        a = corpus.search(q, k=3, lexical=False)
        b = plain.search(q, k=3)
        assert [[(h.id, h.score, dict(h.scores)) for h in g.hits] for g in a] == [
            [(h.id, h.score, dict(h.scores)) for h in g.hits] for g in b
        ]


async def test_asearch_matches_search(corpus):
    message = "Where is the hotel? And when is the dentist?"
    want = corpus.search(message, k=3, score_threshold=None)
    got = await corpus.asearch(message, k=3, score_threshold=None)
    assert ids_of(got) == ids_of(want)
    assert [[h.scores for h in g.hits] for g in got] == [[h.scores for h in g.hits] for g in want]
    both = await asyncio.gather(*(corpus.asearch(q, k=2, fusion="rrf") for q in ["refund", "invoice", "富士山"]))
    assert len(both) == 3


def test_per_call_overrides(corpus):
    q = "flight to Lisbon in December"
    rrf = corpus.search(q, k=5, thread_id="travel", fusion="rrf", score_threshold=None)[0].hits
    assert all(h.score <= 2 / 61 + 1e-12 for h in rrf)
    weighted = corpus.search(q, k=5, thread_id="travel", fusion=FusionMethod.WEIGHTED_RRF, lexical_weight=0.9, rrf_k=10)
    assert all(h.score <= 1 / 11 + 1e-12 for g in weighted for h in g.hits)
    lexical_only = corpus.search(q, k=5, thread_id="travel", lexical_weight=1.0, score_threshold=None)[0].hits
    bm = [h.scores["bm25"] for h in lexical_only]
    assert bm == sorted(bm, reverse=True)
    dense_only = corpus.search(q, k=5, thread_id="travel", lexical_weight=0.0, score_threshold=None)[0].hits
    cos = [h.scores["cosine"] for h in dense_only]
    assert cos == sorted(cos, reverse=True)
    assert len(corpus.search(q, k=2, candidates=1, thread_id="travel", score_threshold=None)[0].hits) == 2  # k wins
    with pytest.raises(InputError, match="unknown fusion"):
        corpus.search(q, fusion="borda")
    with pytest.raises(InputError, match="lexical_weight"):
        corpus.search(q, lexical_weight=2)
    with pytest.raises(InputError, match="candidates"):
        corpus.search(q, candidates=0)
    with pytest.raises(InputError, match="lexical_floor"):
        corpus.search(q, lexical_floor=1.5)


def test_index_level_settings(tmp_path, make):
    # the index's search defaults
    index = make(settings=SearchSettings(hybrid=FusionSettings(method="rrf", rrf_k=1, candidates=5)))
    index.add_messages(TRAVEL, thread_id="travel")
    hits = index.search("Lisbon", k=3, score_threshold=None)[0].hits
    assert hits[0].score <= 1 / 2 + 1 / 2 + 1e-12 and hits[0].score > 1 / 61 * 2
    with pytest.raises(InputError, match="unknown fusion"):
        make(tmp_path / "x", settings=SearchSettings(hybrid=FusionSettings(method="nope")))
    with pytest.raises(InputError, match="search option"):  # a search option is not a constructor argument
        make(tmp_path / "y", fusion="rrf")


def test_adapters_pass_the_settings_through(corpus):
    from langchain_ctxret import ContextualRetriever

    retriever = ContextualRetriever(
        index=corpus,
        k=2,
        thread_id="travel",
        score_threshold=None,
        search_kwargs={"fusion": "weighted_rrf", "lexical_weight": 0.8},
    )
    docs = retriever.invoke("hotel reference XJ42Q")
    assert docs and "XJ42Q" in docs[0].page_content
    meta = docs[0].metadata
    assert meta["score_scale"] == "relevance" and meta["score"] == meta["score_relevance"]
    assert {"score_cosine", "score_bm25", "score_fused"} <= set(meta)
    assert meta["score_fused"] <= 1 / 61 + 1e-12  # weighted RRF's scale
    dense = retriever.invoke("hotel reference XJ42Q", search_kwargs={"lexical": False})
    assert "score_bm25" not in dense[0].metadata and "score_fused" not in dense[0].metadata

    from llamaindex_ctxret import ContextualRetriever as LlamaRetriever

    retriever = LlamaRetriever(index=corpus, similarity_top_k=2, thread_id="travel", score_threshold=None)
    nodes = retriever.retrieve("hotel reference XJ42Q")
    assert nodes and "XJ42Q" in nodes[0].node.get_content()
