"""Read one agent's rows from a run's shards (layout 2, see ``agentsim.store.layout``).

Only the host that holds the agent is read, and of its shard only the members whose key
range holds the agent (``agentsim.store.shard``): looking at one agent costs about the same
in a run of ten agents or of a million, and works while the run is writing.

A ``StoreReader`` lives as long as its ``Run`` (the viewer looks agents up request after
request), so it keeps what it read: the hosts' agent lists and the shards' indexes. Each is
read again only when its file changed (size, mtime or inode), so rows a running engine
appends since are seen at the next lookup, and a shard a resume cut back is read anew.
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.errors import RunError
from agentsim.store.layout import AGENTS, LAYOUT, PARTS, ROWS, store_dir, text_hash
from agentsim.store.shard import (
    Member,
    ShardDamaged,
    index_path,
    key_prefix,
    read_index,
    read_key,
    read_member,
)

__all__ = ["AgentRows", "StoreReader", "open_store"]

# What tells that a file changed; None for a file that is not there (yet).
_Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> _Stamp:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def open_store(run_dir: Path) -> StoreReader | None:
    """The run's shard reader, or None for a layout-1 run (everything in agent folders).
    A manifest that cannot be read is judged by the folder (``Run.manifest`` reports it)."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text("utf-8"))
    except (OSError, ValueError):
        manifest = None
    if not isinstance(manifest, dict):
        manifest = {"layout": LAYOUT if store_dir(run_dir).is_dir() else 1}
    layout = manifest.get("layout", 1)
    if layout == 1:
        return None
    if layout != LAYOUT:
        wrote = (manifest.get("versions") or {}).get("agentsim", "a newer agentsim")
        raise RunError(
            f"run {run_dir} has storage layout {layout!r} (written by agentsim {wrote}); "
            f"this agentsim reads layouts 1 and {LAYOUT}: inspect it with agentsim {wrote} "
            "or newer"
        )
    return StoreReader(run_dir)


@dataclass(frozen=True, slots=True)
class _Index:
    """A shard's index as read when its files had ``stamp`` (index file, data size)."""

    stamp: tuple[_Stamp, _Stamp]
    members: list[Member]
    by_key: Mapping[str, Member]  # for shards keyed by content hash (exact keys)


class StoreReader:
    """A run's shards, read-only. Cheap to make: files are read on first need, and read
    again only when they changed."""

    def __init__(self, run_dir: Path) -> None:
        self.root = store_dir(run_dir)
        # The viewer reads from worker threads: one refresh at a time.
        self._lock = threading.Lock()
        self._agents: dict[Path, tuple[_Stamp, list[str]]] = {}  # host -> sorted agent ids
        self._indexes: dict[Path, _Index] = {}  # shard data file -> its index

    def _hosts(self) -> list[Path]:
        return sorted(self.root.glob("host-*")) if self.root.is_dir() else []

    def _agent_ids(self, host: Path) -> list[str]:
        path = host / AGENTS
        stamp = _stamp(path)
        with self._lock:
            cached = self._agents.get(host)
            if cached is not None and cached[0] == stamp:
                return cached[1]
            try:
                ids = sorted(map(str, json.loads(path.read_text("utf-8"))))
            except (OSError, ValueError, TypeError):
                ids = []  # a host that has not written its list yet holds no rows either
            self._agents[host] = (stamp, ids)
            return ids

    def index(self, data: Path) -> _Index:
        """The index of shard ``data`` as it is now (read again only if it changed)."""
        # Stamped before reading: a change made meanwhile shows at the next call.
        stamp = (_stamp(index_path(data)), _stamp(data))
        with self._lock:
            cached = self._indexes.get(data)
            if cached is not None and cached.stamp == stamp:
                return cached
            members = read_index(data)
            by_key: dict[str, Member] = {}
            for m in members:
                for k in m.keys or ():
                    by_key.setdefault(k, m)
            fresh = _Index(stamp=stamp, members=members, by_key=by_key)
            self._indexes[data] = fresh
            return fresh

    def host_of(self, agent_id: str) -> Path | None:
        """The folder of the host whose ``agents.json`` lists ``agent_id``."""
        for host in self._hosts():
            ids = self._agent_ids(host)
            i = bisect.bisect_left(ids, agent_id)
            if i < len(ids) and ids[i] == agent_id:
                return host
        return None

    def agent(self, agent_id: str) -> AgentRows:
        return AgentRows(self, agent_id, self.host_of(agent_id))

    def part(self, digest: str) -> str | None:
        """The text of one prompt part, by its content hash."""
        prefix = key_prefix(digest)
        for host in self._hosts():
            data = host / PARTS
            member = self.index(data).by_key.get(digest)
            if member is None:
                continue
            for line in _member_rows(data, member):
                if line.startswith(prefix):
                    return str(json.loads(line)["text"])
            return None
        return None


class AgentRows:
    """One agent's rows: trace lines, skills records, prompt references."""

    def __init__(self, reader: StoreReader, agent_id: str, host: Path | None) -> None:
        self.reader = reader
        self.agent_id = agent_id
        self.host = host

    def rows(self, kind: str) -> Iterator[Any]:
        """The ``data`` of the agent's rows of ``kind``, in the order written."""
        if self.host is None:
            return
        try:
            data = self.host / ROWS
            for row in read_key(data, self.agent_id, self.reader.index(data).members):
                if row.get("kind") == kind:
                    yield row.get("data")
        except ShardDamaged as exc:
            raise RunError(
                f"{exc}; the rows of agent {self.agent_id!r} there cannot be read"
            ) from None

    def skills(self) -> dict[str, Any]:
        """The last skills record ({"active": [...], "step_count": n}); {} before one."""
        last: dict[str, Any] = {}
        for data in self.rows("skills"):
            if isinstance(data, dict):
                last = data
        return last

    def system_prompt(self, sha: str) -> str | None:
        """The system prompt with hash ``sha``, joined from its parts and checked against
        the hash; None if the agent has no prompt row for it."""
        for data in self.rows("prompt"):
            if not isinstance(data, dict) or data.get("sha") != sha:
                continue
            texts = []
            for digest in data.get("parts", []):
                text = self.reader.part(str(digest))
                if text is None:
                    raise RunError(
                        f"prompt part {digest} of agent {self.agent_id!r} is missing from "
                        f"{self.reader.root}; the run may have died while writing it"
                    )
                texts.append(text)
            system = "\n".join(texts)
            if text_hash(system) != sha:
                raise RunError(
                    f"the stored parts of system prompt {sha} of agent {self.agent_id!r} do "
                    "not rebuild it (hash mismatch); the store is damaged"
                )
            return system
        return None


def _member_rows(data: Path, member: Member) -> list[str]:
    try:
        return read_member(data, member)
    except ShardDamaged as exc:
        raise RunError(f"{exc}; prompts stored there cannot be read") from None
