"""How a run ends, through ``agentsim run`` and ``agentsim inspect``: why it stopped
(``reason``), failure shares over their limits ("completed with problems", exit code 3),
the last lines of the main job, and hooks that read the agent's current files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.inspect.run import open_run
from agentsim.view import _api
from tests.unit import helpers

_YAML = """
name: outcomes
seed: 2
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
workflow: {workflow}
agents:
  - group: people
    count: 4
    profile: {{template: generic}}
    skills: {{default: [{skill}], disabled: [daily-guidance]}}
skills: {{builtin: false, paths: [skills]}}
agent: {{max_hook_retries: 0{agent}}}
model: {{backend: scripted}}
environment: [{{module: city}}]
output: {{dir: ws, formats: [jsonl], flush_every: {flush}, checkpoint_every: 1}}
"""

_FAILING_HOOK = "def entrypoint(argv, ctx):\n    raise RuntimeError('broken hook')\n"


def _hook(root: Path, name: str, code: str) -> None:
    helpers.write_skill(
        root / "skills",
        name,
        description=f"Use when testing {name}.",
        front="hooks:\n  pre_step: scripts/hook.py\n",
        body="Follow the hook.\n",
        files={"scripts/hook.py": code},
    )


def _experiment(
    tmp: Path, *, skill: str, workflow: str = "[{run: {ticks: 2}}]", agent: str = "", flush: int = 1
) -> Path:
    exp = tmp / "exp.yaml"
    text = _YAML.format(skill=skill, workflow=workflow, agent=agent, flush=flush)
    exp.write_text(text, encoding="utf-8")
    return exp


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _manifest(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "manifest.json").read_text("utf-8"))
    return data


def test_a_run_that_fails_records_why_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _hook(tmp_path, "quiet", "def entrypoint(argv, ctx):\n    return 'ok'\n")
    # Opening a place that is not closed only fails when the step runs (tick 1).
    workflow = (
        "[{run: {ticks: 1}}, {intervene: {env: city, action: open_place, "
        "args: {place: park-1}}}, {run: {ticks: 1}}]"
    )
    exp = _experiment(tmp_path, skill="quiet", workflow=workflow)
    run = tmp_path / "run"
    code, out, err = _cli(capsys, "run", str(exp), "--out", str(run))
    assert code == 1
    why = "city.open_place: 'park-1' is not closed; nothing to open (workflow.1.intervene, tick 1)"
    assert err.strip().splitlines()[-1] == f"error: {why}"
    manifest = _manifest(run)
    assert manifest["status"] == "failed" and manifest["reason"] == why
    last = json.loads((run / "events.jsonl").read_text("utf-8").splitlines()[-1])
    assert (last["type"], last["status"], last["reason"]) == ("run_end", "failed", why)
    code, out, _ = _cli(capsys, "inspect", str(run))
    assert code == 0 and f"  reason       {why}\n" in out
    row = _api.progress(open_run(run))
    assert (row["state"], row["reason"], row["over_limits"]) == ("failed", why, [])


def test_failed_hooks_past_their_limit_complete_with_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _hook(tmp_path, "broken", _FAILING_HOOK)
    run = tmp_path / "run"
    code, out, err = _cli(
        capsys, "run", str(_experiment(tmp_path, skill="broken")), "--out", str(run)
    )
    assert code == 3
    problem = "8 of 8 hook calls failed (100%), more than agent.max_hook_failure_share=0.05"
    assert out.startswith(f"completed with problems: {run}")
    assert f"  problems over their limits: {problem}\n" in out
    assert f"error: {problem}; see `agentsim inspect {run}` (exit code 3)" in err
    manifest = _manifest(run)
    assert manifest["status"] == "completed with problems"
    assert manifest["problems"] == [problem] and manifest["reason"] is None
    code, text, _ = _cli(capsys, "inspect", str(run))
    assert "  state        completed with problems" in text
    assert f"  over limit   {problem}\n" in text
    row = _api.progress(open_run(run))
    assert (row["state"], row["over_limits"]) == ("completed with problems", [problem])
    # A completed run, even with problems, is not resumed.
    code, _, err = _cli(capsys, "run", "--resume", str(run))
    assert code == 2 and "already completed; nothing to resume" in err


def test_the_limits_are_configurable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _hook(tmp_path, "broken", _FAILING_HOOK)
    exp = _experiment(tmp_path, skill="broken", agent=", max_hook_failure_share: 1")
    run = tmp_path / "run"
    code, out, err = _cli(capsys, "run", str(exp), "--out", str(run))
    assert code == 0 and out.startswith("completed: ") and "error:" not in err
    assert _manifest(run)["status"] == "completed" and _manifest(run)["problems"] == []
    exp.write_text(exp.read_text().replace("share: 1", "share: 2"))
    code, _, err = _cli(capsys, "run", str(exp), "--out", str(tmp_path / "again"))
    assert code == 2
    assert "agent.max_hook_failure_share" in err and "less than or equal to 1" in err


# The hook fails unless the agent's memory.jsonl already holds the message the workflow
# sent before this tick: with flush_every 4, only a write before the hook makes it so.
_READS_MEMORY = """
import json

