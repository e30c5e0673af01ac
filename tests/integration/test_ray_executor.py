"""The Ray executor: same events as local, hot reload on every host, a dying host, two nodes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentsim.config.experiment import load_experiment, parse_experiment
from agentsim.errors import ExecutorError
from agentsim.hosts.local import LocalExecutor
from agentsim.hosts.ray_executor import RayExecutor
from agentsim.inspect import open_run
from agentsim.run.engine import Engine, Progress
from agentsim.testing.openai_server import spawn_test_server

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_cluster")]

_YAML = """
name: ray-check
seed: 5
clock: {{start: "2026-03-02T07:00:00", tick: 30m}}
ticks: {ticks}
agents:
  - group: workers
    count: 8
    profile: {{template: worker, fields: {{interests: [stargazing, cycling]}}}}
    skills: {{default: [daily-guidance, sky-log]}}
  - group: people
    count: 12
    profile: {{template: generic, fields: {{interests: [stargazing, telescopes]}}}}
    skills: {{default: [social-feed, sky-log], disabled: [daily-guidance]}}
skills: {{paths: [{custom}], catalog_budget_tokens: 2000}}
environment:
  - {{module: city}}
  - {{module: social}}
executor: {{kind: local, hosts: 2}}
output: {{dir: {out}, formats: [jsonl]}}
"""


_SKY_LOG = """---
name: sky-log
description: Use to keep a log of the night sky.
hooks: {pre_step: scripts/sky.py}
---
Write down what you see in the sky.
"""


def _sky_script(version: str) -> str:
    return f"def entrypoint(argv, ctx):\n    return {version!r}\n"


def _config(tmp: Path, *, ticks: int = 4) -> Any:
    custom = tmp / "custom"
    (custom / "sky-log" / "scripts").mkdir(parents=True, exist_ok=True)
    (custom / "sky-log" / "SKILL.md").write_text(_SKY_LOG)
    (custom / "sky-log" / "scripts" / "sky.py").write_text(_sky_script("sky v1"))
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


def test_skills_added_and_edited_mid_run_reach_every_host_next_tick(tmp_path: Path) -> None:
    cfg = _config(tmp_path, ticks=5)
    custom = tmp_path / "custom"

    def change_skills(p: Progress) -> None:
        if p.tick == 2:  # between ticks 1 and 2
            d = custom / "stargazing"
            d.mkdir()
            (d / "SKILL.md").write_text(_STARGAZING)
            # Scripts are re-imported by (path, mtime, size); the SKILL.md edit is what the
            # registry reports as a changed skill.
            (custom / "sky-log" / "scripts" / "sky.py").write_text(_sky_script("sky version 2"))
            skill_md = custom / "sky-log" / "SKILL.md"
            skill_md.write_text(_SKY_LOG.replace("night sky", "night sky and the moon"))

    run_dir = tmp_path / "ray"
    summary = _run(cfg, run_dir, RayExecutor(), progress=change_skills)
    assert summary.status == "completed"
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    (reload,) = [e for e in events if e["type"] == "skills_reloaded"]
    assert reload["tick"] == 2
    assert reload["added"] == ["custom@stargazing"] and reload["changed"] == ["custom@sky-log"]
    # Provenance: the versions and the tick each took effect, recorded once for all hosts.
    rows = [json.loads(x) for x in (run_dir / "skills" / "versions.jsonl").read_text().splitlines()]
    ticks = [(r["skill_id"], r["tick"]) for r in rows if r["skill_id"].startswith("custom@")]
    assert ticks == [("custom@sky-log", 0), ("custom@sky-log", 2), ("custom@stargazing", 2)]
    run = open_run(run_dir)
    agents = run.agents
    assert len(agents) == 20  # ten per host, each host writing its own shard
    assert sorted(p.name for p in (run_dir / "store").iterdir()) == ["host-0000", "host-0001"]
    for aid in agents:
        agent = run.agent(aid)
        steps = [s for s in agent.trace() if "hooks" in s]
        for step in steps:
            sky = [h["text"] for h in step["hooks"] if h["skill"] == "custom@sky-log"]
            if not sky:  # a step skipped by another skill's hook still ran sky-log first
                continue
            expected = "sky v1" if step["tick"] < 2 else "sky version 2"
            assert sky == [expected], (aid, step["tick"])
            if "system_sha" not in step:
                continue  # sat out the step (asleep): no prompt was built
            prompt = agent.prompt_at(step["tick"]).system
            assert ('name="stargazing"' in prompt) == (step["tick"] >= 2), (aid, step["tick"])


def test_a_skill_broken_mid_run_keeps_its_last_good_version_on_every_host(
    tmp_path: Path,
) -> None:
    cfg = _config(tmp_path, ticks=3)
    skill_md = tmp_path / "custom" / "sky-log" / "SKILL.md"

    def break_it(p: Progress) -> None:
        if p.tick == 1:  # a typo saved into an active skill with a hook
            skill_md.write_text(_SKY_LOG.replace("hooks: {", "hooks: {{"))

    run_dir = tmp_path / "ray"
    summary = _run(cfg, run_dir, RayExecutor(), progress=break_it)
    assert summary.status == "completed"
    assert summary.metrics["problems"]["skill_broken"] == 1
    events = [json.loads(e) for e in (run_dir / "events.jsonl").read_text().splitlines()]
    (broken,) = [e for e in events if e["type"] == "skill_broken"]
    assert (broken["tick"], broken["skill"], broken["file"]) == (1, "custom@sky-log", str(skill_md))
    assert broken["message"].startswith("invalid YAML in the frontmatter")
    assert [e for e in events if e["type"] == "skill_deactivated"] == []
    run = open_run(run_dir)
    for aid in run.agents:  # both hosts kept running the last good version's hook
        texts = {
            s["tick"]: [h["text"] for h in s["hooks"] if h["skill"] == "custom@sky-log"]
            for s in run.agent(aid).trace()
            if "hooks" in s
        }
        assert all(t in ([], ["sky v1"]) for t in texts.values()), aid
        assert texts.get(2) in ([], ["sky v1"]) and 2 in texts, aid


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


def test_a_host_dead_at_set_up_is_reported_at_set_up_not_at_stats(tmp_path: Path) -> None:
    import ray

    cfg = _config(tmp_path, ticks=2)
    executor = RayExecutor(call_timeout=60)
    real_setup = executor.setup

    async def setup_after_a_death(extra: Any, **when: Any) -> Any:
        ray.kill(executor.actors[1])
        return await real_setup(extra, **when)

    executor.setup = setup_after_a_death  # type: ignore[method-assign]
    with pytest.raises(ExecutorError) as info:
        _run(cfg, tmp_path / "ray", executor)
    message = str(info.value)
    assert "host actor died during setup" in message and "stats" not in message


def test_a_stopped_host_is_detected_within_the_heartbeat_timeout(tmp_path: Path) -> None:
    cfg = _config(tmp_path, ticks=6)
    executor = RayExecutor(call_timeout=120, heartbeat_timeout=2)
    stopped: list[int] = []

    def stop_one(p: Progress) -> None:
        if p.tick == 2 and not stopped:
            import ray

            pid = int(ray.get(executor.actors[0].pid.remote(), timeout=30))
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)

    run_dir = tmp_path / "ray"
    started = time.monotonic()
    try:
        with pytest.raises(
            ExecutorError, match=r"host 0 did not answer a ping for 2s during tick \d.*--resume"
        ):
            _run(cfg, run_dir, executor, progress=stop_one)
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    assert time.monotonic() - started < 60
    assert '"status": "failed"' in (run_dir / "manifest.json").read_text()


@pytest.mark.slow
def test_two_node_cluster_run(tmp_path: Path) -> None:
    """Runs in a child process: this process is already connected to the shared cluster."""
    _config(tmp_path, ticks=2)  # writes the custom skills the experiment uses
    script = tmp_path / "two_nodes.py"
    script.write_text(
        textwrap.dedent(f"""
        import asyncio, json, threading
        from pathlib import Path
        import ray
        from ray.cluster_utils import Cluster
        from agentsim.config.experiment import load_experiment, parse_experiment
        from agentsim.run.engine import Engine
        from agentsim.hosts.ray_executor import RayExecutor

        loopback = {{"node_ip_address": "127.0.0.1"}}
        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 1, **loopback}})
        cluster.add_node(num_cpus=1, **loopback)
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
                async def setup(extra, **when):
                    nodes.extend(await ex.node_ids())
                    return await orig(extra, **when)
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
    # Ray then takes 127.0.0.1 as the node address: both nodes talk over loopback only.
    env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    last = out.stdout.strip().splitlines()[-1]
    assert last == '{"status": "completed", "nodes": 2}'


