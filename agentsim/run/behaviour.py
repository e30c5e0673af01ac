"""What the agents did, in a few lines a researcher reads before the results.

From ``metrics.json``'s counters (``agentsim.run.metrics``), for the run, each model and
each group: how the steps ended, the share that acted on the world (an environment write or
a skill script) instead of only narrating, how varied the actions were (and the one action
when every step did the same thing), the tool calls refused or failed, and the survey and
interview answers that only copied their own prompt (``echo``). ``agentsim run`` prints it
at the end, ``agentsim inspect`` and the report's summary.md open with it, the viewer's run
page shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentsim.agent.step import OUTCOMES

__all__ = ["behaviour_lines", "behaviour_notes", "describe"]


def _share(n: int, total: int) -> str:
    return f"{n / total:.0%}" if total else "-"


def describe(part: Mapping[str, Any], *, steps_key: str = "agent_steps") -> str:
    """One line of counts: steps by outcome, acted, distinct actions, tool calls by
    result, answers and echoes."""
    steps = int(part.get(steps_key) or 0)
    outcomes: Mapping[str, int] = part.get("outcomes") or {}
    ended = ", ".join(
        f"{o} {int(outcomes[o]):,} ({_share(int(outcomes[o]), steps)})"
        for o in OUTCOMES
        if outcomes.get(o)
    )
    acted = int(part.get("acted") or 0)
    text = f"{steps:,} steps"
    if ended:
        text += f": {ended}"
    text += f"; acted {acted:,} ({_share(acted, steps)})"
    distinct = int(part.get("distinct_actions") or 0)
    if distinct:
        text += f"; {distinct:,} distinct actions"
    calls: Mapping[str, int] = part.get("tool_calls") or {}
    total = sum(int(v) for v in calls.values())
    if total:
        bad = int(calls.get("refused") or 0) + int(calls.get("failed") or 0)
        text += (
            f"; tool calls {total:,} (refused {int(calls.get('refused') or 0):,}, "
            f"failed {int(calls.get('failed') or 0):,}: {_share(bad, total)})"
        )
    answers = int(part.get("answers") or 0)
    if answers:
        echo = int(part.get("echo") or 0)
        invalid = int(part.get("invalid") or 0)
        unfit = f"; invalid {invalid:,}: {_share(invalid, answers)}" if invalid else ""
        text += f"; answers {answers:,} (echo {echo:,}: {_share(echo, answers)}{unfit})"
    return text


def behaviour_notes(part: Mapping[str, Any], who: str = "") -> dict[str, str]:
    """What a researcher must know of ``part`` before reading its results, by kind
    (``no_act``, ``same_action``, ``echo``): no step acted, every step did the same thing,
    answers that copy their prompt."""
    notes = {}
    steps = int(part.get("agent_steps") or 0)
    whose = f"{who}: " if who else ""
    acting = steps - sum(
        int((part.get("outcomes") or {}).get(o) or 0) for o in ("degraded", "error", "skipped")
    )
    if acting > 0 and not int(part.get("acted") or 0):
        notes["no_act"] = (
            f"{whose}no step acted on the world (no environment write, no skill script ran): "
            "the agents only narrated"
        )
    only = part.get("only_action")
    if isinstance(only, str) and steps > 1:
        notes["same_action"] = f"{whose}every step did the same thing: {only[:120]!r}"
    echo, answers = int(part.get("echo") or 0), int(part.get("answers") or 0)
    if echo:
        notes["echo"] = (
            f"{whose}{echo:,} of {answers:,} survey and interview answers only copy their own "
            "prompt (echo)"
        )
    invalid = int(part.get("invalid") or 0)
    if invalid:
        notes["invalid"] = (
            f"{whose}{invalid:,} of {answers:,} typed survey and interview answers did not fit "
            "their form after a retry (status invalid; not counted as data)"
        )
    return notes


def behaviour_lines(metrics: Mapping[str, Any]) -> list[str]:
    """The behaviour summary of a run from its ``metrics.json`` (or the engine's counters,
    made public): a line for the run, one per model when there are several, one per group
    when there are several, then the notes. Empty for a run with no step and no answer."""
    if not metrics.get("agent_steps") and not metrics.get("answers"):
        return []
    lines = [f"behaviour: {describe(metrics)}"]
    run_notes = behaviour_notes(metrics)
    notes = list(run_notes.values())
    for block, what in (("by_model", "model"), ("by_group", "group")):
        parts: Mapping[str, Mapping[str, Any]] = metrics.get(block) or {}
        if len(parts) < 2:
            continue
        for name, part in sorted(parts.items()):
            lines.append(f"  {what} {name}: {describe(part)}")
            # What the run's note says already is not said again for each part.
            found = behaviour_notes(part, f"{what} {name}")
            notes.extend(text for kind, text in found.items() if kind not in run_notes)
    lines.extend(f"  note: {n}" for n in notes)
    return lines
