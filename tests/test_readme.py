"""README.md cannot rot: its two commands are the ones CI runs, its Python blocks run, its CLI
reference names every command and setting, and its links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ctxret import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"

# A fenced block: ```lang [flags]\n ... ```
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def readme() -> str:
    return README.read_text(encoding="utf-8")


def blocks(text: str) -> list[tuple[int, str, list[str], str]]:
    """(line number, language, flags, body) of every fenced block."""
    out = []
    for m in _FENCE.finditer(text):
        info = m.group(1).split()
        out.append(
            (text.count("\n", 0, m.start()) + 1, info[0] if info else "", info[1:], m.group(2))
        )
    return out


def marked_command(marker: str) -> str:
    """The one-line command in the first fenced block after ``<!-- ci: MARKER``."""
    text = readme()
    at = text.find(f"<!-- ci: {marker}")
    assert at >= 0, f"README.md lost its '<!-- ci: {marker}' marker"
    m = _FENCE.search(text, at)
    assert m is not None, f"no fenced block after the {marker} marker"
    assert text[text.index("-->", at) + 3 : m.start()].strip() == "", (
        f"the {marker} block must follow its marker"
    )
    lines = [line for line in m.group(2).splitlines() if line.strip()]
    assert len(lines) == 1, f"the {marker} block must hold exactly one command line, got {lines}"
    return lines[0].strip()


def ci_variable(name: str) -> str:
    m = re.search(rf"^{name}='([^']*)'$", CI.read_text(encoding="utf-8"), re.M)
    assert m is not None, f".ci/run must define {name}='...'"
    return m.group(1)


# -- the two commands ---------------------------------------------------------------------------
def test_readme_has_the_two_commands():
    assert marked_command("install-and-run") == 'pip install -e ".[local,test]" && ctxret demo'
    assert marked_command("test") == "python -m pytest"


def test_ci_runs_the_readme_commands_verbatim():
    assert ci_variable("readme_install") == marked_command("install-and-run")
    assert ci_variable("readme_test") == marked_command("test")
    script = CI.read_text(encoding="utf-8")
    # ... and actually runs them, in a fresh venv, failing on any failure
    assert 'bash -c "$readme_install"' in script
    assert 'bash -c "$readme_test"' in script
    assert "set -euo pipefail" in script and "python3 -m venv" in script
    assert 'exit "$status"' in script and "PIPESTATUS[0]" in script
    # nothing installed that the README does not install
    code = [line for line in script.splitlines() if not line.lstrip().startswith("#")]
    installs = [line for line in code if re.search(r"\bpip3? install\b", line)]
    assert installs == ["readme_install='pip install -e \".[local,test]\" && ctxret demo'"]


def test_ci_script_is_valid_bash_and_executable():
    assert os.access(CI, os.X_OK), ".ci/run must be executable"
    subprocess.run(["bash", "-n", str(CI)], check=True)


# -- runnable examples --------------------------------------------------------------------------
def python_blocks() -> list[tuple[int, str, list[str]]]:
    return [
        (line, body, flags)
        for line, lang, flags, body in blocks(readme())
        if lang in ("python", "py")
    ]


def test_readme_has_runnable_examples():
    runnable = [b for b in python_blocks() if "skip" not in b[2]]
    assert len(runnable) >= 3  # Python, LangChain, LlamaIndex


@pytest.mark.parametrize(
    ("line", "body", "flags"),
    python_blocks(),
    ids=lambda v: f"line{v}" if isinstance(v, int) else "",
)
def test_readme_python_block_runs(line, body, flags, tmp_path):
    """Every ```python block runs as a script in an empty folder (```python skip exempts one)."""
    if "skip" in flags:
        pytest.skip(f"README.md line {line} is marked skip")
    script = tmp_path / f"readme_line{line}.py"
    script.write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXRET_", "OPENAI_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"README.md line {line} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"README.md line {line} printed nothing"


# -- the reference stays complete ---------------------------------------------------------------
def test_cli_reference_names_every_command():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = readme()
    missing = [name for name in sub.choices if f"`ctxret {name}" not in text]
    assert not missing, f"README.md's CLI reference does not mention: {missing}"


def test_configuration_names_every_environment_variable():
    text = readme()
    missing = [var for var in cli.ENV.values() if f"`{var}`" not in text]
    assert not missing, f"README.md's configuration table does not mention: {missing}"
    for code in ("**0**", "**1**", "**2**"):
        assert code in text  # exit codes are documented


def test_relative_links_resolve():
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme())
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert local, "expected links to BENCHMARKS.md and friends"
    missing = [link for link in local if not (ROOT / link).exists()]
    assert not missing, f"README.md links to missing files: {missing}"
