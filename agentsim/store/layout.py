"""Where a run keeps its agents' traces and prompts, and the writer of one host's part.

Layout 2 (this one): ``store/host-<NNNN>/`` per host holds

- ``rows.jsonl.gz`` (+ ``.idx``): the host's agents' trace lines, active-skill records
  and prompt references, keyed by agent id, appended at every flush;
- ``parts.jsonl.gz`` (+ ``.idx``): the parts of system prompts (an agent's persona and
  profile, a catalog, skill bodies, the instructions), keyed by content hash, each stored
  once by the host that first used it;
- ``agents.json``: the host's agent ids, so a reader knows which host holds an agent.

An agent's own folder ``agents/<id>/`` keeps only what skills read and write as files:
``profile.json``, ``memory.jsonl`` and ``state/`` (memory stays a file because skills such
as ``reflect`` read it). Layout 1 (runs whose ``manifest.json`` has no ``layout``) kept
``trace.jsonl``, ``skills.json`` and ``prompts/<sha>.txt`` there too; ``agentsim.inspect``
reads both layouts.

Each host writes only its own folder, so the Ray executor's hosts never share a file: on a
shared file system they write side by side, and a checkpoint records every shard's size.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring
from pathlib import Path

from agentsim._atomic import atomic_write_text
from agentsim.errors import RunError
from agentsim.store.shard import DATA_SUFFIX, Appender, key_prefix, read_index

__all__ = [
    "LAYOUT",
    "HostStore",
    "host_dir",
    "part_hash",
    "prompt_row",
    "row",
    "run_hosts",
    "shard_files",
    "store_dir",
    "text_hash",
]

LAYOUT = 2
# Prompt parts held before they are written even if no flush is due: a bound on memory.
_PARTS_BYTES = 4 * 1024 * 1024
ROWS = "rows" + DATA_SUFFIX
PARTS = "parts" + DATA_SUFFIX
AGENTS = "agents.json"


def store_dir(run_dir: Path) -> Path:
    return run_dir / "store"


def host_dir(run_dir: Path, host_id: int) -> Path:
    return store_dir(run_dir) / f"host-{host_id:04d}"


def shard_files(run_dir: Path) -> list[Path]:
    """The data file of every shard of the run, sorted."""
    root = store_dir(run_dir)
    return sorted(root.glob(f"host-*/*{DATA_SUFFIX}")) if root.is_dir() else []


def run_hosts(run_dir: Path) -> int:
    """How many hosts wrote the run (0 before any did)."""
    root = store_dir(run_dir)
    return sum(1 for _ in root.glob("host-*")) if root.is_dir() else 0


def text_hash(text: str) -> str:
    """The content hash of a prompt, or of one of its parts (16 hex digits of sha256)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1024)
def part_hash(text: str) -> str:
    """``text_hash`` of a prompt part, cached: the catalog and skill bodies are the same
    string objects in thousands of agents' prompts, hashed again at every prompt change
    (the measured cost: docs/performance.md)."""
    return text_hash(text)


def row(key: str, kind: str, data_json: str) -> str:
    """A row whose ``data`` is already encoded JSON (no decode and re-encode)."""
    return f'{key_prefix(key)}"kind": "{kind}", "data": {data_json}}}'


def prompt_row(agent_id: str, sha: str, hashes: Sequence[str]) -> str:
    return row(agent_id, "prompt", json.dumps({"sha": sha, "parts": list(hashes)}))


class HostStore:
    """The append side of one host's shards. ``append`` is called once per flush."""

    def __init__(self, run_dir: Path, host_id: int) -> None:
        self.root = host_dir(run_dir, host_id)
        self._stored: set[str] = set()  # part hashes in parts.jsonl.gz or in _pending
        self._pending: dict[str, str] = {}
        self._pending_bytes = 0

    def write_agents(self, agent_ids: Iterable[str], *, resume: bool = False) -> None:
        """The host's agent ids. A resumed host must hold the same agents as before (its
        shard holds their history): a different split, e.g. from another host count, is a
        ``RunError`` saying how many hosts the run had."""
        ids = sorted(agent_ids)
        if resume:
            try:
                before = json.loads((self.root / AGENTS).read_text("utf-8"))
            except (OSError, ValueError):
                before = None
            if before != ids:
                hosts = run_hosts(self.root.parent.parent)
                raise RunError(
                    f"{self.root.name} of {self.root.parent.parent} held other agents before "
                    f"this resume: the run's agents were split between {hosts} hosts; resume "
                    f"it with {hosts} hosts"
                )
            return
        self.root.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.root / AGENTS, json.dumps(ids) + "\n")

    def reload(self) -> None:
        """Learn which parts the shard holds (after a resume cut it back)."""
        self._stored, self._pending, self._pending_bytes = set(), {}, 0
        for m in read_index(self.root / PARTS):
            self._stored.update(m.keys or ())

    def add_part(self, digest: str, text: str) -> None:
        """A part of a system prompt; stored with the next flush (or sooner, once the parts
        waiting reach ``_PARTS_BYTES``) unless this host stored it already."""
        if digest in self._stored:
            return
        self._stored.add(digest)
        self._pending[digest] = text
        self._pending_bytes += len(text)
        if self._pending_bytes >= _PARTS_BYTES:
            self._write_parts()

    def _write_parts(self) -> None:
        if self._pending:
            out = Appender(self.root / PARTS, exact_keys=True)
            for h, text in self._pending.items():
                out.add(h, f'{key_prefix(h)}"text": {encode_basestring(text)}}}')
            out.commit()
        self._pending, self._pending_bytes = {}, 0

    def append(self, rows: Iterable[tuple[str, str]]) -> None:
        """One flush: ``rows`` ((agent id, row)) are compressed as they come; the parts
        waiting are stored before the rows' index lines are written, so a reader that sees
        a prompt row finds its parts."""
        out = Appender(self.root / ROWS)
        for key, line in rows:
            out.add(key, line)
        out.close_members()
        self._write_parts()
        out.commit()
