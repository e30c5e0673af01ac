"""How many agent steps a host runs at once: enough to keep the model busy, not all of them
(every step in flight holds its prompt), and waiting for a turn is not the step's time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentsim.config.experiment import load_experiment
from agentsim.hosts import host
from agentsim.hosts.local import LocalExecutor
from agentsim.llm.base import Completion, Message, ToolSchema
from agentsim.llm.scripted import ScriptedModel
from agentsim.run.engine import Engine
from tests.unit import helpers

SMALL = helpers.FIXTURES / "experiments" / "small.yaml"


class SlowModel:
    """The scripted model after a short wait; counts the steps waiting on it at once.

    With ``hold``, calls also wait until ``hold`` of them are in at once (once that happened,
    no call waits for it again, and a guard of 60 s gives up waiting): so the count reaches
    what the host allows however the steps interleave, and a host that allows fewer than
    ``hold`` is seen by the count, not as a suite that never ends."""

    def __init__(self, delay: float, *, hold: int = 0) -> None:
        self.inner = ScriptedModel()
        self.delay = delay
        self.now = 0
        self.most = 0
        self.hold = hold
        self.all_in = asyncio.Event()

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            if self.now >= self.hold:
                self.all_in.set()
            try:
                async with asyncio.timeout(60):
                    await self.all_in.wait()
            except TimeoutError:
                self.all_in.set()  # the host never let `hold` in at once: the test says so
            await asyncio.sleep(self.delay)
            return await self.inner.complete(messages, tools, seed=seed)
        finally:
            self.now -= 1


async def run_one_tick(tmp_path: Path, model: SlowModel, **env: str) -> dict[str, float]:
    environ = {f"AGENTSIM_{k}": v for k, v in env.items()}
    cfg = load_experiment(SMALL, environ={"AGENTSIM_WORKFLOW": "[{run: {ticks: 1}}]", **environ})
    ex = LocalExecutor(model_factory=lambda spec: model)
    summary = await Engine(cfg, run_dir=tmp_path / "run", executor=ex).run()
    assert summary.status == "completed"
    return summary.metrics


async def test_steps_in_flight_follow_the_model_concurrency(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "_MIN_STEPS_IN_FLIGHT", 1)
    model = SlowModel(0.01, hold=host._STEPS_PER_MODEL_SLOT)
    metrics = await run_one_tick(tmp_path, model, MODEL__MAX_CONCURRENCY="1")
    # 20 agents, max_concurrency 1: four steps (and so at most four model calls) at once.
    assert model.most == host._STEPS_PER_MODEL_SLOT == 4
    assert metrics["errors"] == 0


@pytest.mark.slow
async def test_waiting_for_a_turn_does_not_count_against_the_step_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(host, "_MIN_STEPS_IN_FLIGHT", 1)
    monkeypatch.setattr(host, "_STEPS_PER_MODEL_SLOT", 1)
    # One step at a time, each 0.1 s or more: the tick takes 20 x 0.1 s at least, past the
    # 1 s step timeout, and yet no step times out (each step, turn taken, has 0.9 s to spare).
    model = SlowModel(0.1)
    metrics = await run_one_tick(
        tmp_path, model, MODEL__MAX_CONCURRENCY="1", EXECUTOR__STEP_TIMEOUT="1"
    )
    assert model.most == 1
    assert metrics["errors"] == 0
    assert metrics["tick_seconds_max"] > 1


class _Recording(LocalExecutor):
    """Notes each host call (method and arguments) on its way through the one route."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    async def call(
        self, method: str, *args: Any, hosts: Sequence[int] | None = None, what: str, **kw: Any
    ) -> list[Any]:
        self.calls.append((method, args, kw))
        return await super().call(method, *args, hosts=hosts, what=what, **kw)


async def test_a_barrier_tick_starts_every_step_and_collects_them_all_in_one_call(
    tmp_path: Path,
) -> None:
    cfg = load_experiment(SMALL, environ={"AGENTSIM_EXECUTOR__SCHEDULE": "barrier"})
    ex = _Recording()
    summary = await Engine(cfg, run_dir=tmp_path / "run", executor=ex).run()
    assert summary.status == "completed" and summary.metrics["agent_steps"] == 6 * 20
    # Every host capability the run used went through ``call`` (``close`` is the executor's).
    used = {method for method, _, _ in ex.calls}
    assert used == {"setup", "start_steps", "collect", "ask", "get_state", "model_stats"}
    starts = [args for method, args, _ in ex.calls if method == "start_steps"]
    collects = [kw for method, _, kw in ex.calls if method == "collect"]
    # One start of every agent (by_host None) and one collect until all are in, per tick.
    assert [(tick.tick, by_host) for tick, by_host in starts] == [(t, None) for t in range(6)]
    assert collects == [{"wait_all": True}] * 6


async def test_a_host_is_called_only_by_its_public_capabilities(tmp_path: Path) -> None:
    ex = LocalExecutor()
    cfg = load_experiment(SMALL)
    engine = Engine(cfg, run_dir=tmp_path / "run", executor=ex)
    await engine.run()
    agent_host = ex.hosts[0]
    # The generic call is the method itself.
    assert await agent_host.call("model_stats") == agent_host.model_stats()
    with pytest.raises(AttributeError, match="AgentHost has no capability '_step_one'"):
        await agent_host.call("_step_one")
    with pytest.raises(AttributeError, match="AgentHost has no capability 'spec'"):
        await agent_host.call("spec")
