"""The run folder: manifest, resolved config, events, metrics, per-agent folders (the
hosts' shards are ``agentsim.store``'s).

Writes that readers may see mid-run (manifest, metrics) are atomic (temp file + rename),
and ``events.jsonl`` only ever grows by whole lines, flushed per tick, so ``inspect`` can
read a running or a crashed run consistently.

One process writes a run folder at a time: the writer holds an exclusive ``flock`` on
``run.lock`` for the whole run. The kernel drops it when the process ends, crash included,
so a stale lock file never blocks a resume.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import IO, Any

import yaml

from agentsim._atomic import atomic_write_text
from agentsim.errors import RunError
from agentsim.store.layout import LAYOUT

__all__ = [
    "LOCK_NAME",
    "RunLock",
    "RunWorkspace",
    "atomic_write_text",
    "check_run_dir",
    "package_versions",
]

LOCK_NAME = "run.lock"

# One encoder for every event line: json.dumps with options builds a new one per call.
_EVENT_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str)


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("agentsim", "pydantic", "pyyaml", "ray", "pyarrow"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def _has_files(root: Path) -> bool:
    """Whether ``root`` holds anything but its lock file."""
    return root.is_dir() and any(p.name != LOCK_NAME for p in root.iterdir())


def _exists(root: Path) -> RunError:
    return RunError(
        f"run folder {root} already exists and is not empty; choose another --out or "
        f"output.run_id, or resume it with `agentsim run --resume {root}`"
    )


def _cannot_create(root: Path, exc: OSError) -> RunError:
    where = f" ({os.fsdecode(exc.filename)})" if exc.filename else ""
    return RunError(
        f"cannot create the run folder {root}: {exc.strerror or exc}{where}; choose a "
        "folder this user can write with --out (or output.dir), or fix its permissions"
    )


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class RunLock:
    """The exclusive lock of one run folder, held by the process that writes it."""

    def __init__(self, root: Path, handle: IO[str]) -> None:
        self.root = root
        self._handle: IO[str] | None = handle

    @classmethod
    def acquire(cls, root: Path) -> RunLock:
        """Lock ``root/run.lock`` (created if missing) and write this process's pid into it;
        ``RunError`` naming the holder's pid if another process (or another workspace of this
        process) holds it."""
        handle = open(root / LOCK_NAME, "a+", encoding="utf-8")  # noqa: SIM115 - held for the run
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise _in_use(root, holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        return cls(root, handle)

    @staticmethod
    def holder(root: Path) -> str | None:
        """The pid in ``root/run.lock`` if a process holds the lock now, else None."""
        try:
            handle = open(root / LOCK_NAME, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError:
            return None
        with handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return handle.read().strip()
            return None

    @staticmethod
    def check_free(root: Path) -> None:
        """``RunError`` naming the holder's pid if a process holds ``root``'s lock now."""
        holder = RunLock.holder(root)
        if holder is not None:
            raise _in_use(root, holder)

    @property
    def held(self) -> bool:
        return self._handle is not None

    def release(self) -> None:
        """Unlock (closing the file unlocks it); the file stays, unlocked. Idempotent."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _in_use(root: Path, holder: str) -> RunError:
    pid = f"process {holder}" if holder else "another process"
    return RunError(
        f"run folder {root} is in use by {pid} (it holds {root / LOCK_NAME}); wait for that "
        "run to end, or stop it and then resume with `agentsim run --resume "
        f"{root}`"
    )


