"""The lean facade: a :class:`ctxret.Store` built once and handed to ``ContextualIndex(store, ...)``; each family of
arguments in its place (store arguments on the store, search options on ``search`` / ``SearchSettings``), and a
misspelt argument named with its family."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from ctxret import ContextualIndex, InputError, SearchSettings, Store

GARDEN = [
    {"role": "user", "content": "The dentist appointment is on Tuesday at 3 PM."},
    {"role": "assistant", "content": "Noted: dentist, Tuesday 3 PM."},
]


def test_the_constructor_takes_at_most_ten_parameters() -> None:
    params = [
        p
        for p in inspect.signature(ContextualIndex.__init__).parameters.values()
        if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    assert len(params) <= 10, [p.name for p in params]
    names = {p.name for p in params}
    assert not names & set(SearchSettings.option_names()) - {"views"}, "search options belong to search()"
    assert not names & {"collection", "host", "port", "client", "in_memory", "lock_timeout", "lexical_path"}


def test_index_py_stays_small() -> None:
    """The facade wires stages together and holds no logic of its own: its code (docstrings, comments and blank
    lines aside: the entry points' ``Args:`` and examples live there) stays short."""
    source = Path(inspect.getfile(ContextualIndex)).read_text(encoding="utf-8")
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    code = [
        line
        for n, line in enumerate(source.splitlines(), 1)
        if n not in docstrings and line.strip() and not line.strip().startswith("#")
    ]
    assert len(code) <= 300, len(code)


def test_a_memory_store_handed_to_the_index(hash_embedder) -> None:
    store = Store.memory(collection="facade-memory")
    with ContextualIndex(store, embedder=hash_embedder) as index:
        index.add_messages(GARDEN, thread_id="home")
        assert index.store.collection_name == "facade-memory"
        assert "dentist" in index.search("When is the dentist?", k=1)[0].hits[0].text.lower()
    with ContextualIndex(store, embedder=hash_embedder) as again:  # every in-memory index is its own store
        assert again.store.count() == 0


def test_an_embedded_store_is_the_path_form(tmp_path, hash_embedder) -> None:
    folder = tmp_path / "memory"
    with ContextualIndex(Store.embedded(folder, collection="notes", lock_timeout=0.5), embedder=hash_embedder) as a:
        a.add_messages(GARDEN, thread_id="home")
        n = a.store.count()
    with ContextualIndex(folder, collection="notes", embedder=hash_embedder) as b:  # the shorthand, same store
        assert b.store.count() == n > 0
    assert Store.embedded(folder) == Store.embedded(str(folder))


def test_a_client_store(hash_embedder) -> None:
    import chromadb
    from chromadb.config import Settings

    # the settings every test uses: a process has one ephemeral Chroma system
    client = chromadb.EphemeralClient(Settings(anonymized_telemetry=False))
    with ContextualIndex(Store.from_client(client, collection="facade-client"), embedder=hash_embedder) as index:
        index.add_messages(GARDEN, thread_id="home")
        assert client.get_collection("facade-client").count() == index.store.count() > 0


@pytest.mark.slow  # a Chroma server
def test_a_server_store(chroma_server, hash_embedder) -> None:
    store = Store.server(chroma_server.host, chroma_server.port, collection="facade-server")
    with ContextualIndex(store, embedder=hash_embedder) as index:
        index.add_messages(GARDEN, thread_id="home")
        assert index.search("dentist", k=1, thread_id="home")[0].hits


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {"colection": "x"},
            "unknown index argument 'colection' — did you mean 'collection'? search options go "
            "to search()/SearchSettings",
        ),
        ({"embeder": None}, "did you mean 'embedder'"),
        ({"in_memory": True, "k": 3}, "'k' is a search option: pass it to search() or settings=SearchSettings(k=...)"),
        ({"in_memory": True, "score_threshold": 0.3}, "settings=SearchSettings(score_threshold=...)"),
        ({"in_memory": True, "nonsense_word": 1}, "unknown index argument 'nonsense_word'"),
    ],
)
def test_a_misspelt_argument_names_its_family(kwargs, expected, hash_embedder) -> None:
    kwargs = {"embedder": hash_embedder, **kwargs} if "embeder" not in kwargs else kwargs
    with pytest.raises(InputError) as e:
        ContextualIndex(**kwargs)
    assert expected in str(e.value)


def test_store_arguments_go_on_the_store_once(hash_embedder) -> None:
    with pytest.raises(InputError, match="collection.*Store"):
        ContextualIndex(Store.memory(), collection="x", embedder=hash_embedder)
    with pytest.raises(InputError, match="unknown store argument 'colection'.*did you mean 'collection'"):
        Store.embedded("./x", colection="y")  # type: ignore[call-arg]
    with pytest.raises(InputError, match="lock_timeout"):
        Store.embedded("./x", lock_timeout=-1)


def test_every_documented_shorthand_still_opens(tmp_path, hash_embedder) -> None:
    with ContextualIndex(in_memory=True, embedder=hash_embedder) as a:
        assert a.store.location == "memory"
    with ContextualIndex(in_memory=True, collection="nb-1", embedder=hash_embedder, progress=False) as b:
        assert b.store.collection_name == "nb-1"
    with ContextualIndex(tmp_path / "m", embedder=hash_embedder, lexical=False, max_turn_bytes=None) as c:
        assert not c.store.has_lexical
    tuned = SearchSettings(cosine_floor=0.2)
    with ContextualIndex(in_memory=True, embedder=hash_embedder, settings=tuned) as d:
        assert d.cosine_floor == 0.2


def test_the_adapters_from_path_build_the_store(tmp_path, hash_embedder) -> None:
    from langchain_ctxret import ContextualRetriever
    from llamaindex_ctxret import ContextualIndexWriter

    retriever = ContextualRetriever.from_path(tmp_path / "lc", embedder=hash_embedder, collection="lc-1", k=2)
    assert retriever.index.store.collection_name == "lc-1" and retriever.k == 2
    retriever.index.close()
    memory = ContextualRetriever.from_path(Store.memory(), embedder=hash_embedder)
    assert memory.index.store.location == "memory"
    writer = ContextualIndexWriter.from_path(Store.memory(collection="li-1"), embed_model=hash_embedder)
    assert writer.index.store.collection_name == "li-1"
    with pytest.raises(InputError, match="did you mean 'collection'"):
        ContextualRetriever.from_path(tmp_path / "lc2", embedder=hash_embedder, colection="x")
