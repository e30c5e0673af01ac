"""The Ray executor: same events as local, hot reload on every host, a dying host, two nodes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from agentsim.errors import ExecutorError
from agentsim.sim.config import parse_experiment
from agentsim.sim.engine import Engine, Progress
from agentsim.sim.executors import LocalExecutor
from agentsim.sim.profiles import resolve_agents
from agentsim.sim.ray_executor import RayExecutor

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

_YAML = """
name: ray-check
seed: 5
clock: {{start: "2026-03-02T07:00:00", tick: 30m}}
ticks: {ticks}
agents:
  - group: workers
    count: 12
    profile: {{template: worker, fields: {{interests: [stargazing, cycling]}}}}
    skills: {{default: [daily-guidance]}}
  - group: people
    count: 8
    profile: {{template: generic, fields: {{interests: [stargazing, telescopes]}}}}
    skills: {{default: [social-feed], disabled: [daily-guidance]}}
skills: {{paths: [{custom}], catalog_budget_tokens: 2000}}
environment:
  - {{module: city}}
  - {{module: social}}
executor: {{kind: local, hosts: 2}}
output: {{dir: {out}, formats: [jsonl]}}
"""


def _config(tmp: Path, *, ticks: int = 4) -> Any:
    custom = tmp / "custom"
    custom.mkdir(exist_ok=True)
    text = _YAML.format(ticks=ticks, custom=custom, out=tmp / "ws")
    return parse_experiment(text, base_dir=tmp)


def _run(cfg: Any, run_dir: Path, executor: Any, progress: Any = None) -> Any:
    engine = Engine(
        cfg, run_dir=run_dir, executor=executor, progress=progress, stop=threading.Event()
    )
    return asyncio.run(engine.run())


def test_ray_events_equal_local_events(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    local = _run(cfg, tmp_path / "local", LocalExecutor())
    remote = _run(cfg, tmp_path / "ray", RayExecutor())
    assert local.status == remote.status == "completed"
    a = (tmp_path / "local" / "events.jsonl").read_bytes()
    b = (tmp_path / "ray" / "events.jsonl").read_bytes()
    assert a == b
    assert a.count(b'"type": "move"') > 0


_STARGAZING = """---
name: stargazing
description: Use for stargazing and telescopes; plan a night of watching stars.
version: "1.0"
---
Look up at the sky.
"""


def test_skill_added_mid_run_is_used_on_every_host(tmp_path: Path) -> None:
    cfg = _config(tmp_path, ticks=6)
    custom = tmp_path / "custom"

    def add_skill(p: Progress) -> None:
        if p.tick == 2:
            d = custom / "stargazing"
            d.mkdir()
            (d / "SKILL.md").write_text(_STARGAZING)

    run_dir = tmp_path / "ray"
    _run(cfg, run_dir, RayExecutor(), progress=add_skill)
    events = [line for line in (run_dir / "events.jsonl").read_text().splitlines()]
    reload = [e for e in events if '"skills_reloaded"' in e]
    assert len(reload) == 1 and "custom@stargazing" in reload[0] and '"tick": 2' in reload[0]

    used = [json.loads(e) for e in events if '"custom@stargazing"' in e and "skill_activated" in e]
    assert used and min(e["tick"] for e in used) >= 2
    # agents of both hosts (ids are split into two contiguous blocks) picked it up
    ids = sorted(a.agent_id for a in resolve_agents(cfg))
    first, second = set(ids[: len(ids) // 2]), set(ids[len(ids) // 2 :])
    users = {e["agent_id"] for e in used}
    assert users & first and users & second


def test_a_killed_host_stops_the_run_with_the_resume_command(tmp_path: Path) -> None:
    import ray

    cfg = _config(tmp_path, ticks=5)
    executor = RayExecutor(call_timeout=60)

    def kill_one(p: Progress) -> None:
        if p.tick == 2:
            ray.kill(executor.actors[0])

    run_dir = tmp_path / "ray"
    with pytest.raises(ExecutorError, match=r"host actor died.*agentsim run --resume"):
        _run(cfg, run_dir, executor, progress=kill_one)
    manifest = (run_dir / "manifest.json").read_text()
    assert '"status": "failed"' in manifest


@pytest.mark.slow
def test_two_node_cluster_run(tmp_path: Path) -> None:
    """Runs in a child process: this process is already connected to the shared cluster."""
    script = tmp_path / "two_nodes.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, json, threading
        from pathlib import Path
        import ray
        from ray.cluster_utils import Cluster
        from agentsim.sim.config import parse_experiment
        from agentsim.sim.engine import Engine
        from agentsim.sim.ray_executor import RayExecutor

        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1}})
        cluster.add_node(num_cpus=1)
        ray.init(address=cluster.address, log_to_driver=False)
        try:
            text = {_YAML!r}.format(ticks=2, custom={str(tmp_path / "custom")!r},
                                    out={str(tmp_path / "ws")!r})
            Path({str(tmp_path / "custom")!r}).mkdir(exist_ok=True)
            cfg = parse_experiment(text, base_dir=Path({str(tmp_path)!r}))
            ex = RayExecutor()
            engine = Engine(cfg, run_dir=Path({str(tmp_path / "run")!r}), executor=ex,
                            stop=threading.Event())
            nodes = []
            async def main():
                orig = ex.setup
                async def setup(extra):
                    nodes.extend(await ex.node_ids())
                    return await orig(extra)
                ex.setup = setup
                return await engine.run()
            summary = asyncio.run(main())
            print(json.dumps({{"status": summary.status, "nodes": len(set(nodes))}}))
        finally:
            ray.shutdown()
            cluster.shutdown()
    """)
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last == '{"status": "completed", "nodes": 2}'
