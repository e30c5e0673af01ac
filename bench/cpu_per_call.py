"""CPU seconds the client spends per model call. Prints JSON.

    python bench/cpu_per_call.py [--calls 3000] [--concurrency 64] [--latency 0.1]
                                 [--repeats 3]

The test server runs in a child process (``spawn_test_server``), so ``time.process_time()``
of this process counts the client alone: the event loop, the limiter, the HTTP library,
JSON and the stats. Each repeat makes ``calls`` concurrent calls (one task each) under a
``RateLimiter(max_concurrency=concurrency)`` with a prompt of about 2,000 tokens, as an
agent's is; the first few calls of each repeat open the connections and are left out.

Side by side, in the same run and against the same server:

- ``model``: ``OpenAIChatModel.complete``, the path every agent step takes;
- ``httpx``: the same requests through bare ``httpx.AsyncClient``s (16 clients, as the model
  spread its requests before it moved to aiohttp), answers parsed with ``json.loads``;
- ``aiohttp``: the same through one bare ``aiohttp.ClientSession``.

Each figure is the median over ``repeats`` of CPU milliseconds per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp
import httpx

from agentsim.llm.limiter import RateLimiter
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing.openai_server import spawn_test_server

WARM = 64  # calls per repeat that open connections, not counted
MESSAGES = [
    {"role": "system", "content": "You are agent 0 of a simulated city. " * 220},
    {"role": "user", "content": "It is 08:15. What do you do next?"},
]
BODY = json.dumps({"model": "bench", "messages": MESSAGES, "seed": 0}).encode()
HEADERS = {"Content-Type": "application/json"}

Call = Callable[[int], Awaitable[None]]


async def _measure(call: Call, *, calls: int, concurrency: int) -> float:
    """CPU milliseconds per call of ``calls`` concurrent calls (after ``WARM`` warm-up)."""
    limiter = RateLimiter(max_concurrency=concurrency)

    async def one(i: int) -> None:
        async with limiter.acquire(0):
            await call(i)

    async def batch(n: int) -> None:
        async with asyncio.TaskGroup() as tg:
            for i in range(n):
                tg.create_task(one(i))

    await batch(WARM)
    cpu = time.process_time()
    await batch(calls)
    return (time.process_time() - cpu) / calls * 1000


async def _model(url: str, calls: int, concurrency: int) -> float:
    limiter = RateLimiter(max_concurrency=concurrency)
    model = OpenAIChatModel(model="bench", base_url=url, limiter=limiter, max_retries=0)

    async def call(i: int) -> None:
        await model.complete(MESSAGES, seed=i)

    try:
        # The model has its own limiter; the outer one never binds first (same size).
        return await _measure(call, calls=calls, concurrency=concurrency)
    finally:
        await model.aclose()


async def _httpx(url: str, calls: int, concurrency: int) -> float:
    unlimited = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    clients = [httpx.AsyncClient(limits=unlimited, trust_env=True) for _ in range(16)]
    busy = [0] * len(clients)

    async def call(i: int) -> None:
        k = min(range(len(busy)), key=busy.__getitem__)
        busy[k] += 1
        try:
            r = await clients[k].post(f"{url}/chat/completions", content=BODY, headers=HEADERS)
            json.loads(r.content)
        finally:
            busy[k] -= 1

    try:
        return await _measure(call, calls=calls, concurrency=concurrency)
    finally:
        for c in clients:
            await c.aclose()


async def _aiohttp(url: str, calls: int, concurrency: int) -> float:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, trust_env=True) as session:

        async def call(i: int) -> None:
            async with session.post(f"{url}/chat/completions", data=BODY, headers=HEADERS) as r:
                json.loads(await r.read())

        return await _measure(call, calls=calls, concurrency=concurrency)


CLIENTS: dict[str, Callable[[str, int, int], Awaitable[float]]] = {
    "model": _model,
    "httpx": _httpx,
    "aiohttp": _aiohttp,
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    each: dict[str, list[float]] = {name: [] for name in CLIENTS}
    with spawn_test_server(latency=args.latency) as srv:
        for _ in range(args.repeats):
            for name, fn in CLIENTS.items():  # interleaved: the machine's load hits all alike
                each[name].append(asyncio.run(fn(srv.base_url, args.calls, args.concurrency)))
    med = {name: statistics.median(v) for name, v in each.items()}
    return {
        "calls": args.calls,
        "concurrency": args.concurrency,
        "latency_s": args.latency,
        "repeats": args.repeats,
        "cpu_ms_per_call": {name: round(v, 3) for name, v in med.items()},
        "cpu_ms_per_call_each": {name: [round(x, 3) for x in v] for name, v in each.items()},
        "httpx_over_aiohttp": round(med["httpx"] / med["aiohttp"], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latency", type=float, default=0.1)
    p.add_argument("--repeats", type=int, default=3)
    print(json.dumps(run(p.parse_args()), indent=2))


if __name__ == "__main__":
    main()
