"""An environment module's skill with a ``script:`` (and ``hooks:``) runs them like any other
skill, through ``agentsim run``; only a module skill without a script is one of the module's
actions, called through ``ask_env``, and a bad JSON argument to that says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.inspect import open_run
from tests.unit.helpers import ENVMODS, read_events

_RECEIPT_MD = """---
name: market-receipt
description: Use to keep a receipt of what you bought at the market.
script: scripts/receipt.py
hooks: {pre_step: scripts/remind.py}
requires: [env:market]
---
# Receipts

```playbook
execute_skill_script {"name": "market-receipt", "args": ["bread"]}
```
"""

_RECEIPT_PY = """
def entrypoint(argv, ctx):
    out = ctx.state_dir()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "receipts.txt", "a", encoding="utf-8") as f:
        f.write(f"{ctx.tick} {argv[0]}\\n")
    return f"receipt kept for {argv[0]}"
"""

_REMIND_PY = """
from agentsim import hook_context


def pre_step():
    c = hook_context()
    with open(c.workspace_root / "reminded.txt", "a", encoding="utf-8") as f:
        f.write(f"{c.payload['tick']}\\n")
    return "keep your receipts"
"""

# A module skill without a script whose playbook sends a non-JSON argument.
_PRICES_MD = """---
name: prices
description: Use to read the market's prices.
requires: [env:market]
---
```playbook
execute_skill_script {"name": "prices", "args": ["all of them"]}
```
"""


def _market(tmp: Path, skills: list[str], extra: dict[str, str]) -> Path:
    root = tmp / "market"
    shutil.copytree(ENVMODS / "market", root)
    for rel, text in extra.items():
        path = root / "envs" / "skills" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    exp = root / "experiment.yaml"
    text = exp.read_text(encoding="utf-8").replace(
        "skills: {default: [market-shopping]}", f"skills: {{default: [{', '.join(skills)}]}}"
    )
    exp.write_text(text, encoding="utf-8")
    return exp


@pytest.mark.slow
def test_an_env_skill_with_a_script_runs_it_and_its_hook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _market(
        tmp_path,
        ["market-receipt"],
        {
            "market-receipt/SKILL.md": _RECEIPT_MD,
            "market-receipt/scripts/receipt.py": _RECEIPT_PY,
            "market-receipt/scripts/remind.py": _REMIND_PY,
        },
    )
    run = tmp_path / "run"
    code = main(["run", str(exp), "--out", str(run)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"completed: {run}  ticks=4 agents=4" in out and "errors=0" in out
    events = read_events(run)
    calls = [e for e in events if e["type"] == "script_called"]
    assert len(calls) == 4 * 4  # every agent, every tick: the script, not ask_env
    assert {(c["skill"], c["ok"]) for c in calls} == {("env:market@market-receipt", True)}
    agent = run / "agents" / "shoppers-00001"
    receipts = (agent / "state" / "env-market" / "market-receipt" / "receipts.txt").read_text()
    assert receipts.splitlines() == ["0 bread", "1 bread", "2 bread", "3 bread"]
    # The pre_step hook ran before every step.
    assert (agent / "reminded.txt").read_text().split() == ["0", "1", "2", "3"]


def test_an_env_skill_without_a_script_is_ask_env_and_says_so_on_bad_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _market(tmp_path, ["prices"], {"prices/SKILL.md": _PRICES_MD})
    run = tmp_path / "run"
    code = main(["run", str(exp), "--out", str(run), "--trace", "full"])
    out = capsys.readouterr().out
    assert code in (0, 3), out
    assert f"{run}  ticks=4 agents=4" in out
    events = read_events(run)
    assert not [e for e in events if e["type"] == "script_called"]  # no script to run
    steps = open_run(run).agent("shoppers-00001").history(last=None).last_steps
    results = [
        str(c["result"]) for s in steps for c in s.calls if c["tool"] == "execute_skill_script"
    ]
    assert len(results) == 4  # one a step, and the agent read why it failed
    assert all(
        r.startswith(
            "error: env:market@prices has no script: execute_skill_script calls "
            "ask_env(module='market', action='prices') with args[0] as the action's "
            "arguments, which is not valid JSON"
        )
        for r in results
    ), results
