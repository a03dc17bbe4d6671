"""The words that tell a question, a request and a fragment apart, in the languages the splitter knows.

Used by :mod:`ctxret.query.split`: a short sentence ending in a question mark, or opening with a
request verb or phrase, keeps its own part; a sentence that opens with a continuer ("Or", "And",
"Also"...) or is elliptical ("Why?", "Thanks!") joins the part before it, unless it names a subject
of its own ("And the VPN host?"). Also here: the pronouns by which a question leans on the sentence
before it (:func:`_leans_back`), and the joints of a spoken run-on where a new ask starts
(:func:`_run_on_cuts`). Those two are English only.
"""

from __future__ import annotations

import re
import unicodedata

_CLOSERS = "\"'\u201d\u2019\u00bb\u300d\u300f\uff09)]}\u203a"
_INLINE_ENUM = re.compile(r"(?:(?<=\s)|^)\(?(\d{1,2})\)(?=\s)")
_LIST_MARKER = re.compile(
    r"^\s*(?:[-*+\u2022\u2023\u25e6\u25aa\u2013\u00b7](?:\s+\[[ xX]\])?|\(?\d{1,3}[.)]|[A-Za-z][.)])(?=\s)\s*"
)

_OR_WORDS = frozenset("or oder ou o u".split())
_OR_CJK = ("还是", "或者", "或是", "それとも")
_CONTINUERS = frozenset(
    "and also plus but so then anyway oh ok okay well btw und auch aber dann noch et aussi mais puis "
    "alors y e también tambien pero entonces además ademas".split()
)
_CONTINUERS_CJK = ("还有", "另外", "而且", "那么", "那", "あと", "また", "それから", "그리고")
_QUESTION_WORDS = frozenset(
    # English question words and auxiliaries
    "what where who whom whose when why how which is are was were am do does did can could will "
    "would should shall may might must have has had isn't aren't wasn't weren't don't doesn't didn't "
    "can't couldn't won't wouldn't shouldn't haven't hasn't any anyone anybody "
    # German
    "wer was wann wo warum wie welche welcher welches wieso weshalb woher wohin wozu ist sind hast hat "
    "habt kannst kann können könntest könnten wird wirst würde würdest soll sollen sollte gibt weißt "
    # French (hyphenated forms are cut at the hyphen: "peux-tu" -> "peux")
    "qui que quoi quand où pourquoi comment quel quelle quels quelles combien est peux pouvez as avez "
    "sais savez "
    # Spanish
    "qué quién quiénes cuándo dónde cómo cuál cuáles cuánto cuántos cuánta cuántas puedes podrías "
    "hay está tienes sabes".split()
)
_REQUEST_WORDS = frozenset(
    # English imperatives and request openers
    "please pls plz kindly let let's add approve archive ask assign block book bring buy call cancel "
    "cc change check clean clear close compare confirm copy create deploy delete describe draft drop "
    "email enable disable escalate explain export fetch file find fix follow forward get give go grab "
    "help import install investigate invite keep kill list load look make mark merge message move "
    "mute note notify open order pay page ping pick pin post prepare print pull push put read reboot "
    "redeploy refund reject reload remember remind remove rename renew reply report request "
    "reschedule reserve reset resend restart restore retry review revert roll rotate run save "
    "schedule scale search send set share ship show sign silence snooze start stop submit summarise "
    "summarize switch tag take tell test text track translate triage try turn unblock update upgrade "
    "upload verify wait write don't dont do never always rerun ack acknowledge double-check recheck "
    "free cancel draft "
    # German
    "bitte schick schicke sende zeig zeige gib mach mache buch buche prüf prüfe öffne schließ schließe "
    "erstell erstelle lösch lösche finde find such suche sag sage erinnere erinner starte stoppe liste "
    "ruf rufe schreib schreibe lies nimm bestell bestelle plane leite vergiss denk denke kümmere melde "
    "informiere aktualisiere übersetze fasse storniere reserviere "
    # French
    "envoie envoyez montre montrez donne donnez réserve réservez vérifie vérifiez ouvre ouvrez ferme "
    "fermez crée créez supprime supprimez trouve trouvez dis dites rappelle rappelez listez lance "
    "lancez redémarre redémarrez appelle appelez écris écrivez fais faites prépare préparez ajoute "
    "ajoutez mets mettez annule annulez traduis traduisez résume résumez relance relancez regarde "
    "regardez cherche cherchez n'oublie n'oubliez "
    # Spanish
    "envía envíame envia enviame manda mándame mandame muestra muéstrame muestrame dame reserva revisa "
    "abre cierra crea borra elimina busca dime recuérdame recuerdame lista haz hazme reinicia llama "
    "llámame llamame paga compra pide escribe escríbeme prepara agenda cancela traduce resume "
    "comprueba verifica confirma avisa avísame avisame añade agrega pon sube descarga necesito quiero".split()
)
_REQUEST_PHRASES = ("por favor", "s'il te plaît", "s'il vous plaît", "merci de", "i need", "we need",
                    "i'd like", "i would like", "i want", "can you", "could you", "would you")
