"""The test server's prefix-cache model: cached tokens in usage, time per uncached token."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from agentsim.testing.openai_server import OpenAITestServer, spawn_test_server
from agentsim.testing.prefix_cache import render_chat, tokenize
from tests.unit import helpers

SYSTEM = {"role": "system", "content": "You plan a day in a small town. " * 40}


def chat(text: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": text}]


async def post(client: httpx.AsyncClient, base_url: str, messages: object) -> dict[str, object]:
    r = await client.post(f"{base_url}/chat/completions", json={"model": "m", "messages": messages})
    r.raise_for_status()
    usage: dict[str, object] = r.json()["usage"]
    return usage


async def test_usage_reports_the_cached_tokens_of_a_shared_prefix() -> None:
    async with (
        OpenAITestServer(prefix_cache_tokens=100_000) as srv,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        first = await post(client, srv.base_url, chat("Ana, tick 1"))
        second = await post(client, srv.base_url, chat("Bo, tick 1"))
        stats = srv.stats()
    tokens = len(tokenize(render_chat(chat("Ana, tick 1"))))
    assert first["prompt_tokens"] == tokens
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    cached = second["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    # The whole system message is shared: every block of it but the one it ends in.
    system_tokens = len(tokenize(render_chat([SYSTEM])))
    assert cached % 16 == 0 and system_tokens - 32 < cached <= system_tokens
    assert stats["cached_tokens"] == cached and stats["prompt_tokens"] == 2 * tokens


async def test_without_the_model_usage_has_no_cached_tokens() -> None:
    async with OpenAITestServer() as srv, httpx.AsyncClient(trust_env=False) as client:
        usage = await post(client, srv.base_url, chat("Ana"))
        usage = await post(client, srv.base_url, chat("Ana"))
    assert "prompt_tokens_details" not in usage and srv.stats()["cached_tokens"] == 0


async def test_uncached_prompt_tokens_cost_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 ms a token: a cold request of ~250 tokens waits ~0.5 s, a warm one ~0.03 s. The
    # server's waits are recorded (and still made), so that how long it chose to wait is
    # told apart from how slowly a loaded machine ran the rest of the request.
    waits = helpers.record_sleeps(monkeypatch, function="_answer_chat")  # its answer wait
    async with (
        OpenAITestServer(prefix_cache_tokens=10_000, prefill_seconds_per_token=0.002) as srv,
        httpx.AsyncClient(trust_env=False, timeout=30) as client,
    ):
        t0 = time.monotonic()
        cold_usage = await post(client, srv.base_url, chat("Ana"))
        cold = time.monotonic() - t0
        warm_usage = await post(client, srv.base_url, chat("Ana"))
    tokens = cold_usage["prompt_tokens"]
    cached = warm_usage["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
    assert isinstance(tokens, int) and isinstance(cached, int) and tokens > 200
    assert cold_usage["prompt_tokens_details"] == {"cached_tokens": 0} and cached > tokens - 32
    # Each request waits 2 ms for each token it does not find cached, and only for those.
    assert waits == [pytest.approx(tokens * 0.002), pytest.approx((tokens - cached) * 0.002)]
    assert cold >= tokens * 0.002


def test_prefill_time_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match=r"prefill_seconds_per_token=-1 is negative; pass e.g."):
        OpenAITestServer(prefill_seconds_per_token=-1)


@pytest.mark.slow
def test_the_command_line_serves_the_cache_model() -> None:
    with spawn_test_server(prefix_cache_tokens=5_000, prefill_ms_per_1k=1.0) as srv:

        async def twice() -> list[dict[str, object]]:
            async with httpx.AsyncClient(trust_env=False) as client:
                return [await post(client, srv.base_url, chat("Ana")) for _ in range(2)]

        first, second = asyncio.run(twice())
        stats = srv.stats()
    assert first["prompt_tokens_details"] == {"cached_tokens": 0}
    assert second["prompt_tokens_details"]["cached_tokens"] > 0  # type: ignore[index]
    assert stats["cached_tokens"] == second["prompt_tokens_details"]["cached_tokens"]  # type: ignore[index]
