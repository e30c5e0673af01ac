"""Hot reload on the local executor (issue 15): between ticks the test adds, edits and
deletes skills in a custom skills folder; from the next tick on the agents see it."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from tests.unit import helpers

AGENTS = 3
HOOK = """def entrypoint(argv, ctx):
    state = ctx.workspace_root / "state"
    state.mkdir(exist_ok=True)
    with open(state / "alpha.txt", "a", encoding="utf-8") as f:
        f.write(f"{ctx.tick}\\n")
    return "{text}"
"""


def write_skill(root: Path, name: str, description: str, body: str, *, hook: str = "") -> None:
    helpers.write_skill(
        root,
        name,
        description=description,
        front="hooks:\n  pre_step: scripts/hook.py\n" if hook else "",
        body=f"{body}\n",
        files={"scripts/hook.py": HOOK.replace("{text}", hook)} if hook else None,
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_skills_added_edited_and_deleted_mid_run_reach_the_agents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "alpha", "Use for the alpha routine.", "Alpha body.", hook="alpha v1")
    write_skill(skills, "beta", "Use for the beta errands.", "Beta body, first edition.")
    config = parse_experiment(
        f"""
name: reload
seed: 1
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: 4
agents:
  - group: people
    count: {AGENTS}
    profile: {{template: generic}}
    skills: {{default: [alpha, beta]}}
skills: {{paths: ["{skills}"], builtin: false}}
model: {{backend: scripted}}
output: {{formats: [jsonl], flush_every: 1}}
""",
        base_dir=tmp_path,
    )

    def between_ticks(p: Progress) -> None:
        if p.tick == 1:  # before tick 1: one skill added, one edited, one script edited
            write_skill(skills, "gamma", "Use for the gamma hobby.", "Gamma body.")
            write_skill(
                skills,
                "beta",
                "Use for the beta errands, second edition.",
                "Beta body, second edition with more words.",
            )
            write_skill(skills, "alpha", "Use for the alpha routine.", "Alpha body.", hook="v2")
        elif p.tick == 2:  # before tick 2: an active skill with a hook is deleted
            shutil.rmtree(skills / "alpha")

    run_dir = tmp_path / "run"
    summary = asyncio.run(Engine(config, run_dir=run_dir, progress=between_ticks).run())

    assert summary.status == "completed" and summary.metrics["errors"] == 0
    assert summary.metrics["skills_reloads"] == 2
    events = read_jsonl(run_dir / "events.jsonl")
    assert [e for e in events if e["type"] in ("agent_error", "hook_gate_failed")] == []
    reloads = [
        (e["tick"], e["added"], e["changed"], e["removed"])
        for e in events
        if e["type"] == "skills_reloaded"
    ]
    assert reloads == [
        (1, ["custom@gamma"], ["custom@alpha", "custom@beta"], []),
        (2, [], [], ["custom@alpha"]),
    ]
    deactivated = [
        (e["tick"], e["agent_id"], e["skill"], e["reason"])
        for e in events
        if e["type"] == "skill_deactivated"
    ]
    assert deactivated == [
        (2, f"people-{i:05d}", "custom@alpha", "removed from its skills folder")
        for i in range(AGENTS)
    ]
    run = open_run(run_dir)
    for agent_dir in sorted((run_dir / "agents").iterdir()):
        agent = run.agent(agent_dir.name)
        prompts = helpers.step_prompts(agent)
        assert "gamma" not in prompts[0] and "Beta body, first edition." in prompts[0]
        assert "Use for the gamma hobby." in prompts[1]
        assert "Use for the beta errands, second edition." in prompts[1]
        assert "Beta body, second edition with more words." in prompts[1]
        assert "first edition" not in prompts[1]
        assert "Alpha body." in prompts[1]
        for tick in (2, 3):
            assert "alpha" not in prompts[tick]
            assert "Beta body, second edition with more words." in prompts[tick]
        trace = list(agent.trace())
        hooks = {
            t["tick"]: [
                (h["skill"], h["ok"], h["text"]) for h in t["hooks"] if h["hook"] == "pre_step"
            ]
            for t in trace
            if "hooks" in t
        }
        assert hooks == {
            0: [("custom@alpha", True, "alpha v1")],
            1: [("custom@alpha", True, "v2")],
            2: [],
            3: [],
        }
        # The deleted skill's hook ran on ticks 0 and 1 only.
        assert (agent_dir / "state" / "alpha.txt").read_text().split() == ["0", "1"]
        active = agent.skills()["active"]
        assert "custom@beta" in active and "custom@alpha" not in active

    assert main(["inspect", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert ": added custom@gamma; changed custom@alpha, custom@beta\n" in out
    assert ": removed custom@alpha\n" in out
