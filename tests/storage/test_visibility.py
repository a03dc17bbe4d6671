"""``InFlight``: what a read must not show of the changes in flight, and which reads a change touched."""

from __future__ import annotations

import threading

from ctxret.storage.visibility import NOTHING, InFlight


def test_nothing_is_hidden_without_changes():
    inflight = InFlight()
    stamp = inflight.begin()
    assert inflight.end(stamp) is NOTHING
    assert not inflight.touched(None, stamp)


def test_a_write_is_seen_before_it_while_adding_and_after_it_while_removing():
    inflight = InFlight()
    with inflight.change({"t"}) as change:
        inflight.adding(change, ["new-1", "new-2"])
        stamp = inflight.begin()
        hidden = inflight.end(stamp)
        assert "new-1" in hidden and "new-2" in hidden and "old-1" not in hidden
        inflight.removing(change, ["old-1"])
        stamp = inflight.begin()
        hidden = inflight.end(stamp)
        assert "old-1" in hidden and "new-1" not in hidden


def test_the_stale_ids_of_a_write_that_ended_during_a_read_stay_hidden_for_that_read():
    inflight = InFlight()
    stamp = inflight.begin()  # a read begins
    with inflight.change({"t"}) as change:
        inflight.adding(change, ["new"])
        inflight.removing(change, ["old"])
    late = inflight.begin()  # a read that begins after the write
    assert "old" in inflight.end(stamp)  # the first read may hold "old" from before the delete
    assert inflight.end(late) is NOTHING
    assert inflight._ended == []  # nothing kept once no read needs it


def test_a_clear_hides_everything_while_it_runs():
    inflight = InFlight()
    with inflight.change(None) as change:
        inflight.removing(change, everything=True)
        stamp = inflight.begin()
        assert "anything" in inflight.end(stamp)


def test_touched_names_the_threads_of_changes_in_flight_or_ended_since():
    inflight = InFlight()
    stamp = inflight.begin()
    with inflight.change({"a"}):
        assert inflight.touched({"a"}, stamp) and inflight.touched(None, stamp)
        assert not inflight.touched({"b"}, stamp)
    assert inflight.touched({"a"}, stamp)  # it ended after the stamp
    assert not inflight.touched({"a"}, inflight.begin())
    with inflight.change(None):  # a change of any thread touches every thread
        assert inflight.touched({"b"}, stamp)


def test_wait_returns_once_the_change_of_that_thread_is_over_and_never_waits_for_its_own():
    inflight = InFlight()
    entered, release = threading.Event(), threading.Event()

    def write() -> None:
        with inflight.change({"a"}):
            entered.set()
            release.wait(30)

    writer = threading.Thread(target=write)
    writer.start()
    assert entered.wait(30)
    assert not inflight.wait({"a"}, timeout=0.05)  # still in flight
    assert inflight.wait({"b"}, timeout=0)  # another thread is not held up
    release.set()
    assert inflight.wait({"a"}, timeout=30)
    writer.join(30)
    with inflight.change({"a"}):
        assert inflight.wait({"a"}, timeout=0)  # a writer reading its own thread does not wait for itself


def test_a_session_sees_a_write_from_the_side_it_was_on_when_it_opened():
    """The defect: each read of an unscoped search took its own side, so the graph search saw the old pieces and the
    texts, read after the write ended, found them gone: the rewritten thread was missing from the answer."""
    from ctxret.storage.visibility import Session

    inflight = InFlight()
    before, after = Session(), Session()
    waited: list[float] = []
    removed = threading.Event()
    with inflight.change({"t"}) as change:
        inflight.adding(change, ["new"])
        inflight.open(before)  # opened while the write adds: it sees the store before it, to its last read
        assert "new" in inflight.seen(before) and "old" not in inflight.seen(before)

        def remove() -> None:
            import time

            t0 = time.monotonic()
            inflight.removing(change, ["old"])  # waits for `before` to end: "old" must stay readable for it
            waited.append(time.monotonic() - t0)
            removed.set()

        remover = threading.Thread(target=remove)
        remover.start()
        assert not removed.wait(0.2) and inflight.held() == 1
        assert "new" in inflight.seen(before) and "old" not in inflight.seen(before)  # still before, though removing
        inflight.open(after)  # opened while the write removes: after it
        assert "old" in inflight.seen(after) and "new" not in inflight.seen(after)
        inflight.close(before)
        assert removed.wait(30)
        remover.join(30)
    assert waited and waited[0] >= 0.2
    assert "old" in inflight.seen(after)  # the write ended while `after` was open: still after it
    inflight.close(after)
    assert inflight._ended == [] and inflight.held() == 0


def test_a_write_never_waits_for_its_own_thread_s_session_and_waits_at_most_the_grace():
    from ctxret.storage.visibility import Session

    inflight = InFlight()
    mine = Session()
    inflight.open(mine)
    with inflight.change({"t"}) as change:
        inflight.removing(change, ["old"])  # returns at once: the session is this thread's
    inflight.close(mine)
    inflight.grace = 0.1
    other: list[Session] = []
    opened = threading.Event()

    def search() -> None:
        s = Session()
        inflight.open(s)
        other.append(s)
        opened.set()

    reader = threading.Thread(target=search)
    reader.start()
    assert opened.wait(30)
    reader.join(30)
    with inflight.change({"t"}) as change:
        inflight.removing(change, ["old"])  # a session left open: the write goes on after the grace
    inflight.close(other[0])
    with inflight.change({"t"}) as change:
        inflight.removing(change)  # nothing to remove: nothing to wait for
