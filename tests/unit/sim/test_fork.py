"""Forks through ``agentsim run --fork RUN --at TICK``: the same workflow gives the parent's
bytes, an amended one mends or changes what comes after TICK, and every refusal says why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.inspect.report import write_report
from agentsim.inspect.run import open_run
from agentsim.view import _api

_YAML = """
name: forks
seed: 4
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 2}}
  - {step}
  - survey: {{name: mood, question: "How are you?", agents: {{sample: 2}}}}
  - run: {{ticks: 2}}
agents:
  - group: people
    count: 4
    profile: {{template: worker}}
model: {{backend: scripted}}
environment: [{{module: city}}, {{module: social, follow_k: 2}}]
output: {{dir: ws, formats: [jsonl], checkpoint_every: 1}}
"""

CLOSE = "intervene: {env: city, action: close_place, args: {place: park-1}}"
# Opening a place that is open passes the load-time checks and fails when it runs.
WRONG = "intervene: {env: city, action: open_place, args: {place: park-1}}"


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _manifest(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "manifest.json").read_text("utf-8"))
    return data


def _ticks(run: Path) -> list[int]:
    lines = (run / "events.jsonl").read_text("utf-8").splitlines()
    return [json.loads(x)["tick"] for x in lines]


@pytest.fixture(scope="module")
def parent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fork")
    exp = root / "exp.yaml"
    exp.write_text(_YAML.format(step=CLOSE), encoding="utf-8")
    run = root / "parent"
    assert main(["run", str(exp), "--out", str(run)]) == 0
    return run


@pytest.mark.slow
def test_a_fork_with_the_same_workflow_gives_the_parents_bytes(
    parent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    child = tmp_path / "child"
    code, out, _ = _cli(capsys, "run", "--fork", str(parent), "--at", "3", "--out", str(child))
    assert code == 0
    assert f"  forked from: {parent.resolve()} at tick 3\n" in out
    assert (child / "events.jsonl").read_bytes() == (parent / "events.jsonl").read_bytes()
    mood = "surveys/mood.jsonl"
    assert (child / mood).read_bytes() == (parent / mood).read_bytes()
    lineage = {"run": str(parent.resolve()), "run_id": "parent", "tick": 3}
    manifest = _manifest(child)
    assert manifest["parent"] == lineage and manifest["status"] == "completed"
    assert manifest["config_hash"] == _manifest(parent)["config_hash"]
    assert sorted(p.name for p in (child / "checkpoints").iterdir()) == [
        "tick-00000003",
        "tick-00000004",
    ]
    # A fork of the fork: inspect shows the whole lineage, nearest first.
    grandchild = tmp_path / "grandchild"
    assert main(["run", "--fork", str(child), "--at", "4", "--out", str(grandchild)]) == 0
    capsys.readouterr()
    code, text, _ = _cli(capsys, "inspect", str(grandchild))
    assert (
        f"  forked from  {child.resolve()} at tick 4\n  forked from  {parent.resolve()} at tick 3\n"
    ) in text
    data = json.loads(_cli(capsys, "inspect", str(grandchild), "--json")[1])
    assert [p["run_id"] for p in data["lineage"]] == ["child", "parent"]
    assert _api.progress(open_run(child))["parent"] == lineage
    # The report marks where the fork left its parent, on the plots and in summary.md.
    rep = write_report(child)
    (fork,) = [m for m in rep.data.markers if m.kind == "fork"]
    assert (fork.tick, fork.label) == (3, "forked from parent")
    assert "| fork | forked from parent | ticks before 3 are the parent's (" in (
        rep.summary.read_text("utf-8")
    )


@pytest.mark.slow
def test_a_fork_mends_a_later_step_that_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML.format(step=WRONG), encoding="utf-8")
    broken = tmp_path / "broken"
    code, _, err = _cli(capsys, "run", str(exp), "--out", str(broken))
    assert code == 1
    assert "city.open_place: 'park-1' is not closed; nothing to open (workflow.1" in err
    # Its later step mended: the two ticks before are copied, the rest runs.
    code, out, _ = _cli(
        capsys, "run", "--fork", str(broken), "--at", "2",
        "--set", "workflow.1.intervene.action=close_place",
    )  # fmt: skip
    mended = tmp_path / "broken-fork-2"
    assert code == 0 and out.startswith(f"completed: {mended}")
    assert "  ran: intervention city.close_place (workflow.1); survey mood" in out
    events = [json.loads(x) for x in (mended / "events.jsonl").read_text().splitlines()]
    assert [e["place"] for e in events if e["type"] == "place_closed"] == ["park-1"]
    assert max(_ticks(mended)) == 4 and _manifest(mended)["reason"] is None
    size = json.loads((mended / "checkpoints" / "tick-00000002" / "engine.json").read_text())[
        "events_bytes"
    ]
    assert (mended / "events.jsonl").read_bytes()[:size] == (broken / "events.jsonl").read_bytes()[
        :size
    ]
    # Its parent gone, the lineage still names it.
    shutil.rmtree(broken)
    code, text, _ = _cli(capsys, "inspect", str(mended))
    assert f"  forked from  {broken.resolve()} at tick 2 (folder missing)\n" in text


@pytest.mark.slow
def test_a_what_if_fork_from_an_experiment_file(
    parent: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    what_if = tmp_path / "what-if.yaml"
    message = "intervene: {message: 'The park stays open.', agents: all}"
    what_if.write_text(_YAML.format(step=message), encoding="utf-8")
    child = tmp_path / "what-if"
    code, _, _ = _cli(
        capsys, "run", "--fork", str(parent), "--at", "2", str(what_if), "--out", str(child)
    )
    assert code == 0
    types = [json.loads(x)["type"] for x in (child / "events.jsonl").read_text().splitlines()]
    assert "place_closed" not in types and "intervention" in types
    memory = (child / "agents" / "people-00000" / "memory.jsonl").read_text()
    assert "The park stays open." in memory
    # The seed made the ticks before the fork: a fork may not change it.
    what_if.write_text(_YAML.format(step=message).replace("seed: 4", "seed: 5"))
    code, _, err = _cli(
        capsys,
        "run",
        "--fork",
        str(parent),
        "--at",
        "2",
        str(what_if),
        "--out",
        str(tmp_path / "x"),
    )
    assert code == 2
    assert err.startswith(
        f"error: seed: differs from the parent run's seed (run {parent}); the ticks before "
        "tick 2 are copied from it, not re-run"
    )
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--at", "9"], r"has no checkpoint at tick 9 \(checkpoints at ticks: 1, 2, 3, 4\); "),
        (["--at", "3", "--set", "workflow.1.intervene.args.place=cafe-1"],
         r"workflow\.1: differs from the parent run's step, which ran before tick 3 "
         r"\(the fork starts inside workflow\.3\); change only workflow\.3 and later steps"),
        (["--at", "1", "--set", "workflow.0.run.ticks=0"], r"workflow\.0\.run\.ticks"),
        (["--at", "3", "--set", "workflow.3.run.ticks=0"], r"workflow\.3\.run\.ticks"),
        (["--at", "1", "--set", "workflow.9.run.ticks=1"],
         r"--set workflow\.9\.run\.ticks: workflow\.9: there is no item '9' \(the list has 4\)"),
        (["--at", "1", "--set", "seed"], r"--set: 'seed' is not KEY=VALUE"),
        (["--at", "1", "--set", "name=[unclosed"], r"name: .*'\[unclosed'"),
        (["--at", "1", "missing.yaml"], r"cannot read experiment file missing\.yaml"),
        (["--at", "1", "--set", "seed.x=1"], r"seed is a value, not a mapping or list"),
        (["--at", "2", "--set", "workflow.0.run.ticks=1"],
         r"workflow\.0: must stay a run step of at least 2 ticks"),
        ([], r"--at: --fork needs the tick to start from"),
        (["--at", "1", "--resume", "x"], r"--fork: cannot be combined with --resume"),
    ],
    ids=["no-checkpoint", "earlier-step", "bad-value", "bad-later-value", "no-item",
         "not-key-value", "not-yaml", "no-file", "not-mapping", "run-step-shorter", "no-at",
         "resume"],
)  # fmt: skip
def test_fork_errors(
    parent: Path, argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    out = tmp_path / "child"
    code, _, err = _cli(capsys, "run", "--fork", str(parent), *argv, "--out", str(out))
    assert code == 2
    assert re.search(message, err), err
    assert not out.exists()


def test_fork_options_need_a_fork_and_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _cli(capsys, "run", "--at", "2")
    assert code == 2 and "error: --at: needs --fork RUN; add --fork RUN" in err
    code, _, err = _cli(capsys, "run", "x.yaml", "--set", "seed=1")
    assert code == 2 and "error: --set: only amends a fork" in err
    code, _, err = _cli(capsys, "run", "--fork", str(tmp_path / "gone"), "--at", "2")
    assert code == 2 and f"error: --fork: {tmp_path / 'gone'} is not a run folder" in err
    with pytest.raises(SystemExit):
        main(["run", "--fork", "x", "--at", "-1"])
    assert "-1 is not a tick >= 0; give a checkpoint's tick" in capsys.readouterr().err
