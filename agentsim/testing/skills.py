"""Helpers for testing skills: what the offline model reads from a skill's output."""

from __future__ import annotations

from typing import Any

from agentsim.llm.scripted import _suggestions

__all__ = ["suggestions"]


def suggestions(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The ``SUGGESTED: <tool> <json>`` lines of a hook output or script result, parsed
    exactly as the offline ``scripted`` model parses them (a malformed line is skipped)."""
    return list(_suggestions(text))
