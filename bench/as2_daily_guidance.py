"""AgentSociety2's own ``daily-guidance`` skill, unchanged, in an agentsim run; prints JSON.

    python -m venv /tmp/as2venv
    /tmp/as2venv/bin/pip install --no-deps agentsociety2==2.9.3
    /tmp/as2venv/bin/pip install -e .
    /tmp/as2venv/bin/python bench/as2_daily_guidance.py [--agents 4] [--ticks 8]

The skill folder is copied at run time from the installed ``agentsociety2`` package (found
with ``importlib``, never imported: its dependencies need not be installed) into a skills
path of a scratch experiment; its files are hashed before and after the run to show they
ran unchanged. A model that follows the skill's SKILL.md drives the run: it activates the
skill, submits the day with ``plan --date D --json '<object>'``, reads it back with
``show``, and on later steps acts on the ``active_segment`` the ``pre_step`` hook injects
into ``<skill_hooks>``, recording it with ``record``. The agents' group uses
``ids: numeric`` (the hook calls ``int()`` on the payload's ``agent_id``).

Reported: script calls (failed ones: the runner's ``ok`` and the skill's own YAML
``ok: false``), hook outcomes (failed ones), the story files written in the agents'
workspaces, the prompts whose ``<skill_hooks>`` carried an ``active_segment``, the run's
errors, and whether AgentSociety2's hook context imports (when it does not, the hook's
``async def pre_step()`` is not called and its ``--args-json`` command runs instead). The run
is made twice, with that module and with the package hidden, and one ``AGENT.json`` write is
timed.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

SKILL = "daily-guidance"

# The day the model submits: (id, start, end, activity, location_policy, Maslow need).
_DAY = [
    ("sleep_night", "00:00", "07:00", "sleep", "home_aoi", "physiological.rest"),
    ("breakfast", "07:00", "08:00", "meal", "home_aoi", "physiological.food"),
    ("commute_in", "08:00", "09:00", "commute", "transit", "safety.income_stability"),
    ("work_am", "09:00", "12:00", "work", "work_aoi", "esteem.role_obligation"),
    ("lunch", "12:00", "13:00", "meal", "near_work_aoi", "physiological.food"),
    ("work_pm", "13:00", "17:00", "work", "work_aoi", "safety.income_stability"),
    ("commute_home", "17:00", "18:00", "commute", "transit", "safety.home_shelter"),
    ("evening", "18:00", "22:00", "leisure", "near_home_aoi", "recovery.leisure"),
    ("sleep_late", "22:00", "24:00", "sleep", "home_aoi", "physiological.rest"),
]


def day_plan(agent: str, date: str) -> dict[str, Any]:
    """A full-day story in the JSON form the skill's SKILL.md describes."""
    ok = {"reason": "fits the profile and the hour", "status": "supported"}
    segments = [
        {
            "id": sid,
            "start": start,
            "end": end,
            "activity": activity,
            "location_policy": where,
            "maslow_reason": {
                "need": need,
                "reason": f"{activity} at this hour keeps the day plausible",
                "risk": f"the day lacks {activity}",
                "required": "required",
            },
            "tpb_reason": {
                "want": ok,
                "norm": ok,
                "can": ok,
                "proof": f"{start}-{end} {activity} suits a worker",
                "choice": "commit",
            },
        }
        for sid, start, end, activity, where, need in _DAY
    ]
    return {"story_id": f"agent_{agent}:{date}", "date": date, "segments": segments}


def find_skill() -> Path:
    spec = importlib.util.find_spec("agentsociety2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            "agentsociety2 is not installed in this interpreter; see this script's docstring"
        )
    folder = Path(next(iter(spec.submodule_search_locations))) / "agent" / "skills" / SKILL
    if not (folder / "SKILL.md").is_file():
        raise SystemExit(f"{folder} holds no SKILL.md; is this agentsociety2 2.9.3?")
    return folder


