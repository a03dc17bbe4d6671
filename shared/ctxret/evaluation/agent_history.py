"""Realistic agent histories: one user living with an assistant over weeks, with facts that change.

LoCoMo's threads are two people talking; an agent's memory is a user and an assistant. Three histories written for
this harness (not taken from any data set), each a user's conversations with an assistant over three months, one
conversation a session, in the words people use:

* **facts that change** as people state changes: a job (an offer weighed, then another job taken), a city (a move
  planned, then changed), a plan (a race, a trip, a wedding date); the later statement is worded unlike the first
  and unlike the question ("I accepted a job at Globex", against "I work as a data analyst at Acme Corp" and "Where
  do I work now?"), and the assistant's replies echo both, as assistants do;
* **facts that never change** (a pet's name, an allergy), asked too: a rule that puts later statements first must
  not bury them;
* **the agent's own answer, once wrong**: in a later conversation the user asks one of the questions and the
  assistant answers with the stale value ("You work at Acme Corp"); the question is asked again at the end.

Each history is written one ``add_messages`` call per conversation (what the agent middleware does), every message
with its conversation's time, and each question asked at the end (``now`` after the last conversation), with the
product's defaults. A question names its current value(s) and its earlier one(s): what a model reads first decides
what it answers, so the score is which value the group shows **first** (:func:`score_question`).

:data:`HISTORIES` ``[0]`` ("maya") is the development history (the rule was chosen on it); ``[1]`` and ``[2]`` were
written before any rule was run on them and are held out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

__all__ = ["HISTORIES", "AgentHistory", "HistoryQuestion", "history_questions", "run_histories", "score_question"]


@dataclass(frozen=True)
class HistoryQuestion:
    """A question asked at the end of a history: the values that answer it now (``current``) and the ones that
    answered it before (``stale``; empty for a fact that never changed). Values are matched case-insensitively as
    substrings of a hit's text."""

    text: str
    current: tuple[str, ...]
    stale: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.stale)


@dataclass(frozen=True)
class AgentHistory:
    """One user's conversations with an assistant (``sessions``: ``(time, messages)`` in time order, messages as
    OpenAI chat dicts without times) and the questions asked after them at ``asked``."""

    name: str
    sessions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    questions: tuple[HistoryQuestion, ...]
    asked: str
    #: The question the assistant once answered with a stale value, and that wrong answer's text.
    wrong_answer: tuple[str, str] | None = None
    held_out: bool = True
    tags: tuple[str, ...] = field(default=())

    def messages(self) -> list[list[dict[str, Any]]]:
        """Each conversation's messages as written: role, content, the conversation's time, an id."""
        out = []
        for s, (when, turns) in enumerate(self.sessions):
            out.append(
                [
                    {"role": role, "content": text, "timestamp": when, "id": f"{self.name}/{s}/{i}"}
                    for i, (role, text) in enumerate(turns)
                ]
            )
        return out

    @property
    def now(self) -> datetime:
        return datetime.fromisoformat(self.asked)


U, A = "user", "assistant"

