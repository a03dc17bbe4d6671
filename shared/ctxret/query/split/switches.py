"""Where a new subject starts. A topic switch ("by the way", "anyway", "on another note", "Also," and their German,
French, Spanish, Japanese, Chinese and Korean equivalents: :data:`_SWITCHES`) always opens a new part
(:func:`switch_rest`); inside a sentence, a unit is cut before a switch after a clause mark, and at the joints of a
spoken run-on where a new ask or a switch starts (:func:`clause_cuts`).
"""

from __future__ import annotations

import re

from .kinds import leans_back
from .words import AUXILIARIES, CLOSERS, OPEN_PUNCT, WH_WORDS, has_cjk, norm_word

__all__ = ["RUN_ON_MIN_SIDE", "RUN_ON_MIN_WORDS", "SWITCH_MIN_REST", "clause_cuts", "switch_rest"]

# -- spoken run-ons ------------------------------------------------------------------------------
#: Words that join a new ask onto a spoken run-on ("... and also can you ...", "... anyway who ...").
_RUN_ON_JOINERS = frozenset("and also plus then anyway oh so but".split())
_SUBJECTS = frozenset("you i we they he she it there anyone anybody someone the my our your".split())
#: After a wh-word, what makes it a question rather than a clause ("when is", "what time"; not "when we got home").
_WH_NEXT = AUXILIARIES | frozenset("time day date about many much long else kind one".split())
#: Requests to an assistant that open a new ask in speech ("remind me", "tell us", "send me").
_SPOKEN_REQUESTS = frozenset("remind tell send show give find book text email let".split())
#: A spoken ask's pronoun that leans back lies within its first words (the rest is not read: long run-ons stay linear).
_CLAUSE_WORDS = 30
#: Fewest words a unit needs before it can be a run-on, and fewest on each side of a cut.
RUN_ON_MIN_WORDS = 10
RUN_ON_MIN_SIDE = 3


def _opens_ask(words: list[str]) -> str:
    """What ``words`` open in speech: ``"question"`` (a wh-word asking: "who is", "what time", "who" with any verb;
    an auxiliary and its subject: "is it", "do they"), ``"request"`` ("please", "can you", a request to the
    assistant: "remind me") or ``""``."""
    first = norm_word(words[0]) if words else ""
    second = norm_word(words[1]) if len(words) > 1 else ""
    if first in ("please", "pls", "plz") or (first in AUXILIARIES and second == "you"):
        return "request"
    if first in ("what's", "where's", "who's", "when's", "how's"):
        return "question"
    if first in WH_WORDS:
        return "question" if second in _WH_NEXT or (first in ("who", "which") and second not in _SUBJECTS) else ""
    if first in AUXILIARIES:
        return "question" if second in _SUBJECTS else ""
    return "request" if first in _SPOKEN_REQUESTS and second in ("me", "us") else ""


def _spoken(text: str) -> bool:
    """A transcript rather than typed prose: it opens in lower case or ends without a sentence end."""
    core = text.strip().lstrip(OPEN_PUNCT)
    return bool(core) and (core[0].islower() or not core.rstrip(CLOSERS + " ").endswith((".", "!", "?", "…")))


# -- topic switches ------------------------------------------------------------------------------
#: Phrases that open a new subject, as lower-cased words (:func:`norm_word`). A unit that opens with one starts a
#: new part, whatever follows (DESIGN §4: merging two subjects is the failure the split exists to fix).
_SWITCHES = tuple(
    tuple(p.split())
    for p in (
        # English
        "by the way|btw|anyway|anyways|on another note|on a different note|on a side note|on an unrelated note|"
        "side note|speaking of which|unrelated|totally unrelated|completely unrelated|separately|quick question|"
        "random question|one more thing|another thing|oh and|oh also|oh btw|incidentally|changing the subject|"
        "before i forget|also|"
        # German
        "übrigens|ach ja|apropos|nebenbei|nebenbei bemerkt|noch was|noch etwas|andere frage|anderes thema|"
        # French
        "au fait|d'ailleurs|par ailleurs|autre chose|autre question|à propos|au passage|en passant|sinon|"
        # Spanish
        "por cierto|a propósito|otra cosa|otra pregunta|por otro lado|cambiando de tema|aparte de eso"
    ).split("|")
)
#: These switch only with a comma after them: "Also, the plumber is coming" opens a subject, "Also the worker."
#: continues the request before it.
_COMMA_SWITCHES = frozenset({("also",), ("sinon",)})
#: Words that may come before a switch: "And by the way", "Oh, and", "so anyway", "und übrigens", "y por cierto".
_SWITCH_OPENERS = frozenset("and oh ah ok okay so um uh but und ach et y e".split())
#: CJK switches (a text that starts with one), and those that need a comma after them (あと、/ 还有，).
_SWITCHES_CJK = tuple("ところで そういえば ちなみに それはそうと 对了 顺便 话说 그런데 근데 그나저나".split())
_COMMA_SWITCHES_CJK = ("あと", "それと", "另外", "还有")
_BY_FIRST: dict[str, tuple[tuple[str, ...], ...]] = {}
for _phrase in sorted(_SWITCHES, key=len, reverse=True):
    _BY_FIRST[_phrase[0]] = (*_BY_FIRST.get(_phrase[0], ()), _phrase)
