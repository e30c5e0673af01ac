"""Read one agent's rows from a run's shards (layout 2, see ``agentsim.store.layout``).

Only the host that holds the agent is read, and of its shard only the members whose key
range holds the agent (``agentsim.store.shard``): looking at one agent costs about the same
in a run of ten agents or of a million, and works while the run is writing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentsim.errors import RunError
from agentsim.store.layout import AGENTS, LAYOUT, PARTS, ROWS, store_dir, text_hash
from agentsim.store.shard import Member, ShardDamaged, key_prefix, read_index, read_key, read_member

__all__ = ["AgentRows", "StoreReader", "open_store"]


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


class StoreReader:
    """A run's shards, read-only. Cheap to make: files are read on first need."""

    def __init__(self, run_dir: Path) -> None:
        self.root = store_dir(run_dir)
        self._parts: dict[str, tuple[Path, Member]] | None = None

    def host_of(self, agent_id: str) -> Path | None:
        """The folder of the host whose ``agents.json`` lists ``agent_id``."""
        for host in sorted(self.root.glob("host-*")) if self.root.is_dir() else ():
            try:
                ids = json.loads((host / AGENTS).read_text("utf-8"))
            except (OSError, ValueError):
                continue  # a host that has not written its list yet holds no rows either
            if agent_id in ids:
                return host
        return None

    def agent(self, agent_id: str) -> AgentRows:
        return AgentRows(self, agent_id, self.host_of(agent_id))

    def part(self, digest: str) -> str | None:
        """The text of one prompt part, by its content hash."""
        if self._parts is None:
            self._parts = {}
            for data in sorted(self.root.glob(f"host-*/{PARTS}")):
                for m in read_index(data):
                    for k in m.keys or ():
                        self._parts.setdefault(k, (data, m))
        hit = self._parts.get(digest)
        if hit is None:
            return None
        prefix = key_prefix(digest)
        for line in _member_rows(*hit):
            if line.startswith(prefix):
                return str(json.loads(line)["text"])
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
            for row in read_key(self.host / ROWS, self.agent_id):
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
