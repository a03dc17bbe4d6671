"""The thread protocol's data: LoCoMo conversations and your own JSONL threads, and the query sets made from them.

A session (LoCoMo) or turn (JSONL) is a *section*; its utterances (LoCoMo) or messages are its sources.

Query sets

* ``facts``: stored facts about what happened (LoCoMo ``session_N_observation``; JSONL ``facts``).
  Right answer: a hit inside the section the fact's evidence came from. A fact whose evidence
  spans several sessions has several gold sections and any of them counts. A LoCoMo fact with no
  parsable evidence id falls back to the session its observation list belongs to.
* ``qa``: LoCoMo QA questions of categories 1–4 that carry evidence (JSONL ``questions``).
* ``composite``: messages made by joining three facts from three different sections of the same
  conversation (fixed seed). Measures what query splitting is for.
* ``time`` and ``time_qa`` (not run unless named): questions that name a time ("What did Caroline say
  yesterday?", with the search's now after the section) and the data's own dated questions; their
  queries are made in :mod:`.timequeries`; their metrics (``top1_window``, ``top5_window``) and the time-aware
  representations are in :mod:`.timeset`.
* ``distracted`` (not run unless named): each ``qa`` question after two long utterances of its conversation and a
  topic-switch phrase; built and scored in :mod:`.distracted`.
* ``foreign``, ``updates`` and ``updates_twice`` (not run unless named): questions from the run's other conversations
  (nothing in the thread answers them: what the floor should empty; :mod:`.floorset`) and facts that change once or
  twice, inserted under control (:mod:`.updates`).

JSONL thread format (one thread per line)::

    {"thread_id": "t1",
     "messages": [{"role": "user", "content": "...", "timestamp": "2026-10-03T09:14:00"}, ...],
     "facts": [{"text": "The user's dogs are Biscuit and Pepper.", "turn": 2},
               {"text": "...", "turns": [3, 4]}],
     "questions": [{"question": "What are the dogs called?", "turns": [2]}]}

``messages`` are OpenAI chat-completions dicts; turns are numbered from 1 exactly as
:func:`ctxret.ingest.messages.turns_from_messages` numbers them (a turn = a user message and everything up to
the next user message). ``facts`` and ``questions`` are optional; a fact's ``turn`` (or
``turns``) is its gold section, a question's ``turns`` both its gold sections and its evidence.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..ingest.messages import turns_from_messages
from ..ingest.turns import Source, Turn
from .timequeries import TIME_QUERY_SETS, dated_questions
from .timequeries import time_queries as _time_queries

#: What ``--query-sets`` accepts; :data:`DEFAULT_QUERY_SETS` run when none are named.
#: The last four: :mod:`.distracted`, :mod:`.floorset`, :mod:`.updates` (two).
QUERY_SETS = ("facts", "qa", "composite", *TIME_QUERY_SETS, "distracted", "foreign", "updates", "updates_twice")
DEFAULT_QUERY_SETS = ("facts", "qa", "composite")
QA_CATEGORIES = (1, 2, 3, 4)
FACTS_PER_COMPOSITE = 3


# -- data -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """One query with its gold sections (section numbers) and evidence units."""

    id: str
    text: str
    gold: frozenset[int]
    evidence: frozenset[str]
    category: int | None = None


@dataclass(frozen=True)
class CompositeQuery:
    """A message joining facts from different sections; each fact is scored on its own."""

    id: str
    text: str
    facts: tuple[Query, ...]


@dataclass
class Conversation:
    """A thread to evaluate: its sections (turns), evidence-unit map and query sets."""

    id: str
    source: str
    turns: list[Turn]
    facts: list[Query]
    questions: list[Query]
    #: (section number, source ordinal) → evidence unit id; missing → the section ("T<n>").
    units: dict[tuple[int, int], str] = field(default_factory=dict)
    #: Counts of data repairs made while loading (malformed evidence ids and the like).
    notes: Counter = field(default_factory=Counter)

    def unit_of(self, section: int, source_ordinal: int) -> str:
        return self.units.get((section, source_ordinal), f"T{section}")


_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)
_SESSION = re.compile(r"session_(\d+)")
_DATE = re.compile(r"(\d{1,2}):(\d{2})\s*([ap])\.?\s*m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})", re.IGNORECASE)
_MONTH_NAMES = "january february march april may june july august september october november december".split()
_MONTHS = {m: i for i, m in enumerate(_MONTH_NAMES, 1)}


def parse_evidence(value: Any) -> list[str]:
    """Normalised dia_ids in a LoCoMo evidence value: ``"D8:6; D9:17"`` → ``["D8:6", "D9:17"]``,
    ``"D30:05"`` → ``["D30:5"]``, ``"D:11:26"`` → ``["D11:26"]``, ``"D"`` → ``[]``; lists are flattened."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in parse_evidence(v)]
    return [f"D{int(a)}:{int(b)}" for a, b in _DIA.findall(str(value))]


