"""What a run reports while it goes (``Progress``, one per tick) and when it ends
(``RunSummary``). Both are re-exported by ``agentsim.sim.engine``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Progress", "RunSummary"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    tick: int
    total: int
    agent_steps: int
    steps_per_s: float
    model_calls: int
    tokens: int
    errors: int  # every problem (see ``agentsim.sim.problems``)
    degraded: int = 0  # steps whose model call failed after its retries
    gate_retries: int = 0


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

    @property
    def degraded_share(self) -> float:
        steps = self.metrics.get("agent_steps", 0)
        return float(self.metrics.get("degraded", 0)) / steps if steps else 0.0

    @property
    def too_degraded(self) -> bool:
        """More than ``model.max_degraded_share`` of the steps degraded."""
        return self.degraded_share > self.max_degraded_share
