"""Model-bound efficiency: how busy a run keeps a slow model server. Prints JSON.

    python bench/efficiency.py [--agents 2000] [--ticks 6] [--concurrency 256]
                               [--latency 1.0] [--sigma 0.8] [--repeats 1]
                               [--schedules barrier,dependencies]

Each repeat runs every schedule of ``--schedules`` (``executor.schedule``) in turn, so
that both meet the same machine load; ``schedules`` reports each one's median run and
``slot_share_ratio`` the second over the first.

The experiment is ``experiments/daily-mobility.yaml`` scaled to ``--agents`` (the groups
keep their shares), ``--ticks`` ticks of its first ``run`` step, and ``backend: openai``
against the test server (``python -m agentsim.testing.openai_server --answer scripted``),
which answers what the offline scripted model would, after ``--latency`` seconds (with
``--sigma`` > 0, a seeded lognormal time of that median, as a real server's answers vary).
``slot_share`` is the share of the run's slot-seconds (``max_concurrency`` x wall time) that
the server spent answering; ``efficiency_run`` is the call rate over
``max_concurrency / mean answer time``.

Placement: the server runs in a child process, the engine (and this script) in this one, so
the engine's event loop never shares its thread with the server's. The machine may have only
two cores: neither process is pinned, and both processes' CPU seconds are reported, so that a
reader can tell whether a core was saturated (``cpu_share`` near 1.0).

Where the rest goes is measured, not guessed. The server keeps when each request arrived
and was answered (``--timeline``); this process samples the limiter (slots taken, requests
waiting for one) every 10 ms. Each slot-second the run could have used but did not is put in
one bucket:

- ``setup``: before the first tick's agents start (agents, profiles, skills, connections);
- ``between_ticks``: after a tick's last step until the next tick's agents start (events,
  environment, metrics, checkpoints) and after the last tick until the run ends;
- ``tick_start``: from a tick's start to its first request at the server (the agents run
  their pre-step hooks and build their first prompts);
- ``tick_tail``: during a tick, while no request waited for a slot (fewer agents had a call
  to make than there are slots: mostly the tick's last calls);
- ``client``: during a tick, while requests waited for a slot, yet the server held fewer
  than ``max_concurrency`` (a slot taken by a request not yet at the server, or already
  answered but not yet given back: client CPU, event-loop delay);
- ``server_over_latency``: what the server's answers took beyond ``--latency``.

``steps.barrier_bound_per_tick`` is the best a tick could do with these steps: their calls
are sequential and the tick ends with its longest step (see ``_step_shape``).
``--fifo`` and ``--start-all`` put back the limiter's and the host's former behaviour, to
measure what each change buys in the same session.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from _mobility import daily_mobility

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import agentsim.hosts.host as host_module  # noqa: E402
from agentsim.config.experiment import parse_experiment  # noqa: E402
from agentsim.hosts.local import LocalExecutor  # noqa: E402
from agentsim.llm.limiter import RateLimiter  # noqa: E402
from agentsim.llm.openai import OpenAIChatModel  # noqa: E402
from agentsim.run.engine import Engine  # noqa: E402

SAMPLE_EVERY = 0.01


def _experiment(
    agents: int,
    ticks: int,
    concurrency: int,
    base_url: str,
    out: Path,
    schedule: str,
    max_lead: int = 4,
) -> str:
    doc = daily_mobility(agents, ticks, concurrency, base_url, out)
    doc["executor"] = {**doc.get("executor", {}), "schedule": schedule, "max_lead": max_lead}
    return yaml.safe_dump(doc, sort_keys=False)


class _Server:
    """``python -m agentsim.testing.openai_server`` in a child process."""

    def __init__(self, latency: float, sigma: float) -> None:
        cmd = [
            sys.executable,
            "-m",
            "agentsim.testing.openai_server",
            f"--latency={latency}",
            f"--latency-sigma={sigma}",
            "--answer=scripted",
            "--timeline",
            "--stop-on-stdin-eof",
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.base_url = str(info["base_url"])
        self.port = int(info["port"])

    def get(self, path: str) -> Any:
        r = httpx.get(f"http://127.0.0.1:{self.port}{path}", trust_env=False, timeout=60)
        r.raise_for_status()
        return r.json()

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _busy_seconds(timeline: list[list[float]], start: float, end: float) -> float:
    """Slot-seconds the server spent on requests, clipped to [start, end]."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in timeline)


