"""Honest counts: metrics.json, the run's summary line and ``agentsim inspect`` count the same
problems (failed hooks, quarantines, gate failures) and gate retries, from real runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.run.engine import Engine
from agentsim.testing import ChatRequest, FunctionModel, tool_call
from tests.unit import helpers

_YAML = """
name: counts
seed: 3
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: 2
    profile: {{template: generic}}
    skills: {{default: [{skill}], disabled: [daily-guidance]}}
skills: {{builtin: false, paths: [skills]}}
agent: {{max_hook_retries: {retries}}}
model: {{backend: scripted}}
output: {{dir: ws, formats: [jsonl]}}
"""


def _skill(root: Path, name: str, hook: str, code: str, *, timeout: float = 5) -> None:
    helpers.write_skill(
        root / "skills",
        name,
        description=f"Use when testing {name}.",
        front=f"timeout: {timeout}\nhooks:\n  {hook}: scripts/hook.py\n",
        body="Follow the hook.\n",
        files={"scripts/hook.py": code},
        exist_ok=False,
    )


def _run(
    tmp: Path, capsys: pytest.CaptureFixture[str], *, skill: str, ticks: int, retries: int = 1
) -> tuple[int, str, Path]:
    exp = tmp / "exp.yaml"
    exp.write_text(_YAML.format(skill=skill, ticks=ticks, retries=retries), encoding="utf-8")
    out = tmp / "run"
    code = main(["run", str(exp), "--out", str(out)])
    return code, capsys.readouterr().out, out


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text("utf-8").splitlines()]


def _inspect(run: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    assert main(["inspect", str(run), *extra]) == 0
    return capsys.readouterr().out


def test_a_hook_past_its_timeout_is_counted_and_its_quarantine_shown_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skill(
        tmp_path,
        "slow-hook",
        "pre_step",
        "import asyncio\n\nasync def entrypoint(argv, ctx):\n    await asyncio.sleep(30)\n",
        timeout=0.1,
    )
    code, out, run = _run(tmp_path, capsys, skill="slow-hook", ticks=4)
    assert code == 3  # every hook call failed: over agent.max_hook_failure_share
    assert "8 of 8 hook calls failed (100%), more than agent.max_hook_failure_share" in out
    events = _events(run)
    failed = [e for e in events if e["type"] == "hook_failed"]
    # 2 agents x 4 ticks: two overruns at tick 0, then the third gets the script quarantined
    # (tick 1) and the other call of that tick is abandoned; later calls are refused at once.
    assert len(failed) == 8
    assert sum(e["timed_out"] for e in failed) == 3
    assert all(e["skill"] == "custom@slow-hook" and e["hook"] == "pre_step" for e in failed)
    (quarantine,) = [e for e in events if e["type"] == "skill_quarantined"]
    assert quarantine["skill"] == "custom@slow-hook"
    assert quarantine["script"] == "scripts/hook.py" and quarantine["tick"] == 1

    metrics = json.loads((run / "metrics.json").read_text("utf-8"))
    assert metrics["problems"]["hook_failed"] == 8
    assert metrics["problems"]["skill_quarantined"] == 1
    assert metrics["errors"] == sum(metrics["problems"].values()) == 9
    assert "errors=9" in out
    assert "problems: hook_failed 8, skill_quarantined 1" in out

    data = json.loads(_inspect(run, capsys, "--json"))
    assert data["errors"] == {"hook_failed": 8, "skill_quarantined": 1}
    assert data["error_total"] == metrics["errors"]
    assert data["quarantined"] == [
        {"tick": 1, "agent_id": quarantine["agent_id"], "skill": "custom@slow-hook",
         "script": "scripts/hook.py"}
    ]  # fmt: skip
    text = _inspect(run, capsys)
    assert "errors       9: hook_failed 8, skill_quarantined 1" in text
    assert "quarantined  custom@slow-hook script scripts/hook.py at tick 1" in text


_ALWAYS_RETRY = (
    "import json\n\ndef entrypoint(argv, ctx):\n"
    '    return json.dumps({"decision": "retry", "feedback": "Not good enough."})\n'
)


def test_gate_retries_are_counted_in_the_summary_and_in_model_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skill(tmp_path, "strict-gate", "post_step", _ALWAYS_RETRY)
    code, out, run = _run(tmp_path, capsys, skill="strict-gate", ticks=3, retries=1)
    assert code == 0
    metrics = json.loads((run / "metrics.json").read_text("utf-8"))
    steps = metrics["agent_steps"]
    assert steps == 6
    # Every step: one retry, then the gate gives up.
    assert metrics["gate_retries"] == steps
    assert metrics["problems"]["hook_gate_failed"] == steps
    assert f"(gate retries {steps})" in out and f"hook_gate_failed {steps}" in out
    # Each round calls the model at least once: the retries are in the model calls.
    assert metrics["model_calls"] >= 2 * steps
    assert metrics["model"]["calls"] == metrics["model_calls"]

    data = json.loads(_inspect(run, capsys, "--json"))
    assert data["gate_retries"] == steps and data["errors"] == {"hook_gate_failed": steps}
    assert data["model_calls"] == metrics["model_calls"]
    assert "gate retries 6 (each re-sent a step's full prompt)" in _inspect(run, capsys)


def test_metrics_keep_every_tick_and_the_scripted_models_block(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skill(tmp_path, "quiet", "pre_step", "def entrypoint(argv, ctx):\n    return 'ok'\n")
    code, out, run = _run(tmp_path, capsys, skill="quiet", ticks=3)
    assert code == 0 and "errors=0" in out and "problems:" not in out
    metrics = json.loads((run / "metrics.json").read_text("utf-8"))
    secs = metrics["tick_seconds"]
    assert len(secs) == 3 and all(s > 0 for s in secs)
    assert metrics["tick_seconds_max"] == max(secs)
    model = metrics["model"]
    assert model["calls"] == metrics["model_calls"] > 0
    assert model["prompt_tokens"] == metrics["prompt_tokens"]
    assert model["errors"] == 0 and model["hosts"] == 1
    assert model["latency"]["count"] == model["calls"]


async def test_a_script_past_its_timeout_is_quarantined_once_in_a_real_run(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "skills" / "slow-script"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: slow-script\ndescription: Use when testing slow scripts.\ntimeout: 0.1\n"
        "script: scripts/run.py\n---\nRun the script.\n",
        encoding="utf-8",
    )
    (folder / "scripts" / "run.py").write_text(
        "import asyncio\n\nasync def entrypoint(argv, ctx):\n    await asyncio.sleep(30)\n",
        encoding="utf-8",
    )

    def brain(request: ChatRequest) -> Any:
        if not request.calls:
            return tool_call("execute_skill_script", name="slow-script", args=[])
        return tool_call("finish", action="waited")

    cfg = parse_experiment(_YAML.format(skill="slow-script", ticks=3, retries=1), base_dir=tmp_path)
    executor = LocalExecutor(model_factory=lambda spec: FunctionModel(brain))
    summary = await Engine(cfg, run_dir=tmp_path / "run", executor=executor).run()
    assert summary.status == "completed with problems"
    # The tool calls say the same: the overruns and the call abandoned when its script was
    # quarantined failed; the last tick's two calls were refused (quarantined).
    assert summary.problems == [
        "6 of 6 script calls failed (100%), more than agent.max_script_failure_share=0.25",
        "6 of 12 tool calls refused or failed (50%), more than agent.max_tool_failure_share=0.25",
    ]
    by_tool = summary.metrics["tool_calls_by_tool"]["execute_skill_script"]
    assert by_tool == {"ok": 0, "refused": 2, "failed": 4}
    events = _events(tmp_path / "run")
    failed = [e for e in events if e["type"] == "script_called" and e["ok"] is False]
    assert len(failed) == 6  # 2 agents x 3 ticks: 3 overruns, then refusals
    (q,) = [e for e in events if e["type"] == "skill_quarantined"]
    assert (q["skill"], q["script"], q["hook"]) == ("custom@slow-script", "scripts/run.py", None)
    assert summary.metrics["problems"]["script_failed"] == 6
    assert summary.metrics["problems"]["skill_quarantined"] == 1
    assert summary.metrics["errors"] == 7
