"""Queries the viewer needs, built on the public reading API only (``Run``, ``AgentRecord``).

They sit apart so that a storage with an index (agents in a table, traces in shards) can
answer them faster without the viewer changing: ``find_agents`` (search and page the agent
ids), ``agent_steps`` (one agent's steps in a tick range), ``env_layouts`` (how each
environment module is drawn) and ``world_log`` (where agents went, tick by tick, read with
the other events the world view draws in one pass).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentsim.errors import ConfigError
from agentsim.inspect.agentview import AgentRecord, StepRecord
from agentsim.inspect.run import Run

if TYPE_CHECKING:
    from agentsim.env.base import ViewLayout

__all__ = ["AgentPage", "WorldLog", "agent_steps", "env_layouts", "find_agents", "world_log"]

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
    agents (``build_world``, as the engine does before the first tick), mapped to its
    ``view_layout()``; modules that are not drawn are left out."""
    from agentsim.run.world import build_world

    out: dict[str, ViewLayout] = {}
    for name, module in build_world(run.config()).modules.items():
        layout = module.view_layout()
        if layout is not None:
            out[name] = layout
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldLog:
    """What the world view reads from the event log, in one pass (``world_log``)."""

    moves: tuple[tuple[tuple[int, str, str | None], ...], ...]  # per layout, see world_log
    kept: tuple[dict[str, Any], ...]  # the events of the ``keep`` types, in log order


def world_log(run: Run, layouts: Sequence[ViewLayout], *, keep: Iterable[str] = ()) -> WorldLog:
    """One read of the log for the drawn modules: for each layout, ``(tick, agent_id,
    place)`` from its ``leave`` and ``arrive`` events, by tick (``place`` is None for an
    agent that left: in transit; within a tick, departures come before arrivals, as the
    engine applies moves before it ends walks); and the events of the ``keep`` types as
    dicts (``tick``, ``type``, ``agent_id`` and their own fields)."""
    keep = frozenset(keep)
    wanted = keep.union(*(lay.leave for lay in layouts), *(lay.arrive for lay in layouts))
    found: list[list[tuple[int, int, str, str | None]]] = [[] for _ in layouts]
    kept: list[dict[str, Any]] = []
    table = run.events(types=sorted(wanted))
    for tick, etype, agent, text in zip(
        table["tick"].to_pylist(),
        table["type"].to_pylist(),
        table["agent_id"].to_pylist(),
        table["data"].to_pylist(),
        strict=True,
    ):
        # An event's own fields are JSON text: decoded only for the events that need them.
        data: dict[str, Any] | None = None
        for moves, lay in zip(found, layouts, strict=True):
            if agent is None:
                break
            if etype in lay.leave:
                moves.append((int(tick), 0, str(agent), None))
            field = lay.arrive.get(etype)
            if field is not None:
                data = json.loads(text or "{}") if data is None else data
                if data.get(field) is not None:
                    moves.append((int(tick), 1, str(agent), str(data[field])))
        if etype in keep:
            own = json.loads(text or "{}") if data is None else data
            kept.append({**own, "tick": tick, "type": etype, "agent_id": agent})
    for moves in found:
        moves.sort(key=lambda m: (m[0], m[1]))  # stable: log order within a tick and kind
    return WorldLog(
        moves=tuple(tuple((t, a, p) for t, _, a, p in moves) for moves in found),
        kept=tuple(kept),
    )
