"""Every search option is a ``ctxret search`` flag generated from ``SearchSettings``: each field is reachable, a flag
gives the settings its value, a bad value is a usage error naming the option and the fix, and the flags reach the
core's search."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import datetime

import pytest
from ctxret import ContextualIndex
from ctxret.cli.parser import build_parser
from ctxret.cli.search_flags import flag_options, search_flag_names
from ctxret.query.fusion import FUSION_RULES, FusionSettings
from ctxret.query.relevance import FITTED
from ctxret.query.settings import HYBRID_OPTIONS, SearchSettings, search_options


def longest_first(part, hits):
    """A reranker the CLI loads by ``module:attribute``: the longer hit ranks first."""
    return [float(len(h.text)) for h in hits]


def answer_of(part):
    """A HyDE function the CLI loads by ``module:attribute``."""
    return f"An answer about {part}"


HERE = __name__
LOCAL = next(iter(FITTED))

#: option -> (the flag's arguments, the value ``SearchSettings`` is given). One row per option: a new option without
#: a row fails ``test_every_option_has_a_round_trip_row``.
ROUND_TRIP = {
    "k": (["-k", "3"], 3),
    "cosine_floor": (["--cosine-floor", "0.25"], 0.25),
    "max_parts": (["--max-parts", "2"], 2),
    "split": (["--no-split"], False),
    "query_weight": (["--query-weight", "none"], None),
    "lexical": (["--no-lexical"], False),
    "fusion": (["--fusion", "weighted_rrf"], "weighted_rrf"),
    "lexical_weight": (["--lexical-weight", "0.4"], 0.4),
    "rrf_k": (["--rrf-k", "10"], 10.0),
    "candidates": (["--candidates", "80"], 80),
    "lexical_floor": (["--lexical-floor", "none"], None),
    "document_lexical_weight": (["--document-lexical-weight", "0.6"], 0.6),
    "parents": (["--parents"], True),
    "max_message_bytes": (["--max-message-bytes", "1000"], 1000),
    "relevance": (["--relevance", LOCAL], FITTED[LOCAL]),
    "min_relevance": (["--min-relevance", "0.2"], 0.2),
    "score_threshold": (["--score-threshold", "none"], None),
    "rerank": (["--rerank", f"{HERE}:longest_first"], longest_first),
    "rerank_candidates": (["--rerank-candidates", "7"], 7),
    "mmr": (["--mmr"], True),
    "fetch_k": (["--fetch-k", "30"], 30),
    "lambda_mult": (["--lambda-mult", "0.3"], 0.3),
    "hyde": (["--hyde", f"{HERE}:answer_of"], answer_of),
    "hyde_weight": (["--hyde-weight", "0.6"], 0.6),
    "views": (["--no-views"], False),
    "deadline_ms": (["--deadline-ms", "250"], 250.0),
    "now": (["--now", "2024-03-01T12:00"], datetime(2024, 3, 1, 12, 0)),
    "since": (["--since", "2024-02-01"], datetime(2024, 2, 1)),
    "until": (["--until", "2024-02-10T08:30"], datetime(2024, 2, 10, 8, 30)),
    "time_windows": (["--time-windows", "asking"], "asking"),
    "recency_half_life": (["--recency-half-life", "604800"], 604800.0),
    "answers_first": (["--no-answers-first"], False),
    "latest_first": (["--no-latest-first"], False),
    "speakers_first": (["--no-speakers-first"], False),
    "user_first": (["--no-user-first"], False),
    "per": (["--per", "document"], "document"),
}


def parse(*argv: str):
    return build_parser(["search"]).parse_args(["search", "a message", *argv])


def test_every_option_has_a_round_trip_row():
    assert set(ROUND_TRIP) == {name for name, _ in search_options()}


def test_every_settings_field_is_reachable_by_a_flag():
    flags = search_flag_names()
    for f in fields(SearchSettings):
        if f.name == "hybrid":  # a FusionSettings: each of its fields by its flat option
            assert {HYBRID_OPTIONS[o] for o in HYBRID_OPTIONS} == {g.name for g in fields(FusionSettings)}
            assert all(flags[o] for o in HYBRID_OPTIONS)
        else:
            assert flags[f.name], f.name
    assert flags["score_threshold"] and set(flags) == set(SearchSettings.option_names()) - {"hybrid"}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_a_flag_gives_the_settings_its_value(name):
    argv, value = ROUND_TRIP[name]
    given = flag_options(parse(*argv))
    assert set(given) == {name}
    assert SearchSettings().with_options(**given) == SearchSettings().with_options(**{name: value})
    assert SearchSettings().with_options(**given) != SearchSettings() or name == "rrf_k" and value == 60


def test_all_flags_at_once_give_all_values():
    argv = [a for args, _ in ROUND_TRIP.values() for a in args if args[0] != "--score-threshold"]
    expected = {name: value for name, (_, value) in ROUND_TRIP.items() if name != "score_threshold"}
    assert SearchSettings().with_options(**flag_options(parse(*argv))) == SearchSettings().with_options(**expected)
    assert flag_options(parse()) == {}  # a flag not given sets nothing: the index's defaults hold


def test_existing_flags_keep_their_names():
    assert flag_options(parse("--threshold", "none")) == {"cosine_floor": None}
    assert flag_options(parse("--cosine-floor", "auto")) == {"cosine_floor": "auto"}
    assert flag_options(parse("--lexical", "--parents")) == {"lexical": True, "parents": True}


def test_fusion_choices_come_from_the_registry(capsys):
    from ctxret import cli

    assert cli.main(["search", "--help"]) == 0
    out = capsys.readouterr().out
    assert "{" + ",".join(FUSION_RULES) + "}" in out
    for flags in search_flag_names().values():
        assert all(flag in out for flag in flags), flags


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["-k", "0"], "k (results per part) must be a positive integer"),
        (["--fusion", "mean"], "choose one of convex, rrf, weighted_rrf"),
        (["--lexical-weight", "2"], "lexical_weight must be a number between 0 and 1"),
        (["--since", "soon"], "use ISO-8601"),
        (["--rerank", "no_such_module_xyz:fn"], "give module:attribute of an importable module"),
        (["--rerank", "rerank"], "expected a Python object as module:attribute"),
        (["--time-windows", "maybe"], "choose one of on, off, asking"),
        (["--recency-half-life", "-5"], "recency_half_life must be a positive duration"),
    ],
)
def test_a_bad_value_is_a_usage_error_that_names_the_fix(argv, says, capsys):
    from ctxret import cli

    assert cli.main(["search", "x", *argv]) == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}" in err and says in err, err


def test_the_flags_reach_the_search(run, tmp_path, local_embedder):
    store = tmp_path / "store"
    with ContextualIndex(store, embedder=local_embedder) as index:
        index.add_documents(
            [
                {"id": "gate", "text": "The flight to Lisbon leaves from gate 12."},
                {
                    "id": "hotel",
                    "text": "The hotel in Lisbon, Casa do Miradouro in Alfama, is booked for three nights.",
                },
            ]
        )
    code, out, err = run(
        "search",
        "Lisbon",
        "--store",
        store,
        "--json",
        "--cosine-floor",
        "none",
        "--fusion",
        "rrf",
        "--rerank",
        f"{HERE}:longest_first",
        "--rerank-candidates",
        "5",
        "-k",
        "2",
    )
    assert code == 0, err
    group = json.loads(out)["groups"][0]
    assert "lexical" in group["stages"] and all("rerank" in h["scores"] for h in group["hits"]), group
    assert [h["metadata"]["doc_id"] for h in group["hits"]] == ["hotel", "gate"]  # the longer first: the reranker's
    code, out, err = run("search", "Lisbon", "--store", store, "--json", "--no-lexical", "--cosine-floor", "none")
    assert code == 0 and "lexical" not in json.loads(out)["groups"][0]["stages"], err


def test_the_cli_reference_lists_every_search_flag():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    table = text[text.index("## Search flags") :]
    missing = [f for name, flags in search_flag_names().items() for f in flags if f"`{f}" not in table]
    missing += [name for name, _ in search_options() if f"| `{name}` |" not in table]
    assert not missing, f"docs/cli.md's search flags table does not list: {missing}"
