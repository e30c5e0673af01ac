"""A whole run against a real OpenAI-compatible HTTP server on 127.0.0.1: recorded, then
replayed with no server at all; the key never reaches a file the runs write."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agentsim.inspect import open_run
from agentsim.sim.config import parse_experiment
from agentsim.sim.engine import Engine
from agentsim.testing.openai_server import OpenAITestServer

SECRET = "sk-test-4f9c0a1b2c3d4e5f6a7b8c9d"

_YAML = """
name: recorded
seed: 4
clock: {{start: "2026-03-02T09:00:00", tick: 30m}}
ticks: 3
agents:
  - group: people
    count: 6
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: test-model
  base_url: {base_url}
  api_key_env: AGENTSIM_TEST_RUN_KEY
  max_concurrency: 4
  max_retries: 2
  timeout: 10
  cache: {cache}
  cache_path: {cache_path}
environment:
  - {{module: social}}
output: {{dir: {out}, formats: [jsonl]}}
"""


def _config(tmp: Path, *, base_url: str, cache: str) -> Any:
    text = _YAML.format(
        base_url=base_url, cache=cache, cache_path=tmp / "cache.sqlite", out=tmp / "ws"
    )
    return parse_experiment(text, base_dir=tmp)


def _timeless(value: Any) -> Any:
    """A trace line without wall-clock timings (the only part that may differ)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in ("elapsed", "elapsed_ms")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _traces(run: Path) -> dict[str, list[Any]]:
    r = open_run(run)
    return {aid: [_timeless(t) for t in r.agent(aid).trace()] for aid in r.agents}


async def test_record_then_replay_gives_identical_traces_and_never_writes_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSIM_TEST_RUN_KEY", SECRET)
    async with OpenAITestServer() as srv:
        cfg = _config(tmp_path, base_url=srv.base_url, cache="record")
        recorded = await Engine(cfg, run_dir=tmp_path / "rec", stop=threading.Event()).run()
        served = len(srv.requests)
        auth = {r.headers.get("authorization") for r in srv.requests}
    assert recorded.status == "completed" and served > 0
    assert auth == {f"Bearer {SECRET}"}  # the key went to the server, and only there
    # The server is gone: replay must not need it.
    cfg = _config(tmp_path, base_url=srv.base_url, cache="replay")
    replayed = await Engine(cfg, run_dir=tmp_path / "rep", stop=threading.Event()).run()
    assert replayed.status == "completed"
    assert replayed.metrics["model_calls"] == recorded.metrics["model_calls"] == served
    _check_files(tmp_path)


def _check_files(tmp: Path) -> None:
    assert _traces(tmp / "rep") == _traces(tmp / "rec")
    rec_events = (tmp / "rec" / "events.jsonl").read_bytes()
    assert rec_events == (tmp / "rep" / "events.jsonl").read_bytes()
    assert b"echo: " in rec_events  # the agents acted on what the server answered
    written = [p for p in tmp.rglob("*") if p.is_file()]
    assert len(written) > 20
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
