"""The prompt layout a prefix cache can reuse: shared bytes first, the agent's next, the turn last.

Requests are rendered as a chat template does (``render_chat``: system, tools, the other
messages), so "shares a prefix" means what a server's prefix cache would see.
"""

from __future__ import annotations

import itertools
from datetime import datetime
from pathlib import Path

from agentsim.agent.agent import Agent, AgentSettings, StepInput
from agentsim.llm.base import ToolCall
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from agentsim.testing import ChatRequest, FunctionModel, tool_call
from agentsim.testing.prefix_cache import render_chat
from tests.unit import helpers

START = datetime(2026, 3, 2, 9, 0)
OPENER = "<|start|>assistant\n"  # what render_chat ends every request with


def make_space(**settings: int) -> SkillSpace:
    registry = SkillRegistry()
    registry.scan_builtin(helpers.FIXTURES / "runtime_skills" / "builtin")
    return SkillSpace(registry.snapshot(), **settings)


def make_agent(space: SkillSpace, root: Path, aid: str, persona: str, **profile: object) -> Agent:
    ws = root / "agents" / aid
    ws.mkdir(parents=True)
    rt = AgentSkillRuntime(space, agent_id=aid, workspace_root=ws)
    return Agent(agent_id=aid, group="g", profile=profile, persona=persona, workspace=ws, skills=rt)


def finish(request: ChatRequest) -> ToolCall:
    return tool_call("finish", action="rested")


def planner(request: ChatRequest) -> ToolCall:
    """Activate play-skill, run its script, then finish: three calls in one step."""
    done = [c.name for c in request.calls]
    if "activate_skill" not in done:
        return tool_call("activate_skill", name="play-skill")
    if "execute_skill_script" not in done:
        return tool_call("execute_skill_script", name="play-skill", args=["stroll", "river"])
    return tool_call("finish", action="strolled")


def rendered(request: ChatRequest) -> str:
    return render_chat(request.messages, request.tools)


async def step(agent: Agent, model: FunctionModel, tick: int) -> None:
    inp = StepInput(tick=tick, time=START, messages=(f"note {tick} for {agent.agent_id}",))
    out = await agent.step(inp, model=model, settings=AgentSettings(), seed=tick)
    assert not out.degraded, out.action


async def test_two_agents_share_every_byte_up_to_their_own_part(tmp_path: Path) -> None:
    space = make_space()
    ana = make_agent(space, tmp_path, "a1", "Ana, a baker.", age=30, interests=["bread"])
    bo = make_agent(space, tmp_path, "b2", "Bo, a nurse.", age=51, interests=["chess"])
    for agent in (ana, bo):
        await agent.skills.activate("play-skill")
    model = FunctionModel(finish)
    await step(ana, model, 1)
    await step(bo, model, 1)
    a, b = (rendered(r) for r in model.requests)
    own = a.index("<persona>")
    assert b.index("<persona>") == own
    # Everything before the persona is the same bytes: system, tools, the active skill body.
    assert a[:own] == b[:own] and a[own:] != b[own:]
    shared = a[:own]
    assert "<available_skills>" in shared and '"name": "activate_skill"' in shared
    assert '<skill_content name="play-skill">' in shared
    assert "Ana" not in shared and "a1" not in shared
    # The tools follow the system message; the agent's part opens the first user message.
    assert shared.index("</available_skills>") < shared.index("# Tools") < shared.index("user\n")


async def test_agents_with_other_active_skills_share_system_and_tools(tmp_path: Path) -> None:
    space = make_space()
    ana = make_agent(space, tmp_path, "a1", "Ana.")
    bo = make_agent(space, tmp_path, "b2", "Bo.")
    await ana.skills.activate("play-skill")
    model = FunctionModel(finish)
    await step(ana, model, 1)
    await step(bo, model, 1)
    first_ana, first_bo = model.requests
    assert first_ana.system == first_bo.system and first_ana.tools == first_bo.tools
    assert "play-skill" in first_ana.agent and "<skill_content" not in first_bo.agent


async def test_the_next_step_shares_the_previous_steps_prefix(tmp_path: Path) -> None:
    space = make_space()
    ana = make_agent(space, tmp_path, "a1", "Ana.", age=30)
    await ana.skills.activate("play-skill")
    model = FunctionModel(finish)
    await step(ana, model, 1)
    await step(ana, model, 2)
    one, two = (rendered(r) for r in model.requests)
    turn = one.index("<observation>")
    assert two.index("<observation>") == turn and two[:turn] == one[:turn]
    assert "<persona>Ana.</persona>" in one[:turn]  # the agent's own part is in that prefix
    assert "note 1 for a1" in one[turn:] and "note 2 for a1" in two[turn:]


async def test_a_react_turn_appends_to_the_previous_turns_messages(tmp_path: Path) -> None:
    space = make_space()
    ana = make_agent(space, tmp_path, "a1", "Ana.")
    model = FunctionModel(planner)
    await step(ana, model, 1)
    await step(ana, model, 2)  # play-skill is now active: its body is in the agent's part
    assert len(model.requests) == 6  # three calls a step
    calls = model.requests[:3]
    for turns in (calls, model.requests[3:]):
        for before, after in itertools.pairwise(turns):
            n = len(before.messages)
            assert after.messages[:n] == before.messages and len(after.messages) > n
            prefix = rendered(before).removesuffix(OPENER)
            assert rendered(after).startswith(prefix)
    # The activation's body reached the step as a tool result, then the next step's
    # agent part; the system message did not change.
    assert '<skill_content name="play-skill">' in calls[1].results[0]
    assert '<skill_content name="play-skill">' in model.requests[3].agent
    assert calls[0].system == model.requests[3].system


async def test_an_over_budget_catalog_keeps_one_shared_head(tmp_path: Path) -> None:
    space = make_space(catalog_budget_tokens=260)
    ana = make_agent(space, tmp_path, "a1", "Ana doubles numbers with schema checks.")
    bo = make_agent(space, tmp_path, "b2", "Bo greets people and plays.")
    await ana.skills.activate("old-skill")
    model = FunctionModel(finish)
    await step(ana, model, 1)
    await step(bo, model, 1)
    first_ana, first_bo = model.requests
    assert first_ana.system == first_bo.system  # the head: no relevance, no marks
    assert "<more_skills>" in first_ana.agent and "<more_skills>" in first_bo.agent
    assert "more skills not listed" in first_ana.agent
    assert 'id="built-in@old-skill"' in first_ana.agent + first_ana.system
    assert first_ana.agent.split("<more_skills>")[1] != first_bo.agent.split("<more_skills>")[1]
