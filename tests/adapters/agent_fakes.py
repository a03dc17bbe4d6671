"""LangChain's own fake chat model, as ``create_agent`` needs it in tests: scripted answers, tools bound, inputs kept.

``GenericFakeChatModel`` answers from a list of messages (tool calls included) but has no ``bind_tools``, which
``create_agent`` calls when the agent has tools; :class:`ScriptedChatModel` adds it (the tools change nothing: the
script decides) and keeps every input it was called with, so a test can read what the model was given.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from pydantic import Field


class ScriptedChatModel(GenericFakeChatModel):
    """``GenericFakeChatModel`` with ``bind_tools`` and a record of its inputs (``inputs``: one list per call)."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.inputs.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)

    def system_texts(self) -> list[str]:
        """The system message each call was given ("" when none)."""
        out = []
        for call in self.inputs:
            system = [m for m in call if m.type == "system"]
            out.append(system[0].text if system else "")
        return out


def scripted(*answers: AIMessage | str) -> ScriptedChatModel:
    """A model answering ``answers`` in order."""
    return ScriptedChatModel(messages=iter([a if isinstance(a, AIMessage) else AIMessage(a) for a in answers]))
