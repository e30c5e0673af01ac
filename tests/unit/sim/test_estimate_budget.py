"""``agentsim run --estimate`` (a pilot extrapolated to the run) and ``budget:`` (a run that
stops at a tick boundary before passing it, exit code 4, and resumes with a raised budget),
through ``agentsim.cli.main`` with real run folders, and against the OpenAI-compatible test
server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import BudgetConfig, load_experiment
from agentsim.inspect import open_run
from agentsim.run.budget import (
    BUDGET_EXIT_CODE,
    Projection,
    add_lost,
    lost_line,
    new_spending,
    over_budget,
    ticks_within,
)
from agentsim.run.engine import Engine, Progress
from agentsim.run.estimate import Estimate, estimate
from agentsim.testing import scripted_answer
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit import helpers

SMALL = helpers.FIXTURES / "experiments" / "small.yaml"
EXPERIMENTS = helpers.REPO / "experiments"

# The estimate's stated error on the shipped experiments, offline (docs/models.md,
# "Estimates"): model calls within 25% and tokens (prompt + output) within 35% of the run's.
CALLS_BOUND = 0.25
TOKENS_BOUND = 0.35
# Its wall time against the test server with a fixed answer time (the machine is shared:
# the engine's own time varies with the load).
WALL_BOUND = 0.5


def _small(tmp_path: Path, extra: str = "") -> Path:
    """small.yaml with its output under ``tmp_path`` and ``extra`` appended."""
    text = SMALL.read_text("utf-8").replace(
        "output: {dir: workspace, checkpoint_every: 2}",
        f"output: {{dir: {tmp_path / 'ws'}, checkpoint_every: 2, formats: [jsonl]}}",
    )
    path = tmp_path / "small.yaml"
    path.write_text(text + extra, "utf-8")
    return path


def _json(text: str) -> Any:
    return json.loads(text[text.index("{") :])


def _tokens(spending: dict[str, Any]) -> int:
    return int(spending["prompt_tokens"]) + int(spending["completion_tokens"])


def test_estimate_prints_a_table_and_writes_no_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _small(tmp_path)
    assert main(["run", "--estimate", str(exp)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("estimate: 20 agents x 6 ticks = 120 agent steps, 4 answers")
    for row in ("model calls", "prompt tokens", "of them cached", "output tokens", "cost"):
        assert f"  {row} " in out
    assert "wall time ~" in out and "pilot: 8 agents, 3 tick(s), 24 steps and 8 answers" in out
    assert "the scripted model's token model" in out  # the stated token model
    assert "no cost: some model the run uses has no model.prices" in out
    assert not (tmp_path / "ws").exists()
    # --json: the same estimate, machine-readable (the contract's fields).
    assert main(["run", "--estimate", "--json", str(exp)]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("calls", "prompt_tokens", "cached_tokens", "output_tokens", "cost"):
        assert isinstance(data[key], int | float)
    assert data["calls"] > data["pilot"]["calls"] > 0
    assert data["tokens"] == data["prompt_tokens"] + data["output_tokens"]
    assert data["priced"] is False and data["cost"] == 0
    assert data["agents"] == 20 and data["ticks"] == 6 and data["answers"] == 4
    assert not (tmp_path / "ws").exists()


def test_estimate_in_python_is_the_cli_s(tmp_path: Path) -> None:
    config = load_experiment(_small(tmp_path), environ={})
    est = estimate(config, agents=4, ticks=2, folder=tmp_path)
    assert isinstance(est, Estimate)
    assert est.pilot["agents"] == 4 and est.pilot["ticks"] == 2 and est.pilot["steps"] == 8
    # The pilot's temporary folder is gone; the user's output folder never existed.
    assert list(tmp_path.iterdir()) == [tmp_path / "small.yaml"]
    again = Estimate.from_dict(json.loads(json.dumps(est.to_dict())))
    assert again.calls == est.calls and again.assumptions == est.assumptions
    assert est.calls == round(est.parts["steps"]["calls"] + est.parts["answers"]["calls"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["daily-mobility", "opinion-dynamics"])
def test_estimate_offline_is_within_its_stated_error(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    code = main(
        ["run", "--estimate", "--then-run", str(EXPERIMENTS / f"{name}.yaml"), "--out", str(run)]
    )
    assert code == 0
    out = capsys.readouterr().out
    est = json.loads((run / "estimate.json").read_text("utf-8"))
    metrics = json.loads((run / "metrics.json").read_text("utf-8"))
    calls = metrics["model"]["calls"]  # every call the run's models answered
    tokens = metrics["model"]["prompt_tokens"] + metrics["model"]["completion_tokens"]
    assert calls == metrics["spending"]["calls"] and tokens == _tokens(metrics["spending"])
    assert abs(est["calls"] - calls) <= CALLS_BOUND * calls, (est["calls"], calls)
    assert abs(est["tokens"] - tokens) <= TOKENS_BOUND * tokens, (est["tokens"], tokens)
    # The summary line and inspect give estimated vs actual with the error in percent.
    err = open_run(run).state().estimate_error
    assert err is not None
    pct = round(100 * (est["calls"] - calls) / calls, 1)
    assert err["calls"] == {"estimated": est["calls"], "actual": calls, "error_pct": pct}
    assert f"estimate vs actual: calls {calls:,} est. {est['calls']:,} ({pct:+.1f}%)" in out
    assert main(["inspect", str(run)]) == 0
    assert f"  estimate     calls {calls:,} est. {est['calls']:,} ({pct:+.1f}%)" in (
        capsys.readouterr().out
    )


_SERVED = """
name: served
seed: 3
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 3}}
  - survey: {{name: mood, question: "How do you feel?", agents: all}}
