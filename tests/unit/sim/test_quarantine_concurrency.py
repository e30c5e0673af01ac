"""Quarantine keeps up with concurrency: a hook that never returns costs a tick one timeout,
whatever the agent count (calls already waiting when it is quarantined are abandoned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsim.cli import main
from tests.unit import helpers

_YAML = """
name: hang
seed: 1
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 2
agents:
  - group: people
    count: 1000
    profile: {template: generic}
    skills: {default: [hang-hook], disabled: [daily-guidance]}
skills: {builtin: false, paths: [skills]}
model: {backend: scripted}
output: {dir: ws, formats: [jsonl]}
"""


@pytest.mark.slow
def test_a_hanging_hook_costs_a_tick_of_1000_agents_one_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = tmp_path / "release"
    helpers.write_skill(
        tmp_path / "skills",
        "hang-hook",
        description="Use when testing a hook that hangs.",
        front="timeout: 2\nhooks:\n  pre_step: scripts/hook.py\n",
        files={
            # Never returns within the run (a sync entrypoint: it holds a worker thread);
            # released at the end so that the written-off threads end with the test.
            "scripts/hook.py": "import os, time\n\ndef entrypoint(argv, ctx):\n"
            f"    while not os.path.exists({str(release)!r}):\n"
            "        time.sleep(0.05)\n",
        },
    )
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML, encoding="utf-8")
    try:
        code = main(["run", str(exp), "--out", str(tmp_path / "run")])
    finally:
        release.touch()
    out = capsys.readouterr().out
    # Every hook call failed: past agent.max_hook_failure_share, "completed with problems".
    assert code == 3
    assert "2,000 of 2,000 hook calls failed (100%)" in out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text("utf-8"))
    tick0, _ = metrics["tick_seconds"]
    # One 2 s timeout, not 1000 / 8 workers of them (250 s): a guard far from both, since a
    # loaded machine may take a while over 1000 agents. The events below say it exactly.
    assert tick0 < 60, metrics["tick_seconds"]
    events = [
        json.loads(x) for x in (tmp_path / "run" / "events.jsonl").read_text("utf-8").splitlines()
    ]
    failed = [e for e in events if e["type"] == "hook_failed"]
    assert len(failed) == 2000  # every agent, both ticks: no hook call ever succeeded
    timed_out = [e for e in failed if e["timed_out"]]
    assert 3 <= len(timed_out) <= 20  # only the calls running at the deadline overran
    assert all(e["tick"] == 0 for e in timed_out)
    abandoned = [e for e in failed if e["tick"] == 0 and not e["timed_out"]]
    assert abandoned
    assert all("quarantined after 3 timeouts" in e["error"] for e in abandoned)
    # Tick 1 waits for no timeout at all: every call is refused before it runs.
    refused = [e for e in failed if e["tick"] == 1]
    assert len(refused) == 1000
    assert all(
        not e["timed_out"]
        and "is quarantined after 3 timeouts; it is not called again" in e["error"]
        for e in refused
    )
    assert [e["tick"] for e in events if e["type"] == "skill_quarantined"] == [0]
