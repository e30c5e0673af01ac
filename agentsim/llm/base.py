"""The model seam: ``ChatModel`` and the values that cross it.

Messages and tool schemas use the OpenAI chat-completions shapes (plain dicts), so that
the same request can go to any OpenAI-compatible server, be hashed for the cache, or be
read by the offline scripted model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ANSWER_FORMAT",
    "ChatModel",
    "Completion",
    "Message",
    "ToolCall",
    "ToolSchema",
    "Usage",
    "as_chat_model",
]

Message = Mapping[str, Any]
"""One chat message: ``{"role": "system"|"user"|"assistant"|"tool", "content": ...}``."""

ToolSchema = Mapping[str, Any]
"""One tool in OpenAI function-calling form: ``{"type": "function", "function": {...}}``."""


ANSWER_FORMAT: ContextVar[Mapping[str, Any] | None] = ContextVar(
    "agentsim_answer_format", default=None
)
"""The form a typed survey answer must take, while an agent answers one: OpenAI's
``json_schema`` object (``{"name", "schema", "strict"}``, ``agentsim.instruments``), else
None. A backend that constrains answers sends it with the request (``response_format``);
an offline model answers it with a valid value; any other model may ignore it (the answer
is checked anyway). A context variable, so a model's ``complete`` keeps its signature and
each step (run in its own context) sees only its own."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """A tool call requested by the model. ``arguments`` is the raw JSON text, unparsed."""

    id: str
    name: str
    arguments: str

    def to_message_part(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Tokens of one call. ``cached_prompt_tokens`` (part of ``prompt_tokens``) are those the
    server served from its prefix cache, as it reports them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + other.cached_prompt_tokens,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Completion:
    """One model answer: text content and/or tool calls, with its token usage.

    ``reasoning``: what a reasoning model sent apart from its answer (``reasoning_content``
    or ``reasoning``); kept for the trace, never part of the answer or of ``message``."""

    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    model: str = ""
    reasoning: str | None = None

    @property
    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_message_part() for tc in self.tool_calls]
        return msg


@runtime_checkable
class ChatModel(Protocol):
    """Anything that answers a chat request. Implementations must be safe to share between
    many concurrently stepping agents of one process.

    A model subclasses ``ChatModel`` to inherit the two methods it may not need:
    ``preflight`` (nothing to check) and ``aclose`` (nothing to release). Code that checks
    or closes a model it was given goes through ``as_chat_model``, so that a model with
    ``complete`` alone keeps working."""

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion: ...

    async def preflight(self) -> None:
        """Check, before a run writes anything, that the model can answer; raise a
        ``ModelError`` naming what to fix. The default has nothing to check."""
        return None

    async def aclose(self) -> None:
        """Release what the model holds (connections, files); idempotent. The default holds
        nothing."""
        return None


def as_chat_model(model: ChatModel) -> ChatModel:
    """``model`` with the whole interface: itself when it has ``preflight`` and ``aclose``,
    else a view adding the defaults (a model written with ``complete`` alone, the seam
    before the two were declared, still works wherever a model is checked or closed)."""
    return model if isinstance(model, ChatModel) else _Completes(model)


class _Completes(ChatModel):
    __slots__ = ("inner",)

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema] = (),
        *,
        seed: int = 0,
    ) -> Completion:
        return await self.inner.complete(messages, tools, seed=seed)
