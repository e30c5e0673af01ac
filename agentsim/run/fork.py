"""Forks: a new run that starts from another run's checkpoint with an amended workflow.

``agentsim run --fork RUN --at TICK [EXPERIMENT.yaml | --set KEY=VALUE ...]`` takes RUN's
checkpoint at TICK, copies what RUN wrote before it (its events, the agents' files and
shards, the answers of the surveys it had run) into a new run folder, and runs the fork's
workflow from there. The ticks before TICK are copied, never re-run, so the fork must agree
with its parent on everything that made them: the seed, the clock, the agents, the
environment and the workflow steps before TICK. Everything else may change: later steps (a
wrong intervention mended, a what-if), the model (a tick lost to an outage redone), new
skill folders. The skills the parent had are its versions at TICK, restored from its run
folder (``agentsim.skills.provenance``), whatever their folders hold now.

A fork with its parent's own workflow writes byte-identical events to the parent's.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentsim.config._yaml import read_yaml_mapping
from agentsim.config.experiment import (
    ExperimentConfig,
    InterviewStep,
    RunStep,
    SurveyStep,
    parse_experiment,
)
from agentsim.errors import CheckpointError, ConfigError, RunError
from agentsim.run.checkpoints import (
    Checkpoint,
    checkpoint_dirs,
    checkpoint_tick,
    read_checkpoint,
)
from agentsim.run.workspace import RunWorkspace
from agentsim.store.layout import store_dir

__all__ = ["ForkPoint", "apply_sets", "check_shared", "fork_config", "open_fork", "set_value"]

# What a fork must share with its parent: the ticks before the fork made them.
_SHARED = ("seed", "clock", "agents", "environment")


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkPoint:
    """Where a fork starts: the parent run, its config and its checkpoint at ``tick``."""

    parent: Path
    tick: int
    config: ExperimentConfig
    checkpoint: Checkpoint

    @property
    def position(self) -> tuple[int, int]:
        """(workflow step index, ticks done inside it) at the checkpoint."""
        pos = self.checkpoint.engine["pos"]
        return int(pos[0]), int(pos[1])

    def lineage(self) -> dict[str, Any]:
        """What the fork's manifest says of its parent."""
        return {"run": str(self.parent.resolve()), "run_id": self.parent.name, "tick": self.tick}


def open_fork(parent: Path, tick: int, *, engine_keys: Sequence[str] = ()) -> ForkPoint:
    """RUN's checkpoint at ``tick``, read and checked; errors name the ticks there are."""
    parent = Path(parent)
    if not (parent / "manifest.json").is_file():
        raise RunError(
            f"--fork: {parent} is not a run folder (no manifest.json); give the folder of "
            "the run to fork (e.g. workspace/<name>-<timestamp>)"
        )
    ws = RunWorkspace.open_existing(parent, lock=False)
    config = parent_config(parent, ws.read_manifest())
    found = {checkpoint_tick(p): p for p in checkpoint_dirs(parent)}
    if tick not in found:
        ticks = ", ".join(map(str, sorted(found))) or "none"
        raise CheckpointError(
            f"run {parent} has no checkpoint at tick {tick} (checkpoints at ticks: {ticks}); "
            "fork at one of those ticks, or set output.checkpoint_every to keep more"
        )
    cp = read_checkpoint(ws, found[tick], config_hash=config.config_hash(), engine_keys=engine_keys)
    return ForkPoint(parent=parent, tick=tick, config=config, checkpoint=cp)


def parent_config(parent: Path, manifest: Mapping[str, Any]) -> ExperimentConfig:
    """The parent run's own configuration (its ``config.yaml``)."""
    path = parent / "config.yaml"
    return parse_experiment(
        path.read_text("utf-8"), source=str(path), base_dir=Path(manifest.get("source_dir", "."))
    )


def apply_sets(data: dict[str, Any], sets: Sequence[str]) -> dict[str, Any]:
    """``data`` with each ``KEY=VALUE`` of ``sets`` applied: KEY is a dotted path (list
    items by index: ``workflow.3.intervene.args.text``), VALUE is read as YAML."""
    for item in sets:
        key, eq, raw = item.partition("=")
        if not eq or not key:
            raise ConfigError("--set", f"{item!r} is not KEY=VALUE", "write e.g. --set seed=2")
        set_value(data, key, _value(raw))
    return data


