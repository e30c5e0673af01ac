"""Benchmark of the OpenAI-compatible backend against a local server in another process.

    python bench/llm.py [--agents 1000] [--concurrency 256] [--latency 0.05] [--calls 2000]
                        [--rounds 6] [--repeats 3]

Prints one JSON object:

- ``throughput``: ``agents`` concurrent calls (1 step each) through ``OpenAIChatModel`` with
  a ``RateLimiter(max_concurrency=concurrency)`` against a server answering in ``latency`` s.
  Ideal = concurrency / latency calls/s. Each repeat starts a new server and a new model and
  runs ``rounds`` rounds: the first is cold (it opens the connections), the others warm.
  Reported: the median cold round over the repeats, and the median of all warm rounds.
  The agents are stepped as ``AgentHost`` steps them: one task per call in an
  ``asyncio.TaskGroup``.
- ``throughput_tasks``: the same, with one ``asyncio`` task per call, all created before
  any runs (so ~4 ms of task creation delays the first request of each round).
- ``raw_client_throughput``: the same load from bare keep-alive connections on asyncio
  streams (no HTTP library, no limiter), for comparison. Streams read through asyncio's
  plain ``Protocol`` path (a 256 KiB allocation per read), which the model's client avoids.
- ``overhead``: sequential calls against a server answering at once. ``model_median_ms`` is
  the median wall time of ``OpenAIChatModel.complete``; ``raw_median_ms`` the median of the
  same request sent by a bare keep-alive HTTP/1.1 client on asyncio streams (the server's and
  the kernel's share of the round trip). Their difference is the client-side overhead.
- CPU per call: ``client_cpu_us_per_call`` over all rounds (cold ones open the connections)
  and ``client_cpu_us_per_call_warm`` (median warm round); ``server_cpu_us_per_call`` over all
  rounds, less the server process's own start-up and shutdown (``server_startup_cpu_ms``,
  measured on an idle server, would otherwise add ~30 µs to each of the 6,000 calls).

The servers run in child processes (``python -m agentsim.testing.openai_server``) so that
the client's event loop is measured on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterable
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


Rounds = list[tuple[float, float]]
"""(calls/s, client CPU seconds) of each round."""


async def _step_like_a_host(coros: Iterable[Coroutine[Any, Any, object]]) -> list[object]:
    """One task per call in a task group, as ``AgentHost`` steps its agents."""
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(c) for c in coros]
    return [t.result() for t in tasks]


async def throughput(base_url: str, *, agents: int, concurrency: int, rounds: int) -> Rounds:
    """Agents stepped the way ``AgentHost`` steps them (a task per call in a task group)."""
    return await _throughput(base_url, agents, concurrency, rounds, eager=True)


async def throughput_tasks(base_url: str, *, agents: int, concurrency: int, rounds: int) -> Rounds:
    """The same calls with one ``asyncio`` task each, all made before any runs."""
    return await _throughput(base_url, agents, concurrency, rounds, eager=False)


async def _throughput(
    base_url: str, agents: int, concurrency: int, rounds: int, *, eager: bool
) -> Rounds:
    limiter = RateLimiter(max_concurrency=concurrency)
    model = OpenAIChatModel(model="bench", base_url=base_url, limiter=limiter, max_retries=0)
    convs = [
        [MESSAGES[0], {"role": "user", "content": f"agent {i}: what next?"}] for i in range(agents)
    ]
    out: Rounds = []
    try:
        for r in range(rounds):
            cpu = time.process_time()
            start = time.perf_counter()
            if eager:
                calls = (model.complete(c, seed=r * agents + i) for i, c in enumerate(convs))
                await _step_like_a_host(calls)
            else:
                async with asyncio.TaskGroup() as tg:
                    for i, conv in enumerate(convs):
                        tg.create_task(model.complete(conv, seed=r * agents + i))
            out.append((agents / (time.perf_counter() - start), time.process_time() - cpu))
    finally:
        await model.aclose()
    assert limiter.max_in_flight <= concurrency
    return out


async def raw_throughput(base_url: str, *, agents: int, concurrency: int, rounds: int) -> Rounds:
    """The same load sent by bare keep-alive connections: what the machine allows at all."""
    url = urllib.parse.urlsplit(base_url)
    assert url.hostname is not None and url.port is not None
    pool: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    for _ in range(concurrency):
        pool.put_nowait(await asyncio.open_connection(url.hostname, url.port))

    async def one(i: int) -> None:
        body = json.dumps(
            {"model": "bench", "messages": [MESSAGES[0], {"role": "user", "content": f"{i}"}]}
        ).encode()
        head = (
            f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        reader, writer = await pool.get()
        writer.write(head + body)
        headers = await reader.readuntil(b"\r\n\r\n")
        length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        json.loads(await reader.readexactly(length))
        pool.put_nowait((reader, writer))

    out: Rounds = []
    try:
        for _ in range(rounds):
            cpu = time.process_time()
            start = time.perf_counter()
            async with asyncio.TaskGroup() as tg:
                for i in range(agents):
                    tg.create_task(one(i))
            out.append((agents / (time.perf_counter() - start), time.process_time() - cpu))
    finally:
        while not pool.empty():
            _, writer = pool.get_nowait()
            writer.close()
    return out


async def model_latencies(base_url: str, calls: int) -> list[float]:
    model = OpenAIChatModel(model="bench", base_url=base_url, max_retries=0)
    out: list[float] = []
    try:
        for i in range(calls + 50):
            t0 = time.perf_counter()
            await model.complete(MESSAGES, seed=i)
            if i >= 50:  # the first calls open the connection and warm the caches
                out.append(time.perf_counter() - t0)
    finally:
        await model.aclose()
    return out


async def raw_latencies(base_url: str, calls: int) -> list[float]:
    url = urllib.parse.urlsplit(base_url)
    assert url.hostname is not None and url.port is not None
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    out: list[float] = []
    try:
        for i in range(calls + 50):
            body = json.dumps({"model": "bench", "messages": MESSAGES, "seed": i}).encode()
            head = (
                f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode()
            t0 = time.perf_counter()
            writer.write(head + body)
            headers = await reader.readuntil(b"\r\n\r\n")
            length = int(headers.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            if i >= 50:
                out.append(time.perf_counter() - t0)
    finally:
        writer.close()
        await writer.wait_closed()
    return out


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


def _children_cpu() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return children.ru_utime + children.ru_stime


def server_startup_cpu(latency: float, times: int = 3) -> float:
    """CPU seconds a server process takes to start and stop without a request (median)."""
    spent = []
    for _ in range(times):
        cpu = _children_cpu()
        with spawn_test_server(latency=latency):
            pass
        spent.append(_children_cpu() - cpu)
    return statistics.median(spent)


def run_throughput(
    args: argparse.Namespace,
    concurrency: int,
    scenario: Callable[..., Coroutine[Any, Any, Rounds]],
    startup_cpu: float,
) -> dict[str, Any]:
    repeats: list[Rounds] = []
    client_cpu = server_cpu = 0.0
    for _ in range(args.repeats):
        server_cpu0 = _children_cpu()
        with spawn_test_server(latency=args.latency) as base_url:
            cpu1 = time.process_time()
            repeats.append(
                asyncio.run(
                    scenario(
                        base_url, agents=args.agents, concurrency=concurrency, rounds=args.rounds
                    )
                )
            )
            client_cpu += time.process_time() - cpu1
        server_cpu += _children_cpu() - server_cpu0 - startup_cpu
    calls = args.agents * args.rounds * args.repeats
    ideal = concurrency / args.latency
    cold = statistics.median(r[0][0] for r in repeats)
    warm_rounds = [x for r in repeats for x in r[1:]]
    warm = statistics.median(rate for rate, _ in warm_rounds) if warm_rounds else cold
    warm_cpu = statistics.median(cpu for _, cpu in warm_rounds) if warm_rounds else 0.0
    return {
        "agents": args.agents,
        "concurrency": concurrency,
        "server_latency_s": args.latency,
        "ideal_calls_per_s": round(ideal, 1),
        "cold_calls_per_s": round(cold, 1),
        "warm_median_calls_per_s": round(warm, 1),
        "cold_fraction_of_ideal": round(cold / ideal, 4),
        "warm_fraction_of_ideal": round(warm / ideal, 4),
        "rounds_calls_per_s": [[round(rate, 1) for rate, _ in r] for r in repeats],
        # CPU per call tells where the time goes when the machine, not the model, is the
        # bottleneck (see the module's docstring).
        "client_cpu_us_per_call": round(client_cpu / calls * 1e6, 1),
        "client_cpu_us_per_call_warm": round(warm_cpu / args.agents * 1e6, 1),
        "server_cpu_us_per_call": round(server_cpu / calls * 1e6, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--rounds", type=int, default=6, help="per repeat; the first is cold")
    parser.add_argument("--repeats", type=int, default=3, help="new server and model each")
    parser.add_argument("--calls", type=int, default=2000, help="sequential calls (overhead)")
    args = parser.parse_args()

    result: dict[str, Any] = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "loadavg_1m_at_start": round(os.getloadavg()[0], 2),
    }
    startup_cpu = server_startup_cpu(args.latency)
    result["server_startup_cpu_ms"] = round(startup_cpu * 1000, 1)
    for concurrency in sorted({args.concurrency, 64}, reverse=True):
        key = "throughput" if concurrency == args.concurrency else f"throughput_c{concurrency}"
        result[key] = run_throughput(args, concurrency, throughput, startup_cpu)
    result["throughput_tasks"] = run_throughput(
        args, args.concurrency, throughput_tasks, startup_cpu
    )
    result["raw_client_throughput"] = run_throughput(
        args, args.concurrency, raw_throughput, startup_cpu
    )
    with spawn_test_server(latency=0.0) as base_url:
        c0 = time.process_time()
        raw = asyncio.run(raw_latencies(base_url, args.calls))
        c1 = time.process_time()
        lat = asyncio.run(model_latencies(base_url, args.calls))
        c2 = time.process_time()
        raw_again = asyncio.run(raw_latencies(base_url, args.calls))
    raw_median = statistics.median(raw + raw_again)
    model_median = statistics.median(lat)
    result["overhead"] = {
        "calls": args.calls,
        "model_median_ms": _ms(model_median),
        "model_p90_ms": _ms(statistics.quantiles(lat, n=10)[-1]),
        "raw_median_ms": _ms(raw_median),
        "client_overhead_median_ms": _ms(model_median - raw_median),
        "sequential_calls_per_s": round(len(lat) / sum(lat), 1),
        "model_cpu_us_per_call": round((c2 - c1) / (args.calls + 50) * 1e6, 1),
        "raw_cpu_us_per_call": round((c1 - c0) / (args.calls + 50) * 1e6, 1),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
