"""Text handling: cleaning, query splitting, the UTF-8 tail cap and the sentence packer.

Exact rules (DESIGN §4):

* ``split_prompt_chunks`` splits on line breaks and after sentence ends (``.!?``, and ``。！？``
  without a space); cuts any piece over 60 words into windows of 40 words; keeps every question
  or request its own part however short; joins fragments ("Thanks!", "Or anything about them?")
  and other pieces shorter than 24 characters to a neighbour; keeps fenced code blocks and ``>``
  quoted lines in one part; joins neighbours into at most ``max_parts`` runs, asks keeping their
  own part where they can. The seed's rule is kept as the baseline in
  :func:`ctxret.evaluation.splitting.seed_split_prompt_chunks`.
* ``tail_utf8`` keeps the end of a text within a UTF-8 byte cap, never cutting inside a character.
* ``pack_text_pieces`` packs sentences into pieces of at most ``max_bytes`` UTF-8 bytes; a
  sentence over the budget is cut at the last word that fits (a single word over the budget at a
  character boundary). Every non-whitespace character of the input is in exactly one piece.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass

from .errors import InputError

#: A part longer than this many words is cut into windows.
LONG_PART_WORDS = 60
#: Window size, in words, for long parts.
WINDOW_WORDS = 40
#: A part shorter than this many characters joins the part before it.
MIN_PART_CHARS = 24
#: Default number of parts a message is split into at most.
MAX_PARTS = 8
#: Cap on the whole-message input, in UTF-8 bytes (the end is kept).
WHOLE_MESSAGE_MAX_BYTES = 8000
#: Default piece budget in UTF-8 bytes (seed value; the index sizes it to the embedder).
PIECE_MAX_BYTES = 1200
#: Smallest budget the packer accepts (one 4-byte character must always fit).
MIN_PIECE_BYTES = 16
#: Version of the packing rules; recorded in the index config.
PACKER_VERSION = "1"

_LINE_BREAKS = re.compile(r"[\r\n\u2028\u2029\x0b\x0c\x1c\x1d\x1e\x85]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_WS = re.compile(r"\s+")
# Control characters other than tab and line breaks, and lone surrogates.
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Make text safe to embed and store: lone surrogates become U+FFFD, control characters a space.

    Tabs and line breaks are kept. Raises :class:`InputError` for non-string input.
    """
    if not isinstance(text, str):
        raise InputError(f"expected text (str), got {type(text).__name__}")
    text = _SURROGATE.sub("\ufffd", text)
    return _CONTROL.sub(" ", text)


def _sentences(line: str) -> list[str]:
    return [s for s in (_WS.sub(" ", raw).strip() for raw in _SENTENCE_END.split(line)) if s]