class RunWorkspace:
    """One run's folder. ``create`` refuses to overwrite; ``open_existing`` is for resume.

    Both hold the folder's ``RunLock`` until ``release()`` (or the end of the process)."""

    def __init__(self, root: Path, lock: RunLock | None = None) -> None:
        self.root = root
        self.lock = lock
        self._events: IO[str] | None = None

    @classmethod
    def create(cls, root: Path) -> RunWorkspace:
        """A new run folder at ``root`` (made if missing), locked. A folder that cannot be
        made or written is a ``RunError`` naming the path and the fix; what this call made
        is removed again, so nothing is left behind."""
        RunLock.check_free(root)
        if _has_files(root):
            raise _exists(root)
        made = not root.exists()
        lock: RunLock | None = None
        try:
            root.mkdir(parents=True, exist_ok=True)
            lock = RunLock.acquire(root)
            if _has_files(root):  # another process made and finished a run in between
                lock.release()
                raise _exists(root)
            (root / "agents").mkdir(exist_ok=True)
        except OSError as exc:
            if lock is not None:
                lock.release()
                (root / LOCK_NAME).unlink(missing_ok=True)
            if made and root.is_dir():
                with contextlib.suppress(OSError):
                    root.rmdir()
            raise _cannot_create(root, exc) from None
        return cls(root, lock)

    @classmethod
    def open_existing(cls, root: Path, *, lock: bool = True) -> RunWorkspace:
        """An existing run, locked for writing; ``lock=False`` only to read it."""
        if not (root / "manifest.json").is_file():
            raise RunError(f"{root} is not a run folder (no manifest.json); check the path")
        return cls(root, RunLock.acquire(root) if lock else None)

    def release(self) -> None:
        """Let another process write this folder (after the run's last write)."""
        self.close()
        if self.lock is not None:
            self.lock.release()

    @property
    def agents_dir(self) -> Path:
        return self.root / "agents"

    # -- manifest / config / metrics -------------------------------------------------------

    def read_manifest(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.root / "manifest.json").read_text("utf-8"))
        return data

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        atomic_write_text(self.root / "manifest.json", json.dumps(manifest, indent=2) + "\n")

    def update_manifest(self, **fields: Any) -> dict[str, Any]:
        m = self.read_manifest()
        m.update(fields)
        self.write_manifest(m)
        return m

    def new_manifest(
        self, *, run_id: str, name: str, config_hash: str, seed: int, executor: str
    ) -> dict[str, Any]:
        m = {
            "run_id": run_id,
            "name": name,
            "config_hash": config_hash,
            "seed": seed,
            "executor": executor,
            "status": "running",
            # How the folder is laid out (``agentsim.store.layout``): readers pick their
            # way to read it, and resume refuses a layout it does not write.
            "layout": LAYOUT,
            "started": _now(),
            "ended": None,
            "ticks_done": 0,
            "versions": package_versions(),
            "argv": sys.argv,
            "pid": os.getpid(),
        }
        self.write_manifest(m)
        return m

    def write_config(self, resolved: Mapping[str, Any]) -> None:
        atomic_write_text(
            self.root / "config.yaml", yaml.safe_dump(dict(resolved), sort_keys=False)
        )

    def write_metrics(self, metrics: Mapping[str, Any]) -> None:
        atomic_write_text(self.root / "metrics.json", json.dumps(metrics, indent=2) + "\n")

    # -- events ----------------------------------------------------------------------------

    def append_events(self, events: Iterable[Mapping[str, Any]]) -> int:
        if self._events is None:
            self._events = open(self.root / "events.jsonl", "a", encoding="utf-8")  # noqa: SIM115
        encode = _EVENT_JSON.encode
        lines = [encode(e) for e in events]
        if lines:
            self._events.write("\n".join(lines) + "\n")
            self._events.flush()
        return len(lines)

    def events_size(self) -> int:
        """Bytes of ``events.jsonl`` written so far (whole lines only: it is flushed per
        append)."""
        path = self.root / "events.jsonl"
        return path.stat().st_size if path.exists() else 0

    def truncate_events(self, size: int) -> None:
        """Cut ``events.jsonl`` back to ``size`` bytes (its size at a checkpoint), dropping
        everything a run wrote after that checkpoint, torn last line included."""
        self.close()
        path = self.root / "events.jsonl"
        if path.exists() and path.stat().st_size > size:
            with open(path, "r+b") as f:
                f.truncate(size)

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None

    def write_parquet(self) -> Path | None:
        """``events.parquet`` from ``events.jsonl`` (payload columns kept as JSON text)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        src = self.root / "events.jsonl"
        if not src.exists():
            return None
        cols: dict[str, list[Any]] = {
            "tick": [],
            "time": [],
            "type": [],
            "agent_id": [],
            "data": [],
        }
        with open(src, encoding="utf-8") as f:
            for line in f:
                ev = json.loads(line)
                cols["tick"].append(ev.pop("tick", None))
                cols["time"].append(ev.pop("time", None))
                cols["type"].append(ev.pop("type", None))
                cols["agent_id"].append(ev.pop("agent_id", None))
                cols["data"].append(json.dumps(ev, sort_keys=True))
        table = pa.table(
            {
                "tick": pa.array(cols["tick"], pa.int64()),
                "time": pa.array(cols["time"], pa.string()),
                "type": pa.array(cols["type"], pa.string()),
                "agent_id": pa.array(cols["agent_id"], pa.string()),
                "data": pa.array(cols["data"], pa.string()),
            }
        )
        out = self.root / "events.parquet"
        pq.write_table(table, out)
        return out


def check_run_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise RunError(f"{path} exists and is not a folder; choose another --out")
