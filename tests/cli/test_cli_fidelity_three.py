"""The CLI keeps what users know, round three: a refused command creates nothing, a folder with no index is named as
such, an argument error is one line, and conversation titles reach the headers (the title is indexed and shown)."""

from __future__ import annotations

import json

import pytest
from ctxret import ContextualIndex

CHAT = [
    {"role": "user", "content": "When does my flight to Lisbon leave?"},
    {"role": "assistant", "content": "It leaves at 09:40 on October 20."},
]


def _listing(path):
    return sorted(p.name for p in path.iterdir()) if path.exists() else None


def test_a_refused_index_creates_nothing(run, tmp_path):
    big = tmp_path / "big.jsonl"
    big.write_text(json.dumps({"role": "user", "content": "word " * 400}) + "\n", encoding="utf-8")
    store, empty = tmp_path / "store", tmp_path / "empty"
    empty.mkdir()
    for where in (store, empty):
        code, _, err = run("index", big, "--store", where, "--max-bytes", 1000, "-q")
        assert code == 1 and "nothing was written" in err and "1,000-byte limit" in err
    assert _listing(store) is None and _listing(empty) == []  # no folder, no Chroma file, no lock, no lexical file
    code, _, err = run("search", "flight", "--store", store)  # so a later search says there is no index
    assert code == 1 and f"no index at {str(store)!r}" in err and "ctxret index FILE" in err, err


def test_a_dry_run_into_a_new_store_creates_nothing(run, tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps(m) + "\n" for m in CHAT), encoding="utf-8")
    store = tmp_path / "store"
    code, out, _ = run("index", chat, "--store", store, "--dry-run")
    assert code == 0 and "nothing written" in out and _listing(store) is None
    code, out, _ = run("index", chat, "--store", store, "-q")  # the real run creates it and writes
    assert code == 0 and "2 piece(s) added" in out
    code, out, _ = run("search", "When does my flight leave?", "--store", store)
    assert code == 0 and "09:40" in out


@pytest.mark.parametrize("command", [["search", "flight"], ["stats"], ["delete", "--thread", "t"], ["reindex"]])
def test_a_folder_with_no_index_is_an_error_naming_it_and_the_fix(run, tmp_path, command):
    folder = tmp_path / "notes"
    folder.mkdir()
    code, out, err = run(*command, "--store", folder)
    assert code == 1 and out == ""
    assert f"no index at {str(folder)!r} (the folder holds no ctxret store)" in err
    assert f"ctxret index FILE... --store {folder}" in err
    assert _listing(folder) == []  # asking created nothing in it


def test_a_search_of_an_index_that_holds_nothing_says_so(run, tmp_path, local_embedder):
    store = tmp_path / "store"
    ContextualIndex(store, embedder=local_embedder).close()  # a collection with no piece (as a refusal once left)
    code, out, err = run("search", "flight", "--store", store)
    assert code == 1 and "(no hit" not in out
    assert "holds nothing to search" in err and "ctxret index FILE" in err


