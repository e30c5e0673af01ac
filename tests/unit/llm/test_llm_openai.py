"""OpenAIChatModel against the fault-injecting test server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import email.utils
import gc
import json
import logging
import pickle
import random
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentsim.errors import (
    ConfigError,
    ModelError,
    ModelHTTPError,
    ModelResponseError,
    ModelTimeoutError,
)
from agentsim.llm.base import ChatModel, Completion, Usage
from agentsim.llm.limiter import RateLimiter
from agentsim.llm.openai import OpenAIChatModel
from agentsim.llm.stats import ModelStats, Prices
from agentsim.testing import ChatRequest, tool_call, usage_for
from agentsim.testing.openai_server import Fault, OpenAITestServer
from tests.unit import helpers
from tests.unit.helpers import Together

KEY = "sk-test-SECRET-0123456789abcdef"
USER = [{"role": "user", "content": "hello"}]
TOOL = {
    "type": "function",
    "function": {"name": "finish", "parameters": {"type": "object", "properties": {}}},
}


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between attempts the client asks for (``asyncio.sleep`` called from
    llm/served.py), in order. They still happen: only recorded, so that a test tells the wait
    chosen apart from how slowly a loaded machine ran the requests around it."""
    return helpers.record_sleeps(monkeypatch, file="llm/served.py")


def make(srv: OpenAITestServer, **kw: Any) -> OpenAIChatModel:
    opts: dict[str, Any] = {"backoff_base": 0.001, "backoff_max": 0.5, "rng_seed": 7}
    opts.update(kw)
    return OpenAIChatModel(model="test-model", base_url=srv.base_url, **opts)


async def test_request_body_headers_and_parsed_answer(
    srv: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSIM_TEST_KEY", KEY)
    model = make(
        srv, api_key_env="AGENTSIM_TEST_KEY", temperature=0.3, max_tokens=64, extra_params={"n": 1}
    )
    assert isinstance(model, ChatModel)
    c = await model.complete(USER, [TOOL], seed=11)
    await model.aclose()
    assert (c.content, c.model, c.finish_reason) == ("echo: hello", "test-model", "stop")
    assert c.usage == usage_for(USER, "echo: hello")
    (req,) = srv.recorded
    assert req.headers["authorization"] == f"Bearer {KEY}"
    assert req.body == {
        "model": "test-model",
        "messages": USER,
        "seed": 11,
        "tools": [TOOL],
        "tool_choice": "auto",
        "n": 1,
        "temperature": 0.3,
        "max_tokens": 64,
    }


async def test_no_key_variable_sends_no_authorization_and_no_tools_key(
    srv: OpenAITestServer,
) -> None:
    model = make(srv)
    await model.complete(USER)
    await model.aclose()
    (req,) = srv.recorded
    assert "authorization" not in req.headers
    assert "tools" not in req.body and "tool_choice" not in req.body


def test_missing_key_variable_is_named_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSIM_NO_SUCH_KEY", raising=False)
    with pytest.raises(
        ConfigError,
        match=r"model.api_key_env: the API key variable AGENTSIM_NO_SUCH_KEY is not set.*"
        r"export AGENTSIM_NO_SUCH_KEY=<your key>",
    ):
        OpenAIChatModel(
            model="m", base_url="http://127.0.0.1:1/v1", api_key_env="AGENTSIM_NO_SUCH_KEY"
        )


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"base_url": "ftp://127.0.0.1/v1"}, r"base_url: 'ftp://127.0.0.1/v1' is not an http\(s\)"),
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


# -- retries -------------------------------------------------------------------------------


@pytest.mark.slow
async def test_429_honours_retry_after_seconds(srv: OpenAITestServer, waits: list[float]) -> None:
    srv.enqueue(Fault.status(429, retry_after=0.4))
    model = make(srv)
    started = time.perf_counter()
    assert (await model.complete(USER)).content == "echo: hello"
    elapsed = time.perf_counter() - started
    await model.aclose()
    # The server's 0.4 s, exactly: the backoff alone would wait at most 1 ms.
    assert waits == [0.4] and elapsed >= 0.4
    assert model.stats.retries == 1 and srv.faults_injected == {"429": 1}


