"""The CLI says what it does: ``--where`` on your keys, exit 2 for a bad time, ``.json`` in ``index --help``, and
``search --json`` lists each group as the adapters do (the relevance shown never rises down a group)."""

from __future__ import annotations

import json

import pytest
from ctxret import ContextualIndex

DOCS = [
    {"id": "flight", "text": "The flight to Lisbon leaves at 09:40 from gate 12.", "metadata": {"kind": "travel"}},
    {"id": "hotel", "text": "The hotel in Lisbon is booked for three nights.", "metadata": {"kind": "travel"}},
    {"id": "vet", "text": "Biscuit's vaccinations are on Thursday at Green Paws.", "metadata": {"kind": "pets"}},
]


@pytest.fixture
def store(tmp_path, local_embedder):
    path = tmp_path / "store"
    with ContextualIndex(path, embedder=local_embedder) as index:  # written from Python, searched from the CLI
        index.add_documents(DOCS)
        index.add_messages(
            [
                {"role": "user", "content": "When is my flight to Lisbon?", "timestamp": "2026-10-16T14:02"},
                {"role": "assistant", "content": "It leaves at 09:40 on October 20.", "timestamp": "2026-10-16T14:02"},
            ],
            thread_id="chat",
        )
    return path


def test_where_filters_on_your_keys_and_ctxret_fields(run, store):
    code, out, _ = run("search", "Lisbon trip", "--store", store, "--json", "--where", '{"kind": "travel"}', "-k", 5)
    assert code == 0
    hits = [h for g in json.loads(out)["groups"] for h in g["hits"]]
    assert hits and {h["metadata"].get("doc_id") for h in hits} == {"flight", "hotel"}, hits
    assert all(h["metadata"]["kind"] == "travel" and h["metadata"]["ctxret:kind"] == "section" for h in hits)
    where = '{"ctxret:source_kind": "assistant"}'
    code, out, _ = run(
        "search", "Lisbon flight", "--store", store, "--json", "--where", where, "--cosine-floor", "none"
    )
    hits = [h for g in json.loads(out)["groups"] for h in g["hits"]]
    assert code == 0 and hits and {h["metadata"]["thread_id"] for h in hits} == {"chat"}


def test_json_lists_groups_as_the_adapters_do(run, store):
    code, out, _ = run(
        "search", "Lisbon flight gate hotel vet", "--store", store, "--json", "-k", 4, "--threshold", "none"
    )
    result = json.loads(out)
    assert code == 0 and result["cosine_floor"] is None and "score_threshold" not in result
    for g in result["groups"]:
        shown = [h["relevance"] for h in g["hits"]]
        assert shown == sorted(shown, reverse=True)  # never rises down a group, as the adapters show it
        assert all(h["relevance"] <= h["scores"]["relevance"] + 1e-9 for h in g["hits"])
        assert all("caller_keys" not in h["metadata"] and "ctxret:caller_keys" not in h["metadata"] for h in g["hits"])


@pytest.mark.parametrize("flag", ["--now", "--since", "--until"])
def test_a_bad_time_is_a_usage_error(run, store, flag):
    code, _, err = run("search", "flight", "--store", store, flag, "yesterday")
    assert code == 2 and "ISO-8601" in err  # docs/cli.md: bad flag values exit 2 (it was 1)


def test_a_bad_where_is_a_usage_error(run, store):
    code, _, err = run("search", "flight", "--store", store, "--where", '{"kind": ["a"]}')
    assert code == 2 and "$in" in err
    code, _, err = run("search", "flight", "--store", store, "--where", '{"ctxret:nope": 1}')
    assert code == 2 and "ctxret:nope" in err


def test_index_help_names_every_file_type(capsys):
    from ctxret import cli
    from ctxret.cli.readers import SUPPORTED_SUFFIXES

    assert cli.main(["index", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ".json" in SUPPORTED_SUFFIXES and all(suffix in text for suffix in SUPPORTED_SUFFIXES)
    assert "JSON (.json): a chat export" in text
