"""The progress of one indexing call: a tqdm bar on a terminal or in a notebook, a line now and then in a log.

Every write path reports here: ``ContextualIndex(progress=...)`` sets it for an index, ``add_documents`` /
``add_messages`` / ``add_turns`` take ``progress=`` per call, and the adapters' bulk paths take ``show_progress=``
(LlamaIndex's name) or ``progress=``. ``None`` (the default) shows a bar where someone is watching -- stderr is a
terminal, or the code runs in a Jupyter kernel -- and only for a call of more than one embedding chunk; ``True``
shows it anywhere (in a log: :class:`ProgressLines`); ``False`` never. The bar counts pieces and shows pieces/s
and the time left.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..embedders.fitting import EMBED_CHUNK
from ..errors import InputError

__all__ = ["PROGRESS_EVERY", "ProgressLines", "check_progress", "progress_bar", "progress_option", "watched"]


def check_progress(progress: Any, name: str = "progress") -> bool | None:
    """``progress`` as a write option (``True``, ``False`` or ``None``), else an :class:`InputError` naming it."""
    if progress is not None and not isinstance(progress, bool):
        raise InputError(
            f"{name} must be True (always), False (never) or None (a bar on a terminal or in a notebook), "
            f"got {progress!r}"
        )
    return progress


def progress_option(progress: Any = None, show_progress: Any = None) -> bool | None:
    """The adapters' progress switch: ``progress=`` (ctxret's name) or ``show_progress=`` (LlamaIndex's), checked;
    both given and different is an :class:`InputError`."""
    a, b = check_progress(progress), check_progress(show_progress, "show_progress")
    if a is not None and b is not None and a != b:
        raise InputError(f"progress={a} and show_progress={b} name the same switch; give one")
    return a if a is not None else b


def watched() -> str | None:
    """Where a bar is seen: ``"notebook"`` (a Jupyter kernel runs this code), ``"terminal"`` (stderr is one), else
    ``None`` (a pipe, a file, a service's log)."""
    ipython = sys.modules.get("IPython")  # only when the code already runs under IPython: never imported here
    if ipython is not None:
        try:
            shell = ipython.get_ipython()
        except Exception:  # an IPython too old or half imported: no notebook
            shell = None
        if shell is not None and getattr(shell, "kernel", None) is not None:
            return "notebook"
    try:
        return "terminal" if sys.stderr is not None and sys.stderr.isatty() else None
    except (AttributeError, ValueError):  # a replaced or closed stderr
        return None


def progress_bar(progress: bool | None, total: int, *, desc: str = "indexing") -> Any:
    """One progress display for a whole call (``None``: shown where watched, for more than one embedding chunk).

    In a notebook or on a terminal a tqdm bar (``tqdm.auto``: a widget in a notebook); otherwise, with
    ``progress=True`` (stderr a pipe or a file, e.g. a CI log), a :class:`ProgressLines` line now and then."""
    where = watched()
    show = progress if progress is not None else (total > EMBED_CHUNK and where is not None)
    if not show:
        return None
    if where is None:
        return ProgressLines(total, desc=desc)
    if where == "notebook":
        try:
            import ipywidgets  # noqa: F401  (tqdm's notebook bar is a widget)
            from tqdm.auto import tqdm
        except ImportError:  # no widgets: the text bar, which a notebook shows as it runs
            from tqdm.std import tqdm
        return tqdm(total=total, desc=desc, unit="piece", mininterval=0.5)
    from tqdm.std import tqdm

    return tqdm(total=total, desc=desc, unit="piece", file=sys.stderr, mininterval=0, miniters=1)


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
