"""What a study asks of one run: a checkpoint at its fork ticks that later stops do not
replace, and a run in a child process (``child_main``) that reports and stops like
``agentsim run``."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentsim.config.experiment import parse_experiment
from agentsim.run.engine import Engine
from agentsim.study.runner import child_main

EXPERIMENT = """\
name: points
seed: 3
clock: {start: "2026-03-02T08:00:00", tick: 1h}
workflow:
  - run: {ticks: 3}
  - intervene: {env: social, action: broadcast, args: {text: "News.", stance: 0.4}}
  - run: {ticks: 2}
agents:
  - {group: people, count: 3, skills: {default: [social-feed], disabled: [daily-guidance]}}
model: {backend: scripted}
environment: [{module: social, follow_k: 2}]
"""


def _engine(tmp_path: Path, run_dir: Path, **kw: Any) -> Engine:
    config = parse_experiment(EXPERIMENT, base_dir=tmp_path)
    return Engine(config, run_dir=run_dir, checkpoint_at=(3,), **kw)


def _pos(run_dir: Path, tick: int) -> list[int]:
    engine = json.loads((run_dir / f"checkpoints/tick-{tick:08d}/engine.json").read_text())
    pos: list[int] = engine["pos"]
    return pos


@pytest.mark.slow
def test_a_fork_tick_keeps_its_first_checkpoint_and_resume_writes_the_same_events(
    tmp_path: Path,
) -> None:
    whole = tmp_path / "whole"
    summary = asyncio.run(_engine(tmp_path, whole).run())
    assert summary.status == "completed"
    # checkpoint_every is 0: the one checkpoint is the fork tick's, at the end of the run step.
    assert sorted(p.name for p in (whole / "checkpoints").iterdir()) == ["tick-00000003"]
    assert _pos(whole, 3) == [0, 3]
    # A stop after the intervention at tick 3 keeps that checkpoint (the fork's start) ...
    cut = tmp_path / "cut"
    stopped = asyncio.run(_engine(tmp_path, cut, max_ticks=3).run())
    assert stopped.status == "stopped"
    assert _pos(cut, 3) == [0, 3]
    # ... and the resume from it does the intervention again, as the whole run did.
    resumed = asyncio.run(_engine(tmp_path, cut).run(resume=True))
    assert resumed.status == "completed"
    assert (cut / "events.jsonl").read_bytes() == (whole / "events.jsonl").read_bytes()


def _job(tmp_path: Path, run_dir: Path, mode: str = "start") -> str:
    config = parse_experiment(EXPERIMENT, base_dir=tmp_path)
    import yaml

    return json.dumps(
        {
            "run_dir": str(run_dir),
            "config": yaml.safe_dump(config.resolved_dict(), sort_keys=False),
            "source": "test",
            "base_dir": str(tmp_path),
            "mode": mode,
            "fork": None,
            "checkpoint_at": [3],
            "sample": 0,
        }
    )


def _child(
    monkeypatch: pytest.MonkeyPatch, job: str, *, close: bool = False
) -> tuple[int, list[Any]]:
    """``child_main`` with ``job`` on a stdin pipe that stays open (a live study) or closes
    after the job (the study died)."""
    read, write = os.pipe()
    os.write(write, (job + "\n").encode())
    if close:
        os.close(write)
    stdin = os.fdopen(read, "r")
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", stdin)
    monkeypatch.setattr(sys, "stdout", out)
    try:
        code = child_main()
    finally:
        if not close:
            os.close(write)  # first: the child's stdin watcher then sees the end and lets go
        deadline = time.monotonic() + 60  # a guard: the watcher ends as soon as it sees the end
        while time.monotonic() < deadline:
            if not any(t.name == "study-stdin" for t in threading.enumerate()):
                break
            time.sleep(0.01)
        stdin.close()
    return code, [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_child_runs_its_job_and_reports_ticks_and_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    code, lines = _child(monkeypatch, _job(tmp_path, run_dir))
    assert code == 0
    assert {"tick": 5, "total": 5} in lines
    assert lines[-1] == {"status": "completed", "reason": None, "problems": []}
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "completed"


def test_the_child_stops_with_a_checkpoint_when_the_study_goes_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    code, lines = _child(monkeypatch, _job(tmp_path, run_dir), close=True)
    assert code == 143
    assert lines[-1]["status"] == "interrupted"
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
    # The study's resume goes on from the checkpoint the stop wrote.
    code, lines = _child(monkeypatch, _job(tmp_path, run_dir, mode="resume"))
    assert code == 0 and lines[-1]["status"] == "completed"


def test_the_child_reports_a_run_that_cannot_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "x").write_text("taken")
    code, lines = _child(monkeypatch, _job(tmp_path, tmp_path / "run"))
    assert code == 2
    assert "already exists and is not empty" in lines[-1]["error"]
