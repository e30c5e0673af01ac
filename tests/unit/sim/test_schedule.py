"""``executor.schedule: dependencies`` against ``barrier``: the same run folder, agents
running ahead no more than ``max_lead``, barriers where a module declares nothing, a hung
step bounded by ``step_timeout``, resume."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.agent.agent import step_seed
from agentsim.config.experiment import (
    BudgetConfig,
    ExperimentConfig,
    load_experiment,
    parse_experiment,
)
from agentsim.env import CityModule, EnvModule, SocialModule
from agentsim.env.base import ALL, AgentSet
from agentsim.hosts.local import LocalExecutor
from agentsim.run.engine import Engine, Progress, RunSummary
from agentsim.testing import FunctionModel
from agentsim.testing.function_model import ChatRequest, tool_call
from tests.unit import helpers

EXPERIMENTS = sorted((helpers.REPO / "experiments").glob("*.yaml"))

_YAML = """
name: sched
seed: 3
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: {count}
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
skills: {{builtin: false}}
model: {{backend: scripted}}
environment:
{modules}
executor: {{schedule: {schedule}, max_lead: {lead}, step_timeout: {timeout}}}
output: {{dir: ws, formats: [jsonl], checkpoint_every: {every}}}
"""


def experiment_text(
    *,
    schedule: str = "dependencies",
    ticks: int = 6,
    count: int = 6,
    lead: int = 2,
    timeout: float = 60,
    every: int = 0,
    modules: str = "  - {module: city}",
) -> str:
    return _YAML.format(
        ticks=ticks,
        count=count,
        lead=lead,
        schedule=schedule,
        timeout=timeout,
        every=every,
        modules=modules,
    )


def config(tmp: Path, **kw: Any) -> ExperimentConfig:
    return parse_experiment(experiment_text(**kw), base_dir=tmp)


def with_schedule(cfg: ExperimentConfig, schedule: str, **executor: Any) -> ExperimentConfig:
    ex = cfg.executor.model_copy(update={"schedule": schedule, **executor})
    return cfg.model_copy(update={"executor": ex})


class Steps:
    """Who steps which tick, seen from the model: agents pass their step seed to it.

    ``hold_for_lead``: the slow agent's call of tick 1 (once the others' reads of tick 1 have
    its moves of tick 0) waits until another agent calls that many ticks ahead of the
    slowest (a guard gives up after 30 s), so that the schedule's lead is reached however
    the machine interleaves the steps."""

    def __init__(
        self,
        cfg: ExperimentConfig,
        *,
        slow: str | None = None,
        hang: bool = False,
        hold_for_lead: int | None = None,
    ):
        ids = [f"people-{i:05d}" for i in range(cfg.agents[0].count)]
        self.of = {step_seed(cfg.seed, a, t): (a, t) for a in ids for t in range(20)}
        self.slow, self.hang = slow, hang
        self.finished = dict.fromkeys(ids, 0)  # ticks whose call has answered, by agent
        self.lead: list[int] = []  # at each call: its tick minus the slowest agent's
        self.hold_for_lead = hold_for_lead
        self.lead_reached = asyncio.Event()

    async def __call__(self, request: ChatRequest) -> Any:
        aid, tick = self.of[request.seed]
        self.lead.append(tick - min(self.finished.values()))
        if self.hold_for_lead is not None and self.lead[-1] >= self.hold_for_lead:
            self.lead_reached.set()
        if aid == self.slow:
            if self.hang:
                await asyncio.Event().wait()
            if self.hold_for_lead is not None and tick == 1:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(30):
                        await self.lead_reached.wait()
            await asyncio.sleep(0.1)
        else:
            await asyncio.sleep(0.005)
        self.finished[aid] = tick + 1
        if tick % 2 == 1 and aid != self.slow and not request.calls:
            # How many people are there: a read of everyone's moves, which waits.
            info = {"module": "city", "action": "place_info", "args": {"place": "cafe-1"}}
            return tool_call("ask_env", info)
        if tick % 2 == 0 and aid != self.slow:
            place = "cafe-1" if tick % 4 == 0 else "park-1"
            move = {"module": "city", "action": "move_to", "args": {"place": place}}
            if not request.calls:
                return tool_call("ask_env", move)
        return tool_call("finish", action=f"tick {tick}")


def run(cfg: ExperimentConfig, run_dir: Path, model: Any = None, **kw: Any) -> RunSummary:
    ex = LocalExecutor(model_factory=(lambda spec: FunctionModel(model))) if model else None
    return asyncio.run(Engine(cfg, run_dir=run_dir, executor=ex, **kw).run())


def assert_same_runs(first: Path, second: Path) -> None:
    a, b = helpers.run_fingerprint(first), helpers.run_fingerprint(second)
    assert sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)) == []
    assert len(a) > 3


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS, ids=[p.stem for p in EXPERIMENTS])
@pytest.mark.parametrize("hosts", [1, 3], ids=["1-host", "3-hosts"])
def test_each_shipped_experiment_writes_the_same_run_under_both_schedules(
    experiment: Path, hosts: int, tmp_path: Path
) -> None:
    cfg = load_experiment(experiment)
    # Past the first workflow steps: a checkpoint, an intervention and a survey.
    ticks = cfg.steps()[0].ticks + 2  # type: ignore[union-attr]
    for schedule in ("barrier", "dependencies"):
        one = with_schedule(cfg, schedule, hosts=hosts)
        assert run(one, tmp_path / schedule, max_ticks=ticks).status == "stopped"
    assert_same_runs(tmp_path / "barrier", tmp_path / "dependencies")


@pytest.mark.slow
def test_agents_run_ahead_of_a_slow_one_by_at_most_max_lead(tmp_path: Path) -> None:
    cfg = config(tmp_path, ticks=8, lead=3)
    steps = Steps(cfg, slow="people-00002", hold_for_lead=3 - 1)
    seen: list[Progress] = []
    summary = run(cfg, tmp_path / "run", steps, progress=seen.append)
    assert summary.status == "completed" and summary.metrics["agent_steps"] == 8 * 6
    # A call of tick t starts only once the slowest agent has done t - max_lead + 1 ticks.
    assert max(steps.lead) == 3 - 1
    assert [p.tick for p in seen] == list(range(1, 9))
    ahead = [p for p in seen if p.fastest is not None]
    assert ahead and all(p.tick < p.fastest <= p.tick + 3 for p in ahead)  # type: ignore[operator]
    # The progress line shows the slowest agent's tick and the fastest's.
    import io

    from agentsim.cli import _ProgressLine

    out = io.StringIO()
    line = _ProgressLine(out, max_ticks=None)
    line(ahead[0])
    assert f"tick {ahead[0].tick}/8 (fastest {ahead[0].fastest})  " in out.getvalue()
    # The same run, step for step, as under a barrier.
    barrier = with_schedule(cfg, "barrier")
    run(barrier, tmp_path / "barrier", Steps(cfg, slow="people-00002"))
    assert_same_runs(tmp_path / "run", tmp_path / "barrier")


@pytest.mark.slow
def test_a_module_that_declares_nothing_is_a_barrier(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(CityModule, "depends_on", EnvModule.depends_on)
    cfg = config(tmp_path, ticks=4, lead=4)
    steps = Steps(cfg, slow="people-00002")
    run(cfg, tmp_path / "run", steps)
    # No call of tick t + 1 before every agent's call of tick t has answered. (A second
    # call of tick t may come after the slowest agent's call of t answered: lead -1.)
    assert max(steps.lead) == 0 and len(steps.lead) > cfg.ticks * 6
    run(with_schedule(cfg, "barrier"), tmp_path / "barrier", Steps(cfg, slow="people-00002"))
    assert_same_runs(tmp_path / "run", tmp_path / "barrier")


def test_an_undeclared_module_next_to_a_declared_one_still_holds_every_agent(
    tmp_path: Path,
) -> None:
    mods = "  - {module: city}\n  - {module: social, follow_k: 2}"
    cfg = config(tmp_path, ticks=3, modules=mods)
    steps = Steps(cfg, slow="people-00001")
    run(cfg, tmp_path / "run", steps)
    assert max(steps.lead) == 0


def test_city_depends_on_the_agent_alone_unless_places_have_a_capacity(tmp_path: Path) -> None:
    free = CityModule({}, seed=1, base_dir=tmp_path)
    full = CityModule({"capacity": 3}, seed=1, base_dir=tmp_path)
    assert free.depends_on("a") == frozenset({"a"}) and full.depends_on("a") is ALL
    assert SocialModule({}, seed=1, base_dir=tmp_path).depends_on("a") is ALL
    assert repr(ALL) == "ALL"
    import pickle

    assert pickle.loads(pickle.dumps(ALL)) is ALL


def _followees(self: SocialModule, agent_id: str) -> AgentSet:
    return frozenset(self.get_state()["following"].get(agent_id, ()))


@pytest.mark.slow
def test_a_social_run_whose_follow_graph_changes_keeps_its_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Social declares ALL (its inbox takes messages from anyone); declared as the agents
    each one follows, the scheduler follows the graph as it changes, follows and unfollows
    included, and the run is the barrier's."""
    monkeypatch.setattr(SocialModule, "depends_on", _followees)
    mods = "  - {module: social, follow_k: 2, influence: 0.3}"
    cfg = config(tmp_path, ticks=6, count=8, lead=3, modules=mods)
    ids = [f"people-{i:05d}" for i in range(8)]
    of = {step_seed(cfg.seed, a, t): (a, t) for a in ids for t in range(6)}

    async def brain(request: ChatRequest) -> Any:
        aid, tick = of[request.seed]
        await asyncio.sleep(0.05 if aid == "people-00003" else 0.002)
        i = ids.index(aid)
        other = ids[(i + tick + 1) % 8]
        turn = len(request.calls)
        if turn == 0:
            action = ("follow", "unfollow")[tick % 2]
            args = {"module": "social", "action": "following", "args": {}}
            if tick % 2 == 0:
                args = {"module": "social", "action": action, "args": {"agent": other}}
            return tool_call("ask_env", args)
        if turn == 1:
            post = {"text": f"{aid} at {tick}", "stance": round((i - 4) / 4, 2)}
            return tool_call("ask_env", {"module": "social", "action": "post", "args": post})
        return tool_call("finish", action="posted")

    run(cfg, tmp_path / "run", brain)
    run(with_schedule(cfg, "barrier"), tmp_path / "barrier", brain)
    assert_same_runs(tmp_path / "run", tmp_path / "barrier")
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    kinds = [json.loads(line)["type"] for line in lines]
    assert kinds.count("follow") >= 8 and "opinion_change" in kinds


