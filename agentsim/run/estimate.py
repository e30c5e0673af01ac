"""Cost and time before the run: a pilot of a few agent-steps, extrapolated to the workflow.

``estimate(config)`` runs a *pilot*: the experiment with a handful of agents (``agents``,
default 8, spread over the groups in proportion, at least one each), ``ticks`` ticks
(default 1) and, when the workflow asks questions, one survey of the pilot's agents with
its first question, on the local executor, in a temporary folder (never the user's output
folder; the model cache off). It runs against the configured model: the server the
experiment names, or the offline scripted model, whose token counts follow
``agentsim._tokens`` (four characters a token, prompt and tool-call arguments; no cache).

What the pilot measures (``agentsim.run.budget``'s spending of its run): model calls and
prompt, cached and completion tokens per agent step and per survey answer, what they cost
by ``model.prices``, the longest chain of calls in one step, the model's answer time (its
mean latency) and the engine's own time per step. What is extrapolated: agents x ticks of
the workflow's ``run`` steps and the answers of its surveys and interviews at those rates;
the wall time of a tick as the slowest of the model's bound (answer time x the larger of
the longest chain and the tick's calls over the model's slots), its rate limits (``rpm``,
``tpm``) and the engine's time for the tick's steps; start and end as the pilot's. Every
assumption is listed in the estimate (``Estimate.assumptions``).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentsim.config.experiment import (
    ExperimentConfig,
    RunStep,
    SurveyStep,
    parse_experiment,
)
from agentsim.config.profiles import resolve_agents, select_agents

__all__ = [
    "PILOT_AGENTS",
    "PILOT_TICKS",
    "Estimate",
    "estimate",
    "estimate_async",
    "estimate_error",
    "render",
]

PILOT_AGENTS = 8
"""Agents the pilot steps by default."""
PILOT_TICKS = 3
"""Ticks the pilot runs by default: the first tick of a run differs from the later ones
(skills are activated, memories are empty), so the pilot measures both."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """What a run is expected to make and cost. ``cost`` is in the currency of
    ``model.prices`` (0 and ``priced`` False when a model has none); ``wall_seconds`` is
    the run's expected wall time."""

    calls: int
    prompt_tokens: int
    cached_tokens: int
    output_tokens: int
    cost: float
    wall_seconds: float
    priced: bool = False
    agents: int = 0
    ticks: int = 0
    answers: int = 0
    # One tick of the whole run (tokens, cost, seconds): the budget's first projection.
    per_tick: Mapping[str, float] = field(default_factory=dict)
    # Tokens of one survey or interview answer.
    per_answer_tokens: float = 0.0
    # Of the totals: the agents' steps ("steps") and the answers ("answers"), each with
    # calls, prompt/cached/output tokens and cost; wall time split into ticks, answers and
    # start and end.
    parts: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # What the pilot itself did and spent (its calls are not part of the run's).
    pilot: Mapping[str, Any] = field(default_factory=dict)
    assumptions: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        """Prompt plus output tokens (what ``budget.tokens`` counts)."""
        return self.prompt_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["assumptions"] = list(self.assumptions)
        data["per_tick"] = dict(self.per_tick)
        data["parts"] = {k: dict(v) for k, v in self.parts.items()}
        data["pilot"] = dict(self.pilot)
        data["tokens"] = self.tokens
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["assumptions"] = tuple(known.get("assumptions", ()))
        return cls(**known)


# --- the pilot ------------------------------------------------------------------------------


def _split(counts: Mapping[str, int], n: int) -> dict[str, int]:
    """``n`` agents over the groups in proportion to ``counts`` (largest remainders), at
    least one each and never more than a group has."""
    total = sum(counts.values())
    if n >= total:
        return dict(counts)
    share = {g: max(1, math.floor(n * c / total)) for g, c in counts.items()}
    rest = sorted(
        counts, key=lambda g: -(n * counts[g] / total - math.floor(n * counts[g] / total))
    )
    for g in rest:
        if sum(share.values()) >= n:
            break
        if share[g] < counts[g]:
            share[g] += 1
    return {g: min(share[g], counts[g]) for g in counts}


