"""A conversation's title labels its turns (``titled_turn``): one line, bounded, the same every time."""

from __future__ import annotations

from ctxret.ingest.messages import MAX_TITLE_CHARS, titled_turn, turns_from_messages
from ctxret.ingest.turns import label_pieces
from ctxret.text import clean_text
from hypothesis import given
from hypothesis import strategies as st

TURN = turns_from_messages([{"role": "user", "content": "Book a hotel near Alfama."}], "conv-1", first_turn=3)[0]


def test_the_title_heads_every_piece_of_the_turn():
    titled = titled_turn(TURN, "Lisbon trip")
    assert titled.label == "Lisbon trip · Turn 3" and titled.sources == TURN.sources
    assert [p.header for p in label_pieces(titled)] == ["[Lisbon trip · Turn 3 · User]"]
    assert titled_turn(TURN, None) is TURN and titled_turn(TURN, "  \n ") is TURN


@given(st.text(max_size=300))
def test_any_title_gives_one_bounded_line_the_same_every_time(title):
    titled = titled_turn(TURN, title)
    words = clean_text(title).split()  # control characters are spaces, as in every stored text
    if not words:
        assert titled is TURN
        return
    name, _, rest = titled.label.rpartition(" · ")
    assert rest == "Turn 3" and name and "\n" not in titled.label and name == name.strip()
    whole = " ".join(words)
    assert name == whole if len(whole) <= MAX_TITLE_CHARS else (len(name) <= MAX_TITLE_CHARS + 1 and name[-1] == "…")
    assert titled_turn(titled, title) == titled  # titled again: the same label
    assert titled_turn(TURN, "  ".join(title.split())) == titled  # whitespace does not change it
