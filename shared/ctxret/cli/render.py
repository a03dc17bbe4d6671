# ruff: noqa: T201  (a command-line tool: it prints)
"""How the CLI shows results: hit lines, JSON, rules and clipping."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results import Group, Hit


def search_json(message: str, groups: Sequence[Group], k: int, floor: float | None) -> dict[str, Any]:
    """``ctxret search --json``: each group's hits in the order the adapters list them, each with ``score`` (the
    ranking score, on ``score_scale``), ``relevance`` (the score the adapters show: never rising down a group;
    the hit's own is ``scores["relevance"]``) and ``metadata`` as the adapters return it (your keys by your names,
    ctxret's fields as ``ctxret:<field>``)."""
    from ..query.relevance import shown_groups, shown_scores

    def hits(ordered: Sequence[Hit]) -> list[dict[str, Any]]:
        return [
            {
                "id": h.id,
                "score": h.score,
                **({"relevance": shown[0]} if shown is not None and shown[1] == "relevance" else {}),
                "scores": dict(h.scores),
                "header": str(h.stored.get("header", "")),
                "text": h.text,
                "metadata": dict(h.metadata),
                **({"parent_text": h.parent_text} if h.parent_text is not None else {}),
            }
            for h, shown in zip(ordered, shown_scores(ordered), strict=True)
        ]

    return {
        "message": message,
        "k": k,
        "cosine_floor": floor,
        # what each hit's "score" is: the raw cosine, or the fused score with hybrid search
        "score_scale": "fused" if any("fused" in h.scores for g in groups for h in g) else "cosine",
        "groups": [
            {
                "part_index": g.part_index,
                "part": g.part,
                "stages": list(g.stages),
                "degraded": g.degraded,
                "skipped": list(g.skipped),
                "window": None if g.window is None else [None if t is None else t.isoformat() for t in g.window],
                **({"window_note": g.window_note} if g.window_note else {}),
                "hits": hits(ordered),
            }
            for g, ordered in shown_groups(groups)
        ],
    }


def hit_line(hit: Hit, width: int, focus: Sequence[str] = ()) -> str:
    """``  0.612  [Turn 4 · Tool logistics_export · …]  snippet…`` with the hit's cosine.

    With hybrid search a group is ranked by its fused score, so the line shows both:
    ``  fused 0.913 cos 0.552  [header]  snippet`` (``--json`` has every named score). With
    ``focus``, the snippet starts near the first focus word the body contains.
    """
    cosine = hit.scores.get("cosine", hit.score)
    header = str(hit.stored.get("header", ""))
    if "fused" in hit.scores:
        lead = f"  fused {hit.scores['fused']:5.3f} cos {cosine:6.3f}  {header}  "
    else:
        lead = f"  {cosine:6.3f}  {header}  "
    body = one_line(hit.body)
    room = width - len(lead)
    for word in focus:
        at = body.lower().find(word.lower())
        if at >= 0 and at + len(word) > room - 1:
            start = max(0, at - max(10, (room - len(word)) // 3))
            body = "…" + body[start:]
            break
    return clip(lead + body, width)


def floor_text(floor: float | None) -> str:
    return "" if floor is None else f" at cosine >= {floor:.2f}"


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def clip(text: str, width: int, lines: int = 1) -> str:
    limit = width * lines
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rule(title: str, width: int) -> str:
    return ("=" * 3 + title).ljust(min(width, 100), "=")


def terminal_width() -> int:
    return max(60, min(160, shutil.get_terminal_size((100, 24)).columns))


def error(message: str) -> None:  # noqa: D103
    print(f"error: {message}", file=sys.stderr)


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
