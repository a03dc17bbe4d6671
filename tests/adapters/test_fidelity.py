"""The frameworks' habits, round two: one meaning per ``score_threshold``, search options per ``invoke``, the anchors'
defaults (no path: in memory; distinct documents; ``get_by_ids`` as added), the embeddings for other stores, extras."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
import tomllib

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from ctxret.embedders.truncation import truncate_to_fit  # noqa: E402
from ctxret.errors import InputError, InputTooLongError  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from llama_index.core import Document as LIDocument  # noqa: E402

from langchain_ctxret import ContextualRetriever as LCRetriever  # noqa: E402
from langchain_ctxret import ContextualVectorStore, CtxretEmbeddings  # noqa: E402
from llamaindex_ctxret import ContextualRetriever as LIRetriever  # noqa: E402
from llamaindex_ctxret import ContextualStoreIndex, CtxretEmbedding  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [
    {
        "role": "user",
        "content": "Book me a flight from Berlin to Lisbon for October 20.",
        "timestamp": "2026-10-16T14:02",
    },
    {"role": "assistant", "content": "Booked TAP flight TP 541, departing at 09:40 on October 20."},
    {"role": "user", "content": "My dog Biscuit needs his vaccinations next week.", "timestamp": "2026-10-16T14:05"},
    {"role": "assistant", "content": "Biscuit's vet appointment is on Thursday at 4 PM at Green Paws."},
    {"role": "user", "content": "Our Postgres migration failed with a lock timeout.", "timestamp": "2026-10-16T14:09"},
    {"role": "assistant", "content": "Raise lock_timeout to 30 seconds and rerun the migration tonight."},
]
QUERY = "When does my flight to Lisbon leave? And when is the vet appointment for my dog?"


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the adapters' scores are compared with the core's on the real model


@pytest.fixture(scope="module")
def index_options():
    return {"in_memory": True}


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_turns(__import__("ctxret.ingest", fromlist=["x"]).turns_from_messages(MESSAGES, "u1"))

    return fill


# -- 3. one meaning per name ----------------------------------------------------------------------------------
def _core(index, **kw):
    return [[(h.id, h.relevance) for h in g.hits] for g in index.search(QUERY, k=3, **kw)]


def test_score_threshold_is_the_relevance_floor_everywhere(index):
    every = _core(index, score_threshold=None)
    relevances = sorted(r for g in every for _, r in g)
    cut = relevances[len(relevances) // 2]  # a floor that keeps some hits of a part and drops others
    core = [[h for h, r in g if r >= cut] for g in every]
    assert 0 < sum(map(len, core)) < sum(map(len, every))
    assert [[h for h, _ in g] for g in _core(index, score_threshold=cut, cosine_floor=None)] == core
    lc = LCRetriever(index=index, k=3, score_threshold=cut, cosine_floor=None).invoke(QUERY)
    li = LIRetriever(index, similarity_top_k=3, score_threshold=cut, cosine_floor=None).retrieve(QUERY)
    for docs in (
        [(d.id, d.metadata["group"], d.metadata["score"]) for d in lc],
        [(n.node.node_id, n.node.metadata["group"], n.score) for n in li],
    ):
        assert [[i for i, g, _ in docs if g == part] for part in range(len(core))] == core
        assert all(score >= cut for _, _, score in docs)  # the scale shown is the scale thresholded
    # the cosine floor has its own name, the same in the three
    cos = [[h.id for h in g.hits] for g in index.search(QUERY, k=3, cosine_floor=0.5)]
    assert [
        [d.id for d in LCRetriever(index=index, k=3, cosine_floor=0.5).invoke(QUERY) if d.metadata["group"] == p]
        for p in range(len(cos))
    ] == cos
    assert [
        [
            n.node.node_id
            for n in LIRetriever(index, similarity_top_k=3, cosine_floor=0.5).retrieve(QUERY)
            if n.node.metadata["group"] == p
        ]
        for p in range(len(cos))
    ] == cos
    with pytest.raises(InputError, match="cosine_floor"):
        index.search(QUERY, score_threshold=1.5)


def test_invoke_takes_search_options_per_call(index):
    r = LCRetriever(index=index, k=2, score_threshold=None)
    docs = r.invoke("What did we book yesterday?", now=datetime(2026, 10, 17, 9, 0))  # was a TypeError
    assert docs and all("2026-10-16" in d.metadata["ctxret:timestamp"] for d in docs)
    assert {d.metadata["ctxret:source_kind"] for d in r.invoke(QUERY, filter={"ctxret:source_kind": "user"})} == {
        "user"
    }
    per_doc = r.invoke(QUERY, per="section", k=1)
    assert len(per_doc) == 2 and len({d.id for d in per_doc}) == 2
    assert r.invoke(QUERY, split=False)[0].metadata["group_count"] == 1
    with pytest.raises(InputError, match="no_such_option"):
        r.invoke(QUERY, no_such_option=1)


# -- 4. the anchors' defaults -----------------------------------------------------------------------------------
RUNBOOK = (
    "# Deploys\n## Rollback\nTo roll back a bad deploy, run deploy.sh --rollback.\nThen purge the CDN cache.\n\n"
    "## On call\nPriya Raman is on call for platform this week. Tomasz covers Thursday."
)


def test_no_path_means_in_memory(tmp_path, monkeypatch, local_embedder):
    monkeypatch.chdir(tmp_path)
    emb = CtxretEmbeddings(local_embedder)
    stores = [
        ContextualVectorStore.from_texts(["The gate is 12."], emb),
        ContextualVectorStore.from_documents([Document(page_content="The gate is 12.")], emb),
        ContextualVectorStore(embedding=emb),
    ]
    index = ContextualStoreIndex.from_documents([LIDocument(text="The gate is 12.")], embed_model=CtxretEmbedding())
    retriever = LCRetriever.from_path(embedder=local_embedder)
    for ix in [*(s.index for s in stores), index.index, retriever.index]:
        assert ix.store.location == "memory"
    assert not list(tmp_path.iterdir())  # no ./.ctxret, no lock
    assert ContextualVectorStore(persist_directory=str(tmp_path / "kept"), embedding=emb).index.store.location
    assert (tmp_path / "kept").is_dir()


def test_similarity_search_returns_distinct_documents(local_embedder):
    store = ContextualVectorStore.from_documents(
        [Document(page_content=RUNBOOK, id="runbook"), Document(page_content="The pipeline runs in CI.", id="ci")],
        CtxretEmbeddings(local_embedder),
    )
    q = "How do I roll back a deploy? Who is on call?"
    assert [d.id for d in store.similarity_search(q, k=2)] == ["runbook", "ci"]  # was: runbook twice
    assert [d.id for d, _ in store.similarity_search_with_score(q, k=2)] == ["runbook", "ci"]
    assert len({d.id for d in store.max_marginal_relevance_search(q, k=2)}) == 2
    vec = store.embeddings.embed_query(q)
    assert len({d.id for d in store.similarity_search_by_vector(vec, k=2)}) == 2
    assert [d.id for d in store.similarity_search(q, k=2, per="piece")] == ["runbook", "runbook"]  # when asked


def test_get_by_ids_returns_the_document_as_added(local_embedder):
    store = ContextualVectorStore(embedding=CtxretEmbeddings(local_embedder))
    store.add_documents([Document(page_content=RUNBOOK, id="runbook", metadata={"team": "ops", "kind": "howto"})])
    (doc,) = store.get_by_ids(["runbook"])
    assert doc.page_content == RUNBOOK  # headings included (they were missing)
    assert doc.metadata == {"team": "ops", "kind": "howto"} and doc.id == "runbook"


# -- 5. the embeddings for other stores ---------------------------------------------------------------------------
CHUNK = " ".join(f"Step {i}: check the deploy log, then the rollback script and the CDN cache." for i in range(40))


def test_embeddings_cut_an_overlong_input_with_a_warning(local_embedder, caplog):
    assert local_embedder.count_tokens([CHUNK])[0] > local_embedder.max_tokens
    for model in (CtxretEmbeddings(local_embedder), CtxretEmbedding(local_embedder)):
        with caplog.at_level("WARNING", logger="ctxret.embedders.truncation"):
            vec = (
                model.embed_documents([CHUNK])[0]
                if hasattr(model, "embed_documents")
                else (model.get_text_embedding_batch([CHUNK])[0])
            )
        assert "cut to fit" in caplog.text and "strict=True" in caplog.text
        caplog.clear()
        start = truncate_to_fit(local_embedder, [CHUNK])[0]
        assert CHUNK.startswith(start) and local_embedder.count_tokens([start])[0] <= local_embedder.max_tokens
        assert vec == pytest.approx(local_embedder.embed([start])[0].tolist(), abs=1e-5)
    with pytest.raises(InputTooLongError):
        CtxretEmbeddings(local_embedder, strict=True).embed_documents([CHUNK])
    with pytest.raises(InputTooLongError):
        CtxretEmbedding(local_embedder, strict=True).get_text_embedding(CHUNK)


class _WordCounter:
    """A fixed tokenizer for the property below: one token a word, plus two (as [CLS] and [SEP])."""

    max_tokens = 7
    model_id = "words"

    def count_tokens(self, texts):
        return [len(t.split()) + 2 for t in texts]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.sampled_from("ab \n"), max_size=40), max_size=5))
def test_truncate_to_fit_keeps_the_longest_start_that_fits(texts):
    e = _WordCounter()
    out = truncate_to_fit(e, texts)
    assert len(out) == len(texts)
    for text, cut in zip(texts, out, strict=True):
        assert text.startswith(cut) and e.count_tokens([cut])[0] <= e.max_tokens or cut == text
        if cut != text:  # the longest: one more character no longer fits
            assert e.count_tokens([text[: len(cut) + 1]])[0] > e.max_tokens


# -- 7. extras ----------------------------------------------------------------------------------------------------
def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize(
    ("blocked", "module", "extra"),
    [
        (["langchain_core"], "langchain_ctxret", "langchain"),
        (["llama_index", "llama_index.core"], "llamaindex_ctxret", "llamaindex"),
    ],
)
def test_an_adapter_without_its_framework_names_its_extra(blocked, module, extra):
    block = "".join(f"sys.modules[{b!r}] = None; " for b in blocked)
    proc = _run(
        f"import sys; {block}import ctxret\n"
        f"try:\n    import {module}\nexcept ImportError as e:\n    print(type(e).__name__, e)"
    )
    assert proc.returncode == 0, proc.stderr
    assert "MissingExtraError" in proc.stdout and f'pip install "ctxret[{extra}]"' in proc.stdout


def test_import_ctxret_imports_no_framework():
    proc = _run(
        "import sys, json, ctxret\n"
        "from ctxret import ContextualIndex, SearchSettings, Store\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('langchain_core', 'llama_index'))))"
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_the_frameworks_are_extras():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = " ".join(project["dependencies"])
    assert "langchain" not in core and "llama" not in core
    extras = project["optional-dependencies"]
    assert any(d.startswith("langchain-core") for d in extras["langchain"])
    assert any(d.startswith("llama-index-core") for d in extras["llamaindex"])
    assert "langchain" in extras["test"][0] and "llamaindex" in extras["test"][0]  # the tests need both
