"""Skill trigger rates: a run whose model is scripted by the test (through the OpenAI test
server on 127.0.0.1), so that what each group's agents saw, activated and used is known;
``tick_end``'s ``skills`` counts and ``agentsim report``'s table are checked exactly."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.inspect.report import SkillTrigger, collect_report_data, write_report
from agentsim.inspect.summary import summarize_events
from agentsim.llm.base import ToolCall
from agentsim.testing.function_model import ChatRequest, tool_call
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit import helpers

_YAML = """
name: triggers
seed: 5
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: 2
agents:
  - group: alpha
    count: 2
    persona: An alpha person.
    skills: {{default: [nudge]}}
  - group: beta
    count: 1
    persona: A beta person.
    model: other
    skills: {{default: [nudge]}}
skills: {{builtin: false, paths: [skills]}}
model: {{backend: openai, model: test-model, base_url: "{url}", max_retries: 0, timeout: 10}}
models:
  other: {{backend: openai, model: test-model, base_url: "{url}", max_retries: 0, timeout: 10}}
agent: {{max_react_turns: 3}}
output: {{formats: [jsonl]}}
"""

_NUDGE = (
    "def entrypoint(argv, ctx):\n"
    '    return \'Time to stop.\\nSUGGESTED: finish {"action": "nudged"}\'\n'
)


def _skills(root: Path) -> None:
    """Three skills in the portable form: one with a script, one with a pre_step hook that
    suggests a call, one that nothing uses."""
    helpers.write_skill(
        root,
        "helper",
        description="Use when you need help.",
        front="metadata:\n  agentsim.script: scripts/helper.py\n",
        files={"scripts/helper.py": "def entrypoint(argv, ctx):\n    return 'helped'\n"},
    )
    helpers.write_skill(
        root,
        "nudge",
        description="Use to be told when to stop.",
        front="metadata:\n  agentsim.hooks.pre_step: scripts/nudge.py\n",
        files={"scripts/nudge.py": _NUDGE},
    )
    helpers.write_skill(root, "ignored", description="Use when pigs fly.")


def _answer(req: ChatRequest) -> Any:
    """alpha: activates helper at tick 0, calls its script at tick 1, then follows the hook's
    suggestion; beta: a broken call, then finishes its own way."""
    user = "\n".join(str(m.get("content")) for m in req.messages if m.get("role") == "user")
    answered = any(m.get("role") == "tool" for m in req.messages)
    if "A beta person." in user:
        if not answered:  # a call whose arguments are not JSON: refused, and no follow
            return ToolCall(id="", name="finish", arguments='{"action": "nudged"')
        return tool_call("finish", action="my own way")
    if answered:
        return tool_call("finish", action="nudged")
    if re.search(r"^tick: 0$", req.last_user, re.M):
        return tool_call("activate_skill", name="helper")
    return tool_call("execute_skill_script", name="helper", args=["x"])


@pytest.mark.slow
def test_trigger_rates_of_a_known_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _skills(tmp_path / "skills")
    with OpenAITestServer(answer=_answer) as srv:
        exp = tmp_path / "exp.yaml"
        exp.write_text(_YAML.format(url=srv.base_url), encoding="utf-8")
        code = main(["run", str(exp), "--out", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    run = tmp_path / "run"
    events = [json.loads(x) for x in (run / "events.jsonl").read_text("utf-8").splitlines()]
    ends = [e for e in events if e["type"] == "tick_end"]
    assert [e["tick"] for e in ends] == [0, 1]
    # Every step lists the three skills; nudge's hook speaks every step, alpha follows it.
    assert ends[0]["skills"] == {
        "alpha": {
            "custom@helper": {"visible": 2, "activated": 2},
            "custom@ignored": {"visible": 2},
            "custom@nudge": {"visible": 2, "hooks_shown": 2, "suggested": 2, "followed": 2},
        },
        "beta": {
            "custom@helper": {"visible": 1},
            "custom@ignored": {"visible": 1},
            "custom@nudge": {"visible": 1, "hooks_shown": 1, "suggested": 1},
        },
    }
    assert ends[1]["skills"]["alpha"]["custom@helper"] == {"visible": 2, "scripts": 2}
    assert ends[1]["skills"]["beta"] == ends[0]["skills"]["beta"]
    # The counts agree with the events the run wrote.
    activations = [e for e in events if e["type"] == "skill_activated" and not e.get("default")]
    assert sorted((e["tick"], e["skill"]) for e in activations) == [
        (0, "custom@helper"),
        (0, "custom@helper"),
    ]
    calls = [e for e in events if e["type"] == "script_called" and e["tier"] != "hook"]
    assert [(e["tick"], e["skill"]) for e in calls] == [(1, "custom@helper")] * 2

    assert main(["report", str(run)]) == 0
    capsys.readouterr()
    report = write_report(run)
    assert report.data.triggers == (
        SkillTrigger(skill="custom@helper", group="alpha", model="default", visible=4,
                     activated=2, scripts=2),
        SkillTrigger(skill="custom@helper", group="beta", model="other", visible=2),
        SkillTrigger(skill="custom@ignored", group="alpha", model="default", visible=4),
        SkillTrigger(skill="custom@ignored", group="beta", model="other", visible=2),
        SkillTrigger(skill="custom@nudge", group="alpha", model="default", visible=4,
                     hooks_shown=4, suggested=4, followed=4),
        SkillTrigger(skill="custom@nudge", group="beta", model="other", visible=2,
                     hooks_shown=2, suggested=2),
    )  # fmt: skip
    assert report.data.activated_by == {"custom@helper": 2}
    assert report.data.triggers[0].activation_rate == 0.5
    assert report.data.triggers[0].to_dict()["activation_rate"] == 0.5
    text = report.summary.read_text("utf-8")
    table = text[text.index("## Skill trigger rates") : text.index("## Hot reloads")]
    rows = [line for line in table.splitlines() if line.startswith("| custom@")]
    assert rows == [
        "| custom@helper | alpha | default | 4 | 2 (50%) | 2 | 2 | 0 | - |  |",
        "| custom@helper | beta | other | 2 | 0 (0%) | 2 | 0 | 0 | - | never fires |",
        "| custom@ignored | alpha | default | 4 | 0 (0%) | 0 | 0 | 0 | - | never fires |",
        "| custom@ignored | beta | other | 2 | 0 (0%) | 0 | 0 | 0 | - | never fires |",
        "| custom@nudge | alpha | default | 4 | 0 (0%) | 0 | 0 | 4 | 4 of 4 | default |",
        "| custom@nudge | beta | other | 2 | 0 (0%) | 0 | 0 | 2 | 0 of 2 | default |",
    ]
    assert "**Never fires:** custom@helper (beta); custom@ignored (alpha, beta)." in table
    # inspect sums the groups: helper fired in alpha, ignored nowhere.
    assert main(["inspect", str(run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if "never fires" in line] == [
        "  never fires  custom@ignored: listed in 6 catalogs, never activated or called "
        "(trigger rates: agentsim report)"
    ]
    assert main(["inspect", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["never_fires"] == {"custom@ignored": 6}
    # Without its config.yaml the groups' models are unknown: the rest is the same.
    (run / "config.yaml").unlink()
    again = write_report(run, out_dir=tmp_path / "again")
    assert [t.model for t in again.data.triggers] == [""] * 6
    assert [replace(t, model="") for t in report.data.triggers] == list(again.data.triggers)
    assert "| custom@helper | alpha | - | 4 | 2 (50%) |" in again.summary.read_text("utf-8")


def test_a_log_without_trigger_counts_has_none() -> None:
    """A log written before ``tick_end`` carried ``skills``, or with a malformed one."""
    data = collect_report_data(
        [
            {"type": "tick_end", "tick": 0, "time": "2026-03-02T09:00:00", "steps": 1},
            {"type": "tick_end", "tick": 1, "time": "2026-03-02T10:00:00", "skills": ["x"]},
            {"type": "tick_end", "tick": 2, "time": "2026-03-02T11:00:00", "skills": {"g": 1}},
        ]
    )
    assert data.triggers == () and data.activated_by == {}


def test_inspect_of_a_log_with_malformed_trigger_counts_lists_none() -> None:
    counts = summarize_events(
        [
            {"type": "tick_end", "tick": 0, "skills": {"g": {"s": {"visible": "x"}, "t": 1}}},
            {"type": "tick_end", "tick": 1, "skills": {"g": ["s"]}},
            {"type": "tick_end", "tick": 2, "skills": ["g"]},
        ]
    )
    assert counts.never_fires == {}
