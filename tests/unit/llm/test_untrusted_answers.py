"""A model server's numbers and sizes are not trusted: a server answering HTML to
everything fails the pre-flight (exit 2, nothing written); usage counts no request could
cost are a server problem (counted, never summed, never starving the ``tpm`` limiter,
never a negative cost); an answer over the size cap is refused as it arrives."""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main
from agentsim.errors import ModelResponseError
from agentsim.llm.base import Completion, Usage
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing import ChatRequest, scripted_answer
from agentsim.testing.openai_server import Fault, OpenAITestServer

_YAML = """
name: untrusted
seed: 2
clock: {{start: "2026-03-02T09:00:00", tick: 1h}}
ticks: 2
agents:
  - group: people
    count: 3
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: m
  base_url: {base_url}
  max_retries: 1
  timeout: 10
  tpm: 600000
  prices: {{prompt_per_1k: 0.5, completion_per_1k: 1.5}}
executor: {{step_timeout: 20}}
output: {{formats: [jsonl]}}
"""


def _experiment(tmp: Path, base_url: str) -> Path:
    exp = tmp / "exp.yaml"
    exp.write_text(_YAML.format(base_url=base_url), encoding="utf-8")
    return exp


class _HTMLHandler(http.server.BaseHTTPRequestHandler):
    """What a web server's catch-all page does: 200 and HTML to every path and method."""

    def _page(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b"<!doctype html><html><body>Welcome to nginx!</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _page

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def html_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HTMLHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_answering_html_to_everything_fails_the_preflight(
    html_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    exp = _experiment(tmp_path, html_server)
    out = tmp_path / "run"
    assert main(["run", str(exp), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        f"error: pre-flight: {html_server} answered a one-token chat request with HTTP 200 "
        "but not a chat completion ('<!doctype html><html><body>Welcome to nginx!</body>"
        "</html>'); check that base_url is an OpenAI-compatible API root (usually ending in "
        "/v1) (--no-preflight skips this check)"
    ]
    assert not out.exists()


def _with_usage(usage: Usage) -> Any:
    async def answer(request: ChatRequest) -> Completion:
        return dataclasses.replace(await scripted_answer(request), usage=usage)

    return answer


@pytest.mark.parametrize(
    "usage",
    [
        Usage(prompt_tokens=10**12, completion_tokens=10**12),
        Usage(prompt_tokens=-5_000, completion_tokens=-300),
        Usage(prompt_tokens=100, completion_tokens=10, cached_prompt_tokens=500),
    ],
    ids=["absurd", "negative", "cached-over-prompt"],
)
def test_usage_no_request_could_cost_is_a_counted_server_problem(
    usage: Usage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAITestServer(answer=_with_usage(usage)) as srv:
        exp = _experiment(tmp_path, srv.base_url)
        out = tmp_path / "run"
        assert main(["run", str(exp), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["status"] == "completed" and summary["metrics"]["errors"] == 0
    model = json.loads((out / "metrics.json").read_text("utf-8"))["model"]
    # Every answer's usage was refused: none summed, the cost none, all counted.
    assert model["calls"] >= 6 and model["usage_invalid"] == model["calls"]
    assert model["prompt_tokens"] == model["completion_tokens"] == 0
    assert model["cost"] == 0.0


async def test_a_negative_count_never_gives_tokens_back_to_the_limiter() -> None:
    limiter = RateLimiter(tpm=600_000, token_burst=1_000)  # 10,000 tokens a second
    async with limiter.acquire(800) as permit:
        permit.record_tokens(-(10**9))
    # The 800 booked tokens stay booked: the next 900 wait for 700 to refill (70 ms).
    start = time.monotonic()
    async with limiter.acquire(900):
        pass
    assert time.monotonic() - start >= 0.06


async def test_an_answer_over_the_size_cap_is_refused_as_it_arrives() -> None:
    huge = {"choices": [{"message": {"role": "assistant", "content": "x" * 200_000}}]}
    async with OpenAITestServer() as srv:
        srv.enqueue(Fault.reply(huge), Fault.reply(huge))
        model = OpenAIChatModel(
            model="m", base_url=srv.base_url, max_retries=3, backoff_base=0.001,
            max_response_bytes=100_000,
        )  # fmt: skip
        with pytest.raises(ModelResponseError) as info:
            await model.complete([{"role": "user", "content": "hi"}])
        await model.aclose()
    assert re.fullmatch(
        rf"model 'm' at {re.escape(srv.base_url)}: the answer is larger than 100,000 bytes "
        r"\(at least 200,\d{3}\); check that base_url points at an OpenAI-compatible API and "
        r"that the server's max_tokens is sane \(after 2 attempts\)",
        str(info.value),
    )
    # Refused after its size was known, retried once as any malformed answer is.
    assert srv.requests == 2 and model.stats.errors == 1