@pytest.mark.parametrize(
    ("argv", "where"),
    [
        (["search", "flight", "--where", "{bad"], "ctxret search"),
        (["search", "flight", "--since", "yesterdayy"], "ctxret search"),
        (["search", "flight", "-k", "zero"], "ctxret search"),
        (["search"], "ctxret search"),
        (["index"], "ctxret index"),
        (["serch", "flight"], "ctxret"),
        (["eval", "threads"], "ctxret eval threads"),
    ],
)
def test_an_argument_error_is_one_line_and_points_at_help(run, argv, where):
    code, out, err = run(*argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # argparse printed ~30 lines of usage above it
    assert lines[0].startswith(f"{where}: error: ") and lines[0].endswith(f"(see {where} --help)")


# -- conversation titles -----------------------------------------------------------------------------------------
def _chatgpt(title: str, cid: str, texts: list[tuple[str, str]]) -> dict:
    """One conversation of ChatGPT's ``conversations.json``: a chain of message nodes."""
    ids = [f"{cid}-{i}" for i in range(len(texts))]
    mapping = {}
    for i, (role, text) in enumerate(texts):
        message = {
            "id": ids[i],
            "author": {"role": role},
            "create_time": 1760623320 + 60 * i,
            "content": {"content_type": "text", "parts": [text]},
        }
        parent = ids[i - 1] if i else None
        mapping[ids[i]] = {"id": ids[i], "message": message, "parent": parent, "children": ids[i + 1 : i + 2]}
    return {"title": title, "id": cid, "current_node": ids[-1], "mapping": mapping}


CONVERSATIONS = [
    _chatgpt(
        "Lisbon trip",
        "6f1c2b8e-1111-4c1e-9a55-2a9b1f0c7d01",
        [
            ("user", "Book me a hotel near Alfama for three nights."),
            ("assistant", "Booked Memmo Alfama from October 20 to 23."),
        ],
    ),
    _chatgpt(
        "Postgres tuning",
        "6f1c2b8e-2222-4c1e-9a55-2a9b1f0c7d02",
        [("user", "How big should shared_buffers be?"), ("assistant", "About a quarter of the RAM.")],
    ),
]


def test_a_chatgpt_title_heads_its_turns_and_is_found(run, tmp_path):
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(CONVERSATIONS), encoding="utf-8")
    store = tmp_path / "store"
    assert run("index", export, "--store", store, "-q")[0] == 0
    # the bodies never say "Lisbon" nor "trip": the title does (without it, no hit at all)
    code, out, _ = run("search", "What did I say about the Lisbon trip?", "--store", store, "--json", "-k", 1)
    hit = json.loads(out)["groups"][0]["hits"][0]
    assert code == 0 and hit["metadata"]["thread_id"] == CONVERSATIONS[0]["id"]  # the thread keeps its id
    assert hit["metadata"]["ctxret:header"].startswith("[Lisbon trip · Turn 1 · ")  # the title is shown and indexed
    assert hit["text"].startswith("[Lisbon trip · Turn 1 · ")
    # a newer export of the same conversation appends to it, and what was stored is unchanged
    newer = json.loads(json.dumps(CONVERSATIONS))
    newer[0] = _chatgpt(
        "Lisbon trip",
        CONVERSATIONS[0]["id"],
        [
            ("user", "Book me a hotel near Alfama for three nights."),
            ("assistant", "Booked Memmo Alfama from October 20 to 23."),
            ("user", "Add a dinner reservation on the 21st."),
        ],
    )
    export.write_text(json.dumps(newer), encoding="utf-8")
    code, out, _ = run("index", export, "--store", store, "-q")
    assert code == 0 and "1 piece(s) added, 0 unchanged, 0 replaced, 4 message(s) already stored" in out, out
    code, out, _ = run("search", "dinner reservation", "--store", store, "--json", "-k", 1)
    assert json.loads(out)["groups"][0]["hits"][0]["metadata"]["ctxret:header"].startswith("[Lisbon trip · Turn 2 · ")


def test_claude_and_thread_object_titles_head_their_turns(run, tmp_path):
    from ctxret.cli.readers import read_input_file

    claude = tmp_path / "claude.json"  # Claude's data export: conversations with chat_messages, named by "name"
    claude.write_text(
        json.dumps(
            [
                {
                    "uuid": "c0ffee00-0000-4000-8000-000000000001",
                    "name": "Birthday party for Mia",
                    "chat_messages": [
                        {
                            "uuid": "m1",
                            "sender": "human",
                            "text": "Ideas for a dinosaur cake?",
                            "content": [{"type": "text", "text": "Ideas for a dinosaur cake?"}],
                            "created_at": "2026-10-01T10:00:00Z",
                        },
                        {
                            "uuid": "m2",
                            "sender": "assistant",
                            "text": "A green volcano cake with toy dinosaurs.",
                            "content": [{"type": "text", "text": "A green volcano cake with toy dinosaurs."}],
                            "created_at": "2026-10-01T10:00:05Z",
                            "attachments": [{"file_name": "menu.pdf", "extracted_content": "never indexed"}],
                        },
                    ],
                }
            ]
        ),
        encoding="utf-8",
    )
    f = read_input_file(claude)
    assert f.threads == ["c0ffee00-0000-4000-8000-000000000001"] and f.titles == {
        f.threads[0]: "Birthday party for Mia"
    }
    assert [t.label for t in f.turns] == ["Birthday party for Mia · Turn 1"]
    assert [s.text for s in f.turns[0].sources] == [
        "Ideas for a dinosaur cake?",
        "A green volcano cake with toy dinosaurs.\n[file: menu.pdf]",
    ]
    lines = tmp_path / "threads.jsonl"  # a thread object's "title", in a .jsonl of threads
    lines.write_text(json.dumps({"thread_id": "t1", "title": "  Q3   planning ", "messages": CHAT}) + "\n")
    assert [t.label for t in read_input_file(lines).turns] == ["Q3 planning · Turn 1"]
    store = tmp_path / "store"
    assert run("index", claude, lines, "--store", store, "-q")[0] == 0
    code, out, _ = run("search", "the party", "--store", store, "--json", "-k", 1)
    assert json.loads(out)["groups"][0]["hits"][0]["metadata"]["ctxret:header"].startswith("[Birthday party for Mia · ")
