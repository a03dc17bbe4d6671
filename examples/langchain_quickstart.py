"""LangChain quickstart: memory of a chat thread → grouped context → prompt → chat model.

Run: python examples/langchain_quickstart.py
(from a clone, after ``pip install -e ".[local]"``; no API key, the model is fake)

The retriever splits the new message into parts; each part gets its own group of memories, and
``render_groups`` puts each group under its part in the prompt.
"""

# ruff: noqa: T201  (an example: it prints)
from __future__ import annotations

import tempfile

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough

from langchain_ctxret import ContextualRetriever, render_groups

THREAD = [
    HumanMessage(
        "Please book me a flight from Berlin to Lisbon for October 20.",
        additional_kwargs={"timestamp": "2026-10-16T14:02:00"},
    ),
    AIMessage(
        "",
        tool_calls=[
            {"name": "book_flight", "args": {"to": "LIS", "date": "2026-10-20"}, "id": "call_1"}
        ],
    ),
    ToolMessage('{"booking": "TP 541", "departs": "09:40"}', tool_call_id="call_1"),
    AIMessage("Booked TAP flight TP 541 to Lisbon, departing at 09:40 on October 20."),
    HumanMessage(
        "My dog Biscuit needs his vaccinations at the vet.",
        additional_kwargs={"timestamp": "2026-10-17T09:15:00"},
    ),
    AIMessage("Biscuit's vet appointment is on Thursday at 4 PM at the Green Paws clinic."),
]


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        retriever = ContextualRetriever.from_path(folder, k=2, thread_id="user-42")
        print(retriever.add_messages(THREAD, thread_id="user-42"))

        prompt = ChatPromptTemplate.from_messages(
            [
                (
                    "system",
                    "Answer using these memories, grouped by the part of the question they answer."
                    "\n\n{memories}",
                ),
                ("human", "{question}"),
            ]
        )
        setup = {"memories": retriever | render_groups, "question": RunnablePassthrough()}
        model = FakeListChatModel(
            responses=["Your flight leaves at 09:40; Biscuit's vet visit is Thursday at 4 PM."]
        )

        question = (
            "When does my flight to Lisbon leave? What time is the vet appointment for my dog?"
        )
        prompt_value = (setup | prompt).invoke(question)
        print("---- prompt ----")
        print(prompt_value.to_string())
        print("---- answer ----")
        print(
            model.invoke(prompt_value).content
        )  # in an app: (setup | prompt | model).invoke(question)


if __name__ == "__main__":
    main()
