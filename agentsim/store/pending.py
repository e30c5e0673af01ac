"""Rows an agent holds until its host's flush, kept small.

An agent's trace lines wait in memory for ``output.flush_every`` ticks (4 by default). Since
the first user message carries the agent's part of the prompt (skill bodies, persona,
profile), a step's trace line is a few kilobytes, and a line with one character outside
Latin-1 takes two or four bytes per character as a ``str``: at 4 ticks they were the largest
per-agent cost of a run's peak memory (``python bench/memory.py``). Kept as zlib-compressed UTF-8
(level 1: tens of microseconds a line) they take about a third of that; ``drain`` gives
back the same strings.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

__all__ = ["PendingLines"]


class PendingLines:
    """Text lines in the order appended, compressed while they wait."""

    __slots__ = ("_blobs",)

    def __init__(self) -> None:
        self._blobs: list[bytes] = []

    def append(self, line: str) -> None:
        self._blobs.append(zlib.compress(line.encode(), 1))

    def __len__(self) -> int:
        return len(self._blobs)

    def __iter__(self) -> Iterator[str]:
        return (zlib.decompress(b).decode() for b in self._blobs)

    def drain(self) -> list[str]:
        """Every line, in order; the buffer is empty after."""
        lines = list(self)
        self._blobs = []
        return lines

    def clear(self) -> None:
        self._blobs = []
