"""Several servers for one model (``base_urls``): requests spread over the servers with the
fewest in flight; a server stopped mid-run is taken out and its requests go to the other, no
step lost, the failures counted per server; pre-flight names the server that fails."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agentsim.config.experiment import parse_experiment
from agentsim.errors import ConfigError, ModelError, ModelHTTPError, PreflightError
from agentsim.llm.openai import OpenAIChatModel
from agentsim.llm.pool import ServerPool
from agentsim.run.engine import Engine, Progress
from agentsim.testing import scripted_answer
from agentsim.testing.openai_server import OpenAITestServer
from tests.unit.helpers import refused_ports

_YAML = """
name: two-servers
seed: 3
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: 4
agents:
  - group: people
    count: 6
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: served-model
  base_urls: [{urls}]
  max_concurrency: 8
  max_retries: 2
  timeout: 10
  server_backoff: 30
output: {{formats: [jsonl]}}
"""


def _config(*urls: str) -> object:
    return parse_experiment(_YAML.format(urls=", ".join(f'"{u}"' for u in urls)))


def _server() -> OpenAITestServer:
    return OpenAITestServer(models=["served-model"], answer=scripted_answer, latency=0.02)


@pytest.mark.slow
def test_requests_spread_over_both_servers(tmp_path: Path) -> None:
    with _server() as a, _server() as b:
        cfg = _config(a.base_url, b.base_url)
        summary = asyncio.run(Engine(cfg, run_dir=tmp_path / "run", preflight=True).run())  # type: ignore[arg-type]
        assert summary.status == "completed"
        model = json.loads((tmp_path / "run" / "metrics.json").read_text())["model"]
        servers = model["servers"]
        # Each server also answered the pre-flight's one-token completion.
        assert servers[a.base_url]["calls"] == a.served - 1 > 0
        assert servers[b.base_url]["calls"] == b.served - 1 > 0
        assert model["calls"] == a.served + b.served - 2
        assert servers[a.base_url]["latency"]["p50"] >= 0.02


@pytest.mark.slow
def test_a_server_stopped_mid_run_loses_no_step(tmp_path: Path) -> None:
    with _server() as a:
        b = _server().__enter__()
        try:

            def stop_b(p: Progress) -> None:
                if p.tick == 1:
                    b.__exit__(None, None, None)

            cfg = _config(a.base_url, b.base_url)
            engine = Engine(cfg, run_dir=tmp_path / "run", progress=stop_b)  # type: ignore[arg-type]
            summary = asyncio.run(engine.run())
        finally:
            b.__exit__(None, None, None)
        served_b = b.served
    assert summary.status == "completed"
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["agent_steps"] == 6 * 4
    assert metrics["degraded"] == 0  # every step got its answers, from a
    model = metrics["model"]
    assert model["errors"] == 0
    failed_b = model["servers"][b.base_url]["errors"]
    assert failed_b >= 1  # the attempts the stopped server failed, counted
    assert model["retries"] == failed_b  # each went on to the other server
    assert model["servers"][b.base_url]["calls"] == served_b
    assert model["calls"] == a.served + served_b


def test_preflight_names_the_server_that_fails(tmp_path: Path) -> None:
    with _server() as a, OpenAITestServer(models=["other-model"]) as b:
        engine = Engine(_config(a.base_url, b.base_url), run_dir=tmp_path / "run", preflight=True)  # type: ignore[arg-type]
        with pytest.raises(PreflightError) as info:
            asyncio.run(engine.run())
    assert str(info.value).startswith(f"server 2 of 2 ({b.base_url}): pre-flight: the server")
    assert "does not serve model 'served-model'" in str(info.value)
    assert not (tmp_path / "run").exists()


def test_an_error_no_server_would_answer_differently_is_not_retried() -> None:
    async def main() -> tuple[int, int, int]:
        async with (
            OpenAITestServer(api_key="sk-right") as a,
            OpenAITestServer(api_key="sk-right") as b,
        ):
            pool = ServerPool(
                [OpenAIChatModel(model="m", base_url=s.base_url, max_retries=0) for s in (a, b)],
                max_retries=3,
            )
            with pytest.raises(ModelHTTPError, match="HTTP 401") as info:
                await pool.complete([{"role": "user", "content": "hi"}])
            await pool.aclose()
            return info.value.attempts, a.requests + b.requests, pool.stats.retries

    assert asyncio.run(main()) == (1, 1, 0)


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        pytest.param('[]\n  base_url: "http://127.0.0.1:1/v1"', "give base_url or", id="both"),
        pytest.param("[]", "'base_urls' must not be empty", id="empty"),
    ],
)
def test_bad_base_urls_fail_at_load(servers: str, message: str) -> None:
    text = _YAML.format(urls="").replace("base_urls: []", f"base_urls: {servers}")
    with pytest.raises(ConfigError) as info:
        parse_experiment(text)
    assert info.value.field == "model.base_urls"
    assert message in str(info.value)


def test_with_every_server_out_a_request_waits_for_one_then_fails_after_its_attempts() -> None:
    async def main(ports: list[int]) -> ServerPool:
        servers = [
            OpenAIChatModel(model="m", base_url=f"http://127.0.0.1:{p}/v1", max_retries=0)
            for p in ports
        ]
        pool = ServerPool(servers, max_retries=2, backoff_base=0.01, backoff_max=0.05)
        with pytest.raises(ModelError, match="connection failed") as info:
            await pool.complete([{"role": "user", "content": "hi"}])
        assert info.value.attempts == 4  # max_retries + one per server
        await pool.aclose()
        return pool

    with refused_ports(2) as ports:  # nothing listens: every attempt is refused
        pool = asyncio.run(main(ports))
    assert pool.stats.retries == 3 and pool.stats.errors == 1
    assert sum(s.errors for s in pool.stats.servers.values()) == 4
    assert repr(pool) == f"ServerPool(base_urls={list(pool.base_urls)!r})"