def _first_rows(path: Path, k: int) -> str:
    """The first ``k`` profiles of a JSONL or CSV profiles file, in the same format."""
    text = path.read_text("utf-8")
    if path.suffix.lower() == ".csv":
        rows = list(csv.reader(io.StringIO(text)))
        out = io.StringIO()
        csv.writer(out).writerows(rows[: k + 1])
        return out.getvalue()
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[:k]) + "\n"


def _survey_steps(config: ExperimentConfig) -> list[tuple[int, SurveyStep]]:
    return [(i, s) for i, s in enumerate(config.steps()) if isinstance(s, SurveyStep)]


def pilot_config(
    config: ExperimentConfig, folder: Path, *, agents: int, ticks: int
) -> ExperimentConfig:
    """The pilot's experiment: ``agents`` of ``config``'s agents spread over its groups,
    ``ticks`` ticks and a survey of them all (when the workflow asks questions), in
    ``folder``."""
    specs = resolve_agents(config)
    counts: dict[str, int] = {}
    for spec in specs:
        counts[spec.group] = counts.get(spec.group, 0) + 1
    share = _split(counts, agents)
    data = config.resolved_dict()
    data.pop("budget", None)
    data.pop("ticks", None)
    groups = []
    for gi, group in enumerate(data["agents"]):
        k = share[group["group"]]
        if group.get("count") is not None:
            group = {**group, "count": k}
        else:
            source = config.resolve_path(config.agents[gi].profiles or "")
            copy = folder / f"profiles-{gi}{source.suffix.lower()}"
            copy.write_text(_first_rows(source, k), "utf-8")
            group = {**group, "profiles": str(copy.absolute())}
        groups.append(group)
    data["agents"] = groups
    workflow: list[dict[str, Any]] = [{"run": {"ticks": ticks}}]
    surveys = _survey_steps(config)
    if surveys:
        question = surveys[0][1].question
        workflow.append({"survey": {"name": "pilot", "question": question, "agents": "all"}})
    data["workflow"] = workflow
    data["name"] = f"{config.name[:58]}-pilot"
    for block in [data["model"], *data.get("models", {}).values()]:
        block["cache"] = "off"
        block["cache_path"] = None
        # A call per pilot agent at most, never queued by the client's limiter: the answer
        # times the pilot measures are the server's.
        block["max_concurrency"] = max(block["max_concurrency"], agents)
        block["rpm"] = block["tpm"] = None
    data["executor"] = {**data["executor"], "kind": "local", "hosts": 1, "address": None}
    data["output"] = {
        **data["output"],
        "dir": str(folder.absolute()),
        "run_id": None,
        "formats": ["jsonl"],
        "checkpoint_every": 0,
    }
    return parse_experiment(
        yaml.safe_dump(data, sort_keys=False),
        source=f"{config.source} (pilot)",
        base_dir=config.source_dir,
    )


def _answers(config: ExperimentConfig, from_tick: int = 0) -> list[int]:
    """The agents each survey and interview of the workflow asks, of those that come at
    tick ``from_tick`` or later."""
    specs = resolve_agents(config)
    out, tick = [], 0
    for i, step in enumerate(config.steps()):
        if isinstance(step, RunStep):
            tick += step.ticks
        elif isinstance(step, SurveyStep) and tick >= from_tick:
            chosen = select_agents(step.agents, specs, seed=config.seed, stream=f"step-{i}")
            out.append(len(chosen))
    return out


def _pooled_limits(config: ExperimentConfig) -> tuple[int, float | None, float | None]:
    """Slots, requests/minute and tokens/minute of the run's models together."""
    models = list(config.used_models().values())
    slots = sum(m.max_concurrency for m in models)
    rpm = sum(m.rpm for m in models if m.rpm) if all(m.rpm for m in models) else None
    tpm = sum(m.tpm for m in models if m.tpm) if all(m.tpm for m in models) else None
    return slots, rpm, tpm


