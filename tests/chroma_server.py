"""A real Chroma server for tests: `chroma run` on 127.0.0.1, a free port and a temp folder."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class ChromaServer:
    host: str
    port: int
    path: Path
    proc: subprocess.Popen | None = None  # the `chroma run` process (a test may kill it)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def chroma_executable() -> str | None:
    local = Path(sys.executable).parent / "chroma"
    if local.exists():
        return str(local)
    return shutil.which("chroma")


@contextlib.contextmanager
def run_chroma(path: Path, timeout: float = 60.0) -> Iterator[ChromaServer]:
    exe = chroma_executable()
    if exe is None:
        raise RuntimeError("the `chroma` command is not installed (it comes with the chromadb package)")
    port = _free_port()
    log = open(path.parent / f"chroma-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [exe, "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"chroma run exited with {proc.returncode}; see {log.name}")
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 (127.0.0.1 only)
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"chroma server did not answer on {url} within {timeout:.0f}s")
            time.sleep(0.2)
        yield ChromaServer("127.0.0.1", port, path, proc)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
