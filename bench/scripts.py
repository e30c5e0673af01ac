"""Benchmark of the skill-script runner; prints one JSON object (medians over repeats).

    python bench/scripts.py [--repeats 7] [--calls 20000]

Headline figures use the runner as the engine builds it: ``AgentHost`` makes
``ScriptRunner(check_every_call=False)`` and calls ``new_tick()`` at every tick, so a script
file is stat'ed once per tick, not once per call (here a repeat is a tick). The same figures
for the default runner (one stat per call, what a runner built without options does) carry the
suffix ``_per_call_stat``.

Figures: per-call microseconds of a bare Python call, of the entrypoint tier through
``await runner.run(...)`` (and the overhead between them), of the dynamic wrapper, of thread /
process isolation and of the subprocess tier; calls per second for 1,000 agents calling one
trivial entrypoint concurrently, both straight through the runner and through
``AgentSkillRuntime.call_script`` (what the ``execute_skill_script`` tool calls: resolution,
activation check, context, runner). ``agents_1000_calls_per_s`` runs the 1,000 calls the way
``AgentHost`` steps 1,000 agents (a task per step in an ``asyncio.TaskGroup``); the
``_asyncio_gather`` figures run them through ``asyncio.gather`` (a Task per call), with
the asyncio floor (a gather of 1,000 coroutines that only make the bare call). Also: how
many modules those agents share.
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
from collections.abc import Callable, Coroutine, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

TRIVIAL = "def entrypoint(argv, ctx):\n    return 'ok'\n"
PLAIN = "print('ok')\n"
# Importable only as a script (the guard raises on import), so it takes the subprocess tier.
SUBPROCESS = (
    "if __name__ != '__main__':\n    raise ImportError('script only')\n"
    "def entrypoint(argv, ctx):\n    return 'never'\nprint('ok')\n"
)
SKILL_MD = "---\nname: tool\ndescription: A trivial tool.\nscript: scripts/tool.py\n---\nUse it.\n"
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def trivial(argv: list[str], ctx: object) -> str:
    return "ok"


def _modules_of(script: str) -> int:
    """Module objects holding ``script``: the runner imports it once for the whole process."""
    real = os.path.realpath(script)
    return sum(1 for m in list(sys.modules.values()) if getattr(m, "__file__", None) == real)


def _median(samples: list[float]) -> float:
    return statistics.median(samples)


async def bench(repeats: int, calls: int) -> dict[str, object]:
    from agentsim.skills.context import SkillScriptContext
    from agentsim.skills.registry import SkillRegistry
    from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
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
                time=WHEN,
            )

        host = ScriptRunner(check_every_call=False)  # as AgentHost builds it
        per_call = ScriptRunner()
        ctx = ctx_for("a-0")
        argv = ["x"]
        script = str(paths["trivial"])
        for runner in (host, per_call):
            await runner.run(script, argv, ctx)  # warm the module cache

        async def loop_runner(runner: ScriptRunner) -> float:
            runner.new_tick()  # a repeat is a tick: host mode stats the script once in it
            t0 = time.perf_counter()
            for _ in range(calls):
                await runner.run(script, argv, ctx)
            return (time.perf_counter() - t0) / calls * 1e6

        def loop_bare() -> float:
            t0 = time.perf_counter()
            for _ in range(calls):
                trivial(argv, ctx)
            return (time.perf_counter() - t0) / calls * 1e6

        # Interleaved, so that a noisy neighbour hits every figure alike.
        bare: list[float] = []
        entry: list[float] = []
        entry_stat: list[float] = []
        for _ in range(repeats):
            bare.append(loop_bare())
            entry.append(await loop_runner(host))
            entry_stat.append(await loop_runner(per_call))

        async def per_call_us(path: Path, n: int, **kw: Any) -> float:
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(n):
                    result = await per_call.run(path, argv, ctx, **kw)
                    assert result.ok, result.error
                samples.append((time.perf_counter() - t0) / n * 1e6)
            return _median(samples)

        wrapper_us = await per_call_us(paths["plain"], max(calls // 10, 100))
        thread_us = await per_call_us(paths["trivial"], 200, isolation="thread")
        subprocess_us = await per_call_us(paths["sub"], 5)
        process_us = await per_call_us(paths["trivial"], 3, isolation="process")

        # 1,000 agents: contexts for the runner figures, runtimes for the tool path.
        agents = [ctx_for(f"agent-{i:04d}") for i in range(1000)]
        skill = root / "skills" / "tool"
        (skill / "scripts").mkdir(parents=True)
        (skill / "SKILL.md").write_text(SKILL_MD)
        (skill / "scripts" / "tool.py").write_text(TRIVIAL)
        registry = SkillRegistry()
        registry.scan_builtin(root / "skills")
        space = SkillSpace(registry.snapshot(), runner=ScriptRunner(check_every_call=False))
        runtimes = [
            AgentSkillRuntime(space, agent_id=c.agent_id, workspace_root=c.workspace_root)
            for c in agents
        ]
        for rt in runtimes:
            await rt.activate("tool")

        async def bare_call(c: SkillScriptContext) -> str:
            return trivial(argv, c)

        async def step_like_a_host(coros: Iterable[Coroutine[Any, Any, Any]]) -> list[Any]:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(c) for c in coros]
            return [t.result() for t in tasks]

        async def rate(
            tick: Callable[[], None],
            make: Callable[[int], Coroutine[Any, Any, Any]],
            *,
            eager: bool = False,
        ) -> float:
            tick()
            t0 = time.perf_counter()
            if eager:  # how AgentHost steps its agents: a task per step in a task group
                results = await step_like_a_host(make(i) for i in range(1000))
            else:  # asyncio.gather: one Task per call
                results = await asyncio.gather(*(make(i) for i in range(1000)))
            elapsed = time.perf_counter() - t0
            assert all(r == "ok" or r.ok for r in results)
            return len(results) / elapsed

        imports_before = host.stats()["imports"] + per_call.stats()["imports"]
        floor: list[float] = []
        rates: list[float] = []
        rates_stat: list[float] = []
        rates_rt: list[float] = []
        rates_eager: list[float] = []
        rates_rt_eager: list[float] = []
        for _ in range(repeats):
            rates_eager.append(
                await rate(host.new_tick, lambda i: host.run(script, argv, agents[i]), eager=True)
            )
            rates_rt_eager.append(
                await rate(
                    space.runner.new_tick,
                    lambda i: runtimes[i].call_script("tool", argv, tick=1, time=WHEN),
                    eager=True,
                )
            )
            floor.append(await rate(lambda: None, lambda i: bare_call(agents[i])))
            rates.append(await rate(host.new_tick, lambda i: host.run(script, argv, agents[i])))
            rates_stat.append(
                await rate(per_call.new_tick, lambda i: per_call.run(script, argv, agents[i]))
            )
            rates_rt.append(
                await rate(
                    space.runner.new_tick,
                    lambda i: runtimes[i].call_script("tool", argv, tick=1, time=WHEN),
                )
            )
        imports_after = host.stats()["imports"] + per_call.stats()["imports"]
        stats = per_call.stats()
        modules = _modules_of(script)

    bare_us = _median(bare)
    return {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "repeats": repeats,
        "calls_per_repeat": calls,
        "mode": "host (check_every_call=False, new_tick() per repeat), as AgentHost runs it",
        "bare_call_us": round(bare_us, 3),
        "entrypoint_call_us": round(_median(entry), 3),
        "entrypoint_overhead_us": round(_median(entry) - bare_us, 3),
        "entrypoint_overhead_us_best": round(min(entry) - min(bare), 3),
        "entrypoint_overhead_us_per_call_stat": round(_median(entry_stat) - bare_us, 3),
        "wrapper_call_us": round(wrapper_us, 1),
        "thread_isolation_call_us": round(thread_us, 1),
        "subprocess_call_us": round(subprocess_us, 1),
        "process_isolation_call_us": round(process_us, 1),
        "agents_1000_calls_per_s": round(_median(rates_eager)),
        "agents_1000_calls_per_s_best": round(max(rates_eager)),
        "agents_1000_call_script_per_s_host_stepping": round(_median(rates_rt_eager)),
        "agents_1000_calls_per_s_asyncio_gather": round(_median(rates)),
        "agents_1000_calls_per_s_asyncio_gather_best": round(max(rates)),
        "agents_1000_calls_per_s_per_call_stat": round(_median(rates_stat)),
        "agents_1000_call_script_per_s": round(_median(rates_rt)),
        "agents_1000_call_script_per_s_best": round(max(rates_rt)),
        "gather_1000_bare_calls_per_s": round(_median(floor)),
        "agents_1000_new_imports": imports_after - imports_before,
        "agents_1000_modules": modules,
        "imports_total": stats["imports"],
        "module_cache_entries": stats["module_count"],
        "targets": {
            "entrypoint_overhead_us": 5,
            "wrapper_call_us": 100,
            "agents_1000_calls_per_s": 100_000,
            "agents_1000_modules": 1,
        },
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
