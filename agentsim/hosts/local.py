"""Executors place hosts somewhere and call them once per tick.

``LocalExecutor`` keeps its hosts in this process (small runs, unit tests, one core). The
Ray executor (``agentsim.hosts.ray_executor``) puts each host in an async actor; both expose
the same methods so the engine does not care which it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from agentsim.config.profiles import AgentSpec
from agentsim.env.base import EnvView
from agentsim.hosts.host import AgentHost, HostSpec, StepDone, TickInput, TickResult
from agentsim.llm.base import ChatModel
from agentsim.skills.registry import SkillRegistry

__all__ = ["Executor", "LocalExecutor", "partition"]


def partition(agents: Sequence[AgentSpec], hosts: int) -> list[list[AgentSpec]]:
    """Contiguous, balanced blocks of the agents (sorted by id), one per host."""
    ordered = sorted(agents, key=lambda a: a.agent_id)
    n = max(1, min(hosts, len(ordered)))
    size, extra = divmod(len(ordered), n)
    out: list[list[AgentSpec]] = []
    start = 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(ordered[start:end])
        start = end
    return out


class Executor(Protocol):
    kind: str

    async def start(
        self,
        specs: Sequence[HostSpec],
        blocks: Sequence[Sequence[AgentSpec]],
        registry: SkillRegistry,
    ) -> None: ...
    async def setup(self, extra: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]: ...
    async def step_tick(self, tick: TickInput) -> list[TickResult]: ...
    # executor.schedule: dependencies (see agentsim.run.schedules.dependencies); hosts by index.
    async def start_steps(
        self, tick: TickInput, by_host: Mapping[int, Sequence[str]], *, final: bool
    ) -> None: ...
    async def collect(self, host: int) -> list[StepDone]: ...
    async def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None: ...
    async def reload(self, tick: int, when: datetime, *, changed: Sequence[str]) -> None: ...
    async def ask(
        self,
        agent_ids: Sequence[str],
        question: str,
        *,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
    ) -> dict[str, str]: ...
    async def answered(self) -> int: ...  # answers so far in the ``ask`` under way
    async def get_state(self) -> dict[str, Any]: ...
    async def set_state(self, state: Mapping[str, Any]) -> None: ...
    async def model_stats(self) -> list[dict[str, Any]]: ...
    async def close(self) -> None: ...


class LocalExecutor:
    """Hosts as plain objects in this process; the registry is shared with the engine (the
    engine refreshes it; the hosts install its new snapshot, see ``AgentHost.refresh_skills``).

    ``model_factory`` replaces the model built from the experiment's ``model:`` section: it is
    called once per host with that host's spec and returns the ``ChatModel`` its agents
    share. It is the seam for a fake or instrumented model in tests, or for a backend the
    configuration does not know (e.g. ``lambda spec: MyModel()``).
    """

    kind = "local"

    def __init__(self, *, model_factory: Callable[[HostSpec], ChatModel] | None = None) -> None:
        self.hosts: list[AgentHost] = []
        self.model_factory = model_factory

    async def start(
        self,
        specs: Sequence[HostSpec],
        blocks: Sequence[Sequence[AgentSpec]],
        registry: SkillRegistry,
    ) -> None:
        make = self.model_factory
        self.hosts = [
            AgentHost(s, b, registry=registry, model=make(s) if make is not None else None)
            for s, b in zip(specs, blocks, strict=True)
        ]

    async def setup(self, extra: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for h in self.hosts:
            events.extend(await h.setup(extra))
        return events

    async def step_tick(self, tick: TickInput) -> list[TickResult]:
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(h.step_tick(tick)) for h in self.hosts]
        return [t.result() for t in tasks]

    async def start_steps(
        self, tick: TickInput, by_host: Mapping[int, Sequence[str]], *, final: bool
    ) -> None:
        for h, ids in by_host.items():
            await self.hosts[h].start_steps(tick, ids, final=final)

    async def collect(self, host: int) -> list[StepDone]:
        return await self.hosts[host].collect()

    async def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None:
        for h in self.hosts:
            h.tick_final(tick, views)

    async def reload(self, tick: int, when: datetime, *, changed: Sequence[str]) -> None:
        for h in self.hosts:
            await h.reload(tick, when, changed=changed)

    async def ask(
        self,
        agent_ids: Sequence[str],
        question: str,
        *,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
    ) -> dict[str, str]:
        async with asyncio.TaskGroup() as tg:
            tasks = [
                tg.create_task(h.ask(agent_ids, question, tick=tick, when=when, views=views))
                for h in self.hosts
            ]
        return {aid: answer for t in tasks for aid, answer in t.result().items()}

    async def answered(self) -> int:
        return sum(h.answered for h in self.hosts)

    async def get_state(self) -> dict[str, Any]:
        return {aid: state for h in self.hosts for aid, state in h.get_state().items()}

    async def set_state(self, state: Mapping[str, Any]) -> None:
        for h in self.hosts:
            await h.set_state({aid: state[aid] for aid in h.agent_ids if aid in state})

    async def model_stats(self) -> list[dict[str, Any]]:
        return [h.model_stats() for h in self.hosts]

    async def close(self) -> None:
        for h in self.hosts:
            await h.close()