MAYA = AgentHistory(
    name="maya",
    held_out=False,
    asked="2026-06-10T09:00:00",
    wrong_answer=("Remind me, where do I work now?", "You work at Acme Corp as a data analyst."),
    sessions=(
        (
            "2026-03-02T19:05:00",
            (
                (
                    U,
                    "Hi! I'm setting up this assistant to help me stay organised. Quick background: I work as a data "
                    "analyst at Acme Corp, mostly building dashboards for the sales team.",
                ),
                (
                    A,
                    "Nice to meet you! A data analyst at Acme Corp, building sales dashboards: got it. What would you "
                    "like help organising first?",
                ),
                (
                    U,
                    "Mainly my running and some cooking. I also have a golden retriever called Biscuit who needs two "
                    "walks a day, so my evenings fill up fast.",
                ),
                (A, "Understood. I'll keep Biscuit's walks in mind whenever we plan your week."),
            ),
        ),
        (
            "2026-03-09T18:40:00",
            (
                (
                    U,
                    "Can you suggest a quick dinner with chickpeas? I'm allergic to peanuts, so no satay sauce please.",
                ),
                (
                    A,
                    "Sure: a chickpea and spinach curry takes about 25 minutes. Fry an onion with garlic and ginger, "
                    "add curry paste, a tin of tomatoes and the chickpeas, then wilt in the spinach. No nuts anywhere.",
                ),
                (U, "Perfect, that's tonight sorted."),
                (A, "Enjoy! Serve it with rice or warm naan."),
            ),
        ),
        (
            "2026-03-16T20:10:00",
            (
                (U, "Big news: my partner and I are planning to move to Bristol this summer. Her family lives there."),
                (A, "How exciting! Bristol is a lovely city. Do you want a moving checklist?"),
                (U, "Yes please, later. We're thinking of renting somewhere near Clifton."),
                (A, "Clifton is beautiful. I'll draft the checklist when you're ready."),
            ),
        ),
        (
            "2026-03-23T07:30:00",
            (
                (U, "I signed up for the Bath half marathon on April 26. Can you make me a training plan?"),
                (
                    A,
                    "Here's a five-week plan: three easy runs a week, one long run building from 12 to 19 km, and a "
                    "taper in the final week.",
                ),
                (U, "Great, I'll start tomorrow."),
            ),
        ),
        (
            "2026-04-02T12:15:00",
            (
                (
                    U,
                    "I got an offer from Northwind Traders for a senior analyst role. The pay is better but the "
                    "commute would be over an hour.",
                ),
                (A, "Congratulations on the Northwind offer! Want to weigh the pros and cons together?"),
                (U, "Maybe next week, I haven't decided anything yet."),
            ),
        ),
        (
            "2026-04-08T21:00:00",
            (
                (U, "How do I pivot a table in pandas so each month becomes a column?"),
                (
                    A,
                    "Use df.pivot_table(index='region', columns='month', values='revenue', aggfunc='sum'); add "
                    "fill_value=0 to replace missing months.",
                ),
                (U, "That worked, thanks!"),
            ),
        ),
        (
            "2026-04-14T08:20:00",
            (
                (
                    U,
                    "Ugh, I hurt my knee on a long run. I've pulled out of the half marathon and will do the Leith "
                    "10K in June instead.",
                ),
                (
                    A,
                    "Sorry about your knee. The 10K is a sensible goal; let's cut the plan back to three short runs a "
                    "week and see a physio if it still hurts.",
                ),
            ),
        ),
        (
            "2026-04-20T19:45:00",
            (
                (
                    U,
                    "Change of plans: we're not going to Bristol after all. My partner got a post at the University of "
                    "Edinburgh, so we're relocating to Edinburgh in July.",
                ),
                (A, "That's a big change! Edinburgh it is, then. I'll rewrite the moving checklist for Scotland."),
                (U, "Thanks. She's thrilled, I'm a bit nervous."),
            ),
        ),
        (
            "2026-04-28T17:30:00",
            (
                (
                    U,
                    "I turned down Northwind in the end. Then Globex called me back and I accepted a job at Globex as "
                    "a lead data scientist! I start on May 18.",
                ),
                (A, "Congratulations! Lead data scientist at Globex is a great step up."),
                (U, "They let me work from their Edinburgh office too, which is perfect."),
            ),
        ),
        (
            "2026-05-05T09:10:00",
            (
                (U, "Remind me, where do I work now?"),
                (A, "You work at Acme Corp as a data analyst."),
                (U, "Ok. Also, what's a good stretch for a sore knee?"),
                (A, "Try gentle quad stretches and straight-leg raises, ten of each, twice a day."),
            ),
        ),
        (
            "2026-05-12T18:00:00",
            (
                (U, "Which human foods are safe for dogs? Biscuit keeps begging at the table."),
                (
                    A,
                    "Plain cooked chicken, carrots, apple slices without seeds and plain rice are fine. Avoid grapes, "
                    "chocolate, onions and anything with xylitol.",
                ),
            ),
        ),
        (
            "2026-05-22T20:30:00",
            (
                (
                    U,
                    "First week done! The team is lovely and my manager, Priya, already gave me the churn model to "
                    "own.",
                ),
                (A, "That's a great start. Owning the churn model in your first week says a lot."),
            ),
        ),
        (
            "2026-06-01T10:00:00",
            (
                (
                    U,
                    "We found a flat in Leith with a tiny garden for Biscuit. How do I register with a GP in Scotland?",
                ),
                (
                    A,
                    "Find a practice whose catchment covers your address, fill in their registration form (GMS1) "
                    "and bring proof of address. Congratulations on the flat!",
                ),
            ),
        ),
    ),
    questions=(
        HistoryQuestion("Where do I work now?", ("Globex",), ("Acme", "Northwind")),
        HistoryQuestion("Which city did I move to?", ("Edinburgh",), ("Bristol",)),
        HistoryQuestion(
            "What's my job title these days?", ("lead data scientist",), ("data analyst", "senior analyst")
        ),
        HistoryQuestion("What race am I training for?", ("10K",), ("half marathon",)),
        HistoryQuestion("What's my dog called?", ("Biscuit",)),
        HistoryQuestion("What food am I allergic to?", ("peanut",)),
    ),
)