@pytest.mark.slow
def test_a_hung_step_is_bounded_by_step_timeout_without_deadlock(tmp_path: Path) -> None:
    # 2 s: room for the other agents' steps, which must not time out on a loaded machine.
    cfg = config(tmp_path, ticks=3, timeout=2)
    steps = Steps(cfg, slow="people-00004", hang=True)

    async def go() -> RunSummary:
        ex = LocalExecutor(model_factory=lambda spec: FunctionModel(steps))
        return await asyncio.wait_for(Engine(cfg, run_dir=tmp_path / "r", executor=ex).run(), 60)

    summary = asyncio.run(go())
    # One agent in six failed every step: over agent.max_error_share, yet every tick ended.
    assert summary.status == "completed with problems"
    assert summary.metrics["agent_steps"] == 18
    lines = (tmp_path / "r" / "events.jsonl").read_text().splitlines()
    errors = [e for e in map(json.loads, lines) if e["type"] == "agent_error"]
    assert [(e["agent_id"], e["tick"], e["error"]) for e in errors] == [
        ("people-00004", t, "step timed out after 2s") for t in range(3)
    ]
    # The others went on from its outcome, ahead of it.
    assert max(steps.lead) >= 1


@pytest.mark.slow
def test_resume_under_dependencies_is_the_uninterrupted_run(tmp_path: Path) -> None:
    cfg = config(tmp_path, ticks=6, every=2, lead=3)
    run(cfg, tmp_path / "whole", Steps(cfg, slow="people-00001"))
    assert run(cfg, tmp_path / "cut", Steps(cfg, slow="people-00001"), max_ticks=3).status == (
        "stopped"
    )
    resumed = asyncio.run(
        Engine(
            cfg,
            run_dir=tmp_path / "cut",
            executor=LocalExecutor(
                model_factory=lambda spec: FunctionModel(Steps(cfg, slow="people-00001"))
            ),
        ).run(resume=True)
    )
    assert resumed.status == "completed" and resumed.ticks == 6
    whole = (tmp_path / "whole" / "events.jsonl").read_bytes()
    assert (tmp_path / "cut" / "events.jsonl").read_bytes() == whole


