"""The evaluation harness: the controlled test, the production-thread protocol, calibration.

* :mod:`.controlled` — one sentence in four contexts (``ctxret eval controlled FIXTURE.json``).
* :mod:`.threads` — LoCoMo conversations and JSONL threads (``ctxret eval threads PATH``): the data and
  query sets (:mod:`.datasets`, :mod:`.timequeries`), one conversation's index (:mod:`.index`), the
  representations (:mod:`.representations`, :mod:`.timeset`, :mod:`.views`), scoring (:mod:`.scoring`)
  and paired statistics (:mod:`.stats`).
* :mod:`.calibrate` — blend weight, piece budget, floor and fusion sweeps (``ctxret eval calibrate PATH``).
* :mod:`.metrics`, :mod:`.report`; the ``eval`` commands are :mod:`ctxret.cli.evaluate`.

Every search is exact cosine with numpy; every distinct text is embedded once per process
(:func:`.embedding.cached_embedder`); every random choice is fixed by ``seed``.
"""

from __future__ import annotations

from .calibrate import run_calibrate
from .controlled import CONDITIONS, REPRESENTATIONS, load_fixture, run_controlled
from .datasets import QUERY_SETS, Conversation, load_jsonl, load_locomo, load_threads
from .representations import THREAD_REPRESENTATIONS, register_representation
from .threads import run_threads

__all__ = [
    "run_controlled",
    "load_fixture",
    "REPRESENTATIONS",
    "CONDITIONS",
    "run_threads",
    "load_threads",
    "load_locomo",
    "load_jsonl",
    "Conversation",
    "QUERY_SETS",
    "THREAD_REPRESENTATIONS",
    "register_representation",
    "run_calibrate",
]
