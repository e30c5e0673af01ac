"""Whole runs (``agentsim run``) against the OpenAI-compatible test server on 127.0.0.1 whose
answers write tool calls as text, or carry reasoning: the calls are run and counted, and the
reasoning reaches the trace and ``agentsim inspect`` but never an action, an answer, a
memory line or a survey row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.inspect import open_run
from agentsim.testing import (
    FORMS,
    ChatRequest,
    calls_as_text,
    scripted_answer,
    with_reasoning,
)
from agentsim.testing.openai_server import OpenAITestServer

pytestmark = pytest.mark.slow

THOUGHT = "THOUGHT-7f3a: weighing the options before I act"

_YAML = """
name: textcalls
seed: 3
clock: {{start: "2026-03-02T08:00:00", tick: 30m}}
workflow:
  - run: {{ticks: 2}}
  - survey: {{name: check, question: "How is your day going?", agents: all}}
agents:
  - group: people
    count: 3
    profile: {{template: worker}}
    skills: {{default: [daily-guidance], disabled: [weather-lookup]}}
model:
  backend: openai
  model: m
  base_url: {base_url}
  max_retries: 1
  timeout: 20
  tool_calls: {mode}
# Steps that end with text (native mode, reasoning only) are what some tests study.
agent: {{max_hook_retries: 1, max_unfinished_share: 1.0}}
environment:
  - {{module: city}}
