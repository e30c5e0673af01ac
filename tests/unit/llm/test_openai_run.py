"""Whole runs against the OpenAI-compatible test server on 127.0.0.1: recorded then replayed
with no server at all, through a forward proxy given by HTTP_PROXY, and under retryable
faults; the key never reaches a file the runs write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agentsim.config.experiment import parse_experiment
from agentsim.inspect import open_run
from agentsim.llm.base import Completion, Usage
from agentsim.llm.openai import OpenAIChatModel
from agentsim.run.engine import Engine
from agentsim.testing import scripted_answer
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
  max_retries: 6
  timeout: 10
  cache: {cache}
  cache_path: {cache_path}
environment:
  - {{module: social}}
# The server answers with text and no tool call (`answered`, not `finished`).
agent: {{max_unfinished_share: 1}}
output: {{dir: {out}, formats: [jsonl]}}
"""


def _config(tmp: Path, *, base_url: str, cache: str = "off") -> Any:
    text = _YAML.format(
        base_url=base_url, cache=cache, cache_path=tmp / "cache.sqlite", out=tmp / "ws"
    )
    return parse_experiment(text, base_dir=tmp)


async def _run(tmp: Path, name: str, base_url: str, cache: str = "off") -> Any:
    cfg = _config(tmp, base_url=base_url, cache=cache)
    return await Engine(cfg, run_dir=tmp / name, stop=threading.Event()).run()


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


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSIM_TEST_RUN_KEY", SECRET)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


async def test_record_then_replay_gives_identical_traces_and_never_writes_the_key(
    tmp_path: Path,
) -> None:
    async with OpenAITestServer(api_key=SECRET) as srv:
        recorded = await _run(tmp_path, "rec", srv.base_url, cache="record")
        served = srv.served
        auth = {r.headers.get("authorization") for r in srv.recorded}
    assert recorded.status == "completed" and served > 0
    assert auth == {f"Bearer {SECRET}"}  # the key went to the server, and only there
    # The server is gone: replay must not need it.
    replayed = await _run(tmp_path, "rep", srv.base_url, cache="replay")
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


class ForwardProxy:
    """A plain HTTP forward proxy on 127.0.0.1 that knows host names nobody else does.

    Clients send it absolute-form requests (``POST http://model.invalid:PORT/v1/...``); it
    resolves the host from ``hosts`` only, forwards the request with ``Connection: close``
    and relays the answer. ``seen`` holds every request line.
    """

    def __init__(self, hosts: dict[str, str]) -> None:
        self.hosts = hosts
        self.seen: list[str] = []
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, version = line.split(" ")
            self.seen.append(line)
            headers = [h for h in header_lines if h and not h.lower().startswith("proxy-")]
            length = next(
                (int(h.split(":")[1]) for h in headers if h.lower().startswith("content-length")),
                0,
            )
            body = await reader.readexactly(length)
            scheme, _, rest = target.partition("://")
            hostport, _, path = rest.partition("/")
            host, _, port = hostport.partition(":")
            if scheme != "http" or host not in self.hosts:
                writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            up_reader, up_writer = await asyncio.open_connection(self.hosts[host], int(port))
            kept = [h for h in headers if not h.lower().startswith("connection")]
            request = [f"{method} /{path} {version}", *kept, "Connection: close", "", ""]
            up_writer.write("\r\n".join(request).encode("latin-1") + body)
            writer.write(await up_reader.read())  # until the server closes
            up_writer.close()
        finally:
            with contextlib.suppress(ConnectionError):
                await writer.drain()
            writer.close()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ForwardProxy]:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        async with server:
            yield self


async def test_a_run_goes_through_the_proxy_given_by_http_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = ForwardProxy({"model.invalid": "127.0.0.1"})
    async with OpenAITestServer(api_key=SECRET) as srv, proxy.running():
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        # Only the proxy knows this host: every answer must have come through it.
        base_url = f"http://model.invalid:{srv.port}/v1"
        result = await _run(tmp_path, "proxied", base_url)
    assert result.status == "completed" and srv.served > 0
    chat = [s for s in proxy.seen if s == f"POST {base_url}/chat/completions HTTP/1.1"]
    assert len(chat) == srv.served == result.metrics["model_calls"]
    assert b"echo: " in (tmp_path / "proxied" / "events.jsonl").read_bytes()


