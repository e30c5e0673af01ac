"""Benchmark of the skill-script runner; prints one JSON object (medians over repeats).

    python bench/scripts.py [--repeats 5] [--calls 2000]

Per-call microseconds, through ``await runner.run(...)`` with the runner as ``AgentHost``
builds it (``check_every_call=False``, ``new_tick()`` per repeat), for: a sync entrypoint
(inline: a worker thread per call), an async entrypoint (inline: a task per call), thread
isolation, and — fewer calls, they start a Python process each — a plain script (its own
process in every isolation), process isolation and the subprocess tier; ``bare_us`` is the
plain Python call for reference.
``agents_1000_*_calls_per_s``: 1,000 agents calling one entrypoint at once (``asyncio.gather``
over tasks, as a host steps its agents). ``overrun_reported_after_s``: when a sync script
that never returns comes back as timed out under a 0.2 s timeout;
``hung_1000_calls_all_back_s``: when the last of 1,000 concurrent calls of such a script is
back under a 0.5 s timeout (the quarantine abandons the calls still waiting), with
``hung_1000_timeouts`` the calls that overran. ``modules``: how many module objects the
1,000 agents share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCRIPTS = {
    "sync": "def entrypoint(argv, ctx):\n    return 'ok'\n",
    "async_": "async def entrypoint(argv, ctx):\n    return 'ok'\n",
    "plain": "print('ok')\n",
    # Importable only as a script (the guard raises on import): the subprocess tier.
    "sub": "if __name__ != '__main__':\n    raise ImportError('script only')\n"
    "def entrypoint(argv, ctx):\n    return 'never'\nprint('ok')\n",
    "spin": "import os, sys\n\ndef entrypoint(argv, ctx):\n"
    "    while not os.path.exists(argv[0]):\n        pass\n",
}
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def trivial(argv: list[str], ctx: object) -> str:
    return "ok"


async def _per_call_us(
    call: Callable[[], Awaitable[Any]], calls: int, repeats: int, before: Callable[[], None]
) -> float:
    samples = []
    for _ in range(repeats):
        before()
        t0 = time.perf_counter()
        for _ in range(calls):
            await call()
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return round(statistics.median(samples), 1)


async def bench(repeats: int, calls: int) -> dict[str, object]:
    from agentsim.skills.context import SkillScriptContext
    from agentsim.skills.scripts import ScriptRunner

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        skill = root / "skill"
        paths = {}
        for name, text in SCRIPTS.items():
            paths[name] = skill / "scripts" / f"{name}.py"
            paths[name].parent.mkdir(parents=True, exist_ok=True)
            paths[name].write_text(text)

        def ctx_for(agent_id: str) -> SkillScriptContext:
            workspace = root / "agents" / agent_id
            workspace.mkdir(parents=True, exist_ok=True)
            return SkillScriptContext(
                workspace_root=workspace,
                skill_id="custom@skill",
                skill_name="skill",
                skill_dir=skill,
                agent_id=agent_id,
                tick=0,
                time=WHEN,
            )

        runner = ScriptRunner(check_every_call=False)
        ctx = ctx_for("a-0")
        out: dict[str, object] = {"python": sys.version.split()[0]}

        def run(name: str, **kw: Any) -> Callable[[], Awaitable[Any]]:
            return lambda: runner.run(paths[name], ["x"], ctx, **kw)

        t0 = time.perf_counter()
        for _ in range(calls):
            trivial(["x"], ctx)
        out["bare_us"] = round((time.perf_counter() - t0) / calls * 1e6, 3)
        for label, call, n in (
            ("sync_inline_us", run("sync"), calls),
            ("async_inline_us", run("async_"), calls),
            ("plain_us", run("plain"), max(calls // 200, 3)),
            ("sync_thread_us", run("sync", isolation="thread"), calls),
            ("process_us", run("sync", isolation="process"), max(calls // 200, 3)),
            ("subprocess_us", run("sub"), max(calls // 200, 3)),
        ):
            await call()  # import once, outside the measurement
            out[label] = await _per_call_us(call, n, repeats, runner.new_tick)

        agents = [ctx_for(f"agent-{i:04d}") for i in range(1000)]
        for name in ("sync", "async_"):
            rates = []
            for _ in range(repeats):
                runner.new_tick()
                t0 = time.perf_counter()
                async with asyncio.TaskGroup() as tg:
                    for agent in agents:
                        tg.create_task(runner.run(paths[name], [], agent))
                rates.append(len(agents) / (time.perf_counter() - t0))
            out[f"agents_1000_{name.rstrip('_')}_calls_per_s"] = round(statistics.median(rates))
        out["modules"] = runner.stats()["module_count"]

        stop = root / "stop"
        t0 = time.perf_counter()
        hung = await runner.run(paths["spin"], [str(stop)], ctx, timeout=0.2)
        out["overrun_reported_after_s"] = round(time.perf_counter() - t0, 3)
        out["overrun_timed_out"] = hung.timed_out
        agents_runner = ScriptRunner(check_every_call=False)
        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            hung_calls = [
                tg.create_task(agents_runner.run(paths["spin"], [str(stop)], a, timeout=0.5))
                for a in agents
            ]
        out["hung_1000_calls_all_back_s"] = round(time.perf_counter() - t0, 3)
        out["hung_1000_timeouts"] = sum(t.result().timed_out for t in hung_calls)
        stop.touch()  # lets the abandoned threads end
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(bench(args.repeats, args.calls)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
