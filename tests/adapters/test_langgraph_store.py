"""``CtxretStore`` is a LangGraph ``BaseStore``: the same script gives the same answers as ``InMemoryStore``.

The script (puts, gets, updates, deletes, filters, prefixes, ``list_namespaces``, query searches) runs against
``InMemoryStore`` with an ``index`` on the same model (the local MiniLM through ``CtxretEmbeddings``) and against
``CtxretStore``; every answer is compared (query searches by their top hit: the two rank differently by design).
The async twins give the same answers; namespaces never leak (a hypothesis test); bad input is refused before
anything is written; ``create_agent(..., store=...)`` and a tool using ``runtime.store`` work unchanged; the
items are readable by the retrievers and the CLI.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from agent_fakes import scripted
from ctxret import ContextualIndex, InputError, Store
from ctxret.items import ItemStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore
from reliability.hash_embedder import HashEmbedder

from langchain_ctxret import ContextualRetriever, CtxretEmbeddings, CtxretStore

ANA, BEN, PREFS, ARCHIVE = ("memories", "ana"), ("memories", "ben"), ("prefs", "ana"), ("memories", "ana", "archive")


def norm(item: Any) -> Any:
    return None if item is None else (tuple(item.namespace), item.key, item.value)


def keys(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
    return [(tuple(i.namespace), i.key) for i in items]


def script(store: Any) -> list[tuple[str, Any]]:
    """The operations both stores run, and what each answered."""
    out: list[tuple[str, Any]] = []
    store.put(ANA, "dog", {"content": "Ana's dog is called Biscuit and loves the beach.", "kind": "pet", "n": 3})
    store.put(ANA, "city", {"content": "Ana moved to Berlin in March.", "kind": "place", "n": 1})
    store.put(
        ANA,
        "job",
        {"content": "Ana works as a pilot for a small airline.", "kind": "work", "n": 5, "tags": ["flying", "travel"]},
    )
    store.put(BEN, "pet", {"content": "Ben's cat is called Miso and hates baths.", "kind": "pet", "n": 2})
    store.put(PREFS, "theme", {"content": "Ana prefers dark mode.", "kind": "ui", "screen": {"size": 27}})
    store.put(ARCHIVE, "old", {"content": "Ana lived in Lisbon for ten years.", "kind": "place", "n": 0})
    out.append(("get", norm(store.get(ANA, "dog"))))
    out.append(("get missing key", store.get(ANA, "nope")))
    out.append(("get other namespace", norm(store.get(BEN, "pet"))))
    out.append(("list a prefix", [norm(i) for i in store.search(ANA)]))
    out.append(("limit and offset", keys(store.search(ANA, limit=2, offset=1))))
    out.append(("offset past the end", keys(store.search(ANA, offset=10))))
    out.append(("filter equal", keys(store.search(("memories",), filter={"kind": "pet"}))))
    out.append(("filter $gt", keys(store.search(("memories",), filter={"n": {"$gt": 1}}))))
    out.append(("filter range", keys(store.search(("memories",), filter={"n": {"$gte": 2, "$lt": 5}}))))
    out.append(("filter $ne", keys(store.search(("memories",), filter={"kind": {"$ne": "pet"}}))))
    out.append(("filter list", keys(store.search(ANA, filter={"tags": ["flying", "travel"]}))))
    out.append(("filter nested", keys(store.search(PREFS, filter={"screen": {"size": 27}}))))
    out.append(("filter no match", keys(store.search(ANA, filter={"kind": "ui"}))))
    store.put(ANA, "city", {"content": "Ana moved to Hamburg in June.", "kind": "place", "n": 4})
    out.append(("updated", norm(store.get(ANA, "city"))))
    out.append(("updated keeps its place", keys(store.search(ANA, limit=3))))
    out.append(("filter after update", keys(store.search(("memories",), filter={"n": {"$gt": 3}}))))
    for q, prefix in [
        ("What is the name of Ana's dog?", ANA),
        ("Which city does Ana live in now?", ANA),
        ("What is Ben's cat called?", ("memories",)),
        ("What is Ana's job?", ()),
    ]:
        out.append((f"query {q}", keys(store.search(prefix, query=q, limit=1))))
    out.append(
        ("query with filter", keys(store.search(("memories",), query="Where did Ana live?", filter={"n": 0}, limit=1)))
    )
    store.put(ANA, "code", {"content": "Ana's locker code is 4512."}, index=False)
    out.append(("unindexed get", norm(store.get(ANA, "code"))))
    out.append(("unindexed by filter", keys(store.search(ANA, filter={"content": "Ana's locker code is 4512."}))))
    out.append(("unindexed not first", ("code" in [i.key for i in store.search(ANA, query="locker code", limit=1)])))
    store.delete(ANA, "dog")
    store.delete(ANA, "never-there")
    out.append(("deleted", store.get(ANA, "dog")))
    out.append(("after delete", keys(store.search(ANA))))
    out.append(("namespaces", store.list_namespaces()))
    out.append(("namespaces prefix", store.list_namespaces(prefix=("memories",))))
    out.append(("namespaces suffix", store.list_namespaces(suffix=("ana",))))
    out.append(("namespaces wildcard", store.list_namespaces(prefix=("*", "ana"))))
    out.append(("namespaces depth", store.list_namespaces(max_depth=1)))
    out.append(("namespaces depth 2", store.list_namespaces(prefix=("memories",), max_depth=2)))
    out.append(("namespaces window", store.list_namespaces(limit=1, offset=1)))
    return out


@pytest.fixture(scope="module")
def embeddings(local_embedder) -> CtxretEmbeddings:
    return CtxretEmbeddings(local_embedder)


@pytest.fixture(scope="module")
def answers(embeddings) -> dict[str, list[tuple[str, Any]]]:
    ours = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder), fields=["content"])
    theirs = InMemoryStore(index={"dims": 384, "embed": embeddings, "fields": ["content"]})
    return {"ours": script(ours), "theirs": script(theirs)}


def test_the_script_answers_as_in_memory_store(answers):
    ours, theirs = answers["ours"], answers["theirs"]
    assert [name for name, _ in ours] == [name for name, _ in theirs]
    differ = [(name, a, b) for (name, a), (_, b) in zip(ours, theirs, strict=True) if a != b]
    assert not differ, differ
    # and the answers say something: the script is not vacuous
    found = dict(ours)
    assert found["query What is the name of Ana's dog?"] == [(ANA, "dog")]
    assert found["filter equal"] == [(ANA, "dog"), (BEN, "pet")]
    assert found["namespaces depth 2"] == [("memories", "ana"), ("memories", "ben")]


async def test_async_twins_agree_with_sync(embeddings):
    ours = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder), fields=["content"])
    sync_answers = script(ours)
    twin = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder), fields=["content"])
    async_answers = await asyncio.to_thread(script_on_async_twins, twin)
    assert async_answers == sync_answers


def script_on_async_twins(store: Any) -> list[tuple[str, Any]]:
    """:func:`script`, every call made on the store's async twin (``aput``, ``aget``, ``asearch``, ``adelete``,
    ``alist_namespaces``) in an event loop of its own."""
    loop = asyncio.new_event_loop()

    class Twins:
        def __getattr__(self, name: str) -> Any:
            twin = getattr(store, "a" + name)
            return lambda *a, **kw: loop.run_until_complete(twin(*a, **kw))

    try:
        return script(Twins())
    finally:
        loop.close()


def test_what_differs_from_in_memory_store(embeddings):
    """The documented differences (docs/langchain.md): the floor, created_at, emptied namespaces, JSON values."""
    ours = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder))
    theirs = InMemoryStore(index={"dims": 384, "embed": embeddings})
    for store in (ours, theirs):
        store.put(("a",), "k", {"content": "Biscuit is a beagle.", "when": (2024, 5)})
        store.put(("b",), "k", {"content": "x"})
        store.delete(("b",), "k")
    # a query nothing is about: both return their nearest items; ctxret's say how little they are about it
    assert keys(ours.search(("a",), query="quarterly tax filing deadlines")) == [(("a",), "k")]
    assert keys(theirs.search(("a",), query="quarterly tax filing deadlines")) == [(("a",), "k")]
    assert ours.search(("a",), query="quarterly tax filing deadlines")[0].score < 0.1
    # values come back as JSON reads them; a namespace whose items are all deleted is not listed
    assert ours.get(("a",), "k").value == {"content": "Biscuit is a beagle.", "when": [2024, 5]}
    assert theirs.get(("a",), "k").value["when"] == (2024, 5)
    assert ours.list_namespaces() == [("a",)]
    assert theirs.list_namespaces() == [("a",), ("b",)]
    # an update keeps created_at (as LangGraph's Postgres store does)
    first = ours.get(("a",), "k")
    ours.put(("a",), "k", {"content": "Biscuit is a beagle who loves the beach."})
    again = ours.get(("a",), "k")
    assert again.created_at == first.created_at and again.updated_at > first.updated_at


PREFERENCES = {
    "veg": "I am vegetarian.",
    "dog": "My dog Biscuit is a beagle.",
    "job": "I work as a nurse at St Mary's.",
    "city": "I live in Leeds.",
    "allergy": "I am allergic to peanuts.",
    "gym": "I go climbing on Tuesdays.",
}


def test_a_general_query_gets_limit_ranked_items_as_in_memory_store(embeddings):
    ours = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder), fields=["content"])
    theirs = InMemoryStore(index={"dims": 384, "embed": embeddings, "fields": ["content"]})
    for store in (ours, theirs):
        for key, text in PREFERENCES.items():
            store.put(("memories", "ana"), key, {"content": text})
    for query in ("What should I cook tonight?", "user preferences"):
        found, peer = (
            ours.search(("memories", "ana"), query=query, limit=3),
            theirs.search(("memories", "ana"), query=query, limit=3),
        )
        assert len(found) == len(peer) == 3
        assert [i.score for i in found] == sorted((i.score for i in found), reverse=True)  # ranked, scores kept
        assert all(0.0 <= i.score < 0.3 for i in found)  # a general query: low relevance, said so on each item
    assert ours.search(("memories", "ana"), query="What should I cook tonight?", limit=3)[0].key == "veg"
    # what passes the floor comes first; the rest fills up to limit
    dog = ours.search(("memories", "ana"), query="What breed is my dog?", limit=4)
    assert dog[0].key == "dog" and dog[0].score > 0.4 > dog[1].score and len(dog) == 4
    # a floor asked for: only what passes it
    floored = CtxretStore(ours.index, fields=["content"], search_kwargs={"score_threshold": "auto"})
    assert floored.search(("memories", "ana"), query="What should I cook tonight?", limit=3) == []
    assert [i.key for i in floored.search(("memories", "ana"), query="What breed is my dog?", limit=4)] == ["dog"]
    strict = CtxretStore(ours.index, fields=["content"], search_kwargs={"score_threshold": 0.4})
    assert [i.key for i in strict.search(("memories", "ana"), query="What breed is my dog?", limit=4)] == ["dog"]


async def test_a_general_query_fills_the_async_search_too(embeddings):
    ours = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder), fields=["content"])
    for key, text in PREFERENCES.items():
        await ours.aput(("memories", "ana"), key, {"content": text})
    found = await ours.asearch(("memories", "ana"), query="user preferences", limit=4, offset=1)
    sync = ours.search(("memories", "ana"), query="user preferences", limit=5)
    assert len(found) == 4 and keys(found) == keys(sync[1:5])


def test_two_questions_find_both_subjects(embeddings):
    store = CtxretStore(ContextualIndex(Store.memory(), embedder=embeddings.embedder), fields=["content"])
    facts = {
        "dog": "Ana's dog Biscuit is a beagle who loves the beach.",
        "flight": "Ana's flight to Lisbon leaves at 9:40 on October 20.",
        "sister": "Ana's sister Eva teaches chemistry in Porto.",
        "gym": "Ana goes to the climbing gym on Tuesdays.",
    }
    for key, text in facts.items():
        store.put(("memories", "ana"), key, {"content": text})
    found = store.search(("memories", "ana"), query="What breed is my dog? When does my flight leave?", limit=2)
    assert {i.key for i in found} == {"dog", "flight"}
    assert all(0.0 <= i.score <= 1.0 for i in found)


# -- namespaces never leak -------------------------------------------------------------------------
LABELS = st.sampled_from(["a", "b", "c", "user-1", "user-2", "ü"])
NAMESPACES = st.lists(LABELS, min_size=1, max_size=3).map(tuple)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    items=st.lists(st.tuples(NAMESPACES, st.sampled_from(["k1", "k2", "k3"])), min_size=1, max_size=10),
    prefix=st.lists(LABELS, max_size=3).map(tuple),
    query=st.sampled_from([None, "dog", "note about a"]),
)
def test_namespaces_never_leak(items, prefix, query):
    store = CtxretStore(
        ContextualIndex(Store.memory(), embedder=HashEmbedder()), search_kwargs={"score_threshold": None}
    )
    for ns, key in items:
        store.put(ns, key, {"content": f"note about {' '.join(ns)} dog {key}", "ns": list(ns)})
    stored = {(ns, key) for ns, key in items}
    found = store.search(prefix, query=query, limit=50)
    assert all(tuple(i.namespace[: len(prefix)]) == prefix for i in found)
    assert all(i.value["ns"] == list(i.namespace) for i in found)
    if query is None:  # a listing is every item under the prefix
        assert set(keys(found)) == {(ns, k) for ns, k in stored if ns[: len(prefix)] == prefix}
    for ns, key in stored:
        assert store.get(ns, key).value["ns"] == list(ns)
    assert set(store.list_namespaces(limit=100)) == {ns for ns, _ in stored}
    if prefix:
        assert all(ns[: len(prefix)] == prefix for ns in store.list_namespaces(prefix=prefix, limit=100))


# -- bad input ----------------------------------------------------------------------------------
def test_bad_input_is_refused_and_nothing_is_written():
    index = ContextualIndex(Store.memory(), embedder=HashEmbedder())
    store = CtxretStore(index)
    store.put(("m",), "kept", {"content": "stays"})
    with pytest.raises(InputError, match="must be a dict"):
        store.put(("m",), "bad", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="must be a dict"):  # a batch with one bad write writes nothing
        store.batch([PutOp(("m",), "good", {"content": "new"}), PutOp(("m",), "bad", "text")])  # type: ignore[arg-type]
    with pytest.raises(InputError, match="JSON"):
        store.put(("m",), "nan", {"x": float("nan")})
    with pytest.raises(InputError, match="JSON object keys are strings"):
        store.put(("m",), "keys", {"x": {1: "one"}})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"content": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"content": "x"})
    with pytest.raises(InputError, match="period"):  # straight to batch: ctxret's own check
        store.batch([PutOp(("a.b",), "k", {"content": "x"})])
    with pytest.raises(InputError, match="empty"):
        store.batch([PutOp((), "k", {"content": "x"})])
    with pytest.raises(NotImplementedError):
        store.put(("m",), "ttl", {"content": "x"}, ttl=5)
    with pytest.raises(InputError, match="operators"):
        store.search(("m",), filter={"n": {"$regex": "x"}})
    with pytest.raises(InputError, match="limit"):
        store.search(("m",), limit=-1)
    with pytest.raises(InputError, match="sets thread_id"):
        CtxretStore(index, search_kwargs={"thread_id": "x"})
    assert [i.key for i in store.search(("m",))] == ["kept"]
    assert store.get(("m",), "good") is None
    assert store.batch([GetOp(("m",), "kept"), SearchOp(("m",), None, 10, 0, None)])[0].value == {"content": "stays"}


# -- LangGraph's habits ----------------------------------------------------------------------------
def test_create_agent_and_a_tool_using_runtime_store(local_embedder):
    store = CtxretStore(ContextualIndex(Store.memory(), embedder=local_embedder))
    store.put(("memories", "ana"), "dog", {"content": "Ana's dog is called Biscuit."})

    @tool
    def recall(question: str, runtime: ToolRuntime) -> str:
        """Search Ana's memories."""
        found = runtime.store.search(("memories", "ana"), query=question, limit=1)
        runtime.store.put(("memories", "ana"), "asked", {"content": f"Ana asked: {question}"})
        return found[0].value["content"] if found else "nothing"

    call = {"name": "recall", "args": {"question": "What is my dog called?"}, "id": "c1"}
    model = scripted(AIMessage("", tool_calls=[call]), "Your dog is Biscuit.")
    agent = create_agent(model, tools=[recall], store=store)
    out = agent.invoke({"messages": [{"role": "user", "content": "What is my dog called?"}]})
    assert out["messages"][2].content == "Ana's dog is called Biscuit."
    assert store.get(("memories", "ana"), "asked").value == {"content": "Ana asked: What is my dog called?"}