def tree_sha(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(p.relative_to(root).as_posix().encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _yaml_ok(text: str) -> bool | None:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return bool(data.get("ok")) if isinstance(data, dict) and "ok" in data else None


class Follower:
    """Answers as a model following daily-guidance's SKILL.md; keeps what it saw."""

    def __init__(self) -> None:
        self.results: list[str] = []  # every execute_skill_script result it was shown
        self.hook_prompts = 0  # first requests of a step whose <skill_hooks> had a segment
        self.requests = 0

    def __call__(self, request: Any) -> Any:
        from agentsim.testing import tool_call

        self.requests += 1
        calls = request.calls
        names = [c.name for c in calls]
        if calls and names[-1] == "execute_skill_script":
            self.results.append(request.results[-1])
        user = request.last_user
        stamp = re.search(r"time: (\d{4}-\d{2}-\d{2})T", user)
        date = stamp.group(1) if stamp else ""
        if not calls and "<skill_hooks>" in user and "active_segment:" in user:
            self.hook_prompts += 1
        # The agent's own part of the prompt (its active skill bodies, its profile) opens
        # the first user message.
        own = request.agent
        active = f'<skill_content name="{SKILL}">' in own or "activate_skill" in names
        if not active:
            return tool_call("activate_skill", name=SKILL)
        run = [json.loads(c.arguments).get("args", [""])[0] for c in calls if c.name == names[-1]]
        hook_ok = "<skill_hooks>" in user and "ok: true" in user
        if not hook_ok and "plan" not in run:
            agent = re.search(r'"agent_id": "(\d+)"', own)
            plan = day_plan(agent.group(1) if agent else "0", date)
            args = ["plan", "--date", date, "--json", json.dumps(plan)]
            return tool_call("execute_skill_script", name=SKILL, args=args)
        if "plan" in run and "show" not in run:
            return tool_call("execute_skill_script", name=SKILL, args=["show", "--date", date])
        seg = re.search(r"activity: (\S+)\n\s+location_policy: (\S+)", user)
        if seg and "record" not in run:
            args = ["record", "--date", date, "--activity", seg.group(1)]
            args += ["--location", seg.group(2)]
            return tool_call("execute_skill_script", name=SKILL, args=args)
        return tool_call("finish", action=f"following the story: {seg.group(1) if seg else 'plan'}")


YAML = """
name: as2-daily-guidance
seed: 1
clock: {{start: "2026-03-02T06:00:00", tick: 1h}}
ticks: {ticks}
agents:
  - group: commuters
    count: {agents}
    ids: numeric
    profile: {{template: worker}}
skills: {{builtin: false, paths: [skills]}}
model: {{backend: scripted}}
output: {{dir: ws, formats: [jsonl]}}
"""


async def run(agents: int, ticks: int) -> dict[str, Any]:
    """Both ways the hook can run, in one process: with AgentSociety2's hook context (its
    ``async def pre_step()`` is called) and without it (its ``--args-json`` command)."""
    source = find_skill()
    with_context = await run_once(source, agents, ticks)
    # Hide the package from this process: the hook must fall back to its command line.
    sys.modules["agentsociety2"] = None  # type: ignore[assignment]
    for name in [m for m in sys.modules if m.startswith("agentsociety2.")]:
        del sys.modules[name]
    from agentsim.skills import hooks

    hooks._as2_hook_module.cache_clear()
    without = await run_once(source, agents, ticks)
    return {
        "with_as2_hook_context": with_context,
        "without_as2_hook_context": without,
        "agent_json_write": agent_json_cost(),
    }


def agent_json_cost(n: int = 2000) -> dict[str, Any]:
    """Median wall time of one AGENT.json write (build + atomic replace) for a worker."""
    from agentsim.agent.agent_json import agent_json, write_agent_json
    from agentsim.config.profiles import sample_profile

    profile = sample_profile("worker", seed=1, agent_id="7")
    times = []
    with tempfile.TemporaryDirectory() as d:
        ws = Path(d)
        for i in range(n):
            t0 = time.perf_counter()
            write_agent_json(
                ws,
                agent_json(
                    agent_id="7",
                    group="commuters",
                    profile=profile,
                    persona="A worker.",
                    workspace=ws,
                    time_iso=f"2026-03-02T{i % 24:02d}:00:00",
                    tick=i,
                    step_count=i + 1,
                    visible=["custom@daily-guidance"],
                    activated=["custom@daily-guidance"],
                ),
            )
            times.append(time.perf_counter() - t0)
        size = (ws / "AGENT.json").stat().st_size
    return {"writes": n, "median_us": round(statistics.median(times) * 1e6, 1), "bytes": size}


async def run_once(source: Path, agents: int, ticks: int) -> dict[str, Any]:
    from agentsim.config.experiment import parse_experiment
    from agentsim.hosts.local import LocalExecutor
    from agentsim.inspect import open_run
    from agentsim.run.engine import Engine
    from agentsim.testing import FunctionModel

    before = tree_sha(source)
    follower = Follower()
    with tempfile.TemporaryDirectory() as d:
        base = Path(d)
        shutil.copytree(source, base / "skills" / SKILL)
        copied = tree_sha(base / "skills" / SKILL)
        cfg = parse_experiment(YAML.format(agents=agents, ticks=ticks), base_dir=base)
        model = FunctionModel(follower)
        executor = LocalExecutor(model_factory=lambda spec: model)
        run_dir = base / "run"
        summary = await Engine(cfg, run_dir=run_dir, executor=executor).run()
        after = tree_sha(base / "skills" / SKILL)
        events = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
        opened = open_run(run_dir)
        hooks = [
            h
            for aid in opened.agents
            for t in opened.agent(aid).trace()
            for h in t.get("hooks", [])
            if h["hook"] == "pre_step"
        ]
        files = sorted(
            p.relative_to(run_dir / "agents").as_posix()
            for p in (run_dir / "agents").rglob("story.yaml")
        )
        called = [e for e in events if e["type"] == "script_called"]
        return {
            "agentsociety2_skill": str(source),
            "skill_unchanged": before == copied == after,
            "as2_hook_context_importable": _as2_importable(),
            "hook_ran_as": "async def pre_step()" if _as2_importable() else "--args-json command",
            "agents": agents,
            "ticks": ticks,
            "status": summary.status,
            "run_errors": summary.metrics["errors"],
            "model_calls": summary.metrics["model_calls"],
            "script_calls": len(called),
            "script_calls_failed": sum(1 for e in called if not e["ok"]),
            "script_results_ok_false": sum(1 for r in follower.results if _yaml_ok(r) is False),
            "script_results_ok_true": sum(1 for r in follower.results if _yaml_ok(r) is True),
            "pre_step_hooks": len(hooks),
            "pre_step_hooks_failed": sum(1 for h in hooks if not h["ok"]),
            "pre_step_hooks_with_segment": sum(1 for h in hooks if "active_segment:" in h["text"]),
            "prompts_with_segment_in_skill_hooks": follower.hook_prompts,
            "files_written": files,
        }


def _as2_importable() -> bool:
    try:
        importlib.import_module("agentsociety2.agent.base.skill_hook_context")
    except Exception:  # its package's dependencies are not installed here
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--ticks", type=int, default=8)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.agents, args.ticks)), indent=2))


if __name__ == "__main__":
    main()