@pytest.mark.parametrize("hosts", [1, 2], ids=["1-host", "2-hosts"])
def test_ray_runs_by_dependencies_write_the_barrier_run(tmp_path: Path, hosts: int) -> None:
    from tests.unit import helpers

    cfg = load_experiment(helpers.REPO / "experiments" / "daily-mobility.yaml")
    runs = {}
    for schedule in ("barrier", "dependencies"):
        ex = cfg.executor.model_copy(update={"schedule": schedule, "hosts": hosts})
        one = cfg.model_copy(update={"executor": ex})
        engine = Engine(one, run_dir=tmp_path / schedule, executor=RayExecutor(), max_ticks=14)
        assert asyncio.run(engine.run()).status == "stopped"
        runs[schedule] = helpers.run_fingerprint(tmp_path / schedule)
    differ = [k for k in runs["barrier"] if runs["barrier"][k] != runs["dependencies"].get(k)]
    assert differ == [] and runs["barrier"].keys() == runs["dependencies"].keys()


_SURVEY_YAML = """
name: ray-survey
seed: 9
workflow:
  - survey: {{name: midday, question: "How is your day going?", agents: all}}
  - survey:
      name: score
      question: "Your day, 1 to 5?"
      answer: {{likert: [1, 5]}}
      agents: {{sample: 6}}
agents:
  - group: people
    count: 40
    profile: {{template: generic}}
    skills: {{default: [], disabled: [daily-guidance]}}
model:
  backend: openai
  model: test-model
  base_url: {base_url}
  max_concurrency: 8
  max_retries: 0
executor: {{kind: local, hosts: 2}}
output: {{dir: {out}, formats: [jsonl]}}
"""


