"""A tick's step inputs come from one builder (``StepInputs``), and a per-step prompt block
takes two edits: its declaration (``agentsim.llm.prompt_blocks``) and its text in the step
input. The agent renders it where it is declared; a model finds it through the same
declaration."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from agentsim.agent.agent import Agent, AgentSettings, StepInput, StepInputs
from agentsim.llm import prompt_blocks
from agentsim.llm.base import ToolCall
from agentsim.llm.prompt_blocks import BLOCKS, Block, PromptBlocks
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from agentsim.testing import ChatRequest, FunctionModel, tool_call
from tests.unit import helpers

START = datetime(2026, 3, 2, 9, 0)


def make_agent(root: Path, aid: str = "a1") -> Agent:
    registry = SkillRegistry()
    registry.scan_builtin(helpers.FIXTURES / "runtime_skills" / "builtin")
    ws = root / "agents" / aid
    ws.mkdir(parents=True)
    rt = AgentSkillRuntime(SkillSpace(registry.snapshot()), agent_id=aid, workspace_root=ws)
    profile = {"occupation": "baker"}
    return Agent(agent_id=aid, group="g", profile=profile, persona="Ana.", workspace=ws, skills=rt)


def test_agents_without_messages_share_one_input_per_tick() -> None:
    tick = StepInputs(tick=3, time=START)
    shared = tick.shared
    assert tick.for_agent() is shared and tick.for_agent(()) is shared
    assert tick.for_agent(None) is shared
    assert (shared.tick, shared.time, shared.messages, shared.question) == (3, START, (), None)
    assert tick.iso == shared.iso == "2026-03-02T09:00:00"
    assert shared.stamp == "time: 2026-03-02T09:00:00 (Monday 09:00)"
    assert not shared.read_only and dict(shared.blocks) == {}


def test_an_agent_with_messages_gets_its_own_input_with_the_ticks_fields() -> None:
    tick = StepInputs(tick=3, time=START)
    mine = tick.for_agent(["hi", "there"])
    assert mine is not tick.shared and tick.for_agent(["hi"]) is not mine
    assert mine.messages == ("hi", "there") and mine.tick == 3 and mine.time == START
    assert mine.iso == tick.iso and mine.stamp == tick.shared.stamp
    assert mine == StepInput(tick=3, time=START, messages=("hi", "there"))


def test_a_question_is_read_only_and_keeps_the_ticks_fields() -> None:
    tick = StepInputs(tick=5, time=START)
    asked = tick.question("How was your day?")
    assert asked.read_only and asked.question == "How was your day?"
    assert (asked.tick, asked.time, asked.messages) == (5, START, ())
    assert not tick.shared.read_only and tick.shared.question is None


def test_an_undeclared_per_step_block_is_refused() -> None:
    with pytest.raises(ValueError) as err:
        StepInputs(tick=1, time=START, blocks={"world_news": "rain"})
    assert str(err.value) == (
        "'world_news' is not a per-step input block of the prompt (declared: none); "
        "declare it in agentsim/llm/prompt_blocks.py with step_input=True"
    )
    # A declared block that is not a per-step input (the agent fills it) is refused too.
    with pytest.raises(ValueError, match="'memory' is not a per-step input block"):
        StepInput(tick=1, time=START, blocks={"memory": "made up"})


def with_world_news() -> PromptBlocks:
    """The declaration with one more line: a per-step ``<world_news>`` after the messages."""
    blocks = list(BLOCKS.blocks)
    blocks.insert(
        blocks.index(BLOCKS["messages"]) + 1,
        Block("world_news", "turn", "lines", step_input=True),
    )
    return PromptBlocks(blocks)


async def test_a_new_per_step_block_reaches_the_turn_and_a_model_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The recipe's edits: the declaration (here patched in), the text in the step input.
    monkeypatch.setattr(prompt_blocks, "BLOCKS", with_world_news())
    seen: list[str | None] = []

    def reader(request: ChatRequest) -> ToolCall:
        news = prompt_blocks.BLOCKS["world_news"].find(request.last_user)
        seen.append(news)
        return tool_call("finish", action=f"read: {news}")

    agent = make_agent(tmp_path)
    agent.remember(tick=0, time="2026-03-02T08:45:00", kind="note", text="slept well")
    tick = StepInputs(tick=1, time=START, blocks={"world_news": "The river flooded."})
    model = FunctionModel(reader)
    out = await agent.step(
        tick.for_agent(["bread is cheap today"]), model=model, settings=AgentSettings(), seed=1
    )

    assert seen == ["The river flooded."] and out.action == "read: The river flooded."
    request = model.requests[0]
    mine, turn = prompt_blocks.BLOCKS.split_user(request.last_user)
    assert "world_news" not in request.system and "world_news" not in mine
    # In the turn, where it is declared: after the messages, before the memory.
    assert "</messages>\n<world_news>\nThe river flooded.\n</world_news>\n<memory>" in turn
    # Without a text the block is left out: the turn is the one the plain declaration gives.
    quiet = StepInputs(tick=2, time=START).for_agent(["bread is cheap today"])
    await agent.step(quiet, model=model, settings=AgentSettings(), seed=2)
    assert seen[1] is None and "world_news" not in model.requests[1].last_user
    declared = agent.user_prompt(quiet, (), memory_tokens=600)
    monkeypatch.undo()
    assert agent.user_prompt(quiet, (), memory_tokens=600) == declared


async def test_the_agents_prompt_follows_the_declared_order(tmp_path: Path) -> None:
    agent = make_agent(tmp_path)
    await agent.skills.activate("play-skill")
    agent.remember(tick=0, time="2026-03-02T08:45:00", kind="note", text="slept well")
    model = FunctionModel(lambda request: tool_call("finish", action="rested"))
    inp = StepInputs(tick=1, time=START).for_agent(["hello"])
    await agent.step(inp, model=model, settings=AgentSettings(), seed=1)
    request = model.requests[0]
    mine, turn = BLOCKS.split_user(request.last_user)
    for part, text in (("system", request.system), ("agent", mine), ("turn", turn)):
        found = [b.name for b in BLOCKS.of(part) if f"<{b.name}" in text]
        assert found, part
        # Each present block appears once per part, in the declared order.
        positions = [text.index(f"<{name}") for name in found]
        assert positions == sorted(positions), (part, found)
    assert BLOCKS["messages"].find(turn) == "hello"
    assert BLOCKS["persona"].find(mine) == "Ana."
    assert BLOCKS["profile"].find(mine) == '{"occupation": "baker"}'
    assert [a for a, _ in BLOCKS["skill_content"].each(mine)] == [{"name": "play-skill"}]
