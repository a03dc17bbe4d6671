"""Query splitting: a message → at most 8 search parts, one per subject.

The principle (DESIGN §4): merging two subjects into one part is the failure the split exists to fix; splitting one
subject in two costs little, since every part is blended with the whole message and searches on its own. So when
unsure, split: every question or request keeps its own part, a topic switch ("by the way", "anyway", "on another
note", "Also,"... in the languages of :mod:`.switches`) always opens one, and a piece joins a neighbour only when
it cannot stand alone: a fragment ("Thanks!", "Or anything about them?", "And staging?"), a short statement, a
lead-in with its list or code, or a question leaning on the statement before it by a pronoun whose referent is
there ("I adopted two cats. Do you remember their names?"; "my", "I", "we" never lean).

Two halves: :func:`~.units.cut_units` cuts, :func:`~.groups.group_units` joins. The first rule (every piece under 24
characters joined) is the baseline :func:`ctxret.evaluation.splitting.baseline_split_prompt_chunks`; the fixtures are
``ctxret/data/split_fixture.jsonl`` (145 agent messages) and ``split_switch_cases.jsonl`` (61 held-out topic
switches). Sentence segmenters from PyPI (pysbd, blingfire, syntok, sentencex) measured in place of the cutting
half were less often right on both, or slower (BENCHMARKS.md).
"""

from __future__ import annotations

from ...errors import InputError
from ...text import MAX_PARTS, clean_text
from .groups import cap_groups, group_units, join_units
from .units import cut_units

__all__ = ["split_prompt_chunks"]


def split_prompt_chunks(message: str, max_parts: int = MAX_PARTS) -> list[str]:
    """Split an incoming message into at most ``max_parts`` search parts (the principle: the module docstring).

    Returns ``[]`` for an empty or whitespace-only message. Parts are whitespace-collapsed, hold no line breaks and
    cover every non-whitespace character of the (cleaned) message, in order; a whitespace-separated word is only
    ever cut right after a sentence end that needs no space (``。！？``). The rule:

    * Units: cut at line breaks and after sentence ends (``.!?…``, ``؟``, ``।`` before whitespace, closing quotes
      kept; ``。！？`` with or without a space), not after a leading list marker, a title or abbreviation (``Dr.``,
      ``e.g.``), inside inline code or before an emoji that ends the sentence; before each item of an inline
      enumeration (``1) … 2) …``); before a topic switch after a clause mark ("..., and by the way, what ...");
      in a spoken run-on (10+ words, lower-case start or no sentence end, no punctuation inside) before every
      switch and before a joiner ("and", "also"...) opening an ask that stands alone. A closed code fence, a run
      of ``>`` quoted lines or of pasted log lines is one unit; a unit over 60 words is cut into 40-word windows.
    * A unit opening with a topic switch starts a new part, whatever follows it.
    * Asks keep their own part however short: a question (ends with ``?``/``？``/``؟``, opens with ``¿``, ends
      with ``か``, or an unpunctuated line opening with a question word) or a request (an imperative or "please"
      word in English, German, French or Spanish, not followed by "is"; a CJK request form: ``请``, ``…ください``).
    * Fragments join the unit before them (after them when nothing comes before): a unit opening with "or"
      (``oder``, ``ou``, ``还是``...); a non-ask under 24 characters (a CJK character counting 2), such as
      "Thanks!"; a one-word or elliptical question ("Why not?"); a follow-up after "and"/"also"/"but"... that
      points back or repeats the question ("And the rest?", "And for staging?"; "And the VPN host?" names a
      subject: an ask); a later sentence of a list item that is not an ask; a window after the first.
    * A question (not a request) whose first clause leans on the statement right before it by a pronoun joins
      that statement, unless it starts a new line or opens with a switch.
    * A unit ending with ``:`` (or a question right before list items) leads in: it joins the unit after it; a
      block joins the unit before it, or its lead-in (the pair stands alone when the lead-in is an ask).
    * More than ``max_parts`` parts: when fewer than ``max_parts`` parts are asks, every ask keeps its own part
      and the statements between them share the slots left (a stretch with no slot joins the ask before it);
      otherwise neighbours are joined into ``max_parts`` runs of near-equal counts, earlier runs taking the extra.
    """
    if max_parts < 1:
        raise InputError(f"max_parts must be at least 1, got {max_parts}")
    text = clean_text(message)
    units = cut_units(text)
    groups = group_units(units)
    if len(groups) > max_parts:
        groups = cap_groups(groups, max_parts)
    return [join_units(g.units) for g in groups]