def split_prompt_chunks(message: str, max_parts: int = MAX_PARTS) -> list[str]:
    """Split an incoming message into at most ``max_parts`` search parts.

    Returns ``[]`` for an empty or whitespace-only message. Parts are whitespace-collapsed, hold no
    line breaks and cover every non-whitespace character of the (cleaned) message, in order; a
    whitespace-separated word is only ever cut right after a sentence end that needs no space
    (``。！？``). The rule (DESIGN §4; the seed's rule is the baseline):

    * Units: the message is cut at line breaks and after sentence ends (``.!?…`` and ``؟``/``।``
      followed by whitespace, with closing quotes and brackets kept; ``。！？`` with or without a
      space). No cut after a leading list marker (``1.``, ``a)``), after a title or abbreviation
      (``Dr.``, ``e.g.``), inside inline code, or before an emoji that ends the sentence. Inline
      enumerations (``1) … 2) … 3) …``) are cut before each number. A fenced code block (````` ``` `````
      or ``~~~``, closed) and a run of ``>`` quoted lines are single units. A unit over 60 words is
      cut into windows of 40 words.
    * Asks keep their own part: a question (ends with ``?``/``？``/``؟``, starts with ``¿``, ends
      with ``か``, or an unpunctuated line opening with a question word) or a request (opens with an
      imperative or "please" word in English, German, French or Spanish, or a CJK request form such
      as ``请``/``帮我``/``…ください``), even when shorter than 24 characters.
    * Fragments join the unit before them (the unit after them when nothing comes before): a unit
      opening with "or" (``oder``, ``ou``, ``o``, ``还是``, ``それとも``); a short unit (under 24
      characters, a CJK character counting 2) that is not an ask, such as "Thanks!" or "ok."; a
      short question of one word or an elliptical one ("Why not?"), or one that opens with
      "and"/"also"/"but"… and then has no question word, verb or request ("And staging?"); a
      sentence after the first inside a list item that is not an ask; a window after the first.
    * A unit ending with ``:`` (or a question directly followed by list items) leads in: it joins
      the unit after it. A code or quote block joins the unit before it, or, after a lead-in, goes
      with the lead-in (the pair stands alone when the lead-in is itself an ask, e.g.
      "Explain this regex:").
    * More than ``max_parts`` parts: when some parts are asks and fewer than ``max_parts``, every
      ask keeps its own part and the statements between them are joined into runs in the slots
      left (a stretch of statements that gets no slot joins the ask before it); otherwise all
      parts are joined into ``max_parts`` runs of near-equal counts, earlier runs taking the extra.
    """
    if max_parts < 1:
        raise InputError(f"max_parts must be at least 1, got {max_parts}")
    text = clean_text(message)
    units = _units(text)
    groups = _group_units(units)
    if len(groups) > max_parts:
        groups = _cap_groups(groups, max_parts)
    return [_join_units(g.units) for g in groups]


# -- query splitting: units ---------------------------------------------------------------------

#: Closing quotes and brackets that stay with the sentence end before them.
_CLOSERS = "\"'\u201d\u2019\u00bb\u300d\u300f\uff09)]}\u203a"
#: Sentence ends that need whitespace after them (the seed's ``.!?`` plus ``…‼⁇⁈⁉`` and ``؟``/``।``).
_END_SPACED = re.compile(r"[.!?\u2026\u203c\u2047-\u2049\u061f\u0964]+[" + re.escape(_CLOSERS) + r"]*(?=\s)")
#: CJK / full-width sentence ends: a sentence may end there without a space after.
_END_CJK = re.compile(r"[\u3002\uff01\uff1f\uff61][\u3002\uff01\uff1f\uff61!?]*[" + re.escape(_CLOSERS) + r"]*")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")
_FENCE_CLOSE = re.compile(r"^\s*(`{3,}|~{3,})\s*$")
_QUOTE_LINE = re.compile(r"^\s*>")
_HEADING = re.compile(r"^\s*#{1,6}\s+\S")
#: A pasted log line: it opens with a date, a time or a level (``2024-05-02 03:14:07 ERROR …``).
_LOG_LINE = re.compile(
    r"^\s*(?:\[?\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}|\[?\d{2}:\d{2}:\d{2}|\[?(?:ERROR|WARN|WARNING|INFO|DEBUG|TRACE|FATAL)\b)"
)
#: A list marker at the start of a line: bullets (with an optional checkbox), ``1.``, ``1)``, ``(1)``, ``a)``.
_LIST_MARKER = re.compile(
    r"^\s*(?:[-*+\u2022\u2023\u25e6\u25aa\u2013\u00b7](?:\s+\[[ xX]\])?|\(?\d{1,3}[.)]|[A-Za-z][.)])(?=\s)\s*"
)
_INLINE_ENUM = re.compile(r"(?:(?<=\s)|^)\(?(\d{1,2})\)(?=\s)")
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_NON_SPACE = re.compile(r"\S")
#: No sentence end after these (lower-cased, with their dot); "etc." and "a.m." often end a sentence.
_ABBREVIATIONS = frozenset(
    "mr. mrs. ms. dr. prof. st. sr. jr. mt. vs. e.g. i.e. cf. approx. z.b. d.h. bzw. u.a. ca. "
    "nr. sra. mme. mlle. p.ej. inc. ltd. co. corp. dept. fig.".split()
)


