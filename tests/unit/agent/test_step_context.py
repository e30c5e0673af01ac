"""Each agent step runs in its own context (issue 14, item 1): 1,000 agents in a real run,
each with an async hook that awaits and then reads ``current_context()``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from agentsim.agent.agent import step_seed
from agentsim.config.experiment import parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.inspect import open_run
from agentsim.llm.base import Completion, Message, ToolSchema
from agentsim.llm.scripted import ScriptedModel
from agentsim.run.engine import Engine
from tests.unit import helpers

SKILLS = helpers.FIXTURES / "context_skills"
AGENTS = 1000

EXPERIMENT = f"""
name: step-context
seed: 3
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: 2
agents:
  - group: probes
    count: {AGENTS}
    profile: {{template: generic}}
    skills: {{default: [whoami]}}
skills: {{paths: ["{SKILLS}"], builtin: false}}
model: {{backend: scripted}}
output: {{formats: [jsonl]}}
"""


@pytest.mark.slow
def test_awaiting_hooks_of_1000_agents_each_see_their_own_agent(tmp_path: Path) -> None:
    config = parse_experiment(EXPERIMENT, base_dir=tmp_path)
    run_dir = tmp_path / "run"
    summary = asyncio.run(Engine(config, run_dir=run_dir).run())

    assert summary.status == "completed"
    assert summary.metrics["agent_steps"] == 2 * AGENTS
    assert summary.metrics["errors"] == 0
    events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e for e in events if e["type"] == "agent_error"] == []
    wrong: list[str] = []
    failed: list[str] = []
    agent_dirs = sorted((run_dir / "agents").iterdir())
    run = open_run(run_dir)
    assert len(agent_dirs) == AGENTS
    for d in agent_dirs:
        lines = (d / "state" / "whoami.txt").read_text().splitlines()
        assert len(lines) == 2, d.name
        wrong += [f"{d.name}: {line}" for line in lines if line != f"{d.name} {d.name}"]
        trace = list(run.agent(d.name).trace())
        hooks = [h for t in trace for h in t.get("hooks", []) if h["hook"] == "pre_step"]
        assert len(hooks) == 2, d.name
        failed += [f"{d.name}: {h}" for h in hooks if not h["ok"] or h["text"] != f"I am {d.name}"]
    assert wrong == [], f"{len(wrong)} hooks saw another agent, e.g. {wrong[:3]}"
    assert failed == [], f"{len(failed)} hook calls failed, e.g. {failed[:3]}"


class CancellingModel:
    """The scripted model, except that one agent's calls raise ``CancelledError`` (as a
    script or library that cancels itself would) after waiting a moment."""

    def __init__(self, victim_seeds: set[int]) -> None:
        self.inner = ScriptedModel()
        self.victim_seeds = victim_seeds

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        await asyncio.sleep(0.001)
        if seed in self.victim_seeds:
            raise asyncio.CancelledError
        return await self.inner.complete(messages, tools, seed=seed)


def test_a_step_that_cancels_itself_fails_alone(tmp_path: Path) -> None:
    config = parse_experiment(EXPERIMENT.replace(f"count: {AGENTS}", "count: 6"), base_dir=tmp_path)
    victim = "probes-00002"
    seeds = {step_seed(config.seed, victim, t) for t in range(2)}
    executor = LocalExecutor(model_factory=lambda spec: CancellingModel(seeds))
    summary = asyncio.run(Engine(config, run_dir=tmp_path / "run", executor=executor).run())
    assert summary.status == "completed with problems" and summary.metrics["errors"] == 2
    events = [json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    errors = [(e["tick"], e["agent_id"], e["error"]) for e in events if e["type"] == "agent_error"]
    assert errors == [(0, victim, "step was cancelled"), (1, victim, "step was cancelled")]
    actions = [e["agent_id"] for e in events if e["type"] == "agent_action"]
    assert len(actions) == 2 * 5 and victim not in actions
