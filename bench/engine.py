"""Engine throughput and memory: agent-steps/s, memory per resident agent, skill-count
independence, local vs Ray, checkpoint and resume times. Prints JSON.

    python bench/engine.py                       # 10,000 agents x 20 ticks, local
    python bench/engine.py --agents 2000 --ticks 5 --ray --skills 10,1000
    python bench/engine.py --agents 100000 --ticks 2 --checkpoint
    python bench/engine.py --agents 20000 --ticks 4 --skills 1000 --checkpoint --storage

Every case runs in a fresh child process so that peak RSS is that case's alone. The
experiment: scripted model, one hooked skill active per agent (daily-guidance), the city
module, traces in summary mode.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_YAML = """
name: bench
seed: 3
clock: {{start: "2026-03-02T07:00:00", tick: 15m}}
ticks: {ticks}
agents:
  - group: workers
    count: {agents}
    profile: {{template: worker}}
    skills:
      default: [daily-guidance]
      disabled: [reflect, weather-lookup, diary, social-feed, opinion-update]
skills: {{paths: [{custom}], catalog_budget_tokens: 2000, hot_reload: true}}
model: {{backend: scripted}}
environment:
  - {{module: city}}
executor: {{kind: {executor}, hosts: {hosts}}}
output: {{dir: {out}, formats: [jsonl], checkpoint_every: {checkpoint}}}
"""

_SKILL = """---
name: {name}
description: Use for procedure zq{i} - handles {topic} requests of kind zq{i} in batch mode.
version: "1.0"
---
Instructions for {name}.
"""
# Words no agent profile uses: the installed skills must not change what agents do, so the
# comparison measures the runtime's cost of having them, not different behaviour.
_TOPICS = ("qarvex", "zolbit", "frennic", "vopstra", "krindle", "moxtral", "plivet")


def _make_custom(root: Path, n: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        d = root / f"bench-skill-{i:05d}"
        d.mkdir()
        (d / "SKILL.md").write_text(
            _SKILL.format(name=d.name, i=i, topic=_TOPICS[i % len(_TOPICS)]), encoding="utf-8"
        )


def _child(args: argparse.Namespace) -> None:
    """Run one case in this process and print its JSON line."""
    import asyncio
    import threading

    from agentsim.config.experiment import parse_experiment
    from agentsim.hosts.local import LocalExecutor
    from agentsim.run.engine import Engine

    tmp = Path(args.tmp)
    custom = tmp / "custom"
    _make_custom(custom, args.skills)
    cfg = parse_experiment(
        _YAML.format(
            ticks=args.ticks,
            agents=args.agents,
            custom=custom,
            executor=args.executor,
            hosts=args.hosts,
            out=tmp / "ws",
            checkpoint=args.ticks if args.checkpoint else 0,
        ),
        base_dir=tmp,
    )
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if args.executor == "ray":
        from agentsim.hosts.ray_executor import RayExecutor

        executor: object = RayExecutor()
    else:
        executor = LocalExecutor()
    tick_times: list[float] = []
    t_last = [time.perf_counter()]

    def progress(p: object) -> None:
        now = time.perf_counter()
        tick_times.append(now - t_last[0])
        t_last[0] = now

    run_dir = tmp / "run"
    engine = Engine(
        cfg,
        run_dir=run_dir,
        executor=executor,  # type: ignore[arg-type]
        progress=progress,
        stop=threading.Event(),
        trace="summary",
    )
    checkpoint_s: list[float] = []
    if args.checkpoint:
        write = engine.checkpoint

        async def timed_checkpoint() -> Path:
            t = time.perf_counter()
            try:
                return await write()
            finally:
                checkpoint_s.append(time.perf_counter() - t)

        engine.checkpoint = timed_checkpoint  # type: ignore[method-assign]
    t0 = time.perf_counter()
    summary = asyncio.run(engine.run())
    wall = time.perf_counter() - t0
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    steps = summary.metrics["agent_steps"]
    busy = sum(tick_times[1:]) or sum(tick_times)
    out = {
        "case": f"{args.executor}{'-' + str(args.hosts) if args.executor == 'ray' else ''}",
        "agents": args.agents,
        "ticks": args.ticks,
        "custom_skills": args.skills,
        "status": summary.status,
        "agent_steps": steps,
        "wall_s": round(wall, 2),
        "agent_steps_per_s_overall": round(steps / wall, 1),
        "agent_steps_per_s_ticks": round(args.agents * max(1, len(tick_times) - 1) / busy, 1)
        if len(tick_times) > 1
        else None,
        "tick_s_median": round(statistics.median(tick_times[1:] or tick_times), 3),
        "tick_s_first": round(tick_times[0], 3),
        "tick_s": [round(t, 3) for t in tick_times],
        "driver_peak_rss_mb": round(rss1 / 1024, 1),
        "driver_rss_growth_kb_per_agent": round((rss1 - rss0) / args.agents, 2),
        "model_calls": summary.metrics["model_calls"],
        "errors": summary.metrics["errors"],
    }
    if args.checkpoint:
        print(json.dumps(out), file=sys.stderr, flush=True)  # kept even if resume fails
        out["checkpoint_s"] = [round(x, 2) for x in checkpoint_s]
        cps = sorted((run_dir / "checkpoints").glob("tick-*"))
        out["checkpoint_mb"] = round(
            sum(f.stat().st_size for f in cps[-1].rglob("*") if f.is_file()) / 1e6, 1
        )
        # Resume = a new engine: set-up of every agent, then restore of the last checkpoint.
        again = Engine(
            cfg, run_dir=run_dir, executor=LocalExecutor(), stop=threading.Event(), trace="summary"
        )
        t1 = time.perf_counter()
        resumed = asyncio.run(again.run(resume=True))
        out["resume_s"] = round(time.perf_counter() - t1, 2)
        out["resume_status"] = resumed.status
    if args.storage:
        out.update(_storage(run_dir, steps))
    print(json.dumps(out))


def _storage(run_dir: Path, steps: int) -> dict[str, object]:
    """Bytes on disk (allocated blocks) per agent-step, by part of the run folder; files per
    agent besides its ``state/``; the time of ``agentsim inspect RUN --agent ID``."""
    parts: dict[str, list[int]] = {}  # part -> [disk bytes, apparent bytes, files]
    per_agent_files: dict[str, int] = {}
    for dirpath, _dirs, filenames in os.walk(run_dir):
        rel = Path(dirpath).relative_to(run_dir).parts
        part = rel[0] if rel else "top"
        if part == "agents" and len(rel) >= 3 and rel[2] == "state":
            part = "agents/*/state"
        acc = parts.setdefault(part, [0, 0, 0])
        acc[0] += os.lstat(dirpath).st_blocks * 512  # folders take blocks too
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            acc[0] += st.st_blocks * 512
            acc[1] += st.st_size
            acc[2] += 1
            if part == "agents" and len(rel) == 2:
                per_agent_files[rel[1]] = per_agent_files.get(rel[1], 0) + 1
    total = sum(v[0] for v in parts.values())
    agents = sorted(per_agent_files)
    probe = agents[len(agents) // 2] if agents else ""
    t = time.perf_counter()
    shown = subprocess.run(
        [sys.executable, "-m", "agentsim.cli", "inspect", str(run_dir), "--agent", probe, "--json"],
        capture_output=True,
        text=True,
    )
    inspect_s = time.perf_counter() - t
    from agentsim.inspect import open_run

    t = time.perf_counter()
    hist = open_run(run_dir).agent(probe).history(last=5)
    in_process_s = time.perf_counter() - t
    t = time.perf_counter()
    imported = subprocess.run([sys.executable, "-c", "import agentsim.cli"], check=False)
    import_s = time.perf_counter() - t
    return {
        "disk_bytes_per_agent_step": round(total / steps, 1),
        "disk_bytes_per_agent_step_without_state": round(
            (total - parts.get("agents/*/state", [0])[0]) / steps, 1
        ),
        "disk_mb_by_part": {k: round(v[0] / 1e6, 1) for k, v in sorted(parts.items())},
        "apparent_mb_by_part": {k: round(v[1] / 1e6, 1) for k, v in sorted(parts.items())},
        "files_by_part": {k: v[2] for k, v in sorted(parts.items())},
        "files_per_agent_without_state": round(
            sum(per_agent_files.values()) / max(1, len(agents)), 2
        ),
        "inspect_agent_cli_s": round(inspect_s, 3),
        "inspect_agent_cli_ok": shown.returncode == 0,
        "python_import_cli_s": round(import_s, 3) if imported.returncode == 0 else None,
        "inspect_agent_in_process_s": round(in_process_s, 4),
        "inspect_agent_steps": hist.steps_total,
    }


def _case(**kw: object) -> dict[str, object]:
    tmp = tempfile.mkdtemp(prefix="agentsim-bench-")
    try:
        argv = [sys.executable, __file__, "--child", "--tmp", tmp]
        for k, v in kw.items():
            if v is True:
                argv.append(f"--{k}")
            elif v is not False:
                argv += [f"--{k}", str(v)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            return {"case": kw, "error": out.stderr[-2000:]}
        result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", action="store_true")
    p.add_argument("--tmp")
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--ticks", type=int, default=20)
    p.add_argument("--skills", default="10,1000", help="custom skill counts to compare")
    p.add_argument("--executor", default="local")
    p.add_argument("--hosts", type=int, default=1)
    p.add_argument("--ray", action="store_true", help="also run ray with 2 hosts")
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--storage", action="store_true", help="also measure the run folder")
    args = p.parse_args()
    if args.child:
        args.skills = int(args.skills)
        _child(args)
        return
    results = []
    counts = [int(s) for s in str(args.skills).split(",")]
    for n in counts:
        results.append(
            _case(
                agents=args.agents,
                ticks=args.ticks,
                skills=n,
                checkpoint=args.checkpoint,
                storage=args.storage,
            )
        )
    if args.ray:
        results.append(
            _case(agents=args.agents, ticks=args.ticks, skills=counts[0], executor="ray", hosts=2)
        )
    report: dict[str, object] = {"cpus": os.cpu_count(), "results": results}
    ok = [r for r in results if "error" not in r]
    if (
        len(ok) >= 2
        and ok[0].get("tick_s_median")
        and ok[1].get("custom_skills") != ok[0].get("custom_skills")
    ):
        report["tick_time_ratio_more_skills"] = round(
            float(ok[1]["tick_s_median"]) / float(ok[0]["tick_s_median"]),
            2,  # type: ignore[arg-type]
        )
    rays = [r for r in ok if str(r.get("case", "")).startswith("ray")]
    if rays and ok[0].get("agent_steps_per_s_ticks"):
        report["ray_vs_local"] = round(
            float(rays[0]["agent_steps_per_s_ticks"])  # type: ignore[arg-type]
            / float(ok[0]["agent_steps_per_s_ticks"]),
            2,  # type: ignore[arg-type]
        )
        # The same comparison on median ticks: robust to a few ticks slowed by the machine.
        report["ray_vs_local_median_tick"] = round(
            float(ok[0]["tick_s_median"])  # type: ignore[arg-type]
            / float(rays[0]["tick_s_median"]),  # type: ignore[arg-type]
            2,
        )
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
