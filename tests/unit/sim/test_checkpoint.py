"""Checkpoints every k ticks and ``agentsim run --resume`` on the local executor: a resumed
run ends exactly like an uninterrupted one (events, memories, traces, skill state)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import load_experiment
from agentsim.errors import CheckpointError
from agentsim.inspect import open_run
from agentsim.run.checkpoints import latest_checkpoint, rewind, write_checkpoint
from agentsim.run.engine import Engine, Progress
from agentsim.run.workspace import RunWorkspace
from tests.unit import helpers

SMALL = helpers.FIXTURES / "experiments" / "small.yaml"


def agent_files(run_dir: Path) -> dict[str, object]:
    """What a resume must reproduce, read through ``open_run``: memory bytes, trace steps
    (traces hold wall-clock timings, so only their content order is compared), the system
    prompt of every step, the last skills record, skill state files."""
    out: dict[str, object] = {}
    run = open_run(run_dir)
    for aid in run.agents:
        agent = run.agent(aid)
        out[f"{aid}/memory"] = (agent.root / "memory.jsonl").read_bytes()
        trace = list(agent.trace())
        out[f"{aid}/trace"] = [(t["tick"], t.get("action"), t.get("skills_active")) for t in trace]
        out[f"{aid}/prompts"] = [
            agent.prompt_at(t["tick"]).system for t in trace if t.get("system_sha")
        ]
        out[f"{aid}/skills"] = agent.skills()
        state = agent.root / "state"
        out[f"{aid}/state"] = sorted(
            (str(p.relative_to(state)), p.read_bytes()) for p in state.rglob("*") if p.is_file()
        )
    return out


def assert_same_run(ours: Path, reference: Path) -> None:
    assert (ours / "events.jsonl").read_bytes() == (reference / "events.jsonl").read_bytes()
    assert agent_files(ours) == agent_files(reference)
    assert (ours / "surveys" / "check.jsonl").read_bytes() == (
        reference / "surveys" / "check.jsonl"
    ).read_bytes()
    assert json.loads((ours / "manifest.json").read_text())["status"] == "completed"
    ours_m = json.loads((ours / "metrics.json").read_text())
    ref_m = json.loads((reference / "metrics.json").read_text())
    for key in ("ticks", "agent_steps", "model_calls", "events", "prompt_tokens", "errors"):
        assert ours_m[key] == ref_m[key], key


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    asyncio.run(Engine(load_experiment(SMALL, environ={}), run_dir=run_dir).run())
    return run_dir


@pytest.mark.slow
def test_a_crashed_run_resumes_to_the_same_end(reference: Path, tmp_path: Path) -> None:
    class Crash(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 5:
            raise Crash("the machine went away")

    run_dir = tmp_path / "run"
    cfg = load_experiment(SMALL, environ={})
    with pytest.raises(Crash, match="the machine went away"):
        asyncio.run(Engine(cfg, run_dir=run_dir, progress=progress).run())
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "failed"
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == [
        "tick-00000002",
        "tick-00000004",
    ]
    # A torn line, as a process killed mid-write leaves it.
    with open(run_dir / "events.jsonl", "a", encoding="utf-8") as f:
        f.write('{"tick": 5, "type": "half')
    assert main(["run", "--resume", str(run_dir), "--json"]) == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["resumed"] is True
    assert_same_run(run_dir, reference)


@pytest.mark.slow
def test_an_interrupted_run_resumes_after_its_workflow_steps(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Stopping after tick 3 lands after the intervene and survey steps and between two
    # periodic checkpoints: the stop itself must checkpoint, with those steps done.
    stop = threading.Event()

    def progress(p: Progress) -> None:
        if p.tick == 3:
            stop.set()

    run_dir = tmp_path / "run"
    cfg = load_experiment(SMALL, environ={})
    summary = asyncio.run(Engine(cfg, run_dir=run_dir, progress=progress, stop=stop).run())
    assert summary.status == "interrupted" and summary.ticks == 3
    assert (run_dir / "checkpoints" / "tick-00000003").is_dir()
    assert main(["run", "--resume", str(run_dir)]) == 0
    assert capsys.readouterr().out.startswith(f"completed: {run_dir}  ticks=6 agents=20")
    assert_same_run(run_dir, reference)


def test_resume_needs_a_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def progress(p: Progress) -> None:
        raise RuntimeError("crash at the first tick")

    cfg = load_experiment(SMALL, environ={})
    with pytest.raises(RuntimeError, match="crash at the first tick"):
        asyncio.run(Engine(cfg, run_dir=tmp_path / "r", progress=progress).run())
    assert main(["run", "--resume", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "has no checkpoint to resume from; set output.checkpoint_every" in err


def folder_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_a_failed_resume_changes_nothing(
    reference: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "copy"
    shutil.copytree(reference, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["status"] = "failed"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    # What a run killed while writing a checkpoint leaves: only a working resume removes it.
    partial = run_dir / "checkpoints" / ".tmp-00000007-4242"
    partial.mkdir()
    (partial / "engine.json").write_text("{")
    config = run_dir / "config.yaml"
    original = config.read_text()
    config.write_text(original.replace("seed: 5", "seed: 6"))
    before = folder_bytes(run_dir)

    assert main(["run", "--resume", str(run_dir)]) == 2
    assert "tick-00000006 was written by a different configuration" in capsys.readouterr().err
    assert folder_bytes(run_dir) == before

    config.write_text(original)
    last = run_dir / "checkpoints" / "tick-00000006"
    cfg = load_experiment(config, environ={})
    damages = {
        "agents.json.gz": "{not json",
        "engine.json": json.dumps({"config_hash": cfg.config_hash()}),
        "agent_state.tar": "",  # cut short: its members are gone
    }
    for name, text in damages.items():
        saved = (last / name).read_bytes()
        if name == "agent_state.tar":
            (last / name).write_bytes(saved[: len(saved) // 3])
        else:
            (last / name).write_text(text)
        before = folder_bytes(run_dir)
        with pytest.raises(CheckpointError, match=r"tick-00000006 cannot be read .*delete that"):
            asyncio.run(Engine(cfg, run_dir=run_dir).run(resume=True))
        assert folder_bytes(run_dir) == before, name
        (last / name).write_bytes(saved)

    assert main(["run", "--resume", str(run_dir), "--json"]) == 0
    assert not partial.exists()
    assert_same_run(run_dir, reference)


@pytest.mark.slow
def test_kill_9_then_resume_equals_an_uninterrupted_run(reference: Path, tmp_path: Path) -> None:
    # The same experiment, slowed down by more ticks so that the kill lands mid-run.
    env = {**os.environ, "AGENTSIM_WORKFLOW": "[{run: {ticks: 16}}]"}
    env.pop("PYTEST_CURRENT_TEST", None)
    long_ref = tmp_path / "ref"
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "agentsim.cli", "run", str(SMALL), "--json", "--out"]
    proc = subprocess.Popen([*cmd, str(run_dir)], env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180  # a guard: a loaded machine starts slowly
        while not (run_dir / "checkpoints" / "tick-00000004").is_dir():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    subprocess.run([*cmd, str(long_ref)], env=env, check=True, stdout=subprocess.DEVNULL)
    resumed = subprocess.run(
        [sys.executable, "-m", "agentsim.cli", "run", "--resume", str(run_dir), "--json"],
        env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert (run_dir / "events.jsonl").read_bytes() == (long_ref / "events.jsonl").read_bytes()
    assert agent_files(run_dir) == agent_files(long_ref)


def _tree(root: Path) -> dict[str, bytes | None]:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def test_rewind_puts_agent_state_back_and_leaves_unchanged_files_alone(tmp_path: Path) -> None:
    ws = RunWorkspace.create(tmp_path / "run")
    (ws.root / "events.jsonl").write_text("")
    a, b, c, d = (ws.agents_dir / n / "state" for n in ("a-1", "a-2", "a-3", "a-4"))
    (a / "plans" / "2026-03-02").mkdir(parents=True)
    (a / "plans" / "2026-03-02" / "story.yaml").write_text("segments: [1]\n")
    (a / "notes.txt").write_bytes(b"\x00binary\xff")
    (b / "empty").mkdir(parents=True)
    (ws.agents_dir / "a-3").mkdir()  # no state at the checkpoint
    d.mkdir(parents=True)  # an empty state folder
    before = {n: _tree(s) for n, s in (("a", a), ("b", b))}
    write_checkpoint(ws, tick=4, engine={"config_hash": "h"}, agents={})
    untouched = (a / "notes.txt").stat().st_ino

    # After the checkpoint: an edit, a new day, a deleted folder, state for a new agent.
    (a / "plans" / "2026-03-02" / "story.yaml").write_text("segments: [1, 2]\n")
    (a / "plans" / "2026-03-03").mkdir()
    (a / "plans" / "2026-03-03" / "story.yaml").write_text("segments: []\n")
    (b / "empty").rmdir()
    (c / "x").mkdir(parents=True)
    (d / "later.txt").write_text("made after the checkpoint")

    rewind(ws, latest_checkpoint(ws, config_hash="h"))
    assert {n: _tree(s) for n, s in (("a", a), ("b", b))} == before
    assert not c.exists() and d.is_dir() and not any(d.iterdir())
    assert (a / "notes.txt").stat().st_ino == untouched  # equal bytes: not rewritten
    ws.release()


@pytest.mark.parametrize("digest", [True, False], ids=["with-digest", "before-digests"])
def test_a_damaged_state_archive_is_found_before_anything_changes(
    tmp_path: Path, digest: bool
) -> None:
    ws = RunWorkspace.create(tmp_path / "run")
    for i in range(40):
        state = ws.agents_dir / f"a-{i:02d}" / "state"
        state.mkdir(parents=True)
        (state / "plan.txt").write_text(f"plan {i}\n" * 50)
    path = write_checkpoint(ws, tick=2, engine={"config_hash": "h"}, agents={})
    engine = json.loads((path / "engine.json").read_text())
    if not digest:  # a checkpoint from before the digest: its member headers are walked
        del engine["state_archive_sha256"]
        (path / "engine.json").write_text(json.dumps(engine))
    latest_checkpoint(ws, config_hash="h")
    tar = path / "agent_state.tar"
    tar.write_bytes(tar.read_bytes()[: tar.stat().st_size // 3 + 77])  # inside a member
    why = "does not match its digest" if digest else "unexpected end of data|truncated"
    with pytest.raises(CheckpointError, match=rf"tick-00000002 cannot be read \(.*({why})"):
        latest_checkpoint(ws, config_hash="h")
    ws.release()


def test_a_checkpoint_without_its_state_archive_is_refused(tmp_path: Path) -> None:
    ws = RunWorkspace.create(tmp_path / "run")
    path = write_checkpoint(ws, tick=3, engine={"config_hash": "h"}, agents={})
    (path / "agent_state.tar").unlink()
    with pytest.raises(
        CheckpointError, match=r"tick-00000003 cannot be read \(agent_state.tar is missing"
    ):
        latest_checkpoint(ws, config_hash="h")
    ws.release()
