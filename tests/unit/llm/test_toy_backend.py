"""A new backend in under 60 lines: a toy wire format (not OpenAI's) served over HTTP on
127.0.0.1, registered in the backend table, named by an experiment and run by the engine,
with the retries, the limiter and the stats every backend gets."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path

import aiohttp
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentsim.config.experiment import ModelConfig, parse_experiment
from agentsim.errors import ConfigError, ModelHTTPError
from agentsim.llm.backends import Backend, Served, register_backend, unregister_backend
from agentsim.llm.base import Completion, Message, ToolSchema, Usage
from agentsim.llm.served import Answer, Retry, ServedModel, Transport
from agentsim.run.engine import Engine

# The imports the toy backend needs (counted with it below).
TOY_IMPORTS = (
    "import aiohttp",
    "from agentsim.config.experiment import ModelConfig, parse_experiment",
    "from agentsim.errors import ConfigError, ModelHTTPError",
    "from agentsim.llm.backends import Backend, Served, register_backend, unregister_backend",
    "from agentsim.llm.base import Completion, Message, ToolSchema, Usage",
    "from agentsim.llm.served import Answer, Retry, ServedModel, Transport",
)


# --- the toy backend: everything a new backend needs ------------------------------------


class ToyWire(Transport):
    """POST {"ask": last message, "seed": n} to {base_url}/ask; the answer is {"say": text,
    "tokens": [prompt, completion]}. 503 means busy (retried after its Retry-After)."""

    def __init__(self, base_url: str) -> None:
        self.server = base_url
        self.where = f"toy at {base_url}"
        self._session: aiohttp.ClientSession | None = None

    def encode(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, seed: int
    ) -> bytes:
        return json.dumps({"ask": str(messages[-1].get("content")), "seed": seed}).encode()

    async def send(self, body: bytes) -> Answer:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        async with self._session.post(f"{self.server}/ask", data=body) as r:
            status, wait, data = r.status, r.headers.get("Retry-After"), await r.read()
        if status != 200:
            error = ModelHTTPError(f"{self.where}: HTTP {status}")
            if status == 503:
                raise Retry(error, wait=float(wait or 0))
            raise error
        answer = json.loads(data)
        prompt, completion = answer["tokens"]
        usage = Usage(prompt_tokens=prompt, completion_tokens=completion)
        return Answer(Completion(content=answer["say"], usage=usage, model="toy"))

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def toy_server(cfg: ModelConfig, base_url: str, served: Served) -> ServedModel:
    return served.model(ToyWire(base_url))


TOY = Backend(server=toy_server)
# --- end of the toy backend -------------------------------------------------------------


def test_the_toy_backend_is_under_60_lines() -> None:
    text = Path(__file__).read_text("utf-8")
    start = text.index("# --- the toy backend")
    end = text.index("# --- end of the toy backend")
    code = [line for line in text[start:end].splitlines() if line.strip()]
    assert all(f"\n{line}\n" in text for line in TOY_IMPORTS)
    # With its blank lines and every import line it uses: well under 60.
    total = len(text[start:end].splitlines()) + len(TOY_IMPORTS)
    assert len(code) < total < 60, (len(code), total)


class ToyServer:
    """The toy wire format's server: every ``fail_every``-th request is answered 503 with
    ``Retry-After: 0``; ``max_in_flight`` is the most requests it held at once."""

    def __init__(self, *, fail_every: int, delay: float, together: int) -> None:
        self.fail_every, self.delay = fail_every, delay
        self.requests = self.failed = self.in_flight = self.max_in_flight = 0
        # The first answers wait until `together` are held at once (60 s at most): the count
        # reaches what the client lets through however a loaded machine spaces requests.
        self.together, self.all_in = together, asyncio.Event()
        self.app = Starlette(routes=[Route("/ask", self.ask, methods=["POST"])])

    async def ask(self, request: Request) -> Response:
        body = await request.json()
        self.requests += 1
        if self.requests % self.fail_every == 0:
            self.failed += 1
            return Response(status_code=503, headers={"Retry-After": "0"})
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.in_flight >= self.together:
                self.all_in.set()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(60):
                    await self.all_in.wait()
            self.all_in.set()
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return JSONResponse({"say": f"toy: {body['ask'][:40]}", "tokens": [7, 3]})


class _Embedded(uvicorn.Server):
    """uvicorn without its signal handlers (they belong to the test runner)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@pytest.fixture
async def toy() -> AsyncIterator[tuple[ToyServer, str]]:
    server = ToyServer(fail_every=4, delay=0.02, together=2)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(server.app, log_level="warning", access_log=False, lifespan="off")
    uv = _Embedded(config)
    task = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        if task.done():
            task.result()  # raises what stopped it
        await asyncio.sleep(0.005)
    register_backend("toy", TOY)
    try:
        yield server, f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        unregister_backend("toy")
        uv.should_exit = True
        await task


_YAML = """
name: toy
seed: 3
clock: {{start: "2026-03-02T09:00:00", tick: 30m}}
ticks: 2
agents:
  - group: people
    count: 8
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: toy
  model: toy-1
  base_url: {base_url}
  max_concurrency: 2
  max_retries: 3
# The server answers with text and no tool call (`answered`, not `finished`).
agent: {{max_unfinished_share: 1}}
output: {{dir: {out}, formats: [jsonl]}}
"""


async def test_a_run_on_the_toy_backend_retries_limits_and_counts(
    toy: tuple[ToyServer, str], tmp_path: Path
) -> None:
    server, base_url = toy
    cfg = parse_experiment(_YAML.format(base_url=base_url, out=tmp_path / "ws"), base_dir=tmp_path)
    run_dir = tmp_path / "run"
    summary = await Engine(cfg, run_dir=run_dir, stop=threading.Event(), preflight=True).run()
    assert summary.status == "completed"
    model = json.loads((run_dir / "metrics.json").read_text("utf-8"))["model"]
    # Every 4th request failed and was retried: no call was lost.
    assert server.failed > 0 and model["retries"] == server.failed and model["errors"] == 0
    assert model["calls"] == server.requests - server.failed >= 16  # 8 agents, 2 ticks
    assert model["prompt_tokens"] == 7 * model["calls"]
    assert model["completion_tokens"] == 3 * model["calls"]
    assert model["usage_missing"] == 0 and model["latency"]["count"] == model["calls"]
    # The limiter held the requests in flight to model.max_concurrency.
    assert server.max_in_flight == 2


def test_backend_names_agree_between_the_table_and_the_config() -> None:
    from agentsim.config._sections import BACKENDS as NAMES
    from agentsim.llm.backends import BACKENDS

    assert {name: b.serves for name, b in BACKENDS.items()} == NAMES
    assert NAMES == {"scripted": False, "openai": True}


async def test_an_unknown_backend_names_the_registered_ones(toy: tuple[ToyServer, str]) -> None:
    text = "name: x\nticks: 1\nagents: [{group: a, count: 1}]\nmodel: {backend: gpt}\n"
    with pytest.raises(
        ConfigError, match="'gpt' is not allowed; must be one of scripted, openai, toy"
    ):
        parse_experiment(text)
    text = text.replace("backend: gpt", "backend: toy")
    with pytest.raises(ConfigError, match="'model' is required when backend is toy"):
        parse_experiment(text)
