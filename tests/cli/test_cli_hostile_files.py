"""``ctxret index`` on files a parser chokes on: each is its one-line ``error: FILE[:LINE]: problem; fix``, exit 1,
nothing written, no traceback (they raised ``RecursionError`` or ``ValueError`` out of ``json.loads`` before)."""

from __future__ import annotations

import pytest

DEEP = "[" * 100_000 + "]" * 100_000
HUGE_NUMBER = "9" * 5_000

FILES = {
    "deep.json": (DEEP, "deep.json: the JSON is nested deeper than can be read"),
    "deep-thread.json": ('{"messages": ' + "[" * 3_000 + "]" * 3_000 + "}", "nested deeper than can be read"),
    "deep.jsonl": ('{"role": "user", "content": ' + DEEP + "}\n", "deep.jsonl:1: the JSON is nested deeper"),
    "number.json": (
        '[{"role": "user", "content": "hi", "n": ' + HUGE_NUMBER + "}]",
        "number.json: a value cannot be read (Exceeds the limit (4300 digits)",
    ),
    "number.jsonl": (
        '{"role": "user", "content": "hi"}\n{"role": "user", "content": "x", "n": ' + HUGE_NUMBER + "}\n",
        "number.jsonl:2: a value cannot be read",
    ),
}


@pytest.mark.parametrize("name", list(FILES))
def test_a_file_no_parser_reads_is_one_line_naming_it(run, tmp_path, name):
    text, expected = FILES[name]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code, out, err = run("--store", tmp_path / "store", "index", path)
    assert code == 1
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: ") and expected in lines[0], lines
    assert "; " in lines[0]  # the problem, then the fix
    assert lines[-1] == "error: nothing was written (1 of 1 file(s) had problems)"
    assert len(lines) == 2
    assert not (tmp_path / "store").exists()  # refused before the store was even opened
