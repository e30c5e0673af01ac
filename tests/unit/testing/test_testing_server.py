"""agentsim.testing.openai_server: the fault-injecting OpenAI-compatible test server."""

from __future__ import annotations

import asyncio
import math
import statistics
import time

import httpx
import pytest

from agentsim.errors import ModelHTTPError
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing import ChatRequest
from agentsim.testing.openai_server import (
    RETRYABLE_FAULTS,
    Fault,
    OpenAITestServer,
    main,
    spawn_test_server,
)

USER = [{"role": "user", "content": "hello"}]


def model(base_url: str, **kw: object) -> OpenAIChatModel:
    opts: dict[str, object] = {"backoff_base": 0.001, "max_retries": 20, "rng_seed": 1}
    opts.update(kw)
    return OpenAIChatModel(model="m", base_url=base_url, **opts)  # type: ignore[arg-type]


async def _faults_seen(seed: int) -> list[str]:
    async with OpenAITestServer(fault_rate=0.5, seed=seed) as srv:
        m = model(srv.base_url)
        for _ in range(12):  # one at a time: the draws follow the arrival order
            await m.complete(USER)
        await m.aclose()
        return [r.fault.label if r.fault else "-" for r in srv.recorded]


@pytest.mark.slow
async def test_random_faults_follow_the_seed_and_are_counted() -> None:
    first = await _faults_seen(5)
    assert first == await _faults_seen(5)
    assert first != await _faults_seen(6)
    labels = {f.label for f in RETRYABLE_FAULTS}
    assert {x for x in first if x != "-"} <= labels and first.count("-") == 12
    async with OpenAITestServer(fault_rate=0.5, seed=5) as srv:
        m = model(srv.base_url)
        await asyncio.gather(*(m.complete(USER) for _ in range(12)))
        await m.aclose()
        injected = sum(srv.faults_injected.values())
        assert srv.served == 12 and srv.requests == 12 + injected and injected > 0
        assert m.stats.retries == injected
        assert srv.stats()["faults"] == srv.faults_injected


async def test_latency_delays_every_answer() -> None:
    everyone = asyncio.Event()
    waited = 0

    async def together(request: ChatRequest) -> str:
        # Past its latency, each answer waits for the five to be in: a server that held one
        # request at a time would never answer (the guard below says so).
        nonlocal waited
        waited += 1
        if waited == 5:
            everyone.set()
        await everyone.wait()
        return "together"

    async with OpenAITestServer(latency=0.2, timeline=True, answer=together) as srv:
        m = model(srv.base_url)
        started = time.perf_counter()
        async with asyncio.timeout(60):  # a guard only
            answers = await asyncio.gather(*(m.complete(USER) for _ in range(5)))
        elapsed = time.perf_counter() - started
        await m.aclose()
    assert [a.content for a in answers] == ["together"] * 5
    assert elapsed >= 0.2 and srv.max_in_flight == 5 and len(srv.timeline) == 5
    assert all(answered - arrived >= 0.2 for arrived, answered in srv.timeline)


async def test_timeline_keeps_when_each_request_arrived_and_was_answered() -> None:
    async with OpenAITestServer(latency=0.1, timeline=True) as srv:
        m = model(srv.base_url)
        before = time.monotonic()
        await asyncio.gather(*(m.complete(USER) for _ in range(3)))
        after = time.monotonic()
        await m.aclose()
        async with httpx.AsyncClient() as client:
            got = (await client.get(f"http://127.0.0.1:{srv.port}/_timeline")).json()
    assert len(got["timeline"]) == 3 and [tuple(t) for t in got["timeline"]] == srv.timeline
    for arrived, answered in srv.timeline:
        assert before <= arrived and arrived + 0.1 <= answered <= after


async def test_timeline_is_off_unless_asked_for() -> None:
    async with OpenAITestServer() as srv, httpx.AsyncClient() as client:
        m = model(srv.base_url)
        await m.complete(USER)
        await m.aclose()
        got = await client.get(f"http://127.0.0.1:{srv.port}/_timeline")
    assert got.status_code == 404 and srv.timeline == []
    assert "start it with timeline=True" in got.json()["error"]["message"]


async def test_bad_requests_and_routes() -> None:
    async with OpenAITestServer(models=["m"]) as srv, httpx.AsyncClient() as client:
        url = f"{srv.base_url}/chat/completions"
        bad = await client.post(url, content=b"not json")
        assert bad.status_code == 400
        assert bad.json()["error"]["message"] == (
            "the body must be a JSON object with a 'messages' list"
        )
        other = await client.post(url, json={"model": "x", "messages": []})
        assert other.status_code == 404 and other.json()["error"]["code"] == "model_not_found"
        listed = await client.get(f"{srv.base_url}/models")
        assert [m["id"] for m in listed.json()["data"]] == ["m"]
        assert (await client.get(url)).status_code == 405
        stats = (await client.get(f"http://127.0.0.1:{srv.port}/_stats")).json()
        assert stats["requests"] == 2 and stats["served"] == 0


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match=r"fault_rate=1.5 is outside \[0, 1\]; pass e.g. 0.1"):
        OpenAITestServer(fault_rate=1.5)
    with pytest.raises(ValueError, match=r"fault_rate > 0 needs at least one fault"):
        OpenAITestServer(fault_rate=0.1, faults=())
    with pytest.raises(SystemExit, match=r"unknown fault\(s\) 418; choose from 429, 500"):
        main(["--faults", "429,418"])