agents:
  - group: people
    count: 40
    profile: {{template: generic}}
    skills: {{default: [social-feed], disabled: [daily-guidance]}}
model:
  backend: openai
  model: m
  base_url: "{base_url}"
  max_concurrency: 16
  timeout: 30
  prices: {{prompt_per_1k: 0.001, completion_per_1k: 0.002, cached_prompt_per_1k: 0.0005}}
agent: {{max_unfinished_share: 1}}
environment: [{{module: social, follow_k: 4}}]
output: {{dir: {out}, formats: [jsonl]}}
"""


@pytest.mark.slow
def test_estimate_against_a_server_gives_wall_time_and_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=scripted_answer, latency=0.3, prefix_cache_tokens=200_000) as srv:
        exp = tmp_path / "served.yaml"
        exp.write_text(_SERVED.format(base_url=srv.base_url, out=tmp_path / "ws"), "utf-8")
        run = tmp_path / "run"
        code = main(["run", "--estimate", "--then-run", str(exp), "--out", str(run), "--json"])
        served = srv.served
    out = capsys.readouterr().out
    assert code == 0
    summary = _json(out[out.index('{\n  "run_id"') :])
    est = json.loads((run / "estimate.json").read_text("utf-8"))
    metrics = json.loads((run / "metrics.json").read_text("utf-8"))
    wall, calls = metrics["wall_seconds"], metrics["model"]["calls"]
    assert abs(est["wall_seconds"] - wall) <= WALL_BOUND * wall, (est["wall_seconds"], wall)
    assert abs(est["calls"] - calls) <= CALLS_BOUND * calls
    # The pilot measured the server's answer time, the cache and the prices.
    assert 0.3 <= est["pilot"]["answer_time"] < 1.0
    assert est["priced"] is True and est["cached_tokens"] > 0 and est["cost"] > 0
    assert abs(est["cost"] - metrics["model"]["cost"]) <= TOKENS_BOUND * metrics["model"]["cost"]
    # The pilot's own calls are reported, and are the server's besides the run's and the
    # two pre-flight checks (the pilot's and the run's).
    assert served == est["pilot"]["model_calls"] + calls + 2
    assert summary["estimate"]["wall_seconds"]["estimated"] == est["wall_seconds"]
    assert summary["estimate"]["cost"]["actual"] == pytest.approx(metrics["model"]["cost"])


@pytest.mark.slow
def test_a_token_budget_stops_the_run_and_a_raised_one_resumes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _small(tmp_path, "budget: {tokens: 400000}\n")
    run = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run)]) == BUDGET_EXIT_CODE
    io = capsys.readouterr()
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    stop = manifest["budget_stop"]
    assert manifest["status"] == "stopped" and stop["limit"] == "tokens"
    assert stop["budget"] == 400000 and stop["spent"] <= 400000 < stop["spent"] + stop["next"]
    first = json.loads((run / "metrics.json").read_text("utf-8"))
    assert _tokens(first["spending"]) == stop["spent"]
    message = (
        f"budget.tokens=400,000 tokens would be passed: {round(stop['spent']):,} tokens spent, "
        f"{stop['before']} needs about {round(stop['next']):,} tokens more; stopped before it"
    )
    assert message in manifest["reason"]
    assert f"error: {message}" in io.err and "(exit code 4)" in io.err
    assert f"resume with: agentsim run --resume {run}" in io.out
    ticks = manifest["ticks_done"]
    assert 0 < ticks < 6 and (run / "checkpoints" / f"tick-{ticks:08d}").is_dir()
    assert open_run(run).state().budget_stop == stop
    # Resumed with the same budget: stops again at once. Raised: goes on to the end.
    assert main(["run", "--resume", str(run)]) == BUDGET_EXIT_CODE
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--set", "budget.tokens=5000000"]) == 0
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "completed" and manifest["budget_stop"] is None
    assert "tokens: 5000000" in (run / "config.yaml").read_text("utf-8")
    # What was spent and the wall time go on from where the run stopped.
    last = json.loads((run / "metrics.json").read_text("utf-8"))
    assert last["wall_seconds"] > first["wall_seconds"]
    assert _tokens(last["spending"]) > _tokens(first["spending"])
    assert last["spending"]["ticks"] == 6 and last["spending"]["answers"] == 4
    # The budget changed nothing of what the run did: the same as a run without one.
    free = tmp_path / "free"
    assert main(["run", str(_small(tmp_path)), "--out", str(free)]) == 0
    assert (run / "events.jsonl").read_bytes() == (free / "events.jsonl").read_bytes()


@pytest.mark.slow
def test_a_money_budget_counts_the_prices_of_the_scripted_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = "{prompt_per_1k: 0.01, completion_per_1k: 0.03}"
    exp = _small(tmp_path, "budget: {money: 8.0}\n")
    exp.write_text(
        exp.read_text("utf-8").replace(
            "model: {backend: scripted}", f"model: {{backend: scripted, prices: {prices}}}"
        ),
        "utf-8",
    )
    run = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run)]) == BUDGET_EXIT_CODE
    err = capsys.readouterr().err
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    stop = manifest["budget_stop"]
    spending = json.loads((run / "metrics.json").read_text("utf-8"))["spending"]
    cost = (spending["prompt_tokens"] * 0.01 + spending["completion_tokens"] * 0.03) / 1000
    assert stop["limit"] == "money" and stop["spent"] == pytest.approx(cost, abs=1e-6)
    assert cost <= 8.0 < cost + stop["next"]
    assert f"error: budget.money=8.0000 would be passed: {cost:,.4f} spent" in err
    assert main(["run", "--resume", str(run), "--set", "budget.money=100"]) == 0
    assert json.loads((run / "manifest.json").read_text("utf-8"))["status"] == "completed"


def test_a_budget_is_checked_before_each_tick_and_survey() -> None:
    spending = new_spending()
    spending.update(prompt_tokens=900, completion_tokens=50, cost=0.5)
    budget = BudgetConfig(tokens=1000, wall_time="1m")
    tick = Projection("tick 3", tokens=40, cost=0.1, seconds=5)
    assert over_budget(budget, spending, wall_seconds=10, next_step=tick) is None
    assert over_budget(None, spending, wall_seconds=10, next_step=tick) is None
    stop = over_budget(budget, spending, wall_seconds=56, next_step=tick)
    assert stop is not None and stop.limit == "wall_time"
    assert stop.message().startswith(
        "budget.wall_time=60.0 s would be passed: 56.0 s spent, tick 3 needs about 5.0 s more"
    )
    late = over_budget(budget, spending, wall_seconds=61, next_step=tick)
    assert late is not None and late.message().startswith(
        "budget.wall_time=60.0 s was passed: 61.0 s spent (the last tick cost more than any "
        "before it); stopped before tick 3, with a checkpoint: raise budget.wall_time"
    )
    survey = Projection("survey midday", tokens=60, cost=0.0, seconds=0)
    stop = over_budget(budget, spending, wall_seconds=0, next_step=survey)
    assert stop is not None and stop.to_dict() == {
        "limit": "tokens",
        "budget": 1000.0,
        "spent": 950.0,
        "next": 60.0,
        "before": "survey midday",
    }


def test_a_budget_pays_for_as_many_ticks_as_its_projection_fits() -> None:
    spending = new_spending()
    spending.update(prompt_tokens=900, completion_tokens=50, cost=5.6)
    budget = BudgetConfig(tokens=2000, money=17.4)
    tick = Projection("tick 3", tokens=40, cost=0.0, seconds=5)
    # 950 + 26 x 40 = 1,990 fits, 27 would not; money costs nothing per tick.
    assert ticks_within(budget, spending, wall_seconds=0, per_tick=tick, most=100) == 26
    assert ticks_within(budget, spending, wall_seconds=0, per_tick=tick, most=8) == 8
    assert ticks_within(None, spending, wall_seconds=0, per_tick=tick, most=8) == 8
    # The count agrees with over_budget's own sums where dividing rounds either way.
    for cost, spent, cap, n in [(0.04, 5.6, 17.4, 295), (0.075, 5.115, 23.115, 239)]:
        spending["cost"] = spent
        money = BudgetConfig(money=cap)
        each = Projection("tick 3", tokens=0, cost=cost, seconds=0)
        assert ticks_within(money, spending, wall_seconds=0, per_tick=each, most=10**6) == n
        assert spent + n * cost <= cap < spent + (n + 1) * cost
    # None at all: over_budget says which limit.
    spending["cost"] = 0.0
    over = Projection("tick 3", tokens=1100, cost=0.0, seconds=5)
    assert ticks_within(budget, spending, wall_seconds=0, per_tick=over, most=8) == 0
    stop = over_budget(budget, spending, wall_seconds=0, next_step=over)
    assert stop is not None and stop.message().startswith(
        "budget.tokens=2,000 tokens would be passed: 950 tokens spent, tick 3 needs about "
        "1,100 tokens more"
    )
    # A limit already passed pays for nothing, even what costs nothing.
    free = Projection("tick 3", tokens=0, cost=0.0, seconds=0)
    assert ticks_within(budget, spending, wall_seconds=0, per_tick=free, most=8) == 8
    assert (
        ticks_within(BudgetConfig(tokens=900), spending, wall_seconds=0, per_tick=free, most=8) == 0
    )


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ("{tokens: 0}", "budget.tokens: input should be greater than or equal to 1 (got 0)"),
        ("{tokens: 2.5}", "budget.tokens: input should be a valid integer (got 2.5)"),
        ("{money: five}", "budget.money: 'five' is not an amount of money; give a number"),
        ("{money: -1}", "budget.money: input should be greater than 0 (got -1)"),
        ("{wall_time: soon}", "budget.wall_time: cannot read 'soon' as a duration"),
        ("{}", "budget: names no limit; give at least one of tokens, money and wall_time"),
        ("{tokenz: 5}", "budget.tokenz: unknown field 'tokenz'"),
        (
            "{money: 5}",
            "budget.money: a money budget needs the price of every model the run uses; model "
            "has no prices; add prices to model",
        ),
    ],
)
def test_bad_budgets_exit_2_with_the_field(
    budget: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _small(tmp_path, f"budget: {budget}\n")
    assert main(["run", str(exp), "--out", str(tmp_path / "run")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_estimate_and_resume_options_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _small(tmp_path)
    assert main(["run", "--then-run", str(exp)]) == 2
    assert "error: --then-run: needs --estimate; add --estimate" in capsys.readouterr().err
    assert main(["run", "--estimate", "--resume", str(tmp_path / "r")]) == 2
    assert "--estimate: estimates a new run of an experiment file" in capsys.readouterr().err
    run = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run), "--ticks", "1"]) == 0
    capsys.readouterr()
    assert main(["run", "--resume", str(run), "--set", "seed=3"]) == 2
    assert "'seed' cannot change on a resume" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "--estimate", "--pilot-agents", "0", str(exp)])
    assert "0 is not a whole number of agents >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_groups_from_files_and_a_model_per_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    people = tmp_path / "people.jsonl"
    people.write_text(
        "".join(json.dumps({"name": f"P{i}", "age": 30 + i}) + "\n" for i in range(5)), "utf-8"
    )
    students = helpers.FIXTURES / "configs" / "data" / "students.csv"
    exp = tmp_path / "mixed.yaml"
    exp.write_text(
        f"""
