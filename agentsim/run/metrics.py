"""The run's counters: what ``metrics.json`` reports and a checkpoint saves.

They are a plain JSON-ready dict (a checkpoint stores it as is); this module says what it
holds, how one tick's host results and events add to it, and what the public form adds.
``errors`` is the sum of ``problems`` (see ``agentsim.run.problems``: the same counts as
``agentsim inspect``); ``gate_retries`` counts the extra model rounds post_step quality
gates asked for (their model calls are in ``model_calls``).

What the agents did: ``outcomes`` (how the steps ended, ``agentsim.agent.step.OUTCOMES``),
``acted`` (steps that wrote to the environment or ran a skill script), ``tool_calls`` by
result (``TOOL_RESULTS``), also by tool and by skill; survey and interview ``answers`` and
how many of them only copied their prompt (``echo``); ``distinct_actions`` among the steps'
actions (``only_action`` when every step did the same thing). ``by_group`` and ``by_model``
hold the same per group and per model (its name in ``models:``, ``default`` for ``model:``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from agentsim.agent.step import OUTCOMES, TOOL_RESULTS
from agentsim.hosts.host import TickResult
from agentsim.llm.stats import ModelStats
from agentsim.run.problems import count_problems, new_problems

__all__ = [
    "DISTINCT_CAP",
    "SKILL_COUNTS",
    "add_answers",
    "add_model_failures",
    "add_tick",
    "merge_model_stats",
    "new_metrics",
    "public_metrics",
    "skill_counts",
]

DISTINCT_CAP = 1000
"""Distinct actions are counted up to this many per group, model and run ("1000 or more")."""

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
        # With a model per group: each model's steps and degraded steps (``metrics.json``)
        # and its failed calls in a row (not public), counted against ``models.NAME.*``.
        "model_failures": {},
        "model_failure_streaks": {},
        # Skill id -> script calls whose output the runner cut at its cap.
        "script_truncated": {},
        "skills_reloads": 0,
        "events": 0,
        "wall_seconds": 0.0,
        "tick_seconds": [],
        **_new_behaviour(),
        "tool_calls_by_tool": {},
        "tool_calls_by_skill": {},
        "by_group": {},
        "by_model": {},
        # Hashes of the distinct actions by "" (the run), "group:NAME", "model:NAME", and
        # the first action of each (see ``public_metrics``).
        "actions_seen": {},
    }


def _new_behaviour() -> dict[str, Any]:
    """The counters of what agents did, for the run and for each group and model."""
    return {
        "outcomes": dict.fromkeys(OUTCOMES, 0),
        "acted": 0,
        "tool_calls": dict.fromkeys(TOOL_RESULTS, 0),
        "answers": 0,
        "echo": 0,
    }


def _add(counts: dict[str, int], key: str, n: int = 1) -> None:
    counts[key] = counts.get(key, 0) + n


def _parts(metrics: dict[str, Any], group: str, model: str) -> list[dict[str, Any]]:
    """The run's behaviour counters and its group's and model's."""
    for name in ("outcomes", "tool_calls"):  # a checkpoint from before these counters
        metrics.setdefault(name, _new_behaviour()[name])
    groups = metrics.setdefault("by_group", {})
    models = metrics.setdefault("by_model", {})
    return [
        metrics,
        groups.setdefault(group, {"agent_steps": 0, **_new_behaviour()}),
        models.setdefault(model, {"agent_steps": 0, **_new_behaviour()}),
    ]


def _saw(metrics: dict[str, Any], keys: Sequence[str], action: str) -> None:
    seen = metrics.setdefault("actions_seen", {})
    digest = hashlib.blake2b(action.encode("utf-8"), digest_size=8).hexdigest()
    for key in keys:
        entry = seen.setdefault(key, {"first": action, "hashes": {}})
        hashes = entry["hashes"]
        if len(hashes) < DISTINCT_CAP:
            hashes[digest] = 1


