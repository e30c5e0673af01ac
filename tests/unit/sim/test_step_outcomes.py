"""What the agents did, through ``agentsim run`` against the test server on 127.0.0.1: every
step's outcome and whether it acted, every tool call's result (the agent still gets the
error text), the limits on steps without ``finish`` and on refused or failed tool calls
(exit 3, naming the share), counts per group and per model in ``metrics.json``, and the
behaviour summary (acted share, variety, echoed survey answers) at the end of the run, at
the top of ``agentsim inspect`` and of the report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.inspect import open_run
from agentsim.llm.base import ToolCall
from agentsim.testing.function_model import ChatRequest, echo_answer, tool_call
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit import helpers

_YAML = """
name: outcomes
seed: 3
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 2}}
  - survey: {{name: park, question: "What do you think of the new park?", agents: all}}
agents:
  - group: talkers
    count: 2
    persona: A talker.
    model: other
    skills: {{default: [], disabled: [daily-guidance]}}
  - group: movers
    count: 2
    persona: A mover.
    skills: {{default: [], disabled: [daily-guidance]}}
model: {{backend: openai, model: test-model, base_url: "{url}", max_retries: 0, timeout: 10}}
models:
  other: {{backend: openai, model: test-model, base_url: "{url}", max_retries: 0, timeout: 10}}
agent: {{max_react_turns: 2{agent}}}
environment:
  - {{module: social, topic: the new park}}
