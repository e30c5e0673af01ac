"""Checkpoints: write one atomically, find the latest, and rewind a run folder to it.

A checkpoint is ``checkpoints/tick-<N>/`` holding ``engine.json`` (the engine's position,
clock, environment, pending messages, metrics, config hash, and the sizes of every
append-only file at that moment), ``agents.json`` (every agent's state) and
``agent_state.tar`` (every agent's ``state/`` folder, the files its skills keep, as
``<agent-id>/<path>`` members). Resuming cuts the append-only files back to those sizes and
puts the ``state/`` folders back, so a resumed run writes exactly what an uninterrupted one
would have.

One archive rather than a copy of each folder: with 100,000 agents a checkpoint would
otherwise create some 300,000 folders and 100,000 files, and metadata writes are what file
systems do slowest. Restoring compares each file with its saved bytes and rewrites only the
ones that differ, so a resume touches only what changed since the checkpoint. Checkpoints
written before this format (an ``agent_state/`` folder) are still restored.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.errors import CheckpointError
from agentsim.sim.workspace import RunWorkspace

__all__ = [
    "Checkpoint",
    "latest_checkpoint",
    "remove_partial_checkpoints",
    "rewind",
    "write_checkpoint",
]

_APPEND_ONLY = ("memory.jsonl", "trace.jsonl")
_STATE_TAR = "agent_state.tar"
_TMP_PREFIX = ".tmp-"
# What ``write_checkpoint`` itself puts in ``engine.json``.
_OWN_KEYS = ("config_hash", "agent_files", "events_bytes")


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
    tmp = cdir / f"{_TMP_PREFIX}{tick:08d}-{os.getpid()}"
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
    _archive_agent_state(ws.agents_dir, tmp / _STATE_TAR)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def latest_checkpoint(
    ws: RunWorkspace, *, config_hash: str, engine_keys: Sequence[str] = ()
) -> Checkpoint:
    """The newest checkpoint of the run, read and checked whole; errors say what to do.

    Reads only: a resume calls it before writing anything, so a checkpoint that cannot be
    used leaves the run folder as it was. ``engine_keys``: what the caller's engine state
    must hold besides this module's own keys."""
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
        if not isinstance(engine, dict) or not isinstance(agents, dict):
            raise ValueError("engine.json and agents.json must each hold a JSON object")
        missing = [k for k in (*_OWN_KEYS, *engine_keys) if k not in engine]
        if missing:
            raise ValueError(f"engine.json lacks {', '.join(missing)}")
        _check_state_archive(cp)
    except (OSError, ValueError, tarfile.TarError) as exc:
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


def _check_state_archive(cp: Path) -> None:
    """Walk the member headers of the agents' state archive (a truncated or damaged archive
    fails here, before a resume has changed any file)."""
    archive = cp / _STATE_TAR
    if not archive.is_file():
        if not (cp / "agent_state").is_dir():  # the format before the archive
            raise ValueError(f"{_STATE_TAR} is missing")
        return
    with tarfile.open(archive, "r") as tar:
        while tar.next() is not None:
            tar.members.clear()  # type: ignore[attr-defined]


def remove_partial_checkpoints(ws: RunWorkspace) -> list[Path]:
    """Remove the temp folders of checkpoints whose writing was cut short (the run died
    before their rename); returns what was removed."""
    cdir = ws.root / "checkpoints"
    if not cdir.is_dir():
        return []
    partial = sorted(p for p in cdir.iterdir() if p.name.startswith(_TMP_PREFIX) and p.is_dir())
    for p in partial:
        shutil.rmtree(p)
    return partial


def rewind(ws: RunWorkspace, cp: Checkpoint) -> None:
    """Cut the run folder back to the moment ``cp`` was written."""
    _truncate_files(ws.agents_dir, cp.engine["agent_files"])
    if (cp.path / _STATE_TAR).is_file():
        _sync_agent_state(ws.agents_dir, cp.path / _STATE_TAR)
    else:
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


