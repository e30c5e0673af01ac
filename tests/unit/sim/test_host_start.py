"""A tick's first model requests leave while other agents are still starting their steps."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentsim.config.experiment import parse_experiment
from agentsim.hosts.host import START_BATCH
from agentsim.hosts.local import LocalExecutor
from agentsim.llm.base import Completion, Message, ToolSchema
from agentsim.llm.scripted import ScriptedModel
from agentsim.run.engine import Engine

AGENTS = 300

_YAML = f"""
name: start
seed: 1
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow: [{{run: {{ticks: 1}}}}]
agents:
  - {{group: workers, count: {AGENTS}, profile: {{template: worker}}}}
model: {{backend: scripted}}
environment: [{{module: city}}]
output: {{dir: workspace, formats: [jsonl]}}
"""


class WireModel:
    """The scripted model behind a request that needs a few turns of the event loop to
    leave, as an HTTP request does; logs when each request is made and when it leaves."""

    def __init__(self) -> None:
        self.inner = ScriptedModel()
        self.log: list[str] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        self.log.append("made")
        for _ in range(3):
            await asyncio.sleep(0)
        self.log.append("left")
        return await self.inner.complete(messages, tools, seed=seed)


@pytest.mark.slow
async def test_first_requests_leave_before_every_agent_has_started(tmp_path: Path) -> None:
    model = WireModel()
    cfg = parse_experiment(_YAML, base_dir=tmp_path, environ={})
    executor = LocalExecutor(model_factory=lambda spec: model)
    summary = await Engine(cfg, run_dir=tmp_path / "run", executor=executor).run()
    assert summary.status == "completed" and summary.metrics["model_calls"] >= AGENTS
    made_before_first_left = model.log.index("left")
    # Started all at once, every agent would make its first request before one left.
    assert made_before_first_left <= 4 * START_BATCH < AGENTS
