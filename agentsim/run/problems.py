"""What counts as a problem in a run: one table for ``metrics.json``, the run's summary line,
the progress line and ``agentsim inspect``.

Every count is taken from the events, with ``problem_of``: the engine counts the events it
appends, ``inspect`` counts the events it reads back, so the two always agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "PROBLEMS",
    "SHARE_LIMITS",
    "count_problems",
    "gate_retries",
    "new_problems",
    "over_limits",
    "problem_of",
]

# Problem kind (the event type that records it) -> what one of them is.
PROBLEMS: Mapping[str, str] = {
    "agent_error": "an agent step failed (a bug, a step timeout)",
    "agent_degraded": "a model call failed after its retries; the agent kept its plan "
    "(one failed model call per degraded step)",
    "script_failed": "a skill script called with execute_skill_script failed",
    "hook_failed": "a skill's pre_step or post_step hook failed",
    "hook_gate_failed": "a post_step quality gate still asked for a retry after "
    "agent.max_hook_retries retries",
    "skill_quarantined": "a skill script was quarantined after repeated timeouts",
    "skill_broken": "an edit broke a skill's SKILL.md mid-run (its last good version stayed "
    "active)",
}


def new_problems() -> dict[str, int]:
    return dict.fromkeys(PROBLEMS, 0)


def problem_of(event: Mapping[str, Any]) -> str | None:
    """The problem kind an event records, or None."""
    kind = event.get("type")
    if kind == "script_called":
        return "script_failed" if event.get("ok") is False else None
    return kind if isinstance(kind, str) and kind in PROBLEMS else None


def gate_retries(event: Mapping[str, Any]) -> int:
    """1 when the event is a post_step gate's retry that made the model answer again (each
    re-sends the step's full prompt), else 0."""
    return int(
        event.get("type") == "hook_decision"
        and event.get("decision") == "retry"
        and event.get("retried") is True
    )


def count_problems(events: Iterable[Mapping[str, Any]]) -> tuple[Counter[str], int]:
    """Problems by kind, and the gate retries, among ``events``."""
    found: Counter[str] = Counter()
    retries = 0
    for ev in events:
        kind = problem_of(ev)
        if kind is not None:
            found[kind] += 1
        retries += gate_retries(ev)
    return found, retries


# Problem kind (or one of ``_BEHAVIOUR_COUNTS``) -> (the counter it is a share of, the
# config field of its limit, what one of them is). A completed run over any limit is
# "completed with problems" (exit code 3).
SHARE_LIMITS: Mapping[str, tuple[str, str, str]] = {
    "agent_degraded": ("agent_steps", "model.max_degraded_share", "agent steps degraded"),
    "agent_error": ("agent_steps", "agent.max_error_share", "agent steps failed"),
    "hook_failed": ("hook_calls", "agent.max_hook_failure_share", "hook calls failed"),
    "script_failed": ("script_calls", "agent.max_script_failure_share", "script calls failed"),
    "step_unfinished": (
        "agent_steps",
        "agent.max_unfinished_share",
        "agent steps ended without finish (answered with text, or out of turns)",
    ),
    "tool_call_failed": (
        "tool_calls",
        "agent.max_tool_failure_share",
        "tool calls refused or failed",
    ),
}

# Shares counted from what the agents did (``metrics.json``'s ``outcomes`` and
# ``tool_calls``), not from problem events: the counter and the parts of it that count.
_BEHAVIOUR_COUNTS: Mapping[str, tuple[str, tuple[str, ...]]] = {
    "step_unfinished": ("outcomes", ("answered", "out_of_turns")),
    "tool_call_failed": ("tool_calls", ("refused", "failed")),
}


def _count(metrics: Mapping[str, Any], key: str) -> int:
    """A counter of ``metrics``; a mapping of counts (``tool_calls``) is summed."""
    value = metrics.get(key)
    if isinstance(value, Mapping):
        return sum(int(v) for v in value.values())
    return int(value or 0)


def _failed(metrics: Mapping[str, Any], kind: str) -> int:
    behaviour = _BEHAVIOUR_COUNTS.get(kind)
    if behaviour is None:
        problems: Mapping[str, int] = metrics.get("problems") or {}
        return int(problems.get(kind) or 0)
    counts: Mapping[str, int] = metrics.get(behaviour[0]) or {}
    return sum(int(counts.get(part) or 0) for part in behaviour[1])


def over_limits(metrics: Mapping[str, Any], limits: Mapping[str, float]) -> list[str]:
    """One line per share of ``SHARE_LIMITS`` that ``metrics`` holds above its limit in
    ``limits`` (config field -> share; a field left out has no limit)."""
    out = []
    for kind, (of, field, what) in SHARE_LIMITS.items():
        total = _count(metrics, of)
        failed = _failed(metrics, kind)
        limit = limits.get(field)
        if limit is None or not total or failed / total <= limit:
            continue
        out.append(
            f"{failed:,} of {total:,} {what} ({failed / total:.0%}), more than {field}={limit:g}"
        )
    # A model per group: each model's degraded steps against its own limit.
    per_model: Mapping[str, Mapping[str, int]] = metrics.get("model_failures") or {}
    for name, counts in sorted(per_model.items()):
        field = f"models.{name}.max_degraded_share"
        total, failed = int(counts.get("agent_steps") or 0), int(counts.get("degraded") or 0)
        limit = limits.get(field)
        if limit is None or not total or failed / total <= limit:
            continue
        out.append(
            f"{failed:,} of {total:,} agent steps of model {name!r} degraded "
            f"({failed / total:.0%}), more than {field}={limit:g}"
        )
    return out
