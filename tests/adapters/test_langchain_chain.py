"""An LCEL chain: retriever → group renderer → ChatPromptTemplate → a fake chat model.

The prompt the model receives is captured with a callback handler and checked section by section:
one section per message part, headed by the part text, with that part's memories under it.
"""

from __future__ import annotations

import pytest
from ctxret.index import ContextualIndex
from ctxret.query.split import split_prompt_chunks
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from langchain_ctxret import ContextualRetriever, render_groups, render_groups_runnable

THREAD = [
    HumanMessage("Please book me a flight from Berlin to Lisbon for October 20."),
    AIMessage(
        "",
        tool_calls=[{"name": "book_flight", "args": {"to": "LIS", "date": "2026-10-20"}, "id": "call_1"}],
    ),
    ToolMessage('{"booking": "TP 541", "departs": "09:40"}', tool_call_id="call_1"),
    AIMessage("Booked TAP flight TP 541 to Lisbon, departing at 09:40 on October 20."),
    HumanMessage("My dog Biscuit needs his vaccinations at the vet."),
    AIMessage("Biscuit's vet appointment is on Thursday at 4 PM at the Green Paws clinic."),
    HumanMessage("I want to bake a chocolate birthday cake for Maya on Saturday."),
    AIMessage("Use 200 g of dark chocolate and 4 eggs, and bake it at 175 C for 35 minutes."),
]
#: Part text → a string that the part's best memory contains (and the other parts' best do not).
MESSAGE = (
    "When does my flight to Lisbon leave? What time is the vet appointment for my dog? "
    "How long do I bake the chocolate cake?"
)
EXPECTED_TOP = ["Lisbon", "Biscuit", "175 C"]
#: Part's best memory's words → the answer the part's section holds (the assistant's reply follows the user's request
#: at its own relevance, so it may come second, under the request).
ANSWERS = {"Lisbon": "09:40", "Biscuit": "Green Paws", "175 C": "35 minutes"}
OTHER = "What time is the vet appointment for my dog? How long do I bake the chocolate cake?"


class PromptCapture(BaseCallbackHandler):
    """Records the messages every chat model run received."""

    def __init__(self) -> None:
        self.prompts: list[list] = []

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.prompts.extend(messages)


@pytest.fixture(scope="module")
def retriever(tmp_path_factory, local_embedder) -> ContextualRetriever:
    index = ContextualIndex(
        tmp_path_factory.mktemp("lc-chain"), collection="lc-chain", embedder=local_embedder, lexical=False
    )
    r = ContextualRetriever(index=index, k=2, thread_id="t")
    r.add_messages(THREAD, thread_id="t")
    return r


def make_chain(retriever):
    prompt = ChatPromptTemplate.from_messages(
        [
            (
                "system",
                "Answer from these memories, grouped by the part of the question they answer.\n\n{memories}",
            ),
            ("human", "{question}"),
        ]
    )
    model = FakeListChatModel(responses=["ok"])
    chain = (
        {"memories": retriever | render_groups, "question": RunnablePassthrough()} | prompt | model | StrOutputParser()
    )
    return chain


def sections(system_text: str) -> list[tuple[str, str]]:
    """``[(part text, body)]`` of the rendered memories."""
    out = []
    for block in system_text.split("### Part ")[1:]:
        head, _, body = block.partition("\n")
        number, _, part = head.partition(": ")
        assert number == str(len(out) + 1)
        out.append((part, body.strip()))
    return out


def check_prompt(messages: list, question: str, expected_top: list[str]) -> None:
    system, human = messages
    assert human.content == question
    parts = split_prompt_chunks(question)
    found = sections(system.content)
    assert [p for p, _ in found] == parts  # one section per part, in order, headed by its text
    for (part, body), expected in zip(found, expected_top, strict=False):
        items = body.split("\n- ")
        assert 1 <= len(items) <= 2, f"k=2 per part, got {len(items)} under {part!r}"
        assert body.startswith("- [score ")
        assert expected in items[0], f"{part!r} should lead with {expected!r}, got {items[0]!r}"
        assert ANSWERS[expected] in body, f"{part!r} should hold {ANSWERS[expected]!r}, got {body!r}"
        for other in set(expected_top) - {expected}:
            assert other not in items[0]


def test_chain_invoke(retriever):
    assert len(split_prompt_chunks(MESSAGE)) == 3
    capture = PromptCapture()
    assert make_chain(retriever).invoke(MESSAGE, config={"callbacks": [capture]}) == "ok"
    assert len(capture.prompts) == 1
    check_prompt(capture.prompts[0], MESSAGE, EXPECTED_TOP)


def test_chain_batch(retriever):
    capture = PromptCapture()
    out = make_chain(retriever).batch([MESSAGE, OTHER], config={"callbacks": [capture]})
    assert out == ["ok", "ok"]
    assert len(capture.prompts) == 2
    by_question = {p[1].content: p for p in capture.prompts}
    check_prompt(by_question[MESSAGE], MESSAGE, EXPECTED_TOP)
    check_prompt(by_question[OTHER], OTHER, EXPECTED_TOP[1:])


async def test_chain_ainvoke(retriever):
    capture = PromptCapture()
    assert await make_chain(retriever).ainvoke(MESSAGE, config={"callbacks": [capture]}) == "ok"
    check_prompt(capture.prompts[0], MESSAGE, EXPECTED_TOP)


async def test_renderer_matches_between_sync_and_async(retriever):
    chain = retriever | render_groups_runnable(show_scores=False, heading="## {number}. {query}", dates=False)
    text = chain.invoke(MESSAGE)
    assert await chain.ainvoke(MESSAGE) == text
    assert text.startswith("## 1. When does my flight to Lisbon leave?\n- [Turn 1")
    assert text.count("\n## ") == 2 and "[score" not in text and "ago)" not in text
    with pytest.raises(TypeError):
        render_groups_runnable(no_such_option=True)