async def estimate_async(
    config: ExperimentConfig,
    *,
    agents: int = PILOT_AGENTS,
    ticks: int = PILOT_TICKS,
    folder: Path | None = None,
    preflight: bool = True,
    from_tick: int = 0,
) -> Estimate:
    """``estimate`` inside a running event loop."""
    from agentsim.run.engine import Engine

    if agents < 1 or ticks < 1:
        raise ValueError(f"a pilot needs agents >= 1 and ticks >= 1 (got {agents}, {ticks})")
    ticks = min(ticks, config.total_ticks())
    with tempfile.TemporaryDirectory(prefix="agentsim-pilot-", dir=folder) as tmp:
        where = Path(tmp)
        pilot = pilot_config(config, where, agents=agents, ticks=ticks)
        engine = Engine(
            pilot,
            run_dir=where / "run",
            stop=threading.Event(),
            trace="summary",
            preflight=preflight,
        )
        summary = await engine.run()
        per_tick = _tick_sums(where / "run")
    return _extrapolate(
        config, summary.metrics, per_tick, pilot_agents=summary.agents, from_tick=from_tick
    )


def _tick_sums(run_dir: Path) -> list[dict[str, float]]:
    """Each tick's sums of the pilot (its ``tick_end`` events)."""
    out = []
    with (run_dir / "events.jsonl").open(encoding="utf-8") as lines:
        for line in lines:
            if '"tick_end"' not in line:
                continue
            ev = json.loads(line)
            if ev.get("type") == "tick_end":
                out.append({k: float(ev.get(k, 0)) for k in (*_TICK_KEYS, "steps")})
    return out


_TICK_KEYS = ("model_calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")


def estimate(
    config: ExperimentConfig,
    *,
    agents: int = PILOT_AGENTS,
    ticks: int = PILOT_TICKS,
    folder: Path | None = None,
    preflight: bool = True,
    from_tick: int = 0,
) -> Estimate:
    """Estimate ``config``'s run from a pilot of ``agents`` agents for ``ticks`` ticks (see
    the module's docstring) run in a temporary folder under ``folder`` (default: the
    system's). ``from_tick``: estimate only the ticks from that one on, and the surveys
    and interviews that come at it or later (a fork at that tick runs those; its first
    tick is not a run's first). Raises what a run would (``ConfigError``, ``ModelError``)
    when the pilot cannot run."""
    return asyncio.run(
        estimate_async(
            config,
            agents=agents,
            ticks=ticks,
            folder=folder,
            preflight=preflight,
            from_tick=from_tick,
        )
    )


def _per_step(ticks: list[dict[str, float]]) -> dict[str, float]:
    steps = max(1.0, sum(t["steps"] for t in ticks))
    named = dict(zip(_TICK_KEYS, ("calls", *_TICK_KEYS[1:]), strict=True))
    return {named[k]: sum(t[k] for t in ticks) / steps for k in _TICK_KEYS}


