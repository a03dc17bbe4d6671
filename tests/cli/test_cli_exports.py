"""The CLI on real chat exports: ``.json`` files in the shapes chat tools write, folder walks that say what they
left out, progress in a pipe, and ``stats``/``delete``/``--help`` without the model or the BM25 postings."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ctxret import cli
from ctxret.cli import commands as cli_commands
from ctxret.cli import settings as cli_settings
from ctxret.cli.readers import FileProblem, read_input_file
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage, messages_to_dict

DOGS = [
    {"role": "user", "content": "My dogs are called Rex and Bella.", "timestamp": "2026-10-01T09:00:00"},
    {"role": "assistant", "content": "Noted: Rex and Bella."},
    {"role": "user", "content": "The VPN host is vpn.example.internal, port 1194."},
    {"role": "assistant", "content": "Saved the VPN host."},
]


def _chatgpt_export() -> list[dict]:
    """Two conversations as ChatGPT's ``conversations.json`` holds them: a ``mapping`` of nodes (a hidden system
    node, an edited user message whose first version is a dead branch, an image part) and ``current_node``."""

    def node(nid, parent, children, role=None, parts=None, **extra):
        message = None
        if role is not None:
            message = {
                "id": nid,
                "author": {"role": role, "name": None, "metadata": {}},
                "create_time": 1760000000.0,
                "content": {"content_type": "text", "parts": parts},
                "metadata": extra.pop("metadata", {}),
                "recipient": "all",
            }
        return {"id": nid, "message": message, "parent": parent, "children": children}

    first = {
        "title": "Wifi",
        "create_time": 1760000000.0,
        "id": "conv-wifi",
        "current_node": "a2",
        "mapping": {
            "root": node("root", None, ["sys"]),
            "sys": node(
                "sys", "root", ["u1old", "u1"], "system", [""], metadata={"is_visually_hidden_from_conversation": True}
            ),
            "u1old": node("u1old", "sys", ["a1old"], "user", ["What is the guest wifi called?"]),
            "a1old": node("a1old", "u1old", [], "assistant", ["I do not know yet."]),
            "u1": node("u1", "sys", ["a1"], "user", ["The office wifi password is mango-tree-42."]),
            "a1": node("a1", "u1", ["u2"], "assistant", ["Got it, I'll remember the wifi password."]),
            "u2": node(
                "u2",
                "a1",
                ["a2"],
                "user",
                [{"content_type": "image_asset_pointer", "asset_pointer": "x"}, "Here is a photo of the router."],
            ),
            "a2": node("a2", "u2", [], "assistant", ["Thanks, that is the Fritz!Box 7590."]),
        },
    }
    second = {
        "title": "Plants",
        "id": "conv-plants",
        "current_node": "b1",
        "mapping": {
            "r": node("r", None, ["q1"]),
            "q1": node("q1", "r", ["b1"], "user", ["Water the ficus every Sunday."]),
            "b1": node("b1", "q1", [], "assistant", ["I'll remind you on Sundays."]),
        },
    }
    return [first, second]


def _texts(f) -> str:
    return "\n".join(s.text for t in f.turns for s in t.sources)


# -- reading the shapes ----------------------------------------------------------------------------------------
def test_a_json_array_of_openai_messages_is_one_thread(tmp_path):
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(DOGS, indent=2), encoding="utf-8")
    f = read_input_file(path)
    assert f.threads == ["chat"] and len(f.turns) == 2
    assert "Rex and Bella" in _texts(f) and "vpn.example.internal" in _texts(f)
    assert read_input_file(path, thread="mine").threads == ["mine"]


def test_a_thread_object_names_its_thread(tmp_path):
    for key in ("thread_id", "conversation_id", "session_id", "id"):
        path = tmp_path / f"{key}.json"
        path.write_text(json.dumps({key: "t-42", "model": "gpt-4o", "messages": DOGS}), encoding="utf-8")
        assert read_input_file(path).threads == ["t-42"], key
    path = tmp_path / "request.json"  # an OpenAI request body: no id, the file name is the thread
    path.write_text(json.dumps({"model": "gpt-4o", "messages": DOGS}), encoding="utf-8")
    assert read_input_file(path).threads == ["request"]


def test_an_array_of_thread_objects(tmp_path):
    path = tmp_path / "threads.json"
    path.write_text(json.dumps([{"thread_id": "a", "messages": DOGS[:2]}, {"thread_id": "b", "messages": DOGS[2:]}]))
    f = read_input_file(path)
    assert f.threads == ["a", "b"] and f.kind == "threads"
    path.write_text(json.dumps([{"messages": DOGS[:2]}, {"messages": DOGS[2:]}]))
    with pytest.raises(FileProblem, match=r"thread 0 has no id .*or pass --thread"):
        read_input_file(path)
    assert read_input_file(path, thread="all").threads == ["all"]  # --thread puts them in one


def test_langchain_messages_to_dict(tmp_path):
    history = [
        HumanMessage("My dogs are called Rex and Bella. Look up the vet."),
        AIMessage("", tool_calls=[{"name": "find_vet", "args": {"city": "Ghent"}, "id": "c1"}]),
        ToolMessage("Dr. Maes, Veldstraat 12", tool_call_id="c1"),
        AIMessage("Your vet is Dr. Maes."),
    ]
    path = tmp_path / "history.json"  # what FileChatMessageHistory stores
    path.write_text(json.dumps(messages_to_dict(history)), encoding="utf-8")
    f = read_input_file(path)
    assert f.threads == ["history"] and len(f.turns) == 1
    kinds = [(s.kind, s.label) for s in f.turns[0].sources]
    assert kinds == [("user", "User"), ("tool", "Tool find_vet"), ("assistant", "Assistant")]
    assert '"city": "Ghent"' in _texts(f) and "Veldstraat 12" in _texts(f)
    path.write_text(json.dumps({"session_id": "s1", "messages": messages_to_dict(history)}), encoding="utf-8")
    assert read_input_file(path).threads == ["s1"]


def test_chatgpt_conversations_json(tmp_path):
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(_chatgpt_export()), encoding="utf-8")
    f = read_input_file(path)
    assert f.threads == ["conv-plants", "conv-wifi"]
    wifi = [t for t in f.turns if t.thread_id == "conv-wifi"]
    text = "\n".join(s.text for t in wifi for s in t.sources)
    assert "mango-tree-42" in text and "[image]" in text and "Fritz!Box" in text
    assert "guest wifi" not in text  # the edited-away branch is not the conversation
    assert wifi[0].timestamp is not None  # create_time is kept


@pytest.mark.parametrize(
    ("content", "where", "match"),
    [
        ('[{"role": "user", "content": "hi"},\n  {"role": "user" "content": 1}]', 2, "invalid JSON at column"),
        ('{"title": "x"}', None, "has no 'messages' list"),
        ('"just a string"', None, "expected a JSON array or object"),
        ('[{"role": "user", "content": "hi"}, {"speaker": "bob"}]', None, "message 1: expected a message"),
        ('[{"role": "robot", "content": "hi"}]', None, "unknown role 'robot'"),
        ('[{"type": "alien", "data": {"content": "hi"}}]', None, "unknown LangChain message type 'alien'"),
    ],
)
def test_bad_json_files_say_where_and_how_to_fix(tmp_path, content, where, match):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(FileProblem, match=match) as info:
        read_input_file(path)
    assert info.value.line == where


# -- the command ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_folder_of_json_exports_is_indexed_and_the_skipped_files_are_named(run, tmp_path):
    exports = tmp_path / "exports"
    (exports / ".cache").mkdir(parents=True)
    (exports / "dogs.json").write_text(json.dumps(DOGS), encoding="utf-8")
    (exports / "conversations.json").write_text(json.dumps(_chatgpt_export()), encoding="utf-8")
    (exports / "old.json.bak").write_text("{}", encoding="utf-8")
    (exports / "photo.png").write_bytes(b"\x89PNG")
    (exports / "draft.json").write_text("[]", encoding="utf-8")
    (exports / ".cache" / "state.json").write_text("{}", encoding="utf-8")
    store = tmp_path / "store"
    code, out, err = run("index", exports, "--exclude", "draft.json", "--store", store)
    assert code == 0, err
    assert "dogs.json: 2 turn(s) in thread dogs" in out
    assert "conversations.json: 3 turn(s) in threads conv-plants, conv-wifi" in out
    skipped = [line for line in err.splitlines() if line.startswith("skipped")]
    assert any("of type .bak" in s and "old.json.bak" in s and "ctxret indexes" in s for s in skipped)
    assert any("of type .png" in s and "photo.png" in s for s in skipped)
    assert any("excluded" in s and "draft.json" in s for s in skipped)
    assert any("hidden" in s and "state.json" in s for s in skipped)
    code, out, err = run("search", "What is the office wifi password?", "--store", store, "--json")
    assert code == 0, err
    assert "mango-tree-42" in json.loads(out)["groups"][0]["hits"][0]["text"]


@pytest.mark.slow
def test_progress_in_a_pipe_is_a_line_every_few_seconds_from_the_first_batch(run, tmp_path, monkeypatch):
    """stderr is not a terminal here (captured): lines with pieces/s and time left, several inside one write batch
    (the late-chunking pass moves the progress in steps, not once per batch)."""
    from ctxret.ingest import progress, writer

    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)  # a line at every step
    messages = []
    for i in range(150):
        messages += [
            {"role": "user", "content": f"Note {i}: the parcel {i} goes to warehouse {i % 7}."},
            {"role": "assistant", "content": f"Noted parcel {i}."},
        ]
    path = tmp_path / "notes.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    code, out, err = run("index", path, "--store", tmp_path / "store")
    assert code == 0, err
    lines = [line for line in err.splitlines() if line.startswith("indexing: ")]
    pieces = int(out.split(" piece(s) added")[0].rsplit(" ", 1)[-1].replace(",", ""))
    assert pieces < writer.WRITE_BATCH_PIECES  # one write batch ...
    assert len(lines) >= 3  # ... and the progress moved inside it
    assert all("pieces/s" in line and "%" in line for line in lines)
    assert "left" in lines[0] and lines[-1].endswith(("s", "m")) and "done in" in lines[-1]
    assert f"{pieces:,}/{pieces:,} pieces (100%)" in lines[-1]
    code, _, err = run("index", path, "--store", tmp_path / "store2", "--quiet")
    assert code == 0 and "indexing: " not in err


@pytest.mark.slow
def test_stats_delete_and_help_load_neither_the_model_nor_the_postings(run, tmp_path, monkeypatch, capsys):
    from ctxret.embedders import local
    from ctxret.storage import postings

    path = tmp_path / "dogs.json"
    path.write_text(json.dumps(DOGS), encoding="utf-8")
    store = tmp_path / "store"
    assert run("index", path, "--store", store)[0] == 0

    def refuse(*args, **kwargs):
        raise AssertionError("loaded what this command does not need")

    monkeypatch.setattr(local, "_load_backend", refuse)  # the ONNX session and the tokenizer
    monkeypatch.setattr(postings.Postings, "from_rows", classmethod(refuse))  # BM25 postings into memory
    monkeypatch.setattr(cli_settings, "make_embedder", refuse)
    monkeypatch.setattr(cli_commands, "make_embedder", refuse)
    code, out, err = run("stats", "--store", store, "--json")
    assert code == 0, err
    info = json.loads(out)
    assert info["pieces"] == 4 and info["cosine_floor"] == 0.3 and info["mismatch"] == {}
    code, out, err = run("delete", "--thread", "dogs", "--store", store)
    assert code == 0 and "deleted 4 piece(s) of thread 'dogs'" in out, err
    assert json.loads(run("stats", "--store", store, "--json")[1])["pieces"] == 0
    assert cli.main(["--help"]) == 0 and "eval" in capsys.readouterr().out


@pytest.mark.slow
def test_a_delete_keeps_the_lexical_file_in_step(run, tmp_path):
    from ctxret.storage.pieces import open_piece_store

    path = tmp_path / "threads.json"
    path.write_text(json.dumps([{"thread_id": "a", "messages": DOGS[:2]}, {"thread_id": "b", "messages": DOGS[2:]}]))
    store = tmp_path / "store"
    assert run("index", path, "--store", store)[0] == 0
    assert run("delete", "--thread", "a", "--store", store)[0] == 0
    pieces = open_piece_store(store, collection="ctxret")
    try:
        assert pieces.count() == pieces.lexical.count() == 2 and not pieces.lexical.journal.pending
        assert pieces.lexical.ids("a") == set()
    finally:
        pieces.close()


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["stats", "--help"], ["stats"], ["delete", "--thread", "x"]])
def test_the_light_commands_import_no_model_runtime(tmp_path, argv):
    """In a fresh process (``-X importtime``): no onnxruntime, tokenizers, facade or harness is imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "ctxret", "--store", str(tmp_path / "none"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert "ctxret.cli" in imported
    heavy = {m for m in imported if m.split(".")[0] in ("onnxruntime", "tokenizers", "openai")}
    heavy |= {m for m in imported if m in ("ctxret.index", "ctxret.evaluation", "ctxret.query.search")}
    assert not heavy, sorted(heavy)


@pytest.mark.slow
def test_stats_counts_from_the_lexical_file_or_chroma_when_a_write_is_announced(run, tmp_path, monkeypatch):
    from ctxret.storage.chroma import ChromaStore
    from ctxret.storage.lexical import LexicalIndex, default_lexical_path

    path = tmp_path / "threads.json"
    path.write_text(json.dumps([{"thread_id": "a", "messages": DOGS[:2]}, {"thread_id": "b", "messages": DOGS}]))
    store = tmp_path / "store"
    assert run("index", path, "--store", store)[0] == 0
    want = {"pieces": 6, "turns": 3, "threads": 2, "pieces_per_thread": {"a": 2, "b": 4}}
    scanned = []
    real = ChromaStore.iter_records
    monkeypatch.setattr(ChromaStore, "iter_records", lambda self, *a, **k: scanned.append(1) or real(self, *a, **k))
    info = json.loads(run("stats", "--store", store, "--json")[1])
    assert {k: info[k] for k in want} == want and not scanned  # from the lexical file's index
    lexical = LexicalIndex(default_lexical_path(store, "ctxret"))
    lexical.journal.mark_pending(["x"])  # a writer announced a write and has not settled it
    lexical.close()
    info = json.loads(run("stats", "--store", store, "--json")[1])
    assert {k: info[k] for k in want} == want and scanned  # from Chroma's records
