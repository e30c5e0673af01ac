"""What running sync skill code on worker threads costs an offline run. Prints JSON.

    python bench/handoff.py                       # 10,000 agents x 4 ticks, 3 pairs
    python bench/handoff.py --agents 2000 --repeats 5

Two figures:
- the round trip of a call that does nothing: agentsim's worker pool (which lets a run walk
  away from a script past its timeout) and ``asyncio``'s ``run_in_executor``, medians of
  batches;
- the offline engine bench (``bench/engine.py``'s experiment, one child process a run), as
  shipped and in a measurement build that calls scripts inline on the event loop's thread,
  alternated. The inline build is what agentsim refuses to ship: a script that never returns
  would hang the run. It shows the price of that guarantee, nothing more.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _engine_bench() -> Any:
    spec = importlib.util.spec_from_file_location("engine_bench", HERE / "engine.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def _round_trips(batches: int, calls: int) -> dict[str, float]:
    from agentsim.skills.scripts.inprocess import run_in_thread

    loop = asyncio.get_running_loop()

    def nothing() -> None:
        return None

    async def pool() -> None:
        await run_in_thread(nothing, limit=10.0)

    async def executor() -> None:
        await loop.run_in_executor(None, nothing)

    out: dict[str, float] = {}
    for name, call in (("worker_pool_us", pool), ("run_in_executor_us", executor)):
        for _ in range(100):  # threads started, caches warm
            await call()
        per_call = []
        for _ in range(batches):
            t = time.perf_counter()
            for _ in range(calls):
                await call()
            per_call.append((time.perf_counter() - t) / calls * 1e6)
        out[name] = round(statistics.median(per_call), 1)
    return out


def _child(args: argparse.Namespace) -> None:
    if args.inline:
        import contextvars

        from agentsim.skills.scripts import inprocess

        async def inline(call: Any, *, limit: float) -> Any:
            return contextvars.copy_context().run(call)

        inprocess.run_in_thread = inline  # type: ignore[assignment]
    ns = argparse.Namespace(
        tmp=args.tmp,
        agents=args.agents,
        ticks=args.ticks,
        skills=10,
        executor="local",
        hosts=1,
        checkpoint=False,
        storage=False,
    )
    _engine_bench()._child(ns)


def _run(args: argparse.Namespace, inline: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="agentsim-handoff-") as tmp:
        cmd = [sys.executable, __file__, "--child", "--tmp", tmp]
        cmd += ["--agents", str(args.agents), "--ticks", str(args.ticks)]
        if inline:
            cmd.append("--inline")
        t = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        elapsed = time.perf_counter() - t
    if done.returncode != 0:
        raise SystemExit(
            f"bench child failed ({'inline' if inline else 'shipped'}):\n{done.stderr}"
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = round(elapsed, 2)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--ticks", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3, help="pairs of runs, alternated")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tmp", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        _child(args)
        return
    report: dict[str, Any] = {"round_trip": asyncio.run(_round_trips(batches=9, calls=2000))}
    runs: dict[str, list[dict[str, Any]]] = {"shipped": [], "inline": []}
    for i in range(args.repeats):
        print(f"pair {i + 1}/{args.repeats}", file=sys.stderr, flush=True)
        for name in ("shipped", "inline"):
            runs[name].append(_run(args, inline=name == "inline"))
    for name, rs in runs.items():
        report[name] = {
            "wall_s": [r["wall_s"] for r in rs],
            "wall_s_median": statistics.median(r["wall_s"] for r in rs),
            "steady_tick_s_median": statistics.median(t for r in rs for t in r["tick_s"][1:]),
            "errors": sum(r["errors"] for r in rs),
        }
    report["inline_over_shipped_wall"] = round(
        report["inline"]["wall_s_median"] / report["shipped"]["wall_s_median"], 2
    )
    report["agents"], report["ticks"], report["repeats"] = args.agents, args.ticks, args.repeats
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
