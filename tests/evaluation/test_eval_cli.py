"""``ctxret eval ...`` (ctxret.cli.evaluate): parser wiring, outputs (markdown, JSON, PNG), errors."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from ctxret.cli import evaluate as cli
from ctxret.cli.settings import UsageError
from ctxret.evaluation.report import markdown_table, pct, threads_table
from test_eval_threads import write_synthetic

SMALL = Path(__file__).resolve().parents[1] / "data" / "controlled_small.json"
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def run(monkeypatch, local_embedder, capsys):
    """Run ``python -m ctxret.evaluation ARGS`` in-process with the session's embedder; (exit code, stdout, stderr)."""
    monkeypatch.setattr(cli, "make_embedder", lambda args: local_embedder)

    def go(*argv: str) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return go


def test_register_eval_adds_the_three_commands():
    parser = argparse.ArgumentParser(prog="ctxret")
    register = parser.add_subparsers(dest="command")
    cli.register_eval(register)
    args = parser.parse_args(["eval", "controlled", "fx.json", "--json", "o.json", "--plot", "o.png"])
    assert args.func is cli.cmd_controlled
    assert (args.fixture, args.json_out, args.plot) == ("fx.json", "o.json", "o.png")
    assert (args.k, cli._weight(args), args.seed) == (5, 0.8, 0)
    assert cli.resolve_settings(args).embedder == "local"
    args = parser.parse_args(
        ["eval", "threads", "data/", "-k", "3", "--representations", "bm25,pieces", "--limit-queries", "7"]
    )
    assert args.func is cli.cmd_threads and args.k == 3
    assert args.representations == "bm25,pieces" and args.limit_queries == 7
    args = parser.parse_args(["eval", "calibrate", "data/", "--weight", "0.9"])
    assert args.func is cli.cmd_calibrate and cli._weight(args) == 0.9
    args = parser.parse_args(["eval", "threads", "data/", "--weight", "1.5"])
    with pytest.raises(UsageError, match="between 0 and 1"):
        cli._weight(args)
    with pytest.raises(SystemExit):
        parser.parse_args(["eval"])


def test_markdown_table_rendering():
    table = markdown_table(["Name", "Score"], [["a", "1.0%"], ["long name", None]])
    assert table == ("| Name      | Score |\n|:----------|------:|\n| a         |  1.0% |\n| long name |     — |")
    assert pct(0.5843) == "58.4%" and pct(None) == "—"
    rows = [
        {
            "representation": "bm25",
            "query_set": "facts",
            "top1_section": 0.863,
            "mrr": 0.9,
            "recall_at_5": 0.5,
            "n": 10,
        },
        {"representation": "pieces", "query_set": "composite", "coverage": 0.788, "n": 30},
    ]
    text = threads_table(rows)
    assert "| bm25" in text and "86.3%" in text and "0.900" in text and "78.8%" in text
    assert text.splitlines()[3].count("—") == 4  # composite: only coverage


def test_controlled_command_writes_table_json_and_png(run, tmp_path):
    out_json, out_png = tmp_path / "c.json", tmp_path / "c.png"
    code, out, _ = run(
        "eval",
        "controlled",
        SMALL,
        "--limit-families",
        "3",
        "--representations",
        "isolated,whole,blend,bm25",
        "--json",
        out_json,
        "--plot",
        out_png,
    )
    assert code == 0
    assert "| Representation" in out and "| isolated" in out and "Generic: top 4" in out
    data = json.loads(out_json.read_text())
    assert set(data) == {"rows", "config"}
    assert data["config"]["counts"]["families"] == 3
    assert all(set(r) == {"representation", "condition", "block", "top1", "n"} for r in data["rows"])
    assert out_png.read_bytes()[:8] == PNG


def test_threads_command_on_jsonl(run, tmp_path):
    path = write_synthetic(tmp_path)
    out_json, out_png = tmp_path / "t.json", tmp_path / "t.png"
    code, out, err = run("eval", "threads", path, "--json", out_json, "--plot", out_png)
    assert code == 0, err
    assert "| whole_turn" in out and "| hybrid_convex" in out and "composite" in out
    for rep in ("pieces_turnctx", "pieces_late", "late_only", "hybrid_default"):
        assert f"| {rep}" in out
    data = json.loads(out_json.read_text())
    assert data["config"]["counts"]["conversations"] == 2
    assert {r["query_set"] for r in data["rows"]} == {"facts", "qa", "composite"}
    assert out_png.read_bytes()[:8] == PNG


def test_calibrate_command_prints_recommendations(run, tmp_path):
    path = write_synthetic(tmp_path)
    out_png = tmp_path / "cal.png"
    code, out, err = run("eval", "calibrate", path, "--sweeps", "weight,threshold", "--plot", out_png, "--quiet")
    assert code == 0, err
    assert "## Recommended" in out and "blend weight" in out and "score threshold" in out
    assert "## Sweep: weight" in out
    assert out_png.read_bytes()[:8] == PNG


def test_errors_exit_1_with_a_message_and_usage_exits_2(run, tmp_path, capsys):
    """The ctxret contract: 0 ok, 1 error (a ctxret error: bad input, missing file), 2 usage (bad flags)."""
    code, _, err = run("eval", "threads", tmp_path / "missing")
    assert code == 1 and "does not exist" in err
    code, _, err = run("eval", "threads", write_synthetic(tmp_path), "--representations", "nope")
    assert code == 1 and "unknown thread representation" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "families": []}')
    code, _, err = run("eval", "controlled", bad)
    assert code == 1 and "families" in err
    assert cli.main(["eval", "threads", str(tmp_path), "--weight", "2"]) == 2  # a usage error
    # the same through the main `ctxret` command
    from ctxret.cli import main as ctxret_main

    capsys.readouterr()
    assert ctxret_main(["eval", "threads", str(tmp_path / "missing")]) == 1
    assert ctxret_main(["eval", "controlled", str(bad)]) == 1
    assert ctxret_main(["eval", "threads", str(tmp_path), "--lexical-floor", "7"]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_openai_embedder_is_built_from_the_environment(fake_openai, monkeypatch, tmp_path, capsys):
    """``--embedder openai`` reads OPENAI_API_KEY / OPENAI_BASE_URL (here: the local fake server)."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.url)
    path = write_synthetic(tmp_path)
    code = cli.main(
        [
            "eval",
            "threads",
            str(path),
            "--embedder",
            "openai",
            "--dims",
            "384",
            "--representations",
            "pieces_blend,bm25",
            "--query-sets",
            "facts",
            "--quiet",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "text-embedding-3-small" in out.out and "| pieces_blend" in out.out
    assert fake_openai.requests  # the embeddings went through the OpenAI client


def test_top_level_embedder_options_reach_eval(fake_openai, monkeypatch, tmp_path, capsys):
    """``ctxret --embedder openai --dims 256 eval threads ...``: the options before ``eval`` are the
    ones eval uses (they used to be dropped: eval ran the local model at 384 dimensions)."""
    from ctxret.cli import main as ctxret_main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.url)
    path = write_synthetic(tmp_path)
    code = ctxret_main(
        [
            "--embedder",
            "openai",
            "--dims",
            "256",
            "eval",
            "threads",
            str(path),
            "--representations",
            "pieces_blend",
            "--query-sets",
            "facts",
            "--quiet",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "text-embedding-3-small" in out.out
    assert fake_openai.requests and all(r.dimensions == 256 for r in fake_openai.requests)
