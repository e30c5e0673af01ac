"""``AGENT.json``: current whenever the agent's skill code runs, written atomically, and not
written for steps that run none."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentsim.agent.agent_json import agent_json
from agentsim.config.experiment import parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.run.engine import Engine
from agentsim.testing import ChatRequest, FunctionModel, tool_call
from tests.unit import helpers

YAML = """
name: self-file
seed: 2
clock: {start: "2026-03-02T06:00:00", tick: 30m}
ticks: 3
agents:
  - {group: g, count: 1, ids: numeric, profile: {template: worker}}
skills: {builtin: false, paths: [skills]}
model: {backend: scripted}
output: {dir: ws, formats: [jsonl]}
"""

PROBE = """\
import json


def entrypoint(argv, ctx):
    me = json.loads((ctx.workspace_root / "AGENT.json").read_text())
    return json.dumps([me["current_time"], me["step_count"], me["skills"]["activated"]])
"""


def test_agent_json_is_current_for_skill_code_and_skipped_otherwise(tmp_path: Path) -> None:
    helpers.write_skill(
        tmp_path / "skills",
        "probe",
        front="script: scripts/probe.py\n",
        files={"scripts/probe.py": PROBE},
    )
    seen: list[str] = []
    written: list[bool] = []
    workspace = tmp_path / "run" / "agents" / "0"

    def brain(request: ChatRequest) -> Any:
        calls = [c.name for c in request.calls]
        tick = request.last_user.split("time: ", 1)[1][:19]
        if not calls:
            written.append((workspace / "AGENT.json").exists())
        if tick.endswith("06:00:00") or "execute_skill_script" in calls:
            if "execute_skill_script" in calls:
                seen.append(request.results[-1])
            return tool_call("finish", action="done")
        if "activate_skill" not in calls and tick.endswith("06:30:00"):
            return tool_call("activate_skill", name="probe")
        return tool_call("execute_skill_script", name="probe", args=[])

    cfg = parse_experiment(YAML, base_dir=tmp_path)
    model = FunctionModel(brain)
    executor = LocalExecutor(model_factory=lambda spec: model)
    summary = asyncio.run(Engine(cfg, run_dir=tmp_path / "run", executor=executor).run())
    assert summary.status == "completed"
    # Step 1 runs no skill code: nothing is written. Step 2 activates the skill mid-step and
    # calls its script: the file is current, activation included. Step 3 again.
    assert written == [False, False, True]
    assert [json.loads(s) for s in seen] == [
        ["2026-03-02T06:30:00", 2, ["custom@probe"]],
        ["2026-03-02T07:00:00", 3, ["custom@probe"]],
    ]
    assert not list(workspace.glob(".AGENT.json.tmp-*"))


def test_agent_json_fields_follow_agentsociety2_names(tmp_path: Path) -> None:
    content = agent_json(
        agent_id="7",
        group="g",
        profile={"name": "Ann", "occupation": "nurse"},
        persona="A nurse.",
        workspace=tmp_path,
        time_iso="2026-03-02T06:00:00",
        tick=0,
        step_count=1,
        visible=["custom@b", "custom@a"],
        activated=["custom@b"],
    )
    assert content == {
        "schema_version": 1,
        "agent_class": "agentsim.Agent",
        "agent_id": "7",
        "id": "7",
        "name": "Ann",
        "group": "g",
        "current_time": "2026-03-02T06:00:00",
        "tick": 0,
        "step_count": 1,
        "profile": {"name": "Ann", "occupation": "nurse"},
        "persona": "A nurse.",
        "workspace": {"root": str(tmp_path), "agent_json_path": "AGENT.json"},
        "skills": {"visible": ["custom@a", "custom@b"], "activated": ["custom@b"]},
    }
    unnamed = agent_json(
        agent_id="8",
        group="g",
        profile={},
        persona="",
        workspace=tmp_path,
        time_iso="2026-03-02T06:00:00",
        tick=0,
        step_count=1,
        visible=[],
        activated=[],
    )
    assert unnamed["name"] == "8"
