"""The run folder at its edges: a relative ``--out`` (scripts still see absolute workspace
paths), SIGTERM (stopped like Ctrl-C, exit 143), and folders that cannot be written (one
``error:`` line naming the path and the fix; exit 2 before the folder exists, 1 after; the
resume command only when a checkpoint exists)."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import load_experiment
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from agentsim.run.workspace import RunWorkspace
from tests.unit import helpers

_YAML = """
name: edges
seed: 4
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: 3
    profile: {{template: generic}}
    skills: {{default: [{skills}], disabled: [daily-guidance]}}
skills: {{builtin: false, paths: [skills]}}
model: {{backend: scripted}}
output: {{dir: ws, formats: [jsonl], checkpoint_every: {every}}}
"""

# A process-isolated hook that counts its calls in its state folder and says the count (and
# whether its workspace paths are absolute): a resumed run gives the same counts only if
# the checkpoint holds that state.
_COUNTER = """
import os

def entrypoint(argv, ctx):
    path = ctx.state_dir("count.txt")
    path.parent.mkdir(parents=True, exist_ok=True)
    n = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(n))
    absolute = os.path.isabs(ctx.workspace_root) and os.path.isabs(ctx.env["AGENT_WORK_DIR"])
    return f"visit {n} absolute={absolute}"
"""


def _experiment(tmp: Path, *, ticks: int = 6, every: int = 2, skills: str = "counter") -> Path:
    if skills:
        helpers.write_skill(
            tmp / "skills",
            "counter",
            description="Use when counting visits.",
            front="isolation: process\nhooks:\n  pre_step: scripts/hook.py\n",
            body="Count.\n",
            files={"scripts/hook.py": _COUNTER},
        )
    exp = tmp / "exp.yaml"
    exp.write_text(_YAML.format(ticks=ticks, every=every, skills=skills), encoding="utf-8")
    return exp


def _events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run / "events.jsonl").read_text("utf-8").splitlines()]


def _state(run: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run)): p.read_text()
        for p in sorted((run / "agents").rglob("*"))
        if p.is_file() and p.name == "count.txt"
    }


def _manifest(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "manifest.json").read_text("utf-8"))
    return data


def _visits(run: Path) -> dict[str, list[tuple[int, str]]]:
    """Each agent's hook texts by tick, from its trace."""
    opened = open_run(run)
    return {
        aid: [
            (t["tick"], h["text"])
            for t in opened.agent(aid).trace()
            for h in t.get("hooks", ())
            if h["hook"] == "pre_step"
        ]
        for aid in opened.agents
    }