def test_schedule_and_max_lead_are_checked_with_the_fix(tmp_path: Path) -> None:
    from agentsim.errors import ConfigError

    with pytest.raises(ConfigError, match=r"executor\.schedule.*dependencies.*barrier"):
        config(tmp_path, schedule="eager")
    with pytest.raises(ConfigError, match=r"executor\.max_lead"):
        config(tmp_path, lead=0)


_HOOKED = """---
name: alpha
description: Use for the alpha routine.
hooks: {pre_step: scripts/hook.py}
---
Alpha body, edition {n}.
"""


@pytest.mark.slow
def test_hot_reload_under_dependencies_reaches_each_agent_from_its_next_step(
    tmp_path: Path,
) -> None:
    from agentsim.inspect import open_run

    skills = tmp_path / "skills"

    def edition(n: int) -> None:
        (skills / "alpha" / "scripts").mkdir(parents=True, exist_ok=True)
        (skills / "alpha" / "SKILL.md").write_text(_HOOKED.replace("{n}", str(n)))
        hook = f"def entrypoint(argv, ctx):\n    return 'alpha v{n}'\n"
        (skills / "alpha" / "scripts" / "hook.py").write_text(hook)

    edition(1)
    text = (
        experiment_text(lead=3)
        .replace("default: []", "default: [alpha]")
        .replace("skills: {builtin: false}", f'skills: {{builtin: false, paths: ["{skills}"]}}')
    )
    cfg = parse_experiment(text, base_dir=tmp_path)
    steps = Steps(cfg, slow="people-00005")

    def between_ticks(p: Progress) -> None:
        if p.tick == 2:
            edition(2)

    run(cfg, tmp_path / "run", steps, progress=between_ticks)
    lines = (tmp_path / "run" / "events.jsonl").read_text().splitlines()
    (reload,) = [e for e in map(json.loads, lines) if e["type"] == "skills_reloaded"]
    assert reload["tick"] == 2 and reload["changed"] == ["custom@alpha"]
    record = open_run(tmp_path / "run")
    for aid in record.agents:
        seen = [
            h["text"]
            for step in record.agent(aid).trace()
            for h in step.get("hooks", ())
            if h["skill"] == "custom@alpha"
        ]
        # Old until the agent's first step after the change, new from then on.
        assert seen[:2] == ["alpha v1"] * 2 and seen[-1] == "alpha v2", aid
        assert seen == sorted(seen), aid