def set_value(data: dict[str, Any], key: str, value: Any, *, option: str = "--set") -> None:
    """Set the dotted path ``key`` of ``data`` to ``value``, as ``--set KEY=VALUE`` does
    (a study's ``set:`` too); errors name ``option`` and the key."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise ConfigError(
                    f"{option} {key}",
                    f"{where}: there is no item {part!r} (the list has {len(node)})",
                    f"use an index from 0 to {len(node) - 1}",
                )
            if last:
                node[int(part)] = value
            else:
                node = node[int(part)]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                node = node.setdefault(part, {})
        else:
            raise ConfigError(
                f"{option} {key}",
                f"{'.'.join(parts[:i])} is a value, not a mapping or list",
                "set the value itself",
            )


def _value(raw: str) -> Any:
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError:
        return raw


def fork_config(
    point: ForkPoint,
    *,
    experiment: Path | None = None,
    sets: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> ExperimentConfig:
    """The fork's configuration: ``experiment`` (or the parent's own config) with ``sets``
    applied, checked against what the ticks before the fork were made with."""
    if experiment is not None:
        source = str(experiment)
        base = Path(experiment).parent
        try:
            text = Path(experiment).read_text("utf-8")
        except OSError as exc:
            raise ConfigError(
                "", f"cannot read experiment file {experiment}: {exc.strerror}", "check the path"
            ) from None
    else:
        source = str(point.parent / "config.yaml")
        base = point.config.source_dir
        text = (point.parent / "config.yaml").read_text("utf-8")
    if sets:
        data = apply_sets(read_yaml_mapping(text, source=source), sets)
        text = yaml.safe_dump(data, sort_keys=False)
        source = f"{source} with --set"
    config = parse_experiment(text, source=source, base_dir=base, environ=environ)
    check_shared(point, config)
    return config


def check_shared(point: ForkPoint, config: ExperimentConfig) -> None:
    """``ConfigError`` unless ``config`` keeps what made the ticks before the fork."""
    parent = point.config.resolved_dict()
    child = config.resolved_dict()
    for key in _SHARED:
        if parent.get(key) != child.get(key):
            raise ConfigError(
                key,
                f"differs from the parent run's {key} (run {point.parent}); the ticks before "
                f"tick {point.tick} are copied from it, not re-run",
                f"keep {key} as the parent had it, or start a new run",
            )
    si, done = point.position
    before, now = point.config.steps(), config.steps()
    for i in range(si):
        if i >= len(now) or now[i] != before[i]:
            raise ConfigError(
                f"workflow.{i}",
                f"differs from the parent run's step, which ran before tick {point.tick} "
                f"(the fork starts inside workflow.{si})",
                f"change only workflow.{si} and later steps, or fork at an earlier tick",
            )
    if done:
        step = now[si] if si < len(now) else None
        if not isinstance(step, RunStep) or step.ticks < done:
            raise ConfigError(
                f"workflow.{si}",
                f"must stay a run step of at least {done} ticks: the fork starts after "
                f"{done} of its ticks (tick {point.tick})",
                f"give workflow.{si} run: {{ticks: {done}}} or more",
            )


def copy_history(point: ForkPoint, ws: RunWorkspace) -> None:
    """Copy into the fork's folder what the parent wrote before the checkpoint: its events
    (cut at the checkpoint), agent folders and shards (cut back by the resume that
    follows), the answers of the surveys it ran before, and the checkpoint itself, made the
    fork's own (so the fork can be resumed or forked there too)."""
    parent, root = point.parent, ws.root
    # Whole files: the resume that follows cuts each back to its size at the checkpoint.
    shutil.copyfile(parent / "events.jsonl", root / "events.jsonl")
    if (parent / "agents").is_dir():
        shutil.copytree(
            parent / "agents", ws.agents_dir, dirs_exist_ok=True, copy_function=_copy_present
        )
    store = store_dir(parent)
    if store.is_dir():
        shutil.copytree(store, store_dir(root), dirs_exist_ok=True, copy_function=_copy_present)
    si = point.position[0]
    for i, step in enumerate(point.config.steps()[:si]):
        if isinstance(step, SurveyStep):
            kind = "interview" if isinstance(step, InterviewStep) else "survey"
            name = f"{step.name or f'{kind}-{i}'}.jsonl"
            if (parent / "surveys" / name).is_file():
                (root / "surveys").mkdir(exist_ok=True)
                shutil.copy2(parent / "surveys" / name, root / "surveys" / name)
    cdir = root / "checkpoints"
    cdir.mkdir(exist_ok=True)
    shutil.copytree(point.checkpoint.path, cdir / point.checkpoint.path.name)


def _copy_present(src: str, dst: str) -> str:
    """Copy one file, unless the parent, still running (a study forks while its control
    goes on), removed it meanwhile (a skill's file replaced by an atomic write): the resume
    that follows puts every agent's ``state/`` back as the checkpoint saved it and cuts the
    shards back, so a file the parent made after the checkpoint is not needed."""
    try:
        return str(shutil.copy2(src, dst))
    except FileNotFoundError:
        return dst


def own_checkpoint(point: ForkPoint, ws: RunWorkspace, config_hash: str) -> Checkpoint:
    """The copied checkpoint, rewritten to carry the fork's config hash."""
    import json

    path = ws.root / "checkpoints" / point.checkpoint.path.name
    engine = {**point.checkpoint.engine, "config_hash": config_hash}
    (path / "engine.json").write_text(json.dumps(engine), encoding="utf-8")
    return Checkpoint(path=path, engine=engine, agents=point.checkpoint.agents)
