"""``AGENT.json``: the agent's description of itself, in its workspace, current every step.

Skills written for AgentSociety2 read it (``current_time`` above all: its daily-guidance
script derives the day and the active segment from it), so the file carries the fields
AgentSociety2's agent writes there, under the same names: ``agent_id`` / ``id``, ``name``,
``current_time`` (ISO 8601), ``tick``, ``step_count``, ``profile``, ``workspace`` and
``skills``; agentsim adds ``group`` and ``persona``.

It is rewritten (temp file + rename: a script never reads half a file) at the start of every
step, before the ``pre_step`` hooks, and nothing of it stays in memory: the agent holds no
copy, so 100,000 resident agents cost the files, not RAM.
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
) -> dict[str, Any]:
    """The content of ``AGENT.json`` for one step (a pure function of its arguments)."""
    name = profile.get("name")
    return {
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