output: {{formats: [jsonl]}}
"""


def _experiment(tmp: Path, url: str, *, agent: str = "") -> Path:
    path = tmp / "exp.yaml"
    path.write_text(_YAML.format(url=url, agent=agent), encoding="utf-8")
    return path


def _run(capsys: pytest.CaptureFixture[str], exp: Path, out: Path) -> tuple[int, str, str]:
    code = main(["run", str(exp), "--out", str(out)])
    stdout, stderr = capsys.readouterr()
    return code, stdout, stderr


def _metrics(run: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run / "metrics.json").read_text("utf-8"))
    return data


def _events(run: Path, kind: str) -> list[dict[str, Any]]:
    lines = (run / "events.jsonl").read_text("utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e["type"] == kind]


def _survey(req: ChatRequest) -> bool:
    return "What do you think of the new park?" in req.last_user


@pytest.mark.slow
def test_every_tool_call_refused_ends_exit_3_naming_both_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def bad_json(req: ChatRequest) -> Any:
        if _survey(req):
            return "I have no opinion yet."
        return ToolCall(id="", name="ask_env", arguments='{"module": "social", oops')

    with OpenAITestServer(answer=bad_json) as srv:
        code, out, err = _run(capsys, _experiment(tmp_path, srv.base_url), tmp_path / "run")
    run = tmp_path / "run"
    assert code == 3
    # 4 agents x 2 ticks, each step 2 turns of one refused call, out of turns.
    assert (
        "error: 16 of 16 tool calls refused or failed (100%), more than "
        "agent.max_tool_failure_share=0.25" in err
    )
    assert (
        "error: 8 of 8 agent steps ended without finish (answered with text, or out of turns) "
        "(100%), more than agent.max_unfinished_share=0.5" in err
    )
    first = out.splitlines()[0]
    assert first.startswith(f"completed with problems: {run}") and "errors=0" in first
    assert "  problems: steps out_of_turns 8, tool calls refused 16" in out
    # The progress line counts them as the run goes.
    assert "errors 0  steps without finish 4  tool calls refused/failed 8  elapsed" in err
    assert (
        "behaviour: 8 steps: out_of_turns 8 (100%); acted 0 (0%); 1 distinct actions; "
        "tool calls 16 (refused 16, failed 0: 100%); answers 4 (echo 0: 0%)"
    ) in out
    assert "  note: no step acted on the world" in out
    m = _metrics(run)
    assert m["outcomes"]["out_of_turns"] == 8 and m["acted"] == 0
    assert m["tool_calls"] == {"ok": 0, "refused": 16, "failed": 0}
    assert m["tool_calls_by_tool"] == {"ask_env": {"ok": 0, "refused": 16, "failed": 0}}
    # The agent still got the error text it always got.
    trace = next(iter(open_run(run).agent("movers-00000").trace()))
    assert trace["outcome"] == "out_of_turns"
    assert trace["calls"][0]["result"].startswith(
        "error: the arguments of ask_env are not valid JSON ("
    )
    actions = _events(run, "agent_action")
    assert {(a["outcome"], a["acted"]) for a in actions} == {("out_of_turns", False)}
    [end, _] = _events(run, "tick_end")
    assert (end["outcomes"], end["acted"], end["tool_calls"]) == (
        {"out_of_turns": 4},
        0,
        {"refused": 8},
    )
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "completed with problems"
    assert any("agent.max_tool_failure_share" in p for p in manifest["problems"])


@pytest.mark.slow
def test_a_model_that_never_calls_finish_shows_answered_and_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=echo_answer) as srv:
        code, out, err = _run(capsys, _experiment(tmp_path, srv.base_url), tmp_path / "run")
    assert code == 3
    assert (
        "error: 8 of 8 agent steps ended without finish (answered with text, or out of turns) "
        "(100%), more than agent.max_unfinished_share=0.5" in err
    )
    assert "tool_failure" not in err  # no tool call at all: no share
    assert "  problems: steps answered 8" in out
    assert "behaviour: 8 steps: answered 8 (100%); acted 0 (0%)" in out
    m = _metrics(tmp_path / "run")
    assert m["outcomes"] == {
        "finished": 0,
        "answered": 8,
        "out_of_turns": 0,
        "degraded": 0,
        "error": 0,
        "skipped": 0,
    }
    assert m["tool_calls"] == {"ok": 0, "refused": 0, "failed": 0}


@pytest.mark.slow
def test_a_limit_raised_in_the_experiment_lets_the_run_complete(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, "URL", agent=", max_unfinished_share: 1")
    with OpenAITestServer(answer=echo_answer) as srv:
        exp.write_text(exp.read_text("utf-8").replace("URL", srv.base_url), encoding="utf-8")
        code, out, err = _run(capsys, exp, tmp_path / "run")
    assert code == 0 and "error:" not in err
    assert out.startswith(f"completed: {tmp_path / 'run'}")
    assert "  problems: steps answered 8" in out  # counted, under the limit


def _acting_and_talking(req: ChatRequest) -> Any:
    """Movers post (an environment write), then finish; talkers finish at once, always with
    the same action; the talkers' survey answers copy the observation's opinion sentence."""
    if _survey(req):
        if "A mover." in req.agent:
            return "The park is a good idea, I would walk there."
        found = re.search(
            r"Your opinion on the new park is [^\n]*?\(-1 against, \+1 for\)\.", req.last_user
        )
        assert found is not None, req.last_user
        return found.group(0)
    if "A mover." in req.agent:
        if not req.calls:
            args = {"module": "social", "action": "post", "args": {"text": "hello"}}
            return tool_call("ask_env", args)
        return tool_call("finish", action=f"posted at {req.last_user[:40]}")
    return tool_call("finish", action="tick")


@pytest.mark.slow
def test_counts_per_group_and_model_and_the_behaviour_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=_acting_and_talking) as srv:
        code, out, err = _run(capsys, _experiment(tmp_path, srv.base_url), tmp_path / "run")
    run = tmp_path / "run"
    assert code == 0 and "error:" not in err, err
    m = _metrics(run)
    movers, talkers = m["by_group"]["movers"], m["by_group"]["talkers"]
    assert (movers["agent_steps"], movers["acted"], movers["outcomes"]["finished"]) == (4, 4, 4)
    assert movers["tool_calls"] == {"ok": 8, "refused": 0, "failed": 0}
    assert (talkers["agent_steps"], talkers["acted"], talkers["distinct_actions"]) == (4, 0, 1)
    assert talkers["only_action"] == "tick" and movers["only_action"] is None
    assert (movers["answers"], movers["echo"], talkers["answers"], talkers["echo"]) == (2, 0, 2, 2)
    # Per model: the talkers use ``other``, the movers the ``model:`` block.
    assert m["by_model"]["other"]["agent_steps"] == 4 and m["by_model"]["other"]["acted"] == 0
    assert m["by_model"]["default"]["acted"] == 4
    assert (m["answers"], m["echo"]) == (4, 2)
    # Survey rows and events say which answers only copy their prompt.
    rows = [json.loads(x) for x in (run / "surveys" / "park.jsonl").read_text().splitlines()]
    assert {r["agent_id"]: r["echo"] for r in rows} == {
        "movers-00000": False,
        "movers-00001": False,
        "talkers-00000": True,
        "talkers-00001": True,
    }
    assert [e["echo"] for e in _events(run, "survey_answer")] == [r["echo"] for r in rows]
    # The behaviour summary: per model and group, with the notes a researcher must see.
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("behaviour: "))
    assert lines[start] == (
        "behaviour: 8 steps: finished 8 (100%); acted 4 (50%); 3 distinct actions; "
        "tool calls 12 (refused 0, failed 0: 0%); answers 4 (echo 2: 50%)"
    )
    assert lines[start + 1].startswith("  model default: 4 steps: finished 4 (100%); acted 4")
    assert lines[start + 2].startswith("  model other: 4 steps: finished 4 (100%); acted 0 (0%)")
    assert lines[start + 3].startswith("  group movers: 4 steps")
    assert lines[start + 4].startswith("  group talkers: 4 steps")
    notes = [line for line in lines if line.startswith("  note: ")]
    assert notes == [
        "  note: 2 of 4 survey and interview answers only copy their own prompt (echo)",
        "  note: model other: no step acted on the world (no environment write, no skill "
        "script ran): the agents only narrated",
        "  note: model other: every step did the same thing: 'tick'",
        "  note: group talkers: no step acted on the world (no environment write, no skill "
        "script ran): the agents only narrated",
        "  note: group talkers: every step did the same thing: 'tick'",
    ]
    # ``agentsim inspect`` opens with it; the report's summary.md too.
    assert main(["inspect", str(run)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[1] == "  " + lines[start]
    assert "  steps        finished 8; acted 4" in shown
    assert "  tool calls   12: ok 12, refused 0, failed 0" in shown
    assert main(["report", str(run)]) == 0
    capsys.readouterr()
    md = (run / "report" / "summary.md").read_text("utf-8")
    assert md.index("## Behaviour") < md.index("| state |")
    assert "**Note:** group talkers: every step did the same thing: 'tick'" in md
    assert "| steps by outcome | finished 8 |" in md
    # The viewer's run page shows the same lines, its survey answers mark the echoes, and
    # a chart draws what the steps did per tick.
    from starlette.testclient import TestClient

    from agentsim.view import create_app

    client = TestClient(create_app(run), base_url=helpers.LOCAL)
    page = client.get("/api/runs/run").json()
    assert page["behaviour"][0] == lines[start]
    assert page["series"]["acted"] == [2.0, 2.0] and page["series"]["unfinished"] == [0.0, 0.0]
    answers = client.get("/api/runs/run/surveys/park").json()["answers"]
    assert {a["agent_id"]: a["echo"] for a in answers} == {r["agent_id"]: r["echo"] for r in rows}


@pytest.mark.slow
def test_every_step_doing_the_same_thing_is_said_once_for_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def always_tick(req: ChatRequest) -> Any:
        return "Fine." if _survey(req) else tool_call("finish", action="tick")

    with OpenAITestServer(answer=always_tick) as srv:
        code, out, err = _run(capsys, _experiment(tmp_path, srv.base_url), tmp_path / "run")
    assert code == 0 and "error:" not in err
    notes = [line for line in out.splitlines() if line.startswith("  note: ")]
    assert notes == [
        "  note: no step acted on the world (no environment write, no skill script ran): "
        "the agents only narrated",
        "  note: every step did the same thing: 'tick'",
    ]
    # "Fine." is too short to be called an echo, wherever it appears.
    assert _metrics(tmp_path / "run")["echo"] == 0


_ENGINE_YAML = """
name: calls
seed: 1
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 1
agents:
  - group: people
    count: 1
    skills: {default: [], disabled: [daily-guidance]}