@dataclass
class _Unit:
    text: str  # whitespace-collapsed
    sep: str  # what joins it to the unit before: " " or "" (a CJK end with no space after it)
    kind: str = "text"  # "text" | "block" | "window" | "heading"
    item: str = ""  # "start": opens a list item; "inside": a later sentence of a list item
    before_list: bool = False  # the last unit of a line directly followed by list items
    role: str = ""  # set by _roles: "ask" | "stmt" | "frag" | "lead" | "block"


@dataclass
class _Group:
    units: list[_Unit]
    ask: bool


def _units(text: str) -> list[_Unit]:
    """Cut cleaned text into units: sentences, list items, code and quote blocks, long-text windows."""
    lines = [ln for ln in _LINE_BREAKS.split(text)]
    units: list[_Unit] = []
    fences = _Fences(lines)
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        fence = _FENCE.match(line)
        if fence:
            closing = fences.closing(i, fence.group(1))
            if closing is not None:
                block = " ".join(" ".join(lines[i : closing + 1]).split())
                units.append(_Unit(block, " ", "block"))
                i = closing + 1
                continue
        run = _line_run(lines, i)
        if run > i:
            units.append(_Unit(" ".join(" ".join(lines[i:run]).split()), " ", "block"))
            i = run
            continue
        if _HEADING.match(line):
            units.append(_Unit(" ".join(line.split()), " ", "heading"))
            i += 1
            continue
        marker = _LIST_MARKER.match(line)
        segments = _line_segments(line, marker.end() if marker else 0)
        in_item = bool(marker)  # inside a list item (a line item, or an inline enumeration's)
        for n, (seg, sep, enum_start) in enumerate(segments):
            item = "start" if (enum_start or (marker and n == 0)) else ("inside" if in_item else "")
            in_item = in_item or enum_start
            words = seg.split(" ")
            if len(words) > LONG_PART_WORDS:
                for w in range(0, len(words), WINDOW_WORDS):
                    units.append(
                        _Unit(" ".join(words[w : w + WINDOW_WORDS]), sep if w == 0 else " ",
                              "text" if w == 0 else "window", item if w == 0 else "")
                    )
            else:
                units.append(_Unit(seg, sep, "text", item))
        if segments and not marker and _next_is_list_item(lines, i + 1):
            units[-1].before_list = True
        i += 1
    return units


def _line_run(lines: list[str], start: int) -> int:
    """End of a block of ``>`` quoted lines (one or more) or pasted log lines (two or more); ``start`` if none."""
    for pattern, least in ((_QUOTE_LINE, 1), (_LOG_LINE, 2)):
        j = start
        while j < len(lines) and pattern.match(lines[j]):
            j += 1
        if j - start >= least:
            return j
    return start


class _Fences:
    """Finds the line that closes a code fence; repeated searches stay linear in the number of lines."""

    def __init__(self, lines: list[str]) -> None:
        self._closers = [
            (j, m.group(1)[0], len(m.group(1)))
            for j, line in enumerate(lines)
            if (m := _FENCE_CLOSE.match(line))
        ]
        self._found: dict[tuple[str, int], tuple[int, int | None]] = {}

    def closing(self, start: int, fence: str) -> int | None:
        """Index of the first line after ``start`` closing ``fence`` (same character, at least as long)."""
        key = (fence[0], len(fence))
        seen = self._found.get(key)
        if seen is not None and seen[0] < start and (seen[1] is None or seen[1] > start):
            return seen[1]  # an earlier search for this fence found the same answer
        k = bisect.bisect_right(self._closers, (start, "\uffff", 0))
        found = next((j for j, ch, n in self._closers[k:] if ch == key[0] and n >= key[1]), None)
        self._found[key] = (start, found)
        return found


def _next_is_list_item(lines: list[str], j: int) -> bool:
    while j < len(lines) and not lines[j].strip():
        j += 1
    return j < len(lines) and bool(_LIST_MARKER.match(lines[j])) and not _FENCE.match(lines[j])


