"""`agentsim run` through ``agentsim.cli.main``: exit codes, messages, output, examples."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from tests.unit import helpers

ROOT = helpers.REPO
SMALL = helpers.FIXTURES / "experiments" / "small.yaml"
BROKEN = helpers.FIXTURES / "configs" / "broken.yaml"


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "events.jsonl").read_text("utf-8").splitlines()]


BAD = {
    "unknown-field": ("name: t\nticks: 2\nagnets: []\n", r"unknown field 'agnets'.*'agents'"),
    "bad-value": (
        "name: t\nticks: 0\nagents: [{group: a, count: 1}]\n",
        r"ticks",
    ),
    "env-file": (
        "name: t\nticks: 2\nagents: [{group: a, count: 1}]\n"
        "environment: [{module: city, places: nope.csv}]\n",
        r"environment\.0\.places: cannot read places file .*nope\.csv",
    ),
    "env-option": (
        "name: t\nticks: 2\nagents: [{group: a, count: 1}]\n"
        "environment: [{module: social, follow_kk: 3}]\n",
        r"environment\.0\.follow_kk: unknown option 'follow_kk'",
    ),
    "profiles-file": (
        "name: t\nticks: 2\nagents: [{group: a, profiles: missing.jsonl}]\n",
        r"agents\.0\.profiles: profiles file .*missing\.jsonl does not exist",
    ),
    "default-skill": (
        "name: t\nticks: 2\nagents: [{group: a, count: 1, skills: {default: [daily-guidanc]}}]\n",
        r"agents\.0\.skills\.default: default skill 'daily-guidanc' is not registered "
        r"\(close matches: daily-guidance.*\); fix the name",
    ),
    # Every workflow argument is checked at load, the ids it names included (issue 23).
    "intervene-unknown-arg": (
        "name: t\nagents: [{group: a, count: 2}]\nenvironment: [{module: social}]\n"
        "workflow: [{run: {ticks: 1}}, {intervene: {env: social, action: broadcast, "
        "args: {txt: hello, stance: 0.5}}}]\n",
        r"workflow\.1\.intervene\.args\.txt: unknown argument 'txt' \(known: stance, text\)",
    ),
    "intervene-missing-arg": (
        "name: t\nagents: [{group: a, count: 2}]\nenvironment: [{module: social}]\n"
        "workflow: [{run: {ticks: 1}}, {intervene: {env: social, action: broadcast}}]\n",
        r"workflow\.1\.intervene\.args\.text: argument 'text' is required "
        r"\(known: stance, text\); add it",
    ),
    "intervene-bound": (
        "name: t\nagents: [{group: a, count: 2}]\nenvironment: [{module: social}]\n"
        "workflow: [{intervene: {env: social, action: broadcast, "
        "args: {text: hello, stance: 2}}}, {run: {ticks: 1}}]\n",
        r"workflow\.0\.intervene\.args\.stance: argument 'stance': input should be less "
        r"than or equal to 1, got 2",
    ),
    "intervene-type": (
        "name: t\nagents: [{group: a, count: 2}]\nenvironment: [{module: social}]\n"
        "workflow: [{intervene: {env: social, action: set_opinion, "
        "args: {agent: a-0001, value: high}}}, {run: {ticks: 1}}]\n",
        r"workflow\.0\.intervene\.args\.value: argument 'value': input should be a valid "
        r"number, got 'high'",
    ),
    "intervene-place-id": (
        "name: t\nagents: [{group: a, count: 2}]\nenvironment: [{module: city}]\n"
        "workflow: [{run: {ticks: 1}}, {intervene: {env: city, action: close_place, "
        "args: {place: park-99}}}]\n",
        r"workflow\.1\.intervene\.args\.place: there is no place 'park-99' "
        r"\(close matches: park-\d.*\); use one of the ids in the places table",
    ),
    "intervene-agent-id": (
        "name: t\nagents: [{group: a, count: 2}]\nenvironment: [{module: social}]\n"
        "workflow: [{run: {ticks: 1}}, {intervene: {env: social, action: set_opinion, "
        "args: {agent: b-1, value: 0.5}}}]\n",
        r"workflow\.1\.intervene\.args\.agent: there is no agent 'b-1'.*; name an agent "
        r"of the run",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_config_errors_exit_2_and_leave_no_run_folder(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, message = BAD[case]
    exp = tmp_path / "exp.yaml"
    exp.write_text(text)
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert re.search(message, err), err
    assert not out.exists()


def test_yaml_syntax_and_missing_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(BROKEN), "--out", str(tmp_path / "r")]) == 2
    assert "is not valid YAML at line" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "r")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert "EXPERIMENT: no experiment file given" in capsys.readouterr().err
    assert main(["run", "--resume", str(tmp_path)]) == 2
    assert "is not a run folder (no manifest.json)" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_an_error_line_writes_control_characters_as_escapes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An error's text quotes what it was given (a path here; a server's answer elsewhere):
    # a terminal title, a bell and a carriage return reach stderr as text, not as codes.
    name = "no\x1b]0;pwned\x07such\r.yaml"
    assert main(["run", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: experiment file {tmp_path}/no\\x1b]0;pwned\\x07such\\x0d.yaml does not "
        "exist; check the path and the current folder\n"
    )


@pytest.fixture(scope="module")
def json_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], int]:
    out = tmp_path_factory.mktemp("cli") / "run"
    buf = io.StringIO()
    old = sys.stdout
    sys.stdout = buf
    try:
        code = main(["run", str(SMALL), "--out", str(out), "--ticks", "2", "--json"])
    finally:
        sys.stdout = old
    return out, json.loads(buf.getvalue()), code


def test_json_output_ticks_and_out(json_run: tuple[Path, dict[str, Any], int]) -> None:
    out, data, code = json_run
    assert code == 0
    assert set(data) == {
        "run_id", "run_dir", "status", "ticks", "agents", "metrics", "reason", "behaviour"
    }  # fmt: skip
    assert data["behaviour"][0].startswith(f"behaviour: {data['metrics']['agent_steps']:,} steps")
    assert (data["run_id"], data["run_dir"], data["status"]) == ("run", str(out), "stopped")
    assert data["reason"] == "stopped after --ticks 2"
    assert (data["ticks"], data["agents"]) == (2, 20)
    assert data["metrics"]["ticks"] == 2 and data["metrics"]["agent_steps"] == 40
    assert max(e["tick"] for e in events(out)) == 2  # run_end sits at the stopping tick


def test_an_existing_run_folder_is_refused(
    json_run: tuple[Path, dict[str, Any], int], capsys: pytest.CaptureFixture[str]
) -> None:
    out, _, _ = json_run
    before = sorted(p.name for p in out.iterdir())
    assert main(["run", str(SMALL), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"run folder {out} already exists and is not empty" in err
    assert "agentsim run --resume" in err
    assert sorted(p.name for p in out.iterdir()) == before


def test_resume_of_a_completed_run_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: t\nticks: 1\nagents: [{group: a, count: 2}]\n")
    assert main(["run", str(exp), "--out", str(tmp_path / "r"), "--json"]) == 0
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "r")]) == 2
    assert "already completed; nothing to resume" in capsys.readouterr().err


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal and presses Ctrl-C once tick 2 is shown."""

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        if "tick 2/" in s and "tick 2/" not in self.getvalue():
            super().write(s)
            signal.raise_signal(signal.SIGINT)
            return len(s)
        return super().write(s)


