"""agentsim.testing.FunctionModel: a fake chat model answering from a Python function."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agentsim.agent.agent import Agent, AgentSettings, StepInput
from agentsim.llm.base import ChatModel, Completion, ToolCall, Usage
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from agentsim.testing import ChatRequest, FunctionModel, tool_call, usage_for
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "runtime_skills"
START = datetime(2026, 3, 2, 9, 0)


async def make_agent(tmp_path: Path) -> Agent:
    registry = SkillRegistry()
    registry.scan_builtin(FIXTURES / "builtin")
    ws = tmp_path / "agents" / "a1"
    ws.mkdir(parents=True)
    rt = AgentSkillRuntime(SkillSpace(registry.snapshot()), agent_id="a1", workspace_root=ws)
    return Agent(agent_id="a1", group="g", profile={}, persona="Ana.", workspace=ws, skills=rt)


def planner(request: ChatRequest) -> ToolCall | str:
    """Activate play-skill, run its script, finish with what the script said."""
    done = [c.name for c in request.calls]
    if "activate_skill" not in done:
        return tool_call("activate_skill", name="play-skill")
    if "execute_skill_script" not in done:
        return tool_call("execute_skill_script", name="play-skill", args=["stroll", "river"])
    return tool_call("finish", action=f"did: {request.results[-1]}")


async def test_drives_an_agent_through_activate_execute_finish(tmp_path: Path) -> None:
    agent = await make_agent(tmp_path)
    model = FunctionModel(planner)
    assert isinstance(model, ChatModel)
    out = await agent.step(
        StepInput(tick=1, time=START), model=model, settings=AgentSettings(), seed=3
    )
    assert out.model_calls == 3 and out.script_calls == 1 and not out.degraded
    assert out.action == "did: planned stroll river"
    assert [e["type"] for e in out.events] == ["skill_activated", "script_called", "agent_action"]
    first, second, third = model.requests
    assert {"activate_skill", "execute_skill_script", "finish"} <= first.tool_names
    assert first.calls == () and "Ana." in first.agent and "Ana." not in first.system
    assert [c.name for c in third.calls] == ["activate_skill", "execute_skill_script"]
    assert '<skill_content name="play-skill">' in second.results[0]
    assert third.results[-1] == "planned stroll river"
    expected = sum((usage_for(r.messages, "x").prompt_tokens for r in model.requests), 0)
    assert out.usage.prompt_tokens == expected
    rows = [json.loads(r) for r in agent.flush()]
    trace = [r["data"] for r in rows if r["kind"] == "trace" and "calls" in r["data"]]
    assert [c["tool"] for c in trace[-1]["calls"]] == [
        "activate_skill",
        "execute_skill_script",
        "finish",
    ]


async def test_answers_of_every_kind() -> None:
    async def text(request: ChatRequest) -> str:
        return f"you said {request.last_user}"

    plain = await FunctionModel(text).complete([{"role": "user", "content": "hi"}])
    assert plain.content == "you said hi" and plain.finish_reason == "stop"
    assert plain.usage == usage_for([{"role": "user", "content": "hi"}], "you said hi")

    two = await FunctionModel(lambda r: [tool_call("a", {"x": 1}), tool_call("b", y=2)]).complete(
        [{"role": "user", "content": "go"}]
    )
    assert [(c.id, c.name, json.loads(c.arguments)) for c in two.tool_calls] == [
        ("call_0_0", "a", {"x": 1}),
        ("call_0_1", "b", {"y": 2}),
    ]
    given = Completion(content="as is", usage=Usage(prompt_tokens=7, completion_tokens=1))
    assert await FunctionModel(lambda r: given).complete([]) is given


@pytest.mark.parametrize("reply", [None, 3, [], ["finish"]], ids=["none", "int", "empty", "strs"])
async def test_a_function_returning_something_else_is_named(reply: Any) -> None:
    model = FunctionModel(lambda r: reply)
    with pytest.raises(TypeError, match=r"an answer function returned .*; return a str, a tool"):
        await model.complete([{"role": "user", "content": "x"}])


def test_needs_a_function() -> None:
    with pytest.raises(TypeError, match=r"FunctionModel needs a function of a ChatRequest"):
        FunctionModel("hello")  # type: ignore[arg-type]


def test_request_views_read_the_current_step_only() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": None, "tool_calls": [_raw("c1", "old_tool")]},
        {"role": "tool", "tool_call_id": "c1", "content": "old result"},
        {"role": "user", "content": [{"type": "text", "text": "new "}, {"text": "step"}]},
        {"role": "assistant", "content": None, "tool_calls": [_raw("c2", "new_tool")]},
        {"role": "tool", "tool_call_id": "c2", "content": "new result"},
    ]
    tools = [{"type": "function", "function": {"name": "finish"}}, {"name": "bare"}]
    request = ChatRequest(messages=tuple(messages), tools=tuple(tools))
    assert request.system == "sys" and request.last_user == "new step"
    assert [c.name for c in request.calls] == ["new_tool"]
    assert request.results == ("new result",)
    assert request.tool_names == {"finish", "bare"}
    assert ChatRequest(messages=()).last_user == ""


def _raw(call_id: str, name: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}


def test_the_agents_part_is_what_opens_the_first_user_message() -> None:
    def request(*messages: dict[str, str]) -> ChatRequest:
        return ChatRequest(messages=messages)

    system = {"role": "system", "content": "S"}
    mine = {"role": "user", "content": "<persona>Ana.</persona>\n<observation>tick: 1"}
    later = {"role": "user", "content": "<persona>Bo.</persona>\n<observation>"}
    assert request(system, mine, later).agent == "<persona>Ana.</persona>\n"
    assert request(system, {"role": "user", "content": "<observation>x"}).agent == ""
    assert request(system).agent == ""
