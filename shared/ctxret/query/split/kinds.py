"""What a unit is, in the languages the splitter knows (:func:`classify`): a question or a request (an ask, which keeps
its own part); an alternative ("Or", "oder", "还是"...) or a fragment, which joins the part before it — a short
sentence that opens with a continuer ("And", "Also"...) or is elliptical ("Why?", "Thanks!"), unless it names a subject
of its own ("And the VPN host?"). Also here: the pronouns by which a question leans on the sentence before it
(:func:`leans_back`, :func:`leaning_question`; English only).
"""

from __future__ import annotations

import re

from .words import CLOSERS, INLINE_ENUM, LIST_MARKER, OPEN_PUNCT, WH_WORDS, WORD_PUNCT, has_cjk, norm_word

__all__ = ["classify", "is_question", "leaning_question", "leans_back"]

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


def _first_word(words: list[str]) -> str:
    """The first word, lower-cased; "who's" → "who", "envoie-moi" → "envoie"."""
    if not words:
        return ""
    first = norm_word(words[0])
    if first in _REQUEST_WORDS or first in _QUESTION_WORDS:
        return first
    if "'" in first and not first.startswith("n'"):
        first = first.split("'", 1)[0]
    if "-" in first:  # French "envoie-moi", "peux-tu"
        first = first.split("-", 1)[0]
    return first


def is_question(body: str) -> bool:
    end = body.rstrip(CLOSERS + " ").rstrip("!\uff01")
    return (
        end.endswith(("?", "\uff1f", "\u061f", "\u2047", "\u2048", "\u2049", "か", "か。", "か？"))
        or body.lstrip(OPEN_PUNCT).startswith("¿")
        or body.startswith("¿")
    )


#: After an imperative, none of these: "Fix is merged.", "Test was green." are statements.
_NOT_AFTER_IMPERATIVE = frozenset("is are was were has had will would 's".split())


def _is_request(body: str, words: list[str]) -> bool:
    lower = body.lower().replace("\u2019", "'")
    if _first_word(words) in _REQUEST_WORDS and (len(words) < 2 or norm_word(words[1]) not in _NOT_AFTER_IMPERATIVE):
        return True
    if lower.startswith(_REQUEST_PHRASES):
        return True
    if has_cjk(body):
        core = body.strip(WORD_PUNCT + " ")
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
    plain = [norm_word(w) for w in words]
    plain = [w for w in plain if w]
    return len(plain) >= 2 and plain[0] not in _PREPOSITIONS and not (set(plain) & _BACK_NOUNS)


#: Pronouns that point back to something named earlier. ``there`` counts unless it is existential
#: ("is there ..."); ``that``/``this``/``these``/``those`` only as pronouns (see :func:`leans_back`).
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


def leans_back(text: str) -> bool:
    """Whether a question leans on the sentence before it: a pronoun in its first clause, where nothing in the
    question comes before it to refer to ("Do you remember their names?", "When does it start?", "How do I get
    there?"; not "Which shipment is stuck at customs, and what is it missing?")."""
    first_clause = re.split(r"[,;:]| (?:and|but|or|because|since|so) ", text, maxsplit=1)[0]
    words = [norm_word(w) for w in first_clause.split()]
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


def leaning_question(text: str) -> bool:
    """A question (not a request: "Can you add it to my calendar?" acts on its referent but searches for the
    action) that leans on the sentence before it (:func:`leans_back`)."""
    body = LIST_MARKER.sub("", text, count=1).strip().lstrip(OPEN_PUNCT)
    words = body.split()
    while words and _first_word(words) in _CONTINUERS:
        words = words[1:]
    if not words or has_cjk(body):
        return False
    rest = " ".join(words)
    first = _first_word(words)
    request = rest.lower().replace("\u2019", "'").startswith(_REQUEST_PHRASES) or (
        first in _REQUEST_WORDS and first not in _QUESTION_WORDS
    )
    return (is_question(body) or first in WH_WORDS) and not request and leans_back(rest)


def classify(text: str) -> str:
    """``"or"`` (offers an alternative: continues), ``"ask"``, ``"frag"`` (an ask-less short unit) or ``"plain"``."""
    body = LIST_MARKER.sub("", text, count=1) if LIST_MARKER.match(text) else text
    body = INLINE_ENUM.sub("", body, count=1) if INLINE_ENUM.match(body) else body
    body = body.strip().lstrip(OPEN_PUNCT)
    words = body.split()
    if _first_word(words) in _OR_WORDS or body.startswith(_OR_CJK):
        return "or"
    continued = False
    while words and _first_word(words) in _CONTINUERS:
        words = words[1:]
        continued = True
    rest = " ".join(words).lstrip(OPEN_PUNCT + ",")
    if not rest.strip(WORD_PUNCT + " "):
        return "frag"
    words = rest.split()
    cond = _CONDITION.match(rest)
    if cond and _is_request(rest[cond.end() :], rest[cond.end() :].split()):
        return "ask"  # "if not, rerun it"
    if is_question(body):
        core = rest.strip(WORD_PUNCT + " ")
        if has_cjk(core):
            return "frag" if len(core) < 4 else "ask"  # "为什么？" repeats the question before it
        plain = " ".join(norm_word(w) for w in words)
        if len(words) < 2 or plain in _ELLIPTICAL:
            return "frag"
        if continued and _first_word(words) not in _QUESTION_WORDS and not _is_request(rest, words):
            # "And staging?" continues the question before it; "And the VPN host?" asks about a subject of its own
            return "ask" if _names_subject(words) else "frag"
        return "ask"
    if _is_request(rest, words):
        return "ask"
    if not body.rstrip(CLOSERS + " ").endswith((".", "!", "\u3002", "\uff01", "…", ":")):
        if _first_word(words) in _QUESTION_WORDS and len(words) >= 2:
            return "ask"  # an unpunctuated question: "where is the runbook"
    return "plain"
