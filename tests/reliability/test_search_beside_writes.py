"""Searches beside a rewrite of the thread they read: never an error, and one version of the thread in every answer.

The defects: a rewrite reaches Chroma in steps (the new pieces, then the stale ones deleted, then the lexical file),
and a search that read between two steps mixed the thread's two versions (a thread-scoped search ~2 times a second
under continuous rewrites, from the thread cache's read); a read that met the delete failed with Chroma's
"Error finding id" (~0.1% of thread-scoped searches). Now every change declares what it adds and removes, a search
hides what it must not see of it, and a thread is read into the cache only whole (``storage/visibility.py``).

Each version of the thread tags every turn with ``vtag<N>``; every version has the same number of turns, so after
any whole write all of them carry one tag.
"""

from __future__ import annotations

import asyncio
import random
import re
import threading
import time

import pytest
from ctxret import ContextualIndex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .hash_embedder import HashEmbedder

THREAD = "rewritten"
TURNS = 6
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"]
TAG = re.compile(r"vtag(\d+)")


def version(tag: int, seed: int = 0) -> list[dict[str, str]]:
    rnd = random.Random(tag * 7919 + seed)
    return [
        {"role": "user", "content": " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 30))) + f" vtag{tag}."}
        for _ in range(TURNS)
    ]


def tags(groups, thread: str = THREAD) -> set[str]:
    """The version tags of ``thread``'s pieces (and parents) in one search's answer."""
    found: set[str] = set()
    for g in groups:
        for h in g.hits:
            if h.metadata.get("thread_id") == thread:
                found.update(TAG.findall(h.text))
                found.update(TAG.findall(h.parent_text or ""))
    return found


SEARCHES = {
    "scoped": lambda ix, q: ix.search(q, k=40, thread_id=THREAD, score_threshold=None),
    "scoped parents": lambda ix, q: ix.search(q, k=40, thread_id=THREAD, score_threshold=None, parents=True),
    "unscoped": lambda ix, q: ix.search(q, k=40, score_threshold=None),
    "unscoped parents": lambda ix, q: ix.search(q, k=40, score_threshold=None, parents=True),
    "unscoped dense": lambda ix, q: ix.search(q, k=40, score_threshold=None, lexical=False),
    "async scoped": lambda ix, q: asyncio.run(ix.asearch(q, k=40, thread_id=THREAD, score_threshold=None)),
    "async unscoped": lambda ix, q: asyncio.run(ix.asearch(q, k=40, score_threshold=None)),
}


def fill(index: ContextualIndex) -> None:
    for t in range(3):
        index.add_messages(version(1000 + t), thread_id=f"other-{t}")
    index.add_messages(version(0), thread_id=THREAD)


@pytest.fixture
def index(open_index):
    """A fresh index per test (each races writes against it), closed by ``open_index``."""
    index = open_index(embedder=HashEmbedder())
    fill(index)
    return index


class Pause:
    """Holds a store call (before or after it runs) until released; ``reached`` says a writer is held there."""

    def __init__(self, target, name: str, after: bool) -> None:
        self.reached, self.release = threading.Event(), threading.Event()
        inner = getattr(target, name)

        def held(*args, **kwargs):
            if not after:
                self.hold()
            out = inner(*args, **kwargs)
            if after:
                self.hold()
            return out

        setattr(target, name, held)
        self.undo = lambda: setattr(target, name, inner)

    def hold(self) -> None:
        if not self.release.is_set():
            self.reached.set()
            assert self.release.wait(60)


# Where a rewrite is held: both versions are in Chroma (after the upsert; before the stale delete), or Chroma
# holds the new one and the lexical file the old one (before the lexical write).
POINTS = {
    "after the upsert": ("chroma", "upsert", True, "0"),
    "before the stale delete": ("chroma", "delete_ids", False, "1"),
    "before the lexical write": ("lexical", "write", False, "1"),
}


@pytest.mark.parametrize("point", list(POINTS))
def test_a_search_during_each_step_of_a_rewrite_sees_one_version(index, point):
    owner, name, after, seen_unscoped = POINTS[point]
    q = "alpha bravo charlie delta echo"
    assert tags(SEARCHES["scoped"](index, q)) == {"0"}  # the thread is cached as it is
    other = ContextualIndex(index.store.chroma.path, embedder=HashEmbedder(), progress=False)  # a cache of its own
    pause = Pause(getattr(index.store, owner), name, after)
    writer = threading.Thread(target=index.replace_messages, args=(version(1),), kwargs={"thread_id": THREAD})
    writer.start()
    try:
        assert pause.reached.wait(60)
        # the cached thread answers as before the write, at once
        assert tags(SEARCHES["scoped"](index, q)) == {"0"}
        assert tags(SEARCHES["async scoped"](index, q)) == {"0"}
        # Chroma and the lexical file answer with one version: before the write until all its pieces are stored,
        # after it from then on
        for kind in ("unscoped", "unscoped parents", "unscoped dense", "async unscoped"):
            assert tags(SEARCHES[kind](index, q)) == {seen_unscoped}, kind
        # a thread read from the store meanwhile is read whole once the write is over
        answers: list[set[str]] = []
        reader = threading.Thread(target=lambda: answers.append(tags(SEARCHES["scoped parents"](other, q))))
        reader.start()
        time.sleep(0.2)  # let the reader start its read (either way it must see one version)
    finally:
        pause.release.set()
        writer.join(60)
        pause.undo()
    reader.join(60)
    assert answers == [{"1"}]
    assert tags(SEARCHES["scoped"](index, q)) == {"1"}
    assert tags(SEARCHES["unscoped"](index, q)) == {"1"}
    other.close()


@pytest.mark.slow  # threads searching beside rewrites for seconds: the full suite's
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), rewrites=st.integers(8, 16))
def test_searches_beside_continuous_rewrites_never_fail_and_never_mix_versions(tmp_path_factory, seed, rewrites):
    index = ContextualIndex(tmp_path_factory.mktemp("beside") / "store", embedder=HashEmbedder(), progress=False)
    fill(index)
    rnd = random.Random(seed)
    done = threading.Event()
    errors: list[str] = []
    mixed: list[tuple[str, set[str]]] = []
    searches = [0]

    def writer() -> None:
        try:
            for tag in range(1, rewrites + 1):
                index.replace_messages(version(tag, seed), thread_id=THREAD)  # a rewrite
        finally:
            done.set()

    def reader(kind: str) -> None:
        while not done.is_set():
            q = " ".join(rnd.choice(WORDS) for _ in range(4))
            try:
                found = tags(SEARCHES[kind](index, q))
            except Exception as e:  # noqa: BLE001  # counted, and the test fails on it
                errors.append(f"{kind}: {type(e).__name__}: {e}")
                continue
            searches[0] += 1
            if len(found) > 1:
                mixed.append((kind, found))

    kinds = ["scoped", "scoped parents", "unscoped", "async scoped", "unscoped parents"]
    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader, args=(k,)) for k in kinds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    index.close()
    assert not errors, errors[:3]
    assert not mixed, mixed[:3]
    assert searches[0] >= len(kinds)
