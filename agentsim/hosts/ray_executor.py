"""The Ray executor: one async ``AgentHost`` actor per core, agents resident in it.

Where the hosts run: the cluster at ``address`` (or ``RAY_ADDRESS``, an address given too),
whose host must take a connection within ``connect_timeout`` seconds; without one, a local
cluster of the run's own, never a cluster that happens to run on the machine. The hosts
must fit the cluster's CPUs (``num_cpus_per_host`` each): that is checked before the run
writes anything.

This is the only module that imports ``ray``. Each actor builds its own skill registry
once (from the same skill folders) and keeps its agents as plain Python objects. Every host
method is reached through the actor's one ``call`` (run with Ray's task events off), with
the data it shares (a tick's input, views, states) put in the object store once per call,
whatever the number of hosts. Every wait has a timeout, and a host that dies stops the run
with a message naming the resume command.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from agentsim.config.profiles import AgentSpec
from agentsim.env.loader import ModuleCode
from agentsim.errors import ConfigError, ExecutorError
from agentsim.hosts.host import AgentHost
from agentsim.hosts.protocol import Executor, HostSpec
from agentsim.skills.registry import SkillRegistry

__all__ = ["RayExecutor"]


@ray.remote
class _HostActor:
    """An ``AgentHost`` inside an async actor (all methods are coroutines)."""

    def __init__(self, spec: HostSpec, agents: list[AgentSpec]) -> None:
        spec.env_code.load()  # before any view of the experiment's own modules arrives
        self.host = AgentHost(spec, agents)

    @ray.method(enable_task_events=False)
    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self.host.call(method, *args, **kwargs)

    async def pid(self) -> int:
        return os.getpid()

    async def node_id(self) -> str:
        return str(ray.get_runtime_context().get_node_id())


def _ready(ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


# Arguments sent to each host as they are; any other is put in the object store once per call.
_SMALL = (str, int, float, bool, datetime, type(None))


class RayExecutor(Executor):
    """Hosts as Ray actors. ``address=None`` joins ``RAY_ADDRESS`` or starts a local Ray of
    its own (``ray.init(address="local")``: a cluster already running here is not joined)."""

    kind = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        call_timeout: float = 600.0,
        heartbeat_timeout: float = 120.0,
        num_cpus_per_host: float = 1.0,
        resume_hint: str = "",
        connect_timeout: float = 30.0,
    ) -> None:
        self.address = address
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        # A host must answer a ping within this many seconds while it works on a long call;
        # one that does not (stopped, hung, its node gone quiet) stops the run.
        self.heartbeat_timeout = heartbeat_timeout
        self.num_cpus_per_host = num_cpus_per_host
        self.resume_hint = resume_hint
        self.actors: list[Any] = []
        self._started_ray = False
        # Whether this executor's ray.init started the job (None: not connected yet).
        self._own_job: bool | None = None
        self._failure: str | None = None  # the first failure: later calls must not mask it

    def _given_address(self) -> str | None:
        return self.address or os.environ.get("RAY_ADDRESS") or None

    def _init(self, code: ModuleCode) -> bool:
        """Start or join Ray; True when this call did (its job ships ``code`` to every
        node), False when Ray was running already."""
        if ray.is_initialized():
            return False
        address = self._given_address()
        if address is not None:
            _probe(address, self.connect_timeout)
            kwargs: dict[str, Any] = {"address": address, "log_to_driver": False}
        else:
            # A cluster of this run's own (never one already running here), listening on
            # loopback only.
            kwargs = {
                "address": "local",
                "include_dashboard": False,
                "log_to_driver": False,
                "object_store_memory": 256 * 1024 * 1024,
                "_node_ip_address": "127.0.0.1",
            }
        # ray.init sets a SIGTERM handler that exits at once; the run's own (a stop at the
        # tick's end, ``agentsim run``) is put back once Ray is connected.
        main = threading.current_thread() is threading.main_thread()
        on_sigterm = signal.getsignal(signal.SIGTERM) if main else None
        try:
            ray.init(runtime_env=code.job_runtime_env(), **kwargs)
        except (ConnectionError, RayError, RuntimeError) as exc:
            if address is None:
                raise
            raise _unreachable(
                address, str(exc).splitlines()[0] if str(exc) else repr(exc)
            ) from None
        finally:
            if on_sigterm is not None:
                signal.signal(signal.SIGTERM, on_sigterm)
        self._started_ray = address is None
        return True

    async def connect(self, *, hosts: int, env_code: ModuleCode) -> None:
        """Reach Ray (``_init``: an address that takes no connection within
        ``connect_timeout`` is refused before Ray is asked to join it) and
        check that ``hosts`` hosts of ``num_cpus_per_host`` CPUs fit the cluster."""
        if self._own_job is None:
            self._own_job = self._init(env_code)
        cpus = float(ray.cluster_resources().get("CPU", 0.0))  # type: ignore[no-untyped-call]
        need = hosts * self.num_cpus_per_host
        if need > cpus:
            fit = int(cpus // self.num_cpus_per_host)
            raise ConfigError(
                "executor.hosts",
                f"{hosts} hosts x {self.num_cpus_per_host:g} CPU need {need:g} CPUs, but the "
                f"Ray cluster has {cpus:g}",
                f"set executor.hosts to at most {fit}, or add nodes to the cluster",
            )

    async def _wait(self, refs: Sequence[Any], what: str, *, watch_hosts: bool = True) -> list[Any]:
        """The results of ``refs``, within ``call_timeout``; with ``watch_hosts``, every host
        must also answer pings meanwhile (not while they start: a ping then waits for the
        actor's process, which a loaded machine may take longer than a heartbeat to start)."""
        if self._failure is not None:
            raise ExecutorError(f"{self._failure} (asked for {what} afterwards)")
        calls: asyncio.Future[Any] = asyncio.gather(*refs)
        watch: asyncio.Future[Any] = asyncio.ensure_future(
            self._watch(what) if watch_hosts else asyncio.Event().wait()
        )
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
        if self._own_job is None:
            self._own_job = self._init(code)
        if not self._own_job and (runtime_env := code.actor_runtime_env()):
            options["runtime_env"] = runtime_env
        self.actors = [
            _HostActor.options(**options).remote(s, list(b))  # type: ignore[attr-defined]
            for s, b in zip(specs, blocks, strict=True)
        ]
        await self._wait([a.pid.remote() for a in self.actors], "host start-up", watch_hosts=False)

    async def call(
        self, method: str, *args: Any, hosts: Sequence[int] | None = None, what: str, **kw: Any
    ) -> list[Any]:
        args = tuple(a if isinstance(a, _SMALL) else ray.put(a) for a in args)
        kw = {k: v if isinstance(v, _SMALL) else ray.put(v) for k, v in kw.items()}
        actors = self.actors if hosts is None else [self.actors[h] for h in hosts]
        return await self._wait([a.call.remote(method, *args, **kw) for a in actors], what)

    async def model_stats(self) -> list[dict[str, Any]]:
        if self._failure is not None:
            return []  # a broken run has no complete stats; its error is the one to report
        return await super().model_stats()

    async def node_ids(self) -> list[str]:
        return await self._wait([a.node_id.remote() for a in self.actors], "node id")

    async def close(self) -> None:
        for a in self.actors:
            if self._failure is None:
                try:
                    await asyncio.wait_for(a.call.remote("close"), 10)
                except (TimeoutError, RayError):
                    pass
            ray.kill(a)
        self.actors = []
        self._own_job = None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False


def _unreachable(address: str, detail: str) -> ConfigError:
    return ConfigError(
        "executor.address",
        f"cannot reach the Ray cluster at {address} ({detail})",
        "start it (`ray start --head`), fix executor.address / --address / RAY_ADDRESS, or "
        "give none to start a local cluster; executor.connect_timeout sets the wait",
    )


def _probe(address: str, timeout: float) -> None:
    """Refuse at once (within ``timeout``) an address whose host and port take no TCP
    connection; names Ray resolves itself (``auto``, ``local``) are left to it."""
    if address in ("auto", "local"):
        return
    parsed = urllib.parse.urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parsed.hostname, parsed.port
    except ValueError:
        raise _unreachable(address, "not a host:port address") from None
    if host is None or port is None:
        raise _unreachable(address, "not a host:port address")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise _unreachable(address, str(exc) or type(exc).__name__) from None
