"""What the CLI tests share."""

from __future__ import annotations

import pytest
from ctxret import cli
from ctxret.cli import commands as cli_commands
from ctxret.cli import settings as cli_settings


@pytest.fixture
def run(monkeypatch, local_embedder, capsys):
    """``ctxret ARGS`` in-process with the session's model, no ``CTXRET_*`` variables: (exit code, stdout, stderr)."""
    monkeypatch.setattr(cli_settings, "make_embedder", lambda settings, **_: local_embedder)
    monkeypatch.setattr(cli_commands, "make_embedder", lambda settings, **_: local_embedder)
    for name in cli.ENV.values():
        monkeypatch.delenv(name, raising=False)

    def go(*argv: object) -> tuple[int, str, str]:
        code = cli.main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return go
