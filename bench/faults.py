"""What retryable model faults cost a run, and that they change nothing in it.

    python bench/faults.py [--agents 200] [--ticks 3] [--latency 0.2] [--fault-rate 0.1]

Runs daily-mobility twice against the test server (in a child process, answering as the
offline scripted model would, so that steps activate skills and run scripts over several
calls): once fault-free, once with ``fault-rate`` of the answers replaced by a retryable
fault (429 with Retry-After, 500, 503, dropped connection). Reports the retries, the wall
time of each run and their ratio, and whether ``events.jsonl`` and every agent's trace are
identical (they must be: a retried call gets the same answer).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentsim.config.experiment import ExperimentConfig, parse_experiment
from agentsim.run.engine import Engine
from agentsim.testing.openai_server import spawn_test_server

ROOT = Path(__file__).resolve().parents[1]


def config(base_url: str, *, agents: int, ticks: int, concurrency: int) -> ExperimentConfig:
    data = yaml.safe_load((ROOT / "experiments" / "daily-mobility.yaml").read_text())
    data.pop("workflow", None)
    data["ticks"] = ticks
    total = sum(g["count"] for g in data["agents"])
    for group in data["agents"]:
        group["count"] = max(1, round(group["count"] * agents / total))
    data["skills"]["paths"] = [str(ROOT / "custom" / "skills")]
    data["model"] = {
        "backend": "openai",
        "model": "bench",
        "base_url": base_url,
        "max_concurrency": concurrency,
        "max_retries": 10,
        "timeout": 30,
    }
    return parse_experiment(yaml.safe_dump(data), base_dir=ROOT, environ={})


def _timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in ("elapsed", "elapsed_ms")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _traces(run: Path) -> dict[str, list[Any]]:
    return {
        d.name: [_timeless(json.loads(x)) for x in (d / "trace.jsonl").read_text().splitlines()]
        for d in sorted((run / "agents").iterdir())
        if (d / "trace.jsonl").exists()
    }


def one_run(args: argparse.Namespace, run_dir: Path, fault_rate: float) -> dict[str, Any]:
    with spawn_test_server(
        latency=args.latency, fault_rate=fault_rate, seed=args.seed, answer="scripted"
    ) as srv:
        cfg = config(
            srv.base_url, agents=args.agents, ticks=args.ticks, concurrency=args.concurrency
        )
        started = time.perf_counter()
        result = asyncio.run(Engine(cfg, run_dir=run_dir, stop=threading.Event()).run())
        wall = time.perf_counter() - started
        server = srv.stats()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    return {
        "status": result.status,
        "wall_s": round(wall, 3),
        "model_calls": metrics["model_calls"],
        "retries": sum(m["retries"] for m in metrics["model"]),
        "errors": metrics["errors"],
        "degraded": metrics["degraded"],
        "server_requests": server["requests"],
        "server_faults": server["faults"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=200)
    p.add_argument("--ticks", type=int, default=3)
    p.add_argument("--latency", type=float, default=0.2)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--fault-rate", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clean = one_run(args, Path(tmp) / "clean", 0.0)
        faulty = one_run(args, Path(tmp) / "faulty", args.fault_rate)
        same_events = (Path(tmp) / "clean" / "events.jsonl").read_bytes() == (
            Path(tmp) / "faulty" / "events.jsonl"
        ).read_bytes()
        same_traces = _traces(Path(tmp) / "clean") == _traces(Path(tmp) / "faulty")
    report = {
        "agents": args.agents,
        "ticks": args.ticks,
        "latency_s": args.latency,
        "max_concurrency": args.concurrency,
        "fault_rate": args.fault_rate,
        "clean": clean,
        "faulty": faulty,
        "wall_ratio": round(faulty["wall_s"] / clean["wall_s"], 3),
        "events_identical": same_events,
        "traces_identical": same_traces,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
