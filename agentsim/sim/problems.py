"""What counts as a problem in a run: one table for ``metrics.json``, the run's summary line,
the progress line and ``agentsim inspect``.

Every count is taken from the events, with ``problem_of``: the engine counts the events it
appends, ``inspect`` counts the events it reads back, so the two always agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["PROBLEMS", "count_problems", "gate_retries", "new_problems", "problem_of"]

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
