"""Which parts ``time_windows="asking"`` reads as asks (:func:`ctxret.query.split.asks`), on hand-written
sentences: asks in several general English forms get their window, statements that name a time do not."""

from __future__ import annotations

from datetime import datetime

import pytest
from ctxret.query.split import asks
from ctxret.query.time import part_windows

NOW = datetime(2024, 3, 1, 12, 0)

ASKS = [
    "Where did we park the van last Tuesday?",  # question mark
    "how did the vet visit go yesterday",  # unpunctuated question
    "What did the plumber quote us last week.",  # wh-word + auxiliary, closed by a full stop
    "Who was at the dinner on Saturday.",
    "Tell me what the landlord said yesterday.",  # request verbs
    "Show me the receipts from last month.",
    "Find the notes about the boiler from last week.",
    "Recall what the doctor advised two days ago.",
    "Recap what we agreed on in January.",
    "Do you remember what Priya cooked last Friday.",
    "I want to know what the agent said yesterday.",
    "I wonder what the landlord decided last week.",  # indirect asks
    "Any idea who called the office yesterday.",
    "I can't remember where we left the keys last night.",
    "I forgot whether the bank replied last week.",
]

STATEMENTS = [
    "I went to the farmers market yesterday.",
    "Yesterday the landlord fixed the heating.",
    "We agreed on the budget last week.",
    "When I got home last night, the dog was outside.",
    "I remember the concert last Saturday fondly.",
    "Priya wants to know more about pottery since last month.",
    "What a storm we had yesterday.",
    "I wonder about the move we planned last month.",  # no wh-word / if / whether: musing, not asking
]


@pytest.mark.parametrize("text", ASKS)
def test_asks_in_general_forms_are_asks(text):
    assert asks(text)


@pytest.mark.parametrize("text", STATEMENTS)
def test_statements_that_name_a_time_are_not_asks(text):
    assert not asks(text)


def test_asking_windows_follow_the_rule():
    # each sentence names a time, so with asking=False every part has a window; with asking=True only the asks do
    parts = ASKS + STATEMENTS
    every = part_windows(parts, NOW)
    assert all(w is not None for w in every), [p for p, w in zip(parts, every, strict=True) if w is None]
    got = part_windows(parts, NOW, asking=True)
    assert [w is not None for w in got] == [True] * len(ASKS) + [False] * len(STATEMENTS)