def _extrapolate(
    config: ExperimentConfig,
    metrics: Mapping[str, Any],
    pilot_ticks_sums: list[dict[str, float]],
    *,
    pilot_agents: int,
    from_tick: int = 0,
) -> Estimate:
    spent = metrics["spending"]
    ans = spent["answer_usage"]
    steps_p = max(1, spent["steps"])
    answers_p = spent["answers"]
    pilot_ticks = len(pilot_ticks_sums)
    keys = ("calls", "prompt_tokens", "cached_prompt_tokens", "completion_tokens", "cost")
    n_agents = len(resolve_agents(config))
    n_ticks = max(0, config.total_ticks() - from_tick)
    # The first tick as the pilot's first, every later one as the mean of the pilot's later
    # ticks (the first alone when the pilot ran one).
    first = _per_step(pilot_ticks_sums[:1])
    later = _per_step(pilot_ticks_sums[1:] or pilot_ticks_sums[:1])
    # Cost follows the tokens at the pilot's price per token of its steps.
    step_tokens_p = (
        sum(t["prompt_tokens"] + t["completion_tokens"] for t in pilot_ticks_sums) or 1.0
    )
    price = (spent["cost"] - ans["cost"]) / step_tokens_p
    for part in (first, later):
        part["cost"] = (part["prompt_tokens"] + part["completion_tokens"]) * price
    if from_tick or not n_ticks:  # a fork's first tick is a later one
        first = later
    per_step = {k: (first[k] + later[k] * (n_ticks - 1)) / max(1, n_ticks) for k in keys}
    per_answer = {k: (ans[k] / answers_p if answers_p else 0.0) for k in keys}
    surveys = _answers(config, from_tick)
    n_answers = sum(surveys)
    steps = n_agents * n_ticks
    total = {k: per_step[k] * steps + per_answer[k] * n_answers for k in keys}
    # Wall time.
    latency = (metrics.get("model") or {}).get("latency") or {}
    answer_time = float(latency.get("mean") or 0.0)
    chain = max(1, int(spent.get("step_calls_max", 0))) if per_step["calls"] else 0
    slots, rpm, tpm = _pooled_limits(config)

    def model_bound(agents_n: int, calls_each: float, tokens_each: float, chain_n: int) -> float:
        calls = agents_n * calls_each
        bound = answer_time * max(chain_n, math.ceil(calls / slots) if calls else 0)
        if rpm:
            bound = max(bound, calls * 60.0 / rpm)
        if tpm:
            bound = max(bound, agents_n * tokens_each * 60.0 / tpm)
        return bound

    step_tokens = later["prompt_tokens"] + later["completion_tokens"]
    tick_seconds = list(metrics.get("tick_seconds") or [])
    # The engine's time per step, from the later ticks (the first also warms caches up).
    steady = tick_seconds[1:] or tick_seconds
    pilot_tick = sum(steady) / len(steady) if steady else 0.0
    pilot_steps_tick = steps_p / max(1, pilot_ticks)
    engine_step = (
        max(
            0.0,
            pilot_tick - model_bound(round(pilot_steps_tick), later["calls"], step_tokens, chain),
        )
        / pilot_steps_tick
    )
    tick_wall = max(
        model_bound(n_agents, per_step["calls"], step_tokens, chain), engine_step * n_agents
    )
    # The largest tick expected (the first, or a later one): the budget's first projection.
    per_tick_tokens = (
        max(first["prompt_tokens"] + first["completion_tokens"], step_tokens) * n_agents
    )
    answer_tokens = per_answer["prompt_tokens"] + per_answer["completion_tokens"]
    answer_chain = math.ceil(per_answer["calls"]) if per_answer["calls"] else 0
    engine_answer = (
        max(
            0.0,
            spent["answer_seconds"]
            - model_bound(answers_p, per_answer["calls"], answer_tokens, answer_chain),
        )
        / answers_p
        if answers_p
        else 0.0
    )
    answers_wall = sum(
        max(model_bound(a, per_answer["calls"], answer_tokens, answer_chain), engine_answer * a)
        for a in surveys
    )
    start_end = max(
        0.0, float(metrics.get("wall_seconds", 0.0)) - sum(tick_seconds) - spent["answer_seconds"]
    )
    wall = tick_wall * n_ticks + answers_wall + start_end
    priced = all(m.prices is not None for m in config.used_models().values())
    scripted = [n for n, m in config.used_models().items() if m.backend == "scripted"]
    model_block = metrics.get("model") or {}
    pilot = {
        "agents": pilot_agents,
        "ticks": pilot_ticks,
        "steps": spent["steps"],
        "answers": answers_p,
        "calls": spent["calls"],
        "prompt_tokens": spent["prompt_tokens"],
        "cached_tokens": spent["cached_prompt_tokens"],
        "output_tokens": spent["completion_tokens"],
        "cost": round(spent["cost"], 6),
        "wall_seconds": round(float(metrics.get("wall_seconds", 0.0)), 3),
        "answer_time": round(answer_time, 4),
        "longest_chain": chain,
        "engine_seconds_per_step": round(engine_step, 5),
        # Calls the models answered in the pilot (its pre-flight check is not one).
        "model_calls": int(model_block.get("calls", spent["calls"])),
    }
    assumptions = [
        f"the pilot's {pilot_agents} agents ({spent['steps']} steps over {pilot_ticks} "
        f"tick{'s' if pilot_ticks != 1 else ''}) step as the run's {n_agents} agents do over "
        f"its {n_ticks} ticks: the first tick's calls and tokens per step are the pilot's "
        "first tick's, every later tick's the mean of the pilot's later ticks (prompts that "
        "keep growing with memory and feeds, and behaviour that changes with the time of "
        "day, are not extrapolated); hook retries are included as they happened",
        (
            f"each of the {n_answers} survey and interview answers costs what the pilot's "
            f"{answers_p} answers to the first question did"
            if surveys
            else "the workflow asks no questions"
        ),
        f"a tick takes the longest of: the model's answer time ({answer_time:.3f} s, the "
        f"pilot's mean) x the larger of the longest chain of calls in one step ({chain}) "
        f"and the tick's calls over {slots} slot{'s' if slots != 1 else ''}"
        + (f", {rpm:g} requests/minute" if rpm else "")
        + (f", {tpm:g} tokens/minute" if tpm else "")
        + f"; the engine's {engine_step * 1000:.2f} ms per step x {n_agents} agents",
        "ticks do not overlap (executor.schedule: dependencies may make the run faster); "
        "checkpoints, interventions and Ray start-up add nothing; start and end take what "
        "the pilot's did",
        "the pilot sends at most one call per agent at a time and leaves out the run's "
        "rpm and tpm, so that its answer times are the server's own",
        "cached tokens are the share the pilot's server reported (the run's prefix cache "
        "may serve a larger share with more agents)",
    ]
    if from_tick:
        assumptions.append(
            f"only ticks {from_tick} to {config.total_ticks()} and the questions asked from "
            f"tick {from_tick} on (a fork at tick {from_tick}); each of these ticks costs what "
            "the pilot's later ticks did"
        )
    if scripted:
        assumptions.append(
            "the scripted model's token model: prompt tokens are the prompt's characters / 4 "
            "and output tokens the tool call's arguments (or the answer's text) / 4, rounded "
            "up (agentsim._tokens); no prompt is cached"
        )
    if not priced:
        assumptions.append("no cost: some model the run uses has no model.prices")
    return Estimate(
        calls=round(total["calls"]),
        prompt_tokens=round(total["prompt_tokens"]),
        cached_tokens=round(total["cached_prompt_tokens"]),
        output_tokens=round(total["completion_tokens"]),
        cost=round(total["cost"], 6) if priced else 0.0,
        wall_seconds=round(wall, 3),
        priced=priced,
        agents=n_agents,
        ticks=n_ticks,
        answers=n_answers,
        per_tick={
            "tokens": round(per_tick_tokens, 1),
            "cost": round(max(first["cost"], later["cost"]) * n_agents, 6),
            "seconds": round(tick_wall, 4),
        },
        per_answer_tokens=round(answer_tokens, 2),
        parts={
            "steps": {k: round(per_step[k] * steps, 6) for k in keys},
            "answers": {k: round(per_answer[k] * n_answers, 6) for k in keys},
            "wall": {
                "ticks": round(tick_wall * n_ticks, 3),
                "answers": round(answers_wall, 3),
                "start_end": round(start_end, 3),
            },
        },
        pilot=pilot,
        assumptions=tuple(assumptions),
    )


