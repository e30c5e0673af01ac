"""The names of the tools an agent offers its model: the vocabulary skills speak of
(``requires: [tool:ask_env]``) and the agent implements (``agentsim.agent.tools``)."""

from __future__ import annotations

__all__ = ["TOOL_NAMES"]

TOOL_NAMES = (
    "activate_skill",
    "deactivate_skill",
    "read_skill_file",
    "execute_skill_script",
    "search_skills",
    "ask_env",
    "finish",
)
