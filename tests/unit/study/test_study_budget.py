"""A study's estimate and its budget: ``agentsim study --estimate`` against the study it
estimates, a budget shared out among the runs that stops the study with exit code 4, and a
resume with a raised budget that completes it."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import BudgetConfig
from agentsim.errors import ConfigError
from agentsim.study.budget import (
    RunSpending,
    budget_with_sets,
    inherited_by,
    run_ticks,
    share,
    spent_by,
)
from agentsim.study.spec import load_study
from tests.unit.helpers import REPO

EXAMPLE = REPO / "experiments/studies/rumour.yaml"


def _manifest(study_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((study_dir / "manifest.json").read_text("utf-8"))
    return data


def _own_spending(study_dir: Path) -> tuple[int, int]:
    """(calls, tokens) the study's runs made themselves: a fork's inherited history, which
    its parent made, counted once."""
    calls = tokens = 0
    for row in _manifest(study_dir)["runs"]:
        if not (study_dir / row["dir"] / "metrics.json").is_file():
            continue  # not started
        sp = json.loads((study_dir / row["dir"] / "metrics.json").read_text("utf-8"))["spending"]
        c, t = sp["calls"], sp["prompt_tokens"] + sp["completion_tokens"]
        if row["fork_of"] is not None:
            at = row["fork_of"]
            cp = study_dir / "runs" / at["run"] / "checkpoints" / f"tick-{at['tick']:08d}"
            base = json.loads((cp / "engine.json").read_text("utf-8"))["metrics"]["spending"]
            c -= base["calls"]
            t -= base["prompt_tokens"] + base["completion_tokens"]
        calls, tokens = calls + c, tokens + t
    return calls, tokens


def _example_copy(tmp_path: Path, budget: str) -> Path:
    (tmp_path / "town-rumour.yaml").write_bytes((EXAMPLE.parent / "town-rumour.yaml").read_bytes())
    text = EXAMPLE.read_text("utf-8").replace("concurrency: 2", f"concurrency: 2\n{budget}")
    path = tmp_path / "rumour.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_estimate_of_the_example_study_is_within_its_stated_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["study", str(EXAMPLE), "--estimate", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert set(est["arms"]) == {"announcement", "rumour"}
    assert [a["runs"] for a in est["arms"].values()] == [3, 3]
    # The fork arm is estimated from its fork tick on: fewer calls than the control's.
    assert est["arms"]["rumour"]["each"]["calls"] < est["arms"]["announcement"]["each"]["calls"]
    assert not (tmp_path / "out").exists()
    assert main(["study", str(EXAMPLE), "--out", str(tmp_path / "out")]) == 0
    calls, tokens = _own_spending(tmp_path / "out")
    total = est["total"]
    # docs/studies.md states the bounds: calls within 25%, tokens within 35% (offline).
    assert abs(total["calls"] / calls - 1) <= 0.25, (total["calls"], calls)
    estimated_tokens = total["prompt_tokens"] + total["output_tokens"]
    assert abs(estimated_tokens / tokens - 1) <= 0.35, (estimated_tokens, tokens)
    # `agentsim study report` compares the arms of the study that was run.
    capsys.readouterr()
    assert main(["study", "report", str(tmp_path / "out")]) == 0
    summary = (tmp_path / "out" / "report" / "summary.md").read_text("utf-8")
    assert "## survey opinion (likert): mean answer" in summary
    assert "| `rumour` | 3 |" in summary and "(paired t, 3 pairs)" in summary
    assert (tmp_path / "out" / "report" / "plots" / "survey-opinion.png").is_file()
    # The readable table names each arm and the total.
    assert main(["study", str(EXAMPLE), "--estimate"]) == 0
    table = capsys.readouterr().out
    assert "announcement" in table and "rumour" in table and "total" in table
    assert "wall time at concurrency 2" in table


@pytest.mark.slow
def test_a_study_budget_stops_the_study_and_a_raised_one_completes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = _example_copy(tmp_path, "budget: {tokens: 12000000}")
    out = tmp_path / "out"
    assert main(["study", str(study), "--out", str(out)]) == 4
    err = capsys.readouterr().err
    assert "budget.tokens=" in err and "would be passed" in err
    assert f"agentsim study --resume {out} --set budget.KEY=VALUE" in err
    manifest = _manifest(out)
    assert manifest["state"] == "stopped"
    assert manifest["budget_stop"].startswith("run announcement-r")
    states = {r["id"]: r["state"] for r in manifest["runs"]}
    assert "complete" not in states.values()
    assert "stopped" in states.values()
    # What the runs spent stays within the study's budget.
    _, spent = _own_spending(out)
    assert spent <= 12_000_000
    # Each stopped run kept a checkpoint and said why in its own manifest.
    for row in manifest["runs"]:
        if row["state"] == "stopped":
            run = json.loads((out / row["dir"] / "manifest.json").read_text("utf-8"))
            assert run["budget_stop"]["limit"] == "tokens"
            assert any((out / row["dir"] / "checkpoints").iterdir())
    code = main(["study", "--resume", str(out), "--set", "budget.tokens=60000000"])
    assert code == 0
    manifest = _manifest(out)
    assert manifest["budget"] == {"tokens": 60000000}
    assert manifest["state"] == "complete"
    assert "budget_stop" not in manifest
    assert {r["state"] for r in manifest["runs"]} == {"complete"}
    assert _own_spending(out)[1] <= 60_000_000


def test_a_share_is_in_proportion_to_the_ticks_each_run_has_left(tmp_path: Path) -> None:
    study = load_study(EXAMPLE)
    control = next(r for r in study.runs if r.id == "announcement-r1")
    fork = next(r for r in study.runs if r.id == "rumour-r1")
    budget = BudgetConfig(tokens=5_400_000, money=54.0, wall_time=timedelta(hours=1))
    nothing = RunSpending()
    # 3 controls x 12 ticks + 3 forks x 6 ticks = 54 ticks waiting.
    grant = share(
        budget,
        run=control,
        own=nothing,
        inherited=nothing,
        others_spent=nothing,
        reserved={},
        waiting_ticks=54,
        study_seconds=600.0,
    )
    assert grant.empty is None
    assert grant.budget == {"tokens": 1_200_000, "money": 12.0, "wall_time": "3000s"}
    # A fork: half the ticks, on top of what it inherited from its parent; what others
    # spent and what the runs under way hold back is not its to spend.
    grant = share(
        budget,
        run=fork,
        own=RunSpending(tokens=100_000, money=1.0),
        inherited=RunSpending(tokens=500_000, money=5.0),
        others_spent=RunSpending(tokens=2_000_000, money=20.0),
        reserved={"tokens": 1_000_000, "money": 10.0},
        waiting_ticks=18,
        study_seconds=0.0,
    )
    # Left: 5.4M - 2M - 1M - 0.1M = 2.3M; its share 6/18 of it.
    assert grant.budget["tokens"] == 500_000 + 100_000 + 2_300_000 * 6 // 18
    assert grant.budget["money"] == pytest.approx(5.0 + 1.0 + 23.0 * 6 / 18)
    # A fork's clock starts at its parent's at the fork tick: it gets what is left on top.
    clock = share(
        BudgetConfig(wall_time=timedelta(minutes=60)),
        run=fork,
        own=nothing,
        inherited=RunSpending(seconds=1200.0),
        others_spent=nothing,
        reserved={},
        waiting_ticks=6,
        study_seconds=1200.0,
    )
    assert clock.budget == {"wall_time": "3600s"}
    spent = share(
        budget,
        run=control,
        own=nothing,
        inherited=nothing,
        others_spent=RunSpending(tokens=5_400_000),
        reserved={},
        waiting_ticks=12,
        study_seconds=0.0,
    )
    assert spent.empty == "tokens"
    late = share(
        BudgetConfig(wall_time=timedelta(minutes=10)),
        run=control,
        own=nothing,
        inherited=nothing,
        others_spent=nothing,
        reserved={},
        waiting_ticks=12,
        study_seconds=600.0,
    )
    assert late.empty == "wall_time"


def test_a_resume_changes_only_the_budget_and_checks_it() -> None:
    assert budget_with_sets({"tokens": 5}, ["budget.money=2.5", "budget.wall_time=2h"]) == {
        "tokens": 5,
        "money": 2.5,
        "wall_time": "2h",
    }
    with pytest.raises(ConfigError, match="a study's resume only changes its budget"):
        budget_with_sets(None, ["seed=3"])
    with pytest.raises(ConfigError, match=r"budget .* is not valid"):
        budget_with_sets(None, ["budget.tokens=0"])


def test_study_options_that_do_not_go_together_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["study", str(EXAMPLE), "--set", "budget.tokens=5"]) == 2
    assert "--set: only changes a resumed study's budget" in capsys.readouterr().err
    assert main(["study", "--resume", str(tmp_path), "--estimate"]) == 2
    assert "--estimate: takes a study file" in capsys.readouterr().err


FLAKY = '''
import os

from agentsim.env.base import EnvModule


class Flaky(EnvModule):
    """Fails the run at tick 4 while the file ``fail_while`` exists."""

    name = "flaky"

    def tick_events(self, clock):
        if clock.tick >= 4 and os.path.exists(self.options["fail_while"]):
            raise RuntimeError(f"flaky at tick {clock.tick}")
        return []
'''

RESTARTED = """\
name: restarted
seed: 1
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 5}}
  - survey: {{name: opinion, question: "What do you think of the park?"}}
