"""Script output the runner cuts at its cap is counted per skill and shown: the script's
``script_called`` event says ``truncated``, and ``agentsim run``'s summary, ``metrics.json``
and ``agentsim inspect`` count it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsim.cli import main
from tests.unit.helpers import read_events, write_skill

_YAML = """
name: chatty
seed: 1
clock: {start: "2026-03-02T09:00:00", tick: 1h}
ticks: 2
agents:
  - group: people
    count: 2
    skills: {default: [chatty, quiet], disabled: [daily-guidance]}
model: {backend: scripted}
output: {dir: ws, formats: [jsonl]}
"""


def _skill(root: Path, name: str, size: int) -> None:
    write_skill(
        root,
        name,
        front=f"script: scripts/{name}.py\n",
        body=f'```playbook\nexecute_skill_script {{"name": "{name}", "args": []}}\n```\n',
        files={f"scripts/{name}.py": f"def entrypoint(argv, ctx):\n    return 'x' * {size}\n"},
    )


@pytest.mark.slow
def test_truncated_output_is_counted_per_skill_and_shown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _skill(tmp_path / "custom" / "skills", "chatty", 20_000)  # over the 16,000 cap
    _skill(tmp_path / "custom" / "skills", "quiet", 10)
    exp = tmp_path / "exp.yaml"
    exp.write_text(_YAML, encoding="utf-8")
    run = tmp_path / "run"
    code = main(["run", str(exp), "--out", str(run)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"completed: {run}  ticks=2 agents=2" in out and "errors=0" in out
    assert "  script output truncated at the runner's cap: 4 (custom@chatty 4)" in out

    calls = [e for e in read_events(run) if e["type"] == "script_called"]
    chatty = [c for c in calls if c["skill"] == "custom@chatty"]
    quiet = [c for c in calls if c["skill"] == "custom@quiet"]
    assert len(chatty) == 4 and all(c["truncated"] is True and c["ok"] for c in chatty)
    assert len(quiet) == 4 and all("truncated" not in c for c in quiet)

    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["script_truncated"] == {"custom@chatty": 4}

    assert main(["inspect", str(run)]) == 0
    text = capsys.readouterr().out
    assert (
        "  truncated    custom@chatty: 4 script outputs cut at the runner's cap (the agent "
        "saw the start and a marker)" in text
    )
    assert "custom@quiet: " not in text
    assert main(["inspect", str(run), "--json"]) == 0
    skills = json.loads(capsys.readouterr().out)["skills"]
    assert skills["custom@chatty"]["script_truncated"] == 4
    assert skills["custom@quiet"]["script_truncated"] == 0
