"""Public test doubles for users' own tests.

- ``FunctionModel``: a chat model answering from a Python function (no sockets);
  ``ChatRequest`` is what the function sees, ``tool_call`` builds a tool call to return.
- ``OpenAITestServer``: a small fault-injecting OpenAI-compatible server on 127.0.0.1
  (``agentsim.testing.openai_server``), with ``Fault`` and ``spawn_test_server``.
- ``scripted_answer`` answers as the offline model does; ``in_turn`` gives scripted replies
  one request after another; ``calls_as_text`` and
  ``with_reasoning`` wrap an answer function to write its calls as text or add reasoning.
- ``suggestions``: the ``SUGGESTED:`` lines of a skill's output, as the scripted model reads
  them (``agentsim.testing.skills``).

Imported lazily, so that a test using only ``FunctionModel`` does not load the web stack.
"""

from __future__ import annotations

from agentsim._lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ChatRequest": "agentsim.testing.function_model",
    "FORMS": "agentsim.testing.answers",
    "Fault": "agentsim.testing.faults",
    "FunctionModel": "agentsim.testing.function_model",
    "OpenAITestServer": "agentsim.testing.openai_server",
    "calls_as_text": "agentsim.testing.answers",
    "echo_answer": "agentsim.testing.function_model",
    "in_turn": "agentsim.testing.answers",
    "scripted_answer": "agentsim.testing.answers",
    "spawn_test_server": "agentsim.testing.openai_server",
    "suggestions": "agentsim.testing.skills",
    "tool_call": "agentsim.testing.function_model",
    "usage_for": "agentsim.testing.function_model",
    "with_reasoning": "agentsim.testing.answers",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
