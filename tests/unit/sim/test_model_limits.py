"""Failure limits per model: with a model per group, each model's failed calls in a row and
its share of degraded steps are counted on their own (``models.NAME.*``, defaulting to the
``model:`` block's), so one model's dead server stops the run even while another answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.run.problems import over_limits
from agentsim.testing import scripted_answer
from agentsim.testing.openai_server import OpenAITestServer

_YAML = """
name: one-dies
seed: 2
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: 6
agents:
  - {{group: thinkers, count: 2, model: strong, skills: {{disabled: [daily-guidance]}}}}
  - {{group: doers, count: 3, model: fast, skills: {{disabled: [daily-guidance]}}}}
model: {{backend: scripted, max_consecutive_failures: 2, max_degraded_share: 1.0}}
models:
  strong: {{backend: openai, model: strong-model, base_url: "{strong}", max_retries: 0}}
  fast:
    backend: openai
    model: fast-model
    base_url: "{fast}"
    max_retries: 0
    timeout: 5
output: {{dir: ws, formats: [jsonl], checkpoint_every: 100}}
"""


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_models_take_the_model_blocks_limits_unless_they_set_their_own() -> None:
    cfg = parse_experiment(
        _YAML.format(strong="http://127.0.0.1:1/v1", fast="http://127.0.0.1:2/v1").replace(
            "timeout: 5", "timeout: 5\n    max_consecutive_failures: 7"
        )
    )
    assert cfg.models["strong"].max_consecutive_failures == 2  # model:'s
    assert cfg.models["strong"].max_degraded_share == 1.0
    assert cfg.models["fast"].max_consecutive_failures == 7  # its own
    # The resolved config (what a resume reads) keeps them.
    again = parse_experiment(json.dumps(cfg.resolved_dict()))
    assert again.models["strong"].max_consecutive_failures == 2
    assert again.config_hash() == cfg.config_hash()


def test_a_models_degraded_share_is_checked_against_its_own_limit() -> None:
    metrics = {
        "agent_steps": 10,
        "problems": {"agent_degraded": 3},
        "model_failures": {"fast": {"agent_steps": 4, "degraded": 3}},
    }
    limits = {"model.max_degraded_share": 0.5, "models.fast.max_degraded_share": 0.5}
    assert over_limits(metrics, limits) == [
        "3 of 4 agent steps of model 'fast' degraded (75%), more than "
        "models.fast.max_degraded_share=0.5"
    ]


@pytest.mark.slow
def test_one_models_dead_server_stops_the_run_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    strong = OpenAITestServer(models=["strong-model"], answer=scripted_answer)
    with OpenAITestServer(models=["fast-model"]) as fast:
        dead = fast.base_url  # served, then stopped before the run: nothing listens there
    run = tmp_path / "run"
    with strong:
        exp = tmp_path / "exp.yaml"
        exp.write_text(_YAML.format(strong=strong.base_url, fast=dead))
        # The pre-flight would stop it before any tick: the server dies after it, as here.
        code = main(["run", str(exp), "--out", str(run), "--no-preflight"])
        served_strong = strong.served
    out, err = capsys.readouterr()
    assert code == 1, out + err
    # One tick: the fast model's 3 steps all degraded while the strong model answered.
    assert f"failed: {run}  ticks=1 agents=5" in out
    reason = (
        f"model 'fast' (models.fast: openai fast-model at {dead}): 3 of its calls in "
        "a row failed (models.fast.max_consecutive_failures=2); check its server, then resume"
    )
    assert f"  stopped: {reason}" in out
    assert f"resume with: agentsim run --resume {run}" in out
    assert served_strong >= 2  # the other model answered
    # A checkpoint at the stopping point, whatever output.checkpoint_every says.
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["tick-00000001"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["reason"] == reason
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["model_failures"]["fast"]["degraded"] == 3
    assert metrics["model_failures"]["strong"] == {"agent_steps": 2, "degraded": 0}
    assert metrics["model_failures"]["fast"]["agent_steps"] == 3


@pytest.mark.slow
def test_one_models_degraded_share_makes_the_run_completed_with_problems(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    strong = OpenAITestServer(models=["strong-model"], answer=scripted_answer)
    with OpenAITestServer(models=["fast-model"]) as fast:
        dead = fast.base_url
    run = tmp_path / "run"
    text = (
        _YAML.format(strong="{strong}", fast=dead)
        .replace("ticks: 6", "ticks: 1")
        .replace("max_consecutive_failures: 2, max_degraded_share: 1.0", "max_degraded_share: 0.9")
        .replace("timeout: 5", "timeout: 5\n    max_degraded_share: 0.5")
    )
    with strong:
        exp = tmp_path / "exp.yaml"
        exp.write_text(text.replace("{strong}", strong.base_url))
        code = main(["run", str(exp), "--out", str(run), "--no-preflight"])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert f"completed with problems: {run}  ticks=1 agents=5" in out
    # 3 of the run's 5 steps degraded: under model:'s 0.9, over the fast model's own 0.5.
    problem = (
        "3 of 3 agent steps of model 'fast' degraded (100%), more than "
        "models.fast.max_degraded_share=0.5"
    )
    assert f"  problems over their limits: {problem}" in out
    assert f"error: {problem}; see `agentsim inspect {run}` (exit code 3)" in err
    assert json.loads((run / "manifest.json").read_text())["problems"] == [problem]
