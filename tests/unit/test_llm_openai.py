"""OpenAIChatModel against a real HTTP server on 127.0.0.1 (agentsim.testing.openai_server)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import email.utils
import io
import json
import logging
import pickle
import random
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentsim.errors import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
)
from agentsim.llm.base import ChatModel, Usage
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.openai import OpenAIChatModel, parse_completion
from agentsim.llm.stats import ModelStats, Prices
from agentsim.testing.openai_server import (
    Fault,
    OpenAITestServer,
    main,
    spawn_test_server,
    usage_for,
)

KEY = "sk-test-SECRET-0123456789abcdef"
USER = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}},
}


@pytest.fixture
async def srv() -> AsyncIterator[OpenAITestServer]:
    async with OpenAITestServer() as server:
        yield server


def make(srv: OpenAITestServer, **kw: Any) -> OpenAIChatModel:
    opts: dict[str, Any] = {"backoff_base": 0.001, "backoff_max": 0.5, "rng_seed": 7}
    opts.update(kw)
    return OpenAIChatModel(model="test-model", base_url=srv.base_url, **opts)


async def test_request_body_headers_and_parsed_answer(
    srv: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSIM_TEST_KEY", KEY)
    model = make(
        srv,
        api_key_env="AGENTSIM_TEST_KEY",
        temperature=0.3,
        max_tokens=64,
        extra_params={"top_p": 0.9},
    )
    assert isinstance(model, ChatModel)
    c = await model.complete(USER, [TOOL], seed=11)
    await model.aclose()
    assert c.content == "echo: hello"
    assert c.model == "test-model"
    assert c.finish_reason == "stop"
    assert c.usage == Usage(
        **dict(
            zip(("prompt_tokens", "completion_tokens"), usage_for(USER, "echo: hello"), strict=True)
        )
    )
    (req,) = srv.requests
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body == {
        "model": "test-model",
        "messages": USER,
        "seed": 11,
        "tools": [TOOL],
        "tool_choice": "auto",
        "temperature": 0.3,
        "max_tokens": 64,
        "top_p": 0.9,
    }


async def test_no_key_variable_sends_no_authorization_and_no_tools_key(
    srv: OpenAITestServer,
) -> None:
    model = make(srv)
    await model.complete(USER)
    await model.aclose()
    (req,) = srv.requests
    assert "authorization" not in req.headers
    assert "tools" not in req.body and "tool_choice" not in req.body
    assert req.body["seed"] == 0


def test_missing_key_variable_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSIM_NO_SUCH_KEY", raising=False)
    with pytest.raises(ModelError, match=r"'AGENTSIM_NO_SUCH_KEY' is not set.*export"):
        OpenAIChatModel(
            model="m", base_url="http://127.0.0.1:1/v1", api_key_env="AGENTSIM_NO_SUCH_KEY"
        )


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        (
            {"base_url": "ftp://127.0.0.1/v1"},
            r"base_url: 'ftp://127.0.0.1/v1' is not an http\(s\) URL",
        ),
        ({"base_url": "127.0.0.1:8000"}, r"not an http\(s\) URL; use the API root"),
        ({"model": ""}, r"model: the model name is empty"),
        ({"timeout": 0}, r"timeout: must be > 0"),
        ({"max_retries": -1}, r"max_retries: must be >= 0"),
        ({"backoff_base": -1.0}, r"backoff must be >= 0"),
        ({"extra_params": {"seed": 3, "top_p": 1}}, r"extra_params: sets seed, which the model"),
        ({"temperature": 0.5, "extra_params": {"temperature": 1}}, r"sets temperature"),
    ],
    ids=["scheme", "no-scheme", "empty-model", "timeout", "retries", "backoff", "reserved", "dup"],
)
def test_bad_options_are_rejected(kw: dict[str, Any], match: str) -> None:
    opts: dict[str, Any] = {"model": "m", "base_url": "http://127.0.0.1:8000/v1"}
    opts.update(kw)
    with pytest.raises(ConfigError, match=match):
        OpenAIChatModel(**opts)


async def test_429_honours_retry_after_seconds(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.status(429, retry_after=0.2))
    model = make(srv)
    c = await model.complete(USER)
    await model.aclose()
    assert c.content == "echo: hello"
    first, second = srv.arrivals
    assert second - first >= 0.19
    assert model.stats.retries == 1 and model.stats.calls == 1 and model.stats.errors == 0


@pytest.mark.parametrize(
    "when",
    [
        email.utils.formatdate(time.time() - 60, usegmt=True),
        email.utils.formatdate(time.time() - 60).replace("+0000", "-0000"),
    ],
    ids=["gmt", "naive"],
)
async def test_retry_after_http_date_is_honoured(srv: OpenAITestServer, when: str) -> None:
    # A date in the past means "retry now"; ignoring it would mean the seeded jitter draw,
    # which is over 4 s with backoff_base = 5 and rng_seed = 2.
    assert random.Random(2).uniform(0, 5.0) > 4.0
    srv.enqueue(Fault.status(503, retry_after=when))
    model = make(srv, backoff_base=5.0, backoff_max=5.0, rng_seed=2)
    await model.complete(USER)
    await model.aclose()
    first, second = srv.arrivals
    assert second - first < 1.0


async def test_unreadable_retry_after_falls_back_to_backoff(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.status(429, retry_after="soon"), Fault.status(429, retry_after="-3"))
    model = make(srv)
    await model.complete(USER)
    await model.aclose()
    assert len(srv.arrivals) == 3 and srv.arrivals[-1] - srv.arrivals[0] < 0.5


@pytest.mark.parametrize("fault", [Fault.status(500), Fault.status(502), Fault.drop()], ids=str)
async def test_transient_failures_are_retried(srv: OpenAITestServer, fault: Fault) -> None:
    srv.enqueue(fault, fault)
    model = make(srv)
    assert (await model.complete(USER)).content == "echo: hello"
    await model.aclose()
    assert len(srv.arrivals) == 3
    assert model.stats.retries == 2


async def test_backoff_grows_exponentially_with_full_jitter(srv: OpenAITestServer) -> None:
    srv.enqueue(*[Fault.status(500)] * 4)
    model = make(srv, backoff_base=0.05, backoff_max=10.0, rng_seed=3)
    await model.complete(USER)
    await model.aclose()
    gaps = [b - a for a, b in zip(srv.arrivals, srv.arrivals[1:], strict=False)]
    # Full jitter: gap i is uniform(0, 0.05 * 2**i); the seeded draws give these bounds.
    rng = random.Random(3)
    expected = [rng.uniform(0, 0.05 * 2**i) for i in range(4)]
    for gap, want in zip(gaps, expected, strict=True):
        assert want - 0.005 <= gap <= want + 0.15


async def test_retries_exhausted_raise_with_attempts(srv: OpenAITestServer) -> None:
    srv.enqueue(*[Fault.status(503, message="overloaded")] * 3)
    model = make(srv, max_retries=2)
    with pytest.raises(ModelHTTPError, match=r"HTTP 503 .*overloaded.*\(after 3 attempts\)") as ei:
        await model.complete(USER)
    await model.aclose()
    assert ei.value.attempts == 3
    assert model.stats.errors == 1 and model.stats.retries == 2 and model.stats.calls == 0


async def test_dropped_connections_exhausted_raise_model_error(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.drop(), Fault.drop())
    model = make(srv, max_retries=1)
    with pytest.raises(ModelError, match=r"connection failed .*after 2 attempts") as ei:
        await model.complete(USER)
    await model.aclose()
    assert type(ei.value) is ModelError and ei.value.attempts == 2


async def test_slow_answer_times_out_and_is_retried(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.delay(2.0))
    model = make(srv, timeout=0.2)
    assert (await model.complete(USER)).content == "echo: hello"
    await model.aclose()
    assert model.stats.retries == 1


async def test_timeouts_exhausted_raise_model_timeout_error(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.delay(2.0), Fault.delay(2.0))
    model = make(srv, timeout=0.1, max_retries=1)
    with pytest.raises(ModelTimeoutError, match=r"no answer within 0.1 s.*after 2 attempts"):
        await model.complete(USER)
    await model.aclose()


async def test_connection_refused_is_retried_then_reported() -> None:
    model = OpenAIChatModel(
        model="m", base_url="http://127.0.0.1:9/v1", max_retries=1, backoff_base=0.001
    )
    with pytest.raises(ModelError, match=r"at http://127.0.0.1:9/v1: connection failed"):
        await model.complete(USER)
    await model.aclose()
    assert model.stats.retries == 1 and model.stats.errors == 1


@pytest.mark.parametrize(
    ("code", "match"),
    [
        (400, r"HTTP 400 Bad Request: bad tools; check the request parameters"),
        (401, r"HTTP 401 Unauthorized: bad tools; check the API key variable"),
        (404, r"HTTP 404 Not Found: bad tools; check base_url"),
        (501, r"HTTP 501 Not Implemented: bad tools; the server failed"),
    ],
    ids=["400", "401", "404", "501"],
)
async def test_non_retryable_status_fails_at_once(
    srv: OpenAITestServer, code: int, match: str
) -> None:
    srv.enqueue(Fault.status(code, message="bad tools"))
    model = make(srv)
    with pytest.raises(ModelHTTPError, match=match) as ei:
        await model.complete(USER)
    await model.aclose()
    assert ei.value.attempts == 1 and len(srv.arrivals) == 1


async def test_wrong_base_url_gives_404_with_fix(srv: OpenAITestServer) -> None:
    model = OpenAIChatModel(model="m", base_url=f"http://127.0.0.1:{srv.port}/")
    with pytest.raises(ModelHTTPError, match=r"HTTP 404 .*no route POST /chat/completions"):
        await model.complete(USER)
    await model.aclose()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (["x"], r"a JSON list, not an object"),
        ({"choices": []}, r"no 'choices'"),
        ({"choices": [{"index": 0}]}, r"choices\[0\] has no 'message'"),
        ({"choices": [{"message": {"content": 3}}]}, r"content is a int"),
        ({"choices": [{"message": {"tool_calls": {}}}]}, r"tool_calls is not a list"),
        ({"choices": [{"message": {"tool_calls": [{"id": "a"}]}}]}, r"tool_calls\[0\] has no"),
        (
            {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": "many"}},
            r"non-integer token counts",
        ),
    ],
    ids=["list", "no-choices", "no-message", "content-int", "calls-dict", "no-fn", "usage"],
)
async def test_answer_that_is_not_a_completion(
    srv: OpenAITestServer, body: Any, match: str
) -> None:
    srv.enqueue(Fault.reply(body))
    model = make(srv)
    with pytest.raises(ModelResponseError, match=match):
        await model.complete(USER)
    await model.aclose()
    assert model.stats.errors == 1 and len(srv.arrivals) == 1


@contextlib.asynccontextmanager
async def raw_http_server(answers: list[bytes]) -> AsyncIterator[str]:
    """A bare TCP server sending ``answers`` (raw HTTP bytes) to successive requests."""
    pending = list(answers)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        writer.write(pending.pop(0))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        await server.wait_closed()


def http(status: str, body: bytes, *, length: int | None = None) -> bytes:
    size = len(body) if length is None else length
    head = f"HTTP/1.1 {status}\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize(
    ("answer", "error", "match"),
    [
        (http("200 OK", b"<html>proxy login</html>"), ModelResponseError, r"not JSON \('<html>"),
        (http("200 OK", b'{"choices": []} {}'), ModelResponseError, r"not JSON \('\{\"choices"),
        (http("200 OK", b'{"choices": ['), ModelResponseError, r"not JSON \('\{\"choices"),
        (http("200 OK", b'{"choices": x}'), ModelResponseError, r"not JSON \('\{\"choices"),
        (http("400 Bad Request", b"plain failure"), ModelHTTPError, r"HTTP 400 Bad Request: plain"),
        (http("400 Bad Request", b'{"error": "flat"}'), ModelHTTPError, r"400 Bad Request: flat;"),
        (http("422 Nope", b'{"detail": "x"}'), ModelHTTPError, r"HTTP 422 Nope: \{\"detail"),
        (http("400 Bad Request", b""), ModelHTTPError, r"400 Bad Request: \(empty body\)"),
        (b"SMTP ready\r\n\r\n", ModelResponseError, r"unreadable HTTP answer"),
    ],
    ids=[
        "html",
        "two-objects",
        "cut-short",
        "bad-value",
        "text-error",
        "flat-error",
        "other-json",
        "empty",
        "not-http",
    ],
)
async def test_odd_answers_from_non_openai_servers(
    answer: bytes, error: type[ModelError], match: str
) -> None:
    async with raw_http_server([answer]) as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, max_retries=0)
        with pytest.raises(error, match=match):
            await model.complete(USER)
        await model.aclose()


async def test_answer_cut_short_is_retried() -> None:
    ok = json.dumps({"choices": [{"message": {"content": "whole"}}]}).encode()
    cut = http("200 OK", b'{"choices": [', length=500)
    async with raw_http_server([cut, http("200 OK", ok)]) as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, backoff_base=0.001)
        assert (await model.complete(USER)).content == "whole"
        await model.aclose()
    assert model.stats.retries == 1


async def test_tool_calls_are_parsed(srv: OpenAITestServer) -> None:
    srv.enqueue(
        Fault.reply(
            {
                "model": "served-name",
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {
                                    "id": "call_a",
                                    "type": "function",
                                    "function": {"name": "finish", "arguments": '{"x": 1}'},
                                },
                                {"function": {"name": "search_skills", "arguments": {"q": "é"}}},
                            ],
                        }
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 4},
            }
        )
    )
    model = make(srv)
    c = await model.complete(USER, [TOOL])
    await model.aclose()
    assert c.content is None and c.model == "served-name"
    assert c.finish_reason == "tool_calls"
    assert [(t.id, t.name, t.arguments) for t in c.tool_calls] == [
        ("call_a", "finish", '{"x": 1}'),
        ("call_1", "search_skills", '{"q": "é"}'),
    ]
    assert c.usage == Usage(prompt_tokens=10, completion_tokens=4)
    assert c.message["tool_calls"][0]["function"]["name"] == "finish"


def test_parse_completion_without_usage_defaults_to_zero() -> None:
    c = parse_completion({"choices": [{"message": {"content": "hi"}, "finish_reason": "length"}]})
    assert c.usage == Usage() and c.finish_reason == "length" and c.model == ""


async def test_usage_and_cost_are_summed_over_concurrent_calls(srv: OpenAITestServer) -> None:
    prices = Prices(prompt_per_1k=2.0, completion_per_1k=6.0)
    model = make(srv, prices=prices)
    convs = [[{"role": "user", "content": "x" * n}] for n in range(1, 41)]
    srv.enqueue(Fault.status(500), Fault.drop())  # retries must not double-count usage
    results = await asyncio.gather(*(model.complete(c) for c in convs))
    await model.aclose()
    want_p = sum(usage_for(c, f"echo: {c[0]['content']}")[0] for c in convs)
    want_c = sum(usage_for(c, f"echo: {c[0]['content']}")[1] for c in convs)
    assert sum(r.usage.prompt_tokens for r in results) == want_p
    assert model.stats.prompt_tokens == want_p == srv.prompt_tokens
    assert model.stats.completion_tokens == want_c == srv.completion_tokens
    assert model.stats.calls == 40 and model.stats.retries == 2
    assert model.stats.cost == pytest.approx((want_p * 2.0 + want_c * 6.0) / 1000)


async def test_limiter_bounds_requests_seen_by_the_server() -> None:
    async with OpenAITestServer(latency=0.02) as srv:
        limiter = RateLimiter(max_concurrency=4)
        model = make(srv, limiter=limiter)
        await asyncio.gather(*(model.complete(USER, seed=i) for i in range(30)))
        await model.aclose()
    assert srv.max_in_flight <= 4
    assert limiter.max_in_flight == 4 and limiter.in_flight == 0


async def test_limiter_rate_holds_at_the_server(srv: OpenAITestServer) -> None:
    # 20 requests/s with a burst of 2: 10 calls need (10 - 2) / 20 = 0.4 s at least.
    limiter = RateLimiter(rpm=1200, request_burst=2, max_concurrency=8)
    model = make(srv, limiter=limiter)
    await asyncio.gather(*(model.complete(USER, seed=i) for i in range(10)))
    await model.aclose()
    times = sorted(srv.arrivals)
    assert times[-1] - times[0] >= 0.35
    for i, t0 in enumerate(times):
        for j in range(i, len(times)):
            # One request of slack: network jitter can bring two arrivals closer together.
            assert j - i + 1 <= 2 + 20 * (times[j] - t0) + 1


def test_connections_follow_the_running_loop() -> None:
    async def start() -> OpenAITestServer:
        srv = OpenAITestServer()
        await srv.start()
        return srv

    # The server lives on a background loop; the model is used from two successive loops.
    server_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=server_loop.run_forever, daemon=True)
    thread.start()
    srv = asyncio.run_coroutine_threadsafe(start(), server_loop).result(5)
    model = OpenAIChatModel(model="m", base_url=srv.base_url)
    try:
        for _ in range(2):
            assert asyncio.run(model.complete(USER)).content == "echo: hello"
        asyncio.run(model.aclose())
        asyncio.run(model.aclose())  # idempotent
        # A pool opened by a loop that still runs in another thread is closed there.
        fut = asyncio.run_coroutine_threadsafe(model.complete(USER), server_loop)
        assert fut.result(5).content == "echo: hello"
        asyncio.run(model.aclose())
    finally:
        asyncio.run_coroutine_threadsafe(srv.close(), server_loop).result(5)
        server_loop.call_soon_threadsafe(server_loop.stop)
        thread.join(5)
        server_loop.close()
    assert srv.served == 3


async def test_api_key_never_leaks(
    srv: OpenAITestServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("AGENTSIM_TEST_KEY", KEY)
    caplog.set_level(logging.DEBUG)
    model = make(srv, api_key_env="AGENTSIM_TEST_KEY", max_retries=1)
    # A server (or proxy) that echoes the key back in its error message.
    srv.enqueue(
        Fault.status(429, message=f"rate limited for Bearer {KEY}"),
        Fault.status(401, message=f"invalid key {KEY}"),
    )
    with pytest.raises(ModelHTTPError) as ei:
        await model.complete(USER)
    await model.aclose()
    assert "invalid key ***" in str(ei.value)
    texts = [repr(model), str(model), str(ei.value), repr(ei.value), caplog.text]
    texts += [repr(model.stats), json.dumps(model.stats.snapshot())]
    assert caplog.records, "the retry should have been logged"
    for text in texts:
        assert KEY not in text
    blob = pickle.dumps(model)
    assert KEY.encode() not in blob
    assert KEY.encode() not in pickle.dumps(ei.value)
    # The unpickled model reads the key from its own process's environment.
    clone = pickle.loads(blob)
    assert isinstance(clone, OpenAIChatModel) and repr(clone) == repr(model)
    await clone.complete(USER)
    await clone.aclose()
    assert srv.requests[-1].headers["authorization"] == f"Bearer {KEY}"


async def test_error_pickles_with_attempts(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.status(500), Fault.status(500))
    model = make(srv, max_retries=1)
    with pytest.raises(ModelHTTPError, match="HTTP 500") as ei:
        await model.complete(USER)
    await model.aclose()
    back = pickle.loads(pickle.dumps(ei.value))
    assert type(back) is ModelHTTPError and back.attempts == 2 and str(back) == str(ei.value)


def test_stats_snapshot_merge_and_quantiles() -> None:
    a, b = ModelStats(), ModelStats()
    assert a.latency_quantile(0.5) is None
    for ms in range(1, 101):
        a.record_call(Usage(prompt_tokens=10, completion_tokens=2), ms / 1000, cost=0.5)
    b.record_retry()
    b.record_error()
    b.record_call(Usage(prompt_tokens=1, completion_tokens=1), 2.0)
    snap = json.loads(json.dumps(b.snapshot()))  # must survive JSON (Ray, metrics.json)
    a.merge(snap)
    a.merge(ModelStats().snapshot())  # an idle host adds nothing
    s = a.snapshot()
    assert (s["calls"], s["retries"], s["errors"]) == (101, 1, 1)
    assert (s["prompt_tokens"], s["completion_tokens"], s["total_tokens"]) == (1001, 201, 1202)
    assert s["cost"] == pytest.approx(50.0)
    lat = s["latency"]
    assert lat["count"] == 101 and lat["min"] == pytest.approx(0.001)
    assert lat["max"] == 2.0 and lat["sum"] == pytest.approx(5.05 + 2.0)
    assert lat["p50"] == pytest.approx(0.051, rel=0.06)
    assert lat["p95"] == pytest.approx(0.096, rel=0.06)
    assert a.latency_quantile(1.0) == pytest.approx(2.0, rel=0.06)
    assert a.latency_quantile(0.0) == pytest.approx(0.001, rel=0.06)
    assert a.total_tokens == 1202
    tiny = ModelStats()
    tiny.record_call(Usage(), 0.0)
    assert tiny.latency_quantile(0.5) == 0.0


@pytest.mark.parametrize(
    ("bad", "match"),
    [({}, r"KeyError"), ({"latency": {"buckets": []}}, r"KeyError|AttributeError")],
    ids=["empty", "shape"],
)
def test_stats_merge_rejects_foreign_dicts(bad: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=rf"cannot merge model stats: ({match}).*snapshot\(\)"):
        ModelStats().merge(bad)


def test_stats_quantile_and_prices_validation() -> None:
    with pytest.raises(ValueError, match=r"quantile must be within \[0, 1\], got 2"):
        ModelStats().latency_quantile(2)
    with pytest.raises(ValueError, match=r"Prices must not be negative.*use 0 for a free model"):
        Prices(prompt_per_1k=-1, completion_per_1k=0)


def test_spawned_server_process_answers() -> None:
    async def call(base_url: str) -> str | None:
        model = OpenAIChatModel(model="m", base_url=base_url)
        try:
            return (await model.complete(USER)).content
        finally:
            await model.aclose()

    with spawn_test_server(latency=0.0) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        assert asyncio.run(call(base_url)) == "echo: hello"


async def exchange(port: int, method: str, body: bytes = b"") -> tuple[int, Any]:
    """One raw HTTP/1.1 request on a keep-alive connection: (status, parsed JSON answer)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"{method} /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    head = await reader.readuntil(b"\r\n\r\n")
    size = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    answer = json.loads(await reader.readexactly(size))
    writer.close()
    await writer.wait_closed()
    return int(head.split(b" ")[1]), answer