_REQUEST_CJK_START = (
    "请", "帮我", "帮忙", "麻烦", "给我", "把", "告诉我", "提醒我", "记得", "别", "不要", "确认", "检查",
    "发送", "预订", "删除", "打开", "关闭", "查看", "查一下", "安排", "联系", "更新", "准备", "重启",
)
_REQUEST_CJK_END = ("ください", "下さい", "ちょうだい", "お願いします", "お願い", "して", "てね", "なさい",
                    "ましょう", "てくれ", "吧")
_ELLIPTICAL = frozenset(
    "why not|how so|is it|isn't it|are you sure|you sure|or not|and you|what else|how come|what now|"
    "any ideas|any thoughts|anything else|so what|warum nicht|pourquoi pas|por qué no|de verdad|"
    "en serio|c'est ça".split("|")
)
_ELLIPTICAL_CJK = frozenset("为什么 真的吗 是吗 好吗 对吗 对吧 怎么了 然后呢 本当 本当に なぜ どうして".split())
#: A short condition before a request: "if not, rerun it", "otherwise, page Bob".
_CONDITION = re.compile(
    r"(?i)(?:(?:if|wenn|falls|si|sinon|otherwise|else|sonst)\b[^,.!?]{0,24},|(?:otherwise|else|sonst|sinon)\s)\s*"
)
_OPEN_PUNCT = "¿¡\"'“‘«(「『[ "
_WORD_PUNCT = ".,:;!?¿¡…\"'“”‘’«»()[]{}「」『』？！。、，：；"


