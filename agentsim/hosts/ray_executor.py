"""The Ray executor: one async ``AgentHost`` actor per core, agents resident in it.

This is the only module that imports ``ray``. Each actor builds its own skill registry
once (from the same skill folders) and keeps its agents as plain Python objects; the engine
calls ``step_tick`` once per host per tick with the tick's shared input put in the object
store once. Hot methods run with Ray's task events off. Every wait has a timeout, and a
host that dies stops the run with a message naming the resume command.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from agentsim.config.profiles import AgentSpec
from agentsim.env.base import EnvView
from agentsim.env.loader import ModuleCode
from agentsim.errors import ExecutorError
from agentsim.hosts.host import AgentHost, HostSpec, StepDone, TickInput, TickResult
from agentsim.skills.registry import SkillRegistry

__all__ = ["RayExecutor"]


@ray.remote
class _HostActor:
    """An ``AgentHost`` inside an async actor (all methods are coroutines)."""

    def __init__(self, spec: HostSpec, agents: list[AgentSpec]) -> None:
        spec.env_code.load()  # before any view of the experiment's own modules arrives
        self.host = AgentHost(spec, agents)

    async def setup(self, extra: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        return await self.host.setup(extra)

    @ray.method(enable_task_events=False)
    async def step_tick(self, tick: TickInput) -> TickResult:
        return await self.host.step_tick(tick)

    @ray.method(enable_task_events=False)
    async def start_steps(self, tick: TickInput, agent_ids: list[str], final: bool) -> None:
        await self.host.start_steps(tick, agent_ids, final=final)

    @ray.method(enable_task_events=False)
    async def collect(self) -> list[StepDone]:
        return await self.host.collect()

    @ray.method(enable_task_events=False)
    async def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None:
        self.host.tick_final(tick, views)

    async def reload(self, tick: int, when: datetime, changed: list[str]) -> None:
        await self.host.reload(tick, when, changed=changed)

    async def ask(
        self,
        agent_ids: list[str],
        question: str,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
    ) -> dict[str, str]:
        return await self.host.ask(agent_ids, question, tick=tick, when=when, views=views)

    @ray.method(enable_task_events=False)
    async def answered(self) -> int:
        return self.host.answered

    async def get_state(self) -> dict[str, Any]:
        return self.host.get_state()

    async def set_state(self, state: Mapping[str, Any]) -> None:
        await self.host.set_state(state)

    async def model_stats(self) -> dict[str, Any]:
        return self.host.model_stats()

    async def pid(self) -> int:
        return os.getpid()

    async def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())

    async def close(self) -> None:
        await self.host.close()


def _ready(ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


class RayExecutor:
    """Hosts as Ray actors. ``address=None`` joins ``RAY_ADDRESS`` or starts a local Ray."""

    kind = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        call_timeout: float = 600.0,
        heartbeat_timeout: float = 120.0,
        num_cpus_per_host: float = 1.0,
        resume_hint: str = "",
    ) -> None:
        self.address = address
        self.call_timeout = call_timeout
        # A host must answer a ping within this many seconds while it works on a long call;
        # one that does not (stopped, hung, its node gone quiet) stops the run.
        self.heartbeat_timeout = heartbeat_timeout
        self.num_cpus_per_host = num_cpus_per_host
        self.resume_hint = resume_hint
        self.actors: list[Any] = []
        self._started_ray = False
        self._failure: str | None = None  # the first failure: later calls must not mask it

    def _init(self, code: ModuleCode) -> bool:
        """Start or join Ray; True when this call did (its job ships ``code`` to every
        node), False when Ray was running already."""
        if ray.is_initialized():
            return False
        try:
            if self.address or os.environ.get("RAY_ADDRESS"):
                ray.init(
                    address=self.address, log_to_driver=False, runtime_env=code.job_runtime_env()
                )
            else:
                # A local cluster listens on loopback only.
                ray.init(
                    runtime_env=code.job_runtime_env(),
                    include_dashboard=False,
                    log_to_driver=False,
                    object_store_memory=256 * 1024 * 1024,
                    _node_ip_address="127.0.0.1",
                )
                self._started_ray = True
            return True
        except (ConnectionError, RayError, RuntimeError) as exc:
            raise ExecutorError(
                f"cannot connect to Ray at {self.address or os.environ.get('RAY_ADDRESS')}: "
                f"{exc}; start a cluster with `ray start --head` or drop executor.address"
            ) from None

    async def _wait(self, refs: Sequence[Any], what: str) -> list[Any]:
        if self._failure is not None:
            raise ExecutorError(f"{self._failure} (asked for {what} afterwards)")
        calls: asyncio.Future[Any] = asyncio.gather(*refs)
        watch: asyncio.Future[Any] = asyncio.ensure_future(self._watch(what))
        try:
            done, _ = await asyncio.wait(
                (calls, watch), timeout=self.call_timeout, return_when=asyncio.FIRST_COMPLETED
            )
            if calls in done:
                return list(calls.result())
            if watch in done:
                watch.result()  # raises the ExecutorError of a host that stopped answering
            raise self._fail(f"{what} did not answer within {self.call_timeout:g}s")
        except RayActorError as exc:
            raise self._fail(f"a host actor died during {what} ({type(exc).__name__})") from None
        except (GetTimeoutError, RayError) as exc:
            raise self._fail(f"Ray failed during {what}: {exc}") from None
        finally:
            for future in (watch, calls):
                if not future.done():
                    future.cancel()
                    # Retrieved, so that asyncio does not log it as never retrieved.
                    future.add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _watch(self, what: str) -> None:
        """Ping every host while a call runs; raise when one has not answered in time."""
        interval = max(self.heartbeat_timeout / 4, 0.05)
        while True:
            await asyncio.sleep(interval)
            pings = [a.pid.remote() for a in self.actors]
            try:
                await asyncio.wait_for(asyncio.gather(*pings), self.heartbeat_timeout)
            except TimeoutError:
                late = [i for i, p in enumerate(pings) if not _ready(p)]
                raise self._fail(
                    f"host {', '.join(map(str, late))} did not answer a ping for "
                    f"{self.heartbeat_timeout:g}s during {what} (stopped, hung or cut off; "
                    "raise executor.heartbeat_timeout if its work blocks that long)"
                ) from None

    def _fail(self, problem: str) -> ExecutorError:
        self._failure = problem
        return ExecutorError(f"{problem}; the run stopped{self._hint()}")

    def _hint(self) -> str:
        return f"; continue it with `{self.resume_hint}`" if self.resume_hint else ""

    async def start(
        self,
        specs: Sequence[HostSpec],
        blocks: Sequence[Sequence[AgentSpec]],
        registry: SkillRegistry,
    ) -> None:
        # Hosts scan the skill folders themselves: the registry is built once per process.
        del registry
        if not self.resume_hint and specs:
            self.resume_hint = f"agentsim run --resume {specs[0].run_dir}"
        # The experiment's own module code reaches every actor through the runtime env.
        code = specs[0].env_code if specs else ModuleCode()
        options: dict[str, Any] = {"num_cpus": self.num_cpus_per_host}
        if not self._init(code) and (runtime_env := code.actor_runtime_env()):
            options["runtime_env"] = runtime_env
        self.actors = [
            _HostActor.options(**options).remote(s, list(b))  # type: ignore[attr-defined]
            for s, b in zip(specs, blocks, strict=True)
        ]
        await self._wait([a.pid.remote() for a in self.actors], "host start-up")

    async def setup(self, extra: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
        ref = ray.put(dict(extra))
        parts = await self._wait([a.setup.remote(ref) for a in self.actors], "setup")
        return [e for p in parts for e in p]

    async def step_tick(self, tick: TickInput) -> list[TickResult]:
        ref = ray.put(tick)  # shared per-tick data goes to the object store once
        return await self._wait([a.step_tick.remote(ref) for a in self.actors], f"tick {tick.tick}")

    async def start_steps(
        self, tick: TickInput, by_host: Mapping[int, Sequence[str]], *, final: bool
    ) -> None:
        ref = ray.put(tick)  # once, whatever the number of hosts
        calls = [
            self.actors[h].start_steps.remote(ref, list(ids), final) for h, ids in by_host.items()
        ]
        await self._wait(calls, f"tick {tick.tick}")

    async def collect(self, host: int) -> list[StepDone]:
        (done,) = await self._wait([self.actors[host].collect.remote()], "a tick's steps")
        return list(done)

    async def tick_final(self, tick: int, views: Mapping[str, EnvView]) -> None:
        ref = ray.put(dict(views))
        await self._wait([a.tick_final.remote(tick, ref) for a in self.actors], f"tick {tick}")

    async def reload(self, tick: int, when: datetime, *, changed: Sequence[str]) -> None:
        calls = [a.reload.remote(tick, when, list(changed)) for a in self.actors]
        await self._wait(calls, "skill reload")

    async def ask(
        self,
        agent_ids: Sequence[str],
        question: str,
        *,
        tick: int,
        when: datetime,
        views: Mapping[str, EnvView],
    ) -> dict[str, str]:
        vref = ray.put(dict(views))
        parts = await self._wait(
            [a.ask.remote(list(agent_ids), question, tick, when, vref) for a in self.actors],
            "survey",
        )
        return {aid: answer for p in parts for aid, answer in p.items()}

    async def answered(self) -> int:
        parts = await self._wait([a.answered.remote() for a in self.actors], "survey progress")
        return sum(parts)

    async def get_state(self) -> dict[str, Any]:
        parts = await self._wait([a.get_state.remote() for a in self.actors], "checkpoint")
        return {aid: state for p in parts for aid, state in p.items()}

    async def set_state(self, state: Mapping[str, Any]) -> None:
        ref = ray.put(dict(state))
        await self._wait([a.set_state.remote(ref) for a in self.actors], "restore")

    async def model_stats(self) -> list[dict[str, Any]]:
        if self._failure is not None:
            return []  # a broken run has no complete stats; its error is the one to report
        return await self._wait([a.model_stats.remote() for a in self.actors], "stats")

    async def node_ids(self) -> list[str]:
        return await self._wait([a.node_id.remote() for a in self.actors], "node id")

    async def close(self) -> None:
        for a in self.actors:
            if self._failure is None:
                try:
                    await asyncio.wait_for(a.close.remote(), 10)
                except (TimeoutError, RayError):
                    pass
            ray.kill(a)
        self.actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False
