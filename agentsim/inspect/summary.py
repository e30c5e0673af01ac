"""The overview of a run: one streamed pass over ``events.jsonl`` plus the small files.

No trace is opened, so the cost grows with the number of events, not of agents' files.
Counts come from the events (what the log shows so far, also for a run that is still going
or that died); the wall-clock rate comes from ``metrics.json``, since events hold simulation
time only. Problems are counted with ``agentsim.run.problems``, as the engine counts them for
``metrics.json``: the two always agree.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentsim.inspect.run import Run
from agentsim.llm.stats import Prices
from agentsim.run.behaviour import behaviour_lines
from agentsim.run.budget import lost_line, lost_of
from agentsim.run.problems import gate_retries, problem_of

__all__ = ["EventCounts", "RunOverview", "SkillUse", "error_kind", "summarize", "summarize_events"]

# tick_end's counts by kind (outcomes, tool call results), summed by key.
_TICK_DICTS = ("outcomes", "tool_calls")

_TICK_SUMS = (
    "acted",
    "steps",
    "model_calls",
    "script_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_prompt_tokens",
    "errors",
    "degraded",
    "skipped",
)

_PLAIN = frozenset(
    {
        "agent_action",
        "move",
        "arrive",
        "post",
        "message",
        "opinion_change",
        "city_occupancy",
        "social_opinions",
        "survey_answer",
    }
)


def error_kind(event: Mapping[str, Any]) -> str | None:
    """The kind of an error event (``None`` for an event that is no error): its problem kind
    (``agentsim.run.problems.PROBLEMS``), with ``agent_error`` split by the text before its
    first colon (the exception type, or "default skill"), or "step timeout"."""
    kind = problem_of(event)
    if kind == "agent_error":
        text = str(event.get("error") or "")
        if text.startswith("step timed out"):
            return "agent_error: step timeout"
        head, sep, _ = text.partition(":")
        return f"agent_error: {head.strip()}" if sep and head.strip() else "agent_error"
    return kind


@dataclass(slots=True, kw_only=True)
class SkillUse:
    """``activations`` counts every ``skill_activated`` event, ``default_activations`` (part
    of them) those of the default skills activated when the agents were set up."""

    activations: int = 0
    default_activations: int = 0
    script_calls: int = 0
    script_failures: int = 0
    script_truncated: int = 0  # calls whose output the runner cut at its cap

    def to_dict(self) -> dict[str, int]:
        return {
            "activations": self.activations,
            "default_activations": self.default_activations,
            "script_calls": self.script_calls,
            "script_failures": self.script_failures,
            "script_truncated": self.script_truncated,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOverview:
    """What ``agentsim inspect RUN`` shows."""

    run_id: str
    name: str
    path: str
    state: Mapping[str, Any]  # RunState.to_dict()
    seed: int | None
    ticks_done: int
    ticks_total: int | None
    last_time: str | None
    agents: int
    agent_steps: int
    agent_steps_per_s: float | None
    model_calls: int
    script_calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int  # part of prompt_tokens: what the server's prefix cache served
    cost: float | None  # None when the experiment configures no prices
    skipped: int
    errors: Mapping[str, int]
    gate_retries: int
    quarantined: tuple[Mapping[str, Any], ...]
    events: Mapping[str, int]
    skills: Mapping[str, SkillUse]
    skills_hidden: Mapping[str, str]  # skill id -> why this run's catalogs leave it out
    hot_reloads: tuple[Mapping[str, Any], ...]
    checkpoints: tuple[int, ...]
    lineage: tuple[Mapping[str, Any], ...] = ()  # the runs it was forked from, nearest first
    # From run_start: ``namespace@folder`` -> why it was refused; id -> the id that wins
    # its bare name. From skill_broken events: tick, skill, file, line, message.
    skills_refused: Mapping[str, str] = field(default_factory=dict)
    skills_shadowed: Mapping[str, str] = field(default_factory=dict)
    skills_broken: tuple[Mapping[str, Any], ...] = ()
    # From run_start: what contained ``process`` isolation (``bubblewrap`` / ``none: why``).
    sandbox: str | None = None
    # A model per group: name -> calls, tokens and cost (from metrics.json; {} otherwise).
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # What the agents did (from the events' tick_end): steps by outcome, steps that acted,
    # tool calls by result; from metrics.json, tool calls by tool and by skill, and the same
    # counts by group and by model; the behaviour summary (``agentsim.run.behaviour``).
    outcomes: Mapping[str, int] = field(default_factory=dict)
    acted: int = 0
    tool_calls: Mapping[str, int] = field(default_factory=dict)
    tool_calls_by_tool: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    tool_calls_by_skill: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    by_group: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    by_model: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    behaviour: tuple[str, ...] = ()
    # Skill id -> agent-steps whose catalog listed it, for each skill that no step activated
    # or called (default skills left out): its description may never fire.
    never_fires: Mapping[str, int] = field(default_factory=dict)
    # From metrics.json: what work that resumes threw away had spent (``spending.lost``:
    # calls, tokens, cost, seconds, ticks; not in the totals above, which the events give;
    # counted against the run's budget). {} when no resume threw work away.
    lost: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "path": self.path,
            **dict(self.state),
            "seed": self.seed,
            "ticks_done": self.ticks_done,
            "ticks_total": self.ticks_total,
            "last_time": self.last_time,
            "agents": self.agents,
            "agent_steps": self.agent_steps,
            "agent_steps_per_s": self.agent_steps_per_s,
            "model_calls": self.model_calls,
            "script_calls": self.script_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "tokens": self.tokens,
            "cost": self.cost,
            "models": {k: dict(v) for k, v in self.models.items()},
            "skipped": self.skipped,
            "errors": dict(self.errors),
            "error_total": sum(self.errors.values()),
            "gate_retries": self.gate_retries,
            "quarantined": [dict(q) for q in self.quarantined],
            "events": dict(self.events),
            "skills": {k: v.to_dict() for k, v in self.skills.items()},
            "skills_hidden": dict(self.skills_hidden),
            "skills_refused": dict(self.skills_refused),
            "skills_shadowed": dict(self.skills_shadowed),
            "skills_broken": [dict(b) for b in self.skills_broken],
            "sandbox": self.sandbox,
            "hot_reloads": [dict(r) for r in self.hot_reloads],
            "checkpoints": list(self.checkpoints),
            "lineage": [dict(p) for p in self.lineage],
            "behaviour": list(self.behaviour),
            "outcomes": dict(self.outcomes),
            "acted": self.acted,
            "tool_calls": dict(self.tool_calls),
            "tool_calls_by_tool": {k: dict(v) for k, v in self.tool_calls_by_tool.items()},
            "tool_calls_by_skill": {k: dict(v) for k, v in self.tool_calls_by_skill.items()},
            "by_group": {k: dict(v) for k, v in self.by_group.items()},
            "by_model": {k: dict(v) for k, v in self.by_model.items()},
            "never_fires": dict(self.never_fires),
            "lost": dict(self.lost),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class EventCounts:
    """What the event log alone says about a run."""

    ticks_done: int
    last_time: str | None
    agents: int | None  # from run_start
    sums: Mapping[str, int]  # tick_end fields summed: steps, model_calls, tokens, ...
    errors: Mapping[str, int]
    gate_retries: int  # extra model rounds post_step gates asked for
    quarantined: tuple[Mapping[str, Any], ...]  # skill_quarantined events: tick, skill, script
    events: Mapping[str, int]
    skills: Mapping[str, SkillUse]
    skills_hidden: Mapping[str, str]  # from run_start
    hot_reloads: tuple[Mapping[str, Any], ...]
    skills_refused: Mapping[str, str] = field(default_factory=dict)  # from run_start
    skills_shadowed: Mapping[str, str] = field(default_factory=dict)  # from run_start
    skills_broken: tuple[Mapping[str, Any], ...] = ()  # skill_broken events
    # tick_end's outcomes and tool_calls, summed by key.
    outcomes: Mapping[str, int] = field(default_factory=dict)
    tool_calls: Mapping[str, int] = field(default_factory=dict)
    sandbox: str | None = None  # from run_start
    # Skill id -> agent-steps whose catalog listed it, for the skills listed but never
    # activated nor called (default skills left out); from tick_end's ``skills``.
    never_fires: Mapping[str, int] = field(default_factory=dict)


def summarize_events(events: Iterable[Mapping[str, Any]]) -> EventCounts:
    """Counts from events (the part of the overview that the log alone gives)."""
    sums: Counter[str] = Counter()
    dicts: dict[str, Counter[str]] = {k: Counter() for k in _TICK_DICTS}
    errors: Counter[str] = Counter()
    types: Counter[str] = Counter()
    skills: dict[str, SkillUse] = {}
    reloads: list[Mapping[str, Any]] = []
    quarantined: list[Mapping[str, Any]] = []
    retries = 0
    ticks = 0
    agents: int | None = None
    last_time: str | None = None
    hidden: dict[str, str] = {}
    refused: dict[str, str] = {}
    shadowed: dict[str, str] = {}
    broken: list[Mapping[str, Any]] = []
    sandbox: str | None = None
    triggers: dict[str, list[int]] = {}  # skill id -> [visible, activated, scripts]
    for ev in events:
        last_time = ev.get("time") or last_time
        kind = str(ev.get("type"))
        types[kind] += 1
        if kind in _PLAIN:  # most events are only counted: keep their cost low
            continue
        if kind == "tick_end":
            ticks += 1
            for k in _TICK_SUMS:
                v = ev.get(k, 0)
                sums[k] += v if isinstance(v, int) else 0
            for k in _TICK_DICTS:
                part = ev.get(k)
                if isinstance(part, dict):
                    dicts[k].update({str(n): v for n, v in part.items() if isinstance(v, int)})
            _add_triggers(triggers, ev.get("skills"))
        elif kind == "skill_activated":
            use = skills.setdefault(str(ev.get("skill")), SkillUse())
            use.activations += 1
            use.default_activations += ev.get("default") is True
        elif kind == "script_called":
            use = skills.setdefault(str(ev.get("skill")), SkillUse())
            use.script_calls += 1
            use.script_failures += ev.get("ok") is False
            use.script_truncated += ev.get("truncated") is True
        elif kind == "skills_reloaded":
            reloads.append(
                {k: ev.get(k) for k in ("tick", "generation", "added", "changed", "removed")}
            )
        elif kind == "skill_quarantined":
            quarantined.append({k: ev.get(k) for k in ("tick", "agent_id", "skill", "script")})
        elif kind == "run_start":
            agents = ev["agents"] if isinstance(ev.get("agents"), int) else agents
            if isinstance(ev.get("skills_hidden"), dict):
                hidden = {str(k): str(v) for k, v in ev["skills_hidden"].items()}
            if isinstance(ev.get("skills_refused"), dict):
                refused = {str(k): str(v) for k, v in ev["skills_refused"].items()}
            if isinstance(ev.get("skills_shadowed"), dict):
                shadowed = {str(k): str(v) for k, v in ev["skills_shadowed"].items()}
            sandbox = str(ev["sandbox"]) if isinstance(ev.get("sandbox"), str) else sandbox
        elif kind == "skill_broken":
            broken.append({k: ev.get(k) for k in ("tick", "skill", "file", "line", "message")})
        retries += gate_retries(ev)
        ek = error_kind(ev)
        if ek is not None:
            errors[ek] += 1
    return EventCounts(
        ticks_done=ticks,
        last_time=last_time,
        agents=agents,
        sums={k: sums[k] for k in _TICK_SUMS},
        errors=dict(sorted(errors.items())),
        gate_retries=retries,
        quarantined=tuple(quarantined),
        events=dict(sorted(types.items())),
        skills=dict(sorted(skills.items())),
        skills_hidden=hidden,
        hot_reloads=tuple(reloads),
        skills_refused=refused,
        skills_shadowed=shadowed,
        skills_broken=tuple(broken),
        outcomes=dict(dicts["outcomes"]),
        tool_calls=dict(dicts["tool_calls"]),
        sandbox=sandbox,
        never_fires={
            sid: visible
            for sid, (visible, activated, scripts) in sorted(triggers.items())
            if visible
            and not (activated or scripts)
            and not (sid in skills and skills[sid].default_activations)
        },
    )


def _add_triggers(acc: dict[str, list[int]], by_group: Any) -> None:
    """Sum one ``tick_end``'s ``skills`` (group -> skill id -> counts) over the groups."""
    if not isinstance(by_group, dict):
        return
    for per in by_group.values():
        for sid, counts in (per if isinstance(per, dict) else {}).items():
            slot = acc.setdefault(str(sid), [0, 0, 0])
            for i, key in enumerate(("visible", "activated", "scripts")):
                v = counts.get(key, 0) if isinstance(counts, dict) else 0
                slot[i] += v if isinstance(v, int) else 0


