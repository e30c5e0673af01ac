"""One writer per run folder: the writer's lock is held for the whole run, a second
`run --out` or `--resume` exits 2 naming the holder's pid, and the lock goes with the process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.errors import RunError
from agentsim.run.engine import Engine
from agentsim.run.workspace import LOCK_NAME, RunLock, RunWorkspace

EXPERIMENT = "name: t\nticks: 2\nagents: [{group: a, count: 2}]\n"

_HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from agentsim.run.workspace import RunWorkspace

    ws = RunWorkspace.create(Path(sys.argv[1]))
    ws.new_manifest(run_id="r", name="t", config_hash="x", seed=0, executor="local")
    print("holding", flush=True)
    sys.stdin.read()  # hold the lock until the test closes our stdin
    """
)


@pytest.fixture
def held_by_other_process(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(run_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    try:
        yield run_dir, proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                pipe.close()


def _files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


def test_run_out_and_resume_on_a_folder_in_use_exit_2_naming_the_pid(
    held_by_other_process: tuple[Path, subprocess.Popen[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_dir, proc = held_by_other_process
    exp = tmp_path / "exp.yaml"
    exp.write_text(EXPERIMENT)
    before = _files(run_dir)
    assert (run_dir / LOCK_NAME).read_text().strip() == str(proc.pid)

    assert main(["run", str(exp), "--out", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert f"error: run folder {run_dir} is in use by process {proc.pid}" in err
    assert "wait for that run to end" in err

    assert main(["run", "--resume", str(run_dir)]) == 2
    assert f"is in use by process {proc.pid}" in capsys.readouterr().err
    assert _files(run_dir) == before

    # The kernel drops the lock with the process, however it ends.
    proc.kill()
    proc.wait(timeout=10)
    assert RunLock.holder(run_dir) is None
    ws = RunWorkspace.open_existing(run_dir)
    assert (run_dir / LOCK_NAME).read_text().strip() == str(os.getpid())
    ws.release()


def test_two_workspaces_of_one_process_exclude_each_other(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = RunWorkspace.create(run_dir)
    first.new_manifest(run_id="run", name="t", config_hash="x", seed=0, executor="local")
    pid = os.getpid()
    with pytest.raises(RunError, match=rf"run folder .*run is in use by process {pid}"):
        RunWorkspace.create(run_dir)
    with pytest.raises(RunError, match=rf"is in use by process {pid} \(it holds .*run\.lock\)"):
        RunWorkspace.open_existing(run_dir)
    assert RunLock.holder(run_dir) == str(pid)
    # Reading needs no lock.
    assert RunWorkspace.open_existing(run_dir, lock=False).read_manifest()["name"] == "t"
    first.release()
    first.release()  # idempotent
    assert RunLock.holder(run_dir) is None
    RunWorkspace.open_existing(run_dir).release()


def test_create_still_refuses_a_finished_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ws = RunWorkspace.create(run_dir)
    ws.new_manifest(run_id="run", name="t", config_hash="x", seed=0, executor="local")
    ws.release()
    with pytest.raises(RunError, match=r"already exists and is not empty"):
        RunWorkspace.create(run_dir)


def test_the_engine_holds_the_lock_for_the_run_and_releases_it(tmp_path: Path) -> None:
    config = parse_experiment(EXPERIMENT)
    run_dir = tmp_path / "run"
    seen: list[str | None] = []
    engine = Engine(
        config, run_dir=run_dir, progress=lambda p: seen.append(RunLock.holder(run_dir))
    )
    summary = asyncio.run(engine.run())
    assert summary.status == "completed"
    assert seen == [str(os.getpid())] * 2  # held at every tick
    assert RunLock.holder(run_dir) is None  # and released at the end


def test_an_engine_cannot_resume_a_folder_another_writer_holds(tmp_path: Path) -> None:
    config = parse_experiment(EXPERIMENT)
    run_dir = tmp_path / "run"
    first = Engine(config, run_dir=run_dir, max_ticks=1)
    assert asyncio.run(first.run()).status == "stopped"
    holder = RunWorkspace.open_existing(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    with pytest.raises(RunError, match=rf"is in use by process {os.getpid()}"):
        asyncio.run(Engine(config, run_dir=run_dir).run(resume=True))
    assert json.loads((run_dir / "manifest.json").read_text()) == manifest
    holder.release()
    assert asyncio.run(Engine(config, run_dir=run_dir).run(resume=True)).status == "completed"