def _one_run(args: argparse.Namespace, tmp: Path, schedule: str) -> dict[str, Any]:
    server = _Server(args.latency, args.sigma)
    try:
        return _measure(args, tmp, server, schedule)
    finally:
        server.stop()


def _measure(args: argparse.Namespace, tmp: Path, server: _Server, schedule: str) -> dict[str, Any]:
    text = _experiment(
        args.agents,
        args.ticks,
        args.concurrency,
        server.base_url,
        tmp / "ws",
        schedule,
        args.max_lead,
    )
    cfg = parse_experiment(text, base_dir=ROOT / "experiments", environ={})
    executor = LocalExecutor()
    engine = Engine(cfg, run_dir=tmp / "run", executor=executor, stop=threading.Event())
    phases: list[tuple[float, float]] = []  # each tick's agent phase (barrier)
    # By dependencies the ticks overlap: one agent phase, from the first steps started
    # to the last ones collected.
    start_steps, collect = executor.start_steps, executor.collect
    span: list[float] = []
    began: list[float] = []

    async def timed_start_steps(tick: Any, by_host: Any = None) -> None:
        t = time.monotonic()
        (began if by_host is None else span).append(t)
        await start_steps(tick, by_host)

    async def timed_collect(host: int | None = None, *, wait_all: bool = False) -> Any:
        done = await collect(host, wait_all=wait_all)
        if wait_all:  # barrier: the tick's every step started at began[-1] is in
            phases.append((began[-1], time.monotonic()))
        else:
            span.append(time.monotonic())
        return done

    executor.start_steps = timed_start_steps  # type: ignore[method-assign]
    executor.collect = timed_collect  # type: ignore[method-assign]
    checkpoint_s: list[float] = []
    write_checkpoint = engine.checkpoint

    async def timed_checkpoint() -> Path:
        t = time.monotonic()
        try:
            return await write_checkpoint()
        finally:
            checkpoint_s.append(time.monotonic() - t)

    engine.checkpoint = timed_checkpoint  # type: ignore[method-assign]
    samples: list[tuple[float, int, int]] = []

    async def sample() -> None:
        while True:
            hosts = getattr(executor, "hosts", None) or []
            for host in hosts[:1]:
                model = host.model
                if isinstance(model, OpenAIChatModel) and model.limiter is not None:
                    lim = model.limiter
                    samples.append((time.monotonic(), lim.in_flight, lim.waiting))
            await asyncio.sleep(SAMPLE_EVERY)

    async def main() -> Any:
        sampler = asyncio.create_task(sample())
        try:
            return await engine.run()
        finally:
            sampler.cancel()

    if args.fifo:  # what the limiter did before: every request in arrival order
        RateLimiter._count_request = lambda self: 0  # type: ignore[method-assign]
    if args.start_all:  # what the host did before: every step started in one go
        host_module.START_BATCH = 10**9
    cpu0, srv_cpu0 = time.process_time(), server.cpu_seconds()
    t0 = time.monotonic()
    summary = asyncio.run(main())
    t1 = time.monotonic()
    if span:
        phases.append((min(span), max(span)))
    cpu, srv_cpu = time.process_time() - cpu0, server.cpu_seconds() - srv_cpu0
    timeline = server.get("/_timeline")["timeline"]
    if args.dump:
        dump = {"t0": t0, "t1": t1, "phases": phases, "samples": samples, "timeline": timeline}
        Path(args.dump).write_text(json.dumps(dump))
    served = server.get("/_stats")["served"]
    return _report(args, summary, timeline, served, phases, samples, checkpoint_s, t0, t1) | {
        "schedule": schedule,
        "engine_cpu_s": round(cpu, 2),
        "engine_cpu_ms_per_call": round(cpu / max(1, summary.metrics["model_calls"]) * 1000, 3),
        "server_cpu_s": round(srv_cpu, 2),
        "engine_cpu_share": round(cpu / (t1 - t0), 3),
        "server_cpu_share": round(srv_cpu / (t1 - t0), 3),
        "steps": _step_shape(tmp / "run" / "agents", args.concurrency),
    }