def _nested(metrics: Mapping[str, Any], key: str) -> dict[str, Mapping[str, Any]]:
    value = metrics.get(key)
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in sorted(value.items()) if isinstance(v, dict)}


def _total_ticks(config: Mapping[str, Any]) -> int | None:
    workflow = config.get("workflow")
    if isinstance(workflow, list):
        total = 0
        for step in workflow:
            run = step.get("run") if isinstance(step, dict) else None
            if isinstance(run, dict) and isinstance(run.get("ticks"), int):
                total += run["ticks"]
        return total
    ticks = config.get("ticks")
    return ticks if isinstance(ticks, int) else None


def _by_model(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """metrics.json's calls and tokens per model (runs with ``models:``), each with its cost
    at its own prices."""
    block = metrics.get("model")
    parts = block.get("by_model") if isinstance(block, dict) else None
    if not isinstance(parts, dict):
        return {}
    named = config.get("models")
    out: dict[str, Any] = {}
    for name, part in sorted(parts.items()):
        if not isinstance(part, dict):
            continue
        cfg = config if name == "default" else {"model": (named or {}).get(name)}
        p, c = int(part.get("prompt_tokens", 0)), int(part.get("completion_tokens", 0))
        cached = int(part.get("cached_prompt_tokens", 0))
        out[name] = {
            "calls": int(part.get("calls", 0)),
            "errors": int(part.get("errors", 0)),
            "prompt_tokens": p,
            "completion_tokens": c,
            "cost": _cost(
                cfg, {"prompt_tokens": p, "completion_tokens": c, "cached_prompt_tokens": cached}
            ),
        }
    return out


def _cost(config: Mapping[str, Any], sums: Mapping[str, int]) -> float | None:
    model = config.get("model")
    prices = model.get("prices") if isinstance(model, dict) else None
    if not isinstance(prices, dict):
        return None
    try:
        cached = prices.get("cached_prompt_per_1k")
        price = Prices(
            prompt_per_1k=float(prices["prompt_per_1k"]),
            completion_per_1k=float(prices["completion_per_1k"]),
            cached_prompt_per_1k=None if cached is None else float(cached),
        )
    except (KeyError, TypeError, ValueError):
        return None
    cost = price.cost_of(
        prompt=sums["prompt_tokens"],
        completion=sums["completion_tokens"],
        cached_prompt=sums["cached_prompt_tokens"],
    )
    return round(cost, 6)


def _passing(
    events: Iterable[Mapping[str, Any]], each: Callable[[Mapping[str, Any]], None]
) -> Iterator[Mapping[str, Any]]:
    for ev in events:
        each(ev)
        yield ev


def summarize(
    run: Run, *, each_event: Callable[[Mapping[str, Any]], None] | None = None
) -> RunOverview:
    """The overview of ``run``: manifest, config (ticks, prices), metrics and the events.

    ``each_event`` is called with every event as the overview reads it, so that a caller
    that needs more from the log (``agentsim report``) reads it once."""
    state = run.state()  # first: the events read next are at least as new as this
    manifest = run.manifest()
    try:
        config = run.config_dict()
    except Exception:  # an overview must work on a damaged run; the config is optional
        config = {}
    metrics = run.metrics()
    events = run.iter_events()
    counts = summarize_events(events if each_event is None else _passing(events, each_event))
    sums = counts.sums
    rate = metrics.get("agent_steps_per_s")
    agents = counts.agents
    seed = manifest.get("seed")
    models = _by_model(config, metrics)
    cost = _cost(config, sums)
    if models:  # each model's tokens at its own prices
        costs = [m["cost"] for m in models.values()]
        cost = None if None in costs else round(sum(costs), 6)
    return RunOverview(
        run_id=str(manifest.get("run_id") or run.path.name),
        name=str(manifest.get("name") or ""),
        path=str(run.path),
        state=state.to_dict(),
        seed=seed if isinstance(seed, int) else None,
        ticks_done=counts.ticks_done,
        ticks_total=_total_ticks(config),
        last_time=counts.last_time,
        agents=agents if agents is not None else len(run.agents),
        agent_steps=sums["steps"],
        agent_steps_per_s=float(rate) if isinstance(rate, int | float) else None,
        model_calls=sums["model_calls"],
        script_calls=sums["script_calls"],
        prompt_tokens=sums["prompt_tokens"],
        completion_tokens=sums["completion_tokens"],
        cached_prompt_tokens=sums["cached_prompt_tokens"],
        cost=cost,
        models=models,
        skipped=sums["skipped"],
        errors=counts.errors,
        gate_retries=counts.gate_retries,
        quarantined=counts.quarantined,
        events=counts.events,
        skills=counts.skills,
        skills_hidden=counts.skills_hidden,
        skills_refused=counts.skills_refused,
        skills_shadowed=counts.skills_shadowed,
        skills_broken=counts.skills_broken,
        sandbox=counts.sandbox,
        never_fires=counts.never_fires,
        hot_reloads=counts.hot_reloads,
        checkpoints=tuple(t for t, _ in run.checkpoints()),
        lineage=tuple(run.lineage()),
        behaviour=tuple(behaviour_lines(metrics)),
        outcomes=counts.outcomes,
        acted=sums["acted"],
        tool_calls=counts.tool_calls,
        tool_calls_by_tool=_nested(metrics, "tool_calls_by_tool"),
        tool_calls_by_skill=_nested(metrics, "tool_calls_by_skill"),
        by_group=_nested(metrics, "by_group"),
        by_model=_nested(metrics, "by_model"),
        lost=_lost(metrics),
    )


def _lost(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``spending.lost`` of ``metrics.json``, or {} when no resume threw work away."""
    spending = metrics.get("spending")
    if not isinstance(spending, dict) or lost_line(spending) is None:
        return {}
    return lost_of(spending)