name: mixed
seed: 1
workflow: [{{run: {{ticks: 2}}}}, {{survey: {{name: q, question: "How are you?"}}}}]
agents:
  - {{group: students, profiles: {students}}}
  - {{group: people, profiles: people.jsonl, model: other}}
  - {{group: crowd, count: 30}}
model: {{backend: scripted, prices: {{prompt_per_1k: 0.01, completion_per_1k: 0.02}}}}
models: {{other: {{backend: scripted, prices: {{prompt_per_1k: 0.1, completion_per_1k: 0.2}}}}}}
budget: {{money: 1000}}
output: {{dir: {tmp_path / "ws"}, formats: [jsonl]}}
""",
        "utf-8",
    )
    run = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run)]) == 0
    err = capsys.readouterr().err
    assert "estimate: " in err and "kept in the run folder's estimate.json" in err
    est = json.loads((run / "estimate.json").read_text("utf-8"))
    # 8 pilot agents over 2 + 5 + 30: at least one of each group.
    assert est["pilot"]["agents"] == 8 and est["agents"] == 37 and est["answers"] == 37
    spending = json.loads((run / "metrics.json").read_text("utf-8"))["spending"]
    assert set(spending["by_model"]) == {"default", "other"}
    for name, (p, c) in {"default": (0.01, 0.02), "other": (0.1, 0.2)}.items():
        part = spending["by_model"][name]
        want = (part["prompt_tokens"] * p + part["completion_tokens"] * c) / 1000
        assert part["cost"] == pytest.approx(want)
    assert spending["answers"] == 37 and spending["answer_usage"]["calls"] == 37
    cmp = json.loads((run / "manifest.json").read_text("utf-8"))["estimate_error"]
    assert cmp["cost"]["actual"] == pytest.approx(spending["cost"], abs=1e-6)


@pytest.mark.slow
def test_a_pilot_that_cannot_reach_its_server_fails_the_pre_flight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _small(tmp_path)
    exp.write_text(
        exp.read_text("utf-8").replace(
            "model: {backend: scripted}",
            "model: {backend: openai, model: m, base_url: 'http://127.0.0.1:9/v1', timeout: 2}",
        ),
        "utf-8",
    )
    assert main(["run", "--estimate", str(exp)]) == 2
    assert "pre-flight: cannot reach the model server at http://127.0.0.1:9/v1" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "ws").exists()


@pytest.mark.slow
def test_a_survey_that_would_pass_the_budget_is_not_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # small.yaml's first three ticks spend 375,875 tokens (85,321 + 91,991 + 198,563); the
    # survey of 4 agents is expected to cost 4 x the tokens per call so far (about 8,800).
    exp = _small(tmp_path, "budget: {tokens: 380000}\n")
    run = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(run)]) == BUDGET_EXIT_CODE
    err = capsys.readouterr().err
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    assert manifest["ticks_done"] == 3 and manifest["budget_stop"]["before"] == "survey check"
    assert manifest["budget_stop"]["spent"] == 375875
    assert "375,875 tokens spent, survey check needs about 8,792 tokens more" in err
    assert not (run / "surveys" / "check.jsonl").exists()
    assert main(["run", "--resume", str(run), "--set", "budget.tokens=2000000"]) == 0
    assert len((run / "surveys" / "check.jsonl").read_text("utf-8").splitlines()) == 4


@pytest.mark.slow
def test_an_estimate_from_a_tick_on_counts_a_fork_s_ticks_and_questions(
    tmp_path: Path,
) -> None:
    config = load_experiment(_small(tmp_path), environ={})
    # small.yaml: 3 ticks, interventions and the survey of 4 agents at tick 3, 3 ticks.
    at3 = estimate(config, folder=tmp_path, from_tick=3)
    at4 = estimate(config, folder=tmp_path, from_tick=4)
    assert (at3.ticks, at3.answers, at4.ticks, at4.answers) == (3, 4, 2, 0)
    # Every tick of a fork costs what the pilot's later ticks did: per tick the same.
    assert at3.parts["steps"]["calls"] / 3 == pytest.approx(at4.parts["steps"]["calls"] / 2)
    assert at4.parts["answers"]["calls"] == 0 < at3.parts["answers"]["calls"]
    assert any("a fork at tick 4" in a for a in at4.assumptions)


@pytest.mark.slow
def test_a_wall_time_budget_against_a_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=scripted_answer, latency=0.25) as srv:
        exp = tmp_path / "served.yaml"
        text = _SERVED.format(base_url=srv.base_url, out=tmp_path / "ws")
        text = text.replace("count: 40", "count: 12").replace(
            "max_concurrency: 16", "max_concurrency: 4"
        )
        exp.write_text(text + "budget: {wall_time: 2s}\n", "utf-8")
        run = tmp_path / "run"
        assert main(["run", str(exp), "--out", str(run)]) == BUDGET_EXIT_CODE
        err = capsys.readouterr().err
        manifest = json.loads((run / "manifest.json").read_text("utf-8"))
        stop = manifest["budget_stop"]
        # A tick makes about 55 calls of 0.25 s over 4 slots: more than 2 s, as the
        # estimate says before the first.
        assert stop["limit"] == "wall_time" and stop["next"] > 2.0 and manifest["ticks_done"] < 3
        assert "error: budget.wall_time=2.0 s would be passed" in err
        assert main(["run", "--resume", str(run), "--set", "budget.wall_time=1h"]) == 0
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "completed" and manifest["ticks_done"] == 3


@pytest.mark.slow
def test_a_resume_counts_what_the_ticks_it_runs_again_spent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A run killed between checkpoints: small.yaml checkpoints every 2 ticks; this one dies
    # after tick 5, so tick 5 was paid for and its work is thrown away by the resume from
    # tick 4, which runs it again.
    class Killed(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 5:
            raise Killed("the machine went away")

    exp = _small(tmp_path, "budget: {tokens: 100000000}\n")
    run = tmp_path / "run"
    with pytest.raises(Killed, match="the machine went away"):
        asyncio.run(Engine(load_experiment(exp, environ={}), run_dir=run, progress=progress).run())
    written = json.loads((run / "metrics.json").read_text("utf-8"))["spending"]
    cp = json.loads((run / "checkpoints/tick-00000004/engine.json").read_text("utf-8"))
    at_4 = cp["metrics"]["spending"]
    lost = _tokens(written) - _tokens(at_4)
    assert written["ticks"] == 5 and at_4["ticks"] == 4 and lost > 0
    # Enough for ticks 5 and 6 if tick 5 were paid once: the resumed run spends what the
    # killed one had before tick 6 again, and tick 6 is expected to cost the dearest tick.
    budget = _tokens(written) + written["tick_max"]["tokens"]
    code = main(["run", "--resume", str(run), "--set", f"budget.tokens={budget}"])
    io = capsys.readouterr()
    assert code == BUDGET_EXIT_CODE, io.err
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    stop = manifest["budget_stop"]
    assert manifest["status"] == "stopped" and manifest["ticks_done"] == 5
    assert stop["limit"] == "tokens" and stop["before"] == "tick 6"
    assert stop["spent"] == _tokens(written) + lost and stop["lost"] == lost
    message = (
        f"budget.tokens={budget:,} tokens would be passed: {_tokens(written) + lost:,} tokens "
        f"spent ({lost:,} tokens of them by work a resume threw away), tick 6 needs about "
        f"{written['tick_max']['tokens']:,} tokens more; stopped before it"
    )
    assert message in manifest["reason"]
    assert f"error: {message}" in io.err and "(exit code 4)" in io.err
    # The run's metrics keep it apart from what the run's own ticks spent.
    spending = json.loads((run / "metrics.json").read_text("utf-8"))["spending"]
    assert _tokens(spending) == _tokens(written)
    assert spending["lost"]["ticks"] == 1
    assert spending["lost"]["prompt_tokens"] + spending["lost"]["completion_tokens"] == lost
    assert spending["lost"]["calls"] == written["calls"] - at_4["calls"]
    calls = written["calls"] - at_4["calls"]
    assert f"  thrown away by resumes: 1 tick, {calls:,} model calls, {lost:,} tokens" in io.out
    assert main(["inspect", str(run)]) == 0
    shown = capsys.readouterr().out
    assert f"  thrown away  by resumes: 1 tick, {calls:,} model calls, {lost:,} tokens" in shown
    assert main(["inspect", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lost"] == spending["lost"]
    # Raised: goes on to the end, and what the resume threw away is still counted.
    assert main(["run", "--resume", str(run), "--set", f"budget.tokens={budget * 2}"]) == 0
    end = json.loads((run / "metrics.json").read_text("utf-8"))["spending"]
    assert end["lost"]["ticks"] == 1 and end["ticks"] == 6
    # Nothing of it is in the events: the same as a run that was never killed.
    free = tmp_path / "free"
    assert main(["run", str(_small(tmp_path)), "--out", str(free)]) == 0
    assert (run / "events.jsonl").read_bytes() == (free / "events.jsonl").read_bytes()


def test_what_resumes_threw_away_adds_up_and_counts_against_each_limit() -> None:
    def spending(ticks: int, tokens: int, cost: float, answer_seconds: float) -> dict[str, Any]:
        s = new_spending()
        s.update(
            ticks=ticks,
            calls=ticks * 10,
            prompt_tokens=tokens,
            completion_tokens=tokens // 10,
            cost=cost,
            answer_seconds=answer_seconds,
        )
        return s

    # The checkpoint at tick 2; the killed invocation wrote metrics.json after tick 4 and
    # a survey between them.
    at_2 = {"spending": spending(2, 1000, 0.5, 0.0), "tick_seconds": [1.0, 2.0]}
    written = {"spending": spending(4, 3000, 1.5, 0.25), "tick_seconds": [1.0, 2.0, 3.0, 4.0]}
    restored = json.loads(json.dumps(at_2))
    lost = add_lost(restored, written)
    assert lost == {
        "calls": 20,
        "prompt_tokens": 2000,
        "cached_prompt_tokens": 0,
        "completion_tokens": 200,
        "cost": 1.0,
        "seconds": 7.25,
        "ticks": 2,
    }
    assert restored["spending"]["lost"] == lost
    assert restored["spending"]["prompt_tokens"] == 1000  # the totals stay the run's own
    # Resumed from tick 2 again after a kill at tick 3: both throw-aways count.
    written = {
        "spending": {**spending(3, 2000, 1.0, 0.0), "lost": lost},
        "tick_seconds": [1.0, 2.0, 3.5],
    }
    twice = add_lost(json.loads(json.dumps(at_2)), written)
    assert (twice["ticks"], twice["prompt_tokens"], twice["seconds"]) == (3, 3000, 10.75)
    assert twice["cost"] == pytest.approx(1.5)
    # A clean stop (its checkpoint is where metrics.json was last written): nothing lost.
    clean = add_lost(json.loads(json.dumps(at_2)), at_2)
    assert lost_line({"lost": clean}) is None and lost_line({}) is None
    assert lost_line({"lost": twice}) == (
        "3 ticks, 30 model calls, 3,300 tokens, cost 1.5000, 10.8 s (counted against "
        "budget:, not in the totals)"
    )
    # Each limit counts it: money and wall time too.
    state = restored["spending"]
    nothing = Projection("tick 3", tokens=0, cost=0.0, seconds=0.0)
    money = over_budget(BudgetConfig(money=1.2), state, wall_seconds=0, next_step=nothing)
    assert money is not None and money.message().startswith(
        "budget.money=1.2000 was passed: 1.5000 spent (1.0000 of it by work a resume threw "
        "away) (the last tick cost more than any before it); stopped before tick 3"
    )
    assert money.to_dict()["lost"] == 1.0
    wall = over_budget(BudgetConfig(wall_time="10s"), state, wall_seconds=3, next_step=nothing)
    assert wall is not None and wall.spent == 10.25 and wall.lost == 7.25
    assert (
        over_budget(BudgetConfig(wall_time="11s"), state, wall_seconds=3, next_step=nothing) is None
    )


def test_a_killed_runs_metrics_hold_its_wall_time_so_far(tmp_path: Path) -> None:
    # metrics.json, written at every tick's end, is what is left of a run killed between
    # checkpoints (a study reads it to give the run's resume its wall time): its
    # wall_seconds must be the run's clock then, not the clock at the invocation's start,
    # or a resume is given less time than the study has left.
    class Killed(Exception):
        pass

    run = tmp_path / "run"
    left: list[dict[str, Any]] = []

    def progress(p: Progress) -> None:
        if p.tick == 5:  # what a kill -9 now would leave (no end of the run is written)
            left.append(json.loads((run / "metrics.json").read_text("utf-8")))
            raise Killed("the machine went away")

    exp = _small(tmp_path, "budget: {tokens: 100000000}\n")
    with pytest.raises(Killed):
        asyncio.run(Engine(load_experiment(exp, environ={}), run_dir=run, progress=progress).run())
    written = left[0]
    cp = json.loads((run / "checkpoints/tick-00000004/engine.json").read_text("utf-8"))
    assert written["ticks"] == 5
    assert cp["metrics"]["wall_seconds"] > 0
    assert written["wall_seconds"] >= cp["metrics"]["wall_seconds"]
