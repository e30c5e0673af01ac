"""The schedules a run can step its agents by, behind one interface the engine offers.

A schedule (``executor.schedule``) runs a number of ticks of a ``run`` workflow step: it
starts the agents' steps through the executor, collects them, and hands each tick, once
every agent has stepped it, to ``Stepping.complete_tick``. The engine keeps everything
else (the workflow, checkpoints, the stop checks' reasons), and a schedule sees only
``Stepping``: no schedule reaches into the engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from agentsim.config.experiment import ExperimentConfig
from agentsim.env.base import EnvModule, EnvView
from agentsim.env.clock import SimClock
from agentsim.hosts.protocol import Executor, TickResult

__all__ = ["Schedule", "Stepping", "schedule_named"]


class Stepping(Protocol):
    """What the engine offers a schedule."""

    config: ExperimentConfig
    clock: SimClock
    modules: dict[str, EnvModule]
    executor: Executor
    host_agents: list[list[str]]  # each host's agent ids, by host index

    def views(self) -> dict[str, EnvView]:
        """One read-only view per environment module, at the current tick."""
        ...

    def refresh_skills(self) -> tuple[list[dict[str, Any]], tuple[str, ...] | None]:
        """Hot reload's check of the registry: the run's events about it, and the skill
        ids added or changed (None: nothing changed; the hosts need no ``reload``)."""
        ...

    def take_messages(self) -> dict[str, tuple[str, ...]]:
        """The messages waiting for each addressee's next step (taken: given once)."""
        ...

    def complete_tick(
        self,
        results: Sequence[TickResult],
        run_events: list[dict[str, Any]],
        t0: float,
        *,
        fastest: int | None = None,
    ) -> None:
        """Every agent has stepped the current tick (``results``, sorted by agent id):
        apply it, write it and advance the clock. ``t0``: when the tick began; ``fastest``:
        the tick the agent furthest ahead steps next, for the progress line."""
        ...

    def should_stop(self) -> bool:
        """Whether the call stops after the tick just completed (interrupted, its model
        gave up, or the budget no longer pays for the call's later ticks); the engine
        records why and decides whether the run goes on."""
        ...


class Schedule(Protocol):
    async def run_ticks(self, engine: Stepping, n: int) -> int:
        """Run up to ``n`` ticks from the engine's current one, every agent ending at the
        same tick (fewer if ``should_stop`` says so). Returns the ticks completed."""
        ...


def schedule_named(name: str) -> Schedule:
    """The schedule ``executor.schedule`` names."""
    from agentsim.run.schedules.barrier import Barrier
    from agentsim.run.schedules.dependencies import Dependencies

    kinds: dict[str, type[Barrier] | type[Dependencies]] = {
        "barrier": Barrier,
        "dependencies": Dependencies,
    }
    return kinds[name]()
