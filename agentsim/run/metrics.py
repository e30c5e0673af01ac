"""The run's counters: what ``metrics.json`` reports and a checkpoint saves.

They are a plain JSON-ready dict (a checkpoint stores it as is); this module says what it
holds, how one tick's host results and events add to it, and what the public form adds.
``errors`` is the sum of ``problems`` (see ``agentsim.run.problems``: the same counts as
``agentsim inspect``); ``gate_retries`` counts the extra model rounds post_step quality
gates asked for (their model calls are in ``model_calls``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentsim.hosts.host import TickResult
from agentsim.llm.stats import ModelStats
from agentsim.run.problems import count_problems, new_problems

__all__ = ["add_tick", "merge_model_stats", "new_metrics", "public_metrics"]

# Counters of a ``TickResult`` that the run sums (``steps`` is reported as ``agent_steps``;
# errors are counted from the events, see ``add_tick``).
_TICK_COUNTERS = (
    "steps",
    "model_calls",
    "script_calls",
    "hook_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_prompt_tokens",
    "recovered_calls",
    "degraded",
    "skipped",
)


def new_metrics() -> dict[str, Any]:
    return {
        "ticks": 0,
        "agent_steps": 0,
        "model_calls": 0,
        "script_calls": 0,
        "hook_calls": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_prompt_tokens": 0,
        "recovered_calls": 0,
        "errors": 0,
        "degraded": 0,
        "skipped": 0,
        "problems": new_problems(),
        "gate_retries": 0,
        # Failed model calls in a row, across ticks (a tick with one answer ends the run).
        "model_failure_streak": 0,
        "skills_reloads": 0,
        "events": 0,
        "wall_seconds": 0.0,
        "tick_seconds": [],
    }


def add_tick(
    metrics: dict[str, Any], results: Sequence[TickResult], events: Sequence[Mapping[str, Any]]
) -> dict[str, int]:
    """Add the hosts' results of one tick, and the problems among its ``events``, to
    ``metrics``; returns the tick's own sums (``errors``: the tick's problems)."""
    summary = {k: sum(getattr(r, k) for r in results) for k in _TICK_COUNTERS}
    metrics["agent_steps"] += summary["steps"]
    for k in _TICK_COUNTERS[1:]:
        metrics[k] = metrics.get(k, 0) + summary[k]  # a checkpoint from before a counter
    found, retries = count_problems(events)
    problems = metrics["problems"]
    for kind, n in found.items():
        problems[kind] = problems.get(kind, 0) + n
    metrics["errors"] = sum(problems.values())
    metrics["gate_retries"] += retries
    summary["errors"] = sum(found.values())
    summary["gate_retries"] = retries
    # Steps answer in any order within a tick: a tick without one answer continues the
    # streak, a tick with one ends it.
    failed = found["agent_degraded"]
    if summary["model_calls"]:
        metrics["model_failure_streak"] = 0
    else:
        metrics["model_failure_streak"] += failed
    return summary


def merge_model_stats(snapshots: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The hosts' ``ModelStats`` snapshots as one block (calls, retries, errors, tokens,
    latency) and the number of hosts it sums."""
    total = ModelStats()
    named: dict[str, ModelStats] = {}
    for snap in snapshots:
        snap = dict(snap)
        for name, part in snap.pop("by_model", {}).items():
            named.setdefault(name, ModelStats()).merge(part)
        total.merge(snap)
    block = {**total.snapshot(), "hosts": len(snapshots)}
    if named:  # a model per group: the same counters for each model, by name
        block["by_model"] = {n: named[n].snapshot() for n in sorted(named)}
    return block


def public_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` as ``metrics.json`` shows it: every tick's wall time (``tick_seconds``)
    and its median and maximum, a rate added."""
    m = dict(metrics)
    m.pop("model_failure_streak", None)
    secs = m["tick_seconds"] = list(m["tick_seconds"])
    m["problems"] = dict(m["problems"])
    busy = sum(secs) or 1e-9
    m["agent_steps_per_s"] = round(m["agent_steps"] / busy, 1)
    m["tick_seconds_median"] = sorted(secs)[len(secs) // 2] if secs else 0.0
    m["tick_seconds_max"] = max(secs) if secs else 0.0
    return m
