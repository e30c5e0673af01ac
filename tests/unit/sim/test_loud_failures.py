"""Model failures are loud, through ``agentsim run`` against the test server on 127.0.0.1:
the pre-flight check (server down, key refused, unknown model, missing key variable) writes
nothing and exits 2; a server that fails every call stops the run with a checkpoint and the
resume command; a run with too many degraded steps exits 3."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.config.experiment import parse_experiment
from agentsim.llm.preflight import preflight_model
from agentsim.testing.openai_server import Fault, OpenAITestServer

KEY = "sk-test-loud-0123456789abcdef"

_YAML = """
name: loud
seed: 5
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: people
    count: 3
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: test-model
  base_url: {base_url}
  api_key_env: AGENTSIM_LOUD_KEY
  max_retries: 0
  timeout: 5
  cache: {cache}
  cache_path: {cache_path}
  max_consecutive_failures: {max_failures}
environment:
  - {{module: social}}
# The server answers with text and no tool call (`answered`, not `finished`).
agent: {{max_unfinished_share: 1}}
output: {{dir: ws, formats: [jsonl], checkpoint_every: 100}}
"""


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSIM_LOUD_KEY", KEY)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def _experiment(
    tmp: Path, base_url: str, *, ticks: int = 2, cache: str = "off", max_failures: int = 50
) -> Path:
    path = tmp / "exp.yaml"
    path.write_text(
        _YAML.format(
            ticks=ticks,
            base_url=base_url,
            cache=cache,
            cache_path=tmp / "cache.sqlite",
            max_failures=max_failures,
        ),
        encoding="utf-8",
    )
    return path


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["run", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _nothing_written(tmp: Path) -> None:
    assert not (tmp / "run").exists()
    assert not (tmp / "cache.sqlite").exists()


# -- pre-flight ---------------------------------------------------------------------------


@pytest.mark.parametrize("cache", ["off", "record"])
def test_server_down_exits_2_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], cache: str, refused_port: int
) -> None:
    url = f"http://127.0.0.1:{refused_port}/v1"
    exp = _experiment(tmp_path, url, cache=cache)
    code, out, err = _run(capsys, str(exp), "--out", str(tmp_path / "run"))
    assert code == 2 and out == ""
    assert err.startswith(f"error: pre-flight: cannot reach the model server at {url} (")
    assert "start the server or fix model.base_url" in err
    assert err.rstrip().endswith("(--no-preflight skips this check)")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    _nothing_written(tmp_path)


def test_refused_key_exits_2_and_names_the_variable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSIM_LOUD_KEY", "sk-wrong-key-000000000000")
    with OpenAITestServer(models=["test-model"], api_key=KEY) as srv:
        exp = _experiment(tmp_path, srv.base_url)
        code, _, err = _run(capsys, str(exp), "--out", str(tmp_path / "run"))
        assert srv.requests == 0  # only the model list was asked for: no completion paid
    assert code == 2
    assert f"error: pre-flight: {srv.base_url} refused the API key (HTTP 401" in err
    assert "check the key in $AGENTSIM_LOUD_KEY" in err
    _nothing_written(tmp_path)


def test_unknown_model_exits_2_and_lists_the_served_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(models=["other-model", "third"]) as srv:
        exp = _experiment(tmp_path, srv.base_url)
        code, _, err = _run(capsys, str(exp), "--out", str(tmp_path / "run"))
    assert code == 2
    assert (
        f"error: pre-flight: the server at {srv.base_url} does not serve model 'test-model' "
        "(it serves: other-model, third); set model.model to one of those"
    ) in err
    _nothing_written(tmp_path)


def test_a_server_answering_only_5xx_fails_the_preflight(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # No model list: the check is a one-token completion, which gets HTTP 500.
    with OpenAITestServer(fault_rate=1.0, faults=(Fault.status(500),)) as srv:
        exp = _experiment(tmp_path, srv.base_url)
        code, _, err = _run(capsys, str(exp), "--out", str(tmp_path / "run"))
        assert srv.faults_injected == {"500": 1}  # max_retries: 0, so asked once
    assert code == 2
    assert err.startswith(f"error: pre-flight: {srv.base_url} answered HTTP 500 (")
    assert "(--no-preflight skips this check)" in err
    _nothing_written(tmp_path)


def test_missing_key_variable_exits_2_before_anything_is_written(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    refused_port: int,
) -> None:
    monkeypatch.delenv("AGENTSIM_LOUD_KEY")
    exp = _experiment(tmp_path, f"http://127.0.0.1:{refused_port}/v1")
    code, _, err = _run(capsys, str(exp), "--out", str(tmp_path / "run"))
    assert code == 2
    assert err.startswith(
        "error: model.api_key_env: the API key variable AGENTSIM_LOUD_KEY is not set"
    )
    _nothing_written(tmp_path)


def test_replay_without_fallthrough_needs_no_server(tmp_path: Path, refused_port: int) -> None:
    exp = _experiment(tmp_path, f"http://127.0.0.1:{refused_port}/v1", cache="replay")
    cfg = parse_experiment(exp.read_text("utf-8"), base_dir=tmp_path)
    asyncio.run(preflight_model(cfg.model, run_dir=tmp_path / "run"))  # no server, no error
    _nothing_written(tmp_path)


# -- during the run -----------------------------------------------------------------------


def _json(path: Path) -> Any:
    return json.loads(path.read_text("utf-8"))


@pytest.mark.slow
def test_a_server_failing_every_call_stops_the_run_then_resume_exits_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    with OpenAITestServer(
        models=["test-model"], fault_rate=1.0, faults=(Fault.status(500),)
    ) as srv:
        # 3 agents a tick: 3 failed calls in a row after tick 1, 6 after tick 2 >= 4. (The
        # pre-flight's one completion would fail: skipped, the server breaks mid-run.)
        exp = _experiment(tmp_path, srv.base_url, ticks=5, max_failures=4)
        code, out, err = _run(capsys, str(exp), "--out", str(run), "--no-preflight")
        assert code == 1
        assert "failed: " in out and "errors=6" in out
        assert "problems: agent_degraded 6" in out
        assert (
            "stopped: 6 model calls in a row failed (model.max_consecutive_failures=4); "
            "check the model server, then resume"
        ) in out
        assert f"resume with: agentsim run --resume {run}" in out
        # The progress line counted the degraded steps as they happened.
        assert "errors 3 (degraded steps / failed model calls 3)" in err
        manifest = _json(run / "manifest.json")
        assert manifest["status"] == "failed" and manifest["ticks_done"] == 2
        assert "model calls in a row failed" in manifest["reason"]
        assert (run / "checkpoints" / "tick-00000002").is_dir()
        metrics = _json(run / "metrics.json")
        assert metrics["degraded"] == metrics["problems"]["agent_degraded"] == 6
        assert metrics["model"]["errors"] == 6 and metrics["model_calls"] == 0
        last = json.loads((run / "events.jsonl").read_text("utf-8").splitlines()[-1])
        assert last["type"] == "run_end" and last["status"] == "failed"

        # The server recovers: the run resumes and completes, but 6 of its 15 steps
        # degraded, more than model.max_degraded_share (0.1): exit code 3.
        srv.fault_rate = 0.0
        code, out, err = _run(capsys, "--resume", str(run))
    assert code == 3
    assert out.startswith("completed with problems: ")
    assert (
        "error: 40% of the agent steps degraded (their model call failed after its retries), "
        "more than model.max_degraded_share=0.1"
    ) in err
    manifest = _json(run / "manifest.json")
    assert manifest["status"] == "completed with problems"
    assert manifest["problems"] == [
        "6 of 15 agent steps degraded (40%), more than model.max_degraded_share=0.1"
    ]
    assert manifest["reason"] is None  # the failure before the resume is mended
    assert _json(run / "metrics.json")["agent_steps"] == 15


def test_help_names_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--no-preflight" in text
    assert (
        "3 the run completed with problems: more than model.max_degraded_share of its steps "
        "degraded, or more than agent.max_error_share of its steps, "
        "agent.max_hook_failure_share of its hook calls or agent.max_script_failure_share"
    ) in text
    assert "stopped after model.max_consecutive_failures failed model calls in a row" in text


def test_no_preflight_skips_the_check_and_the_run_stops_on_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], refused_port: int
) -> None:
    exp = _experiment(tmp_path, f"http://127.0.0.1:{refused_port}/v1", ticks=4, max_failures=3)
    run = tmp_path / "run"
    code, out, _ = _run(capsys, str(exp), "--out", str(run), "--no-preflight")
    assert code == 1
    assert "stopped: 3 model calls in a row failed" in out
    manifest = json.loads((run / "manifest.json").read_text("utf-8"))
    assert manifest["status"] == "failed" and manifest["ticks_done"] == 1


@pytest.mark.slow
def test_ticks_lost_to_an_outage_are_redone_by_a_fork(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, fork = tmp_path / "run", tmp_path / "redone"
    with OpenAITestServer(models=["test-model"], faults=(Fault.status(500),)) as srv:
        exp = _experiment(tmp_path, srv.base_url, ticks=4)
        code, _, _ = _run(capsys, str(exp), "--out", str(run), "--ticks", "2")
        assert code == 0 and (run / "checkpoints" / "tick-00000002").is_dir()
        srv.fault_rate = 1.0  # the outage (after the pre-flight's check): ticks 2 and 3 degrade
        code, out, _ = _run(capsys, "--resume", str(run), "--no-preflight")
        assert code == 3 and out.startswith("completed with problems: ")
        assert _json(run / "manifest.json")["problems"] == [
            "6 of 12 agent steps degraded (50%), more than model.max_degraded_share=0.1"
        ]
        srv.fault_rate = 0.0  # the server is back: redo the ticks after the checkpoint
        code, out, _ = _run(capsys, "--fork", str(run), "--at", "2", "--out", str(fork))
    assert code == 0 and out.startswith(f"completed: {fork}")
    manifest = _json(fork / "manifest.json")
    assert manifest["status"] == "completed" and manifest["problems"] == []
    assert manifest["parent"]["tick"] == 2
    metrics = _json(fork / "metrics.json")
    assert metrics["agent_steps"] == 12 and metrics["degraded"] == 0
    types = [json.loads(x)["type"] for x in (fork / "events.jsonl").read_text().splitlines()]
    assert "agent_degraded" not in types
