"""README.md and docs/*.md cannot rot: the README's two commands are the ones CI runs, every Python
block of every page runs and prints, every `ctxret` command a shell block shows parses, the CLI
reference (docs/cli.md) names every command and setting, and every relative link resolves."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from ctxret import cli

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"
CI = ROOT / ".ci" / "run"
#: The pages whose code blocks the tests run: the README and every page under docs/.
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# A fenced block: ```lang [flags]\n ... ```
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def readme() -> str:
    return README.read_text(encoding="utf-8")


def page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(text: str) -> list[tuple[int, str, list[str], str]]:
    """(line number, language, flags, body) of every fenced block."""
    out = []
    for m in _FENCE.finditer(text):
        info = m.group(1).split()
        out.append((text.count("\n", 0, m.start()) + 1, info[0] if info else "", info[1:], m.group(2)))
    return out


def marked_command(marker: str) -> str:
    """The one-line command in the first fenced block after ``<!-- ci: MARKER``."""
    text = readme()
    at = text.find(f"<!-- ci: {marker}")
    assert at >= 0, f"README.md lost its '<!-- ci: {marker}' marker"
    m = _FENCE.search(text, at)
    assert m is not None, f"no fenced block after the {marker} marker"
    assert text[text.index("-->", at) + 3 : m.start()].strip() == "", f"the {marker} block must follow its marker"
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
def python_blocks() -> list[tuple[str, int, str, list[str]]]:
    """(page, line, body, flags) of every ```python block of every page."""
    return [
        (page_name(page), line, body, flags)
        for page in PAGES
        for line, lang, flags, body in blocks(page.read_text(encoding="utf-8"))
        if lang in ("python", "py")
    ]


def test_readme_has_runnable_examples():
    runnable = [b for b in python_blocks() if b[0] == "README.md" and "skip" not in b[3]]
    assert len(runnable) >= 3  # Python, LangChain, LlamaIndex


def test_docs_pages_exist_and_are_linked_from_the_readme():
    pages = [page_name(p) for p in PAGES[1:]]
    assert "docs/cli.md" in pages and len(pages) >= 5
    unlinked = [p for p in pages if f"]({p})" not in readme()]
    assert not unlinked, f"README.md does not link to: {unlinked}"


def _block_id(value: object) -> str:
    if isinstance(value, str) and value.endswith(".md"):
        return value.removesuffix(".md").replace("/", "-")
    return f"line{value}" if isinstance(value, int) else ""


#: ``# prints: TEXT``: a comment claiming what the statement it ends (or the one above it) prints first; ``...`` in
#: TEXT stands for anything (a time, a path); ``  # note`` after it is a note, not claimed.
_CLAIM = re.compile(r"#\s*prints:\s*(.+?)\s*$")
_MARK = "\x1fclaim {}\x1f"


def claims(body: str) -> list[tuple[int, str]]:
    """``(statement's first line, claimed text)`` of each ``# prints:`` comment of a block (1-based lines): the
    statement the comment ends, or for a comment on a line of its own the statement just above it."""
    import ast

    lines = body.splitlines()
    statements = [n for n in ast.walk(ast.parse(body)) if isinstance(n, ast.stmt)]
    out = []
    for number, text in enumerate(lines, start=1):
        m = _CLAIM.search(text)
        if m is None:
            continue
        at = number
        if text.lstrip().startswith("#"):  # on its own line: the statement above it
            at = max(n.end_lineno or n.lineno for n in statements if (n.end_lineno or n.lineno) < number)
        holding = [n for n in statements if n.lineno <= at <= (n.end_lineno or n.lineno)]
        owner = min(holding, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)  # the innermost
        out.append((owner.lineno, m.group(1).split("  # ")[0].rstrip()))
    return out


def with_marks(body: str) -> str:
    """``body`` with a marker printed just before each claimed statement (at its indentation)."""
    lines = body.splitlines()
    for i, (number, _) in sorted(enumerate(claims(body)), key=lambda c: -c[1][0]):
        indent = re.match(r"\s*", lines[number - 1]).group(0)
        lines.insert(number - 1, f"{indent}print({_MARK.format(i)!r})")
    return "\n".join(lines) + "\n"


def check_claims(body: str, stdout: str) -> list[str]:
    """What the block's ``# prints:`` comments claim and its output does not show (each claim is the first line the
    claimed statement prints); an empty list when every claim holds."""
    out = stdout.splitlines()
    wrong = []
    for i, (number, text) in enumerate(claims(body)):
        mark = _MARK.format(i)
        after = [x for x in out[out.index(mark) + 1 :] if not x.startswith("\x1fclaim ")] if mark in out else []
        if not after or not _claim_holds(text, after[0].rstrip()):
            wrong.append(f"line {number} claims {text!r}, prints {after[0] if after else '(nothing)'!r}")
    return wrong


_NUMBER = re.compile(r"-?\d+\.\d+")


def _claim_holds(text: str, line: str) -> bool:
    """``line`` is what ``text`` claims: ``...`` stands for anything, and a decimal number may differ by 0.05 (the
    local model's int8 arithmetic can differ in the last digits between CPUs)."""
    numbers: list[float] = []

    def part_pattern(part: str) -> str:
        out, pos = [], 0
        for m in _NUMBER.finditer(part):
            out += [re.escape(part[pos : m.start()]), r"(-?\d+\.\d+)"]
            numbers.append(float(m.group(0)))
            pos = m.end()
        return "".join([*out, re.escape(part[pos:])])

    found = re.fullmatch(".*".join(part_pattern(p) for p in text.split("...")), line)
    return found is not None and all(abs(float(g) - n) <= 0.05 for g, n in zip(found.groups(), numbers, strict=True))


@pytest.mark.slow  # each block a process with the real model: the full suite's, not the fast loop's
@pytest.mark.parametrize(("page", "line", "body", "flags"), python_blocks(), ids=_block_id)
def test_python_block_runs(page, line, body, flags, tmp_path):
    """Every ```python block runs as a script in an empty folder and prints (```python skip exempts one), and what a
    ``# prints:`` comment claims is what the statement prints first."""
    if "skip" in flags:
        pytest.skip(f"{page} line {line} is marked skip")
    script = tmp_path / f"block_line{line}.py"
    script.write_text(with_marks(body), encoding="utf-8")
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
    assert proc.returncode == 0, f"{page} line {line} failed:\n{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip(), f"{page} line {line} printed nothing"
    wrong = check_claims(body, proc.stdout)
    assert not wrong, f"{page} line {line}: " + "; ".join(wrong)


def test_claims_are_checked_as_they_read():
    body = (
        "for x in [1, 2]:  # prints: 1 a\n    print(x, 'a')\nprint('x')\n# prints: x\n"
        "print(\n    'long'\n)  # prints: lo...\n"
    )
    ns: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(with_marks(body), "block", "exec"), ns)
    assert check_claims(body, out.getvalue()) == []
    assert check_claims(body.replace("# prints: 1 a", "# prints: 2 a"), out.getvalue())  # the second line: wrong
    assert [n for n, _ in claims(body)] == [1, 3, 5]
    # numbers within 0.05 (int8 arithmetic differs between CPUs), the rest exactly
    assert _claim_holds("0 0.896 Booked ...", "0 0.93 Booked TAP") and not _claim_holds("0 0.896 B", "0 0.95 B")
    assert not _claim_holds("[(0.62, 0.9)]", "[(0.62, 0.9), (0.16, 0.03)]")


def test_the_docs_make_claims():
    """The README's LangChain and LlamaIndex examples and the docs' examples say what they print."""
    assert sum(bool(claims(body)) for _, _, body, flags in python_blocks() if "skip" not in flags) >= 10


# -- shell blocks: every ctxret command they show parses ------------------------------------------
def ctxret_commands() -> list[tuple[str, int, list[str]]]:
    """(page, line, argv after ``ctxret``) of every ``ctxret`` command in a ```bash/sh/shell/console block
    (a line may chain commands with ``&&``, ``||``, ``;`` or ``|``; a leading ``$ `` prompt is dropped)."""
    out = []
    for page in PAGES:
        for start, lang, _flags, body in blocks(page.read_text(encoding="utf-8")):
            if lang not in ("bash", "sh", "shell", "console"):
                continue
            for offset, raw in enumerate(body.splitlines(), start=1):
                line = raw.strip().removeprefix("$ ")
                if not line or line.startswith("#"):
                    continue
                for command in re.split(r"&&|\|\||;|\|", line):
                    words = shlex.split(command, comments=True)
                    if words[:1] == ["ctxret"] or words[:3] == ["python", "-m", "ctxret"]:
                        argv = words[1:] if words[0] == "ctxret" else words[3:]
                        out.append((page_name(page), start + offset, argv))
    return out


def test_pages_show_ctxret_commands():
    assert any(page == "docs/cli.md" for page, _, _ in ctxret_commands())


def _parse(argv: list[str]) -> int:
    """Parse ``argv`` as ``ctxret`` would (nothing runs); 0 when it parses, else argparse's exit code."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            cli.build_parser(argv).parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0) if isinstance(e.code, int) else 2
    return 0


@pytest.mark.parametrize(("page", "line", "argv"), ctxret_commands(), ids=_block_id)
def test_ctxret_command_parses(page, line, argv):
    """The command parses with the CLI's own parser, and its subcommand's --help works."""
    assert _parse(argv) == 0, f"{page} line {line}: `ctxret {shlex.join(argv)}` does not parse"
    commands = next(a for a in cli.build_parser()._actions if a.dest == "command").choices
    at = next((i for i, w in enumerate(argv) if w in commands), None)
    assert at is not None, f"{page} line {line}: `ctxret {shlex.join(argv)}` names no command"
    sub = argv[at : at + 2] if argv[at] == "eval" else argv[at : at + 1]
    assert _parse([*sub, "--help"]) == 0, f"{page} line {line}: `ctxret {shlex.join(sub)} --help` fails"


def test_a_misspelt_command_would_be_caught():
    assert _parse(["search", "hello", "--thresold", "0.3"]) == 2
    assert _parse(["search", "hello", "--threshold", "0.3"]) == 0


# -- the reference stays complete ---------------------------------------------------------------
def test_cli_reference_names_every_command():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    text = CLI_DOC.read_text(encoding="utf-8")
    missing = [name for name in sub.choices if f"`ctxret {name}" not in text]
    assert not missing, f"docs/cli.md's CLI reference does not mention: {missing}"


def test_configuration_names_every_environment_variable():
    text = CLI_DOC.read_text(encoding="utf-8")
    missing = [var for var in cli.ENV.values() if f"`{var}`" not in text]
    assert not missing, f"docs/cli.md's configuration table does not mention: {missing}"
    for code in ("**0**", "**1**", "**2**"):
        assert code in text  # exit codes are documented


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings (lower case, punctuation dropped, spaces to hyphens)."""
    heads = re.findall(r"^#+ (.+)$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_relative_links_resolve(page):
    text = page.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]*)\)", text)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    missing = []
    for link in local:
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            missing.append(link)
        elif anchor and target.suffix == ".md" and anchor not in _anchors(target.read_text(encoding="utf-8")):
            missing.append(link)
    assert not missing, f"{page_name(page)} links to missing files or headings: {missing}"


def test_readme_links_to_the_docs_and_benchmarks():
    links = re.findall(r"\]\(([^)#\s]+)", readme())
    assert "BENCHMARKS.md" in links and "docs/guide.md" in links