def _report(
    args: argparse.Namespace,
    summary: Any,
    timeline: list[list[float]],
    served: int,
    phases: list[tuple[float, float]],
    samples: list[tuple[float, int, int]],
    checkpoint_s: list[float],
    t0: float,
    t1: float,
) -> dict[str, Any]:
    slots = args.concurrency
    # The mean answer time: a lognormal's mean lies above its median.
    lat = args.latency * math.exp(args.sigma**2 / 2)
    ideal = slots / lat
    wall = t1 - t0
    calls = summary.metrics["model_calls"]
    per_tick = []
    for a, b in phases:
        n = sum(1 for s, _ in timeline if a <= s <= b)
        per_tick.append(
            {"seconds": round(b - a, 2), "calls": n, "efficiency": (n / (b - a)) / ideal}
        )
    lost = {"setup": slots * (phases[0][0] - t0) - _busy_seconds(timeline, t0, phases[0][0])}
    gaps = [(phases[i][1], phases[i + 1][0]) for i in range(len(phases) - 1)]
    gaps.append((phases[-1][1], t1))
    lost["between_ticks"] = sum(slots * (b - a) - _busy_seconds(timeline, a, b) for a, b in gaps)
    # From a tick's start to its first request at the server, the agents build their
    # first prompts (and run their pre-step hooks): the model waits.
    firsts = [min((s for s, _ in timeline if a <= s <= b), default=b) for a, b in phases]
    lost["tick_start"] = sum(slots * (f - a) for f, (a, _) in zip(firsts, phases, strict=True))
    tail = client = 0.0
    for i in range(len(samples) - 1):
        t, _, waiting = samples[i]
        t_next = samples[i + 1][0]
        if not any(f <= t < b for f, (_, b) in zip(firsts, phases, strict=True)):
            continue
        idle = slots * (t_next - t) - _busy_seconds(timeline, t, t_next)
        if waiting:
            client += idle
        else:
            tail += idle
    lost["tick_tail"] = tail
    lost["client"] = client
    # A served request takes its drawn time by design (``lat`` on average); what it took
    # beyond is server overhead.
    lost["server_over_latency"] = sum(b - a for a, b in timeline) - lat * len(timeline)
    # How late the 10 ms sampler woke up during ticks: the engine's event-loop delay.
    lags = [
        (samples[i + 1][0] - samples[i][0] - SAMPLE_EVERY) * 1000
        for i in range(len(samples) - 1)
        if any(a <= samples[i][0] < b for a, b in phases)
    ]
    q = statistics.quantiles(lags, n=100) if len(lags) > 1 else [0.0] * 99
    capacity = slots * wall
    return {
        "agents": args.agents,
        "ticks": args.ticks,
        "max_concurrency": slots,
        "latency_median_s": args.latency,
        "latency_sigma": args.sigma,
        "latency_mean_s": round(lat, 3),
        "slot_share": round(_busy_seconds(timeline, t0, t1) / (slots * wall), 3),
        "ideal_calls_per_s": ideal,
        "status": summary.status,
        "model_calls": calls,
        "served": served,
        "errors": summary.metrics["errors"],
        "calls_per_step": round(calls / summary.metrics["agent_steps"], 3),
        "wall_s": round(wall, 2),
        "calls_per_s": round(calls / wall, 1),
        "efficiency_run": round(calls / wall / ideal, 3),
        "efficiency_median_tick": round(statistics.median(t["efficiency"] for t in per_tick), 3),
        "ticks_detail": [t | {"efficiency": round(t["efficiency"], 3)} for t in per_tick],
        "setup_s": round(phases[0][0] - t0, 2),
        "tick_start_s": [round(f - a, 3) for f, (a, _) in zip(firsts, phases, strict=True)],
        "between_ticks_s": [round(b - a, 3) for a, b in gaps],
        "checkpoint_s": [round(x, 3) for x in checkpoint_s],
        "loop_lag_ms": {"p50": round(q[49], 1), "p95": round(q[94], 1), "max": round(max(lags), 1)},
        # Shares of the run's slot-seconds (slots x wall) that were not used, by cause.
        "lost_share": {k: round(v / capacity, 4) for k, v in lost.items()},
    }