# --- the estimate against the run ---------------------------------------------------------


_COMPARED = (
    ("calls", "calls", "calls"),
    ("prompt_tokens", "prompt_tokens", "prompt tokens"),
    ("cached_tokens", "cached_prompt_tokens", "cached tokens"),
    ("output_tokens", "completion_tokens", "output tokens"),
    ("cost", "cost", "cost"),
    ("wall_seconds", "wall_seconds", "wall time"),
)


def estimate_error(run_dir: Path, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
    """Each figure of ``run_dir/estimate.json`` against what the run spent (its metrics'
    ``spending`` and wall time): ``{name: {"estimated", "actual", "error_pct"}}``, the
    error in percent of the actual (None when the actual is 0). None without an estimate."""
    try:
        est = json.loads((run_dir / "estimate.json").read_text("utf-8"))
    except (OSError, ValueError):
        return None
    spent = metrics.get("spending") or {}
    actual = {**spent, "wall_seconds": metrics.get("wall_seconds", 0.0)}
    out: dict[str, Any] = {}
    for key, source, _ in _COMPARED:
        if key == "cost" and not est.get("priced"):
            continue
        e, a = float(est.get(key, 0) or 0), float(actual.get(source, 0) or 0)
        out[key] = {
            "estimated": e,
            "actual": round(a, 6),
            "error_pct": round(100.0 * (e - a) / a, 1) if a else None,
        }
    return out


def error_line(cmp: Mapping[str, Any]) -> str:
    """One line of the estimate against the run: ``calls 1,200 est. 1,180 (-1.7%)``..."""
    parts = []
    for key, _, label in _COMPARED:
        if key not in cmp:
            continue
        c = cmp[key]
        fmt = _fmt(key)
        pct = "n/a" if c["error_pct"] is None else f"{c['error_pct']:+.1f}%"
        parts.append(f"{label} {fmt(c['actual'])} est. {fmt(c['estimated'])} ({pct})")
    return "estimate vs actual: " + ", ".join(parts)


def _fmt(key: str) -> Any:
    if key == "cost":
        return lambda x: f"{x:,.4f}"
    if key == "wall_seconds":
        return lambda x: f"{x:,.1f} s"
    return lambda x: f"{round(x):,}"


def render(est: Estimate) -> str:
    """The estimate as a table a user reads (``agentsim run --estimate``)."""
    steps, answers = est.parts.get("steps", {}), est.parts.get("answers", {})
    rows = [
        ("", "total", "agent steps", "answers"),
        ("model calls", f"{est.calls:,}", _n(steps, "calls"), _n(answers, "calls")),
        (
            "prompt tokens",
            f"{est.prompt_tokens:,}",
            _n(steps, "prompt_tokens"),
            _n(answers, "prompt_tokens"),
        ),
        (
            "  of them cached",
            f"{est.cached_tokens:,}",
            _n(steps, "cached_prompt_tokens"),
            _n(answers, "cached_prompt_tokens"),
        ),
        (
            "output tokens",
            f"{est.output_tokens:,}",
            _n(steps, "completion_tokens"),
            _n(answers, "completion_tokens"),
        ),
        (
            "cost",
            f"{est.cost:,.4f}" if est.priced else "n/a",
            f"{steps.get('cost', 0):,.4f}" if est.priced else "n/a",
            f"{answers.get('cost', 0):,.4f}" if est.priced else "n/a",
        ),
    ]
    wall = est.parts.get("wall", {})
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        f"estimate: {est.agents:,} agents x {est.ticks:,} ticks = "
        f"{est.agents * est.ticks:,} agent steps, {est.answers:,} answers"
    ]
    lines += [
        "  " + r[0].ljust(widths[0]) + "  " + "  ".join(r[i].rjust(widths[i]) for i in (1, 2, 3))
        for r in rows
    ]
    lines.append(
        f"  wall time ~{_clock(est.wall_seconds)} (ticks {_clock(wall.get('ticks', 0))}, "
        f"answers {_clock(wall.get('answers', 0))}, start and end "
        f"{_clock(wall.get('start_end', 0))})"
    )
    p = est.pilot
    lines.append(
        f"pilot: {p.get('agents', 0)} agents, {p.get('ticks', 0)} tick(s), "
        f"{p.get('steps', 0)} steps and {p.get('answers', 0)} answers: "
        f"{p.get('calls', 0):,} model calls, {p.get('prompt_tokens', 0):,} prompt tokens "
        f"({p.get('cached_tokens', 0):,} cached), {p.get('output_tokens', 0):,} output tokens"
        + (f", cost {p.get('cost', 0):,.4f}" if est.priced else "")
        + f", {p.get('wall_seconds', 0):.1f} s; answer time {p.get('answer_time', 0):.3f} s"
    )
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in est.assumptions]
    return "\n".join(lines)


def _n(part: Mapping[str, float], key: str) -> str:
    return f"{round(part.get(key, 0)):,}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
