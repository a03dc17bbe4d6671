"""Thread-scoped search from memory: the same answers as Chroma and the lexical file, never stale."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from ctxret import ContextualIndex
from ctxret.storage.bm25 import BM25Corpus
from ctxret.storage.lexical import LexicalIndex
from ctxret.storage.schema import Scope
from ctxret.storage.tokenize import analysis
from ctxret.storage.where import Unsupported, compile_where
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

TEXTS = {
    "a1": "The quick brown fox jumps over the lazy dog near the river bank.",
    "a2": "Caroline went to the LGBTQ support group on Tuesday evening.",
    "a3": "Melanie painted a sunrise over the lake last summer.",
    "a4": "The support groups meet every week; Caroline attends them often.",
    "a5": "東京タワーに行きました。 Tokyo tower at night.",
    "a6": "Running shoes, running socks and a running watch for the marathon.",
    "a7": "Dogs and foxes are related animals; the fox is wild.",
}
QUERIES = [
    "When did Caroline attend a support group?",
    "fox dog",
    "running marathon shoes",
    "東京タワー",
    "painting the lake",
    "What did Melanie paint?",
    "the",
    "nothing matches zzz",
]


def test_scoped_bm25_is_the_lexical_files_bm25():
    """One thread's in-memory BM25 gives FTS5's numbers over a file holding that thread."""
    a = analysis()
    corpus = BM25Corpus(list(TEXTS), [a.index_tokens(t) for t in TEXTS.values()], a)
    with LexicalIndex(analysis=a) as lex:
        lex.upsert(list(TEXTS), list(TEXTS.values()), ["t"] * len(TEXTS), [f"t#{i}" for i in range(len(TEXTS))])
        for q in QUERIES:
            ours, theirs = corpus.search(q, 10), lex.search(q, 10, ["t"])
            assert [i for i, _ in ours] == [i for i, _ in theirs], q
            assert [s for _, s in ours] == pytest.approx([s for _, s in theirs], rel=1e-9), q
            assert corpus.scores(q, list(TEXTS)) == pytest.approx(lex.scores(q, list(TEXTS), ["t"]), rel=1e-9)
            assert corpus.coverage(q, list(TEXTS)) == pytest.approx(lex.coverage(q, list(TEXTS)), rel=1e-9)


SCALARS = st.one_of(
    st.integers(-3, 3), st.floats(-3, 3, allow_nan=False), st.sampled_from(["red", "blue", "x"]), st.booleans()
)
KEYS = st.sampled_from(["n", "colour", "flag", "missing"])
LEAF = st.builds(
    lambda k, op, v: {k: {op: v}} if op != "=" else {k: v},
    KEYS,
    st.sampled_from(["=", "$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
    SCALARS,
) | st.builds(
    lambda k, op, vs: {k: {op: vs}}, KEYS, st.sampled_from(["$in", "$nin"]), st.lists(SCALARS, min_size=1, max_size=3)
)
WHERE = st.recursive(
    LEAF,
    lambda kids: st.builds(
        lambda op, cs: {op: cs}, st.sampled_from(["$and", "$or"]), st.lists(kids, min_size=2, max_size=3)
    ),
    max_leaves=4,
)


@pytest.fixture(scope="module")
def chroma_collection():
    import chromadb
    from chromadb.config import Settings

    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    col = client.create_collection(f"w-{uuid.uuid4().hex[:8]}", embedding_function=None)
    metas = []
    for i in range(24):
        m = {"n": [-2, -1, 0, 1, 2, 1.5][i % 6], "colour": ["red", "blue", "x"][i % 3], "flag": bool(i % 2)}
        if i % 5 == 0:
            del m["colour"]
        metas.append(m)
    col.add(ids=[f"r{i}" for i in range(24)], embeddings=np.eye(24, 4, dtype=np.float32) + 0.1, metadatas=metas)
    return col, metas


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=WHERE)
def test_where_evaluator_agrees_with_chroma(chroma_collection, where):
    col, metas = chroma_collection
    try:
        pred = compile_where(where)
    except Unsupported:
        return  # such a search goes to Chroma itself
    try:
        theirs = set(col.get(where=where)["ids"])
    except Exception:  # Chroma refuses the filter: the evaluator must not accept something Chroma rejects silently
        return
    ours = {f"r{i}" for i, m in enumerate(metas) if pred(m)}
    assert ours == theirs, where


@pytest.fixture(scope="module")
def threads_index(tmp_path_factory, local_embedder):
    index = ContextualIndex(tmp_path_factory.mktemp("scoped") / "s", embedder=local_embedder, progress=False)
    for t in range(6):
        index.add_messages(
            [
                {"role": "user", "content": f"Thread {t}: plan the trip to city number {t} and book a hotel."},
                {"role": "assistant", "content": f"Booked hotel {t * 11} in city {t}; the train leaves at {8 + t}:15."},
                {"role": "user", "content": f"Also remind me to water the plants {t} times a week."},
                {"role": "assistant", "content": f"Reminder set: plants, {t} times weekly, starting Monday."},
            ],
            thread_id=f"t{t}",
            metadata={"team": "red" if t % 2 else "blue"},
        )
    return index


@pytest.mark.parametrize("where", [None, {"source_kind": "assistant"}, {"team": "red"}])
def test_memory_path_gives_chromas_dense_answers(threads_index, where, local_embedder):
    store = threads_index.store
    q = local_embedder.embed(["When does the train leave?", "how often do I water the plants"])
    for scope in (Scope("t3", where), Scope(["t1", "t4"], where)):
        view, _ = store.resolve(scope)
        assert view is not store
        ours = view.dense(q, 5, scope)
        theirs = store.dense(q, 5, scope)  # Chroma's filtered HNSW query
        for a, b in zip(ours, theirs, strict=True):
            assert [r[0] for r in a] == [r[0] for r in b]
            assert [r[2] for r in a] == pytest.approx([r[2] for r in b], abs=1e-5)


def test_the_cache_never_serves_stale_pieces(tmp_path, local_embedder):
    index = ContextualIndex(tmp_path / "c", embedder=local_embedder, progress=False)
    msgs = [{"role": "user", "content": "My locker code is 4471."}, {"role": "assistant", "content": "Noted: 4471."}]
    index.add_messages(msgs, thread_id="u")
    assert "4471" in index.search("locker code", k=1, thread_id="u")[0].hits[0].text
    loads = index.store.cache.loads
    for _ in range(3):  # repeated searches of a thread read it once
        index.search("locker code", k=1, thread_id="u")
    assert index.store.cache.loads == loads
    msgs[0]["content"] = "My locker code is now 9902."  # the turn changes: its old pieces go
    index.replace_messages(msgs, thread_id="u")
    texts = [h.text for g in index.search("locker code", k=5, thread_id="u", score_threshold=None) for h in g.hits]
    assert any("9902" in t for t in texts) and not any("code is 4471" in t for t in texts)
    index.delete(thread_id="u")
    assert index.search("locker code", k=5, thread_id="u", score_threshold=None)[0].hits == ()
