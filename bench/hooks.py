"""Benchmark of hook dispatch and catalog rendering; prints one JSON object (medians).

    python bench/hooks.py [--repeats 7] [--calls 2000] [--renders 50]

Hook figures go through ``AgentSkillRuntime.run_hooks("pre_step")`` (what ``Agent.step``
calls) for an agent with 5 active skills whose hooks are trivial entrypoints, with the runner
as ``AgentHost`` builds it (``check_every_call=False``; a repeat is a tick: ``new_tick()``
and a new clock time, the step count and tick moving on every call):

- ``hooks_us``: one ``run_hooks``; ``direct_us``: 5 plain calls of the same functions;
  ``overhead_us`` the difference (each sync hook runs on a worker thread that the run can
  walk away from at its timeout: that thread hop is most of it). ``runner_us``: 5
  ``ScriptRunner.run`` calls of the same scripts with a prebuilt context, so
  ``runtime_overhead_us`` is the skill runtime's own share (plan, payload, contexts).
- ``render_us``: ``render_skill_hooks`` of those 5 outcomes (what the agent puts in its
  prompt); ``overhead_with_render_us``: dispatch plus rendering, beyond the scripts' work.
- The same with the suffix ``_per_call_stat``: the default runner, one ``stat`` per call.
- ``render_ms``: rendering ``<available_skills>`` for an agent that sees 10,000 skills with a
  2,000-token budget and a situation query, the catalog cache cleared before every render;
  ``render_cached_us``: the same call served by the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

HOOK = "def entrypoint(argv, ctx):\n    return 'ok'\n"
_VOCAB = [
    "weather",
    "park",
    "coffee",
    "news",
    "bus",
    "train",
    "music",
    "shop",
    "market",
    "school",
    "doctor",
    "gym",
    "running",
    "cooking",
    "budget",
    "friends",
    "family",
    "garden",
    "library",
    "museum",
    "cinema",
    "concert",
    "bakery",
    "pharmacy",
]


def _write_skills(root: Path, n: int, *, hooked: int) -> None:
    for i in range(n):
        folder = root / f"skill-{i:05d}"
        folder.mkdir(parents=True)
        words = " ".join(_VOCAB[(i * k + 3) % len(_VOCAB)] for k in range(1, 9))
        front = f"---\nname: skill-{i:05d}\ndescription: Use for {words} ({i}).\n"
        if i < hooked:
            (folder / "scripts").mkdir()
            (folder / "scripts" / "hook.py").write_text(HOOK)
            front += "hooks:\n  pre_step: scripts/hook.py\n"
        (folder / "SKILL.md").write_text(front + "---\nBody.\n")


async def _hooks(
    tmp: Path, repeats: int, calls: int, *, host_mode: bool = True
) -> dict[str, float]:
    from agentsim.skills.context import SkillScriptContext, safe_env
    from agentsim.skills.hooks import render_skill_hooks
    from agentsim.skills.registry import SkillRegistry
    from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace
    from agentsim.skills.scripts import ScriptRunner

    tmp = tmp / ("host" if host_mode else "call")
    root = tmp / "hooked"
    _write_skills(root, 5, hooked=5)
    reg = SkillRegistry()
    reg.scan_builtin(root)
    ws = tmp / "agent"
    ws.mkdir()
    space = SkillSpace(reg.snapshot(), runner=ScriptRunner(check_every_call=not host_mode))
    rt = AgentSkillRuntime(space, agent_id="a-1", workspace_root=ws)
    for i in range(5):
        await rt.activate(f"skill-{i:05d}")
    start = datetime(2026, 3, 2, 9, 0)
    out = await rt.run_hooks("pre_step", tick=1, time=start, step_count=1)
    assert len(out) == 5 and all(o.ok for o in out), out
    # The same functions, called directly (the module the runner imported is a sibling copy).
    ns: dict[str, object] = {}
    exec(HOOK, ns)
    fn = ns["entrypoint"]
    argv = ["--args-json", "{}"]
    # The ScriptRunner's own share: 5 runner.run calls with a prebuilt context.
    paths = [str(root / f"skill-{i:05d}" / "scripts" / "hook.py") for i in range(5)]
    ctx = SkillScriptContext(
        workspace_root=ws,
        skill_id="built-in@skill-00000",
        skill_name="skill-00000",
        skill_dir=root,
        agent_id="a-1",
        tick=1,
        time=start,
        env=safe_env({}),
    )
    runner = space.runner  # the very runner the hooks use
    cap = rt.hook_output_cap
    hooks_us: list[float] = []
    direct_us: list[float] = []
    runner_us: list[float] = []
    render_us: list[float] = []
    step = 1
    for r in range(repeats):
        # A repeat is a tick: the host calls new_tick() and the clock moves on.
        runner.new_tick()
        when = start + timedelta(minutes=15 * (r + 1))
        t0 = time.perf_counter()
        for _ in range(calls):
            for path in paths:
                await runner.run(path, argv, ctx)
        runner_us.append((time.perf_counter() - t0) / calls * 1e6)
        t0 = time.perf_counter()
        for _ in range(calls):
            step += 1
            out = await rt.run_hooks("pre_step", tick=step, time=when, step_count=step)
        hooks_us.append((time.perf_counter() - t0) / calls * 1e6)
        t0 = time.perf_counter()
        for _ in range(calls):
            render_skill_hooks(out, cap=cap)
        render_us.append((time.perf_counter() - t0) / calls * 1e6)
        t0 = time.perf_counter()
        for _ in range(calls):
            for _ in range(5):
                fn(argv, None)  # type: ignore[operator]
        direct_us.append((time.perf_counter() - t0) / calls * 1e6)
    h, d, r_, g = (statistics.median(x) for x in (hooks_us, direct_us, runner_us, render_us))
    return {
        "hooks_us": round(h, 2),
        "direct_us": round(d, 2),
        "overhead_us": round(h - d, 2),
        "runner_us": round(r_, 2),
        "runtime_overhead_us": round(h - r_, 2),
        "render_us": round(g, 2),
        "overhead_with_render_us": round(h + g - d, 2),
    }


def _render(tmp: Path, repeats: int, renders: int) -> dict[str, float]:
    from agentsim.skills.registry import SkillRegistry
    from agentsim.skills.runtime import AgentSkillRuntime, SkillSpace

    root = tmp / "many"
    _write_skills(root, 10_000, hooked=0)
    reg = SkillRegistry()
    reg.scan_builtin(root)
    space = SkillSpace(reg.snapshot(), catalog_budget_tokens=2000)
    rt = AgentSkillRuntime(space, agent_id="a-1", workspace_root=tmp / "agent")
    situation = "Ana, a nurse who likes running and coffee; position: park-3; weather: rain"
    first = rt.catalog(situation)  # builds the shared index once (not part of a render)
    real_ms: list[float] = []
    cached_us: list[float] = []
    for r in range(repeats):
        total = 0.0
        for i in range(renders):
            # A new situation each time: neither the shared cache nor the agent's kept
            # selection can answer, so this is a full ranking and render.
            fresh = f"{situation} visit {r * renders + i}"
            t0 = time.perf_counter()
            rt.catalog(fresh)
            total += time.perf_counter() - t0
        real_ms.append(total / renders * 1e3)
        rt.catalog(situation)
        t0 = time.perf_counter()
        for _ in range(renders * 100):
            rt.catalog(situation)  # what a step costs while the active set is unchanged
        cached_us.append((time.perf_counter() - t0) / (renders * 100) * 1e6)
    return {
        "render_ms": round(statistics.median(real_ms), 3),
        "render_cached_us": round(statistics.median(cached_us), 3),
        "catalog_tokens": first.tokens,
        "catalog_shown": len(first.shown),
        "catalog_omitted": first.omitted,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--renders", type=int, default=50)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        result: dict[str, object] = {"python": sys.version.split()[0]}
        result["mode"] = "host (check_every_call=False, new_tick() per repeat), as AgentHost"
        result.update(asyncio.run(_hooks(tmp, args.repeats, args.calls)))
        stat = asyncio.run(_hooks(tmp, args.repeats, args.calls, host_mode=False))
        result.update({f"{k}_per_call_stat": v for k, v in stat.items()})
        result.update(_render(tmp, args.repeats, args.renders))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
