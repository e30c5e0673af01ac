"""What a run has spent, and whether its next step fits in its ``budget:``.

The run's spending is a plain JSON-ready dict (``metrics["spending"]``; a checkpoint keeps
it, so a resumed run goes on counting from where it stopped): model calls and prompt,
cached and completion tokens by model, what they cost by ``model.prices``, and the most
any one tick cost so far (``tick_max``), which is the projection of the next tick. Agent
steps are added from their tick results (``add_steps``), survey and interview answers from
the models' own counters around the step (``add_usage``).

``lost`` is what work that a resume threw away had spent: a run killed between two
checkpoints has paid for the ticks (and surveys) after its last checkpoint, which the
resume restores from and then runs again. ``metrics.json``, written at every tick's end,
still holds what they spent; ``add_lost`` adds the difference to ``lost`` when a resume
restores the checkpoint. It is kept apart from the totals (they stay what the run's own
history spent, the same with or without the kill) and ``over_budget`` counts it too.

``over_budget`` decides, before a tick or a survey, whether what is spent plus what the
next one is projected to cost passes a limit; the engine then stops at that boundary with
a checkpoint (exit code 4, ``agentsim.cli``). The check is at boundaries only: a tick is
never cut in the middle (its steps would be lost and the checkpoint could not hold a half
tick), so a tick that costs more than any before it can pass the budget by that
difference. ``ticks_within`` is the same projection over several ticks: how many the
budget pays for, so that the schedule may run them in one go (agents running ahead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentsim.config.experiment import BudgetConfig, ExperimentConfig
from agentsim.llm.stats import Prices

__all__ = [
    "BUDGET_EXIT_CODE",
    "LOST_KEYS",
    "USAGE_KEYS",
    "BudgetStop",
    "Projection",
    "add_lost",
    "add_steps",
    "add_usage",
    "lost_line",
    "lost_of",
    "new_spending",
    "over_budget",
    "prices_of",
    "ticks_within",
    "usage_by_model",
]

BUDGET_EXIT_CODE = 4
"""``agentsim run``'s exit code when the run stopped before passing its ``budget:``."""

USAGE_KEYS = ("calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")
"""What is counted of each model's calls (``prompt_tokens`` includes the cached ones)."""


LOST_KEYS = (*USAGE_KEYS, "cost", "seconds", "ticks")
"""What ``spending["lost"]`` counts of the work resumes threw away: its model calls, tokens
and cost, the wall time of its ticks and surveys, and the ticks run again."""