@pytest.mark.slow
async def test_retryable_faults_change_nothing_in_the_run(tmp_path: Path) -> None:
    async with OpenAITestServer(answer=scripted_answer) as clean:
        calm = await _run(tmp_path, "calm", clean.base_url)
    async with OpenAITestServer(answer=scripted_answer, fault_rate=0.25, seed=3) as faulty:
        rough = await _run(tmp_path, "rough", faulty.base_url)
    assert calm.status == rough.status == "completed"
    assert sum(faulty.faults_injected.values()) >= 5
    assert faulty.requests == faulty.served + sum(faulty.faults_injected.values())
    assert faulty.served == clean.served == calm.metrics["model_calls"]
    assert (tmp_path / "calm" / "events.jsonl").read_bytes() == (
        tmp_path / "rough" / "events.jsonl"
    ).read_bytes()
    assert _traces(tmp_path / "calm") == _traces(tmp_path / "rough")


@pytest.mark.parametrize("no_proxy", ["", "127.0.0.1"], ids=["proxied", "no-proxy"])
async def test_model_and_preflight_follow_http_proxy_and_no_proxy(
    monkeypatch: pytest.MonkeyPatch, no_proxy: str
) -> None:
    proxy = ForwardProxy({"model.invalid": "127.0.0.1", "127.0.0.1": "127.0.0.1"})
    async with OpenAITestServer(models=["m"]) as srv, proxy.running():
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("NO_PROXY", no_proxy)
        model = OpenAIChatModel(model="m", base_url=srv.base_url)
        await model.preflight()
        assert (await model.complete([{"role": "user", "content": "hi"}])).content == "echo: hi"
        await model.aclose()
    expected = [
        f"GET {srv.base_url}/models",
        f"POST {srv.base_url}/chat/completions",  # the pre-flight's one-token completion
        f"POST {srv.base_url}/chat/completions",
    ]
    assert [s.rsplit(" ", 1)[0] for s in proxy.seen] == ([] if no_proxy else expected)


def test_cached_prompt_tokens_reach_metrics_the_summary_inspect_and_the_viewer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentsim.cli import main
    from agentsim.testing import ChatRequest, echo_answer
    from agentsim.view._api import run_summary

    def answer(request: ChatRequest) -> Completion:
        usage = Usage(prompt_tokens=500, completion_tokens=5, cached_prompt_tokens=400)
        return Completion(content=echo_answer(request), usage=usage)

    with OpenAITestServer(answer=answer) as srv:
        text = _YAML.format(base_url=srv.base_url, cache="off", cache_path="c", out="o")
        prices = (
            "  prices: {prompt_per_1k: 1.0, completion_per_1k: 2.0, cached_prompt_per_1k: 0.1}\n"
        )
        exp = tmp_path / "exp.yaml"
        exp.write_text(text.replace("  cache: off\n", prices))
        assert main(["run", str(exp), "--out", str(tmp_path / "r")]) == 0
    run_dir = tmp_path / "r"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    calls = metrics["model_calls"]
    assert calls > 0
    assert (metrics["prompt_tokens"], metrics["cached_prompt_tokens"]) == (500 * calls, 400 * calls)
    assert metrics["model"]["cached_prompt_tokens"] == 400 * calls
    # 100 full-price prompt tokens, 400 cached at a tenth and 5 completion tokens a call.
    assert metrics["model"]["cost"] == pytest.approx(calls * (0.1 + 0.04 + 0.01))
    out = capsys.readouterr().out
    assert f"prompt-tokens={500 * calls} (cached {400 * calls})" in out
    assert main(["inspect", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert f"({500 * calls:,} prompt, {400 * calls:,} of them cached, + " in shown
    assert f"cost {calls * 0.15:.4f}" in shown
    view = run_summary(open_run(run_dir))
    assert view["labels"]["cached_prompt_tokens"] == "cached prompt tokens"
    assert sum(view["series"]["cached_prompt_tokens"]) == 400 * calls
