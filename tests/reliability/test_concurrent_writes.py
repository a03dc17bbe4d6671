"""Writers in several threads of one process: each turn (and each document) holds exactly one version.

The defect: two threads rewriting one thread at once each diffed against what was stored before the
other wrote, so both versions' pieces stayed (39 of 40 rounds). Now writes to a store are serialized
inside the process and the stale set is worked out under the write lock (read again when another
write came in between), while searches keep running beside them.

Hypothesis draws the versions; every round starts its writers together at a barrier.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from ctxret import ContextualIndex
from ctxret.ingest import document_turns, turns_from_messages
from ctxret.storage.schema import Scope
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .hash_embedder import HashEmbedder

pytestmark = pytest.mark.slow

WORDS = st.sampled_from(["alpha", "bravo", "charlie", "delta", "echo", "fox", "golf", "hotel", "india", "juliet"])
SENTENCE = st.lists(WORDS, min_size=2, max_size=12).map(lambda ws: " ".join(ws).capitalize() + ".")
TURN_TEXT = st.lists(SENTENCE, min_size=1, max_size=6).map(" ".join)  # up to a few pieces a turn
VERSION = st.lists(TURN_TEXT, min_size=1, max_size=4)
ROUND = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def index_embedder():
    return HashEmbedder()


def race(jobs) -> None:
    """Run the jobs in threads started together; re-raise the first error."""
    barrier = threading.Barrier(len(jobs))
    errors: list[BaseException] = []

    def run(job) -> None:
        barrier.wait()
        try:
            job()
        except BaseException as e:  # noqa: BLE001  # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def messages(texts: list[str]) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


def stored_turns(index: ContextualIndex, thread: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in index.store.records(scope=Scope(thread)):
        out.setdefault(r["metadata"]["turn_id"], set()).add(r["id"])
    return out


@ROUND
@given(versions=st.lists(VERSION, min_size=2, max_size=4))
def test_writers_of_one_thread_leave_one_version_of_each_turn(index, versions):
    thread = f"t-{uuid.uuid4().hex[:8]}"
    planned = [index.check_turns(turns_from_messages(messages(v), thread)) for v in versions]
    # each writer rewrites the thread's turns 1..n (numbered turns, as given: what the one write path guarantees)
    race([lambda v=v: index.add_turns(turns_from_messages(messages(v), thread)) for v in versions])
    stored = stored_turns(index, thread)
    for turn_id, ids in stored.items():
        options = [{x.id for x in p.pieces} for plan in planned for p in plan if p.turn.turn_id == turn_id]
        assert ids in options, f"turn {turn_id} holds a mix or both versions: {len(ids)} pieces"
    assert len(stored) == max(len(v) for v in versions)  # no turn lost
    # the lexical copy follows Chroma
    assert index.store.lexical.ids(thread) == set().union(*stored.values())
    hits = index.search(versions[0][0], k=50, thread_id=thread, score_threshold=None)
    assert {h.id for g in hits for h in g.hits} <= set().union(*stored.values())


def doc_text(sections: list[str]) -> str:
    return "\n\n".join(f"## Part {i}\n{body}" for i, body in enumerate(sections))


@ROUND
@given(versions=st.lists(VERSION, min_size=3, max_size=5), readers=st.integers(0, 2))
def test_writers_of_one_document_leave_one_version_of_it(index, versions, readers):
    doc = f"d-{uuid.uuid4().hex[:8]}.md"
    texts = [doc_text(v) for v in versions]
    whole = [{x.id for p in index.check_turns(document_turns(t, doc_id=doc)) for x in p.pieces} for t in texts]
    index.add_documents({"id": doc, "text": texts[0]})  # the writers below each keep some of its sections
    searches = [lambda: index.search("alpha bravo", k=5, thread_id=doc, score_threshold=None)] * readers
    race([*(lambda t=t: index.add_documents({"id": doc, "text": t}) for t in texts[1:]), *searches])
    stored = set().union(*stored_turns(index, doc).values())
    assert stored in whole[1:], f"document {doc} holds a mix of versions ({len(stored)} pieces)"


class Gate(HashEmbedder):
    """Holds its first embedding until ``open`` is set (``entered`` says it is waiting)."""

    def __init__(self) -> None:
        self.entered, self.open = threading.Event(), threading.Event()

    def embed(self, texts):
        self.entered.set()
        assert self.open.wait(60)
        return super().embed(texts)


def test_a_section_kept_as_it_was_but_changed_meanwhile_is_written_again(tmp_path):
    """Two indexes on one folder in one process: A diffs (section 1 unchanged, section 2 changed) and
    embeds; meanwhile B rewrites section 1. A's write finds the store moved on, reads it again, embeds
    section 1 again under the write lock, and the document is A's version whole, in both indexes."""
    gate = Gate()
    a = ContextualIndex(tmp_path / "store", embedder=gate)
    b = ContextualIndex(tmp_path / "store", embedder=HashEmbedder())
    base, mine, theirs = (
        doc_text(["Alpha bravo.", "Charlie delta."]),
        doc_text(["Alpha bravo.", "Echo fox."]),
        doc_text(["Golf hotel.", "Charlie delta."]),
    )
    b.add_documents({"id": "d.md", "text": base})
    assert b.search("alpha", k=5, thread_id="d.md", score_threshold=None)  # b caches the thread
    writer = threading.Thread(target=a.add_documents, args=({"id": "d.md", "text": mine},))
    writer.start()
    assert gate.entered.wait(60)
    b.add_documents({"id": "d.md", "text": theirs})
    gate.open.set()
    writer.join(60)
    expected = {x.id for p in a.check_turns(document_turns(mine, doc_id="d.md")) for x in p.pieces}
    assert set().union(*stored_turns(a, "d.md").values()) == expected
    for index in (a, b):  # neither serves a cached older version
        hits = index.search("golf hotel alpha echo", k=10, thread_id="d.md", score_threshold=None)
        assert {h.id for g in hits for h in g.hits} == expected
    a.close()
    b.close()