def parse_locomo_time(value: Any) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` → ``datetime(2023, 5, 8, 13, 56)``; ``None`` when unreadable."""
    m = _DATE.search(str(value or ""))
    if not m:
        return None
    hour, minute, ampm, day, month, year = m.groups()
    month_n = _MONTHS.get(month.lower()) or next(
        (v for k, v in _MONTHS.items() if k.startswith(month.lower()[:3])), None
    )
    if month_n is None:
        return None
    h = int(hour) % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        return datetime(int(year), month_n, int(day), h, int(minute))
    except ValueError:
        return None


def load_locomo(path: str | os.PathLike[str]) -> Conversation:
    """One LoCoMo conversation file → a :class:`Conversation` (see the module docstring for the mapping).

    A session is a section (``Turn(index=N, label="Session N", timestamp=session_N_date_time)``),
    each utterance one source (kind ``"user"``, label = speaker), its text plus
    ``" [shares a photo: <blip_caption>]"`` when it shares an image.
    """
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    conv = data.get("conversation", data) if isinstance(data, dict) else None
    if not isinstance(conv, dict) or not any(_SESSION.fullmatch(k) for k in conv):
        raise InputError(f"{path} is not a LoCoMo conversation (no session_N lists)")
    cid = str(data.get("sample_id") or path.stem)
    notes: Counter = Counter()
    turns: list[Turn] = []
    units: dict[tuple[int, int], str] = {}
    unit_session: dict[str, int] = {}
    numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION.fullmatch(k)) and isinstance(conv[k], list))
    for n in numbers:
        sources = []
        for j, utt in enumerate(conv[f"session_{n}"]):
            text = str(utt.get("text") or "")
            caption = utt.get("blip_caption")
            if caption:
                text = f"{text} [shares a photo: {caption}]"
            speaker = str(utt.get("speaker") or "Speaker")
            sources.append(Source(kind="user", label=speaker, text=text, ordinal=j, name=speaker))
            ids = parse_evidence(utt.get("dia_id"))
            dia = ids[0] if ids else f"D{n}:{j + 1}"
            if not ids:
                notes["utterance without dia_id"] += 1
            units[(n, j)] = dia
            unit_session[dia] = n
        ts = parse_locomo_time(conv.get(f"session_{n}_date_time"))
        if ts is None:
            notes["session without a readable date"] += 1
        turns.append(Turn(thread_id=cid, index=n, sources=tuple(sources), label=f"Session {n}", timestamp=ts))

    def evidence(raw: Any) -> tuple[list[str], int]:
        flat = [str(x) for x in (raw if isinstance(raw, (list, tuple)) else [raw])]
        ids = parse_evidence(raw)
        if any(not re.fullmatch(r"D\d+:\d+", s.strip()) for s in flat):
            notes["malformed evidence strings repaired or dropped"] += 1
        known = [d for d in dict.fromkeys(ids) if d in unit_session]
        if len(known) < len(set(ids)):
            notes["evidence ids not in the conversation (dropped)"] += len(set(ids)) - len(known)
        return known, len(ids)

    facts: list[Query] = []
    for n in numbers:
        obs = data.get(f"session_{n}_observation", conv.get(f"session_{n}_observation")) or {}
        for speaker, items in sorted(obs.items()) if isinstance(obs, dict) else []:
            for i, item in enumerate(items or []):
                if not isinstance(item, (list, tuple)) or not item:
                    continue
                text = str(item[0]).strip()
                if not text:
                    continue
                ids, _ = evidence(item[1] if len(item) > 1 else None)
                gold = frozenset(unit_session[d] for d in ids)
                if not gold:
                    notes["facts without usable evidence (gold = observation session)"] += 1
                    gold = frozenset({n})
                facts.append(Query(f"{cid}/s{n}/{speaker}/{i}", text, gold, frozenset(ids)))
    questions: list[Query] = []
    for i, qa in enumerate(data.get("qa") or []):
        cat = qa.get("category")
        if cat not in QA_CATEGORIES:
            continue
        ids, _ = evidence(qa.get("evidence"))
        if not ids:
            notes["qa (cat 1-4) without usable evidence (skipped)"] += 1
            continue
        questions.append(
            Query(
                f"{cid}/qa{i}", str(qa["question"]), frozenset(unit_session[d] for d in ids), frozenset(ids), int(cat)
            )
        )
    return Conversation(cid, str(path), turns, facts, questions, units, notes)


def load_jsonl(path: str | os.PathLike[str]) -> list[Conversation]:
    """Threads in our JSONL format (one per line; see the module docstring).

    The form ``ctxret index`` also reads — one OpenAI message per line, the file being one thread
    named by the file — is read too, as one thread without facts or questions.
    """
    path = Path(path)
    out: list[Conversation] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    first = next((line for line in lines if line.strip()), "")
    try:
        head = json.loads(first) if first else None
    except json.JSONDecodeError:
        head = None
    if isinstance(head, dict) and "role" in head and "messages" not in head:
        try:
            messages = [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: not valid JSON ({exc})") from None
        return [Conversation(path.stem, str(path), turns_from_messages(messages, path.stem), [], [])]
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc})") from None
        if not isinstance(obj, dict) or "thread_id" not in obj or "messages" not in obj:
            raise InputError(f'{where}: each line needs "thread_id" and "messages"')
        tid = str(obj["thread_id"])
        turns = turns_from_messages(obj["messages"], tid)
        known = {t.index for t in turns}

        def gold_of(
            item: dict,
            key_one: str,
            key_many: str,
            what: str,
            where: str = where,
            known: set[int] = known,
            n: int = len(turns),
        ) -> frozenset[int]:
            raw = item.get(key_many, item.get(key_one))
            nums = raw if isinstance(raw, list) else [raw]
            try:
                gold = frozenset(int(x) for x in nums)  # type: ignore[arg-type]  # bad values raise below
            except (TypeError, ValueError):
                raise InputError(
                    f'{where}: {what} needs "{key_one}" (a turn number) or "{key_many}" (a list)'
                ) from None
            missing = sorted(gold - known)
            if missing or not gold:
                raise InputError(f"{where}: {what} points at turn(s) {missing or '[]'}; the thread has turns 1..{n}")
            return gold

        facts = []
        for i, f in enumerate(obj.get("facts") or []):
            gold = gold_of(f, "turn", "turns", f"fact {i}")
            facts.append(Query(f"{tid}/f{i}", str(f["text"]), gold, frozenset(f"T{n}" for n in gold)))
        questions = []
        for i, q in enumerate(obj.get("questions") or []):
            gold = gold_of(q, "turn", "turns", f"question {i}")
            questions.append(Query(f"{tid}/q{i}", str(q["question"]), gold, frozenset(f"T{n}" for n in gold)))
        out.append(Conversation(tid, str(path), turns, facts, questions))
    return out


def load_threads(path: str | os.PathLike[str]) -> list[Conversation]:
    """A folder (every ``*.json`` LoCoMo file and ``*.jsonl`` thread file in it, sorted) or one file."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl") and p.is_file())
        if not files:
            raise InputError(f"{path} holds no *.json (LoCoMo) or *.jsonl (threads) files")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(f"{path} does not exist; pass a LoCoMo .json file, a .jsonl threads file or a folder of them")
    out: list[Conversation] = []
    for f in files:
        out.extend(load_jsonl(f) if f.suffix == ".jsonl" else [load_locomo(f)])
    ids = [c.id for c in out]
    if len(set(ids)) != len(ids):
        raise InputError(f"duplicate thread ids in {path}: {sorted(k for k, v in Counter(ids).items() if v > 1)}")
    return out


def _terminated(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else text + "."


def composite_queries(conv: Conversation, seed: int = 0, limit: int | None = None) -> list[CompositeQuery]:
    """Messages of three facts from three different sections (disjoint gold sets), fixed by the seed."""
    rng = random.Random(f"{seed}/composite/{conv.id}")
    pool = list(conv.facts)
    rng.shuffle(pool)
    out: list[CompositeQuery] = []
    while len(pool) >= FACTS_PER_COMPOSITE and (limit is None or len(out) < limit):
        first = pool.pop(0)
        chosen, used = [first], set(first.gold)
        for f in pool:
            if not (f.gold & used):
                chosen.append(f)
                used |= f.gold
                if len(chosen) == FACTS_PER_COMPOSITE:
                    break
        if len(chosen) < FACTS_PER_COMPOSITE:
            continue
        for f in chosen[1:]:
            pool.remove(f)
        text = " ".join(_terminated(f.text) for f in chosen)
        out.append(CompositeQuery(f"{conv.id}/c{len(out)}", text, tuple(chosen)))
    return out


def select_queries(conv: Conversation, limit: int | None, seed: int) -> dict[str, list[Any]]:
    """The query sets of one conversation: the first ``limit`` facts and questions, and
    ``ceil(limit / 3)`` composite messages (all of them when ``limit`` is None); the first ``limit`` of
    the time sets (:mod:`.timequeries`)."""
    facts = conv.facts[:limit] if limit else list(conv.facts)
    qa = conv.questions[:limit] if limit else list(conv.questions)
    comp = composite_queries(conv, seed, limit=math.ceil(limit / FACTS_PER_COMPOSITE) if limit else None)
    return {
        "facts": facts,
        "qa": qa,
        "composite": comp,
        "time": _time_queries(conv, seed, limit),
        "time_qa": dated_questions(conv, limit),
    }