async def test_server_edge_cases(srv: OpenAITestServer) -> None:
    status, answer = await exchange(srv.port, "POST", b"not json")
    assert status == 400 and "'messages' list" in answer["error"]["message"]
    status, _ = await exchange(srv.port, "GET")
    assert status == 404
    system_only = {"model": "m", "messages": [{"role": "system", "content": "s"}]}
    status, answer = await exchange(srv.port, "POST", json.dumps(system_only).encode())
    assert answer["choices"][0]["message"]["content"] == "echo: (no user message)"
    srv.enqueue(Fault.status(500), Fault.drop())
    assert srv.pending_faults == 2
    assert srv.requests[0].body is None and srv.requests[1].path == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("request_bytes", "answer"),
    [
        (b"NONSENSE\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (b"POST / HTTP/1.1\r\nContent-Length: ten\r\n\r\n", b"HTTP/1.1 400 Bad Request"),
        (
            b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 411 Length Required",
        ),
        (b"GET /v1/models?x=1 HTTP/1.0\r\n\r\n", b"HTTP/1.1 404 Not Found"),
    ],
    ids=["request-line", "header", "length", "chunked", "http10"],
)
async def test_server_answers_bad_http_and_closes(
    srv: OpenAITestServer, request_bytes: bytes, answer: bytes
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(request_bytes)
    data = await reader.read()  # the server closes the connection after answering
    writer.close()
    await writer.wait_closed()
    assert data.startswith(answer) and b"Connection: close" in data


async def test_server_answers_pipelined_requests_in_order() -> None:
    async with OpenAITestServer(latency=0.01) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        reqs = b""
        for word in ("first", "second"):
            body = json.dumps({"messages": [{"role": "user", "content": word}]}).encode()
            reqs += b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
            reqs += body
        writer.write(reqs[:30])  # split mid-header: the parser must wait for the rest
        await writer.drain()
        await asyncio.sleep(0.01)
        writer.write(reqs[30:])
        answers = []
        for _ in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            size = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            answers.append(json.loads(await reader.readexactly(size)))
        writer.close()
        await writer.wait_closed()
    contents = [a["choices"][0]["message"]["content"] for a in answers]
    assert contents == ["echo: first", "echo: second"] and srv.max_in_flight == 1


def test_server_command_line_runs_in_process(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # An already-closed stdin stops a server started with --stop-on-stdin-eof at once.
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    main(["--port", "0", "--latency", "0.01", "--stop-on-stdin-eof"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["base_url"] == f"http://127.0.0.1:{printed['port']}/v1"


# -- the HTTP/1.1 client, through the model ---------------------------------------------------

OK_BODY = json.dumps({"choices": [{"message": {"content": "fine"}}]}).encode()


class ScriptedHTTP:
    """A bare keep-alive HTTP server on 127.0.0.1 answering successive requests (on any
    connection) with scripted raw bytes. An answer is ``bytes`` (then keep the connection
    open), or ``(bytes, "close")`` / ``(bytes, "junk-later")`` (close it after writing, or
    write stray bytes on the idle connection 50 ms later)."""

    def __init__(self, answers: list[bytes | tuple[bytes, str]]) -> None:
        self.answers = list(answers)
        self.heads: list[bytes] = []
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                answer = self.answers.pop(0)
                data, action = answer if isinstance(answer, tuple) else (answer, "keep")
                writer.write(data)
                await writer.drain()
                if action == "close":
                    break
                if action == "junk-later":
                    await asyncio.sleep(0.05)
                    writer.write(b"HTTP/1.1 200 OK\r\n\r\n")
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def ok(body: bytes = OK_BODY, *, extra: str = "") -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode() + body


def chunked(body: bytes) -> bytes:
    # Two chunks, one with a chunk extension, then a trailer.
    half = len(body) // 2
    parts = [body[:half], body[half:]]
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    out += b"%x;ext=1\r\n%b\r\n" % (len(parts[0]), parts[0])
    out += b"%x\r\n%b\r\n" % (len(parts[1]), parts[1])
    return out + b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.mark.parametrize(
    "answer",
    [
        ok(),
        ok(b"  \n" + OK_BODY),
        ok(OK_BODY + b"\n"),
        chunked(OK_BODY),
        b"HTTP/1.1 100 Continue\r\n\r\n" + ok(),
        (b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_BODY, "close"),
        (b"HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\n\r\n" + OK_BODY, "close"),
    ],
    ids=[
        "length",
        "space-before",
        "newline-after",
        "chunked",
        "interim-100",
        "until-close-1.0",
        "until-close-1.1",
    ],
)
async def test_answer_framings(answer: bytes | tuple[bytes, str]) -> None:
    async with ScriptedHTTP([answer]) as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, max_retries=0)
        assert (await model.complete(USER)).content == "fine"
        await model.aclose()


async def test_chunked_answer_split_across_reads() -> None:
    raw = chunked(OK_BODY)

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length:")[1].split(b"\r")[0]))
        for i in range(0, len(raw), 7):  # every framing element cut somewhere
            writer.write(raw[i : i + 7])
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    model = OpenAIChatModel(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    try:
        assert (await model.complete(USER)).content == "fine"
    finally:
        await model.aclose()
        server.close()
        await server.wait_closed()


async def test_keep_alive_reuses_one_connection_and_the_request_head(
    srv: OpenAITestServer,
) -> None:
    model = OpenAIChatModel(model="m", base_url=srv.base_url + "/")
    for i in range(5):
        await model.complete(USER, seed=i)
    await model.aclose()
    assert srv.connections_accepted == 1 and srv.served == 5
    headers = srv.requests[0].headers
    assert headers["host"] == f"127.0.0.1:{srv.port}"
    assert headers["content-type"] == "application/json"
    sent = json.dumps(srv.requests[0].body, ensure_ascii=False).encode()
    assert int(headers["content-length"]) == len(sent)


async def test_query_in_base_url_is_kept() -> None:
    http_server = ScriptedHTTP([ok()])
    async with http_server as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url + "?api-version=2")
        await model.complete(USER)
        await model.aclose()
    assert http_server.heads[0].startswith(b"POST /v1/chat/completions?api-version=2 HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("answers", "connections"),
    [
        ([(ok(extra="Connection: close\r\n"), "close"), ok()], 2),
        ([(ok(), "close"), ok()], 2),  # closed without saying so: seen while idle
        ([ok() + b"HTTP/1.1 200", ok()], 2),  # stray bytes after the answer
        ([(ok(), "junk-later"), ok()], 2),  # stray bytes on an idle connection
        ([ok(), ok()], 1),
    ],
    ids=["connection-close", "closed-idle", "extra-bytes", "junk-while-idle", "reused"],
)
async def test_connection_reuse_only_when_safe(
    answers: list[bytes | tuple[bytes, str]], connections: int
) -> None:
    http_server = ScriptedHTTP(answers)
    async with http_server as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, max_retries=0)
        await model.complete(USER)
        await asyncio.sleep(0.1)  # let a close or stray bytes reach the idle connection
        assert (await model.complete(USER)).content == "fine"
        await model.aclose()
    assert http_server.connections == connections
    assert model.stats.retries == 0


@pytest.mark.parametrize(
    ("answer", "match"),
    [
        (b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000, r"no end of headers in the first 65536 bytes"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -4\r\n\r\n", r"bad Content-Length: '-4'"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", r"bad Content-Length: 'x'"),
        (b"HTTP/1.1 200 OK\r\nbroken header\r\n\r\n", r"malformed header line: 'broken header'"),
        (b"HTTP/1.1 2x0 OK\r\n\r\n", r"not an HTTP/1.x status line"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            r"bad chunk size: b'zz'",
        ),
    ],
    ids=["head-too-long", "negative-length", "bad-length", "bad-header", "bad-status", "chunk"],
)
async def test_malformed_http_answers(answer: bytes, match: str) -> None:
    async with ScriptedHTTP([answer]) as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, max_retries=3)
        with pytest.raises(ModelResponseError, match=rf"unreadable HTTP answer \({match}"):
            await model.complete(USER)
        await model.aclose()
    assert model.stats.retries == 0  # not worth retrying: the server does not speak HTTP


async def test_status_without_body_is_an_http_error() -> None:
    async with ScriptedHTTP([b"HTTP/1.1 204 No Content\r\n\r\n"]) as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, max_retries=0)
        with pytest.raises(ModelHTTPError, match=r"HTTP 204 No Content: \(empty body\)"):
            await model.complete(USER)
        await model.aclose()


