"""A study folder (contract C2: ``manifest.json`` and ordinary run folders) built from
scripted runs made with ``agentsim run``: the comparison's tests do not need the study
runner to make one."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentsim.cli import main

# A hook records the tick plus the agent's number as "mood"; the social module writes the
# opinions every tick; the broadcast before tick 2 is what the treatment arm changes.
_HOOK = """
def entrypoint(argv, ctx):
    ctx.record("mood", ctx.tick + int(ctx.agent_id[-1]) % 3)
    return ""
"""
_SKILL = """---
name: mood
description: Use when testing comparisons.
hooks:
  pre_step: scripts/hook.py
---
Record the mood.
"""
EXPERIMENT = """
name: cmp
seed: {seed}
clock: {{start: "2026-03-02T08:00:00", tick: 1h}}
workflow:
  - run: {{ticks: 2}}
  - intervene: {{env: social, action: broadcast, args: {{text: "The park closes.", stance: 0.8}}}}
  - survey: {{name: opinion, question: "What is your opinion?", agents: all}}
  - run: {{ticks: 2}}
agents:
  - group: citizens
    count: 4
    profile: {{template: generic}}
    skills: {{default: [social-feed, mood], disabled: [daily-guidance]}}
skills: {{paths: [skills]}}
model: {{backend: scripted}}
environment:
  - {{module: social, follow_k: 2, topic: the park}}
