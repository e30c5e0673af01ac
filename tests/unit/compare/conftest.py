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