async def test_connect_that_hangs_times_out() -> None:
    # A listener that never accepts, with its backlog full: the next SYN is dropped.
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        model = OpenAIChatModel(
            model="m", base_url=f"http://127.0.0.1:{port}/v1", timeout=0.2, max_retries=0
        )
        try:
            with pytest.raises(ModelTimeoutError, match=r"no answer within 0.2 s"):
                await model.complete(USER)
        finally:
            await model.aclose()
            for filler in fillers:
                filler.close()


async def test_cancelled_call_frees_its_slot_and_its_connection() -> None:
    async with OpenAITestServer(latency=0.3) as srv:
        limiter = RateLimiter(max_concurrency=1)
        model = make(srv, limiter=limiter)
        running = asyncio.create_task(model.complete(USER))
        queued = asyncio.create_task(model.complete(USER))
        await asyncio.sleep(0.05)
        assert srv.in_flight == 1 and limiter.in_flight == 1
        queued.cancel()  # waiting for the slot: withdrawn
        running.cancel()  # in flight: its connection is dropped
        for task in (queued, running):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert limiter.in_flight == 0
        await asyncio.sleep(0.05)
        assert srv.in_flight == 0  # the server saw the connection go
        srv.latency = 0.0
        assert (await model.complete(USER)).content == "echo: hello"
        await model.aclose()
    assert srv.connections_accepted == 2 and srv.served == 1


