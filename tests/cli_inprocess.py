"""``ctxret ARGS`` run inside the test process, as a subprocess would see it.

:func:`run_cli` calls :func:`ctxret.cli.main` with the working folder, the environment and standard
input it is given, both output streams captured, and returns a :class:`subprocess.CompletedProcess`
(``returncode``, ``stdout``, ``stderr``), so a test reads it as it read ``python -m ctxret``. The
environment, the folder and the streams are restored afterwards, whatever happens. The local model
is the process-wide one (:func:`~ctxret.embedders.local.shared_local_embedder`), loaded once for the
session instead of once per command; ``--embedder openai`` builds its embedder as the command does.

An exception the command does not handle propagates (a subprocess would print a traceback and exit 1,
which the tests refused): the test fails on it with its traceback. A few subprocess smoke tests
(``tests/cli/test_cli.py``, marked ``slow``) keep ``python -m ctxret`` and the console script honest.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ctxret import cli
from ctxret.cli import commands as cli_commands
from ctxret.cli import settings as cli_settings

_make_embedder = cli_settings.make_embedder


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``CTXRET_*`` and ``OPENAI_*`` variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CTXRET_", "OPENAI_"))}
    env.update(HF_HUB_OFFLINE="1", PYTHONIOENCODING="utf-8", COLUMNS="120")
    env.update(extra)
    return env


def _shared_model(settings: Any, **options: Any) -> Any:
    """The CLI's ``make_embedder``, with the session's one local model for the local embedder."""
    if settings.embedder == "openai":
        return _make_embedder(settings, **options)
    from ctxret.embedders.local import shared_local_embedder

    return shared_local_embedder()


@contextlib.contextmanager
def _as_a_process(cwd: Path, env: Mapping[str, str], stdin: str) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved = (sys.stdin, cli_settings.make_embedder, cli_commands.make_embedder)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.stdin = io.StringIO(stdin)
        cli_settings.make_embedder = _shared_model
        cli_commands.make_embedder = _shared_model
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            yield out, err
    finally:
        sys.stdin, cli_settings.make_embedder, cli_commands.make_embedder = saved
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)


def run_cli(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """``ctxret ARGS`` in ``cwd`` with ``env`` (default :func:`clean_env`) and ``stdin``, in this process."""
    argv = [str(a) for a in args]
    with _as_a_process(Path(cwd), clean_env() if env is None else env, stdin or "") as (out, err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # what the interpreter would turn into the exit code
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return subprocess.CompletedProcess(["ctxret", *argv], code, out.getvalue(), err.getvalue())