SAM = AgentHistory(
    name="sam",
    asked="2026-09-20T08:00:00",
    wrong_answer=("What car am I driving at the moment?", "You drive a silver Honda Civic."),
    sessions=(
        (
            "2026-06-03T21:15:00",
            (
                (
                    U,
                    "Hey. I'm a night-shift nurse at St Mary's Hospital in Denver, so I keep odd hours. Can you help "
                    "me "
                    "plan meals I can prep on my days off?",
                ),
                (A, "Of course! Batch-cooking on your days off works well with night shifts. Any foods you avoid?"),
                (U, "I'm vegetarian, and my cat Miso will steal anything with cheese, so I keep it covered."),
                (
                    A,
                    "Noted: vegetarian, and cheese under lock and key because of Miso. Here's a lentil chili, a tray "
                    "of roasted vegetables and overnight oats for the week.",
                ),
            ),
        ),
        (
            "2026-06-11T14:00:00",
            (
                (U, "My old Honda Civic is making a grinding noise when I brake. Is that urgent?"),
                (
                    A,
                    "Grinding usually means the brake pads are worn down to the metal. Get it checked this week; "
                    "driving on it can damage the rotors.",
                ),
                (U, "Ugh, that car is fifteen years old."),
            ),
        ),
        (
            "2026-06-19T10:30:00",
            (
                (
                    U,
                    "My partner and I are planning a trip to Japan in October, two weeks, mostly Kyoto and Osaka. "
                    "Can you suggest a rough itinerary?",
                ),
                (
                    A,
                    "Sounds wonderful! Days 1-5 in Kyoto for temples and Arashiyama, a day trip to Nara, then Osaka "
                    "for food and a side trip to Himeji.",
                ),
            ),
        ),
        (
            "2026-06-27T16:45:00",
            (
                (
                    U,
                    "Thinking about moving somewhere cheaper next year, maybe Austin. Rent in Denver is getting "
                    "ridiculous.",
                ),
                (
                    A,
                    "Austin has no state income tax and a big hospital market, though rents there have risen too. "
                    "Want me to compare nursing pay in both?",
                ),
                (U, "Yeah, sometime."),
            ),
        ),
        (
            "2026-07-06T07:50:00",
            (
                (U, "I've started going to 6 am yoga classes at the community centre before bed. Weird, I know."),
                (A, "Not weird for a night-shift worker at all! Gentle yoga can help you wind down before sleeping."),
            ),
        ),
        (
            "2026-07-15T19:20:00",
            (
                (
                    U,
                    "Well, the brakes were the last straw. I sold the Civic and bought a used Subaru Outback, dark "
                    "green, 40k miles.",
                ),
                (
                    A,
                    "Nice upgrade! An Outback will be great in the mountains. Remember to check when its timing belt "
                    "is due.",
                ),
            ),
        ),
        (
            "2026-07-24T13:10:00",
            (
                (U, "How long should I boil eggs for jammy yolks?"),
                (A, "Six and a half minutes from boiling, then straight into ice water."),
            ),
        ),
        (
            "2026-08-02T11:00:00",
            (
                (
                    U,
                    "Flights to Tokyo tripled in price, so we scrapped Japan. We booked ten days in Portugal instead: "
                    "Lisbon and Porto in October.",
                ),
                (A, "Portugal in October is lovely and much easier on the budget. Want a Lisbon and Porto plan?"),
                (U, "Yes, later this week."),
            ),
        ),
        (
            "2026-08-10T22:40:00",
            (
                (
                    U,
                    "Quick update on my life: I handed in my notice at St Mary's. I got hired by Riverside Clinic as "
                    "a day-shift practice nurse. No more nights!",
                ),
                (A, "That's fantastic news! Day shifts at Riverside Clinic will change your whole routine."),
            ),
        ),
        (
            "2026-08-18T09:30:00",
            (
                (U, "What car am I driving at the moment? I need it for an insurance form."),
                (A, "You drive a silver Honda Civic."),
                (U, "Thanks."),
            ),
        ),
        (
            "2026-08-25T18:15:00",
            (
                (U, "Now that I'm on days I switched to the evening spin class at 6 pm instead of morning yoga."),
                (A, "Spin after work is a good way to burn off the day. Keep some water and a snack handy."),
            ),
        ),
        (
            "2026-09-01T20:00:00",
            (
                (
                    U,
                    "Forget Austin. Riverside has a branch in Portland and they offered me a transfer, so we're "
                    "moving to Portland at the end of the month.",
                ),
                (A, "Portland! That's a big move. Do you want a packing timeline for the next four weeks?"),
                (U, "Please. Miso is going to hate the car ride."),
            ),
        ),
        (
            "2026-09-10T12:00:00",
            (
                (U, "Can you recommend a good vegetarian cookbook?"),
                (A, "Try 'Plenty' by Yotam Ottolenghi or 'The Moosewood Cookbook'. Both are vegetable-first."),
            ),
        ),
    ),
    questions=(
        HistoryQuestion("What car do I drive?", ("Subaru", "Outback"), ("Civic", "Honda")),
        HistoryQuestion("Where am I working these days?", ("Riverside",), ("St Mary",)),
        HistoryQuestion("Which city are we moving to?", ("Portland",), ("Austin",)),
        HistoryQuestion(
            "Where are we going on holiday in October?", ("Portugal", "Lisbon", "Porto"), ("Japan", "Kyoto")
        ),
        HistoryQuestion("What exercise class do I go to?", ("spin",), ("yoga",)),
        HistoryQuestion("What's my cat's name?", ("Miso",)),
        HistoryQuestion("What diet do I follow?", ("vegetarian",)),
    ),
)

