"""A skill written to AgentSociety2's contract in a real run: ``AGENT.json`` current before
each step, an async ``pre_step()`` hook calling ``int()`` on the payload's ``agent_id``,
``ids: numeric`` groups, and the run's checkpoints, resume, inspect and viewer with such ids.

The skill is our own, written to that contract: no AgentSociety2 code."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentsim.config.experiment import ExperimentConfig, parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from agentsim.testing import ChatRequest, FunctionModel, tool_call
from agentsim.view import create_app
from tests.unit import helpers

YAML = """
name: as2
seed: 4
clock: {start: "2026-03-02T06:00:00", tick: 2h}
ticks: 4
agents:
  - {group: named, count: 1, skills: {default: [day-plan]}}
  - {group: people, count: 2, ids: numeric, skills: {default: [day-plan]}}
skills: {builtin: false, paths: [skills]}
model: {backend: scripted}
environment: [{module: city}]
output: {dir: ws, formats: [jsonl], checkpoint_every: 2}
"""

SCRIPT = """\
import json
import sys
from pathlib import Path


def _now(root):
    return json.loads((Path(str(root)) / "AGENT.json").read_text(encoding="utf-8"))


def _plan_file(root, date):
    return Path(str(root)) / "state" / "day_plan" / date / "plan.json"


def entrypoint(argv, ctx):
    me = _now(ctx.workspace_root)
    date = me["current_time"][:10]
    if argv[:1] == ["plan"] and "--json" in argv:
        plan = json.loads(argv[argv.index("--json") + 1])
        path = _plan_file(ctx.workspace_root, date)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(plan), encoding="utf-8")
        return f"ok: plan for {date} of agent {int(me['agent_id'])}"
    return "unknown command: " + " ".join(argv)


async def pre_step():
    from agentsim.skills.hooks import hook_context

    c = hook_context()
    agent = int(c.payload["agent_id"])
    me = _now(c.workspace_root)
    assert me["current_time"] == c.payload["time"], "AGENT.json is not current"
    path = _plan_file(c.workspace_root, me["current_time"][:10])
    if not path.exists():
        return f"agent {agent:04d}: no plan for today; submit one with plan --json"
    hour = int(me["current_time"][11:13])
    now = next(s for s in json.loads(path.read_text()) if s["start"] <= hour < s["end"])
    return f"agent {agent:04d} step {me['step_count']}: now {now['activity']}"
