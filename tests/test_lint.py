"""The code stays lint-clean, formatted and type-clean: ``ruff check``, ``ruff format`` and ``mypy`` as configured in
pyproject.toml (no line opts out of the formatter: its layout is the layout).

Both tools come with the ``test`` extra; without them these tests skip and say so. Marked ``slow`` (mypy
takes a minute): ``python -m pytest`` still runs them, ``-m "not slow"`` leaves them out of the inner loop.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
#: What ``ruff check`` covers (``notebooks`` is excluded in pyproject.toml).
RUFF_PATHS = ["shared/ctxret", "langchain_ctxret", "llamaindex_ctxret", "tests", "benchmarks"]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m <tool> <args>`` from the project root (where pyproject.toml configures it)."""
    if importlib.util.find_spec(tool) is None:
        pytest.skip(f"{tool} is not installed (it comes with the test extra: pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing():
    proc = _run("ruff", "check", "--output-format", "concise", *RUFF_PATHS)
    code = proc.returncode
    assert code == 0, f"ruff check {' '.join(RUFF_PATHS)}:\n{proc.stdout}{proc.stderr}"


def test_ruff_format_changes_nothing():
    proc = _run("ruff", "format", "--check", *RUFF_PATHS)
    assert proc.returncode == 0, f"ruff format --check (run `ruff format {' '.join(RUFF_PATHS)}`):\n{proc.stdout}"


def test_nothing_opts_out_of_the_formatter():
    skipped = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in RUFF_PATHS
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "fmt: " + "skip" in line or "fmt: " + "off" in line
    ]
    assert skipped == [], "lines that opt out of ruff format: " + ", ".join(skipped)


def test_mypy_finds_nothing():
    # no paths: mypy checks the packages [tool.mypy] lists under `files`
    proc = _run("mypy")
    code = proc.returncode
    assert code == 0, f"mypy:\n{proc.stdout}{proc.stderr}"
