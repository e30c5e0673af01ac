"""PendingLines: an agent's lines waiting for a flush come back as they went in."""

from __future__ import annotations

import sys
import tracemalloc

from agentsim.store.pending import PendingLines


def test_lines_come_back_in_order_and_unchanged_then_the_buffer_is_empty() -> None:
    lines = [
        '{"tick": 0, "user": "caf\u00e9 \u2014 r\u00e9sum\u00e9"}',
        "",
        "\U0001f600 4-byte",
        "x" * 5000,
    ]
    pending = PendingLines()
    for line in lines:
        pending.append(line)
    assert len(pending) == 4
    assert list(pending) == lines  # iterating keeps them
    assert pending.drain() == lines
    assert len(pending) == 0
    assert pending.drain() == []


def test_clear_drops_every_line() -> None:
    pending = PendingLines()
    pending.append("a")
    pending.clear()
    assert list(pending) == []


def test_repetitive_trace_lines_are_held_in_a_third_of_the_bytes_of_str() -> None:
    line = '{"user": "' + "You are a commuter \u2014 plan your day. " * 80 + '"}'
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        pending = PendingLines()
        for i in range(200):
            pending.append(f"{i}{line}")
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 200 * sys.getsizeof(line) / 3
    assert pending.drain()[199] == f"199{line}"
