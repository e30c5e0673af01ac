"""The in-process executor: hosts as plain objects in this process (small runs, unit
tests, one core). The Ray executor (``agentsim.hosts.ray_executor``) puts each host in an
async actor; both are ``Executor``s (``agentsim.hosts.protocol``), so the engine does not
care which it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from agentsim.config.profiles import AgentSpec
from agentsim.hosts.host import AgentHost
from agentsim.hosts.protocol import Executor, HostSpec
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


class LocalExecutor(Executor):
    """Hosts as plain objects in this process; the registry is shared with the engine (the
    engine refreshes it; the hosts install its new snapshot, see ``AgentHost.reload``).

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

    async def call(
        self, method: str, *args: Any, hosts: Sequence[int] | None = None, what: str, **kw: Any
    ) -> list[Any]:
        del what  # a host's error is raised as it is
        chosen = self.hosts if hosts is None else [self.hosts[h] for h in hosts]
        return list(await asyncio.gather(*(h.call(method, *args, **kw) for h in chosen)))

    async def close(self) -> None:
        for h in self.hosts:
            await h.close()
