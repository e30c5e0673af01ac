"""Benchmark of the skill-script runner; prints one JSON object (medians over repeats).

    python bench/scripts.py [--repeats 7] [--calls 20000]

Figures: per-call microseconds of a bare Python call, of the entrypoint tier (and the
overhead between them), of the dynamic wrapper, of thread / process isolation and of the
subprocess tier; calls per second for 1,000 agents calling one entrypoint concurrently
(``asyncio.gather`` of 1,000 coroutines); and how many modules those agents share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

TRIVIAL = "def entrypoint(argv, ctx):\n    return 'ok'\n"
PLAIN = "print('ok')\n"
# Importable only as a script (the guard raises on import), so it takes the subprocess tier.
SUBPROCESS = (
    "if __name__ != '__main__':\n    raise ImportError('script only')\n"
    "def entrypoint(argv, ctx):\n    return 'never'\nprint('ok')\n"
)


def trivial(argv: list[str], ctx: object) -> str:
    return "ok"


async def bench(repeats: int, calls: int) -> dict[str, object]:
    from agentsim.skills.context import SkillScriptContext
    from agentsim.skills.scripts import ScriptRunner

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        paths = {}
        for name, text in (("trivial", TRIVIAL), ("plain", PLAIN), ("sub", SUBPROCESS)):
            paths[name] = root / f"{name}.py"
            paths[name].write_text(text)

        def ctx_for(agent_id: str) -> SkillScriptContext:
            workspace = root / "agents" / agent_id
            workspace.mkdir(parents=True, exist_ok=True)
            return SkillScriptContext(
                workspace_root=workspace,
                skill_id="custom@bench",
                skill_name="bench",
                skill_dir=root,
                agent_id=agent_id,
                tick=0,
                time=datetime(2026, 1, 1, tzinfo=UTC),
            )

        runner = ScriptRunner()
        ctx = ctx_for("a-0")
        argv = ["x"]
        script = paths["trivial"]
        await runner.run(script, argv, ctx)  # warm the module cache

        bare, entry = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(calls):
                trivial(argv, ctx)
            bare.append((time.perf_counter() - t0) / calls * 1e6)
            t0 = time.perf_counter()
            for _ in range(calls):
                await runner.run(script, argv, ctx)
            entry.append((time.perf_counter() - t0) / calls * 1e6)

        # Host mode (what AgentHost uses): one stat per script per tick, not per call.
        host_runner = ScriptRunner(check_every_call=False)
        await host_runner.run(script, argv, ctx)
        host_entry = []
        for _ in range(repeats):
            host_runner.new_tick()
            t0 = time.perf_counter()
            for _ in range(calls):
                await host_runner.run(script, argv, ctx)
            host_entry.append((time.perf_counter() - t0) / calls * 1e6)

        async def per_call_us(path: Path, n: int, **kw: object) -> float:
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(n):
                    result = await runner.run(path, argv, ctx, **kw)  # type: ignore[arg-type]
                    assert result.ok, result.error
                samples.append((time.perf_counter() - t0) / n * 1e6)
            return statistics.median(samples)

        wrapper_us = await per_call_us(paths["plain"], max(calls // 10, 100))
        thread_us = await per_call_us(script, 200, isolation="thread")
        subprocess_us = await per_call_us(paths["sub"], 5)
        process_us = await per_call_us(script, 3, isolation="process")

        agents = [ctx_for(f"agent-{i:04d}") for i in range(1000)]

        async def bare_call(c: SkillScriptContext) -> str:
            return trivial(argv, c)

        # The floor set by asyncio itself: gather of 1,000 coroutines that do nothing.
        floor = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            await asyncio.gather(*(bare_call(c) for c in agents))
            floor.append(len(agents) / (time.perf_counter() - t0))
        imports_before = runner.stats()["imports"]
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            results = await asyncio.gather(*(runner.run(script, argv, c) for c in agents))
            rates.append(len(results) / (time.perf_counter() - t0))
            assert all(r.ok for r in results)
        stats = runner.stats()

    bare_us = statistics.median(bare)
    entry_us = statistics.median(entry)
    return {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "repeats": repeats,
        "calls_per_repeat": calls,
        "bare_call_us": round(bare_us, 3),
        "entrypoint_call_us": round(entry_us, 3),
        "entrypoint_overhead_us": round(entry_us - bare_us, 3),
        # Best repeat, for a loaded machine where the median mostly measures the neighbours.
        "entrypoint_overhead_us_best": round(min(entry) - min(bare), 3),
        "entrypoint_overhead_us_host_mode": round(statistics.median(host_entry) - bare_us, 3),
        "wrapper_call_us": round(wrapper_us, 1),
        "thread_isolation_call_us": round(thread_us, 1),
        "subprocess_call_us": round(subprocess_us, 1),
        "process_isolation_call_us": round(process_us, 1),
        "agents_1000_calls_per_s": round(statistics.median(rates)),
        "agents_1000_calls_per_s_best": round(max(rates)),
        "gather_1000_bare_calls_per_s": round(statistics.median(floor)),
        "agents_1000_new_imports": stats["imports"] - imports_before,
        "imports_total": stats["imports"],
        "module_count": stats["module_count"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(bench(args.repeats, args.calls)), indent=2))


if __name__ == "__main__":
    # Run from a checkout without installing: the repository root holds the package.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