async def test_closing_the_model_fails_calls_in_flight_and_in_line() -> None:
    async with OpenAITestServer(latency=0.5) as srv:
        limiter = RateLimiter(max_concurrency=1)
        model = make(srv, limiter=limiter, max_retries=0)
        calls = [asyncio.create_task(model.complete(USER)) for _ in range(2)]
        await asyncio.sleep(0.05)
        await model.aclose()
        results = await asyncio.gather(*calls, return_exceptions=True)
    assert [type(r) for r in results] == [ModelError, ModelError]
    assert "before the answer was complete" in str(results[0])
    assert "the connection pool is closed" in str(results[1])
    assert limiter.in_flight == 0


async def test_timed_out_answer_is_dropped_by_the_server_too() -> None:
    async with OpenAITestServer(latency=0.3) as srv:
        model = make(srv, timeout=0.05, max_retries=0)
        with pytest.raises(ModelTimeoutError, match=r"no answer within 0.05 s"):
            await model.complete(USER)
        await asyncio.sleep(0.05)
        assert srv.in_flight == 0  # the answer that fell due later had no connection left
        srv.enqueue(Fault.delay(0.3))
        with pytest.raises(ModelTimeoutError):
            await model.complete(USER)
        await asyncio.sleep(0.05)
        assert srv.in_flight == 0
        await model.aclose()
    assert srv.served == 0 and len(srv.requests) == 2  # both made, neither sent


