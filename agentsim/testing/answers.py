"""Ready-made answer functions for ``FunctionModel`` and ``OpenAITestServer``.

``scripted_answer`` answers as the offline scripted model does (typed survey answers too,
from the request's ``response_format``); ``in_turn(*replies)`` gives scripted replies one
request after another. Two wrappers make any answer function behave as real models do:

- ``calls_as_text(answer, form)``: the tool calls it returns are written in the answer's
  text instead, as models served without a tool-call parser write them (``FORMS``);
- ``with_reasoning(answer, where)``: its answers carry reasoning, as reasoning models send
  it: in ``Completion.reasoning`` (the test server sends it as ``reasoning_content``, or
  ``reasoning`` with ``reasoning_field="reasoning"``) or in a ``<think>`` block of the text.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import json
import threading
from typing import Literal

from agentsim.llm.base import ANSWER_FORMAT, Completion, ToolCall
from agentsim.llm.scripted import ScriptedModel
from agentsim.testing.function_model import (
    AnswerFunction,
    ChatRequest,
    Reply,
    as_completion,
    echo_answer,
)

__all__ = [
    "FORMS",
    "calls_as_text",
    "echo_answer",
    "in_turn",
    "scripted_answer",
    "with_reasoning",
]

_SCRIPTED = ScriptedModel()

Form = Literal["json_fence", "bare", "tool_call", "function", "list"]
FORMS: tuple[Form, ...] = ("json_fence", "bare", "tool_call", "function", "list")
"""The ways ``calls_as_text`` writes calls: a ```` ```json ```` block, bare JSON with
``name`` and ``parameters``, ``<tool_call>`` tags (Qwen, Hermes), ``<function=name>`` tags
(Llama), one JSON list of calls."""


async def scripted_answer(request: ChatRequest) -> Completion:
    """What the offline scripted model answers: it activates skills, runs their scripts
    and finishes, so a step takes several calls, as with a real model; a request with a
    typed answer's ``response_format`` gets a valid value of its schema."""
    token = ANSWER_FORMAT.set(request.answer_format)
    try:
        return await _SCRIPTED.complete(request.messages, request.tools, seed=request.seed)
    finally:
        ANSWER_FORMAT.reset(token)


def in_turn(*replies: Reply, then: AnswerFunction = echo_answer) -> AnswerFunction:
    """An answer function that gives ``replies`` to the requests one after another (in
    the order they arrive), then answers with ``then``."""
    queue = collections.deque(replies)
    lock = threading.Lock()

    async def next_reply(request: ChatRequest) -> Completion:
        with lock:
            reply = queue.popleft() if queue else None
        if reply is None:
            return await _completion(then, request)
        return as_completion(reply, request)

    return next_reply


def calls_as_text(answer: AnswerFunction, form: Form = "json_fence") -> AnswerFunction:
    """``answer``, with the tool calls of its answers written in their text in ``form``
    (with a line of prose before them) and no ``tool_calls``."""
    if form not in FORMS:
        raise ValueError(f"unknown form {form!r}; choose one of {', '.join(FORMS)}")

    async def written(request: ChatRequest) -> Completion:
        completion = await _completion(answer, request)
        if not completion.tool_calls:
            return completion
        text = "I will do this now.\n" + _write(completion.tool_calls, form)
        return dataclasses.replace(completion, content=text, tool_calls=(), finish_reason="stop")

    return written


def with_reasoning(
    answer: AnswerFunction,
    where: Literal["field", "think"] = "field",
    *,
    thought: str = "THOUGHT: weighing the options before I act",
) -> AnswerFunction:
    """``answer``, with ``thought`` as the reasoning of each of its answers: in the
    completion's ``reasoning`` (``where="field"``) or in a ``<think>`` block that opens its
    text (``where="think"``)."""

    async def reasoned(request: ChatRequest) -> Completion:
        completion = await _completion(answer, request)
        if where == "field":
            return dataclasses.replace(completion, reasoning=thought)
        content = f"<think>\n{thought}\n</think>\n\n{completion.content or ''}"
        return dataclasses.replace(completion, content=content)

    return reasoned


async def _completion(answer: AnswerFunction, request: ChatRequest) -> Completion:
    reply: Reply | object = answer(request)
    if inspect.isawaitable(reply):
        reply = await reply
    return as_completion(reply, request)  # type: ignore[arg-type]


def _write(calls: tuple[ToolCall, ...], form: Form) -> str:
    def obj(c: ToolCall, key: str = "arguments") -> dict[str, object]:
        return {"name": c.name, key: json.loads(c.arguments or "{}")}

    if form == "json_fence":
        return "\n".join(f"```json\n{json.dumps(obj(c))}\n```" for c in calls)
    if form == "bare":
        return "\n".join(json.dumps(obj(c, "parameters")) for c in calls)
    if form == "tool_call":
        return "\n".join(f"<tool_call>\n{json.dumps(obj(c))}\n</tool_call>" for c in calls)
    if form == "function":
        return "\n".join(f"<function={c.name}>{c.arguments}</function>" for c in calls)
    return json.dumps([obj(c) for c in calls])
