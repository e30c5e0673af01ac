"""Queries the viewer needs, built on the public reading API only (``Run``, ``AgentRecord``).

They sit apart so that a storage with an index (agents in a table, traces in shards) can
answer them faster without the viewer changing: ``find_agents`` (search and page the agent
ids), ``agent_steps`` (one agent's steps in a tick range), ``env_layouts`` (how each
environment module is drawn) and ``place_moves`` (where agents went, tick by tick).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentsim.errors import ConfigError
from agentsim.inspect.agentview import AgentRecord, StepRecord
from agentsim.inspect.run import Run

if TYPE_CHECKING:
    from agentsim.env.base import ViewLayout

__all__ = ["AgentPage", "agent_steps", "env_layouts", "find_agents", "place_moves"]

_OBSERVATION = re.compile(r"<observation>\n?(.*?)\n?</observation>", re.S)


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentPage:
    """A page of agent ids: ``total`` of them match the search."""

    total: int
    agent_ids: tuple[str, ...]


def _check_page(name: str, value: int, *, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(name, f"{value!r} is not a whole number >= {lo}", f"pass {name}={lo}")


def find_agents(run: Run, *, search: str = "", offset: int = 0, limit: int = 50) -> AgentPage:
    """Agent ids containing ``search`` (case-insensitive), sorted, ``limit`` from ``offset``."""
    _check_page("offset", offset, lo=0)
    _check_page("limit", limit, lo=1)
    needle = search.strip().lower()
    ids = [a for a in run.agents if needle in a.lower()] if needle else run.agents
    return AgentPage(total=len(ids), agent_ids=tuple(ids[offset : offset + limit]))


def agent_steps(record: AgentRecord, *, start: int, end: int) -> dict[str, Any]:
    """One pass over the agent's trace: every change of its active skills, its step count, its
    ticks, and the steps of ticks ``start..end`` (inclusive) with their observation and the
    memory entries written that tick."""
    if end < start:
        raise ConfigError("end", f"tick range {start}..{end} is empty", "give start <= end")
    changes: list[dict[str, Any]] = []
    ticks: list[int] = []
    steps: list[dict[str, Any]] = []
    for d in record.trace():
        tick = int(d.get("tick", -1))
        if "skills_active" in d:
            changes.append({"tick": tick, "active": [str(s) for s in d["skills_active"]]})
            continue
        ticks.append(tick)
        if start <= tick <= end:
            step = StepRecord.from_trace(d).to_dict()
            m = _OBSERVATION.search(str(d.get("user") or ""))
            step["observation"] = m.group(1) if m else ""
            step["memory"] = []
            steps.append(step)
    if steps:
        by_tick = {s["tick"]: s for s in steps}
        for entry in record.memory():
            found = by_tick.get(entry.get("tick"))
            if found is not None:
                found["memory"].append(entry)
    return {
        "skills_over_time": changes,
        "steps_total": len(ticks),
        "ticks": ticks,
        "steps": steps,
    }


def env_layouts(run: Run) -> dict[str, ViewLayout]:
    """Each environment module of the run rebuilt from its config and set up with the run's
    agents (as the engine does before the first tick), mapped to its ``view_layout()``;
    modules that are not drawn are left out."""
    from agentsim.env import create_module
    from agentsim.env.base import AgentInfo
    from agentsim.sim.profiles import resolve_agents

    config = run.config()
    infos = [
        AgentInfo(agent_id=a.agent_id, group=a.group, profile=a.profile)
        for a in resolve_agents(config)
    ]
    out: dict[str, ViewLayout] = {}
    for i, m in enumerate(config.environment):
        module = create_module(
            m.module,
            m.options,
            seed=config.seed,
            base_dir=config.source_dir,
            config_path=f"environment.{i}",
        )
        module.setup(infos)
        layout = module.view_layout()
        if layout is not None:
            out[m.module] = layout
    return out


def place_moves(run: Run, layout: ViewLayout) -> list[tuple[int, str, str | None]]:
    """``(tick, agent_id, place)`` from the layout's ``leave`` and ``arrive`` events, by tick;
    ``place`` is None for an agent that left (in transit). Within a tick, departures come
    before arrivals, as the engine applies moves before it ends walks."""
    moves: list[tuple[int, int, str, str | None]] = []
    for etype in layout.leave:
        table = run.events(type=etype)
        for tick, agent in zip(
            table["tick"].to_pylist(), table["agent_id"].to_pylist(), strict=True
        ):
            if agent is not None:
                moves.append((int(tick), 0, str(agent), None))
    for etype, field in layout.arrive.items():
        table = run.events(type=etype)
        if field not in table.column_names:
            continue
        for tick, agent, place in zip(
            table["tick"].to_pylist(),
            table["agent_id"].to_pylist(),
            table[field].to_pylist(),
            strict=True,
        ):
            if agent is not None and place is not None:
                moves.append((int(tick), 1, str(agent), str(place)))
    moves.sort(key=lambda m: (m[0], m[1]))  # stable: log order within a tick and kind
    return [(tick, agent, place) for tick, _, agent, place in moves]