def _self_signed(tmp: Any) -> tuple[str, str]:
    import shutil
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    cert, key = str(tmp / "cert.pem"), str(tmp / "key.pem")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", key, "-out", cert,
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_verifies_the_server(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import ssl

    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    async with OpenAITestServer(ssl_context=server_ctx) as srv:
        assert srv.base_url.startswith("https://127.0.0.1:")
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
        untrusted = make(srv, max_retries=3)
        with pytest.raises(ModelError, match=r"TLS certificate is not trusted .*SSL_CERT_FILE"):
            await untrusted.complete(USER)
        await untrusted.aclose()
        assert untrusted.stats.retries == 0
        monkeypatch.setenv("SSL_CERT_FILE", cert)
        model = make(srv)
        for _ in range(2):
            assert (await model.complete(USER)).content == "echo: hello"
        await model.aclose()
    assert srv.connections_accepted == 1  # the refused handshake never reached HTTP


async def test_host_name_is_resolved_once_for_all_connections(srv: OpenAITestServer) -> None:
    import socket

    resolved = {info[4][0] for info in socket.getaddrinfo("localhost", srv.port)}
    if resolved != {"127.0.0.1"}:
        pytest.skip("localhost must resolve to 127.0.0.1 alone (tests only reach 127.0.0.1)")
    srv.latency = 0.05
    model = OpenAIChatModel(model="m", base_url=f"http://localhost:{srv.port}/v1")
    results = await asyncio.gather(*(model.complete(USER, seed=i) for i in range(5)))
    await model.aclose()
    assert [r.content for r in results] == ["echo: hello"] * 5
    assert srv.connections_accepted == 5
    assert {r.headers["host"] for r in srv.requests} == {f"localhost:{srv.port}"}


# -- the client's lean paths ----------------------------------------------------------------


async def test_answer_heads_are_parsed_once_and_remembered_within_bounds() -> None:
    # Every answer has its own head (as with a per-request id): all are read right, and the
    # pool remembers no more than a bounded number of them.
    answers: list[bytes | tuple[bytes, str]] = [
        ok(extra=f"X-Request-Id: {i}\r\nX-Seen: a\r\nX-Seen: b\r\n") for i in range(300)
    ]
    async with ScriptedHTTP(answers) as base_url:
        model = OpenAIChatModel(model="m", base_url=base_url, max_retries=0)
        contents = [(await model.complete(USER, seed=i)).content for i in range(300)]
        pool = model._pool()
        assert pool is not None and 0 < len(pool.heads) <= 256
        await model.aclose()
    assert contents == ["fine"] * 300


async def test_request_that_is_not_json_fails_before_sending(srv: OpenAITestServer) -> None:
    model = make(srv)
    with pytest.raises(TypeError, match=r"Object of type set is not JSON serializable"):
        await model.complete([{"role": "user", "content": {1, 2}}])
    await model.aclose()
    assert srv.arrivals == [] and model.stats.calls == 0


async def test_non_ascii_text_is_sent_as_utf8_and_echoed(srv: OpenAITestServer) -> None:
    model = make(srv)
    c = await model.complete([{"role": "user", "content": 'Grüße, 世界 ✓ "quoted"\n'}])
    await model.aclose()
    assert c.content == 'echo: Grüße, 世界 ✓ "quoted"\n'
    (req,) = srv.requests
    sent = json.dumps(req.body, ensure_ascii=False).encode()
    assert int(req.headers["content-length"]) == len(sent)
    assert (c.usage.prompt_tokens, c.usage.completion_tokens) == usage_for(
        req.body["messages"], c.content
    )


# -- the test server's own I/O ----------------------------------------------------------------


def _post(body: bytes, *, version: str = "HTTP/1.1", extra: str = "") -> bytes:
    return (
        f"POST /v1/chat/completions {version}\r\n{extra}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


@pytest.mark.skipif(sys.platform != "linux", reason="kernel receive times are read on Linux")
async def test_latency_counts_from_arrival_not_from_when_the_server_read_it() -> None:
    async with OpenAITestServer(latency=0.1) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        sent = time.monotonic()
        writer.write(_post(json.dumps({"messages": USER}).encode()))
        # The loop, and the server in it, is busy for 80 ms: it reads the request late.
        time.sleep(0.08)  # noqa: ASYNC251 - blocking the loop is the point
        await reader.readuntil(b"\r\n\r\n")
        answered = time.monotonic()
        writer.close()
        await writer.wait_closed()
    (arrived,) = srv.arrivals
    # (1 ms of slack: the kernel's wall-clock time is mapped onto the loop's clock.)
    assert sent - 0.001 <= arrived < sent + 0.05  # not when the loop got round to it (80 ms)
    assert answered - sent >= 0.1 - 0.0005 - 0.001  # never earlier than latency - half a tick


async def test_large_answers_are_written_in_full(srv: OpenAITestServer) -> None:
    # Larger than a socket's send buffer: what the socket does not take waits for it.
    big = {"choices": [{"message": {"content": "x" * 8_000_000}}]}
    srv.enqueue(Fault.reply(big), Fault.reply(big))
    model = make(srv)
    assert len((await model.complete(USER)).content or "") == 8_000_000
    await model.aclose()
    # An HTTP/1.0 request: the connection closes once the whole answer has gone out.
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    writer.write(_post(json.dumps({"messages": USER}).encode(), version="HTTP/1.0"))
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    assert b"Connection: close\r\n" in data and data.endswith(json.dumps(big).encode())


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (json.dumps({"messages": USER}).encode("utf-16"), 200),
        (b" \n" + json.dumps({"messages": USER}).encode(), 200),
        (json.dumps({"messages": USER}).encode() + b" x", 400),
        (b'{"messages": [', 400),
        (b'{"messages": x}', 400),
    ],
    ids=["utf-16", "space-before", "extra-data", "cut-short", "bad-value"],
)
async def test_server_reads_bodies_as_json_loads_does(
    srv: OpenAITestServer, body: bytes, status: int
) -> None:
    got, answer = await exchange(srv.port, "POST", body)
    assert got == status
    if status == 200:
        assert answer["choices"][0]["message"]["content"] == "echo: hello"
    else:
        assert "'messages' list" in answer["error"]["message"]


