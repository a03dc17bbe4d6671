"""The floor (ctxret.query.floor): a part with no answer comes back empty, a part with one keeps its hits down to half
the floor, a part that names a time window has no floor, and a part naming someone the thread never mentions is
empty. Real store, real model."""

from __future__ import annotations

from datetime import datetime

import pytest
from ctxret.query.floor import HIT_SHARE, hit_floor, part_answered

FLIGHT = [
    {
        "role": "user",
        "content": "Book me a flight from Berlin to Lisbon for October 20.",
        "timestamp": "2026-10-03T09:00:00",
    },
    {
        "role": "assistant",
        "content": "Booked TAP flight TP 541, departing at 09:40 on October 20.",
        "timestamp": "2026-10-03T09:00:05",
    },
    {
        "role": "user",
        "content": "Also, my dog Biscuit needs his vaccinations next week.",
        "timestamp": "2026-10-04T09:00:00",
    },
    {
        "role": "assistant",
        "content": "Biscuit's vet appointment is on Thursday at 4 PM at Green Paws.",
        "timestamp": "2026-10-04T09:00:05",
    },
]
PAINTING = [
    {"role": "user", "content": "I finally finished the watercolor of the harbour at sunset, it took three weekends."},
    {"role": "assistant", "content": "That sounds lovely! Are you going to frame it for the living room?"},
    {"role": "user", "content": "Yes, and my sister Ana wants one of the old lighthouse next."},
    {"role": "assistant", "content": "A lighthouse series would look great together."},
]


@pytest.fixture(scope="module")
def index_embedder(local_embedder):
    return local_embedder  # the floor is calibrated on the real model's cosines


@pytest.fixture(scope="module")
def index_options():
    return {"in_memory": True}


@pytest.fixture(scope="module")
def index_data():
    def fill(ix):
        ix.add_messages(FLIGHT, thread_id="trip")
        ix.add_messages(PAINTING, thread_id="art")

    return fill


# -- the rule ----------------------------------------------------------------------------------------------------
def test_part_answered_needs_a_hit_over_the_floor():
    assert part_answered([0.31, 0.1], [0.0, 0.0], 0.3, 0.3)
    assert not part_answered([0.29, 0.2], [0.0, 0.0], 0.3, 0.3)
    assert part_answered([0.2], [0.5], 0.3, 0.3)  # rescued by its words (cosine >= half the floor)
    assert not part_answered([0.2], [0.5], 0.3, None)  # lexical_floor=None: no rescue
    assert not part_answered([0.2], None, 0.3, 0.3)  # dense search: no rescue
    assert not part_answered([], None, 0.3, 0.3)
    assert part_answered([-1.0], None, None, 0.3)  # no floor


def test_the_hit_floor_is_half_the_floor():
    assert hit_floor(0.3) == pytest.approx(0.3 * HIT_SHARE) == pytest.approx(0.15)
    assert hit_floor(None) is None


# -- the search ----------------------------------------------------------------------------------------------------
def test_a_question_nothing_answers_comes_back_empty(index):
    groups = index.search("When does my flight to Lisbon leave? Who won the 1998 World Cup?", k=3, thread_id="trip")
    assert [len(g.hits) for g in groups][1] == 0
    assert groups[0].hits


def test_a_group_with_an_answer_keeps_hits_down_to_half_the_floor(index):
    """Before: every hit under the floor (0.30) was dropped; the group keeps its ranking down to 0.15 now."""
    group = index.search("When does my flight to Lisbon leave?", k=4, thread_id="trip")[0]
    cosines = [h.scores["cosine"] for h in group.hits]
    assert max(cosines) >= 0.3
    assert any(c < 0.3 for c in cosines) and all(c >= 0.15 for c in cosines)
    strict = index.search("When does my flight to Lisbon leave?", k=4, thread_id="trip", cosine_floor=0.3)[0]
    assert len(strict.hits) == len(group.hits)  # the user's floor is the same rule


def test_a_question_about_nothing_in_the_thread_is_empty_even_when_a_weak_hit_shares_a_name(index):
    """The part's best hits are weak (cosine under the floor): the whole group is empty, whatever lies deeper."""
    groups = index.search("Which instrument does Ana play in the orchestra?", k=3, thread_id="art")
    assert groups[0].hits == ()
    assert index.search("What did Ana ask for?", k=3, thread_id="art")[0].hits


def test_a_vague_question_is_answered_by_meaning(index):
    """No word of 'What is the painting of?' is in the thread ('watercolor'): a test on the part's words would
    empty it (measured and not shipped: ctxret.query.floor)."""
    group = index.search("What is the painting of?", k=3, thread_id="art")[0]
    assert group.hits and "watercolor" in group.hits[0].body


def test_what_did_we_decide_yesterday_is_answered_from_yesterday(index):
    """Before: the window was right, and the 0.30 floor dropped every turn in it (cosines 0.10-0.25)."""
    now = datetime(2026, 10, 5, 12)
    group = index.search("What did we decide yesterday?", k=4, thread_id="trip", now=now)[0]
    assert group.window is not None and group.window_note == ""
    assert group.hits and all(h.scores["cosine"] < 0.3 for h in group.hits)
    start, end = group.window
    assert all(start <= datetime.fromisoformat(h.metadata["ctxret:timestamp"]) < end for h in group.hits)
    plain = index.search("What did we decide yesterday?", k=4, thread_id="trip", now=now, time_windows=False)
    assert plain[0].hits == ()  # without its window the part is vague: the floor empties it


def test_since_and_until_alone_keep_the_floor(index):
    groups = index.search("Who won the 1998 World Cup?", k=3, thread_id="trip", since="2026-10-01", until="2026-10-06")
    assert groups[0].hits == ()
