"""Hooks: decisions, the ``<skill_hooks>`` block, and dispatch by the per-agent runtime."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from agentsim.skills.hooks import (
    HookDecision,
    HookOutcome,
    parse_hook_output,
    render_skill_hooks,
)
from agentsim.skills.registry import SkillRegistry
from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
from tests.unit import helpers

FIXTURES = helpers.FIXTURES / "runtime_skills"
WHEN = datetime(2026, 3, 2, 9, 0)


@pytest.fixture
def rt(tmp_path: Path) -> AgentSkillRuntime:
    reg = SkillRegistry()
    reg.scan_builtin(FIXTURES / "builtin")
    workspace = tmp_path / "agents" / "a-7"
    workspace.mkdir(parents=True)
    space = SkillSpace(reg.snapshot(), hook_output_cap=100)
    return AgentSkillRuntime(space, agent_id="a-7", workspace_root=workspace)


# -- decisions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hook", "output", "text", "decision"),
    [
        ("pre_step", "plain text", "plain text", None),
        ("pre_step", '{"decision": "continue", "message": "go on"}', "go on", None),
        (
            "pre_step",
            '{"decision": "skip", "message": "rest"}',
            "rest",
            HookDecision(kind="skip", skill_id="s@x", hook="pre_step", feedback="rest"),
        ),
        (
            "post_step",
            '{"decision": "retry", "message": "bad", "feedback": "be brief"}',
            "bad",
            HookDecision(kind="retry", skill_id="s@x", hook="post_step", feedback="be brief"),
        ),
        ("pre_step", '{"decision": "skip"', '{"decision": "skip"', None),
        ("pre_step", '{"other": 1}', '{"other": 1}', None),
        ("pre_step", '["decision"]', '["decision"]', None),
    ],
    ids=["text", "continue", "skip", "retry", "bad-json", "no-decision", "not-object"],
)
def test_parse_hook_output(
    hook: str, output: str, text: str, decision: HookDecision | None
) -> None:
    assert parse_hook_output(output, skill_id="s@x", hook=hook) == (text, decision)


@pytest.mark.parametrize(
    ("hook", "kind", "allowed"),
    [("pre_step", "retry", "continue, skip"), ("post_step", "skip", "continue, retry")],
    ids=["retry-in-pre", "skip-in-post"],
)
def test_wrong_decision_for_the_hook_is_ignored_and_said(
    hook: str, kind: str, allowed: str
) -> None:
    out = json.dumps({"decision": kind, "message": "m"})
    text, decision = parse_hook_output(out, skill_id="s@x", hook=hook)
    assert decision is None
    assert text == f"m\n[ignored decision {kind!r}: a {hook} hook may return {allowed}]"


def test_decision_round_trips_to_a_dict() -> None:
    d = HookDecision(kind="retry", skill_id="s@x", hook="post_step", feedback="f")
    o = HookOutcome(skill_id="s@x", hook="post_step", ok=False, text="t", decision=d, error="e")
    assert o.to_dict() == {
        "skill": "s@x",
        "hook": "post_step",
        "ok": False,
        "text": "t",
        "elapsed": 0.0,
        "decision": {"kind": "retry", "skill": "s@x", "hook": "post_step", "feedback": "f"},
        "error": "e",
    }


# -- the <skill_hooks> block ------------------------------------------------------------------


def test_block_is_escaped_capped_and_marks_failures() -> None:
    outcomes = [
        HookOutcome(skill_id="built-in@a", hook="pre_step", ok=True, text="<x> & </skill_hook>"),
        HookOutcome(skill_id="built-in@b", hook="pre_step", ok=True, text="y" * 50),
        HookOutcome(skill_id='built-in@"c"', hook="pre_step", ok=False, text="", error="boom"),
        HookOutcome(skill_id="built-in@d", hook="pre_step", ok=False, text=""),
    ]
    block = render_skill_hooks(outcomes, cap=20)
    assert block.splitlines() == [
        "<skill_hooks>",
        '<skill_hook skill="built-in@a" hook="pre_step" ok="true">',
        "&lt;x&gt; &amp; &lt;/skill_hook&gt;",
        "</skill_hook>",
        '<skill_hook skill="built-in@b" hook="pre_step" ok="true">',
        "y" * 20,
        "[... truncated 30 characters]",
        "</skill_hook>",
        '<skill_hook skill="built-in@&quot;c&quot;" hook="pre_step" ok="false">',
        "hook failed: boom",
        "</skill_hook>",
        '<skill_hook skill="built-in@d" hook="pre_step" ok="false">',
        "hook failed",
        "</skill_hook>",
        "</skill_hooks>",
    ]
    assert render_skill_hooks([]) == ""


# -- dispatch ---------------------------------------------------------------------------------


async def test_hooks_run_in_id_order_with_the_payload(rt: AgentSkillRuntime) -> None:
    for name in ("hook-long", "hook-echo", "hook-fail", "base-skill"):
        await rt.activate(name)
    out = await rt.run_hooks("pre_step", tick=12, time=WHEN, step_count=3)
    assert [o.skill_id for o in out] == [
        "built-in@hook-echo",
        "built-in@hook-fail",
        "built-in@hook-long",
    ]
    echo, fail, _long = out
    assert echo.ok and echo.text.startswith("<b>pre_step</b> & step 3: ")
    payload = json.loads(echo.text.split(": ", 1)[1])
    assert payload == {
        "hook_type": "pre_step",
        "tick": 12,
        "time": "2026-03-02T09:00:00",
        "agent_id": "a-7",
        "step_count": 3,
    }
    assert not fail.ok and "ValueError: hook exploded" in (fail.error or "")
    block = render_skill_hooks(out, cap=100)
    assert "&lt;b&gt;pre_step&lt;/b&gt; &amp; step 3" in block
    assert 'skill="built-in@hook-fail" hook="pre_step" ok="false"' in block
    assert "hook failed: ValueError: hook exploded\n</skill_hook>" in block
    assert "x" * 100 + "\n[... truncated 4903 characters]" in block
    assert "END" not in block
    post = await rt.run_hooks("post_step", tick=12, time=WHEN, step_count=3)
    assert [o.skill_id for o in post] == ["built-in@hook-echo"]
    assert post[0].text.startswith("<b>post_step</b>")


async def test_hook_decisions_come_back_from_dispatch(rt: AgentSkillRuntime) -> None:
    await rt.activate("hook-skip")
    await rt.activate("hook-gate")
    pre = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    post = await rt.run_hooks("post_step", tick=1, time=WHEN, step_count=1)
    assert pre[0].decision == HookDecision(
        kind="skip", skill_id="built-in@hook-skip", hook="pre_step", feedback="resting today"
    )
    assert post[0].decision == HookDecision(
        kind="retry", skill_id="built-in@hook-gate", hook="post_step", feedback="try again (1)"
    )
    assert post[0].text == "not good enough"


async def test_payload_escapes_the_agent_id_and_follows_the_clock(tmp_path: Path) -> None:
    reg = SkillRegistry()
    reg.scan_builtin(FIXTURES / "builtin")
    space = SkillSpace(reg.snapshot(), hook_output_cap=1000)
    odd = 'agent "7" \\ é'
    rt = AgentSkillRuntime(space, agent_id=odd, workspace_root=tmp_path)
    await rt.activate("hook-echo")
    payloads = []
    for tick, when in ((1, WHEN), (1, WHEN), (2, WHEN + timedelta(minutes=15))):
        (out,) = await rt.run_hooks("post_step", tick=tick, time=when, step_count=tick + 4)
        payloads.append(json.loads(out.text.split(": ", 1)[1]))
    assert [(p["agent_id"], p["tick"], p["time"], p["step_count"]) for p in payloads] == [
        (odd, 1, "2026-03-02T09:00:00", 5),
        (odd, 1, "2026-03-02T09:00:00", 5),
        (odd, 2, "2026-03-02T09:15:00", 6),
    ]
    assert payloads[0]["hook_type"] == "post_step"


async def test_activation_changes_reach_the_next_dispatch(rt: AgentSkillRuntime) -> None:
    async def ran() -> list[str]:
        return [o.skill_id for o in await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)]

    await rt.activate("hook-skip")
    assert await ran() == ["built-in@hook-skip"]
    await rt.activate("hook-echo")
    assert await ran() == ["built-in@hook-echo", "built-in@hook-skip"]
    rt.deactivate("hook-skip")
    assert await ran() == ["built-in@hook-echo"]
    await rt.set_state({"active": ["built-in@hook-long"]})
    assert await ran() == ["built-in@hook-long"]


async def test_hooks_with_stronger_isolation_run_through_the_loop(tmp_path: Path) -> None:
    root = tmp_path / "skills"
    folder = root / "iso-hook"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        "---\nname: iso-hook\ndescription: Use for isolation.\nisolation: thread\n"
        "hooks:\n  pre_step: scripts/h.py\n---\nBody.\n"
    )
    (folder / "scripts" / "h.py").write_text(
        "import threading\n\ndef entrypoint(argv, ctx):\n"
        "    return threading.current_thread().name.split(':')[0]\n"
    )
    reg = SkillRegistry()
    reg.scan_builtin(root)
    rt = AgentSkillRuntime(SkillSpace(reg.snapshot()), agent_id="a-1", workspace_root=tmp_path)
    await rt.activate("iso-hook")
    (out,) = await rt.run_hooks("pre_step", tick=1, time=WHEN, step_count=1)
    assert (out.ok, out.text) == (True, "agentsim-script")