def test_items_are_readable_by_the_retrievers_and_the_cli(local_embedder, tmp_path):
    index = ContextualIndex(Store.embedded(tmp_path / "memory"), embedder=local_embedder)
    store = CtxretStore(index)
    store.put(("memories", "ana"), "dog", {"content": "Ana's dog is called Biscuit."})
    store.put(("memories", "ben"), "cat", {"content": "Ben's cat is called Miso."})
    thread = "ctxret:items:memories.ana"  # an item namespace's thread: no chat scope can be named so
    docs = ContextualRetriever(index=index, thread_id=thread, k=2, score_threshold=None).invoke("dog")
    assert docs and all(d.metadata["thread_id"] == thread for d in docs)
    assert docs[0].metadata["ctxret:item_key"] == "dog" and "Biscuit" in docs[0].page_content
    assert not ContextualRetriever(index=index, thread_id="memories.ana", k=2, score_threshold=None).invoke("dog")
    assert ItemStore(index).read([(("memories", "ana"), "dog")])[0].value == {"content": "Ana's dog is called Biscuit."}
    index.close()
    cli = [
        sys.executable,
        "-m",
        "ctxret",
        "search",
        "What is the dog called?",
        "--store",
        str(tmp_path / "memory"),
        "--thread",
        thread,
        "-k",
        "1",
        "--json",
    ]
    from cli_inprocess import run_cli

    proc = run_cli(*cli[3:], cwd=tmp_path)  # ``ctxret search ...`` in this process
    assert proc.returncode == 0, proc.stderr
    assert "Biscuit" in proc.stdout and "Miso" not in proc.stdout and thread in proc.stdout
