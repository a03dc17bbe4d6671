"""The adapters take exactly the search options of ``SearchSettings`` (and their own scope keys) as ``search_kwargs``:
an unknown key is refused naming it and every accepted key, a bad value by the option's own check."""

from __future__ import annotations

import re
from dataclasses import MISSING, fields

import pytest
from ctxret.errors import InputError
from ctxret.index import ContextualIndex
from ctxret.query.fusion import FusionSettings
from ctxret.query.settings import HYBRID_OPTIONS, SearchSettings

OPTIONS = set(SearchSettings.option_names())


def valid_values() -> dict[str, object]:
    """A valid value of every search option (its default; a relevance floor for ``score_threshold``)."""
    out: dict[str, object] = {}
    for f in fields(SearchSettings):
        out[f.name] = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
    defaults = {f.name: f.default for f in fields(FusionSettings)}
    out.update({flat: defaults[name] for flat, name in HYBRID_OPTIONS.items()})
    out["score_threshold"] = 0.5
    assert set(out) == OPTIONS
    return out


def accepted(message: str) -> set[str]:
    return set(re.search(r"accepted keys: ([\w, ]*\w)", message).group(1).split(", "))  # type: ignore[union-attr]


@pytest.fixture(scope="module")
def index(tmp_path_factory, local_embedder):
    return ContextualIndex(tmp_path_factory.mktemp("kwargs") / "db", embedder=local_embedder, lexical=False)


def test_langchain_retriever_takes_exactly_the_options(index):
    pytest.importorskip("langchain_core")
    from langchain_ctxret import ContextualRetriever

    for name, value in valid_values().items():
        ContextualRetriever(index=index, search_kwargs={name: value})
    with pytest.raises(ValueError, match="unknown search option.*'no_such_option'") as caught:
        ContextualRetriever(index=index, search_kwargs={"no_such_option": 1, "k": 2})
    assert accepted(str(caught.value)) == OPTIONS | {"filter", "where", "thread_id"}
    with pytest.raises(ValueError, match="unknown fusion 'mean'; use one of 'convex', 'rrf', 'weighted_rrf'"):
        ContextualRetriever(index=index, search_kwargs={"fusion": "mean"})
    with pytest.raises(ValueError, match="deadline_ms must be a positive number of milliseconds"):
        ContextualRetriever(index=index, search_kwargs={"deadline_ms": -1})


def test_langchain_vectorstore_takes_exactly_the_options(index):
    pytest.importorskip("langchain_core")
    from langchain_ctxret import ContextualVectorStore

    store = ContextualVectorStore(index=index)
    with pytest.raises(InputError, match="unknown search option.*'no_such_option'") as caught:
        store.similarity_search("anything", no_such_option=1)
    assert accepted(str(caught.value)) == OPTIONS | {"thread_id", "where"}
    with pytest.raises(InputError, match="lexical_weight must be a number between 0 and 1"):
        store.similarity_search("anything", lexical_weight=3)


def test_llamaindex_retriever_takes_exactly_the_options(index):
    pytest.importorskip("llama_index.core")
    from llamaindex_ctxret import ContextualRetriever
    from llamaindex_ctxret.retriever import _OWN_ARGS

    for name, value in valid_values().items():
        if name in _OWN_ARGS:  # its own arguments: refused in search_kwargs, given to the retriever
            with pytest.raises(InputError, match="search_kwargs repeats"):
                ContextualRetriever(index, search_kwargs={name: value})
        else:
            ContextualRetriever(index, search_kwargs={name: value})
    with pytest.raises(InputError, match="unknown search option.*'no_such_option'") as caught:
        ContextualRetriever(index, search_kwargs={"no_such_option": 1})
    assert accepted(str(caught.value)) == OPTIONS | {"settings"}
    with pytest.raises(InputError, match="per must be one of 'piece', 'section', 'document'"):
        ContextualRetriever(index, search_kwargs={"per": "page"})
