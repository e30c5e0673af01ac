"""Hooks: decisions, the ``<skill_hooks>`` block, and dispatch by the per-agent runtime."""

from __future__ import annotations

import json
from datetime import datetime
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

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "runtime_skills"
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