output: {{dir: ws, checkpoint_every: 1, formats: [jsonl]}}
"""
MEASURES = [
    {"survey": "opinion"},
    {"measure": "mood"},
    {"env": "social.mean"},
    {"action": "posted on social"},
]


def build_study(
    root: Path,
    *,
    seeds: Sequence[int] = (1, 2),
    fork_at: int = 2,
    treatment: Mapping[str, str] | None = None,
    measures: Sequence[Mapping[str, Any]] = MEASURES,
) -> Path:
    """``root/study``: arm ``control`` (a run per seed) and arm ``closure`` (each a fork of
    the control run of its seed at ``fork_at`` with ``treatment`` as its ``--set``), with a
    manifest as ``agentsim study`` writes it."""
    (root / "skills" / "mood" / "scripts").mkdir(parents=True, exist_ok=True)
    (root / "skills" / "mood" / "SKILL.md").write_text(_SKILL, "utf-8")
    (root / "skills" / "mood" / "scripts" / "hook.py").write_text(_HOOK, "utf-8")
    study = root / "study"
    (study / "runs").mkdir(parents=True)
    sets = treatment or {"workflow.1.intervene.args.stance": "-0.8"}
    runs: list[dict[str, Any]] = []
    for i, seed in enumerate(seeds, start=1):
        exp = root / f"exp-{seed}.yaml"
        exp.write_text(EXPERIMENT.format(seed=seed), "utf-8")
        control, closure = f"control-r{i}", f"closure-r{i}"
        assert main(["run", str(exp), "--out", str(study / "runs" / control), "--json"]) == 0
        argv = ["run", "--fork", str(study / "runs" / control), "--at", str(fork_at)]
        argv += ["--out", str(study / "runs" / closure), "--json"]
        for key, value in sets.items():
            argv += ["--set", f"{key}={value}"]
        assert main(argv) == 0
        common = {"replicate": i, "seed": seed, "sample": None, "config_hash": "-"}
        runs.append({"id": control, "arm": "control", "dir": f"runs/{control}",
                     "fork_of": None, "state": "complete", **common})  # fmt: skip
        runs.append({"id": closure, "arm": "closure", "dir": f"runs/{closure}",
                     "fork_of": {"run": control, "tick": fork_at}, "state": "complete",
                     **common})  # fmt: skip
    write_manifest(study, runs, measures=measures, from_tick={"closure": fork_at})
    return study


def write_manifest(
    study: Path,
    runs: Sequence[Mapping[str, Any]],
    *,
    measures: Sequence[Mapping[str, Any]],
    arms: Sequence[str] = ("control", "closure"),
    from_tick: Mapping[str, int] | None = None,
    control: str = "control",
) -> Path:
    manifest = {
        "format": 1,
        "name": "cmp",
        "experiment": "exp.yaml",
        "control": control,
        "arms": [{"name": a, "from_tick": (from_tick or {}).get(a)} for a in arms],
        "measures": list(measures),
        "runs": list(runs),
    }
    path = study / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2), "utf-8")
    return path


@pytest.fixture
def study_builder() -> Callable[..., Path]:
    """``build_study(root, seeds=..., fork_at=..., treatment=..., measures=...)``."""
    return build_study


# -- a study whose per-replicate values are known ----------------------------------------
TIME = "2026-03-02T08:00:00"


def _ev(kind: str, tick: int, agent: str | None = None, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "tick": tick, "time": TIME, "agent_id": agent, **fields}


def _run(
    study: Path,
    run_id: str,
    mood: dict[str, float],
    *,
    opinion: float,
    posts: Sequence[str],
    votes: dict[str, str],
    status: str = "completed",
) -> dict[str, Any]:
    """A run of two ticks: at tick 0 every agent's mood is 0 and the opinion 0; at tick 1
    ``mood`` per agent, the opinion mean ``opinion``, one post per agent in ``posts``;
    ``votes`` answers a choice survey asked before tick 1."""
    root = study / "runs" / run_id
    (root / "surveys").mkdir(parents=True)
    for agent in mood:
        (root / "agents" / agent).mkdir(parents=True)
    (root / "manifest.json").write_text(json.dumps({"status": status}), "utf-8")
    events = []
    for tick in (0, 1):
        for agent, value in mood.items():
            events.append(_ev("measure", tick, agent, name="mood", value=value if tick else 0.0,
                              group="g", skill="custom@mood"))  # fmt: skip
        for agent in mood:
            action = "posted on social" if tick and agent in posts else "read the feed"
            events.append(_ev("agent_action", tick, agent, action=action, degraded=False))
        events.append(_ev("social_opinions", tick, None, n=len(mood),
                          mean=opinion if tick else 0.0, groups={"g": {"n": 2}}))  # fmt: skip
        events.append(_ev("tick_end", tick, None, steps=len(mood)))
    lines = "".join(json.dumps(e) + "\n" for e in events)
    (root / "events.jsonl").write_text(lines, "utf-8")
    rows = [
        {"agent_id": a, "question": "q", "answer": v, "status": "ok", "echo": False, "tick": 1,
         "time": TIME, "instrument": "choice", "value": v, "group": "g"}
        for a, v in votes.items()
    ]  # fmt: skip
    rows.append({"agent_id": "x", "question": "q", "answer": "??", "status": "invalid",
                 "reason": "not an option", "echo": False, "tick": 1, "time": TIME,
                 "instrument": "choice", "value": None, "group": "g"})  # fmt: skip
    (root / "surveys" / "vote.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"id": run_id, "dir": f"runs/{run_id}", "config_hash": "-", "sample": None}


KNOWN_MEASURES = [{"measure": "mood"}, {"env": "social.mean"}, {"action": "posted on social"},
            {"survey": "vote"}]  # fmt: skip


@pytest.fixture
def known_study(tmp_path: Path) -> Path:
    """``write_known_study(tmp_path)``."""
    return write_known_study(tmp_path)


def write_known_study(tmp_path: Path) -> Path:
    """``tmp_path/study``. Arms: control (seeds 1-3); closure, forks of control (seeds
    1-3); other, seeds 4-6 (unpaired); single, one replicate."""
    s = tmp_path / "study"
    runs = []
    # control: mood means 2, 4, 6 (r1 has a third agent c: (0 + 2 + 4) / 3 = 2)
    control = [{"a": 0.0, "b": 2.0, "c": 4.0}, {"a": 3.0, "b": 5.0}, {"a": 5.0, "b": 7.0}]
    # closure: means 3, 7, 8; per agent vs its parent: r1 (2, 2) -> 2, r2 (3, 3) -> 3,
    # r3 (2, 2) -> 2
    closure = [{"a": 2.0, "b": 4.0}, {"a": 6.0, "b": 8.0}, {"a": 7.0, "b": 9.0}]
    other = [{"a": 4.0, "b": 6.0}, {"a": 6.0, "b": 8.0}, {"a": 8.0, "b": 10.0}]  # 5, 7, 9
    votes = [{"a": "yes", "b": "no"}, {"a": "yes", "b": "yes"}, {"a": "no", "b": "no"}]
    for i in range(3):
        seed = i + 1
        c = _run(s, f"control-r{seed}", control[i], opinion=0.1 * seed, posts=["a"],
                 votes=votes[i])  # fmt: skip
        runs.append({**c, "arm": "control", "replicate": seed, "seed": seed, "fork_of": None,
                     "state": "complete"})  # fmt: skip
        f = _run(s, f"closure-r{seed}", closure[i], opinion=0.1 * seed + 0.05 * seed,
                 posts=["a", "b"], votes={"a": "yes", "b": "yes"})  # fmt: skip
        runs.append({**f, "arm": "closure", "replicate": seed, "seed": seed, "state": "complete",
                     "fork_of": {"run": f"control-r{seed}", "tick": 1}})  # fmt: skip
        o = _run(s, f"other-r{seed}", other[i], opinion=0.0, posts=[], votes={"a": "no"})
        runs.append({**o, "arm": "other", "replicate": seed, "seed": seed + 3, "fork_of": None,
                     "state": "complete"})  # fmt: skip
    one = _run(s, "single-r1", {"a": 1.0, "b": 1.0}, opinion=0.0, posts=[], votes={})
    runs.append({**one, "arm": "single", "replicate": 1, "seed": 9, "fork_of": None,
                 "state": "complete"})  # fmt: skip
    write_manifest(s, runs, measures=KNOWN_MEASURES, arms=("control", "closure", "other", "single"),
                   from_tick={"closure": 1})  # fmt: skip
    return s