# -- a budget keeps the run-ahead ---------------------------------------------------------


class Costly(Steps):
    """``Steps`` whose agents (the slow one too) make ``extra[t]`` more calls at tick ``t``:
    a tick that costs more tokens than the others, measured when the run gets there."""

    def __init__(self, cfg: ExperimentConfig, extra: dict[int, int], **kw: Any) -> None:
        super().__init__(cfg, **kw)
        self.extra = extra
        self.called: set[int] = set()  # the ticks some step called the model at

    async def __call__(self, request: ChatRequest) -> Any:
        _, tick = self.of[request.seed]
        self.called.add(tick)
        if len(request.calls) < self.extra.get(tick, 0):
            self.lead.append(tick - min(self.finished.values()))
            info = {"module": "city", "action": "place_info", "args": {"place": "park-1"}}
            return tool_call("ask_env", info)
        return await super().__call__(request)


def _ticks(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == "tick_end"]


def _tokens_by_tick(run_dir: Path) -> list[int]:
    return [e["prompt_tokens"] + e["completion_tokens"] for e in _ticks(run_dir)]


def _events_to(run_dir: Path, ticks: int) -> list[str]:
    """The run's events up to the end of tick ``ticks`` - 1: its whole ticks."""
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    ends = [i for i, line in enumerate(lines) if json.loads(line)["type"] == "tick_end"]
    return lines[: ends[ticks - 1] + 1]


