"""The words that tell a question, a request, a fragment and a topic switch apart, in the languages the splitter knows.

Used by :mod:`ctxret.query.split`: a short sentence ending in a question mark, or opening with a
request verb or phrase, keeps its own part; a sentence that opens with a continuer ("Or", "And",
"Also"...) or is elliptical ("Why?", "Thanks!") joins the part before it, unless it names a subject
of its own ("And the VPN host?"). A topic switch ("by the way", "anyway", "on another note", "Also," and their
German, French, Spanish, Japanese, Chinese and Korean equivalents: :data:`_SWITCHES`) always opens a new part
(:func:`_switch_rest`, :func:`_clause_cuts`). Also here: the pronouns by which a question leans on the sentence
before it (:func:`_leans_back`, English only), and the joints of a spoken run-on where a new ask or a switch
starts (:func:`_clause_cuts`).
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
_REQUEST_PHRASES = tuple(
    "por favor|s'il te plaît|s'il vous plaît|merci de|i need|we need|i'd like|i would like|i want|can you|"
    "could you|would you".split("|")
)
_REQUEST_CJK_START = tuple(
    "请 帮我 帮忙 麻烦 给我 把 告诉我 提醒我 记得 别 不要 确认 检查 发送 预订 删除 打开 关闭 "
    "查看 查一下 安排 联系 更新 准备 重启".split()
)
_REQUEST_CJK_END = tuple("ください 下さい ちょうだい お願いします お願い して てね なさい ましょう てくれ 吧".split())
_ELLIPTICAL = frozenset(
    "why not|how so|is it|isn't it|are you sure|you sure|or not|and you|what else|how come|what now|"
    "any ideas|any thoughts|anything else|so what|warum nicht|pourquoi pas|por qué no|de verdad|"
    "en serio|c'est ça".split("|")
)
#: A short condition before a request: "if not, rerun it", "otherwise, page Bob".
_CONDITION = re.compile(
    r"(?i)(?:(?:if|wenn|falls|si|sinon|otherwise|else|sonst)\b[^,.!?]{0,24},|(?:otherwise|else|sonst|sinon)\s)\s*"
)
_OPEN_PUNCT = "¿¡\"'“‘«(「『[ "
_WORD_PUNCT = ".,:;!?¿¡…\"'“”‘’«»()[]{}「」『』？！。、，：；"


#: Characters that may be wide (East Asian width W or F): no ASCII character is.
_MAYBE_WIDE = re.compile(r"[^\x00-\x7f]")


def _width(text: str) -> int:
    """Length in characters, a wide (CJK) character counting 2."""
    return len(text) + sum(unicodedata.east_asian_width(c) in "WF" for c in _MAYBE_WIDE.findall(text))


def _has_cjk(text: str) -> bool:
    return any(unicodedata.east_asian_width(c) in "WF" and c.isalpha() for c in _MAYBE_WIDE.findall(text))


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


#: After an imperative, none of these: "Fix is merged.", "Test was green." are statements.
_NOT_AFTER_IMPERATIVE = frozenset("is are was were has had will would 's".split())


def _is_request(body: str, words: list[str]) -> bool:
    lower = body.lower().replace("\u2019", "'")
    if _first_word(words) in _REQUEST_WORDS and (len(words) < 2 or _norm_word(words[1]) not in _NOT_AFTER_IMPERATIVE):
        return True
    if lower.startswith(_REQUEST_PHRASES):
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
#: A spoken ask's pronoun that leans back lies within its first words (the rest is not read: long run-ons stay linear).
_CLAUSE_WORDS = 30
#: Fewest words a unit needs before it can be a run-on, and fewest on each side of a cut.
RUN_ON_MIN_WORDS = 10
RUN_ON_MIN_SIDE = 3


def _opens_ask(words: list[str]) -> str:
    """What ``words`` open in speech: ``"question"`` (a wh-word asking: "who is", "what time", "who" with any verb;
    an auxiliary and its subject: "is it", "do they"), ``"request"`` ("please", "can you", a request to the
    assistant: "remind me") or ``""``."""
    first = _norm_word(words[0]) if words else ""
    second = _norm_word(words[1]) if len(words) > 1 else ""
    if first in ("please", "pls", "plz") or (first in _AUXILIARIES and second == "you"):
        return "request"
    if first in ("what's", "where's", "who's", "when's", "how's"):
        return "question"
    if first in _WH_WORDS:
        return "question" if second in _WH_NEXT or (first in ("who", "which") and second not in _SUBJECTS) else ""
    if first in _AUXILIARIES:
        return "question" if second in _SUBJECTS else ""
    return "request" if first in _SPOKEN_REQUESTS and second in ("me", "us") else ""


def _spoken(text: str) -> bool:
    """A transcript rather than typed prose: it opens in lower case or ends without a sentence end."""
    core = text.strip().lstrip(_OPEN_PUNCT)
    return bool(core) and (core[0].islower() or not core.rstrip(_CLOSERS + " ").endswith((".", "!", "?", "…")))


# -- topic switches ------------------------------------------------------------------------------
#: Phrases that open a new subject, as lower-cased words (:func:`_norm_word`). A unit that opens with one starts a
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
    ``plain``: the words through :func:`_norm_word`."""
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


