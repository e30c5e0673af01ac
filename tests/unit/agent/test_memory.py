"""Agent memory: append-only lines, a bounded prompt window, state round trip."""

from __future__ import annotations

import json

from agentsim._tokens import estimate_tokens
from agentsim.agent.memory import Memory, MemoryEntry


def fill(memory: Memory, n: int, *, kind: str = "action", text: str = "walked") -> None:
    for i in range(n):
        memory.add(tick=i, time=f"2026-03-02T{6 + i % 12:02d}:00:00", kind=kind, text=f"{text} {i}")


def test_empty_memory_renders_nothing() -> None:
    assert Memory().render(prompt_tokens=100) == ""


def test_lines_are_drained_once_in_order() -> None:
    m = Memory()
    fill(m, 3)
    lines = m.drain()
    assert [json.loads(x)["text"] for x in lines] == ["walked 0", "walked 1", "walked 2"]
    assert json.loads(lines[0]) == {
        "kind": "action",
        "text": "walked 0",
        "tick": 0,
        "time": "2026-03-02T06:00:00",
    }
    assert m.drain() == []


def test_render_keeps_recent_entries_and_summarises_the_rest() -> None:
    m = Memory()
    fill(m, 30)
    fill(m, 2, kind="message", text="hello")
    text = m.render(prompt_tokens=200)
    lines = text.splitlines()
    assert lines[0].startswith("(earlier: ")
    assert "all time by kind: action: 30, message: 2)" in lines[0]
    assert lines[-1] == "[07:00] hello 1"
    assert estimate_tokens(text) <= 200
    assert len(m.recent()) == 12


def test_render_respects_tiny_budgets() -> None:
    m = Memory()
    fill(m, 5, text="x" * 80)
    assert m.render(prompt_tokens=10) == ""  # no line and no summary fit
    for budget in (30, 60, 120, 400):
        assert estimate_tokens(m.render(prompt_tokens=budget)) <= budget


def test_state_round_trips_without_pending_lines() -> None:
    m = Memory()
    fill(m, 20)
    state = json.loads(json.dumps(m.get_state()))
    other = Memory()
    other.set_state(state)
    assert other.render(prompt_tokens=300) == m.render(prompt_tokens=300)
    assert other.total == 20 and other.drain() == []
    assert other.recent()[0] == MemoryEntry.from_dict(state["recent"][0])