def add_answers(
    metrics: dict[str, Any], answers: Sequence[tuple[str, str, bool]]
) -> dict[str, int]:
    """Add survey or interview answers, each (group, model, echo), to ``metrics``; returns
    the answers and the echoes among them."""
    echoes = 0
    for group, model, echo in answers:
        for part in _parts(metrics, group, model):
            part["answers"] = part.get("answers", 0) + 1
            part["echo"] = part.get("echo", 0) + int(echo)
        echoes += int(echo)
    return {"answers": len(answers), "echo": echoes}


def add_tick(
    metrics: dict[str, Any],
    results: Sequence[TickResult],
    events: Sequence[Mapping[str, Any]],
    *,
    model_of: Mapping[str, str] | None = None,
) -> dict[str, int]:
    """Add the hosts' results of one tick, and the problems among its ``events``, to
    ``metrics``; returns the tick's own sums (``errors``: the tick's problems).

    ``model_of`` (agent id -> model name; given when groups use several models) counts
    each model's steps, degraded steps and failed calls in a row on its own, so that one
    model's dead server is seen whatever the others do (``add_model_failures``)."""
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
    summary.update(_add_behaviour(metrics, results))
    skills = skill_counts(results)
    if skills:
        summary["skills"] = skills
    # Steps answer in any order within a tick: a tick without one answer continues the
    # streak, a tick with one ends it.
    failed = found["agent_degraded"]
    if summary["model_calls"]:
        metrics["model_failure_streak"] = 0
    else:
        metrics["model_failure_streak"] += failed
    if model_of is not None:
        add_model_failures(metrics, events, model_of)
    cut = metrics.setdefault("script_truncated", {})
    for ev in events:
        if ev.get("type") == "script_called" and ev.get("truncated"):
            skill = str(ev.get("skill"))
            cut[skill] = cut.get(skill, 0) + 1
    return summary


def add_model_failures(
    metrics: dict[str, Any], events: Sequence[Mapping[str, Any]], model_of: Mapping[str, str]
) -> None:
    """Each model's share of one tick: its agents' steps (``agent_action`` events, degraded
    or not), degraded steps (``agent_degraded``), and its failed calls in a row: a tick in
    which one of its steps got an answer ends the streak, a tick without continues it."""
    steps: dict[str, int] = {}
    degraded: dict[str, int] = {}
    for ev in events:
        kind, aid = ev.get("type"), ev.get("agent_id")
        if aid is None or kind not in ("agent_action", "agent_degraded"):
            continue
        name = model_of.get(str(aid))
        if name is None:
            continue
        if kind == "agent_action":
            steps[name] = steps.get(name, 0) + 1
        else:
            degraded[name] = degraded.get(name, 0) + 1
    per_model = metrics.setdefault("model_failures", {})
    streaks = metrics.setdefault("model_failure_streaks", {})
    for name in sorted(set(steps) | set(degraded)):
        counts = per_model.setdefault(name, {"agent_steps": 0, "degraded": 0})
        counts["agent_steps"] += steps.get(name, 0)
        counts["degraded"] += degraded.get(name, 0)
        answered = steps.get(name, 0) - degraded.get(name, 0)
        streaks[name] = 0 if answered > 0 else streaks.get(name, 0) + degraded.get(name, 0)


def _add_behaviour(metrics: dict[str, Any], results: Sequence[TickResult]) -> dict[str, Any]:
    """Add the steps' outcomes, acts, tool calls and actions to ``metrics``; the tick's own
    (non-zero) outcomes and tool call results, and its steps that acted."""
    outcomes: dict[str, int] = {}
    tools: dict[str, int] = {}
    acted = 0
    by_tool = metrics.setdefault("tool_calls_by_tool", {})
    by_skill = metrics.setdefault("tool_calls_by_skill", {})
    for r in results:
        parts = _parts(metrics, r.group, r.model)
        for part in parts[1:]:
            part["agent_steps"] += r.steps
        for outcome, n in r.outcomes.items():
            _add(outcomes, outcome, n)
            for part in parts:
                _add(part["outcomes"], outcome, n)
        acted += r.acted
        for part in parts:
            part["acted"] += r.acted
        for (tool, skill, result), n in r.tool_results.items():
            _add(tools, result, n)
            for part in parts:
                _add(part["tool_calls"], result, n)
            _add(by_tool.setdefault(tool, dict.fromkeys(TOOL_RESULTS, 0)), result, n)
            if skill:
                _add(by_skill.setdefault(skill, dict.fromkeys(TOOL_RESULTS, 0)), result, n)
        if r.action:
            _saw(metrics, ("", f"group:{r.group}", f"model:{r.model}"), r.action)
    return {
        "outcomes": {k: outcomes[k] for k in OUTCOMES if outcomes.get(k)},
        "acted": acted,
        "tool_calls": {k: tools[k] for k in TOOL_RESULTS if tools.get(k)},
    }


