"""The step with tool calls written as text and with reasoning (``model.tool_calls``):
recovered calls, unreadable ones, a skill called as a tool, reasoning kept out of answers."""

from __future__ import annotations

import json
from pathlib import Path

from agentsim.agent.agent import AgentSettings
from agentsim.llm.base import Completion, Usage
from agentsim.skills.registry import SkillRegistry
from tests.unit.agent.test_agent import QueueModel, call, inp, make_agent, registry, traces

__all__ = ["registry"]  # the fixture, imported for this module's tests

AUTO = AgentSettings()


def text(content: str, reasoning: str | None = None) -> Completion:
    return Completion(content=content, reasoning=reasoning, usage=Usage(prompt_tokens=5))


async def test_a_call_written_as_text_runs_and_goes_back_as_a_tool_call(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(
        text(
            'Sure.\n```json\n{"name": "activate_skill", "arguments": {"name": "play-skill"}}\n```'
        ),
        text('<tool_call>{"name": "finish", "arguments": {"action": "strolled"}}</tool_call>'),
    )
    out = await agent.step(inp(1), model=model, settings=AUTO, seed=1)
    assert out.action == "strolled" and out.recovered_calls == 2
    assert "skill_activated" in [e["type"] for e in out.events]
    messages = model.requests[1][0]
    assert messages[-2] == {
        "role": "assistant",
        "content": "Sure.",
        "tool_calls": [
            {
                "id": "text_call_0_0",
                "type": "function",
                "function": {"name": "activate_skill", "arguments": '{"name": "play-skill"}'},
            }
        ],
    }
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == "text_call_0_0"
    assert messages[-1]["content"].startswith("activated play-skill")
    calls = traces(agent)[-1]["calls"]
    assert [c["tool"] for c in calls] == ["activate_skill", "finish"]
    assert all(c["recovered"] for c in calls)


async def test_native_mode_keeps_the_text_as_the_action(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    written = '{"name": "finish", "arguments": {"action": "strolled"}}'
    model = QueueModel(text(written))
    out = await agent.step(inp(1), model=model, settings=AgentSettings(tool_calls="native"), seed=1)
    assert out.action == written and out.recovered_calls == 0 and out.model_calls == 1


async def test_an_unreadable_call_is_told_to_the_model_which_tries_again(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(
        text("<tool_call>finish the step</tool_call>"),
        call("finish", {"action": "rested"}),
    )
    out = await agent.step(inp(1), model=model, settings=AUTO, seed=1)
    assert out.action == "rested" and out.model_calls == 2 and out.recovered_calls == 0
    messages = model.requests[1][0]
    assert messages[-2] == {
        "role": "assistant",
        "content": "<tool_call>finish the step</tool_call>",
    }
    assert messages[-1] == {
        "role": "user",
        "content": "error: could not read the call in <tool_call>finish the step</tool_call>",
    }
    assert traces(agent)[-1]["unread_calls"] == [
        "could not read the call in <tool_call>finish the step</tool_call>"
    ]


async def test_a_skill_called_as_a_tool_is_told_the_call_it_meant(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(
        text('{"name": "play-skill", "arguments": ["draft"]}'),
        call("activate_skill", {"name": "play-skill"}),
        call("play-skill", {"args": ["stroll"]}, ("base-skill", "{}"), ("old-skill", "not json")),
    )
    await agent.step(inp(1), model=model, settings=AUTO, seed=1)
    first = [m["content"] for m in model.requests[1][0] if m["role"] == "tool"]
    assert first == [
        "error: 'play-skill' is a skill, not a tool; load it with activate_skill "
        '{"name": "play-skill"}, then run its script with execute_skill_script '
        '{"name": "play-skill", "args": ["draft"]}'
    ]
    assert model.tool_results()[-3:] == [
        "error: 'play-skill' is a skill, not a tool; to run its script call "
        'execute_skill_script with {"name": "play-skill", "args": ["stroll"]}',
        "error: 'base-skill' is a skill, not a tool; load it with activate_skill "
        '{"name": "base-skill"}',
        "error: 'old-skill' is a skill, not a tool; load it with activate_skill "
        '{"name": "old-skill"}, then run its script with execute_skill_script '
        '{"name": "old-skill", "args": ["not json"]}',
    ]


async def test_an_active_skill_without_a_script_called_as_a_tool(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path, "base-skill")
    model = QueueModel(call("base-skill", {}))
    await agent.step(inp(1), model=model, settings=AUTO, seed=1)
    assert model.tool_results()[0] == (
        "error: 'base-skill' is a skill, not a tool; it is active already: follow its "
        "instructions in your context"
    )


async def test_text_mode_describes_the_tools_and_returns_results_as_text(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(
        text('<function=search_skills>{"query": "stroll"}</function>'),
        text('<function=finish>{"action": "looked around"}</function>'),
    )
    settings = AgentSettings(tool_calls="text")
    out = await agent.step(inp(1), model=model, settings=settings, seed=1)
    assert out.action == "looked around" and out.recovered_calls == 2
    system = model.requests[0][0][0]["content"]
    assert system.index("<instructions>") < system.index("<tool_calls>")
    assert system.index("</tool_calls>") < system.index("<available_skills>")
    assert "- search_skills(query*: string): Search all skills" in system
    assert (
        "- execute_skill_script(name*: string (skill name from the catalog), args*: array "
        "of strings, script: string)" in system
    )
    messages = model.requests[1][0]
    assert messages[-2] == {
        "role": "assistant",
        "content": '<function=search_skills>{"query": "stroll"}</function>',
    }
    assert messages[-1]["role"] == "user"
    assert messages[-1]["content"].startswith('<tool_result name="search_skills">\n{"results"')
    # Its own system prompt, stored apart from the native one's.
    agent2 = await make_agent(registry, tmp_path / "b")
    assert agent2.system_prompt() != system and "<tool_calls>" not in agent2.system_prompt()


async def test_reasoning_is_traced_and_never_the_action(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    native = call("search_skills", {"query": "walk"})
    model = QueueModel(
        Completion(tool_calls=native.tool_calls, reasoning="first I search"),
        text("<think>I could walk.</think>\nI walk by the river.", reasoning="from the field"),
    )
    out = await agent.step(inp(1), model=model, settings=AUTO, seed=1)
    assert out.action == "I walk by the river." and out.answer == "I walk by the river."
    assert traces(agent)[-1]["reasoning"] == ["first I search", "from the field\n\nI could walk."]
    assert "first I search" not in json.dumps(model.requests[1][0])  # never sent back


async def test_an_answer_of_reasoning_only_is_not_an_answer(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(*[text("<think>hmm, let me think", reasoning=None)] * 3)
    settings = AgentSettings(max_react_turns=3)
    out = await agent.step(inp(1), model=model, settings=settings, seed=1)
    assert out.action == "ran out of turns" and out.answer is None and out.model_calls == 3
    assert model.requests[1][0][-1] == {
        "role": "user",
        "content": "Your last answer held reasoning only, and no answer. Answer now: call a "
        "tool, or end the step with finish.",
    }
    assert model.requests[1][0][-2] == {"role": "assistant", "content": ""}
    assert traces(agent)[-1]["reasoning"] == ["hmm, let me think"] * 3