"""

PLAN = [
    {"start": 0, "end": 9, "activity": "home"},
    {"start": 9, "end": 24, "activity": "work"},
]


def brain(request: ChatRequest) -> Any:
    if "submit one with plan --json" in request.last_user and not request.calls:
        args = ["plan", "--json", json.dumps(PLAN)]
        return tool_call("execute_skill_script", name="day-plan", args=args)
    return tool_call("finish", action="followed the plan")


def config(tmp_path: Path) -> ExperimentConfig:
    helpers.write_skill(
        tmp_path / "skills",
        "day-plan",
        front="script: scripts/day_plan.py\nhooks:\n  pre_step: scripts/day_plan.py\n",
        body="Submit a plan with `plan --json '<list>'`; the hook says what to do now.\n",
        files={"scripts/day_plan.py": SCRIPT},
    )
    return parse_experiment(YAML, base_dir=tmp_path)


def executor(model: FunctionModel) -> LocalExecutor:
    return LocalExecutor(model_factory=lambda spec: model)


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, FunctionModel]:
    tmp_path = tmp_path_factory.mktemp("as2")
    model = FunctionModel(brain)
    run_dir = tmp_path / "run"
    asyncio.run(Engine(config(tmp_path), run_dir=run_dir, executor=executor(model)).run())
    return run_dir, model


def test_numeric_agents_plan_once_and_the_hook_follows_the_plan(
    finished: tuple[Path, FunctionModel],
) -> None:
    run_dir, model = finished
    assert sorted(p.name for p in (run_dir / "agents").iterdir()) == ["1", "2", "named-00000"]
    for aid in ("1", "2"):
        ws = run_dir / "agents" / aid
        assert json.loads((ws / "state/day_plan/2026-03-02/plan.json").read_text()) == PLAN
        me = json.loads((ws / "AGENT.json").read_text())
        assert (me["agent_id"], me["group"], me["tick"], me["step_count"]) == (aid, "people", 3, 4)
        assert me["current_time"] == "2026-03-02T12:00:00"
        assert me["skills"]["activated"] == ["custom@day-plan"]
        assert me["profile"]["name"] == me["name"]
        # The city module's facts about the agent: its home and workplace.
        assert me["home"]["category"] == "home"
        assert set(me["home"]) == {"id", "name", "category", "hours"}
        assert "work" in me
    called = [e for e in events(run_dir) if e["type"] == "script_called"]
    assert sorted((e["agent_id"], e["ok"]) for e in called) == [("1", True), ("2", True)]
    prompts = [r.last_user for r in model.requests if "<skill_hooks>" in r.last_user]
    # Later steps see the plan's current segment (06:00 home, then 08:00 home, 10:00 work).
    assert any("agent 0001 step 3: now work" in p for p in prompts)
    assert any("agent 0002 step 2: now home" in p for p in prompts)


def test_a_default_id_is_what_int_refuses(finished: tuple[Path, FunctionModel]) -> None:
    run_dir, _ = finished
    failed = [e for e in events(run_dir) if e["type"] == "hook_failed"]
    assert {e["agent_id"] for e in failed} == {"named-00000"}
    trace = list(open_run(run_dir).agent("named-00000").trace())
    errors = [h.get("error", "") for t in trace for h in t.get("hooks", [])]
    assert any("invalid literal for int() with base 10: 'named-00000'" in e for e in errors)


def test_inspect_takes_numeric_ids(finished: tuple[Path, FunctionModel]) -> None:
    run_dir, _ = finished
    run = open_run(run_dir)
    assert set(run.agents) == {"named-00000", "1", "2"}
    trace = list(run.agent("2").trace())
    assert [t["tick"] for t in trace if "action" in t] == [0, 1, 2, 3]


@pytest.mark.slow
def test_the_viewer_takes_numeric_ids(finished: tuple[Path, FunctionModel]) -> None:
    run_dir, _ = finished
    client = TestClient(create_app(run_dir.parent), base_url=helpers.LOCAL)
    r = client.get(f"/api/runs/{run_dir.name}/agents/2")
    assert r.status_code == 200, r.text
    assert r.json()["agent_id"] == "2"


def test_a_resumed_numeric_run_ends_like_an_uninterrupted_one(
    tmp_path: Path, finished: tuple[Path, FunctionModel]
) -> None:
    reference, _ = finished

    class Crash(Exception):
        pass

    def progress(p: Progress) -> None:
        if p.tick == 3:
            raise Crash("the machine went away")

    run_dir = tmp_path / "run"
    cfg = config(tmp_path)
    first = Engine(cfg, run_dir=run_dir, executor=executor(FunctionModel(brain)), progress=progress)
    with pytest.raises(Crash, match="the machine went away"):
        asyncio.run(first.run())
    again = Engine(cfg, run_dir=run_dir, executor=executor(FunctionModel(brain)))
    summary = asyncio.run(again.run(resume=True))
    # named-00000's hooks fail on purpose (its id is not a number): over the hook limit.
    assert summary.status == "completed with problems"
    assert summary.problems == [
        "4 of 12 hook calls failed (33%), more than agent.max_hook_failure_share=0.05"
    ]
    assert (run_dir / "events.jsonl").read_bytes() == (reference / "events.jsonl").read_bytes()
    for aid in ("1", "2"):
        ours = json.loads((run_dir / "agents" / aid / "AGENT.json").read_text())
        ref = json.loads((reference / "agents" / aid / "AGENT.json").read_text())
        ours["workspace"] = ref["workspace"] = None  # the run folders differ
        assert ours == ref
