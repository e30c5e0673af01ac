"""What skill scripts print never reaches the command line: `run --json` stays one JSON
document, and the prints are kept (capped) in the agent's trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsim import open_run
from agentsim.cli import main

_YAML = """
name: noisy
seed: 3
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 2
agents:
  - group: people
    count: 3
    profile: {template: generic}
    skills: {default: [noisy], disabled: [daily-guidance]}
skills: {builtin: false, paths: [skills]}
model: {backend: scripted}
output: {dir: ws, formats: [jsonl]}
"""

_HOOK = """import sys


def entrypoint(argv, ctx):
    print("hook says hello to", ctx.agent_id)
    print("and warns", file=sys.stderr)
    print("{not json")
    return "all quiet"
"""


def test_prints_of_hooks_stay_out_of_json_output_and_go_to_the_trace(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "skills" / "noisy"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: noisy\ndescription: Use when testing prints.\n"
        "hooks:\n  pre_step: scripts/hook.py\n---\nListen to the hook.\n",
        encoding="utf-8",
    )
    (folder / "scripts" / "hook.py").write_text(_HOOK, encoding="utf-8")
    (tmp_path / "exp.yaml").write_text(_YAML, encoding="utf-8")
    out = tmp_path / "run"

    code = main(["run", str(tmp_path / "exp.yaml"), "--out", str(out), "--json"])
    captured = capfd.readouterr()

    assert code == 0
    summary = json.loads(captured.out)  # the whole of stdout is one JSON document
    assert summary["status"] == "completed" and summary["metrics"]["errors"] == 0
    assert "hook says hello" not in captured.err and "and warns" not in captured.err
    run = open_run(out)
    logs = [
        entry
        for aid in run.agents
        for row in run.agent(aid).trace()
        for entry in row.get("script_logs", [])
    ]
    assert len(logs) == 6  # 3 agents x 2 ticks
    first = logs[0]
    assert first["skill"].endswith("@noisy") and first["hook"] == "pre_step"
    assert "hook says hello to people-" in first["log"] and "and warns" in first["log"]