class _StepResult(Protocol):
    """What ``add_steps`` reads of a host's ``TickResult``."""

    @property
    def model(self) -> str: ...
    @property
    def steps(self) -> int: ...
    @property
    def model_calls(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def cached_prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...


def new_spending() -> dict[str, Any]:
    """Nothing spent yet."""
    return {
        **dict.fromkeys(USAGE_KEYS, 0),
        "cost": 0.0,
        "by_model": {},
        # The most one tick cost so far (tokens: prompt + completion), and its steps.
        "tick_max": {"tokens": 0, "cost": 0.0, "seconds": 0.0},
        "ticks": 0,
        "steps": 0,
        # Survey and interview answers, and what they cost (in the totals above too).
        "answers": 0,
        "answer_usage": {**dict.fromkeys(USAGE_KEYS, 0), "cost": 0.0},
        "answer_seconds": 0.0,
        # The most model calls one agent step made (a chain: a step's calls are sequential).
        "step_calls_max": 0,
        # What work a resume threw away had spent (not in the totals above; see add_lost).
        "lost": _new_lost(),
    }


def _new_lost() -> dict[str, Any]:
    return {**dict.fromkeys(USAGE_KEYS, 0), "cost": 0.0, "seconds": 0.0, "ticks": 0}


def lost_of(spending: Mapping[str, Any]) -> dict[str, Any]:
    """``spending["lost"]`` with every key of ``LOST_KEYS`` (zeros for what a run written
    before it was counted lacks)."""
    return {**_new_lost(), **(spending.get("lost") or {})}


def lost_line(spending: Mapping[str, Any]) -> str | None:
    """``spending["lost"]`` in words (the run's summary, ``agentsim inspect``), or None
    when no resume threw work away."""
    lost = lost_of(spending)
    if not lost["ticks"] and not lost["calls"]:
        return None
    ticks = lost["ticks"]
    cost = f", cost {lost['cost']:,.4f}" if lost["cost"] else ""
    return (
        f"{ticks:,} tick{'s' if ticks != 1 else ''}, {lost['calls']:,} model calls, "
        f"{lost['prompt_tokens'] + lost['completion_tokens']:,} tokens{cost}, "
        f"{lost['seconds']:,.1f} s (counted against budget:, not in the totals)"
    )


def add_lost(restored: dict[str, Any], written: Mapping[str, Any]) -> dict[str, Any]:
    """Count, in ``restored`` (the metrics a resume takes from its checkpoint), what the
    run had spent after that checkpoint according to ``written`` (its ``metrics.json`` as
    the interrupted invocation last wrote it): that work is thrown away and done again.
    What earlier resumes threw away (``written``'s own ``lost``) stays counted. Returns
    the spending's new ``lost``."""
    spent = restored.setdefault("spending", new_spending())
    then: Mapping[str, Any] = written.get("spending") or {}
    before, kept = lost_of(then), lost_of(spent)
    lost = {key: max(before[key], kept[key]) for key in LOST_KEYS}
    for key in (*USAGE_KEYS, "cost", "ticks"):
        lost[key] += max(then.get(key, 0) - spent.get(key, 0), 0)
    # Wall time: the ticks after the checkpoint and the surveys' answers since it.
    ticks_then = list(written.get("tick_seconds") or [])
    ticks_now = len(restored.get("tick_seconds") or [])
    seconds = sum(ticks_then[ticks_now:]) + max(
        float(then.get("answer_seconds", 0.0)) - float(spent.get("answer_seconds", 0.0)), 0.0
    )
    lost["seconds"] = round(lost["seconds"] + seconds, 4)
    lost["cost"] = round(lost["cost"], 9)
    spent["lost"] = lost
    return lost


def prices_of(config: ExperimentConfig) -> dict[str, Prices | None]:
    """Each used model's prices by name (``default``: ``model:``), None where unpriced."""
    return {
        name: (
            Prices(
                prompt_per_1k=m.prices.prompt_per_1k,
                completion_per_1k=m.prices.completion_per_1k,
                cached_prompt_per_1k=m.prices.cached_prompt_per_1k,
            )
            if m.prices is not None
            else None
        )
        for name, m in config.used_models().items()
    }


def _cost(usage: Mapping[str, int], prices: Prices | None) -> float:
    if prices is None:
        return 0.0
    return prices.cost_of(
        prompt=usage["prompt_tokens"],
        completion=usage["completion_tokens"],
        cached_prompt=usage["cached_prompt_tokens"],
    )


def add_usage(
    spending: dict[str, Any],
    by_model: Mapping[str, Mapping[str, int]],
    prices: Mapping[str, Prices | None],
    *,
    answers: int = 0,
    seconds: float = 0.0,
) -> tuple[int, float]:
    """Add each model's usage (``USAGE_KEYS``) to ``spending``; returns the tokens
    (prompt + completion) and the cost added. ``answers``: survey or interview answers
    this usage made (counted apart, for an estimate of the next survey)."""
    tokens, cost = 0, 0.0
    models = spending.setdefault("by_model", {})
    for name, usage in sorted(by_model.items()):
        part = models.setdefault(name, {**dict.fromkeys(USAGE_KEYS, 0), "cost": 0.0})
        spent = _cost(usage, prices.get(name))
        for key in USAGE_KEYS:
            part[key] += int(usage.get(key, 0))
            spending[key] += int(usage.get(key, 0))
            if answers:
                spending["answer_usage"][key] += int(usage.get(key, 0))
        part["cost"] += spent
        spending["cost"] += spent
        if answers:
            spending["answer_usage"]["cost"] += spent
        tokens += int(usage.get("prompt_tokens", 0)) + int(usage.get("completion_tokens", 0))
        cost += spent
    spending["answers"] += answers
    if answers:
        spending["answer_seconds"] = round(spending["answer_seconds"] + seconds, 4)
    return tokens, cost


def add_steps(
    spending: dict[str, Any],
    results: Sequence[_StepResult],
    prices: Mapping[str, Prices | None],
    *,
    seconds: float,
) -> None:
    """Add one tick's agent steps (each host result names its model) and keep the largest
    tick so far: the projection of the next one."""
    by_model: dict[str, dict[str, int]] = {}
    for r in results:
        usage = by_model.setdefault(r.model or "default", dict.fromkeys(USAGE_KEYS, 0))
        usage["calls"] += r.model_calls
        usage["prompt_tokens"] += r.prompt_tokens
        usage["cached_prompt_tokens"] += r.cached_prompt_tokens
        usage["completion_tokens"] += r.completion_tokens
    tokens, cost = add_usage(spending, by_model, prices)
    top = spending["tick_max"]
    top["tokens"] = max(top["tokens"], tokens)
    top["cost"] = max(top["cost"], cost)
    top["seconds"] = max(top["seconds"], round(seconds, 4))
    spending["ticks"] += 1
    spending["steps"] += sum(r.steps for r in results)
    chain = max((r.model_calls for r in results), default=0)
    spending["step_calls_max"] = max(spending.get("step_calls_max", 0), chain)


def usage_by_model(
    block: Mapping[str, Any], before: Mapping[str, Any] | None, models: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Each model's usage between two model blocks (``metrics.merge_model_stats``) of the
    run's hosts: ``block`` minus ``before``. A block has ``by_model`` when the run uses
    several models; otherwise its totals are the one model's (``models[0]``)."""

    def parts(b: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
        if not b:
            return {}
        named = b.get("by_model")
        return dict(named) if named else {models[0] if models else "default": b}

    now, then = parts(block), parts(before)
    return {
        name: {
            key: int(part.get(key, 0)) - int((then.get(name) or {}).get(key, 0))
            for key in USAGE_KEYS
        }
        for name, part in now.items()
    }


@dataclass(frozen=True, slots=True)
class Projection:
    """What the next tick or survey is expected to cost."""

    what: str  # "tick 12", "survey midday"
    tokens: float
    cost: float
    seconds: float


@dataclass(frozen=True, slots=True)
class BudgetStop:
    """Why the run stops: the limit (``tokens``, ``money``, ``wall_time``), the budget,
    what was spent and what the next step would have needed."""

    limit: str
    budget: float
    spent: float
    next: float
    what: str
    # Of ``spent``, what work a resume threw away had spent (``spending["lost"]``).
    lost: float = 0.0

    def message(self) -> str:
        fmt = _FORMATS[self.limit]
        spent = f"{fmt(self.spent)} spent"
        if self.lost > 0:
            of = "them" if self.limit == "tokens" else "it"
            spent += f" ({fmt(self.lost)} of {of} by work a resume threw away)"
        if self.spent > self.budget:  # a tick cost more than any before it
            what = (
                f"budget.{self.limit}={fmt(self.budget)} was passed: {spent} "
                f"(the last tick cost more than any before it); stopped before {self.what}"
            )
        else:
            what = (
                f"budget.{self.limit}={fmt(self.budget)} would be passed: {spent}, "
                f"{self.what} needs about {fmt(self.next)} more; stopped before it"
            )
        return (
            f"{what}, with a checkpoint: raise budget.{self.limit} and resume (agentsim run "
            f"--resume RUN --set budget.{self.limit}=...)"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "limit": self.limit,
            "budget": self.budget,
            "spent": round(self.spent, 6),
            "next": round(self.next, 6),
            "before": self.what,
            **({"lost": round(self.lost, 6)} if self.lost > 0 else {}),
        }


def _tokens(n: float) -> str:
    return f"{round(n):,} tokens"


def _money(x: float) -> str:
    return f"{x:,.4f}"


def _seconds(s: float) -> str:
    return f"{s:,.1f} s"


_FORMATS = {"tokens": _tokens, "money": _money, "wall_time": _seconds}


def _limits(
    budget: BudgetConfig, spending: Mapping[str, Any], wall_seconds: float, step: Projection
) -> list[tuple[str, float, float, float, float]]:
    """Each limit ``budget`` sets: its name, the cap, what is spent (work that resumes threw
    away included), what ``step`` needs, and what of the spent that work had spent."""
    lost = lost_of(spending)
    lost_tokens = lost["prompt_tokens"] + lost["completion_tokens"]
    spent_tokens = spending["prompt_tokens"] + spending["completion_tokens"] + lost_tokens
    wall = budget.wall_time.total_seconds() if budget.wall_time is not None else None
    checks = [
        ("tokens", budget.tokens, spent_tokens, step.tokens, lost_tokens),
        ("money", budget.money, spending["cost"] + lost["cost"], step.cost, lost["cost"]),
        ("wall_time", wall, wall_seconds + lost["seconds"], step.seconds, lost["seconds"]),
    ]
    return [
        (name, float(cap), float(s), float(m), float(x))
        for name, cap, s, m, x in checks
        if cap is not None
    ]


def over_budget(
    budget: BudgetConfig | None,
    spending: Mapping[str, Any],
    *,
    wall_seconds: float,
    next_step: Projection,
) -> BudgetStop | None:
    """The first limit that what is spent (work that resumes threw away included) plus
    ``next_step`` would pass, or None."""
    if budget is None:
        return None
    for limit, cap, spent, more, lost in _limits(budget, spending, wall_seconds, next_step):
        if spent + more > cap:
            return BudgetStop(
                limit=limit, budget=cap, spent=spent, next=more, what=next_step.what, lost=lost
            )
    return None


def ticks_within(
    budget: BudgetConfig | None,
    spending: Mapping[str, Any],
    *,
    wall_seconds: float,
    per_tick: Projection,
    most: int,
) -> int:
    """How many ticks, up to ``most``, the budget pays for: the largest ``n`` for which
    what is spent plus ``n`` times ``per_tick`` passes no limit (0: not even the next one;
    ``over_budget`` with ``per_tick`` says why). A limit the projection costs nothing of
    (no prices, say) holds any number of ticks."""
    if budget is None:
        return most
    n = most
    for _, cap, spent, more, _lost in _limits(budget, spending, wall_seconds, per_tick):
        if more <= 0:
            fits = most if spent <= cap else 0
        else:
            fits = max(0, min(most, math.floor((cap - spent) / more)))
            # The division rounds: settle on the comparison ``over_budget`` makes.
            while fits < most and spent + (fits + 1) * more <= cap:
                fits += 1
            while fits > 0 and spent + fits * more > cap:
                fits -= 1
        n = min(n, fits)
    return n