LEO = AgentHistory(
    name="leo",
    asked="2026-12-15T18:00:00",
    wrong_answer=("When is my wedding again?", "Your wedding is on June 14 next year."),
    sessions=(
        (
            "2026-09-05T17:00:00",
            (
                (
                    U,
                    "Hello! I'm Leo. I'm a backend developer at Initech in Lyon and I'm trying to learn Spanish in my "
                    "spare time. Can you quiz me sometimes?",
                ),
                (
                    A,
                    "¡Hola, Leo! Happy to. A backend developer learning Spanish: we can mix in some tech vocabulary. "
                    "Shall we start with ten words a day?",
                ),
                (U, "Sounds good."),
            ),
        ),
        (
            "2026-09-12T20:20:00",
            (
                (
                    U,
                    "Claire and I set the date: our wedding will be on June 14 next year, in her grandparents' village "
                    "near Annecy.",
                ),
                (A, "Congratulations to you both! A June wedding near Annecy sounds magical."),
            ),
        ),
        (
            "2026-09-20T09:00:00",
            (
                (U, "What's the difference between a mutex and a semaphore?"),
                (
                    A,
                    "A mutex lets exactly one holder into a critical section and must be released by its owner; a "
                    "semaphore counts permits, so several holders can enter at once, and any thread may signal it.",
                ),
            ),
        ),
        (
            "2026-09-28T19:10:00",
            (
                (U, "Just so you know, shellfish makes me really sick, so leave it out of any recipes you suggest."),
                (A, "Got it: no shellfish in anything I suggest."),
            ),
        ),
        (
            "2026-10-06T21:30:00",
            (
                (U, "We're planning to relocate to Berlin next spring. Claire wants to be closer to her sister."),
                (A, "Berlin is a great city for developers. Want help with the visa and registration steps?"),
            ),
        ),
        (
            "2026-10-15T08:45:00",
            (
                (U, "My brother Hugo is visiting this weekend. Any ideas for a rainy Saturday in Lyon?"),
                (
                    A,
                    "Try the Musée des Confluences, a traboule walk in Vieux Lyon, and lunch at Les Halles Paul "
                    "Bocuse.",
                ),
            ),
        ),
        (
            "2026-10-24T18:00:00",
            (
                (
                    U,
                    "The village hall was double-booked, so we had to move the wedding. It's now on September 6 "
                    "next year, same place.",
                ),
                (A, "That's annoying, but September can be lovely in the Alps. I'll remember September 6."),
            ),
        ),
        (
            "2026-11-02T12:30:00",
            (
                (
                    U,
                    "I dropped Spanish. Claire's family speaks Italian, so I've switched to learning Italian on "
                    "Duolingo instead.",
                ),
                (A, "Bravo! Italian will come in handy at family dinners. Want me to quiz you in Italian now?"),
            ),
        ),
        (
            "2026-11-10T19:00:00",
            (
                (U, "When is my wedding again? I'm filling in a leave request."),
                (A, "Your wedding is on June 14 next year."),
                (U, "Thanks."),
            ),
        ),
        (
            "2026-11-18T17:40:00",
            (
                (
                    U,
                    "Big week: I signed a contract with Brightwave as a senior platform engineer. I leave Initech at "
                    "the end of December.",
                ),
                (A, "Congratulations, Leo! Senior platform engineer at Brightwave is a big step."),
            ),
        ),
        (
            "2026-11-26T21:00:00",
            (
                (
                    U,
                    "Brightwave is fully remote-friendly but their hub is in Amsterdam, so we dropped the Berlin idea. "
                    "We're moving to Amsterdam in March.",
                ),
                (
                    A,
                    "Amsterdam makes sense with the Brightwave hub there. Do you want a checklist for registering "
                    "with the gemeente?",
                ),
            ),
        ),
        (
            "2026-12-04T10:15:00",
            (
                (U, "Give me a recipe for a cosy winter soup."),
                (
                    A,
                    "A French onion soup: caramelise four onions slowly for 40 minutes, add stock and thyme, then top "
                    "with toasted bread and grated Gruyère. No shellfish, as promised.",
                ),
            ),
        ),
    ),
    questions=(
        HistoryQuestion("When is my wedding?", ("September 6",), ("June 14",)),
        HistoryQuestion("Which language am I learning?", ("Italian",), ("Spanish",)),
        HistoryQuestion("Which company am I joining?", ("Brightwave",), ("Initech",)),
        HistoryQuestion("What city will we live in next year?", ("Amsterdam",), ("Berlin",)),
        HistoryQuestion("What am I allergic to?", ("shellfish",)),
        HistoryQuestion("What's my brother's name?", ("Hugo",)),
    ),
)