def _rounds_needed(chains: list[int], slots: int) -> int:
    """The fewest model latencies in which ``slots`` slots can serve steps that each make
    ``chains[i]`` calls one after the other: each round serves the steps with the most
    calls left (optimal for chains of equal-length calls: Hu, 1961)."""
    left = sorted((c for c in chains if c > 0), reverse=True)
    rounds = 0
    while left:
        served = [c - 1 for c in left[:slots]]
        left = sorted([c for c in served + left[slots:] if c > 0], reverse=True)
        rounds += 1
    return rounds


def _step_shape(agents_dir: Path, slots: int) -> dict[str, Any]:
    """Calls per step, step durations and the tick barrier's own bound, from the agents'
    trace files. ``barrier_bound`` is the best efficiency a tick's steps allow with
    ``slots`` slots and a fixed latency: a step's calls are sequential, and a tick ends
    when its longest step does."""
    by_tick: dict[int, list[int]] = {}
    seconds: list[float] = []
    for trace in agents_dir.glob("*/trace.jsonl"):
        for line in trace.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if "model_calls" in rec:
                by_tick.setdefault(int(rec["tick"]), []).append(int(rec["model_calls"]))
                seconds.append(float(rec.get("elapsed_ms", 0.0)) / 1000)
    if not by_tick:
        return {}
    calls = [c for chains in by_tick.values() for c in chains]
    hist = {str(k): calls.count(k) for k in sorted(set(calls))}
    q = statistics.quantiles(seconds, n=20)
    bounds = [
        sum(chains) / (slots * _rounds_needed(chains, slots))
        for _, chains in sorted(by_tick.items())
    ]
    return {
        "calls_per_step_histogram": hist,
        "step_s_median": round(statistics.median(seconds), 2),
        "step_s_p95": round(q[-1], 2),
        "step_s_max": round(max(seconds), 2),
        "barrier_bound_per_tick": [round(b, 3) for b in bounds],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=2000)
    p.add_argument("--ticks", type=int, default=6)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--latency", type=float, default=1.0, help="median answer time (s)")
    p.add_argument("--sigma", type=float, default=0.0, help="lognormal sigma (0: fixed)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--max-lead", type=int, default=4, help="executor.max_lead (dependencies)")
    p.add_argument("--schedules", default="barrier,dependencies", help="run in turn, each repeat")
    p.add_argument("--fifo", action="store_true", help="compare: slots in arrival order")
    p.add_argument("--start-all", action="store_true", help="compare: start all steps at once")
    p.add_argument("--dump", help="write the raw timeline and limiter samples to this JSON file")
    args = p.parse_args()
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in schedules}
    for _ in range(args.repeats):
        for schedule in schedules:
            tmp = Path(tempfile.mkdtemp(prefix="agentsim-eff-"))
            try:
                runs[schedule].append(_one_run(args, tmp, schedule))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    out: dict[str, Any] = {
        "load_average_at_end": os.getloadavg()[0],
        "variant": {"fifo": args.fifo, "start_all": args.start_all},
        "schedules": {},
    }
    for schedule, each in runs.items():
        best = sorted(each, key=lambda r: r["slot_share"])[len(each) // 2]
        out["schedules"][schedule] = {
            "slot_share_each": [r["slot_share"] for r in each],
            "efficiency_run_each": [r["efficiency_run"] for r in each],
            "wall_s_each": [r["wall_s"] for r in each],
            "median_run": best,
        }
    if len(schedules) == 2:
        a, b = (out["schedules"][s]["median_run"] for s in schedules)
        out["slot_share_ratio"] = round(b["slot_share"] / a["slot_share"], 3)
        out["wall_ratio"] = round(b["wall_s"] / a["wall_s"], 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