@pytest.mark.slow
async def test_retry_after_http_date_is_honoured(srv: OpenAITestServer, waits: list[float]) -> None:
    started = time.perf_counter()
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1..2 s away
    srv.enqueue(Fault.status(503, retry_after=when))
    model = make(srv, backoff_max=5.0)
    await model.complete(USER)
    await model.aclose()
    # Until that second, which is 1 s or more after `started`; never longer than 2 s (the
    # backoff alone would wait at most 1 ms).
    assert time.perf_counter() - started >= 0.9
    assert len(waits) == 1 and waits[0] <= 2.0


async def test_retry_after_is_capped_and_unreadable_ones_fall_back_to_backoff(
    srv: OpenAITestServer, waits: list[float]
) -> None:
    srv.enqueue(Fault.status(429, retry_after=60), Fault.status(429, retry_after="soon"))
    model = make(srv, backoff_max=0.2)
    await model.complete(USER)
    await model.aclose()
    # 60 s capped at backoff_max; "soon" is no number of seconds: the backoff (<= 2 ms).
    assert model.stats.retries == 2 and waits[0] == 0.2 and 0 <= waits[1] <= 0.002


@pytest.mark.parametrize(
    "fault",
    [Fault.status(500), Fault.status(502), Fault.status(503), Fault.drop(), Fault.malformed()],
    ids=["500", "502", "503", "drop", "malformed"],
)
@pytest.mark.slow
async def test_transient_failures_are_retried(
    srv: OpenAITestServer, fault: Fault, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentsim.llm.openai")
    srv.enqueue(fault)
    model = make(srv)
    assert (await model.complete(USER)).content == "echo: hello"
    await model.aclose()
    assert (model.stats.retries, model.stats.calls, model.stats.errors) == (1, 1, 0)
    assert srv.requests == 2 and srv.faults_injected == {fault.label: 1}
    assert "attempt 1 failed" in caplog.text


async def test_backoff_grows_exponentially_with_full_jitter(
    srv: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only the client's own waits (the in-loop uvicorn server sleeps too), taking no time.
    waits = helpers.record_sleeps(monkeypatch, file="llm/served.py", skip=True)
    srv.enqueue(*[Fault.status(500)] * 4)
    model = make(srv, backoff_base=0.1, backoff_max=0.5)
    await model.complete(USER)
    await model.aclose()
    rng = random.Random(7)
    assert waits == [rng.uniform(0, min(0.5, 0.1 * 2**n)) for n in range(4)]


async def test_retries_exhausted_raise_with_attempts(srv: OpenAITestServer) -> None:
    srv.enqueue(*[Fault.status(503, message="overloaded")] * 3)
    model = make(srv, max_retries=2)
    with pytest.raises(
        ModelHTTPError,
        match=r"model 'test-model' at http://127.0.0.1:\d+/v1: HTTP 503 Service Unavailable: "
        r"overloaded; the server failed; check its logs, or raise max_retries \(after 3 attempts\)",
    ) as info:
        await model.complete(USER)
    await model.aclose()
    assert info.value.attempts == 3 and model.stats.errors == 1 and srv.requests == 3


async def test_dropped_connections_exhausted_raise_model_error(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.drop(), Fault.drop())
    model = make(srv, max_retries=1)
    with pytest.raises(
        ModelError, match=r"connection failed \(.+\); check that the server is running"
    ):
        await model.complete(USER)
    await model.aclose()


@pytest.mark.slow
async def test_slow_answer_times_out_and_is_retried(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.delay(2.0))
    model = make(srv, timeout=0.2)
    assert (await model.complete(USER)).content == "echo: hello"
    await model.aclose()
    assert model.stats.retries == 1


@pytest.mark.slow
async def test_timeouts_exhausted_raise_model_timeout_error(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.delay(2.0), Fault.delay(2.0))
    model = make(srv, timeout=0.2, max_retries=1)
    with pytest.raises(ModelTimeoutError, match=r"no answer within 0.2 s; raise model.timeout"):
        await model.complete(USER)
    await model.aclose()


async def test_connection_refused_is_retried_then_reported(refused_port: int) -> None:
    model = OpenAIChatModel(
        model="m", base_url=f"http://127.0.0.1:{refused_port}/v1", max_retries=2, backoff_base=0.001
    )
    with pytest.raises(ModelError, match=r"connection failed .*\(after 3 attempts\)"):
        await model.complete(USER)
    await model.aclose()
    assert model.stats.retries == 2


@pytest.mark.parametrize(
    ("code", "fix"),
    [
        (400, "check the request parameters"),
        (401, r"check the API key variable \(api_key_env\)"),
        (404, r"check base_url \(usually ending in /v1\) and the model name"),
    ],
    ids=["400", "401", "404"],
)
@pytest.mark.slow
async def test_non_retryable_status_fails_at_once(
    srv: OpenAITestServer, code: int, fix: str
) -> None:
    srv.enqueue(Fault.status(code, message="nope"))
    model = make(srv)
    with pytest.raises(ModelHTTPError, match=rf"HTTP {code} .*: nope; {fix}"):
        await model.complete(USER)
    await model.aclose()
    assert srv.requests == 1 and model.stats.retries == 0


# -- answers ---------------------------------------------------------------------------------


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
@pytest.mark.slow
async def test_wrong_shape_is_retried_once_then_reported(
    srv: OpenAITestServer, body: Any, match: str
) -> None:
    srv.enqueue(Fault.reply(body), Fault.reply(body))
    model = make(srv, max_retries=5)
    with pytest.raises(
        ModelResponseError,
        match=rf"the answer is not a chat completion \(.*{match}.*implements POST "
        r"/chat/completions \(after 2 attempts\)",
    ):
        await model.complete(USER)
    await model.aclose()
    assert srv.requests == 2 and model.stats.errors == 1


async def test_answer_that_is_not_json_twice_is_reported(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.malformed(), Fault.malformed())
    model = make(srv)
    with pytest.raises(
        ModelResponseError,
        match=r"the answer is not JSON \('<html>upstream error</html>'\); check that base_url "
        r"points at an OpenAI-compatible API \(usually ending in /v1\) \(after 2 attempts\)",
    ):
        await model.complete(USER)
    await model.aclose()


async def test_one_malformed_answer_between_other_faults_still_succeeds(
    srv: OpenAITestServer,
) -> None:
    srv.enqueue(Fault.malformed(), Fault.status(500), Fault.drop())
    model = make(srv)
    assert (await model.complete(USER)).content == "echo: hello"
    await model.aclose()
    assert model.stats.retries == 3


async def test_missing_usage_is_zero_and_counted(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.no_usage())
    model = make(srv)
    first = await model.complete(USER)
    second = await model.complete(USER)
    await model.aclose()
    assert first.usage == Usage() and second.usage == usage_for(USER, "echo: hello")
    assert model.stats.usage_missing == 1 and model.stats.calls == 2
    assert model.stats.prompt_tokens == second.usage.prompt_tokens


async def test_tool_calls_and_text_from_the_answer_function() -> None:
    def answer(request: ChatRequest) -> Any:
        if "finish" in request.tool_names:
            return [tool_call("finish", action="done"), tool_call("search_skills", query="é")]
        return "plain ü"

    async with OpenAITestServer(answer=answer) as srv:
        model = make(srv)
        called = await model.complete(USER, [TOOL])
        plain = await model.complete([{"role": "user", "content": "naïve ✓"}])
        await model.aclose()
        sent = srv.recorded[1].body["messages"][0]["content"]
    assert [(c.id, c.name) for c in called.tool_calls] == [
        ("call_0_0", "finish"),
        ("call_0_1", "search_skills"),
    ]
    assert json.loads(called.tool_calls[1].arguments) == {"query": "é"}
    assert called.finish_reason == "tool_calls" and called.content is None
    assert plain.content == "plain ü" and sent == "naïve ✓"


async def test_usage_and_cost_are_summed_over_concurrent_calls(srv: OpenAITestServer) -> None:
    prices = Prices(prompt_per_1k=1.0, completion_per_1k=2.0)
    model = make(srv, prices=prices)
    msgs = [[{"role": "user", "content": f"message {i}" * i}] for i in range(20)]
    await asyncio.gather(*(model.complete(m) for m in msgs))
    await model.aclose()
    s = model.stats
    assert (s.calls, s.prompt_tokens, s.completion_tokens) == (
        20,
        srv.prompt_tokens,
        srv.completion_tokens,
    )
    assert s.cost == pytest.approx((srv.prompt_tokens + 2 * srv.completion_tokens) / 1000)
    assert s.latency_count == 20


async def test_cached_prompt_tokens_the_server_reports_are_counted_and_priced() -> None:
    def answer(request: ChatRequest) -> Completion:
        usage = Usage(prompt_tokens=1000, completion_tokens=10, cached_prompt_tokens=600)
        return Completion(content="ok", usage=usage)

    prices = Prices(prompt_per_1k=1.0, completion_per_1k=2.0, cached_prompt_per_1k=0.25)
    async with OpenAITestServer(answer=answer) as srv:
        model = make(srv, prices=prices)
        got = [await model.complete(USER, seed=i) for i in range(3)]
        await model.aclose()
    assert [c.usage.cached_prompt_tokens for c in got] == [600, 600, 600]
    # 400 full-price prompt tokens, 600 cached at a quarter, 10 completion tokens: 0.57 each.
    assert model.stats.cost == pytest.approx(3 * (0.4 + 0.15 + 0.02))
    snap = model.stats.snapshot()
    assert (snap["prompt_tokens"], snap["cached_prompt_tokens"]) == (3000, 1800)
    merged = ModelStats()
    merged.merge(snap)
    merged.merge({k: v for k, v in snap.items() if k != "cached_prompt_tokens"})  # older
    assert merged.cached_prompt_tokens == 1800 and merged.prompt_tokens == 6000
    # Without a price of its own, a cached token costs what any prompt token costs.
    plain = Prices(prompt_per_1k=1.0, completion_per_1k=2.0)
    assert plain.cost(got[0].usage) == pytest.approx(1.0 + 0.02)


async def test_cached_tokens_of_the_test_servers_prefix_cache_are_counted() -> None:
    long_prompt = [{"role": "system", "content": "Shared instructions for every agent. " * 80}]
    async with OpenAITestServer(prefix_cache_tokens=100_000) as srv:
        model = make(srv)
        first = await model.complete([*long_prompt, {"role": "user", "content": "agent 1"}])
        second = await model.complete([*long_prompt, {"role": "user", "content": "agent 2"}])
        await model.aclose()
        reported = srv.stats()["cached_tokens"]
    assert first.usage.cached_prompt_tokens == 0  # a cold cache
    assert 0 < second.usage.cached_prompt_tokens < second.usage.prompt_tokens
    assert model.stats.cached_prompt_tokens == second.usage.cached_prompt_tokens == reported


def test_a_negative_cached_price_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cached_prompt_per_1k=-0.1\); use 0 for a free model"):
        Prices(prompt_per_1k=1.0, completion_per_1k=1.0, cached_prompt_per_1k=-0.1)


@pytest.mark.slow
async def test_limiter_bounds_requests_seen_by_the_server() -> None:
    # Answers wait for 3 to be in at once: the server sees the limiter's 3, never more.
    async with OpenAITestServer(latency=0.02, answer=Together(3)) as srv:
        limiter = RateLimiter(max_concurrency=3)
        model = make(srv, limiter=limiter)
        await asyncio.gather(*(model.complete(USER) for _ in range(30)))
        await model.aclose()
    assert srv.max_in_flight == 3 and limiter.max_in_flight == 3 and limiter.in_flight == 0


@pytest.mark.slow
async def test_cancelled_call_frees_its_limiter_slot() -> None:
    arrived = asyncio.Event()

    async def first_one_hangs(request: ChatRequest) -> str:
        if not arrived.is_set():
            arrived.set()
            await asyncio.sleep(5)
        return "answered"

    async with OpenAITestServer(answer=first_one_hangs) as srv:
        limiter = RateLimiter(max_concurrency=1)
        model = make(srv, limiter=limiter)
        task = asyncio.create_task(model.complete(USER))
        await arrived.wait()
        assert limiter.in_flight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert limiter.in_flight == 0
        assert (await model.complete(USER)).content == "answered"
        await model.aclose()


# The clients of the first two loops are left behind when asyncio.run closes their loop, and
# a closed loop can no longer close their sockets; collected at the end of this test, so
# their ResourceWarnings are ignored here and nowhere else.
@pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")
def test_clients_follow_the_running_loop() -> None:
    with OpenAITestServer() as srv:  # served from its own thread
        model = OpenAIChatModel(model="m", base_url=srv.base_url)
        for _ in range(2):  # two successive loops, each with its own client
            assert asyncio.run(model.complete(USER)).content == "echo: hello"
        asyncio.run(model.aclose())
        asyncio.run(model.aclose())  # idempotent
        # A client opened by a loop that still runs in another thread is closed there.
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, daemon=True)
        thread.start()
        try:
            fut = asyncio.run_coroutine_threadsafe(model.complete(USER), loop)
            assert fut.result(10).content == "echo: hello"
            (clients,) = model._http._by_loop.values()
            asyncio.run(model.aclose())
            deadline = time.monotonic() + 5
            while not clients.closed and time.monotonic() < deadline:
                time.sleep(0.01)
            assert clients.closed
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(5)
            loop.close()
    assert srv.served == 3
    gc.collect()


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
    with pytest.raises(ModelHTTPError, match=r"invalid key \*\*\*") as info:
        await model.complete(USER)
    await model.aclose()
    texts = [repr(model), str(model), str(info.value), repr(info.value), caplog.text]
    texts += [repr(model.stats), json.dumps(model.stats.snapshot())]
    assert "attempt 1 failed" in caplog.text
    for text in texts:
        assert KEY not in text
    blob = pickle.dumps(model)
    assert KEY.encode() not in blob and KEY.encode() not in pickle.dumps(info.value)
    # The unpickled model reads the key from its own process's environment.
    clone = pickle.loads(blob)
    assert isinstance(clone, OpenAIChatModel) and repr(clone) == repr(model)
    await clone.complete(USER)
    await clone.aclose()
    assert srv.recorded[-1].headers["authorization"] == f"Bearer {KEY}"


