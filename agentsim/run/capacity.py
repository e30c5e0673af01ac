"""Whether a run's agents fit the machine, said before the run starts.

The estimate is the agent count times per-agent figures measured on offline runs (the
scripted model, full traces; docs/performance.md, "Memory and disk per agent"), compared
with the memory available now (``MemAvailable``, or a container's own limit when lower) and
the free space of the run folder's file system. A run that does not fit is a
``ConfigError`` (exit code 2) naming both numbers; ``agentsim run --skip-capacity-check``
starts it anyway.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from agentsim.errors import ConfigError

__all__ = [
    "AGENT_DISK_BYTES",
    "AGENT_MEMORY_BYTES",
    "available_memory",
    "check_capacity",
    "free_disk",
]

AGENT_MEMORY_BYTES = 20 * 1024
"""Peak resident memory per agent, with room to spare: offline runs of one tick measured
6.6 KiB per agent without skills and 11.9 KiB with daily-mobility's (40,000 and 6,000
agents, above a base of about 150 MiB)."""
AGENT_DISK_BYTES = 12 * 1024
"""Run-folder space per agent once every agent has stepped once: three small files of 4 KiB
blocks (AGENT.json, profile.json, memory.jsonl); measured 12.3 KiB on ext4 without skills,
22.8 KiB with daily-mobility's skills and full traces. Every tick adds more."""

_CGROUP = Path("/sys/fs/cgroup")


def available_memory() -> int | None:
    """Bytes of memory this process can still use, or None where the system does not say:
    ``MemAvailable`` of ``/proc/meminfo``, lowered to a cgroup v2 limit's headroom."""
    found: list[int] = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError):
        pass
    try:
        limit = (_CGROUP / "memory.max").read_text().strip()
        used = (_CGROUP / "memory.current").read_text().strip()
        if limit != "max":
            found.append(max(0, int(limit) - int(used)))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def free_disk(path: Path) -> int:
    """Free bytes (for this user) on the file system that holds ``path`` (or would)."""
    return shutil.disk_usage(_existing(path)).free


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


_OVERRIDE = "or pass --skip-capacity-check to start anyway"


def check_capacity(agents: int, run_dir: Path, *, memory_here: bool = True) -> None:
    """``ConfigError`` if ``agents`` agents will not fit the memory available (when they
    live in this machine's processes, ``memory_here``) or the free space where ``run_dir``
    is written."""
    if memory_here:
        need = agents * AGENT_MEMORY_BYTES
        have = available_memory()
        if have is not None and need > have:
            raise ConfigError(
                "agents",
                f"{agents:,} agents need about {_size(need)} of memory "
                f"({AGENT_MEMORY_BYTES // 1024} KiB each) but {_size(have)} is available",
                f"run fewer agents or spread them over Ray hosts, {_OVERRIDE}",
            )
    need = agents * AGENT_DISK_BYTES
    have = free_disk(run_dir)
    if need > have:
        raise ConfigError(
            "agents",
            f"{agents:,} agents need about {_size(need)} of disk for the run folder "
            f"({AGENT_DISK_BYTES // 1024} KiB each) but {_existing(run_dir)} "
            f"has {_size(have)} free",
            f"free space, choose another --out, run fewer agents, {_OVERRIDE}",
        )


def _existing(path: Path) -> Path:
    """``path``, or its nearest existing parent (whose file system it would be on)."""
    where = path.absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    return where
