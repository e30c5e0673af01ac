"""Agent memory: append-only on disk, bounded in the prompt.

Every entry is appended to the agent's ``memory.jsonl`` and never rewritten; the lines wait
in ``drain()`` until the agent's flush, which the host runs every ``output.flush_every``
ticks and at checkpoints and the end of the run. In memory an agent keeps only its last
``_RECENT`` entries and a count per kind. The prompt sees the most recent of those that fit
``prompt_tokens``, preceded, when older entries exist, by one summary line (how many are
older, and the all-time counts by kind). The rule is deterministic, so the prompt's size
stays under its cap however long the run.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring as _string
from pathlib import Path
from typing import Any

from agentsim._tokens import estimate_tokens

__all__ = ["Memory", "MemoryEntry", "append_lines"]

_RECENT = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEntry:
    tick: int
    time: str
    kind: str
    text: str

    def to_json(self) -> str:
        # The line json.dumps(..., sort_keys=True, ensure_ascii=False) would give, built
        # directly: one entry per agent step, so the encoder's set-up is worth skipping.
        return (
            f'{{"kind": {_string(self.kind)}, "text": {_string(self.text)}, '
            f'"tick": {int(self.tick)}, "time": {_string(self.time)}}}'
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MemoryEntry:
        return cls(
            tick=int(d["tick"]), time=str(d["time"]), kind=str(d["kind"]), text=str(d["text"])
        )


class Memory:
    """Recent entries in memory, all entries on disk (through the agent's flush)."""

    __slots__ = ("_counts", "_pending", "_recent", "total")

    def __init__(self) -> None:
        self._recent: deque[MemoryEntry] = deque(maxlen=_RECENT)
        self._counts: dict[str, int] = {}
        self._pending: list[str] = []
        self.total = 0

    def add(self, *, tick: int, time: str, kind: str, text: str) -> MemoryEntry:
        # Short texts ("moved to cafe-2") recur across agents: one copy serves them all.
        entry = MemoryEntry(
            tick=tick, time=time, kind=kind, text=sys.intern(text) if len(text) <= 80 else text
        )
        self._recent.append(entry)
        self._counts[kind] = self._counts.get(kind, 0) + 1
        self._pending.append(entry.to_json())
        self.total += 1
        return entry

    def recent(self) -> list[MemoryEntry]:
        return list(self._recent)

    def drain(self) -> list[str]:
        """Lines not yet written to ``memory.jsonl``."""
        lines, self._pending = self._pending, []
        return lines

    def render(self, *, prompt_tokens: int) -> str:
        """The memory section of a prompt, at most ``prompt_tokens`` (estimated)."""
        if not self.total:
            return ""
        lines: list[str] = []
        used = 0
        shown = 0
        for e in reversed(self._recent):
            line = f"[{e.time[11:16]}] {e.text}"
            cost = estimate_tokens(line) + 1
            if used + cost > prompt_tokens * 3 // 4:
                break
            lines.append(line)
            used += cost
            shown += 1
        lines.reverse()
        older = self.total - shown
        if older:
            counts = ", ".join(f"{k}: {v}" for k, v in sorted(self._counts.items()))
            summary = f"(earlier: {older} older memories; all time by kind: {counts})"
            if used + estimate_tokens(summary) <= prompt_tokens:
                lines.insert(0, summary)
        return "\n".join(lines)

    def get_state(self) -> dict[str, Any]:
        return {
            "recent": [json.loads(e.to_json()) for e in self._recent],
            "counts": dict(self._counts),
            "total": self.total,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        self._recent.clear()
        self._recent.extend(MemoryEntry.from_dict(d) for d in state.get("recent", []))
        self._counts = {str(k): int(v) for k, v in state.get("counts", {}).items()}
        self.total = int(state.get("total", 0))
        self._pending = []


# The folder is made when first missing, not before every write: a run writes this file
# for every agent every few ticks, and a mkdir is a slow metadata call on many file systems.


def append_lines(path: Path, lines: list[str]) -> None:
    try:
        f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed below
    with f:
        f.write("\n".join(lines) + "\n")