def budgeted(cfg: ExperimentConfig, tokens: int) -> ExperimentConfig:
    return cfg.model_copy(update={"budget": BudgetConfig(tokens=tokens)})


@pytest.mark.slow
def test_a_budget_keeps_the_run_ahead_and_stops_before_the_tick_it_cannot_pay(
    tmp_path: Path,
) -> None:
    # The first tick is the costliest (three more calls a step), so from tick 1 on the
    # projection of every tick is the first's and the budget pays for several at once.
    cfg = config(tmp_path, ticks=8, lead=3)
    free = Costly(cfg, {0: 3}, slow="people-00002")
    assert run(cfg, tmp_path / "free", free).status == "completed"
    cost = _tokens_by_tick(tmp_path / "free")
    assert cost[0] > max(cost[1:])
    # Enough for ticks 0-5 and not for tick 6 as projected (the first's cost): the run
    # stops before tick 6, "tick 7" counted from 1.
    limit = sum(cost[:6]) + cost[0] - 1
    # The slow agent's call of tick 1 waits until another agent calls a tick ahead of it.
    steps = Costly(cfg, {0: 3}, slow="people-00002", hold_for_lead=1)
    summary = run(budgeted(cfg, limit), tmp_path / "run", steps)
    assert summary.status == "stopped" and summary.ticks == 6
    assert summary.reason == (
        f"budget.tokens={limit:,} tokens would be passed: {sum(cost[:6]):,} tokens spent, "
        f"tick 7 needs about {cost[0]:,} tokens more; stopped before it, with a checkpoint: "
        "raise budget.tokens and resume (agentsim run --resume RUN --set budget.tokens=...)"
    )
    # Agents ran ahead of the slow one within the ticks paid for, never past max_lead,
    # and no step of a tick it could not pay for started.
    assert 1 <= max(steps.lead) <= 3 - 1
    assert max(steps.called) == 5
    assert (tmp_path / "run" / "checkpoints" / "tick-00000006").is_dir()
    assert _events_to(tmp_path / "run", 6) == _events_to(tmp_path / "free", 6)
    assert len(_ticks(tmp_path / "run")) == 6


