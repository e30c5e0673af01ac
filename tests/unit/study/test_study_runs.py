"""Running studies through ``agentsim study``: shared ticks run once, a failing run is
reported while the others finish, a killed run and a stopped study resume."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentsim.agent.agent import step_seed
from agentsim.cli import main
from agentsim.inspect import open_run
from agentsim.testing.answers import scripted_answer
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit.helpers import REPO

pytestmark = pytest.mark.slow

BASE = """\
name: t
seed: 1
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 3}}
  - intervene: {{env: social, action: broadcast, args: {{text: "The park opens.", stance: 0.5}}}}
  - run: {{ticks: {later}}}
  - survey: {{name: opinion, question: "What do you think of the park?"}}
agents:
  - {{group: citizens, count: 5, skills: {{default: [social-feed], disabled: [daily-guidance]}}}}
model: {model}
environment:
  - {{module: social, follow_k: 3, topic: the park}}
{extra}
output: {{dir: workspace, checkpoint_every: {every}}}
"""

STUDY = """\
name: s
experiment: base.yaml
replicates: {replicates}
arms:
  - name: control
  - name: rumour
    from_tick: 3
    set: {{workflow.1.intervene.args.text: "A rumour.", workflow.1.intervene.args.stance: -0.8}}
{more}
measures: [{{survey: opinion}}]
concurrency: 2
"""


def _study(
    tmp_path: Path,
    *,
    model: str = "{backend: scripted}",
    replicates: str = "{seeds: [1]}",
    more: str = "",
    extra: str = "",
    later: int = 2,
    every: int = 0,
) -> Path:
    base = BASE.format(model=model, extra=extra, later=later, every=every)
    (tmp_path / "base.yaml").write_text(base, encoding="utf-8")
    path = tmp_path / "study.yaml"
    path.write_text(STUDY.format(replicates=replicates, more=more), encoding="utf-8")
    return path


def _manifest(study_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((study_dir / "manifest.json").read_text("utf-8"))
    return data


def _states(study_dir: Path) -> dict[str, str]:
    return {r["id"]: r["state"] for r in _manifest(study_dir)["runs"]}


def _events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text("utf-8").splitlines()
    return [json.loads(line) for line in lines]


def _served(url: str) -> str:
    return f"{{backend: openai, model: m, base_url: '{url}', max_retries: 0}}"


def test_arms_sharing_ticks_run_them_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=scripted_answer) as srv:
        path = _study(tmp_path, model=_served(srv.base_url))
        out = tmp_path / "out"
        assert main(["study", str(path), "--out", str(out)]) == 0
        requests = srv.requests
    captured = capsys.readouterr()
    assert captured.out.startswith(f"complete: {out}  runs=2 complete=2\n")
    assert "study s: control-r1 complete (1/2 runs complete)" in captured.err
    assert "study s: rumour-r1 starts (fork)" in captured.err
    manifest = _manifest(out)
    assert manifest["state"] == "complete"
    assert [(r["id"], r["fork_of"], r["state"]) for r in manifest["runs"]] == [
        ("control-r1", None, "complete"),
        ("rumour-r1", {"run": "control-r1", "tick": 3}, "complete"),
    ]
    control = json.loads((out / "runs/control-r1/metrics.json").read_text("utf-8"))
    fork = json.loads((out / "runs/rumour-r1/metrics.json").read_text("utf-8"))
    cp = out / "runs/rumour-r1/checkpoints/tick-00000003/engine.json"
    shared = json.loads(cp.read_text("utf-8"))["metrics"]["model_calls"]
    assert shared > 0
    # Every request the server saw: one pre-flight, then each run's own (its process's).
    assert requests == 1 + control["model"]["calls"] + fork["model"]["calls"]
    # The fork's own requests are its calls after tick 3 (steps and survey answers): the
    # three shared ticks were asked of the model once, by the control.
    assert fork["model"]["calls"] == fork["model_calls"] + fork["answers"] - shared
    assert control["model"]["calls"] == control["model_calls"] + control["answers"]
    # The fork holds the control's history before tick 3, and its own after it.
    events = {name: _events(out / f"runs/{name}") for name in ("control-r1", "rumour-r1")}
    before = [e for e in events["control-r1"] if e["tick"] < 3]
    assert before == [e for e in events["rumour-r1"] if e["tick"] < 3]
    texts = {
        name: [e["args"]["text"] for e in evs if e["type"] == "intervention"]
        for name, evs in events.items()
    }
    assert texts == {"control-r1": ["The park opens."], "rumour-r1": ["A rumour."]}
    assert (out / "study.yaml").read_bytes() == path.read_bytes()


def test_sampled_replicates_differ_in_their_model_seeds(tmp_path: Path) -> None:
    with OpenAITestServer(answer=scripted_answer) as srv:
        path = _study(tmp_path, model=_served(srv.base_url), replicates="{samples: 2}")
        out = tmp_path / "out"
        assert main(["study", str(path), "--out", str(out)]) == 0
        seeds = [r.body.get("seed") for r in srv.recorded if isinstance(r.body, dict)]
    rows = _manifest(out)["runs"]
    assert [(r["id"], r["seed"], r["sample"]) for r in rows] == [
        ("control-r1", 1, 1),
        ("rumour-r1", 1, 1),
        ("control-r2", 1, 2),
        ("rumour-r2", 1, 2),
    ]
    assert json.loads((out / "runs/control-r2/manifest.json").read_text())["sample"] == 2
    # Same experiment seed, other model seeds: each sample asks with its own step seeds.
    first = {k: step_seed(1, "citizens-00000", 0, sample=k) for k in (0, 1, 2)}
    assert first[1] in seeds and first[2] in seeds and first[0] not in seeds
    assert len(set(first.values())) == 3


BOOM = '''
from agentsim.env.base import EnvModule


class Boom(EnvModule):
    """Fails the run at tick ``fail_at`` (never, without it)."""

    name = "boom"

    def tick_events(self, clock):
        at = self.options.get("fail_at")
        if at is not None and clock.tick >= at:
            raise RuntimeError(f"boom at tick {clock.tick}")
        return []
'''


def test_a_failing_run_is_reported_and_the_others_finish(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "boom.py").write_text(BOOM, encoding="utf-8")
    more = "  - name: crash\n    set: {environment.1.fail_at: 2}\n"
    path = _study(tmp_path, more=more, extra="  - {module: ./boom.py:Boom}")
    out = tmp_path / "out"
    assert main(["study", str(path), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "error: run crash-r1 failed: " in err
    assert "boom at tick 2" in err
    assert f"see {out / 'logs' / 'crash-r1.log'}" in err
    assert f"fix the cause and go on with `agentsim study --resume {out}`" in err
    assert _states(out) == {"control-r1": "complete", "rumour-r1": "complete", "crash-r1": "failed"}
    assert _manifest(out)["state"] == "failed"
    assert "boom at tick 2" in _manifest(out)["runs"][2]["reason"]
    # A resume keeps the complete runs and tries the failed one again (it fails again).
    kept = (out / "runs/control-r1/events.jsonl").stat().st_mtime_ns
    assert main(["study", "--resume", str(out)]) == 1
    err = capsys.readouterr().err
    assert "study s: 3 runs in" in err and "(2 complete kept)" in err
    assert "error: run crash-r1 failed: " in err
    assert (out / "runs/control-r1/events.jsonl").stat().st_mtime_ns == kept
    # A run whose folder the study cannot use fails alone, with what went wrong.
    shutil.rmtree(out / "runs/crash-r1")
    (out / "runs/crash-r1").write_text("not a folder")
    assert main(["study", "--resume", str(out)]) == 1
    assert "error: run crash-r1 failed: NotADirectoryError" in capsys.readouterr().err
    assert _states(out) == {"control-r1": "complete", "rumour-r1": "complete", "crash-r1": "failed"}


def _kill_when(path: Path, run_dir: Path, killed: list[int]) -> None:
    """SIGKILL the process writing ``run_dir`` once ``path`` exists."""
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int((run_dir / "run.lock").read_text().strip())
    os.kill(pid, signal.SIGKILL)
    killed.append(pid)


def test_a_run_killed_mid_way_resumes_from_its_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=scripted_answer, latency=0.02) as srv:
        path = _study(tmp_path, model=_served(srv.base_url), later=9, every=2)
        out = tmp_path / "out"
        run_dir = out / "runs/control-r1"
        killed: list[int] = []
        watcher = threading.Thread(
            target=_kill_when,
            args=(run_dir / "checkpoints/tick-00000004", run_dir, killed),
        )
        watcher.start()
        code = main(["study", str(path), "--out", str(out)])
        watcher.join()
        err = capsys.readouterr().err
        assert killed and code == 1, err
        assert "error: run control-r1 failed: its process ended with signal 9" in err
        assert _states(out)["control-r1"] == "failed"
        ticks_done = json.loads((run_dir / "manifest.json").read_text())["ticks_done"]
        assert ticks_done < 12
        assert main(["study", "--resume", str(out)]) == 0
    err = capsys.readouterr().err
    assert "study s: control-r1 starts (resume)" in err
    manifest = _manifest(out)
    assert manifest["state"] == "complete"
    assert set(_states(out).values()) == {"complete"}
    run = json.loads((run_dir / "manifest.json").read_text())
    assert run["status"] == "completed" and run["resumed"] is True and run["ticks_done"] == 12


def test_sigterm_stops_the_study_and_resume_completes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=scripted_answer, latency=0.02) as srv:
        path = _study(
            tmp_path, model=_served(srv.base_url), later=9, every=2, replicates="{seeds: [1, 2]}"
        )
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentsim.cli", "study", str(path), "--out", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        first = out / "runs/control-r1/checkpoints/tick-00000002"
        deadline = time.monotonic() + 120
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 143, stderr
        assert "terminated (SIGTERM): the runs under way stop at the end of their tick" in stderr
        assert f"resume with: agentsim study --resume {out}" in stdout
        manifest = _manifest(out)
        assert manifest["state"] == "stopped"
        assert "stopped" in _states(out).values()
        assert "running" not in _states(out).values()
        assert main(["study", "--resume", str(out)]) == 0, capsys.readouterr().err
    assert _manifest(out)["state"] == "complete"
    assert set(_states(out).values()) == {"complete"}


def test_a_killed_study_keeps_its_clock_for_its_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=scripted_answer, latency=0.02) as srv:
        path = _study(tmp_path, model=_served(srv.base_url), later=9, every=2)
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentsim.cli", "study", str(path), "--out", str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            first = out / "runs/control-r1/checkpoints/tick-00000002"
            deadline = time.monotonic() + 120
            while not first.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            proc.send_signal(signal.SIGKILL)  # the study process: no last write
            proc.wait(timeout=60)
        finally:
            proc.kill()
        # Its runs see it go and stop at the end of their tick.
        runs = [out / "runs/control-r1", out / "runs/rumour-r1"]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(
            (r / "manifest.json").is_file()
            and json.loads((r / "manifest.json").read_text())["status"] == "running"
            for r in runs
        ):
            time.sleep(0.05)
        killed = _manifest(out)
        assert killed["state"] == "running" and killed["ended"] is None
        # The wall time it spent is in its manifest: a resume's clock goes on from it.
        assert killed["wall_seconds"] > 0
        assert main(["study", "--resume", str(out)]) == 0, capsys.readouterr().err
    assert _manifest(out)["wall_seconds"] > killed["wall_seconds"]


def _outputs(study_dir: Path) -> dict[str, bytes]:
    files = sorted(study_dir.glob("runs/*/events.jsonl")) + sorted(
        study_dir.glob("runs/*/surveys/*.jsonl")
    )
    return {str(p.relative_to(study_dir)): p.read_bytes() for p in files}


def test_the_example_study_runs_offline_and_repeats_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = REPO / "experiments/studies/rumour.yaml"
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["study", str(example), "--out", str(first)]) == 0
    assert main(["study", str(example), "--out", str(second)]) == 0
    assert capsys.readouterr().out.count("complete: ") == 2
    a, b = _outputs(first), _outputs(second)
    assert len(a) == 12  # 6 runs: events and the opinion survey of each
    assert a == b
    rows = _manifest(first)["runs"]
    assert [r["id"] for r in rows] == [
        "announcement-r1",
        "rumour-r1",
        "announcement-r2",
        "rumour-r2",
        "announcement-r3",
        "rumour-r3",
    ]
    assert [r["seed"] for r in rows] == [1, 1, 2, 2, 3, 3]
    # Each run folder is an ordinary run: open_run reads it.
    for row in rows:
        assert open_run(first / row["dir"]).manifest()["status"] == "completed"