async def test_server_remembers_a_bounded_number_of_request_heads(srv: OpenAITestServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
    body = json.dumps({"messages": USER}).encode()
    for i in range(300):  # a head of its own for each request
        writer.write(_post(body, extra=f"X-Request-Id: {i}\r\n"))
        head = await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(int(head.lower().split(b"content-length: ")[1].split(b"\r")[0]))
    writer.close()
    await writer.wait_closed()
    assert srv.served == 300 and {r.headers["x-request-id"] for r in srv.requests} == {
        str(i) for i in range(300)
    }
    assert 0 < len(srv._heads) <= 256


async def test_server_forgets_a_connection_reset_before_its_answer() -> None:
    import socket
    import struct

    async with OpenAITestServer(latency=5.0) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(_post(json.dumps({"messages": USER}).encode()))
        for _ in range(1000):
            if srv.in_flight == 1:
                break
            await asyncio.sleep(0.001)
        assert srv.in_flight == 1
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset, not a polite close
        for _ in range(1000):
            if srv.in_flight == 0:
                break
            await asyncio.sleep(0.001)
        assert srv.in_flight == 0 and srv.served == 0


async def test_server_port_in_use_is_an_os_error() -> None:
    async with OpenAITestServer() as srv:
        other = OpenAITestServer(port=srv.port)
        with pytest.raises(OSError, match=r"[Aa]ddress already in use"):
            await other.start()
        await other.close()  # never started: nothing to do
        assert other.connections_accepted == 0


async def test_answers_never_leave_more_than_half_a_tick_early() -> None:
    # 64 answers falling due close together, twice: however the server tunes how early it
    # may send (to keep the mean latency the one asked for), none comes back early.
    async with OpenAITestServer(latency=0.03) as srv:
        model = OpenAIChatModel(model="m", base_url=srv.base_url, max_retries=0)

        async def timed(i: int) -> float:
            start = time.monotonic()
            await model.complete(USER, seed=i)
            return time.monotonic() - start

        for _ in range(2):
            times = await asyncio.gather(*(timed(i) for i in range(64)))
            assert min(times) >= 0.03 - 0.0005
        await model.aclose()
    assert srv.served == 128


def test_fast_constructors_build_the_same_frozen_values() -> None:
    from agentsim.llm.base import Completion, ToolCall, make_completion, make_tool_call, make_usage

    usage = make_usage(12, 3)
    call = make_tool_call("call_0", "finish", '{"action": "rest"}')
    built = make_completion(None, (call,), usage, "tool_calls", "m")
    expected = Completion(
        content=None,
        tool_calls=(ToolCall(id="call_0", name="finish", arguments='{"action": "rest"}'),),
        usage=Usage(prompt_tokens=12, completion_tokens=3),
        finish_reason="tool_calls",
        model="m",
    )
    assert built == expected and hash(built) == hash(expected)
    assert type(built) is Completion and type(built.usage) is Usage
    assert built.usage.total_tokens == 15
    assert built.message["tool_calls"][0]["function"]["name"] == "finish"
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'model'"):
        built.model = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError, match="prompt_tokens"):
        usage.prompt_tokens = 0  # type: ignore[misc]
