"""How many agent steps a host runs at once: enough to keep the model busy, not all of them
(every step in flight holds its prompt), and waiting for a turn is not the step's time."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

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
    """The scripted model after a short wait; counts the steps waiting on it at once."""

    def __init__(self, delay: float) -> None:
        self.inner = ScriptedModel()
        self.delay = delay
        self.now = 0
        self.most = 0

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        self.now += 1
        self.most = max(self.most, self.now)
        try:
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
    model = SlowModel(0.01)
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
    # One step at a time, each 0.05 s or more: the tick takes about 20 x 0.05 s, far past
    # the 0.5 s step timeout, and yet no step times out.
    model = SlowModel(0.05)
    metrics = await run_one_tick(
        tmp_path, model, MODEL__MAX_CONCURRENCY="1", EXECUTOR__STEP_TIMEOUT="0.5"
    )
    assert model.most == 1
    assert metrics["errors"] == 0
    assert metrics["tick_seconds_max"] > 0.5
