"""The scores the examples of README.md and docs/*.md say they print are the scores they print.

A line of a ```python block may end with ``# prints: TEXT``: running the block (as ``tests/test_readme.py`` runs
every block) must print a line that matches TEXT, numbers within 0.05 of the ones written (the local model's
int8 arithmetic can differ in the last digits between CPUs). The README's LlamaIndex pipeline once printed ``[]``
because its own ``SimilarityPostprocessor`` cut the right document, and its LangChain example showed the flight
answer at 0.07.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_readme import python_blocks

_NUMBER = re.compile(r"-?\d+\.\d+")
_MARK = "# prints: "


def _claims(body: str) -> list[str]:
    return [line.split(_MARK, 1)[1].strip() for line in body.splitlines() if _MARK in line]


def _matches(expected: str, line: str) -> bool:
    want, got = _NUMBER.findall(expected), _NUMBER.findall(line)
    if _NUMBER.sub("#", expected).strip() != _NUMBER.sub("#", line).strip() or len(want) != len(got):
        return False
    return all(abs(float(a) - float(b)) <= 0.05 for a, b in zip(want, got, strict=True))


CLAIMS = [
    (f"{page}:{line}", body) for page, line, body, flags in python_blocks() if _claims(body) and "skip" not in flags
]


def test_the_readme_makes_score_claims():
    assert len(CLAIMS) >= 3  # the README's LangChain and LlamaIndex examples, docs/llamaindex.md's query engine


@pytest.mark.parametrize(("where", "body"), CLAIMS, ids=lambda v: v if ":" in v[:40] else "")
def test_a_readme_block_prints_the_scores_it_claims(where, body, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(body, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXRET_", "OPENAI_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    printed = proc.stdout.splitlines()
    for claim in _claims(body):
        assert any(_matches(claim, out) for out in printed), f"{where} claims {claim!r}; printed:\n" + (proc.stdout)
