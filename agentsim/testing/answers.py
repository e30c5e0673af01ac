"""Ready-made answer functions for ``FunctionModel`` and ``OpenAITestServer``."""

from __future__ import annotations

from agentsim.llm.base import Completion
from agentsim.llm.scripted import ScriptedModel
from agentsim.testing.function_model import ChatRequest, echo_answer

__all__ = ["echo_answer", "scripted_answer"]

_SCRIPTED = ScriptedModel()


async def scripted_answer(request: ChatRequest) -> Completion:
    """What the offline scripted model answers: it activates skills, runs their scripts
    and finishes, so a step takes several calls, as with a real model."""
    return await _SCRIPTED.complete(request.messages, request.tools, seed=request.seed)