@pytest.mark.slow
def test_a_process_isolated_skill_under_a_relative_out_resumes_like_an_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(exp), "--out", "ref"]) == 0
    assert capsys.readouterr().out.startswith("completed: ref  ticks=6 agents=3")
    ref = tmp_path / "ref"
    expected = [(t, f"visit {t + 1} absolute=True") for t in range(6)]
    assert list(_visits(ref).values()) == [expected] * 3
    # The state lives in each agent's state/ folder, nowhere else.
    assert _state(ref) == {
        f"agents/people-{i:05d}/state/custom/counter/count.txt": "6" for i in range(3)
    }

    class Crash(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 5:
            raise Crash("the machine went away")

    cfg = load_experiment(exp, environ={})
    with pytest.raises(Crash):
        asyncio.run(Engine(cfg, run_dir=Path("run"), progress=progress).run())
    assert main(["run", "--resume", "run"]) == 0
    assert capsys.readouterr().out.startswith("completed: run  ticks=6 agents=3")
    run = tmp_path / "run"
    assert (run / "events.jsonl").read_bytes() == (ref / "events.jsonl").read_bytes()
    assert _visits(run) == _visits(ref)
    assert _state(run) == _state(ref)


class _Terminal(io.StringIO):
    """A stderr that sends this process ``signum`` once tick 2 is shown."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum = signum

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if "tick 2/" in s and "tick 2/" not in self.getvalue():
            super().write(s)
            signal.raise_signal(self.signum)
            return len(s)
        return super().write(s)


def test_sigterm_stops_at_the_tick_end_with_a_checkpoint_and_exit_143(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, every=0, skills="")
    term = _Terminal(signal.SIGTERM)
    monkeypatch.setattr(sys, "stderr", term)
    run = tmp_path / "run"
    before = signal.getsignal(signal.SIGTERM)
    assert main(["run", str(exp), "--out", str(run)]) == 143
    assert "terminated (SIGTERM): stopping at the end of this tick" in term.getvalue()
    printed = capsys.readouterr().out
    assert printed.startswith(f"interrupted: {run}  ticks=2 agents=3")
    assert "  stopped: interrupted by SIGTERM before tick 2; resume it" in printed
    assert f"resume with: agentsim run --resume {run}" in printed
    manifest = _manifest(run)
    assert manifest["status"] == "interrupted"
    assert manifest["reason"] == "interrupted by SIGTERM before tick 2; resume it"
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["tick-00000002"]
    assert signal.getsignal(signal.SIGTERM) is before
    monkeypatch.undo()
    assert main(["run", "--resume", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ticks"] == 6
    assert _manifest(run)["status"] == "completed"


@pytest.mark.slow
def test_a_real_sigterm_leaves_a_resumable_run(tmp_path: Path) -> None:
    exp = _experiment(tmp_path, ticks=300, every=0, skills="")
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsim.cli", "run", str(exp), "--out", str(run), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(helpers.REPO)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180  # a guard: a loaded machine starts slowly
        while time.monotonic() < deadline:
            if (run / "manifest.json").exists() and _manifest(run).get("ticks_done", 0) >= 1:
                break
            time.sleep(0.05)
        proc.terminate()  # SIGTERM
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, stderr
    assert "terminated (SIGTERM): stopping at the end of this tick" in stderr
    summary = json.loads(stdout)
    assert summary["status"] == "interrupted" and 1 <= summary["ticks"] < 300
    assert summary["reason"].startswith("interrupted by SIGTERM before tick ")
    evs = _events(run)
    assert evs[-1]["type"] == "run_end" and evs[-1]["status"] == "interrupted"
    assert (run / "checkpoints" / f"tick-{summary['ticks']:08d}").is_dir()
    assert _manifest(run)["status"] == "interrupted"


def test_an_out_that_cannot_be_created_is_exit_2_with_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, skills="")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"error: cannot create the run folder {out}: Not a directory ({out}); choose a "
        "folder this user can write with --out (or output.dir), or fix its permissions"
    ]
    assert blocker.read_text() == "not a folder"


def test_an_unwritable_out_is_exit_2_and_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, skills="")
    parent = tmp_path / "shared"
    parent.mkdir()
    out = parent / "run"
    real_open = open

    def refusing_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        # What a folder another user owns does to this one's first write (root would pass
        # a chmod, so the refusal is the kernel's answer, played here).
        if Path(str(file)).parent == out:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", refusing_open)
    assert main(["run", str(exp), "--out", str(out)]) == 2
    monkeypatch.undo()
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"error: cannot create the run folder {out}: Permission denied ({out / 'run.lock'}); "
        "choose a folder this user can write with --out (or output.dir), or fix its "
        "permissions"
    ]
    assert list(parent.iterdir()) == []


class _Refusal:
    """Fails the ``fail_at``-th append to events.jsonl, and every write after it, with
    ``code`` (as a folder whose permissions changed mid-run, or a full disk, does)."""

    def __init__(self, fail_at: int, code: int) -> None:
        self.appends = 0
        self.fail_at = fail_at
        self.code = code

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        append = RunWorkspace.append_events

        def append_events(ws: RunWorkspace, events: Any) -> int:
            self.appends += 1
            if self.appends >= self.fail_at:
                path = str(ws.root / "events.jsonl")
                raise OSError(self.code, os.strerror(self.code), path)
            return append(ws, events)

        monkeypatch.setattr(RunWorkspace, "append_events", append_events)


def test_a_permission_error_mid_run_is_one_line_exit_1_and_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, skills="")
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        # Appends: the set-up events, then one per tick: tick 3 fails, after the
        # checkpoint of tick 2.
        _Refusal(fail_at=5, code=errno.EACCES).install(patch)
        code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and out == ""
    events = run / "events.jsonl"
    assert err.strip().splitlines()[-1] == (
        f"error: cannot write the run folder {run}: Permission denied ({events}); make "
        f"{events} writable for this user, then resume with: agentsim run --resume {run}"
    )
    manifest = _manifest(run)
    assert manifest["status"] == "failed"
    assert manifest["reason"] == f"cannot write the run folder {run}: Permission denied ({events})"
    assert main(["run", "--resume", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ticks"] == 6


def test_a_full_disk_before_the_first_checkpoint_gives_no_resume_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, skills="", every=4)
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        _Refusal(fail_at=3, code=errno.ENOSPC).install(patch)  # tick 1, no checkpoint yet
        code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 1 and "Traceback" not in err and out == ""
    assert err.strip().splitlines()[-1] == (
        f"error: cannot write the run folder {run}: No space left on device "
        f"({run / 'events.jsonl'}); free space (or raise the quota or file size limit), then "
        f"run the experiment again into a new folder (no checkpoint was written yet, so {run} "
        "cannot be resumed)"
    )
    assert "resume with" not in err
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").iterdir())
    assert "No space left on device" in _manifest(run)["reason"]
