"""A study's ``budget:`` shared out among its runs, and its estimate.

A study's budget covers all its runs together. Each run, when it starts, is given a budget
of its own (the experiment file's ``budget:``, so the run stops itself cleanly at a tick
boundary with a checkpoint, exit code 4): what it already spent (a resumed run) plus its
share of what is left. What is left is the study's budget minus what the other runs spent
(read from their ``metrics.json``) minus what the runs under way were given; the share is
in proportion to the ticks each run not yet complete has to run, so a fork that shares
half its history with the control gets about half a control's share. A run that needed
less leaves the rest to the runs after it. Wall time is the study's own clock: a run gets
what is left of it.

What was spent stays spent: a run's counts include what work its resumes threw away (the
ticks after its last checkpoint before a kill, ``agentsim.run.budget.add_lost``), and what
a run killed before its first checkpoint had spent, before its folder is removed and it
starts again, is kept in the study's manifest (the run's ``lost``) and counted as spent by
the study.

When a run stops on its budget, no further run starts; the runs under way go on within
what they were given; the study ends ``stopped`` and ``agentsim study`` exits 4 saying
which limit. ``agentsim study --resume DIR --set budget.tokens=N`` raises it and goes on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentsim.config.experiment import BudgetConfig
from agentsim.errors import ConfigError
from agentsim.run.budget import lost_of
from agentsim.study.spec import PlannedRun, Study

__all__ = [
    "Grant",
    "RunSpending",
    "budget_with_sets",
    "check_budget",
    "estimate_study",
    "inherited_by",
    "run_ticks",
    "share",
    "spent_by",
]

_LIMITS = ("tokens", "money")


@dataclass(frozen=True, slots=True)
class RunSpending:
    """What one run spent so far (its ``metrics.json``'s ``spending``)."""

    tokens: float = 0.0
    money: float = 0.0
    seconds: float = 0.0


def _spending(spending: Mapping[str, Any], seconds: float = 0.0) -> RunSpending:
    """A run's spending as the study counts it: what work its resumes threw away included
    (``agentsim.run.budget.add_lost``), as its own ``budget:`` counts it."""
    lost = lost_of(spending)
    tokens = sum(
        float(part.get(key, 0))
        for part in (spending, lost)
        for key in ("prompt_tokens", "completion_tokens")
    )
    money = float(spending.get("cost", 0.0)) + float(lost["cost"])
    # Its clock as its ``budget.wall_time`` counts it: the lost ticks' seconds on top of
    # ``wall_seconds`` (a grant that left them out would give the run that much less than
    # the study has left, the study's clock holding them already).
    return RunSpending(tokens=tokens, money=money, seconds=seconds + float(lost["seconds"]))


def inherited_by(study_dir: Path, run: PlannedRun) -> RunSpending:
    """What a fork's counts start from: its parent's spending at the fork tick (kept in the
    parent's checkpoint there) and its wall clock then, which the fork's ``metrics.json``
    includes but the study paid once, in the parent. Nothing for a run that is not a
    fork."""
    if run.fork_of is None:
        return RunSpending()
    parent, tick = run.fork_of
    cp = study_dir / "runs" / parent / "checkpoints" / f"tick-{tick:08d}" / "engine.json"
    try:
        metrics = json.loads(cp.read_text("utf-8")).get("metrics") or {}
    except (OSError, ValueError):
        return RunSpending()
    return _spending(metrics.get("spending") or {}, float(metrics.get("wall_seconds", 0.0)))


def spent_by(study_dir: Path, run: PlannedRun) -> RunSpending:
    """What ``run`` itself spent up to its last write of ``metrics.json`` (nothing if it has
    not started; a fork's inherited history left out)."""
    try:
        metrics = json.loads((study_dir / run.dir / "metrics.json").read_text("utf-8"))
    except (OSError, ValueError):
        return RunSpending()
    gross = _spending(metrics.get("spending") or {}, float(metrics.get("wall_seconds", 0.0)))
    if run.fork_of is None:
        return gross
    base = inherited_by(study_dir, run)
    return RunSpending(
        tokens=max(gross.tokens - base.tokens, 0.0),
        money=max(gross.money - base.money, 0.0),
        seconds=gross.seconds,
    )


def run_ticks(run: PlannedRun) -> int:
    """The ticks ``run`` runs itself (a fork's start from its fork tick)."""
    total = run.config.total_ticks()
    return max(1, total - (run.fork_of[1] if run.fork_of is not None else 0))


@dataclass(frozen=True, slots=True)
class Grant:
    """The budget one run is given (``None`` for a limit the study does not set); ``empty``
    names the limit with nothing left for it."""

    budget: dict[str, Any]
    empty: str | None


def share(
    budget: BudgetConfig,
    *,
    run: PlannedRun,
    own: RunSpending,
    inherited: RunSpending,
    others_spent: RunSpending,
    reserved: Mapping[str, float],
    waiting_ticks: int,
    study_seconds: float,
) -> Grant:
    """The budget ``run`` starts with (see the module's docstring). ``own``: what the run
    spent itself so far; ``inherited``: a fork's counts at its start (its budget counts
    from there). ``others_spent``: what
    the runs not under way spent; ``reserved``: the limits given to the runs under way;
    ``waiting_ticks``: the ticks of every run not complete and not under way, this one
    included."""
    out: dict[str, Any] = {}
    caps = {"tokens": budget.tokens, "money": budget.money}
    mine = {"tokens": own.tokens, "money": own.money}
    base = {"tokens": inherited.tokens, "money": inherited.money}
    others = {"tokens": others_spent.tokens, "money": others_spent.money}
    for limit in _LIMITS:
        cap = caps[limit]
        if cap is None:
            continue
        left = cap - others[limit] - reserved.get(limit, 0.0) - mine[limit]
        part = left * run_ticks(run) / max(waiting_ticks, 1)
        if part <= 0 or (limit == "tokens" and int(part) < 1):
            return Grant(budget={}, empty=limit)
        given = base[limit] + mine[limit] + part
        out[limit] = int(given) if limit == "tokens" else given
    if budget.wall_time is not None:
        left_s = budget.wall_time.total_seconds() - study_seconds
        if left_s < 1:
            return Grant(budget={}, empty="wall_time")
        # A run's clock goes on from where it was: a resumed run's own, a fork's parent's
        # at the fork tick (a fork's metrics start from its parent's).
        out["wall_time"] = f"{int(max(own.seconds, inherited.seconds) + left_s)}s"
    return Grant(budget=out, empty=None)


def budget_with_sets(current: Mapping[str, Any] | None, sets: list[str]) -> dict[str, Any]:
    """The study's budget with ``--set budget.KEY=VALUE`` applied, checked as a budget."""
    data: dict[str, Any] = dict(current or {})
    for item in sets:
        key, eq, value = item.partition("=")
        field = key.removeprefix("budget.")
        if not eq or not key.startswith("budget.") or field not in ("tokens", "money", "wall_time"):
            raise ConfigError(
                "--set",
                f"{item!r}: a study's resume only changes its budget",
                "write --set budget.tokens=N, budget.money=X or budget.wall_time=2h",
            )
        data[field] = _number(value) if field != "wall_time" else value
    check_budget(data, "--set")
    return data


def _number(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def check_budget(data: Mapping[str, Any], where: str) -> BudgetConfig:
    """``data`` as a ``BudgetConfig``; a ``ConfigError`` naming ``where`` otherwise."""
    from pydantic import ValidationError

    try:
        return BudgetConfig.model_validate(dict(data))
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            where,
            f"budget {dict(data)} is not valid: {first['msg']}",
            "give tokens (an integer), money (a number) or wall_time (e.g. 2h)",
        ) from None


def estimate_study(study: Study, *, preflight: bool = True) -> dict[str, Any]:
    """The study's estimate: a pilot per arm (its first replicate's experiment; a fork arm
    only from its fork tick), counted once per replicate. Returns ``{"arms": {ARM:
    {"runs": N, "each": Estimate.to_dict()}}, "total": {...}}``."""
    from agentsim.run.estimate import estimate

    arms: dict[str, Any] = {}
    total: dict[str, float] = {}
    for arm in study.spec.arms:
        runs = [r for r in study.runs if r.arm == arm.name]
        first = runs[0]
        est = estimate(
            first.config,
            from_tick=first.fork_of[1] if first.fork_of is not None else 0,
            preflight=preflight,
        )
        each = est.to_dict()
        arms[arm.name] = {"runs": len(runs), "each": each}
        for key in ("calls", "prompt_tokens", "cached_tokens", "output_tokens", "cost"):
            total[key] = total.get(key, 0.0) + float(each.get(key) or 0) * len(runs)
        total["run_seconds"] = total.get("run_seconds", 0.0) + float(each["wall_seconds"]) * len(
            runs
        )
    # Runs go ``concurrency`` at a time: the study's wall time is about the runs' total
    # over the concurrency (forks wait for their parent's fork tick, which this ignores).
    total["wall_seconds"] = total.get("run_seconds", 0.0) / study.spec.concurrency
    return {"arms": arms, "total": total}
