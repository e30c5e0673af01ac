"""A model per group: two groups' models served by two test servers on 127.0.0.1, each
group's calls (steps, surveys, interviews) going to its own model, split per model in
metrics.json, ``agentsim inspect`` and ``agentsim report``."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.errors import ConfigError, PreflightError
from agentsim.inspect import open_run
from agentsim.inspect.summary import summarize
from agentsim.run.engine import Engine
from agentsim.testing import scripted_answer
from agentsim.testing.openai_server import OpenAITestServer

_YAML = """
name: two-models
seed: 2
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 2}}
  - survey: {{name: mood, question: "How are you?", agents: {{group: thinkers}}}}
agents:
  - group: thinkers
    count: 2
    model: strong
    skills: {{default: [], disabled: [daily-guidance]}}
  - group: doers
    count: 3
    model: fast
    skills: {{default: [], disabled: [daily-guidance]}}
  - group: plain
    count: 1
    skills: {{default: [], disabled: [daily-guidance]}}
model: {{backend: scripted}}
models:
  strong:
    {{backend: openai, model: strong-model, base_url: "{strong}", max_retries: 0, timeout: 10,
     prices: {{prompt_per_1k: 1.0, completion_per_1k: 2.0}}}}
  fast: {{backend: openai, model: fast-model, base_url: "{fast}", max_retries: 0, timeout: 10}}
output: {{formats: [jsonl]}}
"""


def _config(strong: str, fast: str) -> object:
    return parse_experiment(_YAML.format(strong=strong, fast=fast))


def _models_of(server: OpenAITestServer) -> set[str]:
    return {r.body["model"] for r in server.recorded if r.path.endswith("/chat/completions")}


@pytest.mark.slow
def test_two_servers_serve_two_groups_models(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = scripted_answer
    strong = OpenAITestServer(models=["strong-model"], answer=answer)
    fast = OpenAITestServer(models=["fast-model"], answer=answer)
    run_dir = tmp_path / "run"
    with strong, fast:
        cfg = _config(strong.base_url, fast.base_url)
        summary = asyncio.run(Engine(cfg, run_dir=run_dir, preflight=True).run())  # type: ignore[arg-type]
        assert summary.status == "completed"
        assert _models_of(strong) == {"strong-model"} and _models_of(fast) == {"fast-model"}
        metrics = json.loads((run_dir / "metrics.json").read_text())
        by_model = metrics["model"]["by_model"]
        assert set(by_model) == {"default", "fast", "strong"}
        # Each server also answered its pre-flight's one-token completion.
        assert by_model["strong"]["calls"] == strong.served - 1
        assert by_model["fast"]["calls"] == fast.served - 1
        assert by_model["default"]["calls"] > 0  # the plain group: the scripted model
        assert metrics["model"]["calls"] == sum(m["calls"] for m in by_model.values())
        # The survey asked the thinkers only: through the strong model.
        assert (run_dir / "surveys" / "mood.jsonl").is_file()
        overview = summarize(open_run(run_dir))
        assert set(overview.models) == {"default", "fast", "strong"}
        strong_tokens = by_model["strong"]["prompt_tokens"], by_model["strong"]["completion_tokens"]
        assert overview.models["strong"]["cost"] == pytest.approx(
            strong_tokens[0] / 1000 * 1.0 + strong_tokens[1] / 1000 * 2.0
        )
        assert overview.models["fast"]["cost"] is None
        capsys.readouterr()
        assert main(["inspect", str(run_dir)]) == 0
        out = capsys.readouterr().out
        assert f"    strong     {strong.served - 1:,} calls" in out
        assert main(["report", str(run_dir), "--out", str(tmp_path / "report")]) == 0
        report = next((tmp_path / "report").glob("*.md")).read_text()
        assert f"| model fast | {fast.served - 1:,} calls" in report
        # An interview of a thinker asks the strong model, not the fast one.
        before_strong, before_fast = strong.served, fast.served
        assert main(["interview", str(run_dir), "Hello?", "--agent", "thinkers-00000"]) == 0
        assert strong.served > before_strong and fast.served == before_fast


def test_preflight_names_the_model_whose_server_fails(tmp_path: Path) -> None:
    strong = OpenAITestServer(models=["strong-model"])
    fast = OpenAITestServer(models=["another-model"])
    with strong, fast:
        cfg = _config(strong.base_url, fast.base_url)
        engine = Engine(cfg, run_dir=tmp_path / "run", preflight=True)  # type: ignore[arg-type]
        with pytest.raises(PreflightError, match=r"^model 'fast' \(models.fast\): ") as info:
            asyncio.run(engine.run())
    assert "fast-model" in str(info.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("edit", "field", "message"),
    [
        pytest.param(
            ("model: fast", "model: quick"),
            "agents.1.model",
            "model 'quick' is not defined (models: fast, strong)",
            id="unknown-model",
        ),
        pytest.param(
            ("  fast: {", "  default: {"),
            "models.default",
            "model name 'default' is reserved or not a name",
            id="reserved-name",
        ),
    ],
)
def test_a_group_model_that_is_not_defined_fails_at_load(
    edit: tuple[str, str], field: str, message: str
) -> None:
    text = _YAML.format(strong="http://127.0.0.1:1/v1", fast="http://127.0.0.1:1/v1")
    if edit[1] == "  default: {":
        text = text.replace("model: fast\n", "\n")
    with pytest.raises(ConfigError) as info:
        parse_experiment(text.replace(*edit))
    assert info.value.field == field
    assert message in str(info.value)
