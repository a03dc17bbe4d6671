"""Named points where the fault-injection tests stop the process dead (``CTXRET_FAULT_AT=<name>``).

``tests/reliability`` runs a write, delete or rebuild in a subprocess with ``CTXRET_FAULT_AT`` set
to one of :data:`POINTS`, which kills the process with SIGKILL exactly there, then checks that
reopening the store repairs or finishes what was cut off and loses nothing. ``<point>#<n>`` kills
the n-th time the point is passed (e.g. the second write batch of one call). Unset (always, outside
those tests), a point is one comparison.
"""

from __future__ import annotations

import os
import signal

#: Every named point, in the order an operation passes them.
POINTS = (
    "write:before-chroma",  # the lexical file marked pending, Chroma not written yet
    "write:between-upserts",  # a write's first Chroma call done (the pieces written again), the rest not
    "write:after-upsert",  # new pieces in Chroma, stale ones not removed, lexical not written
    "write:after-stale-delete",  # Chroma complete, lexical not written
    "write:after-lexical",  # both written
    "delete:between-chunks",  # a delete's first Chroma call done, the rest not
    "delete:after-chroma",  # removed from Chroma, not from the lexical file
    "rebuild:before-swap",  # the new collection complete beside the old one
    "swap:after-views",  # the views swapped (old -> -previous-views, new -> -views), the pieces not yet
    "swap:after-rename-old",  # the old collection renamed to -previous, the new one not renamed yet
    "swap:after-rename-new",  # the new collection in place, -previous not dropped
    "swap:before-lexical",  # collections swapped, the lexical file not refilled
)
_AT = os.environ.get("CTXRET_FAULT_AT") or None
_POINT, _, _NTH = (_AT or "").partition("#")
_passed = 0


def fault_point(name: str) -> None:
    """Kill this process here if ``CTXRET_FAULT_AT`` names this point (tests only)."""
    global _passed
    if _AT is not None and _POINT == name:
        _passed += 1
        if _passed >= int(_NTH or 1):
            os.kill(os.getpid(), signal.SIGKILL)
