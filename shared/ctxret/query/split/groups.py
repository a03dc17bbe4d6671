"""The joining half of the splitter: each unit's role (an ask, a statement, a fragment, a lead-in, a block); fragments,
lead-ins and blocks joined to the asks and statements they belong to, a question to the statement it leans on
(:func:`group_units`); at most ``max_parts`` groups, asks kept apart (:func:`cap_groups`); a group's text
(:func:`join_units`).
"""

from __future__ import annotations

from dataclasses import dataclass

from .kinds import classify, is_question, leaning_question
from .switches import switch_rest
from .units import Unit
from .words import LIST_MARKER, width

__all__ = ["MIN_PART_CHARS", "cap_groups", "group_units", "join_units"]

#: A part shorter than this many characters joins the part before it.
MIN_PART_CHARS = 24


@dataclass
class _Group:
    units: list[Unit]
    ask: bool


def _roles(units: list[Unit]) -> None:
    for i, u in enumerate(units):
        if u.kind == "block":
            u.role = "block"
            continue
        short = width(LIST_MARKER.sub("", u.text, count=1)) < MIN_PART_CHARS
        if u.kind == "window":
            u.role = "frag" if short else "stmt"
            continue
        last = i == len(units) - 1
        lead = (
            u.kind == "heading" or u.text.rstrip().endswith((":", "\uff1a")) or (u.before_list and is_question(u.text))
        )
        if lead and not last:
            u.role = "lead"
            continue
        rest = switch_rest(u.text)
        if rest is not None:  # a topic switch opens a new part, whatever follows it
            u.switch = True
            u.role = "ask" if is_question(u.text) or classify(rest) == "ask" else "stmt"
            continue
        kind = classify(u.text)
        if kind in ("or", "frag"):  # an alternative, or an elliptical follow-up that points back ("And the rest?")
            u.role = "frag"
        elif kind == "ask":
            u.role = "ask"
        elif u.item == "inside" or short:
            u.role = "frag"
        else:
            u.role = "stmt"


def group_units(units: list[Unit]) -> list[_Group]:
    """Join fragments, lead-ins and blocks to the asks and statements they belong to."""
    _roles(units)
    groups: list[_Group] = []
    pending: list[Unit] = []
    i = 0
    while i < len(units):
        u = units[i]
        if u.role == "lead" and i + 1 < len(units) and units[i + 1].role == "block":
            # A lead-in and its block: they stand together when the lead-in is an ask.
            pair = [u, units[i + 1]]
            if classify(u.text.rstrip(":\uff1a ")) == "ask" and not pending:
                groups.append(_Group(pair, True))
            else:
                pending.extend(pair)
            i += 2
            continue
        if u.role == "ask" and not pending and _leans_on(groups, units, i):
            # "I adopted two cats last spring. Do you remember their names?": the question needs the statement
            groups[-1] = _Group(groups[-1].units + [u], True)
        elif u.role in ("ask", "stmt"):
            groups.append(_Group(pending + [u], u.role == "ask"))
            pending = []
        elif u.role == "lead" or pending or not groups:
            pending.append(u)
        else:  # frag or block after a part: joins it
            groups[-1].units.append(u)
        i += 1
    if pending:
        if groups:
            groups[-1].units.extend(pending)
        else:
            groups.append(_Group(pending, any(u.role == "ask" for u in pending)))
    return groups


def _leans_on(groups: list[_Group], units: list[Unit], i: int) -> bool:
    """Whether the ask ``units[i]`` leans on the statement part right before it (a pronoun with its referent
    there); a part that is an ask, a list item or a block keeps the question apart."""
    u = units[i]
    # after an ask, a list item, a block, a new line (a new thought) or a topic switch: apart
    if not groups or groups[-1].ask or u.kind != "text" or u.item or u.line_start or u.switch:
        return False
    if units[i - 1] is not groups[-1].units[-1]:
        return False
    before = units[i - 1]
    return before.role == "stmt" and before.kind == "text" and not before.item and leaning_question(u.text)


def join_units(units: list[Unit]) -> str:
    return "".join((u.sep if n else "") + u.text for n, u in enumerate(units))


def cap_groups(groups: list[_Group], max_parts: int) -> list[_Group]:
    """At most ``max_parts`` groups: asks keep their own part when they can (see :func:`split_prompt_chunks`)."""
    n_ask = sum(g.ask for g in groups)
    if n_ask == 0 or n_ask >= max_parts:
        return _merge_runs(groups, max_parts)
    # Sequence of asks (single groups) and stretches (lists of consecutive statement groups).
    seq: list[_Group | list[_Group]] = []
    for g in groups:
        if g.ask:
            seq.append(g)
        elif seq and isinstance(seq[-1], list):
            seq[-1].append(g)
        else:
            seq.append([g])
    slots = max_parts - n_ask
    while sum(isinstance(x, list) for x in seq) > slots:
        # The smallest stretch (the latest on ties) joins the ask before it (after it when first).
        idx = min(
            (i for i, x in enumerate(seq) if isinstance(x, list)),
            key=lambda i: (len(seq[i]), -i),  # type: ignore[arg-type]  # only the stretches (lists) are keyed
        )
        stretch = seq.pop(idx)
        assert isinstance(stretch, list)
        units = [u for g in stretch for u in g.units]
        if idx > 0:
            seq[idx - 1].units.extend(units)  # type: ignore[union-attr]
        else:
            seq[0] = _Group(units + seq[0].units, True)  # type: ignore[union-attr]
    stretches = [x for x in seq if isinstance(x, list)]
    alloc = [1] * len(stretches)
    for _ in range(slots - len(stretches)):
        best = max(
            (i for i in range(len(stretches)) if alloc[i] < len(stretches[i])),
            key=lambda i: (len(stretches[i]) / alloc[i], -i),
            default=None,
        )
        if best is None:
            break
        alloc[best] += 1
    out: list[_Group] = []
    n = 0
    for x in seq:
        if isinstance(x, list):
            out.extend(_merge_runs(x, alloc[n]))
            n += 1
        else:
            out.append(x)
    return out


def _merge_runs(groups: list[_Group], n_runs: int) -> list[_Group]:
    """Join neighbours into ``n_runs`` contiguous runs of near-equal counts (earlier runs get the extra)."""
    size, extra = divmod(len(groups), n_runs)
    runs: list[_Group] = []
    start = 0
    for r in range(n_runs):
        end = start + size + (1 if r < extra else 0)
        chunk = groups[start:end]
        runs.append(_Group([u for g in chunk for u in g.units], any(g.ask for g in chunk)))
        start = end
    return runs
