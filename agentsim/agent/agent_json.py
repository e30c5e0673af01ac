"""``AGENT.json``: the agent's description of itself, in its workspace, current every step.

Skills written for AgentSociety2 read it (``current_time`` above all: its daily-guidance
script derives the day and the active segment from it), so the file carries the fields
AgentSociety2's agent writes there, under the same names: ``agent_id`` / ``id``, ``name``,
``current_time`` (ISO 8601), ``tick``, ``step_count``, ``profile``, ``workspace`` and
``skills``; agentsim adds ``group``, ``persona`` and what the environment modules know of
the agent (the city module's ``home`` and ``work`` places).

The agent makes it current (temp file + rename: a script never reads half a file) before
its step's ``pre_step`` hooks and before any hook or script call that would otherwise see a
stale step or set of active skills; a step that runs no skill code writes nothing. Only the
key of what is on disk stays in memory (step count, active skills), not the content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentsim._atomic import atomic_write_text

__all__ = ["AGENT_JSON", "agent_json", "write_agent_json"]

AGENT_JSON = "AGENT.json"
_SCHEMA_VERSION = 1


def agent_json(
    *,
    agent_id: str,
    group: str,
    profile: Mapping[str, Any],
    persona: str,
    workspace: Path,
    time_iso: str,
    tick: int,
    step_count: int,
    visible: Sequence[str],
    activated: Sequence[str],
    facts: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The content of ``AGENT.json`` for one step (a pure function of its arguments).

    ``facts`` are what the environment modules know of the agent (the city's ``home`` and
    ``work``); they come first, so that they never replace a field of the file's own."""
    name = profile.get("name")
    return {
        **(facts or {}),
        "schema_version": _SCHEMA_VERSION,
        "agent_class": "agentsim.Agent",
        "agent_id": agent_id,
        "id": agent_id,
        "name": name if isinstance(name, str) and name else agent_id,
        "group": group,
        "current_time": time_iso,
        "tick": tick,
        "step_count": step_count,
        "profile": dict(profile),
        "persona": persona,
        "workspace": {"root": str(workspace), "agent_json_path": AGENT_JSON},
        "skills": {"visible": sorted(visible), "activated": sorted(activated)},
    }


def write_agent_json(workspace: Path, content: Mapping[str, Any]) -> None:
    """Replace ``workspace/AGENT.json`` atomically."""
    text = json.dumps(content, ensure_ascii=False, separators=(",", ":"), default=str)
    atomic_write_text(workspace / AGENT_JSON, text)