def test_a_survey_on_ray_asks_in_parallel_and_equals_local(tmp_path: Path) -> None:
    # 40 answers of 0.3 s: one at a time takes 12 s; each of the two hosts holds 4 slots.
    with spawn_test_server(latency=0.3) as srv:
        cfg = parse_experiment(
            _SURVEY_YAML.format(base_url=srv.base_url, out=tmp_path / "ws"), base_dir=tmp_path
        )
        local = _run(cfg, tmp_path / "local", LocalExecutor())
        seen: list[Progress] = []
        when: list[float] = []  # when each survey progress report came

        def progress(p: Progress) -> None:
            seen.append(p)
            if p.survey == "survey midday":
                when.append(time.monotonic())

        remote = _run(cfg, tmp_path / "ray", RayExecutor(), progress=progress)
        # The survey alone, from its first report to its last: not the Ray actors' start-up,
        # which takes seconds on a loaded machine.
        took = max(when) - min(when)
    assert local.status == remote.status == "completed"
    a = (tmp_path / "local" / "events.jsonl").read_bytes()
    assert a == (tmp_path / "ray" / "events.jsonl").read_bytes()
    assert a.count(b'"type": "survey_answer"') == 46
    # The typed survey crosses to the hosts too: the echo server's answers do not fit the
    # form, so each was asked again once and stored invalid, the same as locally.
    assert a.count(b'"instrument": "likert", "name": "score", "reason": "likert: ') == 6
    assert took < 8.0, f"the survey on Ray took {took:.1f} s; one at a time takes 12 s"
    last = [p for p in seen if p.survey == "survey midday"][-1]
    assert (last.survey, last.answered, last.asked) == ("survey midday", 40, 40)