def _line_segments(line: str, marker_end: int) -> list[tuple[str, str, bool]]:
    """Cut one line into ``(sentence, sep, opens_an_inline_enumeration_item)``, whitespace-collapsed."""
    spans = [m.span() for m in _INLINE_CODE.finditer(line)]
    starts = [a for a, _ in spans]

    def in_code(pos: int) -> bool:
        k = bisect.bisect_left(starts, pos) - 1
        return k >= 0 and pos < spans[k][1]

    cuts: dict[int, bool] = {}  # position -> starts an inline enumeration item
    for m in _END_SPACED.finditer(line):
        end = m.end()
        if m.start() < marker_end or in_code(end) or _is_abbreviation(line, m):
            continue
        cuts[_after_trailing_emoji(line, end)] = False
    for m in _END_CJK.finditer(line):
        if m.end() < len(line) and not in_code(m.end()):
            cuts.setdefault(m.end(), False)
    for pos in _enumeration_starts(line, marker_end):
        if not in_code(pos):
            cuts[pos] = True
    out: list[tuple[str, str, bool]] = []
    prev = 0
    for pos in sorted(cuts) + [len(line)]:
        piece = " ".join(line[prev:pos].split())
        if piece:
            sep = " " if (not out or prev == 0 or line[prev - 1].isspace() or line[prev].isspace()) else ""
            out.append((piece, sep, cuts.get(prev, False) and bool(out)))
        prev = pos
    return out


def _is_abbreviation(line: str, m: re.Match[str]) -> bool:
    if m.group(0) != ".":
        return False
    start = m.start()
    while start > 0 and not line[start - 1].isspace():
        start -= 1
    token = line[start : m.end()].lstrip("(\"'\u201c\u00ab").lower()
    if token == "no.":
        rest = line[m.end() :].lstrip()
        return bool(rest) and rest[0].isdigit()
    return token in _ABBREVIATIONS


def _is_emoji(ch: str) -> bool:
    return unicodedata.category(ch) in ("So", "Sk", "Mn", "Cf") or ch == "\ufe0f"


def _after_trailing_emoji(line: str, end: int) -> int:
    """Keep an emoji that follows a sentence end (``Saturday? 🎉 Can …``) with that sentence."""
    pos = end
    while pos < len(line) and line[pos].isspace():
        pos += 1
    start = pos
    while pos < len(line) and not line[pos].isspace():
        if not _is_emoji(line[pos]):
            return end
        pos += 1
    if pos == start or not _NON_SPACE.search(line, pos):
        return end
    return pos


def _enumeration_starts(line: str, marker_end: int) -> list[int]:
    """Starts of items 2, 3, … of an inline enumeration ``1) … 2) … 3) …`` (consecutive numbers)."""
    found = [(int(m.group(1)), m.start()) for m in _INLINE_ENUM.finditer(line)]
    starts: list[int] = []
    expected = 1
    for number, pos in found:
        if number == expected:
            if number > 1:
                starts.append(pos)
            expected += 1
        elif number == 1:
            expected = 2
    return starts if starts else []


# -- query splitting: roles -----------------------------------------------------------------------

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


def _roles(units: list[_Unit]) -> None:
    for i, u in enumerate(units):
        if u.kind == "block":
            u.role = "block"
            continue
        short = _width(_LIST_MARKER.sub("", u.text, count=1)) < MIN_PART_CHARS
        if u.kind == "window":
            u.role = "frag" if short else "stmt"
            continue
        last = i == len(units) - 1
        lead = (
            u.kind == "heading"
            or u.text.rstrip().endswith((":", "\uff1a"))
            or (u.before_list and _is_question(u.text))
        )
        if lead and not last:
            u.role = "lead"
            continue
        kind = _classify(u.text)
        if kind == "or":
            u.role = "frag"
        elif kind == "ask":
            u.role = "ask"
        elif u.item == "inside" or short:
            u.role = "frag"
        else:
            u.role = "stmt"