async def test_error_pickles_with_attempts(srv: OpenAITestServer) -> None:
    srv.enqueue(Fault.status(500), Fault.status(500))
    model = make(srv, max_retries=1)
    with pytest.raises(ModelHTTPError, match="HTTP 500") as info:
        await model.complete(USER)
    await model.aclose()
    back = pickle.loads(pickle.dumps(info.value))
    assert type(back) is ModelHTTPError and back.attempts == 2 and str(back) == str(info.value)


def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = folder / "cert.pem", folder / "key.pem"
    command = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
    command += "-days 1 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
    subprocess.run(
        [*command.split(), "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True
    )
    return cert, key


async def test_https_verifies_the_server_against_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cert, key = self_signed_certificate(tmp_path)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    async with OpenAITestServer(ssl_certfile=str(cert), ssl_keyfile=str(key)) as srv:
        assert srv.base_url.startswith("https://127.0.0.1:")
        untrusted = make(srv, max_retries=3)
        with pytest.raises(
            ModelError,
            match=r"the server's TLS certificate is not trusted \(.*CERTIFICATE_VERIFY_FAILED.*"
            r"\); check base_url, or point SSL_CERT_FILE at the CA bundle that signed it",
        ):
            await untrusted.complete(USER)
        await untrusted.aclose()
        assert untrusted.stats.retries == 0  # retrying cannot help
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))
        trusted = make(srv)
        assert (await trusted.complete(USER)).content == "echo: hello"
        await trusted.aclose()