def entrypoint(argv, ctx):
    path = ctx.workspace_root / "memory.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    kinds = [json.loads(x)["kind"] for x in lines]
    if ctx.tick >= 1 and "message" not in kinds:
        raise RuntimeError(f"tick {ctx.tick}: no message in memory.jsonl ({kinds})")
    return f"{len(lines)} memory lines"
"""


def test_hooks_read_the_agents_current_memory_whatever_flush_every_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _hook(tmp_path, "reader", _READS_MEMORY)
    workflow = (
        "[{run: {ticks: 1}}, {intervene: {message: 'The park is closed.'}}, {run: {ticks: 2}}]"
    )
    exp = _experiment(tmp_path, skill="reader", workflow=workflow, flush=4)
    run = tmp_path / "run"
    code, out, _ = _cli(capsys, "run", str(exp), "--out", str(run), "--json")
    assert code == 0, out
    events = [json.loads(x) for x in (run / "events.jsonl").read_text("utf-8").splitlines()]
    assert [e for e in events if e["type"] == "hook_failed"] == []
    assert json.loads(out)["metrics"]["hook_calls"] == 12


def test_the_last_lines_say_what_ran_and_what_to_do_next(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _hook(tmp_path, "quiet", "def entrypoint(argv, ctx):\n    return 'ok'\n")
    workflow = (
        "[{run: {ticks: 1}}, {intervene: {env: city, action: close_place, args: {place: park-1}}},"
        " {survey: {name: mood, question: 'How are you?', agents: all}}, {run: {ticks: 1}}]"
    )
    run = tmp_path / "run"
    code, out, _ = _cli(
        capsys,
        "run",
        str(_experiment(tmp_path, skill="quiet", workflow=workflow)),
        "--out",
        str(run),
    )
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[-2] == (
        f"  ran: intervention city.close_place (workflow.1); survey mood -> "
        f"{run / 'surveys' / 'mood'}.jsonl"
    )
    assert (
        lines[-1]
        == f"next: agentsim inspect {run}  |  agentsim report {run}  |  agentsim view {run}"
    )


def test_a_closed_pipe_in_process_returns_141(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _hook(tmp_path, "quiet", "def entrypoint(argv, ctx):\n    return 'ok'\n")
    run = tmp_path / "run"
    assert main(["run", str(_experiment(tmp_path, skill="quiet")), "--out", str(run)]) == 0
    capsys.readouterr()
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    with os.fdopen(write, "w") as stream:
        monkeypatch.setattr(sys, "stdout", stream)
        assert main(["inspect", str(run), "--json"]) == 141
        monkeypatch.undo()
        stream.write("more")  # stdout now goes to /dev/null: later writes succeed
        stream.flush()


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["inspect", "{run}"],
        ["inspect", "{run}", "--json"],
        ["inspect", "{run}", "--agent", "people-00000"],
        ["skills", "list"],
    ],
    ids=["inspect", "inspect-json", "inspect-agent", "skills-list"],
)
def test_a_closed_pipe_ends_quietly(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _hook(tmp_path, "quiet", "def entrypoint(argv, ctx):\n    return 'ok'\n")
    run = tmp_path / "run"
    assert main(["run", str(_experiment(tmp_path, skill="quiet")), "--out", str(run)]) == 0
    capsys.readouterr()
    cmd = [sys.executable, "-m", "agentsim.cli", *(a.format(run=run) for a in argv)]
    # The reader goes away before the command writes (``agentsim inspect RUN | head -0``).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert err == ""
