"""Checkpoints: write one atomically, find the latest, and rewind a run folder to it.

A checkpoint is ``checkpoints/tick-<N>/`` holding ``engine.json`` (the engine's position,
clock, environment, pending messages, metrics, config hash, and the sizes of every
append-only file at that moment), ``agents.json`` (every agent's state) and
``agent_state/<id>/`` (a copy of each agent's ``state/`` folder, the files its skills keep).
Resuming cuts the append-only files back to those sizes and puts the ``state/`` folders
back, so a resumed run writes exactly what an uninterrupted one would have.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.errors import CheckpointError
from agentsim.sim.workspace import RunWorkspace

__all__ = ["Checkpoint", "latest_checkpoint", "rewind", "write_checkpoint"]

_APPEND_ONLY = ("memory.jsonl", "trace.jsonl")


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    path: Path
    engine: dict[str, Any]
    agents: dict[str, Any]


def write_checkpoint(
    ws: RunWorkspace, *, tick: int, engine: Mapping[str, Any], agents: Mapping[str, Any]
) -> Path:
    """Write ``checkpoints/tick-<tick>/`` atomically (a temp folder, then one rename).

    Call it after the agents' buffered lines were flushed: the file sizes recorded here are
    what a resume cuts back to."""
    cdir = ws.root / "checkpoints"
    cdir.mkdir(exist_ok=True)
    final = cdir / f"tick-{tick:08d}"
    tmp = cdir / f".tmp-{tick:08d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    state = {
        **engine,
        "tick": tick,
        "agent_files": _file_sizes(ws.agents_dir),
        "events_bytes": ws.events_size(),
    }
    (tmp / "engine.json").write_text(json.dumps(state), encoding="utf-8")
    (tmp / "agents.json").write_text(json.dumps(agents), encoding="utf-8")
    for sdir in sorted(ws.agents_dir.glob("*/state")):
        if sdir.is_dir():
            shutil.copytree(sdir, tmp / "agent_state" / sdir.parent.name)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def latest_checkpoint(ws: RunWorkspace, *, config_hash: str) -> Checkpoint:
    """The newest readable checkpoint of the run; errors say what to do instead."""
    cdir = ws.root / "checkpoints"
    cps = sorted(p for p in cdir.glob("tick-*") if p.is_dir()) if cdir.is_dir() else []
    if not cps:
        raise CheckpointError(
            f"{ws.root} has no checkpoint to resume from; set output.checkpoint_every "
            "in the experiment to make runs resumable"
        )
    cp = cps[-1]
    try:
        engine = json.loads((cp / "engine.json").read_text("utf-8"))
        agents = json.loads((cp / "agents.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(
            f"checkpoint {cp} cannot be read ({exc}); delete that folder to resume from "
            "the one before"
        ) from None
    if engine["config_hash"] != config_hash:
        raise CheckpointError(
            f"checkpoint {cp.name} was written by a different configuration; resume with "
            "the run's own config.yaml"
        )
    return Checkpoint(path=cp, engine=engine, agents=agents)


def rewind(ws: RunWorkspace, cp: Checkpoint) -> None:
    """Cut the run folder back to the moment ``cp`` was written."""
    _truncate_files(ws.agents_dir, cp.engine["agent_files"])
    _restore_agent_state(ws.agents_dir, cp.path / "agent_state")
    ws.truncate_events(int(cp.engine["events_bytes"]))


def _file_sizes(agents_dir: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name in _APPEND_ONLY:
        for p in agents_dir.glob(f"*/{name}"):
            out.setdefault(p.parent.name, {})[name] = p.stat().st_size
    return out


def _truncate_files(agents_dir: Path, sizes: Mapping[str, Mapping[str, int]]) -> None:
    """Cut per-agent append-only files back to their size at the checkpoint."""
    for d in agents_dir.iterdir() if agents_dir.is_dir() else ():
        for name in _APPEND_ONLY:
            p = d / name
            if not p.exists():
                continue
            keep = sizes.get(d.name, {}).get(name, 0)
            if p.stat().st_size > keep:
                with open(p, "r+b") as f:
                    f.truncate(keep)


def _restore_agent_state(agents_dir: Path, saved: Path) -> None:
    """Put every agent's ``state/`` folder back as it was at the checkpoint."""
    for d in agents_dir.iterdir() if agents_dir.is_dir() else ():
        live = d / "state"
        if live.exists():
            shutil.rmtree(live)
        if (saved / d.name).is_dir():
            shutil.copytree(saved / d.name, live)
