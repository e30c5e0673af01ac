"""The run's counters: what ``metrics.json`` reports and a checkpoint saves.

They are a plain JSON-ready dict (a checkpoint stores it as is); this module says what it
holds, how one tick's host results add to it, and what the public form adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentsim.sim.host import TickResult

__all__ = ["add_tick", "new_metrics", "public_metrics"]

# Counters of a ``TickResult`` that the run sums (``steps`` is reported as ``agent_steps``).
_TICK_COUNTERS = (
    "steps",
    "model_calls",
    "script_calls",
    "prompt_tokens",
    "completion_tokens",
    "errors",
    "degraded",
    "skipped",
)


def new_metrics() -> dict[str, Any]:
    return {
        "ticks": 0,
        "agent_steps": 0,
        "model_calls": 0,
        "script_calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "errors": 0,
        "degraded": 0,
        "skipped": 0,
        "skills_reloads": 0,
        "events": 0,
        "wall_seconds": 0.0,
        "tick_seconds": [],
    }


def add_tick(metrics: dict[str, Any], results: Sequence[TickResult]) -> dict[str, int]:
    """Add the hosts' results of one tick to ``metrics``; returns the tick's own sums."""
    summary = {k: sum(getattr(r, k) for r in results) for k in _TICK_COUNTERS}
    metrics["agent_steps"] += summary["steps"]
    for k in _TICK_COUNTERS[1:]:
        metrics[k] += summary[k]
    return summary


def public_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` as ``metrics.json`` shows it: tick times summarised, a rate added."""
    m = dict(metrics)
    secs = m.pop("tick_seconds")
    busy = sum(secs) or 1e-9
    m["agent_steps_per_s"] = round(m["agent_steps"] / busy, 1)
    m["tick_seconds_median"] = sorted(secs)[len(secs) // 2] if secs else 0.0
    m["tick_seconds_max"] = max(secs) if secs else 0.0
    return m