def _width(text: str) -> int:
    """Length in characters, a wide (CJK) character counting 2."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _has_cjk(text: str) -> bool:
    return any(unicodedata.east_asian_width(c) in "WF" and c.isalpha() for c in text)


def _norm_word(word: str) -> str:
    return word.strip(_WORD_PUNCT).lower().replace("\u2019", "'")


def _first_word(words: list[str]) -> str:
    """The first word, lower-cased; "who's" → "who", "envoie-moi" → "envoie"."""
    if not words:
        return ""
    first = _norm_word(words[0])
    if first in _REQUEST_WORDS or first in _QUESTION_WORDS:
        return first
    if "'" in first and not first.startswith("n'"):
        first = first.split("'", 1)[0]
    if "-" in first:  # French "envoie-moi", "peux-tu"
        first = first.split("-", 1)[0]
    return first


def _is_question(body: str) -> bool:
    end = body.rstrip(_CLOSERS + " ").rstrip("!\uff01")
    return (
        end.endswith(("?", "\uff1f", "\u061f", "\u2047", "\u2048", "\u2049", "か", "か。", "か？"))
        or body.lstrip(_OPEN_PUNCT).startswith("¿")
        or body.startswith("¿")
    )


def _is_request(body: str, words: list[str]) -> bool:
    lower = body.lower().replace("\u2019", "'")
    if _first_word(words) in _REQUEST_WORDS or lower.startswith(_REQUEST_PHRASES):
        return True
    if _has_cjk(body):
        core = body.strip(_WORD_PUNCT + " ")
        return core.startswith(_REQUEST_CJK_START) or core.endswith(_REQUEST_CJK_END)
    return False


#: Words after which an elliptical follow-up ("And the rest?", "Also the other one?") still refers back.
_BACK_NOUNS = frozenset(
    "one ones other others rest same else too either neither latter former them it that this".split()
)
_PREPOSITIONS = frozenset("for in at on about with from to by of into over under during before after".split())


def _names_subject(words: list[str]) -> bool:
    """Whether a follow-up after its continuer names a subject of its own: two or more words, not opening
    with a preposition ("for staging"), none pointing back ("the other one", "the rest")."""
    plain = [_norm_word(w) for w in words]
    plain = [w for w in plain if w]
    return len(plain) >= 2 and plain[0] not in _PREPOSITIONS and not (set(plain) & _BACK_NOUNS)


#: Pronouns that point back to something named earlier. ``there`` counts unless it is existential
#: ("is there ..."); ``that``/``this``/``these``/``those`` only as pronouns (see :func:`_leans_back`).
_BACK_PRONOUNS = frozenset("it its they them their theirs he him his she her hers there".split())
_EXISTENTIAL = frozenset("is are was were isn't aren't wasn't weren't be been being will would".split())
_DEMONSTRATIVES = frozenset("that this these those".split())
#: After one of these, a demonstrative is a pronoun ("is that", "about that", "do that").
_BEFORE_PRONOUN = frozenset(
    "is was are were does did do about with for of on in to like after before from fix change book cancel "
    "move send confirm explain".split()
)
#: A demonstrative followed by one of these is a pronoun too ("that means", "that's").
_AFTER_PRONOUN = frozenset(
    "is was are were will would mean means cost costs work works take takes happen happened".split()
)


def _leans_back(text: str) -> bool:
    """Whether a question leans on the sentence before it: a pronoun in its first clause, where nothing in the
    question comes before it to refer to ("Do you remember their names?", "When does it start?", "How do I get
    there?"; not "Which shipment is stuck at customs, and what is it missing?")."""
    first_clause = re.split(r"[,;:]| (?:and|but|or|because|since|so) ", text, maxsplit=1)[0]
    words = [_norm_word(w) for w in first_clause.split()]
    words = [w for w in words if w]
    for i, w in enumerate(words):
        before = words[i - 1] if i else ""
        after = words[i + 1] if i + 1 < len(words) else ""
        if w in ("it's", "that's", "they're", "he's", "she's", "there's"):
            w = w.split("'")[0]
            after = "is"
        if w == "there":
            if before not in _EXISTENTIAL and after not in _EXISTENTIAL:
                return True
        elif w in _BACK_PRONOUNS:
            return True
        elif w in _DEMONSTRATIVES and (not after or after in _AFTER_PRONOUN or before in _BEFORE_PRONOUN):
            return True
    return False


def _leaning_question(text: str) -> bool:
    """A question (not a request: "Can you add it to my calendar?" acts on its referent but searches for the
    action) that leans on the sentence before it (:func:`_leans_back`)."""
    body = _LIST_MARKER.sub("", text, count=1).strip().lstrip(_OPEN_PUNCT)
    words = body.split()
    while words and _first_word(words) in _CONTINUERS:
        words = words[1:]
    if not words or _has_cjk(body):
        return False
    rest = " ".join(words)
    first = _first_word(words)
    request = rest.lower().replace("\u2019", "'").startswith(_REQUEST_PHRASES) or (
        first in _REQUEST_WORDS and first not in _QUESTION_WORDS
    )
    return (_is_question(body) or first in _WH_WORDS) and not request and _leans_back(rest)


#: Words that join a new ask onto a spoken run-on ("... and also can you ...", "... anyway who ...").
_RUN_ON_JOINERS = frozenset("and also plus then anyway oh so but".split())
_WH_WORDS = frozenset("what where who whom whose when why how which".split())
_AUXILIARIES = frozenset("is are was were am do does did can could will would should has have had".split())
_SUBJECTS = frozenset("you i we they he she it there anyone anybody someone the my our your".split())
#: After a wh-word, what makes it a question rather than a clause ("when is", "what time"; not "when we got home").
_WH_NEXT = _AUXILIARIES | frozenset("time day date about many much long else kind one".split())
#: Requests to an assistant that open a new ask in speech ("remind me", "tell us", "send me").
_SPOKEN_REQUESTS = frozenset("remind tell send show give find book text email let".split())
#: Fewest words a unit needs before it can be a run-on, and fewest on each side of a cut.
RUN_ON_MIN_WORDS = 10
RUN_ON_MIN_SIDE = 3


def _opens_ask(words: list[str]) -> bool:
    """Whether ``words`` open an ask in speech: a wh-word asking ("who is", "what time"; "who" with any verb), an
    auxiliary and its subject ("can you", "is it"), "please", or a request to the assistant ("remind me")."""
    first = _norm_word(words[0]) if words else ""
    second = _norm_word(words[1]) if len(words) > 1 else ""
    if first in ("please", "pls", "plz") or first in ("what's", "where's", "who's", "when's", "how's"):
        return True
    if first in _WH_WORDS:
        return second in _WH_NEXT or (first in ("who", "which") and second not in _SUBJECTS)
    if first in _AUXILIARIES:
        return second in _SUBJECTS
    return first in _SPOKEN_REQUESTS and second in ("me", "us")


def _spoken(text: str) -> bool:
    """A transcript rather than typed prose: it opens in lower case or ends without a sentence end."""
    core = text.strip().lstrip(_OPEN_PUNCT)
    return bool(core) and (core[0].islower() or not core.rstrip(_CLOSERS + " ").endswith((".", "!", "?", "…")))


def _run_on_cuts(text: str) -> list[int]:
    """Word positions where a spoken run-on starts a new ask: a transcript (:func:`_spoken`) of
    :data:`RUN_ON_MIN_WORDS` words or more with no punctuation inside it, cut before a joiner ("and", "also",
    "anyway"...) that opens an ask ("so what time is my flight | and also can you remind me what the wifi
    password is | and who is on call"). Typed sentences are never cut here."""
    words = text.split()
    inner = text.rstrip(_CLOSERS + " .!?\uff1f\uff01\u3002")
    if len(words) < RUN_ON_MIN_WORDS or not _spoken(text) or _has_cjk(text):
        return []
    if re.search(r"[,;:!?.\u2014\u2013()\"]", inner):
        return []
    cuts: list[int] = []
    last = 0
    i = 1
    while i < len(words) - RUN_ON_MIN_SIDE + 1:
        if _norm_word(words[i]) not in _RUN_ON_JOINERS or i - last < RUN_ON_MIN_SIDE:
            i += 1
            continue
        j = i
        while j < len(words) and _norm_word(words[j]) in _RUN_ON_JOINERS:
            j += 1
        if len(words) - j >= RUN_ON_MIN_SIDE - 1 and _opens_ask(words[j : j + 2]):
            cuts.append(i)
            last = i
        i = j
    return cuts


def _classify(text: str) -> str:
    """``"or"`` (offers an alternative: continues), ``"ask"``, ``"frag"`` (an ask-less short unit) or ``"plain"``."""
    body = _LIST_MARKER.sub("", text, count=1) if _LIST_MARKER.match(text) else text
    body = _INLINE_ENUM.sub("", body, count=1) if _INLINE_ENUM.match(body) else body
    body = body.strip().lstrip(_OPEN_PUNCT)
    words = body.split()
    if _first_word(words) in _OR_WORDS or body.startswith(_OR_CJK):
        return "or"
    continued = False
    while words and _first_word(words) in _CONTINUERS:
        words = words[1:]
        continued = True
    rest = " ".join(words).lstrip(_OPEN_PUNCT + ",")
    for lead in _CONTINUERS_CJK:
        if rest.startswith(lead):
            rest = rest[len(lead) :].lstrip("，、, ")
            continued = True
            break
    if not rest.strip(_WORD_PUNCT + " "):
        return "frag"
    words = rest.split()
    cond = _CONDITION.match(rest)
    if cond and _is_request(rest[cond.end() :], rest[cond.end() :].split()):
        return "ask"  # "if not, rerun it"
    if _is_question(body):
        core = rest.strip(_WORD_PUNCT + " ")
        if _has_cjk(core):
            if len(core) < 4 or core in _ELLIPTICAL_CJK:
                return "frag"
            return "ask"
        plain = " ".join(_norm_word(w) for w in words)
        if len(words) < 2 or plain in _ELLIPTICAL:
            return "frag"
        if continued and _first_word(words) not in _QUESTION_WORDS and not _is_request(rest, words):
            # "And staging?" continues the question before it; "And the VPN host?" asks about a subject of its own
            return "ask" if _names_subject(words) else "frag"
        return "ask"
    if _is_request(rest, words):
        return "ask"
    if not body.rstrip(_CLOSERS + " ").endswith((".", "!", "\u3002", "\uff01", "…", ":")):
        if _first_word(words) in _QUESTION_WORDS and len(words) >= 2:
            return "ask"  # an unpunctuated question: "where is the runbook"
    return "plain"


