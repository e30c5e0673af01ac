"""``FunctionModel``: a chat model that answers from a Python function, for unit tests.

No sockets, no key, no randomness: the function sees the request and says what the model
answers. It may return a string (a plain text answer), one tool call, a list of tool calls,
or a full ``Completion``; it may be ``async``::

    from agentsim.testing import ChatRequest, FunctionModel, tool_call

    def brain(request: ChatRequest):
        if not request.calls:
            return tool_call("activate_skill", name="daily-guidance")
        return tool_call("finish", action="planned the day")

    model = FunctionModel(brain)
    ...
    assert model.requests[0].tool_names >= {"activate_skill", "finish"}

Token usage is counted as the test server counts it (``usage_for``), so that sums can be
checked by hand. The same answer functions drive ``OpenAITestServer``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentsim.llm.base import (
    ANSWER_FORMAT,
    ChatModel,
    Completion,
    Message,
    ToolCall,
    ToolSchema,
    Usage,
)

__all__ = [
    "AnswerFunction",
    "ChatRequest",
    "FunctionModel",
    "Reply",
    "as_completion",
    "echo_answer",
    "tool_call",
    "usage_for",
]

Reply = Completion | str | ToolCall | Sequence[ToolCall]
"""What an answer function may return."""

AnswerFunction = Callable[["ChatRequest"], Reply | Awaitable[Reply]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatRequest:
    """One chat request, with the views an answer function usually needs."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSchema, ...] = ()
    seed: int = 0
    model: str = ""
    # The request's ``response_format`` (a typed survey answer's form, as the OpenAI
    # backend sends it: ``{"type": "json_schema", "json_schema": {...}}``), else None.
    response_format: Mapping[str, Any] | None = None

    @property
    def answer_format(self) -> Mapping[str, Any] | None:
        """The ``json_schema`` object of a typed answer's ``response_format`` (``name``,
        ``schema``, ``strict``), else None."""
        form = self.response_format
        if not isinstance(form, Mapping) or form.get("type") != "json_schema":
            return None
        inner = form.get("json_schema")
        return inner if isinstance(inner, Mapping) else None

    @property
    def tool_names(self) -> frozenset[str]:
        """The names of the tools offered."""
        names = (t.get("function", t).get("name") for t in self.tools)
        return frozenset(n for n in names if isinstance(n, str))

    @property
    def last_user(self) -> str:
        """The text of the last user message ("" if there is none)."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return _text(message)
        return ""

    @property
    def system(self) -> str:
        """The text of the first system message ("" if there is none)."""
        for message in self.messages:
            if message.get("role") == "system":
                return _text(message)
        return ""

    @property
    def agent(self) -> str:
        """The agent's own part of the prompt, which opens its first user message: active
        skill bodies, ``<active_skills>``, ``<persona>``, ``<profile>`` ("" if none)."""
        for message in self.messages:
            if message.get("role") == "user":
                text = _text(message)
                end = text.find("<observation>")
                return text[:end] if end > 0 else ""
        return ""

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the model made since the last user message (this step's turns)."""
        found: list[ToolCall] = []
        for message in self.messages:
            if message.get("role") == "user":
                found.clear()
            for raw in message.get("tool_calls") or ():
                found.append(_as_tool_call(raw))
        return tuple(found)

    @property
    def results(self) -> tuple[str, ...]:
        """The tool results since the last user message, in order."""
        found: list[str] = []
        for message in self.messages:
            if message.get("role") == "user":
                found.clear()
            elif message.get("role") == "tool":
                found.append(_text(message))
        return tuple(found)


def tool_call(name: str, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any) -> ToolCall:
    """A tool call to return from an answer function: ``tool_call("finish", action="x")``
    or ``tool_call("ask_env", {"module": "city", ...})``. Its id is filled in for you."""
    args = {**(arguments or {}), **kwargs}
    return ToolCall(id="", name=name, arguments=json.dumps(args, ensure_ascii=False))


def usage_for(messages: Sequence[Message], answer: str) -> Usage:
    """Token usage as the fakes count it: ~4 characters per token of the JSON of the
    messages, and of the answer (at least one)."""
    prompt = len(json.dumps(list(messages), ensure_ascii=False, default=_plain)) // 4
    return Usage(prompt_tokens=prompt, completion_tokens=max(1, len(answer) // 4))


def as_completion(reply: Reply, request: ChatRequest, *, model: str = "function") -> Completion:
    """What an answer function returned, as a ``Completion`` (usage by ``usage_for``, tool
    calls without an id numbered ``call_<turn>_<i>``)."""
    if isinstance(reply, Completion):
        return reply
    if isinstance(reply, str):
        usage = usage_for(request.messages, reply)
        return Completion(content=reply, usage=usage, finish_reason="stop", model=model)
    items = [reply] if isinstance(reply, ToolCall) else _sequence(reply)
    calls = tuple(c for c in items if isinstance(c, ToolCall))
    if not calls or len(calls) != len(items):
        raise TypeError(
            f"an answer function returned {reply!r}; return a str, a tool call "
            "(agentsim.testing.tool_call), a list of them, or a Completion"
        )
    turn = len(request.calls)
    calls = tuple(
        c if c.id else dataclasses.replace(c, id=f"call_{turn}_{i}") for i, c in enumerate(calls)
    )
    usage = usage_for(request.messages, "".join(c.name + c.arguments for c in calls))
    return Completion(tool_calls=calls, usage=usage, finish_reason="tool_calls", model=model)


def echo_answer(request: ChatRequest) -> str:
    """A plain answer repeating the start of the last user message: one call per step."""
    return f"echo: {request.last_user[:200] or '(no user message)'}"


class FunctionModel(ChatModel):
    """A ``ChatModel`` whose answers come from ``fn(request)``.

    ``requests`` holds every ``ChatRequest`` seen, in order (for assertions). Safe to share
    between concurrently stepping agents, as a real model is.
    """

    def __init__(self, fn: AnswerFunction, *, name: str = "function") -> None:
        if not callable(fn):
            raise TypeError(
                f"FunctionModel needs a function of a ChatRequest, got {fn!r}; "
                "pass e.g. FunctionModel(lambda request: 'hello')"
            )
        self.fn = fn
        self.model = name
        self.requests: list[ChatRequest] = []
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FunctionModel({getattr(self.fn, '__name__', self.fn)!r})"

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion:
        form = ANSWER_FORMAT.get()
        request = ChatRequest(
            messages=tuple(messages),
            tools=tuple(tools),
            seed=seed,
            response_format=None if form is None else {"type": "json_schema", "json_schema": form},
        )
        with self._lock:
            self.requests.append(request)
        reply = self.fn(request)
        if inspect.isawaitable(reply):
            reply = await reply
        return as_completion(reply, request, model=self.model)


def _sequence(value: object) -> list[object]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else []


def _text(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI multi-part content
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _as_tool_call(raw: Any) -> ToolCall:
    if isinstance(raw, ToolCall):
        return raw
    fn = raw.get("function") or {}
    return ToolCall(
        id=str(raw.get("id", "")),
        name=str(fn.get("name", "")),
        arguments=str(fn.get("arguments") or ""),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, ToolCall):
        return value.to_message_part()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return list(value)
    raise TypeError(f"a {type(value).__name__} in a chat message is not JSON")