model: {backend: scripted}
agent: {max_react_turns: 16}
environment:
  - {module: social}
output: {formats: [jsonl]}
"""


async def test_each_kind_of_tool_call_is_counted_by_its_result(tmp_path: Path) -> None:
    from agentsim.config.experiment import parse_experiment
    from agentsim.hosts.local import LocalExecutor
    from agentsim.run.engine import Engine
    from agentsim.testing import FunctionModel

    plan = [
        tool_call("no_such_tool"),
        tool_call("activate_skill", name="no-such-skill"),
        tool_call("ask_env", module="social", action="dance", args={}),
        tool_call("ask_env", module="social", action="post", args={"colour": "red"}),
        tool_call("execute_skill_script", name="reflect", args=[]),
        tool_call("ask_env", module="social", action="opinion", args={}),
        ToolCall(id="", name="search_skills", arguments="[1]"),  # not an object
        tool_call("ask_env", module="social", action="opinion", args="all"),
        tool_call("ask_env", action="opinion"),  # no module
        tool_call("deactivate_skill", name="no-such-skill"),
        tool_call("read_skill_file", name="reflect", path="SKILL.md"),
        tool_call("finish", action="done"),
    ]

    def brain(req: ChatRequest) -> Any:
        return plan[len(req.calls)]

    cfg = parse_experiment(_ENGINE_YAML, base_dir=tmp_path)
    executor = LocalExecutor(model_factory=lambda spec: FunctionModel(brain))
    summary = await Engine(cfg, run_dir=tmp_path / "run", executor=executor).run()
    m = summary.metrics
    assert m["tool_calls_by_tool"] == {
        "(unknown tool)": {"ok": 0, "refused": 1, "failed": 0},
        "activate_skill": {"ok": 0, "refused": 1, "failed": 0},
        "ask_env": {"ok": 1, "refused": 4, "failed": 0},
        "execute_skill_script": {"ok": 0, "refused": 1, "failed": 0},  # not active
        "search_skills": {"ok": 0, "refused": 1, "failed": 0},
        "deactivate_skill": {"ok": 0, "refused": 1, "failed": 0},
        "read_skill_file": {"ok": 1, "refused": 0, "failed": 0},
        "finish": {"ok": 1, "refused": 0, "failed": 0},
    }
    assert m["tool_calls_by_skill"] == {"built-in@reflect": {"ok": 1, "refused": 1, "failed": 0}}
    assert (m["outcomes"]["finished"], m["acted"]) == (1, 0)  # a read is not an act
    # 5 of 7 refused: over agent.max_tool_failure_share
    assert summary.status == "completed with problems"
    assert summary.problems == [
        "1 of 1 script calls failed (100%), more than agent.max_script_failure_share=0.25",
        "9 of 12 tool calls refused or failed (75%), more than agent.max_tool_failure_share=0.25",
    ]
    results = [
        c["result"]
        for c in next(iter(open_run(tmp_path / "run").agent("people-00000").trace()))["calls"]
    ]
    assert [r.split(" ")[0] for r in results[:5]] == ["error:"] * 5
    assert results[0].startswith("error: unknown tool 'no_such_tool' (tools: ")
    assert results[6] == "error: the arguments of search_skills must be a JSON object"
    assert results[7] == "error: ask_env `args` must be an object"
    assert results[8] == "error: bad arguments for ask_env: 'module'"