def _state_entries(state: str) -> Iterator[tuple[str, os.DirEntry[str] | None, bool]]:
    """(path relative to ``state``, entry, is an empty folder) of every folder (entry None)
    and regular file under ``state``, parents before children ("" is ``state`` itself).
    Symlinks are skipped: a skill's state is its own."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(state, rel) if rel else state) as it:
            entries = sorted(it, key=lambda e: e.name)
        dirs = [e for e in entries if e.is_dir(follow_symlinks=False)]
        files = [e for e in entries if e.is_file(follow_symlinks=False)]
        yield rel, None, not (dirs or files)
        for e in files:
            yield (f"{rel}/{e.name}" if rel else e.name), e, False
        stack.extend(f"{rel}/{e.name}" if rel else e.name for e in reversed(dirs))


def _archive_agent_state(agents_dir: Path, target: Path) -> None:
    """Every ``agents/<id>/state/`` tree into one uncompressed tar (ids sorted): its files
    as ``<id>/<path>``, and its empty folders (``<id>/`` for an empty ``state/``). Folders
    that hold something are implied by their contents: a quarter of the members to read."""
    # GNU format with whole-second times: no PAX header per member, which would triple the
    # cost of reading the archive back (restores compare bytes, never times).
    with tarfile.open(target, "w", format=tarfile.GNU_FORMAT) as tar:
        for agent in sorted(os.listdir(agents_dir)) if agents_dir.is_dir() else ():
            state = os.path.join(agents_dir, agent, "state")
            if not os.path.isdir(state):
                continue
            for rel, entry, empty in _state_entries(state):
                name = f"{agent}/{rel}"
                if entry is None:
                    if empty:
                        info = tarfile.TarInfo(name)
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        tar.addfile(info)
                    continue
                st = entry.stat(follow_symlinks=False)
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), st.st_mode & 0o777
                with open(entry.path, "rb") as f:
                    tar.addfile(info, f)


def _sync_agent_state(agents_dir: Path, archive: Path) -> None:
    """Make every ``agents/<id>/state/`` equal to its copy in ``archive``: files that differ
    are rewritten, files and folders made after the checkpoint removed, the rest untouched.
    Agents without a saved state lose their live one. The archive is streamed one agent at a
    time, so memory holds one agent's files, not the run's."""
    seen: set[str] = set()
    agent, want = "", dict[str, bytes | None]()  # rel -> bytes, or None for a folder
    with tarfile.open(archive, "r") as tar:
        while (member := tar.next()) is not None:
            # TarFile keeps every member it has read; a run's archive can hold 100,000s.
            tar.members.clear()  # type: ignore[attr-defined]
            owner, _, rel = member.name.partition("/")
            if owner != agent:
                if agent:
                    _sync_tree(os.path.join(agents_dir, agent, "state"), want)
                agent, want = owner, {}
                seen.add(owner)
            if member.isdir():  # an empty folder ("" for an empty state/ itself)
                want[rel] = None
            elif member.isfile():
                data = tar.extractfile(member)
                want[rel] = data.read() if data is not None else b""
    if agent:
        _sync_tree(os.path.join(agents_dir, agent, "state"), want)
    for name in sorted(os.listdir(agents_dir)) if agents_dir.is_dir() else ():
        state = os.path.join(agents_dir, name, "state")
        if name not in seen and os.path.isdir(state):
            shutil.rmtree(state)


def _sync_tree(state: str, want: Mapping[str, bytes | None]) -> None:
    """Make the folder ``state`` hold exactly ``want`` (relative path -> bytes, or None for
    an empty folder; "" is ``state`` itself)."""
    keep = set(want)
    for rel in want:
        while rel:
            rel = rel.rpartition("/")[0]
            keep.add(rel)
    if os.path.isdir(state):
        stale = [rel for rel, _, _ in _state_entries(state) if rel not in keep]
        for rel in reversed(stale):  # children before their folders
            path = os.path.join(state, rel)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            elif os.path.lexists(path):
                os.unlink(path)
    for rel, data in want.items():
        path = os.path.join(state, rel) if rel else state
        if data is None:
            os.makedirs(path, exist_ok=True)
            continue
        try:
            with open(path, "rb") as f:
                if f.read() == data:
                    continue
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
