"""Skills record their own measures: ``ctx.record`` in an entrypoint or a hook, or an
``AGENTSIM_MEASURE`` line printed by a plain script, each a ``measure`` event with the agent,
tick, group and value, a column of ``open_run(...).events()``, and a plot of ``report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.hosts.local import LocalExecutor
from agentsim.inspect.report import write_report
from agentsim.inspect.run import open_run
from agentsim.run.engine import Engine
from agentsim.skills.measures import line, split
from agentsim.testing import ChatRequest, FunctionModel, tool_call
from agentsim.view import create_app
from tests.unit import helpers

_YAML = """
name: measures
seed: 3
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 3
agents:
  - group: trusting
    count: 2
    profile: {template: generic}
    skills: {default: [trust], disabled: [daily-guidance]}
  - group: wary
    count: 1
    profile: {template: generic}
    skills: {default: [trust], disabled: [daily-guidance]}
skills: {builtin: false, paths: [skills]}
model: {backend: scripted}
output: {dir: ws, formats: [jsonl]}
"""

# The hook records the tick as "trust" (halved for the wary group); the plain script prints
# a measure line among its output, which the model must not see.
_HOOK = """
def entrypoint(argv, ctx):
    wary = ctx.agent_id.startswith("wary")
    ctx.record("trust", ctx.tick / (2 if wary else 1))
    return ""
"""
_PLAIN = """
import sys
print("counted the neighbours")
print("AGENTSIM_MEASURE neighbours 3")
print("AGENTSIM_MEASURE not-a-number abc")
"""


def _skills(root: Path) -> None:
    helpers.write_skill(
        root / "skills",
        "trust",
        description="Use when testing measures.",
        front="script: scripts/count.py\nhooks:\n  pre_step: scripts/hook.py\n",
        body="Count the neighbours.\n",
        files={"scripts/hook.py": _HOOK, "scripts/count.py": _PLAIN},
    )


async def test_measures_from_a_hook_and_a_plain_script_become_events_columns_and_plots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skills(tmp_path)
    seen: list[str] = []

    def brain(request: ChatRequest) -> Any:
        if not request.calls:
            return tool_call("execute_skill_script", name="trust", args=[])
        seen.append(str(request.messages[-1].get("content")))
        return tool_call("finish", action="counted")

    cfg = parse_experiment(_YAML, base_dir=tmp_path)
    executor = LocalExecutor(model_factory=lambda spec: FunctionModel(brain))
    run = tmp_path / "run"
    summary = await Engine(cfg, run_dir=run, executor=executor).run()
    assert summary.status == "completed" and summary.metrics["errors"] == 0

    # The model saw the script's output without the measure line; a bad line stays in it.
    assert seen and all("counted the neighbours" in s for s in seen)
    assert not any("AGENTSIM_MEASURE neighbours" in s for s in seen)
    assert all("AGENTSIM_MEASURE not-a-number abc" in s for s in seen)

    table = open_run(run).events(type="measure")
    rows = sorted(
        zip(
            table["tick"].to_pylist(),
            table["agent_id"].to_pylist(),
            table["name"].to_pylist(),
            table["value"].to_pylist(),
            table["group"].to_pylist(),
            table["skill"].to_pylist(),
            strict=True,
        )
    )
    trust = [r for r in rows if r[2] == "trust"]
    assert len(trust) == 9 and len([r for r in rows if r[2] == "neighbours"]) == 9
    assert trust[3][2:] == ("trust", 1.0, "trusting", "custom@trust")
    assert {(t, v) for t, a, n, v, g, _ in trust if g == "wary"} == {(0, 0.0), (1, 0.5), (2, 1.0)}

    rep = write_report(run)
    assert set(rep.data.measures) == {"neighbours", "trust"}
    wary = rep.data.measures["trust"]["wary"]
    assert wary.ticks == (0, 1, 2) and wary.columns["mean"] == (0.0, 0.5, 1.0)
    assert rep.data.measures["trust"]["trusting"].columns["n"] == (2, 2, 2)
    assert rep.images["measures"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = rep.summary.read_text("utf-8")
    assert (
        "| trust | wary | 3 | 3 | 1 |" in text and "| neighbours | trusting | 6 | 3 | 3 |" in text
    )

    # The viewer's Run page draws each measure per group, a gap where a tick has none.
    page = TestClient(create_app(run), base_url=helpers.LOCAL).get("/api/runs/run").json()
    assert page["measures"]["trust"] == {"trusting": [0.0, 1.0, 2.0], "wary": [0.0, 0.5, 1.0]}

    assert main(["inspect", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["errors"] == {}


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("has space", 1, "measure name 'has space' is not valid"),
        ("", 1, "measure name '' is not valid"),
        ("trust", float("nan"), "measure 'trust': the value must be finite, not nan"),
        ("trust", True, "measure 'trust': the value must be a number, not True"),
        ("trust", "0.4", "measure 'trust': the value must be a number, not '0.4'"),
    ],
    ids=["space", "empty", "nan", "bool", "str"],
)
def test_a_bad_measure_is_refused_with_its_reason(name: str, value: Any, message: str) -> None:
    ctx = helpers.make_ctx(Path("/nonexistent"), create=False)
    with pytest.raises(ValueError, match=message):
        ctx.record(name, value)


def test_measure_lines_are_taken_out_and_others_kept() -> None:
    text = f"a\n{line('x', 2)}\r\nAGENTSIM_MEASURE y inf\nb\n{line('z.1', 0.25)}"
    kept, found = split(text)
    assert found == [("x", 2.0), ("z.1", 0.25)]
    assert kept == "a\nAGENTSIM_MEASURE y inf\nb\n"
    assert split("no measures here") == ("no measures here", [])
