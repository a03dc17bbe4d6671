"""The ``updates`` query set of ``eval threads``: facts that change, and whether the latest statement ranks first.

Real threads restate facts that change ("the cutover is planned for November 14" ... three sessions later "we moved
the cutover to November 21"). LoCoMo's observations rarely say which fact replaced which, so the set is **built
under control** from each conversation of the data (any thread with two speakers and dated sections works):

* :data:`UPDATE_TEMPLATES` holds 30 facts that change, written for this harness (not taken from the data): for each,
  a question about it (no time word in it), the first statement and a later, changed one, in the first person, in
  the words people use: the later statement names the subject again ("my new car", "we moved the cutover") but is
  otherwise worded differently from the first and from the question, and about half of them repeat the old value
  ("I sold the Civic, my new car is a Mazda"), as real corrections do;
* per conversation, every template is placed with a fixed seed (``random.Random(f"{seed}/updates/{id}")``): one of
  the two speakers says the first statement in a section among the first half of the dated sections, and the
  changed one in a section at least :data:`MIN_GAP` sections later; each is a new utterance inserted at a random
  place inside its section (the section's own utterances are kept, in order), and carries its section's time;
* the question names the speaker ("What car does Caroline drive?") and is asked with the conversation's 30
  statements in place, so the 29 other subjects are there as distractors (two templates share words such as
  "favorite", as subjects in a real thread do).

One update thread = one template in one conversation: 30 per conversation, 150 on locomo-dev. Metrics per question
(the best group, as for ``qa``): ``latest_first`` — the changed statement is in the group's first ``k`` and ranks
above the first statement (or the first statement is not there); ``latest_top1`` — the changed statement is the top
hit; ``first_top1`` — the first statement is the top hit (the stale value shown first); ``both_kept`` — both
statements are in the first ``k`` (the model sees the change); plus ``recall`` of the two statements. The two inserted
utterances are evidence units of their own (``U<n>:old`` / ``U<n>:new``), so nothing of the data's evidence changes.

**A fact changed twice** (the ``updates_twice`` set, not run unless named): each template's third statement
(``again``, written like the second: it names the subject, changes the value once more) is said by the same speaker at
least :data:`MIN_GAP` sections after the second, the first now in the first third of the dated sections. Plans that
slip twice, a second new job: the latest of three must come first (``latest_first``: in the first ``k`` and above both
earlier statements that are there), and ``first_top1`` is how often the oldest value is shown first. Its own seed
stream (``{seed}/updates-twice/{conversation}``) and query ids (``<conversation>/w<n>``); the templates' third
statements were written and committed before the set was first run.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..ingest.turns import Source, Turn
from .datasets import Conversation

__all__ = [
    "MIN_GAP",
    "UPDATE_TEMPLATES",
    "UpdateQuery",
    "run_updates",
    "score_update",
    "update_thread",
    "updates_table",
]

#: The changed statement comes at least this many dated sections after the first.
MIN_GAP = 2


@dataclass(frozen=True)
class UpdateTemplate:
    """A fact that changes: the question, the first statement, the changed one, and the one that changes it again
    (``{name}``: the speaker; ``again`` is used by the ``updates_twice`` set only)."""

    id: str
    question: str
    old: str
    new: str
    again: str


UPDATE_TEMPLATES: tuple[UpdateTemplate, ...] = tuple(
    UpdateTemplate(*row)
    for row in (
        (
            "car",
            "What car does {name} drive?",
            "I'm driving a blue Honda Civic these days, it's been great on gas.",
            "I sold the Civic last week, my new car is a red Mazda 3.",
            "Traded in the Mazda, I'm driving a white Kia EV6 now and charging it at home.",
        ),
        (
            "job",
            "What is {name}'s job?",
            "I work as a nurse at St. Mary's hospital, mostly in the children's ward.",
            "Big news: I left the hospital and my new job is paramedic with the city ambulance service.",
            "Paramedic shifts burned me out, so teaching first aid classes at the community center is my job now.",
        ),
        (
            "city",
            "Which city does {name} live in?",
            "I live in Portland right now, in a small flat near the river.",
            "We finally moved cities, Denver is home now and the boxes are still everywhere!",
            "Denver didn't work out for us, we relocated to Austin last month.",
        ),
        (
            "gym",
            "Which gym does {name} go to?",
            "My gym is Iron Works on 5th street, I go before work.",
            "I cancelled Iron Works and joined the gym at the YMCA downtown instead.",
            "The YMCA got too crowded, I work out at a climbing gym called Boulder Barn these days.",
        ),
        (
            "book",
            "What is {name}'s favorite book?",
            "My favorite book is Dune, I reread it every couple of years.",
            "Honestly The Overstory has replaced everything else as the book I love most.",
            "Sorry Overstory, Piranesi is my new all-time favorite book.",
        ),
        (
            "sport",
            "What sport does {name} play?",
            "I play soccer with some coworkers on Sunday mornings.",
            "I quit the Sunday games, my sport now is beach volleyball with a new team.",
            "Volleyball season ended, so I picked up tennis and play it twice a week.",
        ),
        (
            "cats",
            "How many cats does {name} have?",
            "We have two cats, Miso and Tofu.",
            "We took in a stray kitten, so that makes three cats in the house now.",
            "Tofu went to live with my mom, so we're down to two cats again, Miso and the kitten.",
        ),
        (
            "trip",
            "Where is {name} going for the summer trip?",
            "We're going to Italy for our summer trip this year.",
            "Change of plans for the summer: we booked Portugal instead, Lisbon and the Algarve.",
            "Portugal fell through because of the flights, we're doing a road trip to Canada this summer.",
        ),
        (
            "diet",
            "What diet does {name} follow?",
            "I've been on a vegetarian diet for a while now and I feel good.",
            "I went fully vegan last month, no dairy or eggs in my diet anymore.",
            "Vegan was too hard to keep up, I eat pescatarian now, fish is back on the menu.",
        ),
        (
            "major",
            "What is {name} studying?",
            "I'm studying for a degree in biology at the community college.",
            "I switched my major to chemistry, studying lab work suits me better.",
            "Chemistry wasn't for me either, from next semester I'm majoring in nursing.",
        ),
        (
            "commute",
            "How does {name} get to work?",
            "I bike to work every day, it's about twenty minutes.",
            "Since the office moved I take the train to work every morning.",
            "The trains keep getting cancelled, so I bought an e-scooter and ride it to the office.",
        ),
        (
            "party",
            "Where is {name}'s birthday party?",
            "My birthday party is at the bowling alley on Main Street.",
            "We moved the birthday party to my aunt's lake house.",
            "The lake house fell through, so my birthday party will be in our backyard.",
        ),
        (
            "dating",
            "Who is {name} dating?",
            "I've been dating someone named Chris for a few months.",
            "Chris and I broke up, and I'm dating Sam now.",
            "Sam and I are done too, I'm seeing a woman named Ruth and it feels right.",
        ),
        (
            "instrument",
            "What instrument is {name} learning?",
            "I'm learning to play the violin, the lessons are hard.",
            "I gave up on the violin, piano is the instrument I practice with a teacher now.",
            "Piano took too much time, I'm practicing guitar with online lessons instead.",
        ),
        (
            "race",
            "What race is {name} training for?",
            "I'm training for a half marathon in October.",
            "I signed up for the full marathon in December, so the training plan got longer.",
            "My knee can't take a full marathon, so I entered a 10K trail race in the spring.",
        ),
        (
            "rent",
            "How much is {name}'s rent?",
            "Our rent is 1,200 dollars a month, which is fine for the area.",
            "The landlord raised the rent to 1,450 a month, ugh.",
            "We renegotiated the lease and the rent came down to 1,300 a month.",
        ),
        (
            "restaurant",
            "What is {name}'s favorite restaurant?",
            "My favorite restaurant is Luigi's, the lasagna is amazing.",
            "Luigi's closed down, so the Thai restaurant on Elm is my go-to spot for dinner now.",
            "The Thai place lost its chef, my favorite spot to eat now is the ramen bar by the station.",
        ),
        (
            "cutover",
            "When is the cutover of {name}'s project?",
            "At work the cutover is planned for November 14.",
            "We moved the cutover to November 21 because the vendor needed another week.",
            "The cutover slipped again, it is now set for December 5.",
        ),
        (
            "bookclub",
            "When does {name}'s book club meet?",
            "Our book club meets on Tuesday evenings at the library.",
            "The book club switched to Thursdays, the library closes early on Tuesdays now.",
            "Our book club meets on Sunday afternoons now, at a cafe instead of the library.",
        ),
        (
            "phone",
            "What phone does {name} use?",
            "I'm still using my old iPhone 12, it works fine.",
            "My iPhone finally died, so my new phone is a Pixel 8.",
            "I returned the Pixel, I've been on a Samsung Galaxy S24 since last week.",
        ),
        (
            "manager",
            "Who is {name}'s manager?",
            "My manager is Dana, she's really supportive.",
            "Dana left the company, and my new manager is a guy called Priyan.",
            "Priyan got promoted, so I report to Mei now.",
        ),
        (
            "paint",
            "What does {name} paint with?",
            "I paint mostly with watercolors on small paper.",
            "I've moved on to oil paints on big canvases, it's messier but I love it.",
            "Oils were too messy for the flat, I'm painting with acrylics now.",
        ),
        (
            "flight",
            "When does {name}'s flight to Chicago leave?",
            "My flight to Chicago leaves at 7 am on Friday.",
            "The airline rescheduled my Chicago flight, it now takes off at 2 pm.",
            "They changed the Chicago flight once more, departure is 6 pm on Saturday.",
        ),
        (
            "shift",
            "Which shift does {name} work?",
            "I work the night shift at the warehouse, ten to six.",
            "They moved me to the day shift, so I'm on from eight to four now.",
            "Now I'm on the evening shift, three to eleven, and I kind of like it.",
        ),
        (
            "band",
            "What is the name of {name}'s band?",
            "My band is called The Late Owls, we play covers.",
            "We renamed the band to Static Bloom for the new songs.",
            "Static Bloom didn't stick either, the band's name is Paper Lanterns from now on.",
        ),
        (
            "language",
            "What language is {name} learning?",
            "I'm learning Spanish on Duolingo every night.",
            "I dropped Spanish, Japanese is the language I practice every evening now.",
            "Japanese is on hold, I'm learning Korean with a tutor now.",
        ),
        (
            "coffee",
            "How does {name} take their coffee?",
            "I take my coffee black, no sugar.",
            "I've started having my coffee as an oat milk latte instead of plain black.",
            "No more lattes for me, I just drink cold brew with a splash of milk.",
        ),
        (
            "team",
            "Which team does {name} support?",
            "I'm a huge Lakers fan, I watch every game.",
            "After the trade I gave up on the Lakers, my team is the Celtics now.",
            "I've switched allegiance again, the Warriors are my team now.",
        ),
        (
            "doctor",
            "Who is {name}'s doctor?",
            "My doctor is Dr. Alvarez at the clinic on Pine.",
            "I switched doctors to Dr. Okafor because Alvarez retired.",
            "Dr. Okafor's office is too far, so my new doctor is Dr. Lindqvist near work.",
        ),
        (
            "garden",
            "What is {name} growing in the garden?",
            "In the garden I'm growing tomatoes and basil this year.",
            "The tomatoes got blight, so I pulled them and the garden has peppers and squash now.",
            "The squash took over last year, this season the garden is all strawberries and herbs.",
        ),
    )
)


@dataclass(frozen=True)
class UpdateQuery:
    """One update thread's question: the evidence units of the first and the latest statement (and, for a fact
    changed twice, of the one between them)."""

    id: str
    text: str
    old: str  # evidence unit of the first statement
    new: str  # evidence unit of the latest statement
    template: str
    between: tuple[str, ...] = ()  # evidence units of the statements between the first and the latest


def update_thread(conv: Conversation, seed: int = 0, twice: bool = False) -> tuple[Conversation, list[UpdateQuery]]:
    """``conv`` with every template's two statements inserted (see the module docstring), and the questions.
    ``twice``: the ``updates_twice`` set, three statements each (the first in the first third of the dated sections,
    each next one at least :data:`MIN_GAP` sections after the one before); its own seed stream.

    A conversation with fewer than ``MIN_GAP + 2`` (twice: ``2 * MIN_GAP + 1``) dated sections or without a named
    speaker gets none."""
    rng = random.Random(f"{seed}/updates{'-twice' if twice else ''}/{conv.id}")
    dated = sorted((t for t in conv.turns if t.timestamp is not None), key=lambda t: (t.timestamp, t.index))
    speakers = sorted({s.name for t in conv.turns for s in t.sources if s.name})
    if len(dated) < (2 * MIN_GAP + 1 if twice else MIN_GAP + 2) or not speakers:
        return conv, []
    inserts: dict[int, list[tuple[str, str, str]]] = {}  # section -> (speaker, text, unit)
    queries: list[UpdateQuery] = []
    half = max(1, len(dated) // 2)
    third = max(1, min(len(dated) // 3, len(dated) - 2 * MIN_GAP))
    for n, tpl in enumerate(UPDATE_TEMPLATES):
        who = rng.choice(speakers)
        question = tpl.question.format(name=who)
        if twice:
            a = rng.randrange(third)
            b = rng.randrange(a + MIN_GAP, len(dated) - MIN_GAP)
            c = rng.randrange(b + MIN_GAP, len(dated))
            said = (f"U{n}:old", f"U{n}:new", f"U{n}:again")
            for section, text, unit in zip((a, b, c), (tpl.old, tpl.new, tpl.again), said, strict=True):
                inserts.setdefault(dated[section].index, []).append((who, text, unit))
            queries.append(UpdateQuery(f"{conv.id}/w{n}", question, said[0], said[2], tpl.id, (said[1],)))
            continue
        a = rng.randrange(half)
        b = rng.randrange(a + MIN_GAP, len(dated))
        old_unit, new_unit = f"U{n}:old", f"U{n}:new"
        inserts.setdefault(dated[a].index, []).append((who, tpl.old, old_unit))
        inserts.setdefault(dated[b].index, []).append((who, tpl.new, new_unit))
        queries.append(UpdateQuery(f"{conv.id}/u{n}", question, old_unit, new_unit, tpl.id))
    turns: list[Turn] = []
    units: dict[tuple[int, int], str] = {}
    for t in conv.turns:
        sources = [(s, conv.unit_of(t.index, s.ordinal)) for s in t.sources]
        for who, text, unit in inserts.get(t.index, []):
            at = rng.randrange(len(sources) + 1)
            sources.insert(at, (Source(kind="user", label=who, text=text, ordinal=0, name=who), unit))
        placed = []
        for j, (s, unit) in enumerate(sources):
            placed.append(replace(s, ordinal=j))
            units[(t.index, j)] = unit
        turns.append(replace(t, sources=tuple(placed)))
    return replace(conv, id=conv.id, turns=turns, units=units, facts=[], questions=[]), queries


def score_update(ix: Any, groups: Sequence[Any], q: UpdateQuery, k: int) -> dict[str, float]:
    """``latest_first``, ``latest_top1``, ``first_top1``, ``both_kept`` and ``recall`` of one update question (see the
    module docstring); ``groups``: the retrieval's ranked groups, the best one scored (its top hit scores highest).
    For a fact changed twice the latest statement must also rank above the one between (when that is in the group)."""
    from .scoring import best_group

    g = best_group(groups)
    units = [] if g is None else [ix.piece_units[int(i)] for i in g.items[:k]]
    old = next((r for r, u in enumerate(units) if q.old in u), None)
    new = next((r for r, u in enumerate(units) if q.new in u), None)
    earlier = [r for r, u in enumerate(units) if u & {q.old, *q.between}]
    return {
        "latest_first": 1.0 if new is not None and all(new < r for r in earlier) else 0.0,
        "latest_top1": 1.0 if new == 0 else 0.0,
        "first_top1": 1.0 if old == 0 else 0.0,
        "both_kept": 1.0 if new is not None and old is not None else 0.0,
        "recall": ((old is not None) + (new is not None)) / 2.0,
    }


def run_updates(
    conversations: Sequence[Conversation],
    embedder: Any,
    representations: Sequence[str],
    *,
    k: int = 5,
    seed: int = 0,
    limit: int | None = None,
    twice: bool = False,
    **index_options: Any,
) -> list[dict[str, Any]]:
    """The ``updates`` set (``twice``: ``updates_twice``) of every conversation under every representation that ranks
    pieces: per-query rows (``query_set`` the set's name) for :func:`updates_table` and
    :func:`.ranking.ranking_comparison`.
    ``index_options``: the run's :class:`~.index.ConversationIndex` settings (piece bytes, weight, fusion)."""
    from ..embedders.fitting import embed_fitting
    from ..query.vectors import query_texts
    from .index import ConversationIndex
    from .representations import THREAD_REPRESENTATIONS

    name = "updates_twice" if twice else "updates"
    rows: list[dict[str, Any]] = []
    for conv in conversations:
        changed, queries = update_thread(conv, seed, twice=twice)
        queries = queries[:limit] if limit else queries
        if not queries:
            continue
        ix = ConversationIndex(changed, embedder, k=k, **index_options)
        texts = [t for q in queries for t in (*query_texts(q.text)[0], query_texts(q.text)[1])]
        embed_fitting(ix.emb, list(dict.fromkeys(t for t in texts if t)))
        for rep in representations:
            fn = THREAD_REPRESENTATIONS[rep]
            for q in queries:
                ret = fn(ix, q.text)
                if ret.level != "pieces":
                    break
                row = {"conversation": conv.id, "representation": rep, "query_set": name, "query_id": q.id}
                rows.append({**row, "template": q.template, **score_update(ix, ret.groups, q, k)})
        ix.close()
    return rows


def updates_table(per_query: Sequence[dict[str, Any]], query_set: str = "updates") -> str:
    """The ``updates`` (or ``updates_twice``) rows per representation: the share of update threads whose latest
    statement ranks above the earlier ones, is the top hit, whose first statement is the top hit, and whose latest
    statement sits in the group beside the first."""
    from .metrics import mean
    from .report import markdown_table, pct

    reps = list(dict.fromkeys(r["representation"] for r in per_query if r["query_set"] == query_set))
    body = []
    for rep in reps:
        rows = [r for r in per_query if r["query_set"] == query_set and r["representation"] == rep]
        body.append(
            [
                rep,
                pct(mean(r["latest_first"] for r in rows)),
                pct(mean(r["latest_top1"] for r in rows)),
                pct(mean(r["first_top1"] for r in rows)),
                pct(mean(r["both_kept"] for r in rows)),
                len(rows),
            ]
        )
    headers = [
        "Representation",
        "Latest above the earlier",
        "Latest on top",
        "First statement on top",
        "First and latest in the group",
        "n",
    ]
    return markdown_table(headers, body, ["l", "r", "r", "r", "r", "r"])