def test_ctrl_c_stops_at_the_tick_end_with_exit_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    term = _Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    out = tmp_path / "run"
    assert main(["run", str(SMALL), "--out", str(out)]) == 130
    shown = term.getvalue()
    assert "\r[####--------------------] tick 1/6  " in shown and "] tick 2/6  " in shown
    assert all(w in shown for w in ("agent-steps/s", "model calls", "tokens", "errors 0"))
    assert "stopping at the end of this tick" in shown
    printed = capsys.readouterr().out
    assert printed.startswith(f"interrupted: {out}  ticks=2 agents=20")
    assert f"resume with: agentsim run --resume {out}" in printed
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert events(out)[-1]["type"] == "run_end"
    json.loads((out / "metrics.json").read_text())
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.fixture
def small_examples(monkeypatch: pytest.MonkeyPatch) -> None:
    # The examples as shipped, with fewer agents (the environment overrides any field).
    for var, value in {
        "AGENTSIM_AGENTS__0__COUNT": "8",
        "AGENTSIM_AGENTS__1__COUNT": "3",
        "AGENTSIM_AGENTS__2__COUNT": "2",
    }.items():
        monkeypatch.setenv(var, value)


def test_daily_mobility_people_go_to_work_in_the_morning(
    small_examples: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "mob"
    code = main(
        ["run", str(ROOT / "experiments" / "daily-mobility.yaml"), "--out", str(out),
         "--ticks", "9", "--json"]
    )  # fmt: skip
    assert code == 0
    evs = events(out)
    occupancy = {e["time"][11:16]: e["occupancy"] for e in evs if e["type"] == "city_occupancy"}

    def offices(at: str) -> int:
        return sum(n for place, n in occupancy[at].items() if place.startswith("office"))

    assert offices("06:00") == 0 < offices("10:00")
    assert all(place.startswith("home") for place in occupancy["06:00"])
    work = {
        d.name: json.loads((d / "profile.json").read_text()).get("work")
        for d in (out / "agents").iterdir()
    }
    first_moves: dict[str, dict[str, Any]] = {}
    for e in evs:
        if e["type"] == "move" and e["agent_id"].startswith("commuters"):
            first_moves.setdefault(e["agent_id"], e)
    assert len(first_moves) >= 4
    assert all(m["to"] == work[a] for a, m in first_moves.items())
    assert all("06:30" <= m["time"][11:16] <= "10:00" for m in first_moves.values())


def test_opinion_dynamics_opinions_change_after_posts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSIM_AGENTS__0__COUNT", "12")
    monkeypatch.setenv("AGENTSIM_AGENTS__1__COUNT", "3")
    out = tmp_path / "op"
    exp = ROOT / "experiments" / "opinion-dynamics.yaml"
    assert main(["run", str(exp), "--out", str(out), "--ticks", "4", "--json"]) == 0
    evs = events(out)
    kinds = Counter(e["type"] for e in evs)
    assert kinds["post"] > 0 and kinds["opinion_change"] > 0
    first_post = min(e["tick"] for e in evs if e["type"] == "post")
    changes = [e for e in evs if e["type"] == "opinion_change"]
    # Posts of tick t are read at t + 1: every change follows a delivered post.
    assert all(c["tick"] > first_post for c in changes)
    delivered = {e["tick"]: e["posts_delivered"] for e in evs if e["type"] == "social_opinions"}
    assert all(any(delivered[t] for t in range(c["tick"])) for c in changes)
    assert all(c["old"] != c["new"] and -1 <= c["new"] <= 1 for c in changes)


@pytest.mark.slow
def test_a_real_sigint_ends_the_run_at_a_tick_boundary(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "AGENTSIM_WORKFLOW": "[{run: {ticks: 200}}]"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsim.cli", "run", str(SMALL), "--out", str(out), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180  # a guard: a loaded machine starts slowly
        while time.monotonic() < deadline:
            manifest = out / "manifest.json"
            if manifest.exists() and json.loads(manifest.read_text()).get("ticks_done", 0) >= 1:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    summary = json.loads(stdout)
    assert summary["status"] == "interrupted" and 1 <= summary["ticks"] < 200
    text = (out / "events.jsonl").read_text()
    assert text.endswith("\n")
    evs = [json.loads(x) for x in text.splitlines()]
    assert evs[-2]["type"] == "tick_end" and evs[-1]["type"] == "run_end"
    assert evs[-1]["tick"] == summary["ticks"] == evs[-2]["tick"] + 1
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    assert json.loads((out / "metrics.json").read_text())["ticks"] == summary["ticks"]


def test_default_run_folder_and_executor_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "e.yaml"
    exp.write_text("name: tiny\nticks: 1\nagents: [{group: a, count: 2}]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTSIM_OUTPUT__RUN_ID", "fixed")
    assert main(["run", str(exp), "--executor", "local", "--address", "127.0.0.1:1"]) == 0
    assert capsys.readouterr().out.startswith("completed: workspace/fixed  ticks=1 agents=2")
    manifest = json.loads((tmp_path / "workspace" / "fixed" / "manifest.json").read_text())
    assert manifest["executor"] == "local"
    monkeypatch.delenv("AGENTSIM_OUTPUT__RUN_ID")
    assert main(["run", str(exp), "--json"]) == 0
    run_dir = json.loads(capsys.readouterr().out)["run_dir"]
    assert re.fullmatch(r"workspace/tiny-\d{8}-\d{6}", run_dir)
