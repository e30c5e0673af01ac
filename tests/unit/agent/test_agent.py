"""The agent's ReAct step: tools, malformed calls, read-only mode, hooks, degradation, trace."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agentsim.agent.agent import Agent, AgentSettings, StepInput, StepOutcome, step_seed
from agentsim.agent.tools import ENUM_LIMIT, READ_ONLY_TOOLS, TOOL_NAMES, build_tools
from agentsim.env import AgentInfo, SimClock, SocialModule
from agentsim.env.router import EnvRouter
from agentsim.errors import ModelError
from agentsim.llm.base import Completion, Message, ToolCall, ToolSchema, Usage
from agentsim.llm.scripted import ScriptedModel
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "runtime_skills"
START = datetime(2026, 3, 2, 9, 0)
PERSONA = "Ana, 34, a nurse who loves a riverside stroll."


class QueueModel:
    """A ChatModel that answers with queued completions (then finishes) and records requests."""

    def __init__(self, *completions: Completion | Exception) -> None:
        self.queue = list(completions)
        self.requests: list[tuple[list[dict[str, Any]], list[ToolSchema]]] = []

    async def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema] = (), *, seed: int = 0
    ) -> Completion:
        self.requests.append(([dict(m) for m in messages], list(tools)))
        item = self.queue.pop(0) if self.queue else call("finish", {"action": "done"})
        if isinstance(item, Exception):
            raise item
        return item

    def tool_results(self) -> list[str]:
        return [m["content"] for m in self.requests[-1][0] if m["role"] == "tool"]


def call(name: str, args: dict[str, Any] | str, *calls: tuple[str, str]) -> Completion:
    raw = args if isinstance(args, str) else json.dumps(args)
    tcs = [ToolCall(id="c0", name=name, arguments=raw)]
    tcs += [ToolCall(id=f"c{i + 1}", name=n, arguments=a) for i, (n, a) in enumerate(calls)]
    return Completion(tool_calls=tuple(tcs), usage=Usage(prompt_tokens=10, completion_tokens=2))


@pytest.fixture
def registry() -> SkillRegistry:
    reg = SkillRegistry()
    reg.scan_builtin(FIXTURES / "builtin")
    return reg


@pytest.fixture
def env() -> EnvRouter:
    social = SocialModule({}, seed=1, base_dir=Path("."))
    social.setup([AgentInfo(agent_id=f"a{i}", group="g", profile={}) for i in range(3)])
    return EnvRouter({"social": social.view(SimClock(START, timedelta(minutes=15)))})


async def make_agent(
    registry: SkillRegistry,
    tmp_path: Path,
    *defaults: str,
    budget: int = 2000,
    parts: dict[str, str] | None = None,
) -> Agent:
    ws = tmp_path / "agents" / "a1"
    ws.mkdir(parents=True, exist_ok=True)
    space = SkillSpace(registry.snapshot(), catalog_budget_tokens=budget, hook_output_cap=300)
    rt = AgentSkillRuntime(space, agent_id="a1", workspace_root=ws)
    for name in defaults:
        await rt.activate(name)
    profile = {"occupation": "nurse", "interests": ["walks"]}
    return Agent(
        agent_id="a1",
        group="g",
        profile=profile,
        persona=PERSONA,
        workspace=ws,
        skills=rt,
        prompt_parts=parts.__setitem__ if parts is not None else None,
    )


def inp(tick: int = 1, env: EnvRouter | None = None, **kw: Any) -> StepInput:
    return StepInput(tick=tick, time=START + timedelta(minutes=15 * tick), env=env, **kw)


def store_rows(agent: Agent) -> list[dict[str, Any]]:
    """The rows the agent hands its host at a flush, decoded."""
    rows = [json.loads(r) for r in agent.flush()]
    assert all(r["key"] == agent.agent_id for r in rows)
    return rows


def traces(agent: Agent) -> list[dict[str, Any]]:
    rows = store_rows(agent)
    return [r["data"] for r in rows if r["kind"] == "trace" and "action" in r["data"]]


def kinds(out: StepOutcome) -> list[str]:
    return [e["type"] for e in out.events]


SETTINGS = AgentSettings()


# -- the scripted model: a whole step ---------------------------------------------------------


async def test_scripted_step_activates_runs_a_script_and_finishes(
    registry: SkillRegistry, tmp_path: Path, env: EnvRouter
) -> None:
    parts: dict[str, str] = {}
    agent = await make_agent(registry, tmp_path, parts=parts)
    model = ScriptedModel(activation_rate=1.0)
    out = await agent.step(inp(1, env), model=model, settings=SETTINGS, seed=5)
    assert out.model_calls == 3 and out.script_calls == 1 and not out.degraded
    assert out.action == "activated play-skill, used play-skill stroll"
    assert kinds(out) == ["skill_activated", "script_called", "agent_action"]
    assert out.events[1]["ok"] is True
    # The trace says how the script ran (play-skill's script has an entrypoint).
    assert (out.events[1]["tier"], out.events[1]["isolation"]) == ("entrypoint", "inline")
    assert out.usage.prompt_tokens > 0
    rows = store_rows(agent)
    [trace] = [r["data"] for r in rows if r["kind"] == "trace" and "action" in r["data"]]
    assert [c["tool"] for c in trace["calls"]] == [
        "activate_skill",
        "execute_skill_script",
        "finish",
    ]
    assert trace["calls"][1]["result"] == "planned stroll riverside"
    assert '<skill_content name="play-skill">' in trace["calls"][0]["result"]
    assert trace["prompt_tokens_est"] > 0 and trace["elapsed_ms"] > 0
    assert trace["usage"]["prompt_tokens"] == out.usage.prompt_tokens
    memory = (agent.workspace / "memory.jsonl").read_text().splitlines()
    assert json.loads(memory[0])["text"] == out.action
    [skills] = [r["data"] for r in rows if r["kind"] == "skills"]
    assert skills == {"active": ["built-in@play-skill"], "step_count": 1}
    # From the next step on the body is in the agent's part, exactly once; the system
    # prompt has nothing of the agent's.
    mine = agent.agent_prompt()
    assert mine.count('<skill_content name="play-skill">') == 1
    assert "<active_skills>" not in mine  # its body says it is active
    system = agent.system_prompt()
    assert "<skill_content" not in system and 'active="true"' not in system
    # The prompt of the step went out as parts: instructions, catalog.
    [prompt] = [r["data"] for r in rows if r["kind"] == "prompt"]
    assert prompt["sha"] == trace["system_sha"] and len(prompt["parts"]) == 2
    rebuilt = "\n".join(parts[h] for h in prompt["parts"])
    assert rebuilt.startswith("<instructions>") and "<available_skills" in rebuilt
    assert hashlib.sha256(rebuilt.encode()).hexdigest()[:16] == prompt["sha"]


# -- malformed tool calls ---------------------------------------------------------------------


async def test_malformed_tool_calls_get_errors_not_crashes(
    registry: SkillRegistry, tmp_path: Path, env: EnvRouter
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(
        call(
            "activate_skill",
            "{not json",
            ("teleport", "{}"),
            ("activate_skill", "{}"),
            ("activate_skill", "[1]"),
            ("activate_skill", '{"name": "play-skil"}'),
            ("execute_skill_script", '{"name": "play-skill", "args": []}'),
            ("ask_env", '{"module": "moon", "action": "x"}'),
            ("ask_env", '{"module": "social", "action": "opinion", "args": [1]}'),
            ("execute_skill_script", '{"name": "old-skill", "args": "solo"}'),
        ),
        call("finish", {"action": "gave up"}),
    )
    out = await agent.step(inp(1, env), model=model, settings=SETTINGS, seed=1)
    results = model.tool_results()
    assert results[0].startswith(
        "error: the arguments of activate_skill are not valid JSON (Expecting property name"
    )
    assert results[1].startswith("error: unknown tool 'teleport' (tools: activate_skill, ")
    assert results[2] == "error: bad arguments for activate_skill: 'name'"
    assert results[3] == "error: the arguments of activate_skill must be a JSON object"
    assert results[4].startswith("error: skill 'play-skil' is not registered (close matches: ")
    assert "play-skill" in results[4] and results[4].endswith(
        "search_skills(query) to find a skill"
    )
    assert results[5] == (
        "error: script failed (exit 2): skill 'play-skill' is not active; "
        "call activate_skill first\n"
    )
    assert results[6].startswith("error: there is no environment module 'moon' (known: social)")
    assert results[7] == "error: ask_env `args` must be an object"
    assert results[8].startswith("error: script failed (exit 2): skill 'old-skill' is not active")
    assert out.action == "gave up" and not out.degraded


async def test_text_answer_and_turn_limit(registry: SkillRegistry, tmp_path: Path) -> None:
    agent = await make_agent(registry, tmp_path)
    text = QueueModel(Completion(content="  I just walk.  "))
    out = await agent.step(inp(1), model=text, settings=SETTINGS, seed=1)
    assert out.action == "I just walk." and out.model_calls == 1
    searching = QueueModel(*[call("search_skills", {"query": "stroll"})] * 5)
    out = await agent.step(
        inp(2), model=searching, settings=AgentSettings(max_react_turns=3), seed=1
    )
    assert out.action == "ran out of turns" and out.model_calls == 3
    assert json.loads(searching.tool_results()[0])["results"][0]["name"] == "play-skill"
    assert traces(agent)[-1]["limitation"] == "step ended after max_react_turns=3"


async def test_skill_tools_read_deactivate_and_env_skills(
    registry: SkillRegistry, tmp_path: Path, env: EnvRouter
) -> None:
    env_dir = tmp_path / "env-skills" / "opinion"
    env_dir.mkdir(parents=True)
    (env_dir / "SKILL.md").write_text("---\nname: opinion\ndescription: Use to see it.\n---\nB\n")
    registry.scan_env_skills(tmp_path / "env-skills", "social")
    agent = await make_agent(registry, tmp_path, "play-skill")
    model = QueueModel(
        call(
            "read_skill_file",
            {"name": "play-skill", "path": "scripts/play.py"},
            ("execute_skill_script", json.dumps({"name": "opinion", "args": ["{}"]})),
            ("deactivate_skill", '{"name": "play-skill"}'),
            ("deactivate_skill", '{"name": "play-skill"}'),
            ("ask_env", '{"module": "social", "action": "post", "args": {"text": "hi"}}'),
        )
    )
    out = await agent.step(inp(1, env), model=model, settings=SETTINGS, seed=1)
    results = model.tool_results()
    assert results[0].startswith('"""Plans a stroll."""')
    assert json.loads(results[1])["topic"] == "the new city park"
    assert results[2:4] == ["deactivated play-skill", "play-skill was not active"]
    assert len(out.intents) == 1 and out.intents[0].action == "post"
    assert "skill_deactivated" in kinds(out) and agent.skills.active == ()
    no_env = QueueModel(call("ask_env", {"module": "social", "action": "opinion"}))
    await agent.step(inp(2), model=no_env, settings=SETTINGS, seed=1)
    assert no_env.tool_results() == ["error: this simulation has no environment modules"]


async def test_deprecated_warning_reaches_the_model_and_the_trace(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(
        call("activate_skill", {"name": "old-skill"}, ("activate_skill", '{"name": "old-skill"}'))
    )
    await agent.step(inp(1), model=model, settings=SETTINGS, seed=1)
    warning = "skill built-in@old-skill is deprecated; prefer another skill where one fits"
    first, second = model.tool_results()
    assert first.startswith(f"activated old-skill\nwarning: {warning}\n<skill_content")
    assert second == "old-skill is already active; its instructions are in your context"
    assert traces(agent)[0]["warnings"] == [warning]


# -- read-only mode ---------------------------------------------------------------------------


async def test_read_only_mode_cannot_write(
    registry: SkillRegistry, tmp_path: Path, env: EnvRouter
) -> None:
    agent = await make_agent(registry, tmp_path)
    before = (agent.step_count, agent.memory.total, agent.skills.active)
    model = QueueModel(
        call(
            "activate_skill",
            {"name": "play-skill"},
            ("execute_skill_script", '{"name": "play-skill", "args": []}'),
            ("deactivate_skill", '{"name": "play-skill"}'),
            ("ask_env", '{"module": "social", "action": "post", "args": {"text": "hi"}}'),
            ("ask_env", '{"module": "social", "action": "opinion"}'),
        ),
        call("finish", {"action": "answered", "answer": "I like strolls."}),
    )
    out = await agent.step(
        inp(3, env, question="What do you like?", read_only=True),
        model=model,
        settings=SETTINGS,
        seed=1,
    )
    offered = [t["function"]["name"] for t in model.requests[0][1]]
    assert offered == list(READ_ONLY_TOOLS)
    results = model.tool_results()
    for i, tool in enumerate(("activate_skill", "execute_skill_script", "deactivate_skill")):
        assert results[i] == f"error: {tool} is not available in read-only mode"
    assert results[3] == "error: post changes the world; not allowed in read-only mode"
    assert "value" in json.loads(results[4])
    assert out.answer == "I like strolls." and out.intents == []
    assert (agent.step_count, agent.memory.total, agent.skills.active) == before
    assert "<question>What do you like?</question>" in model.requests[0][0][1]["content"]
    assert "You are being interviewed" in model.requests[0][0][0]["content"]
    # Neither a trace line nor a prompt: only the record of its (unchanged) skills.
    assert [r["kind"] for r in store_rows(agent)] == ["skills"]


# -- degradation ------------------------------------------------------------------------------


async def test_model_failure_degrades_the_step_and_the_run_goes_on(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path)
    model = QueueModel(ModelError("server down", attempts=3))
    out = await agent.step(inp(1), model=model, settings=SETTINGS, seed=1)
    assert out.degraded and out.action == "kept its plan (model unavailable)"
    assert kinds(out) == ["agent_degraded", "agent_action"]
    assert out.events[0]["reason"] == "server down (after 3 attempts)"
    assert traces(agent)[0]["limitation"] == (
        "model failed after its retries: server down (after 3 attempts); the agent kept its plan"
    )
    out = await agent.step(inp(2), model=model, settings=SETTINGS, seed=1)
    assert not out.degraded and out.action == "done"


# -- hooks and decisions ----------------------------------------------------------------------


async def test_hook_output_is_in_the_prompt_escaped(
    registry: SkillRegistry, tmp_path: Path
) -> None:
    agent = await make_agent(registry, tmp_path, "hook-echo", "hook-long")
    model = QueueModel()
    await agent.step(inp(1), model=model, settings=SETTINGS, seed=1)
    await agent.step(inp(2), model=model, settings=SETTINGS, seed=1)
    user = model.requests[-1][0][1]["content"]
    assert '<skill_hook skill="built-in@hook-echo" hook="post_step" ok="true">' in user
    assert "&lt;b&gt;post_step&lt;/b&gt; &amp; step 1" in user  # last step's post_step
    assert "&lt;b&gt;pre_step&lt;/b&gt; &amp; step 2" in user
    assert "x" * 300 + "\n[... truncated 4703 characters]" in user
    [_, trace] = traces(agent)
    assert [h["hook"] for h in trace["hooks"]] == ["post_step", "pre_step", "pre_step"]
    # The trace says how each hook call ran.
    assert [(h["tier"], h["isolation"]) for h in trace["hooks"]] == [("entrypoint", "inline")] * 3


async def test_pre_step_skip_sits_the_step_out(registry: SkillRegistry, tmp_path: Path) -> None:
    agent = await make_agent(registry, tmp_path, "hook-skip")
    model = QueueModel(ModelError("must not be called"))
    out = await agent.step(inp(1), model=model, settings=SETTINGS, seed=1)
    assert out.skipped and out.model_calls == 0 and model.requests == []
    assert out.action == "resting today"
    assert out.events == [
        {
            "tick": 1,
            "time": "2026-03-02T09:15:00",
            "type": "hook_decision",
            "agent_id": "a1",
            "skill": "built-in@hook-skip",
            "hook": "pre_step",
            "decision": "skip",
        }
    ]
    assert agent.memory.total == 0
    assert traces(agent)[0]["hooks"][0]["decision"]["kind"] == "skip"


@pytest.mark.parametrize(
    ("limit", "retries", "rounds", "limited"),
    [(2, 2, 2, False), (None, 2, 3, True), (None, 0, 1, True)],
    ids=["passes-after-one-retry", "gives-up-after-max", "no-retries"],
)
async def test_post_step_retry_gate(
    registry: SkillRegistry,
    tmp_path: Path,
    limit: int | None,
    retries: int,
    rounds: int,
    limited: bool,
) -> None:
    agent = await make_agent(registry, tmp_path, "hook-gate")
    if limit is not None:
        (agent.workspace / "gate.limit").write_text(str(limit))
    model = QueueModel()
    settings = AgentSettings(max_hook_retries=retries)
    out = await agent.step(inp(1), model=model, settings=settings, seed=1)
    assert out.model_calls == rounds
    if rounds > 1:
        assert "<feedback>\ntry again (1)\n</feedback>" in model.requests[1][0][1]["content"]
    decisions = [e for e in out.events if e["type"] == "hook_decision"]
    assert len(decisions) == (rounds if limited else rounds - 1)
    assert all(e["decision"] == "retry" for e in decisions)
    [trace] = traces(agent)
    if limited:
        assert trace["limitation"] == (
            f"post_step quality gate of built-in@hook-gate still failing after {retries} "
            f"retries: try again ({rounds})"
        )
        assert "hook_gate_failed" in kinds(out)
    else:
        assert "limitation" not in trace and "hook_gate_failed" not in kinds(out)


# -- memory bound, state, trace modes ---------------------------------------------------------


async def test_prompt_stays_under_the_cap_after_500_steps(
    registry: SkillRegistry, tmp_path: Path, env: EnvRouter
) -> None:
    agent = await make_agent(registry, tmp_path, budget=400)
    settings = AgentSettings(memory_prompt_tokens=300, prompt_cap_tokens=1200, trace="summary")
    model = ScriptedModel(activation_rate=0.0)
    sizes: list[int] = []
    for tick in range(500):
        agent.remember(tick=tick, time=START.isoformat(), kind="message", text="hello " * 20)
        await agent.step(inp(tick, env), model=model, settings=settings, seed=tick)
        if tick % 50 == 49:
            sizes.extend(t["prompt_tokens_est"] for t in traces(agent)[-50:])
    assert len(sizes) == 500 and max(sizes) <= settings.prompt_cap_tokens
    assert max(sizes[400:]) <= max(sizes[20:40]) + 5  # flat: the memory window is bounded
    assert agent.memory.total == 1000
    lines = (agent.workspace / "memory.jsonl").read_text().splitlines()
    assert len(lines) == 1000  # append-only: everything is on disk


async def test_state_round_trips(registry: SkillRegistry, tmp_path: Path) -> None:
    agent = await make_agent(registry, tmp_path, "hook-echo", "args-skill")
    await agent.step(inp(1), model=QueueModel(), settings=SETTINGS, seed=1)
    state = json.loads(json.dumps(agent.get_state()))
    other = await make_agent(registry, tmp_path / "other")
    await other.set_state(state)
    mine, theirs = other.get_state(), agent.get_state()
    assert mine.pop("post_hooks")[0]["text"] == theirs.pop("post_hooks")[0]["text"]
    assert mine == theirs
    assert other.system_prompt() == agent.system_prompt()


async def test_trace_off_writes_no_trace(registry: SkillRegistry, tmp_path: Path) -> None:
    agent = await make_agent(registry, tmp_path)
    await agent.step(inp(1), model=QueueModel(), settings=AgentSettings(trace="off"), seed=1)
    assert "trace" not in {r["kind"] for r in store_rows(agent)}
    assert (agent.workspace / "memory.jsonl").exists()


def test_step_seed_is_stable_and_positive() -> None:
    assert step_seed(7, "a1", 3) == step_seed(7, "a1", 3)
    assert step_seed(7, "a1", 3) != step_seed(7, "a1", 4)
    assert 0 <= step_seed(7, "a1", 3) < 2**31


def test_tool_schemas_enumerate_visible_skills() -> None:
    tools = build_tools(["b", "a"], {"social": {"post": "x"}})
    assert [t["function"]["name"] for t in tools] == list(TOOL_NAMES)
    name = tools[0]["function"]["parameters"]["properties"]["name"]
    assert name["enum"] == ["a", "b"]
    assert "social: post" in tools[5]["function"]["description"]
    many = build_tools([f"s{i}" for i in range(ENUM_LIMIT + 1)], {})
    assert "enum" not in many[0]["function"]["parameters"]["properties"]["name"]
    assert "none" in many[5]["function"]["description"]
