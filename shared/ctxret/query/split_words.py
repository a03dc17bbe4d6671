"""The words that tell a question, a request and a fragment apart, in the languages the splitter knows.

Used by :mod:`ctxret.query.split`: a short sentence ending in a question mark, or opening with a
request verb or phrase, keeps its own part; a sentence that opens with a continuer ("Or", "And",
"Also"...) or is elliptical ("Why?", "Thanks!") joins the part before it.
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
            return "frag"
        return "ask"
    if _is_request(rest, words):
        return "ask"
    if not body.rstrip(_CLOSERS + " ").endswith((".", "!", "\u3002", "\uff01", "…", ":")):
        if _first_word(words) in _QUESTION_WORDS and len(words) >= 2:
            return "ask"  # an unpunctuated question: "where is the runbook"
    return "plain"


