"""HyDE per part: each query part is blended with the embedding of a hypothetical answer to it.

``search(message, hyde=fn)`` with ``fn(part) -> str`` (or a LangChain / LlamaIndex LLM, prompted
with :data:`HYDE_PROMPT`): every part gets its own hypothetical answer, and the part's query vector
(already blended with the whole message) becomes

    ``blend(part_vector, embed(answer), hyde_weight)`` = ``unit(w·unit(part) + (1 − w)·unit(answer))``

with ``hyde_weight`` = 0.5 by default (LlamaIndex's ``HyDEQueryTransform(include_original=True)``
averages the query and the answer the same way). An empty answer leaves the part's vector as it is.
The LLM calls of all parts run in parallel and start with the search, so they overlap the
embedding request and the dense and lexical stages (:mod:`.deadline`).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..blend import blend_with_context
from ..errors import CtxretError, InputError, callable_error
from ..ingest.views import acall_llm, call_llm, is_llm

__all__ = ["DEFAULT_HYDE_WEIGHT", "HYDE_PROMPT", "Hyde", "as_hyde", "blend_hyde", "llm_hyde"]

#: The part's share of its query vector against its hypothetical answer.
DEFAULT_HYDE_WEIGHT = 0.5

HYDE_PROMPT = """Write a short passage (two or three sentences) that would answer this message from a
user's earlier conversations or documents. Invent plausible specifics if you must; answer with the
passage only.

Message: {part}"""

#: ``fn(part) -> hypothetical answer`` (``""``: none for this part).
Hyde = Callable[[str], str]


class llm_hyde:  # noqa: N801 (used like a function)
    """A HyDE function from a LangChain LLM / chat model or a LlamaIndex LLM: one call per part.

    Has an async path (``ainvoke`` / ``acomplete``) that :meth:`ContextualIndex.asearch` awaits, so
    a deadline cancels the request itself.
    """

    def __init__(self, llm: Any, *, prompt: str = HYDE_PROMPT) -> None:
        if not is_llm(llm):
            raise InputError(f"llm_hyde needs a LangChain or LlamaIndex LLM, got {type(llm).__name__}")
        self.llm = llm
        self.prompt = prompt

    def __call__(self, part: str) -> str:
        return call_llm(self.llm, self.prompt.format(part=part))

    async def acall(self, part: str) -> str:
        return await acall_llm(self.llm, self.prompt.format(part=part))

    def __repr__(self) -> str:
        return f"llm_hyde({type(self.llm).__name__})"


def as_hyde(value: Any) -> Hyde | None:
    """What a ``hyde=`` option becomes: ``None``, an LLM wrapped by :class:`llm_hyde`, or the callable itself."""
    if value is None or isinstance(value, llm_hyde):
        return value
    if is_llm(value):  # before callable(): LangChain LLMs are callable too
        return llm_hyde(value)
    if callable(value):
        return value
    raise InputError(f"hyde must be fn(part) -> str, a LangChain / LlamaIndex LLM or None, got {type(value).__name__}")


def hyde_answer(hyde: Hyde, part: str) -> str:
    """Call ``hyde`` for one part and check the answer (a string)."""
    try:
        answer = hyde(part)
    except CtxretError:
        raise
    except Exception as e:
        raise callable_error("hyde callable", hyde, e) from e
    if inspect.isawaitable(answer):
        raise InputError("hyde returned an awaitable in a sync search; use asearch, or a plain function")
    return _checked(answer)


async def ahyde_answer(hyde: Hyde, part: str) -> str:
    """Async :func:`hyde_answer`: ``acall`` of :class:`llm_hyde`, an ``async def`` function, else a thread."""
    try:
        acall = getattr(hyde, "acall", None)
        if acall is not None:
            return _checked(await acall(part))
        if inspect.iscoroutinefunction(hyde):
            return _checked(await hyde(part))
        answer = await asyncio.to_thread(hyde, part)
        if inspect.isawaitable(answer):
            answer = await answer
    except CtxretError:
        raise
    except Exception as e:
        raise callable_error("hyde callable", hyde, e) from e
    return _checked(answer)


def _checked(answer: Any) -> str:
    if answer is None:
        return ""
    if not isinstance(answer, str):
        raise InputError(f"hyde must return the hypothetical answer as a str, got {type(answer).__name__}")
    return " ".join(answer.split())


def blend_hyde(qvecs: np.ndarray, answers: Sequence[str], answer_vecs: np.ndarray, weight: float) -> np.ndarray:
    """Each part's query vector blended with its answer's vector (``weight`` = the part's share);
    a part without an answer keeps its vector. ``answer_vecs`` holds one row per non-empty answer, in order."""
    out = np.array(qvecs, dtype=np.float32, copy=True)
    row = 0
    for i, answer in enumerate(answers):
        if answer:
            out[i] = blend_with_context(qvecs[i], answer_vecs[row], weight)
            row += 1
    return out