agents:
  - {{group: citizens, count: 5, skills: {{default: [social-feed], disabled: [daily-guidance]}}}}
model: {{backend: scripted}}
environment:
  - {{module: social, follow_k: 3, topic: the park}}
  - {{module: ./flaky.py:Flaky, fail_while: {flag}}}
output: {{dir: workspace, checkpoint_every: 0}}
"""

ONE_ARM = """\
name: s
experiment: base.yaml
replicates: {seeds: [1]}
arms: [{name: control}]
measures: [{survey: opinion}]
concurrency: 1
budget: {tokens: 1000000000}
"""


@pytest.mark.slow
def test_what_a_run_killed_before_its_first_checkpoint_spent_stays_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flag = tmp_path / "fail"
    (tmp_path / "flaky.py").write_text(FLAKY, encoding="utf-8")
    (tmp_path / "base.yaml").write_text(RESTARTED.format(flag=flag), encoding="utf-8")
    (tmp_path / "study.yaml").write_text(ONE_ARM, encoding="utf-8")
    # What the run costs whole: the same study where it does not fail.
    whole = tmp_path / "whole"
    assert main(["study", str(tmp_path / "study.yaml"), "--out", str(whole)]) == 0
    full = json.loads((whole / "runs/control-r1/metrics.json").read_text("utf-8"))["spending"]
    need = full["prompt_tokens"] + full["completion_tokens"]
    # The first attempt fails at tick 4, before any checkpoint: 4 ticks paid for.
    flag.touch()
    out = tmp_path / "out"
    assert main(["study", str(tmp_path / "study.yaml"), "--out", str(out)]) == 1
    assert "flaky at tick 4" in capsys.readouterr().err
    first = json.loads((out / "runs/control-r1/metrics.json").read_text("utf-8"))["spending"]
    spent = first["prompt_tokens"] + first["completion_tokens"]
    assert first["ticks"] == 4 and spent > full["tick_max"]["tokens"]
    assert not (out / "runs/control-r1/checkpoints").exists()
    # A budget the whole run fits in with its dearest tick to spare, but not on top of what
    # the first attempt spent: the study counts it and stops the run.
    flag.unlink()
    budget = need + full["tick_max"]["tokens"]
    code = main(["study", "--resume", str(out), "--set", f"budget.tokens={budget}"])
    err = capsys.readouterr().err
    assert code == 4, err
    assert (
        f"study s: control-r1 starts again from its beginning; what its last attempt spent "
        f"stays counted ({spent:,} tokens)"
    ) in err
    assert f"error: run control-r1: budget: budget.tokens={budget - spent:,} tokens" in err
    manifest = _manifest(out)
    assert manifest["state"] == "stopped" and manifest["budget_stop"].startswith(
        "run control-r1: budget: budget.tokens="
    )
    (row,) = manifest["runs"]
    assert row["state"] == "stopped" and row["lost"] == {"tokens": spent, "money": 0.0}
    # The run was given what the study had left after the first attempt, and kept to it.
    run = json.loads((out / "runs/control-r1/manifest.json").read_text("utf-8"))
    assert run["budget_stop"]["limit"] == "tokens"
    assert run["budget_stop"]["budget"] == budget - spent
    assert run["ticks_done"] < 5
    # Raised to cover both attempts, the run completes; the first attempt stays counted.
    code = main(["study", "--resume", str(out), "--set", f"budget.tokens={budget + spent}"])
    assert code == 0, capsys.readouterr().err
    manifest = _manifest(out)
    assert manifest["state"] == "complete" and manifest["runs"][0]["lost"]["tokens"] == spent


def test_a_run_s_spending_counts_what_its_resumes_threw_away(tmp_path: Path) -> None:
    study = load_study(EXAMPLE)
    control = next(r for r in study.runs if r.id == "announcement-r1")
    fork = next(r for r in study.runs if r.id == "rumour-r1")

    def spending(tokens: int, cost: float, lost: int, lost_cost: float) -> dict[str, Any]:
        return {
            "prompt_tokens": tokens,
            "completion_tokens": 0,
            "cost": cost,
            "lost": {"prompt_tokens": lost, "completion_tokens": 10, "cost": lost_cost},
        }

    for run, metrics in (
        (control, spending(1000, 1.0, 90, 0.5)),
        (fork, spending(5000, 3.0, 190, 1.0)),
    ):
        (tmp_path / run.dir).mkdir(parents=True)
        (tmp_path / run.dir / "metrics.json").write_text(
            json.dumps({"spending": metrics, "wall_seconds": 7.0}), "utf-8"
        )
    assert spent_by(tmp_path, control) == RunSpending(tokens=1100, money=1.5, seconds=7.0)
    # A fork's inherited counts (its parent's at the fork tick) are its parent's spending,
    # what the parent's resumes threw away before then included.
    cp = tmp_path / "runs/announcement-r1/checkpoints/tick-00000006"
    cp.mkdir(parents=True)
    (cp / "engine.json").write_text(
        json.dumps({"metrics": {"spending": spending(600, 0.5, 40, 0.25), "wall_seconds": 3.0}}),
        "utf-8",
    )
    assert inherited_by(tmp_path, fork) == RunSpending(tokens=650, money=0.75, seconds=3.0)
    assert spent_by(tmp_path, fork) == RunSpending(tokens=5200 - 650, money=3.25, seconds=7.0)


def test_a_run_s_wall_time_grant_counts_its_lost_seconds_as_its_own_budget_does(
    tmp_path: Path,
) -> None:
    # A run whose resumes threw away 50 s of ticks counts them against its wall_time (as
    # ``budget:`` does); the study's clock holds them already, so its grant must too, or
    # the run gets 50 s less than the study has left.
    from agentsim.run.budget import Projection, new_spending, over_budget

    study = load_study(EXAMPLE)
    control = next(r for r in study.runs if r.id == "announcement-r1")
    fork = next(r for r in study.runs if r.id == "rumour-r1")
    spending = {**new_spending(), "lost": {**new_spending()["lost"], "seconds": 50.0}}
    (tmp_path / control.dir).mkdir(parents=True)
    (tmp_path / control.dir / "metrics.json").write_text(
        json.dumps({"spending": spending, "wall_seconds": 100.0}), "utf-8"
    )
    cp = tmp_path / control.dir / "checkpoints" / "tick-00000006"
    cp.mkdir(parents=True)
    (cp / "engine.json").write_text(
        json.dumps({"metrics": {"spending": spending, "wall_seconds": 100.0}}), "utf-8"
    )
    left = 1000.0
    for run, own, inherited in (
        (control, spent_by(tmp_path, control), RunSpending()),
        (fork, RunSpending(), inherited_by(tmp_path, fork)),
    ):
        grant = share(
            BudgetConfig(wall_time=timedelta(hours=1)),
            run=run,
            own=own,
            inherited=inherited,
            others_spent=RunSpending(),
            reserved={},
            waiting_ticks=run_ticks(run),
            study_seconds=3600.0 - left,
        )
        budget = BudgetConfig(wall_time=timedelta(seconds=int(grant.budget["wall_time"][:-1])))
        # The run (its clock at 100 s) may still run for what the study has left.
        still = over_budget(
            budget,
            spending,
            wall_seconds=100.0 + left - 1,
            next_step=Projection("tick 7", 0.0, 0.0, 0.0),
        )
        assert still is None, (run.id, grant.budget, still and still.message())
