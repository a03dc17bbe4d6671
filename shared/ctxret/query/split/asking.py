"""Whether a query part asks (a question or a request), as the time windows (``time_windows="asking"``), the answers
lifted above stored questions (:mod:`ctxret.query.answers`) and the latest fact first (:mod:`ctxret.query.latest`)
read it."""

from __future__ import annotations

import re

from .kinds import classify
from .words import AUXILIARIES, WH_WORDS, norm_word

__all__ = ["asks"]


#: Openers of an indirect ask that ends in a full stop ("I wonder what ...", "Any idea who ...", "I forgot where ...").
_INDIRECT_OPENERS = re.compile(
    r"^(?:i\s+wonder|i'm\s+wondering|i\s+am\s+wondering|wondering|any\s+idea|any\s+chance|no\s+idea|"
    r"i\s+forgot|i've\s+forgotten|i\s+(?:can't|cannot|can\s+not|don't|do\s+not)\s+(?:remember|recall)|"
    r"i'm\s+trying\s+to\s+(?:remember|recall)|i\s+need\s+to\s+know|i'm\s+curious|i\s+am\s+curious|"
    r"curious)\b"
)
#: Request verbs the splitter's list lacks, for recalling what was said ("Recall what ...", "Recap ...").
_RECALL_VERBS = frozenset("recall recap repeat retell".split())


def asks(part: str) -> bool:
    """Whether a part asks: a question or a request as the splitter reads it, or an ask it leaves plain — a
    wh-word with an auxiliary closed by a full stop ("What did Anna say yesterday."), a recall verb ("Recall what
    ..."), or an indirect ask ("I wonder what ...", "Any idea who ...", "I can't remember where ...") that goes on
    with a wh-word, "if" or "whether"."""
    kind = classify(part)
    if kind == "ask":
        return True
    if kind != "plain":
        return False
    words = [norm_word(w) for w in part.split()]
    if len(words) < 2:
        return False
    if words[0] in WH_WORDS and words[1] in AUXILIARIES:
        return True
    if words[0] in _RECALL_VERBS:
        return True
    lower = " ".join(part.lower().replace("\u2019", "'").split())
    return bool(_INDIRECT_OPENERS.match(lower)) and any(w in WH_WORDS or w in ("if", "whether") for w in words[1:])