def _switch_rest(text: str) -> str | None:
    """What follows the topic switch a unit opens with ("By the way, when is ..." → "when is ..."); None when it
    opens with none, or too little follows it (:data:`SWITCH_MIN_REST` words)."""
    body = text.strip().lstrip(_OPEN_PUNCT)
    if _has_cjk(body[:6]):
        for p in _SWITCHES_CJK + _COMMA_SWITCHES_CJK:
            rest = body[len(p) :]
            if body.startswith(p) and (p in _SWITCHES_CJK or rest[:1] in "\u3001\uff0c,"):
                rest = rest.lstrip("\u3001\uff0c, ")
                return rest if len(rest) >= 2 else None
        return None
    words = body.split()
    plain = [_norm_word(w) for w in words]
    n = _switch_words(words, plain, 0)
    if not n or len(words) - n < SWITCH_MIN_REST:
        return None
    return " ".join(words[n:])


def _clause_cuts(text: str) -> list[int]:
    """Word positions where a unit is cut inside its sentence: before a topic switch after a clause mark ("...
    plan, and by the way, what was ...") in typed text; in a spoken run-on (:func:`_spoken`: :data:`RUN_ON_MIN_WORDS`
    words or more, no punctuation inside) before every switch ("... the standup | oh and what are my dogs called")
    and before a joiner ("and", "also", "anyway"...) that opens an ask which stands alone ("so what time is my
    flight | and also can you remind me ..."; not "... close and do they do flu shots": the pronoun leans back).
    Every cut leaves :data:`RUN_ON_MIN_SIDE` words before it and :data:`SWITCH_MIN_REST` after the switch."""
    words = text.split()
    if len(words) < 2 * RUN_ON_MIN_SIDE or _has_cjk(text):
        return []
    plain = [_norm_word(w) for w in words]
    inner = text.rstrip(_CLOSERS + " .!?\uff1f\uff01\u3002")
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
                if ask == "request" or (ask == "question" and not _leans_back(" ".join(words[j : j + _CLAUSE_WORDS]))):
                    cuts.append(i)
                    last = i
                step = j - i
        i += step
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
    if not rest.strip(_WORD_PUNCT + " "):
        return "frag"
    words = rest.split()
    cond = _CONDITION.match(rest)
    if cond and _is_request(rest[cond.end() :], rest[cond.end() :].split()):
        return "ask"  # "if not, rerun it"
    if _is_question(body):
        core = rest.strip(_WORD_PUNCT + " ")
        if _has_cjk(core):
            return "frag" if len(core) < 4 else "ask"  # "为什么？" repeats the question before it
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