#: Fewest words after a switch for it to open a part ("Anyway, who's on call?"; not "Anyway." or "Btw, thanks!").
SWITCH_MIN_REST = 2


def _switch_words(words: list[str], plain: list[str], i: int) -> int:
    """How many words a topic switch opening at ``words[i]`` takes (with up to two openers before it: "And by the
    way", "Oh, and"; and the switches right after it: "oh and totally unrelated"), 0 when none opens there.
    ``plain``: the words through :func:`norm_word`."""
    end = i
    while end < len(words) and (n := _one_switch(words, plain, end)):
        end += n
    return end - i


def _one_switch(words: list[str], plain: list[str], i: int) -> int:
    for j in range(i, min(i + 3, len(words))):
        if j > i and plain[j - 1] not in _SWITCH_OPENERS:
            break
        for phrase in _BY_FIRST.get(plain[j], ()):
            n = len(phrase)
            if tuple(plain[j : j + n]) != phrase:
                continue
            if phrase in _COMMA_SWITCHES and not words[j + n - 1].endswith((",", "\uff0c", "\u3001")):
                continue
            return j + n - i
    return 0


def switch_rest(text: str) -> str | None:
    """What follows the topic switch a unit opens with ("By the way, when is ..." → "when is ..."); None when it
    opens with none, or too little follows it (:data:`SWITCH_MIN_REST` words)."""
    body = text.strip().lstrip(OPEN_PUNCT)
    if has_cjk(body[:6]):
        for p in _SWITCHES_CJK + _COMMA_SWITCHES_CJK:
            rest = body[len(p) :]
            if body.startswith(p) and (p in _SWITCHES_CJK or rest[:1] in "\u3001\uff0c,"):
                rest = rest.lstrip("\u3001\uff0c, ")
                return rest if len(rest) >= 2 else None
        return None
    words = body.split()
    plain = [norm_word(w) for w in words]
    n = _switch_words(words, plain, 0)
    if not n or len(words) - n < SWITCH_MIN_REST:
        return None
    return " ".join(words[n:])


def clause_cuts(text: str) -> list[int]:
    """Word positions where a unit is cut inside its sentence: before a topic switch after a clause mark ("...
    plan, and by the way, what was ...") in typed text; in a spoken run-on (:func:`_spoken`: :data:`RUN_ON_MIN_WORDS`
    words or more, no punctuation inside) before every switch ("... the standup | oh and what are my dogs called")
    and before a joiner ("and", "also", "anyway"...) that opens an ask which stands alone ("so what time is my
    flight | and also can you remind me ..."; not "... close and do they do flu shots": the pronoun leans back).
    Every cut leaves :data:`RUN_ON_MIN_SIDE` words before it and :data:`SWITCH_MIN_REST` after the switch."""
    words = text.split()
    if len(words) < 2 * RUN_ON_MIN_SIDE or has_cjk(text):
        return []
    plain = [norm_word(w) for w in words]
    inner = text.rstrip(CLOSERS + " .!?\uff1f\uff01\u3002")
    spoken = len(words) >= RUN_ON_MIN_WORDS and _spoken(text) and not re.search(r"[,;:!?.\u2014\u2013()\"]", inner)
    cuts: list[int] = []
    last = 0
    i = RUN_ON_MIN_SIDE
    while i < len(words) - SWITCH_MIN_REST:
        step = 1
        if i - last >= RUN_ON_MIN_SIDE:
            clause = words[i - 1].endswith((",", ";", ":")) or words[i - 1] in ("-", "\u2013", "\u2014")
            n = _switch_words(words, plain, i) if (spoken or clause) else 0
            if n:  # a chain of switches is passed whole: too little after it cannot grow further on
                if len(words) - i - n >= SWITCH_MIN_REST:
                    cuts.append(i)
                    last = i
                step = n
            elif spoken and plain[i] in _RUN_ON_JOINERS:
                j = i
                while j < len(words) and plain[j] in _RUN_ON_JOINERS:
                    j += 1
                ask = _opens_ask(words[j : j + 2]) if len(words) - j >= RUN_ON_MIN_SIDE - 1 else ""
                if ask == "request" or (ask == "question" and not leans_back(" ".join(words[j : j + _CLAUSE_WORDS]))):
                    cuts.append(i)
                    last = i
                step = j - i
        i += step
    return cuts
