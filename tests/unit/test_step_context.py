"""Each agent step runs in its own context (issue 14, item 1): 1,000 agents in a real run,
each with an async hook that awaits and then reads ``current_context()``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from agentsim.sim.config import parse_experiment
from agentsim.sim.engine import Engine

SKILLS = Path(__file__).parent.parent / "fixtures" / "context_skills"
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
    assert len(agent_dirs) == AGENTS
    for d in agent_dirs:
        lines = (d / "state" / "whoami.txt").read_text().splitlines()
        assert len(lines) == 2, d.name
        wrong += [f"{d.name}: {line}" for line in lines if line != f"{d.name} {d.name}"]
        trace = [json.loads(x) for x in (d / "trace.jsonl").read_text().splitlines()]
        hooks = [h for t in trace for h in t.get("hooks", []) if h["hook"] == "pre_step"]
        assert len(hooks) == 2, d.name
        failed += [f"{d.name}: {h}" for h in hooks if not h["ok"] or h["text"] != f"I am {d.name}"]
    assert wrong == [], f"{len(wrong)} hooks saw another agent, e.g. {wrong[:3]}"
    assert failed == [], f"{len(failed)} hook calls failed, e.g. {failed[:3]}"
