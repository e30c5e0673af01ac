"""Checkpoints: write one atomically, find the latest, and rewind a run folder to it.

A checkpoint is ``checkpoints/tick-<N>/`` holding ``engine.json`` (the engine's position,
clock, environment, pending messages, metrics, config hash, and the sizes of every
append-only file at that moment: the hosts' shards and the agents' ``memory.jsonl``),
``agents.json.gz`` (every agent's state) and ``agent_state.tar`` (every agent's ``state/``
folder, the files its skills keep, as ``<agent-id>/<path>`` members). Resuming cuts the
append-only files back to those sizes and puts the ``state/`` folders back, so a resumed
run writes exactly what an uninterrupted one would have.

A shard is checked as it is cut: one that is shorter than at the checkpoint, or whose last
member no longer reads back whole, stops the resume with a message instead of losing rows
in the middle of a history (see ``agentsim.store.shard``).

One archive rather than a copy of each folder: with 100,000 agents a checkpoint would
otherwise create some 300,000 folders and 100,000 files, and metadata writes are what file
systems do slowest. Restoring compares each file with its saved bytes and rewrites only the
ones that differ, so a resume touches only what changed since the checkpoint.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.errors import CheckpointError
from agentsim.run.workspace import RunWorkspace
from agentsim.store.layout import LAYOUT, shard_files
from agentsim.store.shard import (
    ShardDamaged,
    check_prefix,
    index_path,
    shard_sizes,
    truncate,
)

__all__ = [
    "Checkpoint",
    "checkpoint_dirs",
    "checkpoint_tick",
    "latest_checkpoint",
    "read_agents_state",
    "read_checkpoint",
    "remove_partial_checkpoints",
    "rewind",
    "write_checkpoint",
]

_APPEND_ONLY = ("memory.jsonl",)
_STATE_TAR = "agent_state.tar"
_AGENTS = "agents.json.gz"
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
        "store_files": {
            p.relative_to(ws.root).as_posix(): list(shard_sizes(p)) for p in shard_files(ws.root)
        },
        "events_bytes": ws.events_size(),
    }
    # Compressed: the agents' states (their recent memories, mostly) shrink ~25 times.
    with gzip.open(tmp / _AGENTS, "wt", encoding="utf-8") as f:
        json.dump(agents, f)
    _archive_agent_state(ws.agents_dir, tmp / _STATE_TAR)
    # The archive's digest lets a resume check it in one read instead of parsing every
    # member header (seconds at 100,000 agents).
    with open(tmp / _STATE_TAR, "rb") as f:
        state["state_archive_sha256"] = hashlib.file_digest(f, "sha256").hexdigest()
    (tmp / "engine.json").write_text(json.dumps(state), encoding="utf-8")
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
    cps = checkpoint_dirs(ws.root)
    if not cps:
        raise CheckpointError(
            f"{ws.root} has no checkpoint to resume from; set output.checkpoint_every "
            "in the experiment to make runs resumable"
        )
    return read_checkpoint(ws, cps[-1], config_hash=config_hash, engine_keys=engine_keys)


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """The run's checkpoint folders, oldest first."""
    cdir = run_dir / "checkpoints"
    return sorted(p for p in cdir.glob("tick-*") if p.is_dir()) if cdir.is_dir() else []


def checkpoint_tick(cp: Path) -> int:
    """The tick of a checkpoint folder (``tick-00000004`` -> 4)."""
    return int(cp.name.removeprefix("tick-"))