@pytest.mark.slow
def test_a_budget_never_reached_writes_the_run_without_one(tmp_path: Path) -> None:
    cfg = config(tmp_path, ticks=8, lead=3)
    run(cfg, tmp_path / "free", Steps(cfg, slow="people-00002"))
    steps = Steps(cfg, slow="people-00002", hold_for_lead=3 - 1)
    summary = run(budgeted(cfg, 10**9), tmp_path / "run", steps)
    assert summary.status == "completed" and summary.ticks == 8
    assert max(steps.lead) == 3 - 1  # ahead of the slow agent, as without a budget
    free = (tmp_path / "free" / "events.jsonl").read_bytes()
    assert (tmp_path / "run" / "events.jsonl").read_bytes() == free


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["barrier", "dependencies"])
def test_a_tick_costlier_than_its_projection_ends_the_run_ahead_at_a_whole_tick(
    schedule: str, tmp_path: Path
) -> None:
    # Tick 3 costs far more than ticks 0-2, which the budget was projected by: once it is
    # measured, the budget no longer pays for the ticks the schedule was given.
    cfg = with_schedule(config(tmp_path, ticks=8, lead=3), schedule)
    extra = {3: 8}
    assert run(cfg, tmp_path / "free", Costly(cfg, extra, slow="people-00002")).ticks == 8
    cost = _tokens_by_tick(tmp_path / "free")
    assert cost[3] > 2 * max(cost[:3])
    limit = sum(cost[:4]) + cost[3] - 1  # pays for ticks 0-3 and not tick 4 after tick 3
    assert limit - cost[0] >= 4 * max(cost[:3])  # at tick 1, ticks 1-4 seemed paid for
    steps = Costly(cfg, extra, slow="people-00002")
    summary = run(budgeted(cfg, limit), tmp_path / "run", steps)
    done = summary.ticks
    stop = json.loads((tmp_path / "run" / "manifest.json").read_text())["budget_stop"]
    assert summary.status == "stopped" and stop["before"] == f"tick {done + 1}"
    assert stop["spent"] == sum(cost[:done]) and stop["next"] == max(cost[:done])
    if schedule == "barrier":
        assert done == 4 and max(steps.lead) <= 0  # one tick after another, as before
    else:
        # The ticks some agents had begun ahead (at most max_lead - 1 past tick 4) were
        # finished by all: the stop is a whole tick, and nothing past it had started.
        assert 4 <= done <= 4 + 3 - 1
    assert max(steps.called) == done - 1
    assert (tmp_path / "run" / "checkpoints" / f"tick-{done:08d}").is_dir()
    assert _events_to(tmp_path / "run", done) == _events_to(tmp_path / "free", done)
    # Raised, the budget lets the run go on to the run without one.
    resumed = asyncio.run(
        Engine(
            budgeted(cfg, 10**9),
            run_dir=tmp_path / "run",
            executor=LocalExecutor(
                model_factory=lambda spec: FunctionModel(Costly(cfg, extra, slow="people-00002"))
            ),
        ).run(resume=True)
    )
    assert resumed.status == "completed" and resumed.ticks == 8
    free = (tmp_path / "free" / "events.jsonl").read_bytes()
    assert (tmp_path / "run" / "events.jsonl").read_bytes() == free


@pytest.mark.slow
def test_agentsim_run_under_a_budget_and_dependencies_exits_4_at_a_whole_tick(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentsim.cli import main
    from agentsim.run.budget import BUDGET_EXIT_CODE

    def experiment(name: str, budget: str = "") -> str:
        text = experiment_text(ticks=8, lead=3)
        path = tmp_path / f"{name}.yaml"
        path.write_text(text + budget, "utf-8")
        return str(path)

    free = tmp_path / "free"
    assert main(["run", experiment("free"), "--out", str(free)]) == 0
    cost = _tokens_by_tick(free)
    # A budget never reached: the run without one, byte for byte.
    rich = tmp_path / "rich"
    assert (
        main(["run", experiment("rich", "budget: {tokens: 100000000}\n"), "--out", str(rich)]) == 0
    )
    assert (rich / "events.jsonl").read_bytes() == (free / "events.jsonl").read_bytes()
    # One that pays for about five ticks: exit 4 at a whole tick, with a checkpoint.
    limit = sum(cost[:5]) + 10
    run_dir = tmp_path / "run"
    capsys.readouterr()
    exp = experiment("run", f"budget: {{tokens: {limit}}}\n")
    assert main(["run", exp, "--out", str(run_dir)]) == BUDGET_EXIT_CODE
    err = capsys.readouterr().err
    manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    stop, done = manifest["budget_stop"], manifest["ticks_done"]
    assert manifest["status"] == "stopped" and 0 < done < 8
    assert stop["before"] == f"tick {done + 1}" and stop["spent"] == sum(cost[:done])
    assert stop["next"] == max(cost[:done])
    assert (
        f"error: budget.tokens={limit:,} tokens would be passed: {sum(cost[:done]):,} tokens "
        f"spent, tick {done + 1} needs about {max(cost[:done]):,} tokens more; stopped before "
        "it, with a checkpoint" in err
    )
    assert (run_dir / "checkpoints" / f"tick-{done:08d}").is_dir()
    assert _events_to(run_dir, done) == _events_to(free, done)
    assert len(_ticks(run_dir)) == done
    assert main(["run", "--resume", str(run_dir), "--set", "budget.tokens=100000000"]) == 0
    assert (run_dir / "events.jsonl").read_bytes() == (free / "events.jsonl").read_bytes()
