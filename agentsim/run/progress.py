"""What a run reports while it goes (``Progress``, one per tick) and when it ends
(``RunSummary``). Both are re-exported by ``agentsim.run.engine``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsim.run.problems import over_limits

__all__ = ["Progress", "RunSummary"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    tick: int
    total: int
    agent_steps: int
    steps_per_s: float
    model_calls: int
    tokens: int
    errors: int  # every problem (see ``agentsim.run.problems``)
    degraded: int = 0  # steps whose model call failed after its retries
    gate_retries: int = 0
    # Ticks done by the agent furthest ahead (``executor.schedule: dependencies``);
    # ``tick`` is the slowest agent's. None: every agent is at ``tick``.
    fastest: int | None = None
    skills_broken: int = 0  # skills an edit broke mid-run (their last good version stayed)
    # While a survey or an interview runs: what ("survey midday"), answers so far, asked.
    survey: str | None = None
    answered: int = 0
    asked: int = 0
    # Steps that ended without finish (answered, out of turns); tool calls refused or failed.
    unfinished: int = 0
    tool_failures: int = 0

    @classmethod
    def of(
        cls,
        metrics: Mapping[str, Any],
        *,
        tick: int,
        total: int,
        survey: str | None = None,
        answered: int = 0,
        asked: int = 0,
        fastest: int | None = None,
    ) -> Progress:
        """The progress after ``tick``, from the run's counters (``agentsim.run.metrics``);
        ``survey`` names the survey under way, if any."""
        m = metrics
        busy = sum(m["tick_seconds"]) or 1e-9
        outcomes, calls = m.get("outcomes") or {}, m.get("tool_calls") or {}
        return cls(
            tick=tick,
            total=total,
            agent_steps=m["agent_steps"],
            steps_per_s=m["agent_steps"] / busy,
            model_calls=m["model_calls"],
            tokens=m["prompt_tokens"] + m["completion_tokens"],
            errors=m["errors"],
            degraded=m["degraded"],
            gate_retries=m["gate_retries"],
            fastest=fastest if fastest is not None and fastest > tick else None,
            skills_broken=m["problems"].get("skill_broken", 0),
            survey=survey,
            answered=answered,
            asked=asked,
            unfinished=outcomes.get("answered", 0) + outcomes.get("out_of_turns", 0),
            tool_failures=calls.get("refused", 0) + calls.get("failed", 0),
        )


@dataclass(slots=True, kw_only=True)
class RunSummary:
    """``reason`` says why a run stopped early (its model kept failing, its disk is full)."""

    run_id: str
    run_dir: Path
    status: str
    ticks: int
    agents: int
    metrics: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    max_degraded_share: float = 1.0
    # Config field -> the share of failures it allows (``agentsim.run.problems``).
    limits: Mapping[str, float] = field(default_factory=dict)
    parent: Mapping[str, Any] | None = None  # a fork's run and tick (``agentsim run --fork``)
    done: tuple[str, ...] = ()  # what the workflow ran: "intervention social.broadcast", ...
    # The budget's limit that stopped the run, with the figures (``agentsim.run.budget``).
    budget_stop: Mapping[str, Any] | None = None
    # The run's estimate against what it spent (``agentsim.run.estimate.estimate_error``).
    estimate: Mapping[str, Any] | None = None

    @property
    def problems(self) -> list[str]:
        """The failure shares over their limits: a completed run with any is "completed with
        problems" (exit code 3)."""
        return over_limits(self.metrics, self.limits)

    @property
    def degraded_share(self) -> float:
        steps = self.metrics.get("agent_steps", 0)
        return float(self.metrics.get("degraded", 0)) / steps if steps else 0.0

    @property
    def too_degraded(self) -> bool:
        """More than ``model.max_degraded_share`` of the steps degraded."""
        return self.degraded_share > self.max_degraded_share
