"""How well the model client keeps a slow server busy.

    python bench/llm.py [--calls 4096] [--concurrency 64] [--latency 0.25] [--repeats 3]

``calls`` concurrent calls (one asyncio task each) go through ``OpenAIChatModel`` with a
``RateLimiter(max_concurrency=concurrency)`` to the test server answering after ``latency``
seconds, run in a child process so that the client's event loop is measured on its own.
The ideal rate is ``concurrency / latency`` calls/s; the figure reported is the achieved
rate over that ideal (``efficiency``: 1.0 means the limiter's slots never sit idle), the
median of ``repeats`` runs, each with a new model (so its first requests open connections).
Also reported: the median of sequential calls against a server answering at once
(``call_overhead_ms``: what the client, server and loopback add to each call).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentsim.llm.limiter import RateLimiter
from agentsim.llm.openai import OpenAIChatModel
from agentsim.testing.openai_server import spawn_test_server

MESSAGES = [
    {"role": "system", "content": "You are agent 0 of a simulated city. " * 8},
    {"role": "user", "content": "It is 08:15. What do you do next?"},
]


async def _concurrent(base_url: str, *, calls: int, concurrency: int) -> float:
    """Achieved calls/s of ``calls`` concurrent calls under the limiter."""
    limiter = RateLimiter(max_concurrency=concurrency)
    model = OpenAIChatModel(model="bench", base_url=base_url, limiter=limiter, max_retries=0)
    try:
        started = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(calls):
                tg.create_task(model.complete(MESSAGES, seed=i))
        elapsed = time.perf_counter() - started
    finally:
        await model.aclose()
    return calls / elapsed


async def _sequential(base_url: str, *, calls: int) -> float:
    """Median milliseconds of one call, calls made one after the other."""
    model = OpenAIChatModel(model="bench", base_url=base_url, max_retries=0)
    times = []
    try:
        await model.complete(MESSAGES)  # opens the connection
        for i in range(calls):
            started = time.perf_counter()
            await model.complete(MESSAGES, seed=i)
            times.append(time.perf_counter() - started)
    finally:
        await model.aclose()
    return statistics.median(times) * 1000


def run(args: argparse.Namespace) -> dict[str, Any]:
    ideal = args.concurrency / args.latency
    rates = []
    with spawn_test_server(latency=args.latency) as srv:
        for _ in range(args.repeats):
            rates.append(
                asyncio.run(
                    _concurrent(srv.base_url, calls=args.calls, concurrency=args.concurrency)
                )
            )
        served = srv.stats()["served"]
    with spawn_test_server(latency=0.0) as srv:
        overhead = asyncio.run(_sequential(srv.base_url, calls=args.sequential))
    rate = statistics.median(rates)
    return {
        "calls": args.calls,
        "concurrency": args.concurrency,
        "latency_s": args.latency,
        "repeats": args.repeats,
        "ideal_calls_per_s": round(ideal, 1),
        "calls_per_s": round(rate, 1),
        "calls_per_s_each": [round(r, 1) for r in rates],
        "efficiency": round(rate / ideal, 3),
        "served": served,
        "call_overhead_ms": round(overhead, 3),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=4096)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--latency", type=float, default=0.25)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sequential", type=int, default=200)
    print(json.dumps(run(p.parse_args()), indent=2))


if __name__ == "__main__":
    main()