#: The development history first, then the held-out ones.
HISTORIES: tuple[AgentHistory, ...] = (MAYA, SAM, LEO)


def _holds(text: str, values: Sequence[str]) -> bool:
    low = text.lower()
    return any(v.lower() in low for v in values)


def score_question(q: HistoryQuestion, hits: Sequence[Any]) -> dict[str, float]:
    """One question's scores from its group's hits (best first; each with ``text`` and ``metadata``):

    * ``current_first``: the first hit that names any value of the fact names a current one (a hit naming both, the
      change itself, counts as current); 0 when no hit names a value;
    * ``current_top1``: the top hit names a current value;
    * ``stale_first``: the first hit naming a value names only a stale one;
    * ``user_first``: the first hit naming a value was said by the user (not the assistant's echo or answer)."""
    first = next((h for h in hits if _holds(h.text, q.current + q.stale)), None)
    current = first is not None and _holds(first.text, q.current)
    said = (first.stored or {}).get("source_kind") if first is not None else None
    return {
        "current_first": float(current),
        "current_top1": float(bool(hits) and _holds(hits[0].text, q.current)),
        "stale_first": float(first is not None and not current),
        "user_first": float(said == "user"),
    }


def history_questions(h: AgentHistory) -> list[tuple[str, HistoryQuestion]]:
    """``h``'s questions with their ids, then the question the assistant once answered wrongly, asked again (scored
    on the fact it asks: its values are those of the history's first question)."""
    out = [(f"{h.name}/{i}", q) for i, q in enumerate(h.questions)]
    if h.wrong_answer is not None:
        out.append(
            (f"{h.name}/again", HistoryQuestion(h.wrong_answer[0], h.questions[0].current, h.questions[0].stale))
        )
    return out


