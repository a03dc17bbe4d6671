"""The progress of one indexing call: a tqdm bar on a terminal, a line now and then in a log."""

from __future__ import annotations

import sys
import time
from typing import Any

from ..embedders.fitting import EMBED_CHUNK

__all__ = ["PROGRESS_EVERY", "ProgressLines", "progress_bar"]


def progress_bar(progress: bool | None, total: int) -> Any:
    """One progress display for a whole call (``None``: shown on a terminal for more than one embedding chunk).

    On a terminal a tqdm bar; otherwise (``progress=True`` with stderr a pipe or a file, e.g. a CI log) a
    :class:`ProgressLines` line now and then."""
    tty = sys.stderr.isatty()
    show = progress if progress is not None else (total > EMBED_CHUNK and tty)
    if not show:
        return None
    if not tty:
        return ProgressLines(total)
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="indexing", unit="piece", file=sys.stderr, mininterval=0, miniters=1)


#: Seconds between two :class:`ProgressLines` lines.
PROGRESS_EVERY = 5.0


class ProgressLines:
    """Progress for a log: ``indexing: 512/2,760 pieces (19%), 21.4 pieces/s, about 1m 45s left``, at most one
    line every ``every`` seconds, and one when done if any came before (a call shorter than ``every`` prints
    nothing); the ``update``/``close`` of a tqdm bar."""

    def __init__(self, total: int, *, every: float | None = None, desc: str = "indexing", file: Any = None) -> None:
        self.total, self.desc = total, desc
        self.every = PROGRESS_EVERY if every is None else every
        self.file = file if file is not None else sys.stderr
        self.n = self.lines = 0
        self._started = self._last = time.monotonic()

    def update(self, n: int) -> None:
        self.n += n
        now = time.monotonic()
        if now - self._last >= self.every and self.n < self.total:
            self._last = now
            self._write(now)

    def close(self) -> None:
        if self.lines:
            self._write(time.monotonic())

    def _write(self, now: float) -> None:
        self.lines += 1
        elapsed = max(now - self._started, 1e-9)
        rate = self.n / elapsed
        if self.n >= self.total:
            tail = f"done in {_duration(elapsed)}"
        else:
            tail = f"about {_duration((self.total - self.n) / rate)} left" if rate > 0 else "time left unknown"
        share = 100 * self.n / self.total if self.total else 100.0
        self.file.write(f"{self.desc}: {self.n:,}/{self.total:,} pieces ({share:.0f}%), {rate:,.1f} pieces/s, {tail}\n")
        self.file.flush()


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes}m {seconds:02d}s" if minutes < 60 else f"{minutes // 60}h {minutes % 60:02d}m"
