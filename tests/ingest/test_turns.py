"""ctxret.turns: chat messages → turns → sources → labelled pieces (DESIGN §3, §4 "Labels", §6)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from ctxret import InputError
from ctxret.ingest.messages import turns_from_messages
from ctxret.ingest.turns import (
    MIN_BODY_BYTES,
    Piece,
    Source,
    Turn,
    format_time,
    label_pieces,
    make_header,
    parse_time,
    piece_id,
)
from ctxret.text import clean_text
from hypothesis import given, settings
from hypothesis import strategies as st

PROPS = settings(max_examples=100, deadline=None)


def nonws(text: str) -> str:
    return "".join(c for c in text if not c.isspace())


def nbytes(text: str) -> int:
    return len(text.encode("utf-8"))


ARGS = '{"month": "2026-10", "format": "csv", "carrier": "DHL"}'


def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You are a logistics assistant."},
        {"role": "user", "content": "Export the October shipments, please.", "timestamp": "2026-10-16T14:00:00"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "logistics_export", "arguments": ARGS},
                }
            ],
            "timestamp": "2026-10-16T14:02:00",
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rows: 42. file: oct.csv"},
        {"role": "assistant", "content": "Done. The export has 42 rows.", "timestamp": "2026-10-16T14:03:00"},
        {"role": "user", "content": "Thanks! Now the dogs: what are their names again?"},
        {"role": "assistant", "content": "Your dogs are called Pepper and Miso."},
    ]


# --------------------------------------------------------------------------- turns and sources


def test_turns_and_sources_of_an_openai_conversation():
    turns = turns_from_messages(conversation(), "thread-a")
    assert [t.index for t in turns] == [1, 2]
    assert [t.label for t in turns] == ["Turn 1", "Turn 2"]
    assert [t.turn_id for t in turns] == ["thread-a#1", "thread-a#2"]
    t1 = turns[0]
    assert isinstance(t1, Turn) and all(isinstance(s, Source) for s in t1.sources)
    assert [(s.kind, s.label, s.ordinal) for s in t1.sources] == [
        ("user", "User", 0),
        ("tool", "Tool logistics_export", 1),
        ("assistant", "Assistant", 2),
    ]
    assert t1.sources[0].text == "Export the October shipments, please."
    assert t1.sources[1].name == "logistics_export"
    assert t1.sources[2].text == "Done. The export has 42 rows."
    assert t1.timestamp == datetime(2026, 10, 16, 14, 0)
    assert [s.kind for s in turns[1].sources] == ["user", "assistant"]
    assert turns[1].timestamp is None


def test_tool_source_holds_name_full_arguments_and_full_result():
    tool = turns_from_messages(conversation())[0].sources[1]
    assert "logistics_export" in tool.text
    assert ARGS in tool.text
    assert "rows: 42. file: oct.csv" in tool.text
    assert tool.text == f"logistics_export arguments: {ARGS}\nResult: rows: 42. file: oct.csv"
    assert tool.timestamp == datetime(2026, 10, 16, 14, 2)


def test_tool_arguments_given_as_a_dict_are_serialised_as_json():
    msgs = [
        {"role": "user", "content": "Look it up."},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "lookup", "arguments": {"q": "Miso", "n": 3}}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "found"},
    ]
    tool = turns_from_messages(msgs)[0].sources[1]
    assert json.dumps({"n": 3, "q": "Miso"}) in tool.text


def test_several_tool_calls_matched_by_id_in_any_order():
    msgs = [
        {"role": "user", "content": "Weather in Oslo and Lima?"},
        {
            "role": "assistant",
            "content": "Checking both.",
            "tool_calls": [
                {"id": "a", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
                {"id": "b", "function": {"name": "weather", "arguments": '{"city": "Lima"}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "b", "content": "Lima: 19C"},
        {"role": "tool", "tool_call_id": "a", "content": "Oslo: 3C"},
    ]
    (turn,) = turns_from_messages(msgs)
    assert [s.kind for s in turn.sources] == ["user", "assistant", "tool", "tool"]
    oslo, lima = turn.sources[2], turn.sources[3]
    assert "Oslo" in oslo.text and "Oslo: 3C" in oslo.text and "Lima" not in oslo.text
    assert "Lima" in lima.text and "Lima: 19C" in lima.text and "Oslo" not in lima.text


def test_tool_call_without_result_is_kept():
    msgs = [
        {"role": "user", "content": "Do it."},
        {"role": "assistant", "tool_calls": [{"id": "x", "function": {"name": "act", "arguments": "{}"}}]},
    ]
    tool = turns_from_messages(msgs)[0].sources[1]
    assert tool.text == "act arguments: {}\nResult: (none)"


def test_tool_result_with_no_matching_call_is_kept_not_dropped(caplog):
    msgs = [
        {"role": "user", "content": "What happened?"},
        {"role": "tool", "tool_call_id": "ghost", "name": "audit_log", "content": "3 entries deleted"},
    ]
    with caplog.at_level(logging.WARNING, logger="ctxret.turns"):
        (turn,) = turns_from_messages(msgs)
    tool = turn.sources[1]
    assert tool.kind == "tool"
    assert tool.label == "Tool audit_log"
    assert "3 entries deleted" in tool.text
    assert "no matching tool call" in caplog.text
    pieces = label_pieces(turn)
    assert any("3 entries deleted" in p.text for p in pieces)


def test_unmatched_tool_result_without_a_name():
    msgs = [{"role": "user", "content": "Hm."}, {"role": "tool", "content": "orphan result"}]
    tool = turns_from_messages(msgs)[0].sources[1]
    assert tool.label == "Tool result" and "orphan result" in tool.text


def test_legacy_function_call_and_function_result():
    msgs = [
        {"role": "user", "content": "Add them."},
        {"role": "assistant", "function_call": {"name": "add", "arguments": '{"a": 1, "b": 2}'}},
        {"role": "function", "name": "add", "content": "3"},
    ]
    tool = turns_from_messages(msgs)[0].sources[1]
    assert tool.label == "Tool add"
    assert tool.text == 'add arguments: {"a": 1, "b": 2}\nResult: 3'


def test_messages_before_the_first_user_message_form_their_own_turn():
    msgs = [
        {"role": "assistant", "content": "Welcome back! Last time we talked about your dogs."},
        {"role": "user", "content": "Right, what are their names?"},
    ]
    turns = turns_from_messages(msgs)
    assert [t.index for t in turns] == [1, 2]
    assert [[s.kind for s in t.sources] for t in turns] == [["assistant"], ["user"]]


def test_system_messages_skipped_by_default():
    turns = turns_from_messages(conversation())
    assert all(s.kind != "system" for t in turns for s in t.sources)
    # a skipped system prompt does not use up a turn number: the first turn is Turn 1
    assert turns[0].index == 1 and turns[0].sources[0].kind == "user"


def test_system_messages_kept_with_include_system():
    turns = turns_from_messages(conversation(), include_system=True)
    assert [t.index for t in turns] == [1, 2, 3]
    (system,) = turns[0].sources
    assert (system.kind, system.label, system.text) == ("system", "System", "You are a logistics assistant.")
    msgs = [{"role": "user", "content": "hi there"}, {"role": "developer", "content": "Be brief."}]
    (turn,) = turns_from_messages(msgs, include_system=True)
    assert [s.kind for s in turn.sources] == ["user", "system"]


def test_content_as_a_list_of_parts():
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look at this photo"},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
                {"type": "text", "text": "and tell me the breed."},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A beagle."}, {"type": "refusal", "refusal": "No more."}],
        },
    ]
    (turn,) = turns_from_messages(msgs)
    # media is described, never dropped to a bare "[image_url]"
    assert turn.sources[0].text == "Look at this photo\n[image: https://example.com/a.png]\nand tell me the breed."
    assert turn.sources[1].text == "A beagle.\nNo more."


def test_user_and_assistant_names_become_labels():
    msgs = [
        {"role": "user", "name": "Caroline", "content": "I adopted a second dog."},
        {"role": "assistant", "name": "Melanie", "content": "That is wonderful news!"},
    ]
    (turn,) = turns_from_messages(msgs)
    assert [s.label for s in turn.sources] == ["Caroline", "Melanie"]
    assert [s.name for s in turn.sources] == ["Caroline", "Melanie"]


def test_empty_and_whitespace_messages():
    assert turns_from_messages([]) == []
    assert turns_from_messages([{"role": "user", "content": "   \n"}]) == []
    assert turns_from_messages([{"role": "user", "content": None}]) == []
    # an empty user message still opens a turn for what follows
    turns = turns_from_messages([{"role": "user", "content": ""}, {"role": "assistant", "content": "Anything else?"}])
    assert [[s.kind for s in t.sources] for t in turns] == [["assistant"]]


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2026-10-16T14:02:00", datetime(2026, 10, 16, 14, 2)),
        ("2026-10-16 14:02", datetime(2026, 10, 16, 14, 2)),
        ("2026-10-16T14:02:00Z", datetime(2026, 10, 16, 14, 2, tzinfo=timezone.utc)),
        ("2026-10-16T14:02:00+02:00", datetime(2026, 10, 16, 14, 2, tzinfo=timezone(timedelta(hours=2)))),
        (datetime(2026, 10, 16, 14, 2), datetime(2026, 10, 16, 14, 2)),
        (1792159320, datetime(2026, 10, 16, 14, 2, tzinfo=timezone.utc)),
        (1792159320.5, datetime(2026, 10, 16, 14, 2, 0, 500000, tzinfo=timezone.utc)),
        (None, None),
        ("", None),
    ],
)
def test_parse_time(value, expected):
    assert parse_time(value) == expected


@pytest.mark.parametrize(
    "key, value",
    [
        ("timestamp", "2026-10-16T14:02:00Z"),
        ("created_at", 1792159320),
        ("time", datetime(2026, 10, 16, 14, 2, tzinfo=timezone.utc)),
        ("date", "2026-10-16T14:02:00+00:00"),
    ],
)
def test_message_timestamps_in_every_form(key, value):
    (turn,) = turns_from_messages([{"role": "user", "content": "hello there", key: value}])
    assert turn.timestamp == datetime(2026, 10, 16, 14, 2, tzinfo=timezone.utc)
    assert turn.sources[0].timestamp == turn.timestamp
    (piece,) = label_pieces(turn)
    assert piece.header == "[Turn 1 · User · Oct 16, 2026, 2:02 PM]"


def test_missing_timestamps_leave_the_time_out_of_the_header():
    (turn,) = turns_from_messages([{"role": "user", "content": "hello there"}])
    assert turn.timestamp is None
    (piece,) = label_pieces(turn)
    assert piece.header == "[Turn 1 · User]"
    assert piece.timestamp is None


def test_turn_time_is_the_first_timed_message_and_untimed_sources_inherit_it():
    msgs = [
        {"role": "user", "content": "no time on this one"},
        {"role": "assistant", "content": "this one has a time", "timestamp": "2026-10-16T09:30:00"},
    ]
    (turn,) = turns_from_messages(msgs)
    assert turn.timestamp == datetime(2026, 10, 16, 9, 30)
    user, assistant = label_pieces(turn)
    assert user.header == "[Turn 1 · User · Oct 16, 2026, 9:30 AM]"
    assert assistant.header == "[Turn 1 · Assistant · Oct 16, 2026, 9:30 AM]"


def test_tool_source_takes_the_result_time_when_the_call_has_none():
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "ok", "timestamp": "2026-10-16T14:05:00"},
    ]
    tool = turns_from_messages(msgs)[0].sources[1]
    assert tool.timestamp == datetime(2026, 10, 16, 14, 5)


@pytest.mark.parametrize(
    "dt, text",
    [
        (datetime(2026, 10, 16, 14, 2), "Oct 16, 2026, 2:02 PM"),
        (datetime(2026, 10, 16, 0, 5), "Oct 16, 2026, 12:05 AM"),
        (datetime(2026, 10, 16, 0, 0), "Oct 16, 2026, 12:00 AM"),
        (datetime(2026, 10, 16, 11, 59), "Oct 16, 2026, 11:59 AM"),
        (datetime(2026, 10, 16, 12, 0), "Oct 16, 2026, 12:00 PM"),
        (datetime(2026, 10, 16, 12, 30), "Oct 16, 2026, 12:30 PM"),
        (datetime(2026, 10, 16, 23, 59), "Oct 16, 2026, 11:59 PM"),
        (datetime(2026, 1, 1, 1, 1), "Jan 1, 2026, 1:01 AM"),
        (datetime(2026, 10, 16, 14, 2, tzinfo=timezone(timedelta(hours=-5))), "Oct 16, 2026, 2:02 PM"),
    ],
)
def test_format_time(dt, text):
    assert format_time(dt) == text


def test_format_time_none_and_all_months():
    assert format_time(None) is None
    months = [format_time(datetime(2026, m, 3, 8, 0)).split()[0] for m in range(1, 13)]
    assert months == ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


def test_make_header_leaves_out_missing_parts():
    ts = datetime(2026, 10, 16, 14, 2)
    assert (
        make_header("Turn 4", "Tool logistics_export", ts) == "[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]"
    )
    assert make_header("Turn 4", "User", None) == "[Turn 4 · User]"
    assert make_header("Runbook", "", None) == "[Runbook]"
    assert make_header("Runbook", None, ts) == "[Runbook · Oct 16, 2026, 2:02 PM]"


# --------------------------------------------------------------------------- labelled pieces


def test_header_format_exactly_like_the_design():
    turns = turns_from_messages(conversation(), "t", first_turn=4)
    pieces = label_pieces(turns[0])
    tool = [p for p in pieces if p.source_kind == "tool"]
    assert tool[0].header == "[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]"
    assert tool[0].text == (
        "[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]\n"
        f"logistics_export arguments: {ARGS}\nResult: rows: 42. file: oct.csv"
    )
    assert [p.header for p in pieces] == [
        "[Turn 4 · User · Oct 16, 2026, 2:00 PM]",
        "[Turn 4 · Tool logistics_export · Oct 16, 2026, 2:02 PM]",
        "[Turn 4 · Assistant · Oct 16, 2026, 2:03 PM]",
    ]


def test_piece_fields():
    (turn, _) = turns_from_messages(conversation(), "thread-a")
    pieces = label_pieces(turn)
    assert all(isinstance(p, Piece) for p in pieces)
    for p in pieces:
        assert p.text == f"{p.header}\n{p.body}"
        assert p.thread_id == "thread-a"
        assert p.turn_id == "thread-a#1"
        assert p.turn_index == 1
        assert p.kind == "turn"
        assert p.doc_id is None
    tool = pieces[1]
    assert (tool.source_kind, tool.source_label, tool.source_ordinal, tool.ordinal) == (
        "tool",
        "Tool logistics_export",
        1,
        0,
    )
    assert tool.source_name == "logistics_export"
    assert tool.timestamp == datetime(2026, 10, 16, 14, 2)


def test_first_turn_numbering():
    turns = turns_from_messages(conversation(), "t", first_turn=10)
    assert [t.index for t in turns] == [10, 11]
    assert [t.turn_id for t in turns] == ["t#10", "t#11"]
    assert label_pieces(turns[1])[0].header == "[Turn 11 · User]"


def test_slices_numbered_with_first_turn_match_the_whole_thread():
    msgs = conversation()
    whole = turns_from_messages(msgs, "t")
    head = turns_from_messages(msgs[:5], "t")
    tail = turns_from_messages(msgs[5:], "t", first_turn=head[-1].index + 1)
    assert [p.id for t in head + tail for p in label_pieces(t)] == [p.id for t in whole for p in label_pieces(t)]


def test_header_budget_every_piece_within_max_bytes():
    text = " ".join(f"Sentence number {i} talks about shipment {i * 17} and its carrier." for i in range(200))
    msgs = [{"role": "user", "content": text, "timestamp": "2026-10-16T14:02:00"}]
    (turn,) = turns_from_messages(msgs)
    pieces = label_pieces(turn, max_bytes=300)
    assert len(pieces) > 10
    header = pieces[0].header
    for i, p in enumerate(pieces):
        assert nbytes(p.text) <= 300
        assert p.text.startswith(header + "\n")
        assert p.ordinal == i
    # the budget is used: the header and body together come close to the limit
    assert max(nbytes(p.text) for p in pieces) > 300 - 70
    assert nonws("".join(p.body for p in pieces)) == nonws(text)


def test_header_budget_counts_utf8_bytes_of_a_cjk_tool_name():
    name = "物流导出工具" * 3  # 18 characters, 54 bytes
    msgs = [
        {"role": "user", "content": "导出十月的货运"},
        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": name, "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "1", "content": "货运记录。" * 300},
    ]
    (turn,) = turns_from_messages(msgs)
    pieces = label_pieces(turn, max_bytes=200)
    assert all(nbytes(p.text) <= 200 for p in pieces)
    assert len([p for p in pieces if p.source_kind == "tool"]) > 5


def test_a_header_too_long_for_its_piece_has_its_labels_cut_not_the_write():
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "x" * 60, "arguments": "{}"}}]},
    ]
    (turn,) = turns_from_messages(msgs)
    pieces = label_pieces(turn, max_bytes=120)  # was an InputError quoting the whole header
    tool = [p for p in pieces if p.source_kind == "tool"]
    assert tool and all(nbytes(p.text) <= 120 for p in pieces)
    assert "\u2026" in tool[0].header and tool[0].source_label == "Tool " + "x" * 60  # the metadata keeps it whole
    (long,) = turns_from_messages([{"role": "user", "content": "hi", "name": "é" * 2_000}])
    (piece,) = label_pieces(long)
    assert nbytes(piece.header) < 700 and piece.source_name == "é" * 2_000


def test_header_with_just_enough_budget_is_accepted():
    (turn,) = turns_from_messages([{"role": "user", "content": "hello " * 50}])
    header = "[Turn 1 · User]"
    smallest = nbytes(header) + 1 + MIN_BODY_BYTES
    assert all(nbytes(p.text) <= smallest for p in label_pieces(turn, max_bytes=smallest))
    with pytest.raises(InputError, match="header"):
        label_pieces(turn, max_bytes=smallest - 1)


def test_a_one_megabyte_tool_result_is_kept_whole_across_pieces():
    rows = [f"row {i}: sku=SKU-{i:07d} qty={i % 97} status=shipped." for i in range(40_000)]
    result = " ".join(rows)
    assert len(result) > 1_000_000
    msgs = [
        {"role": "user", "content": "Export everything."},
        {"role": "assistant", "tool_calls": [{"id": "e", "function": {"name": "logistics_export", "arguments": ARGS}}]},
        {"role": "tool", "tool_call_id": "e", "content": result},
    ]
    (turn,) = turns_from_messages(msgs)
    tool = turn.sources[1]
    assert tool.text.endswith(result)  # nothing truncated in the source
    assert ARGS in tool.text
    pieces = [p for p in label_pieces(turn) if p.source_kind == "tool"]
    assert len(pieces) > 800
    assert all(nbytes(p.text) <= 1200 for p in pieces)
    assert nonws("".join(p.body for p in pieces)) == nonws(tool.text)
    assert [p.ordinal for p in pieces] == list(range(len(pieces)))
    assert len({p.id for p in pieces}) == len(pieces)


def test_a_one_megabyte_tool_result_without_whitespace_is_kept_whole():
    result = json.dumps([{"id": i, "v": "中文" * 3} for i in range(30_000)], ensure_ascii=False, separators=(",", ":"))
    assert nbytes(result) > 1_000_000
    msgs = [
        {"role": "user", "content": "dump"},
        {"role": "assistant", "tool_calls": [{"id": "d", "function": {"name": "dump", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "d", "content": result},
    ]
    (turn,) = turns_from_messages(msgs)
    pieces = [p for p in label_pieces(turn) if p.source_kind == "tool"]
    assert all(nbytes(p.text) <= 1200 for p in pieces)
    assert nonws("".join(p.body for p in pieces)) == nonws(turn.sources[1].text)


# --------------------------------------------------------------------------- piece ids


def test_piece_ids_are_deterministic():
    a = [p.id for t in turns_from_messages(conversation(), "t") for p in label_pieces(t)]
    b = [p.id for t in turns_from_messages(conversation(), "t") for p in label_pieces(t)]
    assert a == b
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in a)


def test_a_changed_text_gives_a_different_id():
    msgs = conversation()
    before = label_pieces(turns_from_messages(msgs, "t")[0])
    msgs[1] = dict(msgs[1], content="Export the November shipments, please.")
    after = label_pieces(turns_from_messages(msgs, "t")[0])
    assert before[0].id != after[0].id
    assert [p.id for p in before[1:]] == [p.id for p in after[1:]]


def test_piece_id_depends_on_every_field():
    base = piece_id("t", 1, 0, 0, "text")
    assert piece_id("t2", 1, 0, 0, "text") != base
    assert piece_id("t", 2, 0, 0, "text") != base
    assert piece_id("t", 1, 1, 0, "text") != base
    assert piece_id("t", 1, 0, 1, "text") != base
    assert piece_id("t", 1, 0, 0, "text", doc_id="d") != base


def test_piece_ids_unique_within_a_thread():
    msgs = conversation() + [
        {"role": "user", "content": "Thanks! Now the dogs: what are their names again?"},  # same text again
        {"role": "assistant", "content": "Your dogs are called Pepper and Miso."},
        {"role": "user", "content": "Tell me everything. " * 400},
    ]
    ids = [p.id for t in turns_from_messages(msgs, "t") for p in label_pieces(t, max_bytes=200)]
    assert len(ids) > 20
    assert len(set(ids)) == len(ids)


PIECE_ID_ARGS = ("thread-a", 4, 1, 0, "[Turn 4 · Tool logistics_export]\nrésumé 中文 😀")


def test_piece_id_is_stable_across_processes():
    code = (
        "import sys, json; from ctxret.ingest.turns import piece_id; "
        "args = json.loads(sys.stdin.read()); print(piece_id(*args))"
    )
    here = piece_id(*PIECE_ID_ARGS)
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", code],
            input=json.dumps(PIECE_ID_ARGS),
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=120,
        )
        assert out.stdout.strip() == here


def test_piece_id_golden_value():
    # Pinned: changing the id scheme orphans every stored piece; bump the index/packer version if you must.
    assert piece_id(*PIECE_ID_ARGS) == GOLDEN_ID


GOLDEN_ID = "c233a966f5ea41c9e27c1edb6756ae0a"


# --------------------------------------------------------------------------- bad input (DESIGN §6)


def test_unknown_role_names_the_role_and_the_message_index():
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "bot", "content": "?"}]
    with pytest.raises(InputError) as err:
        turns_from_messages(msgs)
    msg = str(err.value)
    assert "'bot'" in msg and "message 2" in msg and "unknown role" in msg
    assert "'user'" in msg  # says what to use instead


def test_missing_role_is_refused():
    with pytest.raises(InputError, match="message 0: unknown role None"):
        turns_from_messages([{"content": "no role"}])


@pytest.mark.parametrize("bad", ["just a string", 42, None, ["role", "user"]])
def test_non_dict_message_is_refused(bad):
    with pytest.raises(InputError) as err:
        turns_from_messages([{"role": "user", "content": "ok"}, bad])
    assert "message 1" in str(err.value) and "dict" in str(err.value)


@pytest.mark.parametrize("bad", ["a single message", {"role": "user", "content": "hi"}, b"bytes"])
def test_messages_must_be_a_list(bad):
    with pytest.raises(InputError, match="list of message dicts"):
        turns_from_messages(bad)


@pytest.mark.parametrize("bad", ["", "   ", None, 7])
def test_thread_id_must_be_a_non_empty_string(bad):
    with pytest.raises(InputError, match="thread_id"):
        turns_from_messages([{"role": "user", "content": "hi"}], bad)


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("yesterday-ish", "yesterday-ish"),
        ("2026-13-45T99:99", "2026-13-45"),
        (True, "True"),
        (float("nan"), "nan"),
        (1792159320000, "milliseconds"),  # epoch milliseconds: refused with a hint, not a raw ValueError
        (1e20, "epoch"),
        (float("inf"), "epoch"),
        ([2026, 10, 16], "2026"),
    ],
)
def test_unparsable_timestamp_is_refused_with_a_clear_error(value, fragment):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "timestamp": value}]
    with pytest.raises(InputError) as err:
        turns_from_messages(msgs)
    msg = str(err.value)
    assert "message 1.timestamp" in msg
    assert fragment in msg


@pytest.mark.parametrize("content", [42, 3.5, object()])
def test_content_of_the_wrong_type_is_refused(content):
    with pytest.raises(InputError, match="message 0: content"):
        turns_from_messages([{"role": "user", "content": content}])


def test_bad_content_part_is_refused():
    with pytest.raises(InputError, match="message 0: unsupported content part int"):
        turns_from_messages([{"role": "user", "content": ["text", 5]}])


def test_non_dict_tool_call_is_refused():
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": ["call me"]}]
    with pytest.raises(InputError, match=r"message 1.tool_calls\[0\]"):
        turns_from_messages(msgs)


def test_tool_call_function_that_is_not_a_dict_is_refused():
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": [{"id": "1", "function": "lookup"}]}]
    with pytest.raises(InputError, match=r"message 1.tool_calls\[0\].function: expected a dict"):
        turns_from_messages(msgs)


def test_control_characters_and_lone_surrogates_in_messages():
    msgs = [
        {"role": "user", "content": "bell\x07 nul\x00 and a lone \ud83d surrogate."},
        {
            "role": "assistant",
            "tool_calls": [{"id": "1", "function": {"name": "t\x00ool", "arguments": '{"a": "\udc00"}'}}],
        },
        {"role": "tool", "tool_call_id": "1", "content": "esc\x1b[31m red"},
    ]
    (turn,) = turns_from_messages(msgs)
    pieces = label_pieces(turn)
    assert len(pieces) == 2
    for p in pieces:
        p.text.encode("utf-8")  # valid UTF-8
        assert not any(ord(c) < 32 and c != "\n" for c in p.text)
        assert p.text == clean_text(p.text)
    assert pieces[0].body == "bell nul and a lone \ufffd surrogate."
    assert "[31m red" in pieces[1].body


def test_cjk_and_emoji_conversation():
    msgs = [
        {"role": "user", "content": "我的狗叫什么名字？🐶 它们喜欢公园。"},
        {"role": "assistant", "content": "你的狗叫 Pepper 和 Miso 🐾。"},
    ]
    (turn,) = turns_from_messages(msgs)
    pieces = label_pieces(turn)
    assert [nonws(p.body) for p in pieces] == [nonws(m["content"]) for m in msgs]


# --------------------------------------------------------------------------- properties

_body = st.text(
    alphabet=st.one_of(st.characters(), st.sampled_from(list("中文😀 .!?\n\t"))),
    max_size=600,
)


@PROPS
@given(
    texts=st.lists(_body, min_size=1, max_size=5),
    tool_name=st.text(alphabet=st.sampled_from(list("abc_中😀")), min_size=1, max_size=12),
    max_bytes=st.integers(120, 400),
)
def test_property_label_pieces_within_budget_and_nothing_dropped(texts, tool_name, max_bytes):
    msgs = [{"role": "user", "content": texts[0], "timestamp": "2026-10-16T14:02:00"}]
    for i, t in enumerate(texts[1:]):
        msgs.append(
            {"role": "assistant", "tool_calls": [{"id": str(i), "function": {"name": tool_name, "arguments": "{}"}}]}
        )
        msgs.append({"role": "tool", "tool_call_id": str(i), "content": t})
    turns = turns_from_messages(msgs, "p")
    for turn in turns:
        headers = [make_header(turn.label, src.label, src.timestamp or turn.timestamp) for src in turn.sources]
        if any(max_bytes - nbytes(h) - 1 < MIN_BODY_BYTES for h in headers):
            # a header leaving too little room has its labels cut; only a budget too small for any header is refused
            try:
                pieces = label_pieces(turn, max_bytes=max_bytes)
            except InputError as e:
                assert "header" in str(e)
                continue
            assert any("…" in p.header for p in pieces) or not pieces
        else:
            pieces = label_pieces(turn, max_bytes=max_bytes)
        for p in pieces:
            assert nbytes(p.text) <= max_bytes
            assert p.text == f"{p.header}\n{p.body}"
        for src in turn.sources:
            bodies = [p.body for p in pieces if p.source_ordinal == src.ordinal]
            assert nonws("".join(bodies)) == nonws(clean_text(src.text))
        ids = [p.id for p in pieces]
        assert len(set(ids)) == len(ids)


# --------------------------------------------------------------------------- message formats: OpenAI and Anthropic

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "messages")


def load_fixture(name: str) -> dict:
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f)


def source_rows(turns: list[Turn]) -> list[list[tuple[str, str, str]]]:
    return [[(s.kind, s.label, s.text) for s in t.sources] for t in turns]


FLIGHTS = "TP 541 dep 07:05 arr 09:10, 189 EUR. FR 1234 dep 11:40 arr 13:50, 74 EUR."
WEATHER = "Lisbon, 2026-10-20: 24°C, sunny."
SUMMARY = (
    "TAP flight TP 541 leaves at 07:05 and lands at 09:10 for 189 EUR; Ryanair FR 1234 is cheaper at 74 EUR. "
    "Lisbon will be sunny, 24°C."
)
ASK_1 = "Find me a flight from Berlin to Lisbon on October 20. Here is my seat preference sheet."
ASK_2 = "Book TP 541, window seat please. This is the seat map they sent me."
SEATMAP = "[image: https://static.example.com/seatmaps/tp541.png]"


def test_openai_fixture_thread_exact_sources():
    turns = turns_from_messages(load_fixture("openai_chat_thread.json")["messages"], "oa")
    assert source_rows(turns) == [
        [
            ("user", "User", f"{ASK_1}\n[image: image/png]"),
            (
                "tool",
                "Tool search_flights",
                'search_flights arguments: {"origin":"BER","destination":"LIS","date":"2026-10-20"}\n'
                f"Result: {FLIGHTS}",
            ),
            (
                "tool",
                "Tool get_weather",
                f'get_weather arguments: {{"city":"Lisbon","date":"2026-10-20"}}\nResult: {WEATHER}',
            ),
            ("assistant", "Assistant", SUMMARY),
        ],
        [
            ("user", "User", f"{ASK_2}\n{SEATMAP}"),
            (
                "assistant",
                "Assistant",
                "I can't pick a seat from an image, so I'll ask the airline for any window seat.",
            ),
            (
                "tool",
                "Tool book_flight",
                'book_flight arguments: {"flight":"TP 541","seat":"window"}\nResult: Booked. PNR X7K2QP, seat 14A.',
            ),
            ("assistant", "Assistant", "Done: PNR X7K2QP, seat 14A."),
        ],
        [
            ("user", "User", "What's the baggage allowance?"),
            ("assistant", "Assistant", "One 23 kg checked bag is included."),
        ],
    ]
    texts = " ".join(p.text for t in turns for p in label_pieces(t))
    assert "base64" not in texts and "iVBORw0" not in texts and "[image_url]" not in texts


def test_anthropic_fixture_thread_exact_sources():
    turns = turns_from_messages(load_fixture("anthropic_messages_thread.json")["messages"], "an")
    # tool_result blocks arrive in user messages but continue the turn: 3 turns, not 6
    assert [t.index for t in turns] == [1, 2, 3]
    assert source_rows(turns) == [
        [
            ("user", "User", f"{ASK_1}\n[image: image/png]"),
            ("assistant", "Assistant", "Let me search flights and check the weather."),
            (
                "tool",
                "Tool search_flights",
                'search_flights arguments: {"origin": "BER", "destination": "LIS", "date": "2026-10-20"}\n'
                f"Result: {FLIGHTS}",
            ),
            (
                "tool",
                "Tool get_weather",
                f'get_weather arguments: {{"city": "Lisbon", "date": "2026-10-20"}}\nResult: {WEATHER}',
            ),
            ("assistant", "Assistant", SUMMARY),
        ],
        [
            ("user", "User", f"{ASK_2}\n{SEATMAP}"),
            (
                "tool",
                "Tool book_flight",
                'book_flight arguments: {"flight": "TP 541", "seat": "14A"}\n'
                "Result (error): Seat 14A is no longer available.",
            ),
            (
                "tool",
                "Tool book_flight",
                'book_flight arguments: {"flight": "TP 541", "seat": "window"}\n'
                "Result: Booked. PNR X7K2QP, seat 15A.\n[image: image/jpeg]",
            ),
        ],
        [
            ("user", "User", "Great, thanks! What's the baggage allowance?"),
            ("assistant", "Assistant", "One 23 kg checked bag is included."),
        ],
    ]
    texts = " ".join(p.text for t in turns for p in label_pieces(t))
    for absent in (
        "[tool_use]",
        "[tool_result]",
        "[thinking]",
        "thinking",
        "signature",
        "iVBORw0",
        "/9j/4AAQ",
        "EmwKAhgB",
    ):
        assert absent not in texts


def _same_thread_openai() -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": ASK_1},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me search.",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "search_flights",
                        "arguments": json.dumps({"origin": "BER", "destination": "LIS"}, ensure_ascii=False),
                    },
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": json.dumps({"city": "Lisboa ☀"}, ensure_ascii=False),
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": FLIGHTS},
        {"role": "tool", "tool_call_id": "c2", "content": "timeout", "is_error": True},
        {"role": "assistant", "content": SUMMARY},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": ASK_2},
                {"type": "image_url", "image_url": {"url": "https://static.example.com/seatmaps/tp541.png"}},
            ],
        },
    ]


def _same_thread_anthropic() -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": ASK_1},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "search, then weather", "signature": "x"},
                {"type": "text", "text": "Let me search."},
                {
                    "type": "tool_use",
                    "id": "c1",
                    "name": "search_flights",
                    "input": {"origin": "BER", "destination": "LIS"},
                },
                {"type": "tool_use", "id": "c2", "name": "get_weather", "input": {"city": "Lisboa ☀"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": [{"type": "text", "text": FLIGHTS}]},
                {"type": "tool_result", "tool_use_id": "c2", "content": "timeout", "is_error": True},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": SUMMARY}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": ASK_2},
                {"type": "image", "source": {"type": "url", "url": "https://static.example.com/seatmaps/tp541.png"}},
            ],
        },
    ]


def test_openai_and_anthropic_forms_of_one_thread_make_the_same_pieces():
    oa = [(p.id, p.text) for t in turns_from_messages(_same_thread_openai(), "t") for p in label_pieces(t)]
    an = [(p.id, p.text) for t in turns_from_messages(_same_thread_anthropic(), "t") for p in label_pieces(t)]
    assert oa == an
    assert any('get_weather arguments: {"city": "Lisboa ☀"}\nResult (error): timeout' in text for _, text in oa)


def test_user_message_with_tool_results_and_text_attaches_results_then_starts_a_turn():
    msgs = [
        {"role": "user", "content": "Look it up."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "Miso"}}]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "Miso is a cat."},
                {"type": "text", "text": "And what about Pepper?"},
            ],
        },
    ]
    turns = turns_from_messages(msgs)
    assert source_rows(turns) == [
        [
            ("user", "User", "Look it up."),
            ("tool", "Tool lookup", 'lookup arguments: {"q": "Miso"}\nResult: Miso is a cat.'),
        ],
        [("user", "User", "And what about Pepper?")],
    ]


def test_a_tool_use_block_and_tool_calls_with_the_same_id_are_one_call():
    msgs = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "act", "input": {"a": 1}}],
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "act", "arguments": '{"a": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    (turn,) = turns_from_messages(msgs)
    assert [(s.kind, s.text) for s in turn.sources] == [
        ("user", "go"),
        ("tool", 'act arguments: {"a": 1}\nResult: done'),
    ]


def test_anthropic_tool_result_without_a_matching_call_is_kept_with_a_warning(caplog):
    msgs = [
        {"role": "user", "content": "What happened?"},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "ghost", "content": "3 rows deleted"}]},
    ]
    with caplog.at_level(logging.WARNING, logger="ctxret.turns"):
        (turn,) = turns_from_messages(msgs)
    assert [(s.label, s.text) for s in turn.sources] == [
        ("User", "What happened?"),
        ("Tool result", "Result: 3 rows deleted"),
    ]
    assert "no matching tool call" in caplog.text


@pytest.mark.parametrize(
    "block, note",
    [
        ({"type": "image_url", "image_url": {"url": "https://x.example/a.png"}}, "[image: https://x.example/a.png]"),
        ({"type": "image_url", "image_url": {"url": "data:image/webp;base64," + "A" * 100_000}}, "[image: image/webp]"),
        ({"type": "image_url", "image_url": {"url": "data:;base64,AAAA"}}, "[image: inline data]"),
        (
            {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGOD"}},
            "[image: image/gif]",
        ),
        ({"type": "image", "source": {"type": "file", "file_id": "file_011"}}, "[image: file_011]"),
        ({"type": "input_audio", "input_audio": {"data": "UklGR" * 1000, "format": "wav"}}, "[audio: wav]"),
        (
            {"type": "file", "file": {"filename": "invoice.pdf", "file_data": "data:application/pdf;base64,JVBER"}},
            "[file: invoice.pdf]",
        ),
        ({"type": "file", "file": {"file_id": "file-abc"}}, "[file: file-abc]"),
        (
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"}},
            "[document: application/pdf]",
        ),
        (
            {"type": "document", "title": "Q3 report", "source": {"type": "text", "data": "..."}},
            "[document: Q3 report]",
        ),
        ({"type": "refusal", "refusal": "I can't help with that."}, "I can't help with that."),
        ({"type": "mystery_block"}, "[mystery_block]"),
    ],
)
def test_media_blocks_are_described_never_embedded(block, note):
    (turn,) = turns_from_messages([{"role": "user", "content": [{"type": "text", "text": "see"}, block]}])
    assert turn.sources[0].text == f"see\n{note}"


def test_messages_with_no_content_are_skipped_with_a_warning(caplog):
    msgs = [
        {"role": "user", "content": "hello there"},
        {"role": "assistant", "content": None},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]},
        {"role": "user", "content": "   "},
        {"role": "assistant", "content": "Hi!"},
    ]
    with caplog.at_level(logging.WARNING, logger="ctxret.turns"):
        turns = turns_from_messages(msgs)
    assert source_rows(turns) == [[("user", "User", "hello there")], [("assistant", "Assistant", "Hi!")]]
    warnings = [r.getMessage() for r in caplog.records if "no content" in r.getMessage()]
    assert len(warnings) == 3
    assert warnings[0].startswith("message 1 (assistant): no content and no tool calls; skipped")
    assert "thinking block" in warnings[1]
    assert warnings[2].startswith("message 3 (user)")


def test_a_skipped_system_message_is_not_warned_about(caplog):
    with caplog.at_level(logging.WARNING, logger="ctxret.turns"):
        turns_from_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    assert "no content" not in caplog.text


@pytest.mark.parametrize("bad", [5, "call_1", {"id": "c1"}])
def test_tool_calls_that_are_not_a_list_are_refused(bad):
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "tool_calls": bad}]
    with pytest.raises(InputError) as err:
        turns_from_messages(msgs)
    msg = str(err.value)
    assert "message 1: tool_calls must be a list of call dicts" in msg and type(bad).__name__ in msg


@pytest.mark.parametrize(
    "content, fragment",
    [
        ([{"text": "no type"}], r"message 0.content\[0\]: content block has no 'type'"),
        ([{"type": "text"}], r"needs 'text' as a string"),
        ([{"type": "tool_use", "id": "x", "input": {}}], r"needs the tool's 'name'"),
        ([{"type": "tool_result", "tool_use_id": "x", "content": 5}], r"must be a string or a list of blocks, got int"),
        (
            [{"type": "tool_result", "tool_use_id": "x", "content": [{"no": "type"}]}],
            r"content\[0\].content\[0\]: content block has no 'type'",
        ),
    ],
)
def test_malformed_blocks_are_refused_with_the_fix(content, fragment):
    msgs = [{"role": "assistant", "content": content}]
    with pytest.raises(InputError, match=fragment):
        turns_from_messages(msgs)


def test_tool_use_in_a_user_message_is_refused():
    with pytest.raises(InputError, match="tool calls belong in 'assistant' messages"):
        turns_from_messages([{"role": "user", "content": [{"type": "tool_use", "id": "1", "name": "x", "input": {}}]}])


def test_tool_result_content_nested_3000_deep_is_read_without_recursion():
    inner: object = "the bottom"
    for _ in range(3000):
        inner = [{"type": "tool_result", "tool_use_id": "c", "content": inner}]
    msgs = [
        {"role": "user", "content": "dig"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c", "name": "dig", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": inner}]},
    ]
    (turn,) = turns_from_messages(msgs)
    assert turn.sources[1].text == "dig arguments: {}\nResult: the bottom"


@pytest.mark.parametrize("where", ["input", "arguments", "content"])
def test_json_nested_3000_deep_is_refused_clearly(where):
    deep: object = 1
    for _ in range(3000):
        deep = {"a": deep}
    if where == "input":
        msg = {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "x", "input": deep}]}
    elif where == "arguments":
        msg = {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "x", "arguments": deep}}]}
    else:
        msg = {"role": "assistant", "content": deep}
    with pytest.raises(InputError) as err:
        turns_from_messages([msg])
    assert "nested deeper than 256 levels" in str(err.value) and "JSON string" in str(err.value)