def run_histories(
    embedder: Any,
    variants: Mapping[str, Mapping[str, Any]],
    histories: Sequence[AgentHistory] = HISTORIES,
    k: int = 5,
) -> list[dict[str, Any]]:
    """Each history written as an agent writes it (:class:`~ctxret.agent_memory.AgentMemory`, one ``write`` per
    conversation into one scope, in an in-memory index), each question searched in that scope at the history's end
    under each of ``variants`` (name -> search options; ``{}``: the defaults), ``k`` hits, no deadline (the stages all
    run). One row per (variant, question): ``representation`` (the variant), ``conversation`` (the history),
    ``query_id``, ``held_out``, ``changed``, :func:`score_question`'s scores and the group's ``top`` texts."""
    from ..agent_memory import AgentMemory
    from ..index import ContextualIndex

    rows: list[dict[str, Any]] = []
    for h in histories:
        index = ContextualIndex(in_memory=True, embedder=embedder)
        try:
            memory = AgentMemory(index, k=k, deadline_ms=None, background=False)
            for messages in h.messages():
                memory.write(messages, h.name)
            for qid, q in history_questions(h):
                for name, options in variants.items():
                    groups = [g for g in index.search(q.text, k=k, thread_id=h.name, now=h.now, **options) if g.hits]
                    hits = max(groups, key=lambda g: g.hits[0].score).hits if groups else ()
                    rows.append(
                        {
                            "representation": name,
                            "query_set": "histories",
                            "conversation": h.name,
                            "query_id": qid,
                            "question": q.text,
                            "held_out": h.held_out,
                            "changed": q.changed,
                            **score_question(q, hits),
                            "top": [f"{(x.stored or {}).get('source_kind', '?')}: {x.body}" for x in hits],
                        }
                    )
        finally:
            index.close()
    return rows