output: {{dir: {out}, formats: [jsonl]}}
"""


def _run(tmp: Path, base_url: str, capsys: pytest.CaptureFixture[str], mode: str = "auto") -> Any:
    cfg = tmp / "exp.yaml"
    cfg.write_text(_YAML.format(base_url=base_url, out=tmp / "ws", mode=mode))
    run_dir = tmp / "run"
    code = main(["run", str(cfg), "--out", str(run_dir), "--no-preflight"])
    out = capsys.readouterr().out
    return code, out, run_dir


def _events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _actions(events: list[dict[str, Any]]) -> list[str]:
    return [e["action"] for e in events if e["type"] == "agent_action"]


@pytest.mark.parametrize("form", FORMS)
def test_calls_written_as_text_are_run_and_counted(
    form: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=calls_as_text(scripted_answer, form)) as srv:
        code, out, run_dir = _run(tmp_path, srv.base_url, capsys)
        bodies = [r.body for r in srv.recorded]
    assert code == 0, out
    assert out.startswith("completed: ")
    events = _events(run_dir)
    kinds = {e["type"] for e in events}
    assert "script_called" in kinds  # daily-guidance's script ran through recovered calls
    assert {e["ok"] for e in events if e["type"] == "script_called"} == {True}
    # No step took a call it wrote as its action.
    actions = _actions(events)
    assert len(actions) == 6
    for action in actions:
        assert '"name"' not in action and "<tool_call>" not in action and "<function=" not in action
    metrics = json.loads((run_dir / "metrics.json").read_text())
    recovered = metrics["recovered_calls"]
    assert recovered > 6
    assert metrics["model"]["recovered_calls"] == recovered
    ticks = [e for e in events if e["type"] == "tick_end"]
    assert sum(e["recovered_calls"] for e in ticks) == recovered
    assert f"  tool calls written as text and run: {recovered:,}\n" in out
    # auto: the tools were offered as usual, and the calls went back as tool calls.
    assert all(b.get("tools") for b in bodies)
    later = [m for b in bodies for m in b["messages"] if m["role"] == "assistant"]
    assert later and all(m.get("tool_calls") for m in later)


def test_native_mode_never_reads_calls_in_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=calls_as_text(scripted_answer, "tool_call")) as srv:
        code, out, run_dir = _run(tmp_path, srv.base_url, capsys, mode="native")
    assert code == 0, out
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["recovered_calls"] == 0
    assert "written as text" not in out
    # The text stays the step's action, as before there was recovery.
    actions = _actions(_events(run_dir))
    assert actions and all(a.startswith("I will do this now.\n<tool_call>") for a in actions)


def _text_mode_answer(request: ChatRequest) -> str:
    """A model on a server without tools: it learns the tools from the system message and
    reads its results in the user message that follows its calls."""
    last = request.last_user
    if "<tool_result" not in last:
        return (
            "Let me plan.\n<tool_call>\n"
            '{"name": "execute_skill_script", "arguments": {"name": "daily-guidance", '
            '"args": ["draft"]}}\n</tool_call>'
        )
    assert '<tool_result name="execute_skill_script">' in last
    return '<tool_call>{"name": "finish", "arguments": {"action": "followed my plan"}}'


def test_text_mode_describes_the_tools_and_sends_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=_text_mode_answer) as srv:
        code, out, run_dir = _run(tmp_path, srv.base_url, capsys, mode="text")
        bodies = [r.body for r in srv.recorded]
    assert code == 0, out
    assert bodies and not any("tools" in b or "tool_choice" in b for b in bodies)
    system = bodies[0]["messages"][0]["content"]
    assert "<tool_calls>\nCall a tool by writing the call in your answer" in system
    assert "- execute_skill_script(name*: string (skill name from the catalog)" in system
    # Results come back as text, in a user message; no message uses the tool role.
    roles = {m["role"] for b in bodies for m in b["messages"]}
    assert roles == {"system", "user", "assistant"}
    results = [
        m["content"]
        for b in bodies
        for m in b["messages"]
        if m["role"] == "user" and m["content"].startswith("<tool_result")
    ]
    assert results and results[0].startswith('<tool_result name="execute_skill_script">\n')
    events = _events(run_dir)
    scripts = [e["ok"] for e in events if e["type"] == "script_called"]
    assert len(scripts) >= 6 and set(scripts) == {True}
    assert set(_actions(events)) == {"followed my plan"}
    metrics = json.loads((run_dir / "metrics.json").read_text())
    # Each round of a step: the script, then finish (a quality gate may ask for a round more).
    assert metrics["recovered_calls"] == 2 * len(scripts)


@pytest.mark.parametrize(
    ("where", "field"),
    [("field", "reasoning_content"), ("field", "reasoning"), ("think", "reasoning_content")],
)
def test_reasoning_reaches_the_trace_and_nothing_else(
    where: Any, field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = with_reasoning(calls_as_text(scripted_answer, "tool_call"), where, thought=THOUGHT)
    with OpenAITestServer(answer=answer, reasoning_field=field) as srv:
        code, out, run_dir = _run(tmp_path, srv.base_url, capsys)
        sent = json.dumps([r.body for r in srv.recorded])
    assert code == 0, out
    events = (run_dir / "events.jsonl").read_text()
    assert THOUGHT not in events
    assert "<think>" not in events
    memories = list((run_dir / "agents").glob("*/memory.jsonl"))
    assert memories
    for memory in memories:
        assert THOUGHT not in memory.read_text()
    survey = (run_dir / "surveys" / "check.jsonl").read_text().splitlines()
    assert len(survey) == 3
    for row in map(json.loads, survey):
        assert THOUGHT not in json.dumps(row)
        assert row["answer"]
    # Reasoning is never sent back to the model either.
    assert THOUGHT not in sent
    # It is in the trace, and inspect shows it.
    agent = sorted(p.name for p in (run_dir / "agents").iterdir())[0]
    code = main(["inspect", str(run_dir), "--agent", agent, "--tick", "1"])
    shown = capsys.readouterr().out
    assert code == 0
    assert "=== reasoning 1 of " in shown and f"(not part of any answer) ===\n{THOUGHT}\n" in shown
    code = main(["inspect", str(run_dir), "--agent", agent])
    assert code == 0
    assert f"  reasoning: {THOUGHT}\n" in capsys.readouterr().out


def _reasoning_only_then_answer(request: ChatRequest) -> Any:
    """First an answer with reasoning and an empty content; once told it gave no answer, a
    plain answer."""
    from agentsim.llm.base import Completion

    if "held reasoning only" in request.last_user:
        return "I stay at home and read."
    return Completion(content="", reasoning=THOUGHT, finish_reason="length")


def test_reasoning_with_no_answer_is_not_an_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=_reasoning_only_then_answer) as srv:
        code, out, run_dir = _run(tmp_path, srv.base_url, capsys)
    assert code == 0, out
    events = _events(run_dir)
    assert set(_actions(events)) == {"I stay at home and read."}
    survey = [
        json.loads(x) for x in (run_dir / "surveys" / "check.jsonl").read_text().split("\n") if x
    ]
    assert {row["answer"] for row in survey} == {"I stay at home and read."}
    # Each answer took two calls: the reasoning alone, then the answer.
    run = open_run(run_dir)
    for aid in run.agents:
        steps = [s for s in run.agent(aid).trace() if "model_calls" in s]
        assert steps and all(s["model_calls"] % 2 == 0 for s in steps)
        assert all(s["reasoning"] == [THOUGHT] * (s["model_calls"] // 2) for s in steps)