SKILL_COUNTS = ("visible", "activated", "scripts", "hooks_shown", "suggested", "followed")
"""What ``tick_end``'s ``skills`` counts per group and skill (trigger rates): agent-steps
whose catalog listed the skill, agent-steps in which it became active (its
``skill_activated`` events, defaults at setup left out), script calls that ran
(``execute_skill_script``, not refused), hook outputs with text shown to the model, the
calls their ``SUGGESTED:`` lines proposed, and those the step made."""


def skill_counts(results: Sequence[TickResult]) -> dict[str, dict[str, dict[str, int]]]:
    """The tick's ``SKILL_COUNTS`` by group and skill id (sorted; zero counts left out)."""
    acc: dict[str, dict[str, list[int]]] = {}
    for r in results:
        if not (r.catalog or r.hooks_seen or r.tool_results or r.events):
            continue
        group = acc.setdefault(r.group, {})
        for sid in r.catalog:
            group.setdefault(sid, [0] * 6)[0] += 1
        for (tool, sid, result), n in r.tool_results.items():
            if sid and tool == "execute_skill_script" and result != "refused":
                group.setdefault(sid, [0] * 6)[2] += n
        activated = {
            str(ev.get("skill"))
            for ev in r.events
            if ev.get("type") == "skill_activated" and not ev.get("default")
        }
        for sid in activated:
            group.setdefault(sid, [0] * 6)[1] += 1
        for sid, (shown, suggested, followed) in r.hooks_seen.items():
            counts = group.setdefault(sid, [0] * 6)
            counts[3] += shown
            counts[4] += suggested
            counts[5] += followed
    return {
        g: {
            sid: {k: n for k, n in zip(SKILL_COUNTS, counts, strict=True) if n}
            for sid, counts in sorted(per.items())
        }
        for g, per in sorted(acc.items())
        if per
    }


def _variety(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """``distinct_actions`` (up to ``DISTINCT_CAP``) and, when there is one, ``only_action``."""
    if not entry:
        return {"distinct_actions": 0, "only_action": None}
    n = len(entry["hashes"])
    return {"distinct_actions": n, "only_action": entry["first"] if n == 1 else None}


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
    m.pop("model_failure_streaks", None)
    if m.get("model_failures"):
        m["model_failures"] = {n: dict(c) for n, c in sorted(m["model_failures"].items())}
    else:
        m.pop("model_failures", None)  # one model: the run's own counts are its
    seen = m.pop("actions_seen", None) or {}
    m.update(_variety(seen.get("")))
    for block, prefix in (("by_group", "group:"), ("by_model", "model:")):
        m[block] = {
            name: {**part, **_variety(seen.get(prefix + name))}
            for name, part in sorted((m.get(block) or {}).items())
        }
    secs = m["tick_seconds"] = list(m["tick_seconds"])
    m["problems"] = dict(m["problems"])
    m["script_truncated"] = dict(sorted((m.get("script_truncated") or {}).items()))
    busy = sum(secs) or 1e-9
    m["agent_steps_per_s"] = round(m["agent_steps"] / busy, 1)
    m["tick_seconds_median"] = sorted(secs)[len(secs) // 2] if secs else 0.0
    m["tick_seconds_max"] = max(secs) if secs else 0.0
    return m
