"""Query: a message → parts (:mod:`.split`) and their vectors → dense and lexical candidates → fused,
floored groups → parents.

* :mod:`.vectors` — parts and blended query vectors from one embedding request;
* :mod:`.fusion` — fusion methods (convex, RRF, weighted RRF) and the floor rule;
* :mod:`.search` — the plan and the stages' building blocks; :mod:`.executor` — the one loop of stages (in order
  of value, on a clock when ``deadline_ms`` is set); :mod:`.deadline` — its two drivers, ``run_search`` and
  ``arun_search``;
* :mod:`.parents` — small-to-big parent expansion;
* :mod:`.time` — the time a part names → its window, and the search inside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_dir, lazy_getattr

if TYPE_CHECKING:
    from .deadline import arun_search, run_search
    from .executor import Backends, QueryVectors
    from .fusion import FusionMethod, FusionSettings, convex, fuse, passes_floor, rrf
    from .parents import expand_parents
    from .render import render_groups
    from .search import SearchPlan, plan_search
    from .split.splitter import split_prompt_chunks
    from .vectors import aquery_vectors, query_vectors

_NAMES = {
    "FusionMethod": ".fusion",
    "FusionSettings": ".fusion",
    "convex": ".fusion",
    "fuse": ".fusion",
    "passes_floor": ".fusion",
    "rrf": ".fusion",
    "expand_parents": ".parents",
    "SearchPlan": ".search",
    "arun_search": ".deadline",
    "plan_search": ".search",
    "run_search": ".deadline",
    "Backends": ".executor",
    "QueryVectors": ".executor",
    "aquery_vectors": ".vectors",
    "query_vectors": ".vectors",
    "split_prompt_chunks": ".split.splitter",
    "render_groups": ".render",
}
__getattr__ = lazy_getattr(__name__, _NAMES)
__dir__ = lazy_dir(globals(), _NAMES)
__all__ = [
    "Backends",
    "FusionMethod",
    "FusionSettings",
    "QueryVectors",
    "SearchPlan",
    "aquery_vectors",
    "arun_search",
    "convex",
    "expand_parents",
    "fuse",
    "passes_floor",
    "plan_search",
    "query_vectors",
    "render_groups",
    "rrf",
    "run_search",
    "split_prompt_chunks",
]