@pytest.mark.parametrize("seed", [0, 7])
def test_lognormal_answer_times_have_the_median_and_spread_asked_for(seed: int) -> None:
    srv = OpenAITestServer(latency=1.0, latency_sigma=0.8, seed=seed)
    draws = sorted(srv.next_latency() for _ in range(4000))
    assert statistics.median(draws) == pytest.approx(1.0, rel=0.06)
    # log of a lognormal is normal: its spread is sigma.
    assert statistics.stdev(math.log(d) for d in draws) == pytest.approx(0.8, rel=0.06)
    assert draws[-1] > 4 * draws[len(draws) // 2] > 16 * draws[0]


def test_answer_times_are_the_same_for_a_seed_and_fixed_without_sigma() -> None:
    def seq(seed: int, sigma: float = 0.5) -> list[float]:
        srv = OpenAITestServer(latency=0.3, latency_sigma=sigma, seed=seed)
        return [srv.next_latency() for _ in range(50)]

    assert seq(3) == seq(3) and seq(3) != seq(4)
    assert seq(3, sigma=0.0) == [0.3] * 50


def test_negative_latency_or_sigma_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"latency_sigma=-0.1 must be >= 0; pass e.g."):
        OpenAITestServer(latency=1.0, latency_sigma=-0.1)


async def test_answers_wait_the_drawn_times() -> None:
    expected = OpenAITestServer(latency=0.02, latency_sigma=1.0, seed=5)
    waits = [expected.next_latency() for _ in range(6)]
    async with OpenAITestServer(latency=0.02, latency_sigma=1.0, seed=5, timeline=True) as srv:
        m = model(srv.base_url)
        for _ in range(6):
            await m.complete(USER)
        await m.aclose()
    took = [answered - arrived for arrived, answered in srv.timeline]
    assert all(w <= t < w + 0.5 for w, t in zip(waits, took, strict=True))
    assert len(set(waits)) == 6


async def test_port_in_use_is_an_os_error() -> None:
    async with OpenAITestServer() as first:
        with pytest.raises(OSError, match=r"(?i)address already in use"):
            await OpenAITestServer(port=first.port).start()


@pytest.mark.slow
def test_spawned_server_process_injects_faults_and_reports_counters() -> None:
    with spawn_test_server(latency=0.01, fault_rate=0.5, faults="500,drop") as srv:
        m = model(srv.base_url)

        async def calls() -> None:
            await asyncio.gather(*(m.complete(USER) for _ in range(10)))
            await m.aclose()

        asyncio.run(calls())
        stats = srv.stats()
    assert stats["served"] == 10 and set(stats["faults"]) <= {"500", "drop"}
    assert stats["requests"] == 10 + sum(stats["faults"].values()) == 10 + m.stats.retries


async def test_enqueued_faults_come_before_random_ones() -> None:
    async with OpenAITestServer(fault_rate=1.0, faults=[Fault.status(500)]) as srv:
        srv.enqueue(Fault.delay(0.01), Fault.no_usage())
        assert srv.pending_faults == 2
        m = model(srv.base_url, max_retries=1)
        await m.complete(USER)
        await m.complete(USER)
        assert srv.pending_faults == 0
        with pytest.raises(ModelHTTPError, match=r"HTTP 500 .*injected status 500"):
            await m.complete(USER)
        await m.aclose()
        kinds = [r.fault.label for r in srv.recorded if r.fault]
        assert kinds == ["delay", "no_usage", "500", "500"]


async def test_a_server_restarts_on_its_port_at_once() -> None:
    first = OpenAITestServer()
    await first.start()
    port = first.port
    m = model(first.base_url)
    assert (await m.complete(USER)).content == "echo: hello"
    # The server closes the client's kept-alive connection first: its side of it waits in
    # TIME_WAIT on the port, which a plain bind would refuse for a minute.
    await first.close()
    await m.aclose()
    again = OpenAITestServer(port=port)
    await again.start()
    try:
        m = model(again.base_url)
        assert (await m.complete(USER)).content == "echo: hello"
        await m.aclose()
        # A second live server on the port is still refused.
        with pytest.raises(OSError, match=r"(?i)address already in use"):
            await OpenAITestServer(port=port).start()
    finally:
        await again.close()