def read_checkpoint(
    ws: RunWorkspace, cp: Path, *, config_hash: str, engine_keys: Sequence[str] = ()
) -> Checkpoint:
    """The checkpoint in folder ``cp`` of run ``ws``, read and checked whole (reads only)."""
    _check_layout(ws)
    try:
        engine = json.loads((cp / "engine.json").read_text("utf-8"))
        agents = read_agents_state(cp)
        if not isinstance(engine, dict) or not isinstance(agents, dict):
            raise ValueError("engine.json and agents.json must each hold a JSON object")
        missing = [k for k in (*_OWN_KEYS, *engine_keys) if k not in engine]
        if missing:
            raise ValueError(f"engine.json lacks {', '.join(missing)}")
        _check_state_archive(cp, engine.get("state_archive_sha256"))
    except (OSError, EOFError, ValueError, tarfile.TarError) as exc:
        raise CheckpointError(
            f"checkpoint {cp} cannot be read ({exc}); delete that folder to resume from "
            "the one before"
        ) from None
    if engine["config_hash"] != config_hash:
        raise CheckpointError(
            f"checkpoint {cp.name} was written by a different configuration; resume with "
            "the run's own config.yaml"
        )
    _check_shards(ws, cp, engine)
    return Checkpoint(path=cp, engine=engine, agents=agents)


def read_agents_state(cp: Path) -> Any:
    """The agents' states a checkpoint saved (``agents.json`` before they were gzipped)."""
    if (cp / _AGENTS).is_file():
        with gzip.open(cp / _AGENTS, "rt", encoding="utf-8") as f:
            return json.load(f)
    return json.loads((cp / "agents.json").read_text("utf-8"))


def _check_layout(ws: RunWorkspace) -> None:
    """Resume only runs whose folder this version writes the same way."""
    if not (ws.root / "manifest.json").is_file():
        return  # not a run yet (``RunWorkspace.open_existing`` requires a manifest)
    manifest = ws.read_manifest()
    layout = manifest.get("layout", 1)
    if layout != LAYOUT:
        wrote = (manifest.get("versions") or {}).get("agentsim", "an older agentsim")
        raise CheckpointError(
            f"run folder {ws.root} has storage layout {layout} (written by agentsim {wrote}) "
            f"and this agentsim writes layout {LAYOUT}; resume it with the version that "
            "started it, or start the experiment again (inspect still reads it)"
        )


def _check_state_archive(cp: Path, sha256: str | None) -> None:
    """Check the agents' state archive against its digest, or (checkpoints of layout 2
    written before the digest) walk its member headers: a truncated or damaged archive
    fails here, before a resume has changed any file."""
    archive = cp / _STATE_TAR
    if not archive.is_file():
        raise ValueError(f"{_STATE_TAR} is missing")
    if sha256 is not None:
        with open(archive, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() != sha256:
                raise ValueError(f"{_STATE_TAR} does not match its digest in engine.json")
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
    _rewind_shards(ws, cp)
    _truncate_files(ws.agents_dir, cp.engine["agent_files"])
    _sync_agent_state(ws.agents_dir, cp.path / _STATE_TAR)
    ws.truncate_events(int(cp.engine["events_bytes"]))


def _check_shards(ws: RunWorkspace, cp: Path, engine: Mapping[str, Any]) -> None:
    """That every shard the checkpoint recorded still holds what it had then (read only)."""
    sizes: Mapping[str, Sequence[int]] = engine.get("store_files", {})
    for rel, keep in sorted(sizes.items()):
        try:
            check_prefix(ws.root / rel, (int(keep[0]), int(keep[1])))
        except ShardDamaged as exc:
            raise CheckpointError(
                f"{exc}: rows written before checkpoint {cp.name} are lost or damaged; "
                f"restore {rel} from a backup, or delete {cp} to resume from the "
                "checkpoint before"
            ) from None


def _rewind_shards(ws: RunWorkspace, cp: Checkpoint) -> None:
    """Cut every shard back to its size at ``cp`` (a torn tail of a crash goes with what
    was written after the checkpoint) and remove the shards made since."""
    sizes: Mapping[str, Sequence[int]] = cp.engine.get("store_files", {})
    for path in shard_files(ws.root):
        keep = sizes.get(path.relative_to(ws.root).as_posix())
        if keep is None:
            path.unlink()
            index_path(path).unlink(missing_ok=True)
        else:
            truncate(path, (int(keep[0]), int(keep[1])))


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