def _group_units(units: list[_Unit]) -> list[_Group]:
    """Join fragments, lead-ins and blocks to the asks and statements they belong to."""
    _roles(units)
    groups: list[_Group] = []
    pending: list[_Unit] = []
    i = 0
    while i < len(units):
        u = units[i]
        if u.role == "lead" and i + 1 < len(units) and units[i + 1].role == "block":
            # A lead-in and its block: they stand together when the lead-in is an ask.
            pair = [u, units[i + 1]]
            if _classify(u.text.rstrip(":\uff1a ")) == "ask" and not pending:
                groups.append(_Group(pair, True))
            else:
                pending.extend(pair)
            i += 2
            continue
        if u.role in ("ask", "stmt"):
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


def _join_units(units: list[_Unit]) -> str:
    return "".join((u.sep if n else "") + u.text for n, u in enumerate(units))


def _cap_groups(groups: list[_Group], max_parts: int) -> list[_Group]:
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
            key=lambda i: (len(seq[i]), -i),
        )
        stretch = seq.pop(idx)
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


def tail_utf8(text: str, max_bytes: int = WHOLE_MESSAGE_MAX_BYTES) -> str:
    """The longest suffix of ``text`` that fits in ``max_bytes`` of UTF-8, never cutting inside a character."""
    if max_bytes < 0:
        raise InputError(f"max_bytes must be non-negative, got {max_bytes}")
    text = clean_text(text)
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    cut = len(data) - max_bytes
    while cut < len(data) and (data[cut] & 0xC0) == 0x80:  # skip continuation bytes
        cut += 1
    return data[cut:].decode("utf-8")


def cut_within_bytes(sentence: str, max_bytes: int) -> list[str]:
    """Cut a whitespace-collapsed sentence into runs of at most ``max_bytes`` UTF-8 bytes.

    Cuts at the last space that fits; a single word over the budget is cut at a character boundary.
    """
    if max_bytes < 4:
        raise InputError(f"max_bytes must be at least 4 (one UTF-8 character), got {max_bytes}")
    data = sentence.encode("utf-8")
    if len(data) <= max_bytes:
        return [sentence] if sentence else []
    out: list[str] = []
    pos, n = 0, len(data)
    while n - pos > max_bytes:
        space = data.rfind(b" ", pos, pos + max_bytes + 1)
        if space > pos:
            out.append(data[pos:space].decode("utf-8"))
            pos = space + 1
        else:
            end = pos + max_bytes
            while end > pos and (data[end] & 0xC0) == 0x80:
                end -= 1
            out.append(data[pos:end].decode("utf-8"))
            pos = end
        while pos < n and data[pos] == 0x20:
            pos += 1
    if pos < n:
        out.append(data[pos:].decode("utf-8"))
    return out


def pack_text_pieces(text: str, max_bytes: int = PIECE_MAX_BYTES) -> list[str]:
    """Pack the sentences of ``text`` into pieces of at most ``max_bytes`` UTF-8 bytes.

    Lines are kept apart by a newline inside a piece, sentences by a space; whitespace is collapsed.
    Returns ``[]`` for empty or whitespace-only text. Nothing is dropped.
    """
    if max_bytes < MIN_PIECE_BYTES:
        raise InputError(f"max_bytes must be at least {MIN_PIECE_BYTES}, got {max_bytes}")
    text = clean_text(text)
    pieces: list[str] = []
    current: list[str] = []
    current_bytes = 0
    for line in _LINE_BREAKS.split(text):
        sentences = [cut for s in _sentences(line) for cut in cut_within_bytes(s, max_bytes)]
        for index, sentence in enumerate(sentences):
            size = len(sentence.encode("utf-8"))
            joiner = "" if not current else ("\n" if index == 0 else " ")
            if current and current_bytes + len(joiner) + size > max_bytes:
                pieces.append("".join(current))
                current, current_bytes = [sentence], size
            else:
                current.append(joiner + sentence)
                current_bytes += len(joiner) + size
    if current:
        pieces.append("".join(current))
    return pieces
