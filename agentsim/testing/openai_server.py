"""A small fault-injecting OpenAI-compatible server on 127.0.0.1 (Starlette + uvicorn).

For loopback tests of a model client and for benchmarks. It serves
``POST /v1/chat/completions`` (answers decided by a pluggable function, ``echo_answer`` by
default) and, when given a model list, ``GET /v1/models``. It can misbehave on purpose:

- a scripted sequence: ``srv.enqueue(Fault.status(429, retry_after=0.2), Fault.drop())``
  applies one fault to each of the next chat requests;
- at random: ``fault_rate=0.1`` with ``faults=(...)`` picks one of those faults for about
  10% of the chat requests, from a generator seeded by ``seed``.

Three ways to run it::

    async with OpenAITestServer(latency=0.01) as srv:   # in the running event loop
        model = OpenAIChatModel(model="m", base_url=srv.base_url)

    with OpenAITestServer() as srv:                      # in a thread of its own
        ...

    with spawn_test_server(latency=1.0) as srv:          # in a child process (benchmarks)
        srv.base_url, srv.stats()

or from a shell: ``python -m agentsim.testing.openai_server --port 8000 --latency 1.0
--fault-rate 0.1``. Counters (``requests``, ``served``, ``faults_injected``, ``max_in_flight``,
token sums) are there for assertions; ``GET /_stats`` returns them as JSON. With
``timeline=True`` (``--timeline``) the server also keeps when each chat request arrived and
was answered (``GET /_timeline``), from which a benchmark reads how many requests were in
flight over time. ``latency_sigma`` makes answer times vary as a real server's do: each
answer waits a lognormal time whose median is ``latency`` (``--latency-sigma 0.8``), drawn
from a generator seeded by ``seed``; 0 keeps one fixed latency.

With ``prefix_cache_tokens=N`` (``--prefix-cache-tokens N``) the server models an inference
server's prefix cache of N tokens (``agentsim.testing.prefix_cache``: 16-token blocks,
chained hashes, least recently used out): ``usage.prompt_tokens`` counts the rendered
prompt's tokens, ``usage.prompt_tokens_details.cached_tokens`` the cached ones, and
``prefill_seconds_per_token`` (``--prefill-ms-per-1k``) adds time for every uncached token,
so a run's wall time reflects its cache use.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import dataclasses
import inspect
import json
import logging
import math
import random
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentsim.llm.base import Completion, ToolSchema
from agentsim.testing._spawn import SpawnedServer, spawn_test_server
from agentsim.testing.faults import RETRYABLE_FAULTS, Fault
from agentsim.testing.function_model import AnswerFunction, ChatRequest, as_completion, echo_answer
from agentsim.testing.prefix_cache import PrefixCache

__all__ = [
    "RETRYABLE_FAULTS",
    "Fault",
    "OpenAITestServer",
    "RecordedRequest",
    "SpawnedServer",
    "spawn_test_server",
]

# What uvicorn logs as errors when this server does what it is asked: hang up on a
# Fault.drop, and cut short the answers still delayed when it is closed.
_INTENDED_LOGS = (
    "ASGI callable returned without completing response.",
    "timeout graceful shutdown exceeded",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request as the server saw it. Header names are lower-case; ``body`` is the
    parsed JSON, or None if it was not JSON."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: Any
    fault: Fault | None = None


@dataclass(slots=True)
class _Counters:
    requests: int = 0
    served: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    faults: collections.Counter[str] = field(default_factory=collections.Counter)


class OpenAITestServer:
    """An OpenAI-compatible server bound to 127.0.0.1 (``port=0`` picks a free port).

    ``latency`` delays every chat answer; with ``latency_sigma`` > 0 that is the median of
    a lognormal answer time (``next_latency()``). ``answer(request)`` decides the answers (see
    ``agentsim.testing.FunctionModel`` for what it may return). ``models`` lists the served
    models: ``GET /v1/models`` returns them and a chat request for another model gets 404;
    without it any model is accepted. ``list_models=False`` (or no ``models``) makes
    ``/v1/models`` a 404, as on servers that have no model list.
    ``api_key`` makes every request without ``Authorization: Bearer <api_key>`` a 401.
    ``record=False`` keeps no request bodies (benchmarks). ``timeline=True`` keeps
    ``(arrived, answered)`` of every chat request in ``timeline``, in ``time.monotonic()``
    seconds: on Linux that clock is shared by every process of the machine, so a benchmark
    in another process can line it up with its own. ``ssl_certfile`` and
    ``ssl_keyfile`` (PEM files) serve HTTPS instead of HTTP. ``prefix_cache_tokens`` and
    ``prefill_seconds_per_token``: the prefix-cache model of the module docstring.
    ``reasoning_field``: the message field that carries a completion's ``reasoning``
    (``reasoning_content``, as vLLM sends it, or ``reasoning``). Answers that write calls as
    text or carry reasoning come from wrapped answer functions (``agentsim.testing.answers``:
    ``calls_as_text``, ``with_reasoning``).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        latency: float = 0.0,
        latency_sigma: float = 0.0,
        answer: AnswerFunction = echo_answer,
        fault_rate: float = 0.0,
        faults: Sequence[Fault] = RETRYABLE_FAULTS,
        seed: int = 0,
        models: Sequence[str] | None = None,
        list_models: bool = True,
        api_key: str | None = None,
        record: bool = True,
        timeline: bool = False,
        ssl_certfile: str | None = None,
        ssl_keyfile: str | None = None,
        prefix_cache_tokens: int | None = None,
        prefill_seconds_per_token: float = 0.0,
        reasoning_field: str = "reasoning_content",
    ) -> None:
        if prefill_seconds_per_token < 0:
            raise ValueError(
                f"prefill_seconds_per_token={prefill_seconds_per_token!r} is negative; pass "
                "e.g. 2e-5 (20 ms per 1,000 uncached prompt tokens)"
            )
        # The prefix-cache model (None: no cache, usage as the answer function counts it).
        self.prefix_cache = (
            None if prefix_cache_tokens is None else PrefixCache(prefix_cache_tokens)
        )
        self.prefill_seconds_per_token = prefill_seconds_per_token
        self.reasoning_field = reasoning_field
        if not 0.0 <= fault_rate <= 1.0:
            raise ValueError(f"fault_rate={fault_rate!r} is outside [0, 1]; pass e.g. 0.1")
        if fault_rate and not faults:
            raise ValueError("fault_rate > 0 needs at least one fault to pick from (faults=...)")
        if latency < 0 or latency_sigma < 0:
            raise ValueError(
                f"latency={latency!r} and latency_sigma={latency_sigma!r} must be >= 0;"
                " pass e.g. latency=1.0, latency_sigma=0.8"
            )
        self.latency = latency
        self.latency_sigma = latency_sigma
        # Its own generator, so that varying answer times leave the choice of faults as it was.
        self._latency_rng = random.Random(f"latency:{seed}")
        self.answer = answer
        self.fault_rate = fault_rate
        self.faults = tuple(faults)
        self.models = tuple(models) if models is not None else None
        self.list_models = list_models
        self.api_key = api_key
        self.record = record
        self._tls = (ssl_certfile, ssl_keyfile)
        self.recorded: list[RecordedRequest] = []
        self.keep_timeline = timeline
        self.timeline: list[tuple[float, float]] = []
        self._rng = random.Random(seed)
        self._queue: collections.deque[Fault] = collections.deque()
        self._c = _Counters()
        self._port = port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
                Route("/_stats", self._stats, methods=["GET"]),
                Route("/_timeline", self._timeline, methods=["GET"]),
            ]
        )

    # -- counters ------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        """What to pass as ``base_url`` to an OpenAI-compatible client."""
        scheme = "https" if self._tls[0] else "http"
        return f"{scheme}://127.0.0.1:{self._port}/v1"

    @property
    def requests(self) -> int:
        """Chat requests received (faulted ones included)."""
        return self._c.requests

    def chat_bodies(self) -> list[Any]:
        """The JSON bodies of the chat requests received so far, in order (``record``
        must be on): what a test reads to check what a client sent."""
        return [r.body for r in list(self.recorded) if r.path.endswith("/chat/completions")]

    @property
    def served(self) -> int:
        """Chat requests answered with a completion."""
        return self._c.served

    @property
    def faults_injected(self) -> dict[str, int]:
        """Faults applied so far, by label (``{"429": 2, "drop": 1}``)."""
        return dict(self._c.faults)

    @property
    def in_flight(self) -> int:
        return self._c.in_flight

    @property
    def max_in_flight(self) -> int:
        """The most chat requests the server was handling at once."""
        return self._c.max_in_flight

    @property
    def prompt_tokens(self) -> int:
        """Sum of the ``prompt_tokens`` reported in the completions served."""
        return self._c.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self._c.completion_tokens

    def stats(self) -> dict[str, Any]:
        """Every counter, as ``GET /_stats`` returns it."""
        c = self._c
        return {
            "requests": c.requests,
            "served": c.served,
            "faults": dict(c.faults),
            "max_in_flight": c.max_in_flight,
            "prompt_tokens": c.prompt_tokens,
            "completion_tokens": c.completion_tokens,
            "cached_tokens": c.cached_tokens,
        }

    def next_latency(self) -> float:
        """The answer time of the next chat request, in seconds: ``latency``, or with
        ``latency_sigma`` a lognormal draw of median ``latency`` (the same sequence for a seed)."""
        if not self.latency_sigma:
            return self.latency
        return self.latency * math.exp(self._latency_rng.gauss(0.0, self.latency_sigma))

    def enqueue(self, *faults: Fault) -> None:
        """Apply these faults, in order, to the next chat requests (one each)."""
        self._queue.extend(faults)

    @property
    def pending_faults(self) -> int:
        return len(self._queue)

    # -- handlers ------------------------------------------------------------------------

    async def _chat(self, request: Request) -> Response:
        c = self._c
        c.requests += 1
        c.in_flight += 1
        c.max_in_flight = max(c.max_in_flight, c.in_flight)
        arrived = time.monotonic()
        try:
            return await self._answer_chat(request)
        finally:
            c.in_flight -= 1
            if self.keep_timeline:
                self.timeline.append((arrived, time.monotonic()))

    async def _answer_chat(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        refused = self._refuse(request) or self._invalid(body)
        fault = None if refused else self._next_fault()
        if self.record:
            headers = {k.lower(): v for k, v in request.headers.items()}
            path = request.url.path
            self.recorded.append(
                RecordedRequest(method="POST", path=path, headers=headers, body=body, fault=fault)
            )
        if refused is not None:
            return refused
        model = str(body.get("model", ""))
        if fault is not None:
            self._c.faults[fault.label] += 1
        cache = self.prefix_cache
        answered = fault is None or fault.kind in ("no_usage", "delay")
        tokens = cached = 0
        if cache is not None and answered:
            tokens, cached = cache.serve_chat(body["messages"], body.get("tools") or ())
        prefill = (tokens - cached) * self.prefill_seconds_per_token
        delay = self.next_latency() + prefill + (fault.seconds if fault is not None else 0.0)
        await asyncio.sleep(delay)
        if fault is not None and fault.kind == "status":
            extra = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            text = fault.message or f"injected status {fault.status_code}"
            return _error(fault.status_code, text, headers=extra)
        if fault is not None and fault.kind == "drop":
            return _Dropped()
        if fault is not None and fault.kind == "malformed":
            return Response(b"<html>upstream error</html>", media_type="application/json")
        if fault is not None and fault.kind == "reply":
            return JSONResponse(fault.body)
        chat = ChatRequest(
            messages=tuple(body["messages"]),
            tools=tuple(_tools(body.get("tools"))),
            seed=int(body.get("seed") or 0),
            model=model,
            response_format=_mapping_or_none(body.get("response_format")),
        )
        reply = self.answer(chat)
        if inspect.isawaitable(reply):
            reply = await reply
        completion = as_completion(reply, chat, model=model)
        if cache is not None:
            usage = dataclasses.replace(completion.usage, prompt_tokens=tokens)
            completion = dataclasses.replace(completion, usage=usage)
            self._c.cached_tokens += cached
        self._c.served += 1
        self._c.prompt_tokens += completion.usage.prompt_tokens
        self._c.completion_tokens += completion.usage.completion_tokens
        with_usage = fault is None or fault.kind != "no_usage"
        reply_body = _completion_json(
            completion, self._c.served, with_usage=with_usage, reasoning=self.reasoning_field
        )
        if cache is not None and with_usage:
            reply_body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
        return JSONResponse(reply_body)

    async def _models(self, request: Request) -> Response:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        if self.models is None or not self.list_models:
            return _error(404, "this server has no model list; POST /v1/chat/completions")
        data = [{"id": m, "object": "model", "owned_by": "agentsim"} for m in self.models]
        return JSONResponse({"object": "list", "data": data})

    async def _stats(self, request: Request) -> Response:
        return JSONResponse(self.stats())

    async def _timeline(self, request: Request) -> Response:
        if not self.keep_timeline:
            return _error(
                404, "this server keeps no timeline; start it with timeline=True (--timeline)"
            )
        return JSONResponse({"timeline": self.timeline})

    def _refuse(self, request: Request) -> Response | None:
        if self.api_key is None:
            return None
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "Incorrect API key provided", code="invalid_api_key")
        return None

    def _invalid(self, body: Any) -> Response | None:
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "the body must be a JSON object with a 'messages' list")
        model = str(body.get("model", ""))
        if self.models is not None and model not in self.models:
            return _error(404, f"The model '{model}' does not exist", code="model_not_found")
        return None

    def _next_fault(self) -> Fault | None:
        if self._queue:
            return self._queue.popleft()
        if self.fault_rate and self._rng.random() < self.fault_rate:
            return self._rng.choice(self.faults)
        return None

    # -- running -------------------------------------------------------------------------

    def _uvicorn(self, *, handle_signals: bool) -> uvicorn.Server:
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            # Many agents keep many connections open between ticks.
            backlog=4096,
            timeout_keep_alive=60,
            # Closing does not wait for answers still delayed (latency, Fault.delay).
            timeout_graceful_shutdown=1,
            ssl_certfile=self._tls[0],
            ssl_keyfile=self._tls[1],
        )
        return uvicorn.Server(config) if handle_signals else _EmbeddedServer(config)

    async def start(self, *, handle_signals: bool = False) -> None:
        """Serve in the running event loop until ``close()``. A port in use is an
        ``OSError`` here, not a log line. ``handle_signals``: stop on SIGINT / SIGTERM
        (for the command line)."""
        _silence_intended_errors()
        # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY only on sockets whose
        # protocol says TCP, and without it every answer waits ~40 ms for a delayed ACK.
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        # A server restarted on its port at once must not wait for the last one's closed
        # connections (TIME_WAIT) to expire. (Two live servers on one port are still refused.)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", self._port))
        except OSError:
            sock.close()
            raise
        self._port = int(sock.getsockname()[1])
        self._server = server = self._uvicorn(handle_signals=handle_signals)
        self._task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the test server stopped before it started")
            await asyncio.sleep(0.005)

    def request_stop(self) -> None:
        """Ask the server to stop (from its own loop's thread)."""
        if self._server is not None:
            self._server.should_exit = True

    async def wait_stopped(self) -> None:
        """Wait until the server has stopped (``request_stop``, or a signal it handles)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def close(self) -> None:
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        await task

    async def __aenter__(self) -> OpenAITestServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __enter__(self) -> OpenAITestServer:
        """Serve from a thread with its own event loop (for synchronous tests)."""
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            async def main() -> None:
                try:
                    await self.start()
                except BaseException as exc:
                    failure.append(exc)
                    raise
                finally:
                    started.set()
                assert self._task is not None
                await self._task

            with contextlib.suppress(BaseException):
                asyncio.run(main())

        self._thread = threading.Thread(target=run, name="openai-test-server", daemon=True)
        self._thread.start()
        started.wait(30)
        if failure:
            raise failure[0]
        if self._server is None or not self._server.started:
            raise RuntimeError("the test server did not start within 30 s")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its signal handlers: embedded in a test's event loop, Ctrl-C and
    SIGTERM belong to the test runner (uvicorn would swap the handlers in one test and
    put them back in another)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class _Dropped(Response):
    """Send the status line and headers of a 200, then hang up before the body."""

    def __init__(self) -> None:
        super().__init__(status_code=200, media_type="application/json")
        self.headers["content-length"] = "100"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        # Returning now, with the body promised, makes uvicorn close the connection.


def _silence_intended_errors() -> None:
    log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _IntendedErrors) for f in log.filters):
        log.addFilter(_IntendedErrors())


class _IntendedErrors(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in _INTENDED_LOGS)


def _tools(raw: Any) -> list[ToolSchema]:
    return [t for t in raw if isinstance(t, Mapping)] if isinstance(raw, list) else []


def _error(
    status: int, message: str, *, code: str | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    error = {"message": message, "type": "invalid_request_error", "code": code}
    return JSONResponse({"error": error}, status_code=status, headers=dict(headers or {}))


def _completion_json(
    completion: Completion, number: int, *, with_usage: bool, reasoning: str
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.content}
    if completion.reasoning is not None:
        message[reasoning] = completion.reasoning
    if completion.tool_calls:
        message["tool_calls"] = [tc.to_message_part() for tc in completion.tool_calls]
    body: dict[str, Any] = {
        "id": f"chatcmpl-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": completion.model,
        "choices": [{"index": 0, "message": message, "finish_reason": completion.finish_reason}],
    }
    if with_usage:
        usage = completion.usage
        body["usage"] = {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        }
        if usage.cached_prompt_tokens:  # an answer function's Completion may carry them
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": usage.cached_prompt_tokens}
    return body


# -- command line ----------------------------------------------------------------------------

_FAULTS_BY_NAME = {
    "429": Fault.status(429, retry_after=0.05, message="rate limited"),
    "500": Fault.status(500, message="internal error"),
    "503": Fault.status(503, message="overloaded"),
    "drop": Fault.drop(),
    "malformed": Fault.malformed(),
    "no-usage": Fault.no_usage(),
}


def _mapping_or_none(value: Any) -> Mapping[str, Any] | None:
    return value if isinstance(value, Mapping) else None


def _answers() -> dict[str, AnswerFunction]:
    from agentsim.testing.answers import scripted_answer

    return {"echo": echo_answer, "scripted": scripted_answer}


def _parse_faults(text: str) -> list[Fault]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(_FAULTS_BY_NAME))
    if unknown:
        raise SystemExit(
            f"unknown fault(s) {', '.join(unknown)}; choose from {', '.join(_FAULTS_BY_NAME)}"
        )
    return [_FAULTS_BY_NAME[n] for n in names]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m agentsim.testing.openai_server",
        description="Serve a fake, fault-injecting OpenAI chat-completions API on 127.0.0.1.",
    )
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer (median)")
    parser.add_argument(
        "--latency-sigma", type=float, default=0.0, help="lognormal sigma of answer times (0 fixed)"
    )
    parser.add_argument("--fault-rate", type=float, default=0.0, help="share of faulty answers")
    parser.add_argument(
        "--faults", default="429,500,503,drop", help=f"comma list of: {', '.join(_FAULTS_BY_NAME)}"
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds faults and answer times")
    parser.add_argument("--answer", choices=("echo", "scripted"), default="echo")
    parser.add_argument("--models", default="", help="comma list of served models (default any)")
    parser.add_argument(
        "--timeline", action="store_true", help="keep request times for GET /_timeline"
    )
    parser.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=None,
        help="model a prefix cache of this many tokens (reports usage cached_tokens)",
    )
    parser.add_argument(
        "--prefill-ms-per-1k",
        type=float,
        default=0.0,
        help="milliseconds per 1,000 uncached prompt tokens (with --prefix-cache-tokens)",
    )
    parser.add_argument(
        "--stop-on-stdin-eof",
        action="store_true",
        help="exit when stdin closes (so a parent that dies never leaves the server behind)",
    )
    args = parser.parse_args(argv)
    server = OpenAITestServer(
        port=args.port,
        latency=args.latency,
        latency_sigma=args.latency_sigma,
        answer=_answers()[args.answer],
        fault_rate=args.fault_rate,
        faults=_parse_faults(args.faults),
        seed=args.seed,
        models=[m for m in args.models.split(",") if m] or None,
        record=False,
        timeline=args.timeline,
        prefix_cache_tokens=args.prefix_cache_tokens,
        prefill_seconds_per_token=args.prefill_ms_per_1k / 1e6,
    )
    asyncio.run(_serve(server, stop_on_eof=args.stop_on_stdin_eof))


async def _serve(server: OpenAITestServer, *, stop_on_eof: bool) -> None:
    await server.start(handle_signals=True)  # SIGINT / SIGTERM stop it
    print(json.dumps({"base_url": server.base_url, "port": server.port}), flush=True)
    if stop_on_eof:
        loop = asyncio.get_running_loop()

        def watch_stdin() -> None:
            sys.stdin.read()
            loop.call_soon_threadsafe(server.request_stop)

        threading.Thread(target=watch_stdin, daemon=True).start()
    await server.wait_stopped()
    await server.close()


if __name__ == "__main__":
    main()
