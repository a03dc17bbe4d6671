"""Turn numbers survive gaps: an append goes after the thread's highest turn number, whatever gaps lie under it.

The defects: the end of a thread was found by probing single turns from 1, and a probe that met a gap stopped there.
On an embedded folder, after a middle turn was deleted the next append was written into the gap, and after
``first_turn=5`` a plain append went to turn 1. On a Chroma server, a writer killed after claiming a turn left a gap
with its claim in it: appends re-claimed stored numbers until they gave up (all three writers of a 60-kill run
wedged; 32 calls failed after about a minute each), a reply re-sent while the killed writer held the turn it
continued blocked for the whole claim lease and failed, and a reply sent after another writer's question joined that
question's turn. Now the end is read exactly (``storage/threads.py``; a head record per thread on a server,
``storage/claims.py``), a claim held by a process that is gone is taken over at once, and a reply continues the turn
its own process's last append left awaiting it.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from ctxret import ContextualIndex, Store
from ctxret.ingest.append import append_messages

from .hash_embedder import HashEmbedder


def q(n: int, who: str = "a") -> dict[str, str]:
    return {"role": "user", "content": f"{who} question {n}: what is the status of task {who}-{n}?", "id": f"{who}q{n}"}


def r(n: int, who: str = "a") -> dict[str, str]:
    return {"role": "assistant", "content": f"{who} answer {n}: task {who}-{n} is done.", "id": f"{who}r{n}"}


def turns(index: ContextualIndex, thread: str = "t") -> dict[int, list[str]]:
    """``turn_index`` -> the message ids its pieces came from, in order."""
    out: dict[int, list[tuple[int, str]]] = {}
    for rec in index.store.records():
        m = rec["metadata"]
        if m["thread_id"] == thread and m.get("kind") == "turn":
            out.setdefault(int(m["turn_index"]), []).append((int(m["source_ordinal"]), str(m["message_key"])[3:]))
    return {t: [k for _, k in sorted(set(v))] for t, v in sorted(out.items())}


def embedded(tmp_path) -> ContextualIndex:
    return ContextualIndex(tmp_path / f"store-{uuid.uuid4().hex[:6]}", embedder=HashEmbedder(), progress=False)


def test_an_append_after_a_middle_turn_was_deleted_goes_after_the_last_turn(tmp_path):
    index = embedded(tmp_path)
    for n in (1, 2, 3):
        index.add_messages([q(n), r(n)], thread_id="t")
    assert index.delete(thread_id="t", where={"ctxret:turn_index": 2}) == 2
    index.add_messages([q(4), r(4)], thread_id="t")
    assert turns(index) == {1: ["aq1", "ar1"], 3: ["aq3", "ar3"], 4: ["aq4", "ar4"]}  # before: turn 2 written again
    folder = index.store.chroma.path
    index.close()
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False) as again:  # a new process's first append
        again.delete(thread_id="t", where={"ctxret:turn_index": 3})
        again.add_messages([q(5), r(5)], thread_id="t")
        assert sorted(turns(again)) == [1, 4, 5]


def test_a_plain_append_after_numbered_turns_goes_after_them(tmp_path):
    index = embedded(tmp_path)
    index.add_messages([q(5), r(5)], thread_id="t", first_turn=5)
    index.add_messages([q(6), r(6)], thread_id="t")
    assert turns(index) == {5: ["aq5", "ar5"], 6: ["aq6", "ar6"]}  # before: the append went to turn 1
    index.add_messages([r(7)], thread_id="t")  # a reply sent alone continues the last turn
    assert turns(index)[6] == ["aq6", "ar6", "ar7"]
    index.replace_messages([q(1)], thread_id="t")  # a rewrite: the thread ends at its new last turn
    index.add_messages([q(2)], thread_id="t")
    assert turns(index) == {1: ["aq1"], 2: ["aq2"]}
    index.delete(thread_id="t")
    index.add_messages([q(3)], thread_id="t")  # a thread deleted whole starts again at 1
    assert turns(index) == {1: ["aq3"]}
    index.close()


OTHER_PROCESS = (
    "import sys; sys.path.insert(0, {tests!r}); from ctxret import ContextualIndex; "
    "from reliability.hash_embedder import HashEmbedder; "
    "ix = ContextualIndex({folder!r}, embedder=HashEmbedder(), progress=False); "
    "ix.add_messages([{{'role': 'user', 'content': 'other process note', 'id': 'o1'}}], thread_id='t'); ix.close()"
)


def test_what_a_process_knows_of_a_threads_end_is_forgotten_when_it_gives_the_folder_up(tmp_path):
    from pathlib import Path

    index = embedded(tmp_path)
    folder = index.store.chroma.path
    index.add_messages([q(1)], thread_id="t")  # this process now knows the thread ends at turn 1
    index.close()
    tests = str(Path(__file__).resolve().parents[1])
    code = OTHER_PROCESS.format(tests=tests, folder=str(folder))
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert other.returncode == 0, other.stderr[-1500:]
    with ContextualIndex(folder, embedder=HashEmbedder(), progress=False) as again:
        again.add_messages([q(2)], thread_id="t")
        assert turns(again) == {1: ["aq1"], 2: ["o1"], 3: ["aq2"]}  # never over the other process's turn 2


def test_a_reply_continues_the_question_its_own_process_left_awaiting_it(tmp_path):
    index = embedded(tmp_path)
    index.add_messages([q(1)], thread_id="t")  # this writer's question: turn 1, awaiting its reply
    index.add_messages([q(1, "b")], thread_id="t", first_turn=2)  # another writer's question comes in between
    index.add_messages([r(1)], thread_id="t")  # this writer's reply
    assert turns(index) == {1: ["aq1", "ar1"], 2: ["bq1"]}  # before: the reply joined turn 2, the other's question
    index.add_messages([r(1, "b")], thread_id="t")  # nothing awaits here any more: the last turn
    assert turns(index)[2] == ["bq1", "br1"]
    index.close()


def test_a_reply_sent_with_its_question_continues_that_question_in_any_process(tmp_path):
    index = embedded(tmp_path)
    index.add_messages([q(1)], thread_id="t")
    index.add_messages([q(1, "b")], thread_id="t", first_turn=2)
    getattr(index.store, "own", {}).clear()  # a new process (a writer restarted): it remembers no turn of its own
    index.add_messages([q(1), r(1)], thread_id="t")  # the exchange sent again: the question is known by its id
    assert turns(index) == {1: ["aq1", "ar1"], 2: ["bq1"]}  # before: the reply joined turn 2
    index.add_messages([q(2)], thread_id="t")
    index.add_messages([q(2, "b")], thread_id="t", first_turn=4)
    getattr(index.store, "own", {}).clear()
    index.add_messages([q(2)], thread_id="t")  # the question sent again alone (it was stored before a restart) ...
    index.add_messages([r(2)], thread_id="t")  # ... then its reply alone
    assert turns(index)[3] == ["aq2", "ar2"] and turns(index)[4] == ["bq2"]
    index.close()


# -- a Chroma server ------------------------------------------------------------------------------------------------
def server_index(chroma_server, collection: str) -> ContextualIndex:
    store = Store.server(chroma_server.host, chroma_server.port, collection=collection)
    return ContextualIndex(store, embedder=HashEmbedder(), progress=False)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(60)
    return proc.pid


def killed_writer_claims(index: ContextualIndex, thread: str, *, new: int | None = None, turn: tuple | None = None):
    """What a writer killed after its claim leaves: a new-turn number or a continuation slot, held by a dead process
    (another process's token, a fresh time: its lease has not run out)."""
    from ctxret.storage.claims import TurnClaims

    other = TurnClaims(index.store.backend)
    pid = dead_pid()
    if new is not None:
        assert other.claim_new(thread, [new]) == {new}
        rid = other.slot_id(thread, new, 0)
    else:
        rid = other.claim_continuation(thread, *turn)
        assert rid is not None
    rec = index.store.backend.get([rid], include=("metadatas",), name=other.collection())[0]
    meta = {**rec["metadata"], "pid": pid}  # the claimer's process is gone (a kill -9)
    index.store.backend.upsert([rid], [[1.0]], [""], [meta], name=other.collection())


@pytest.mark.slow
def test_appends_after_a_killed_writers_claim_go_after_every_number_in_use(chroma_server):
    collection = f"gaps-{uuid.uuid4().hex[:8]}"
    index = server_index(chroma_server, collection)
    for n in (1, 2, 3):
        index.add_messages([q(n), r(n)], thread_id="t")
    killed_writer_claims(index, "t", new=4)  # turn 4 claimed, never written
    index.add_messages([q(5), r(5)], thread_id="t")
    index.add_messages([q(6), r(6)], thread_id="t")
    assert sorted(turns(index)) == [1, 2, 3, 5, 6]
    fresh = server_index(chroma_server, collection)  # another process: nothing remembered
    fresh.store.heads.clear()
    fresh.add_messages([q(7), r(7)], thread_id="t")  # before: every call re-claimed turn 5 and failed after 50 tries
    fresh.add_messages([r(8)], thread_id="t")  # a reply: the last stored turn, never the claimed gap
    fresh.store.claims.set_head("t", 2)  # a head record left low (two writes raising it at once): only a floor
    fresh.add_messages([q(9)], thread_id="t")
    assert turns(fresh) == {
        1: ["aq1", "ar1"],
        2: ["aq2", "ar2"],
        3: ["aq3", "ar3"],
        5: ["aq5", "ar5"],
        6: ["aq6", "ar6"],
        7: ["aq7", "ar7", "ar8"],
        8: ["aq9"],
    }
    fresh.delete(thread_id="t")
    fresh.add_messages([q(10)], thread_id="t")  # deleted whole: its head record goes too
    assert turns(fresh) == {1: ["aq10"]}
    fresh.close()
    index.close()


@pytest.mark.slow
def test_a_reply_is_not_held_up_by_a_killed_writers_claim_on_its_turn(chroma_server):
    index = server_index(chroma_server, f"held-{uuid.uuid4().hex[:8]}")
    index.add_messages([q(1)], thread_id="t")
    killed_writer_claims(index, "t", turn=(1, 1))  # a killed writer was adding to turn 1 (its version 1)
    waits: list[float] = []
    result = append_messages(index.store, [r(1)], "t", include_system=False, write=index.add_turns, sleep=waits.append)
    assert result.added >= 1 and turns(index) == {1: ["aq1", "ar1"]}
    assert waits == []  # taken over at once: its process is gone (before: waited out the 60 s lease, then failed)
    index.close()
