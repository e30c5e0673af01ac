"""The JSON the viewer's pages show, built from a ``Run`` through ``agentsim.inspect`` only."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agentsim.errors import AgentsimError
from agentsim.inspect import Run, RunState
from agentsim.inspect._query import world_log
from agentsim.inspect.report import tick_metrics
from agentsim.run.behaviour import behaviour_lines

if TYPE_CHECKING:
    from agentsim.env.base import ViewLayout

__all__ = [
    "WORLD_AGENTS",
    "behaviour",
    "progress",
    "run_row",
    "run_summary",
    "survey_answers",
    "total_ticks",
    "world",
]

WORLD_AGENTS = 10_000
"""The world view draws at most this many agents (the first by id); occupancy counts them."""

# The labels of the tick_end fields drawn on the Run page (report.TICK_METRICS).
_LABELS = {
    "steps": "agent-steps",
    "model_calls": "model calls",
    "prompt_tokens": "prompt tokens",
    "completion_tokens": "completion tokens",
    "cached_prompt_tokens": "cached prompt tokens",
    "degraded": "degraded steps",
    "errors": "errors",
    "skipped": "skipped steps",
}


def progress(run: Run, manifest: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What changes while a run goes on: cheap, polled by every page. ``manifest`` is
    ``run.manifest()`` when the caller has just read it."""
    m = run.manifest() if manifest is None else manifest
    state = RunState.from_manifest(m)
    return {
        "id": run.path.name,
        "status": state.status,
        "state": state.state,
        "ticks_done": int(m.get("ticks_done") or 0),
        "started": state.started,
        "ended": state.ended,
        # Why it stopped, the failure shares over their limits, what it was forked from.
        "reason": state.reason,
        "over_limits": list(state.problems),
        "parent": dict(state.parent) if state.parent is not None else None,
    }


def total_ticks(run: Run) -> int | None:
    """The ticks the experiment asks for (None if its config no longer validates)."""
    try:
        return run.config().total_ticks()
    except AgentsimError:
        return None


def run_row(run: Run, total: int | None) -> dict[str, Any]:
    """A row of the Runs page; ``total`` is ``total_ticks(run)``, which never changes."""
    metrics, manifest = run.metrics(), run.manifest()
    return {
        **progress(run, manifest),
        "name": manifest.get("name"),
        "total_ticks": total,
        "agents": len(run.agents),
        "errors": int(metrics.get("errors") or 0),
        "degraded": int(metrics.get("degraded") or 0),
        "problems": problems(metrics, manifest),
    }


def behaviour(metrics: Mapping[str, Any]) -> list[str]:
    """The run's behaviour summary (``agentsim.run.behaviour``), from its ``metrics.json``."""
    return behaviour_lines(metrics)


def problems(metrics: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[str]:
    """What went wrong in a run, a short phrase each (none for a clean run): the problem
    counts of ``metrics.json`` that are not zero, and why the run stopped if it failed."""
    counts = metrics.get("problems")
    out = [
        f"{n:,} {kind.replace('_', ' ')}"
        for kind, n in sorted((counts or {}).items() if isinstance(counts, Mapping) else ())
        if isinstance(n, int) and n
    ]
    reason = manifest.get("reason") or manifest.get("error")
    # A run stopped on purpose (--ticks, Ctrl-C) says why too; that is no problem.
    if reason and manifest.get("status") not in ("stopped", "interrupted"):
        out.append(f"stopped: {reason}")
    return out


# The event types the Run page reads.
_LOGGED = (
    "tick_end",
    "script_called",
    "hook_gate_failed",
    "skill_activated",
    "measure",
    "survey_answer",
    "intervention",
    "skills_reloaded",
)


_UNFINISHED = ("answered", "out_of_turns")


def _num(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _part(end: Mapping[str, Any] | None, key: str, parts: tuple[str, ...]) -> float:
    """The sum of ``parts`` of a ``tick_end``'s counts by kind (``outcomes``, ``tool_calls``)."""
    counts = (end or {}).get(key)
    return sum(_num(counts.get(p)) for p in parts) if isinstance(counts, Mapping) else 0.0


def _per_tick(n: int, ticks: list[Any]) -> list[int]:
    counts = [0] * n
    for t in ticks:
        if isinstance(t, int) and 0 <= t < n:
            counts[t] += 1
    return counts


def _survey_questions(run: Run) -> dict[str, str]:
    """Survey name -> question, from the workflow of the run's config."""
    try:
        workflow = run.config_dict().get("workflow") or []
    except AgentsimError:
        return {}
    out: dict[str, str] = {}
    for step in workflow:
        survey = step.get("survey") if isinstance(step, dict) else None
        if isinstance(survey, dict) and "name" in survey:
            out[str(survey["name"])] = str(survey.get("question", ""))
    return out


def run_summary(run: Run) -> dict[str, Any]:
    """Metrics over ticks, skills activated per tick, markers (interventions, surveys, hot
    reloads) and the survey names with their question and answer count."""
    # One read of the log: each event's own fields are in its JSON ``data``.
    ends: dict[int, dict[str, Any]] = {}
    failed: list[int] = []
    gates: list[int] = []
    by_skill: defaultdict[str, list[int]] = defaultdict(list)
    markers: list[dict[str, Any]] = []
    surveys: dict[str, dict[str, Any]] = {}
    measured: dict[tuple[str, str], dict[int, list[float]]] = {}  # (name, group) -> tick
    table = run.events(types=_LOGGED, all_answers=True)
    for t, etype, text in zip(
        table["tick"].to_pylist(),
        table["type"].to_pylist(),
        table["data"].to_pylist(),
        strict=True,
    ):
        if etype == "hook_gate_failed":
            gates.append(t)
            continue
        data = json.loads(text or "{}")
        if etype == "tick_end":
            ends[t] = data
        elif etype == "script_called":
            if data.get("ok") is False:
                failed.append(t)
        elif etype == "skill_activated":
            by_skill[str(data.get("skill"))].append(t)
        elif etype == "measure":
            value = data.get("value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                key = (str(data.get("name")), str(data.get("group") or "all agents"))
                slot = measured.setdefault(key, {}).setdefault(t, [0.0, 0])
                slot[0] += value
                slot[1] += 1
        elif etype == "survey_answer":
            name = str(data.get("name"))
            survey = surveys.setdefault(
                name, {"name": name, "tick": t, "answers": 0, "not_ok": 0, "invalid": 0}
            )
            # ``answers``: the model's; ``not_ok``: rows of steps that degraded or failed;
            # ``invalid``: typed answers that did not fit their form (not data either).
            status = data.get("status", "ok")
            if status == "ok":
                survey["answers"] += 1
            elif status == "invalid":
                survey["invalid"] += 1
            else:
                survey["not_ok"] += 1
        elif etype == "intervention":
            what = data.get("action") or data.get("message") or "intervention"
            where = f"{data['env']}: " if data.get("env") else ""
            markers.append({"tick": t, "kind": "intervention", "label": where + what})
        else:  # skills_reloaded
            parts = [
                f"{what} {', '.join(map(str, data[what]))}"
                for what in ("added", "changed", "removed")
                if data.get(what)
            ]
            label = "skills reloaded: " + "; ".join(parts)
            markers.append({"tick": t, "kind": "reload", "label": label})
    n = max(ends, default=-1) + 1
    series = {k: [float(v) for v in col] for k, col in tick_metrics(ends, range(n)).items()}
    series["script_failures"] = [float(c) for c in _per_tick(n, failed)]
    series["hook_failures"] = [float(c) for c in _per_tick(n, gates)]
    # What the steps did (tick_end's outcomes, acted and tool_calls).
    series["acted"] = [_num(ends.get(t, {}).get("acted")) for t in range(n)]
    series["unfinished"] = [_part(ends.get(t), "outcomes", _UNFINISHED) for t in range(n)]
    series["tool_refused"] = [_part(ends.get(t), "tool_calls", ("refused",)) for t in range(n)]
    series["tool_failed"] = [_part(ends.get(t), "tool_calls", ("failed",)) for t in range(n)]
    skills = {s: _per_tick(n, ts) for s, ts in sorted(by_skill.items())}
    questions = _survey_questions(run) if surveys else {}
    for survey in surveys.values():
        survey["question"] = questions.get(survey["name"])
        markers.append(
            {"tick": survey["tick"], "kind": "survey", "label": f"survey {survey['name']}"}
        )
    markers.sort(key=lambda m: m["tick"])
    measures: dict[str, dict[str, list[float | None]]] = {}
    for (name, group), per_tick in sorted(measured.items()):
        measures.setdefault(name, {})[group] = [
            per_tick[t][0] / per_tick[t][1] if t in per_tick else None for t in range(n)
        ]
    return {
        "ticks": n,
        "labels": {
            **_LABELS,
            "script_failures": "script failures",
            "hook_failures": "hook failures",
            "acted": "steps that acted",
            "unfinished": "steps without finish",
            "tool_refused": "tool calls refused",
            "tool_failed": "tool calls failed",
        },
        "series": series,
        "skills": skills,
        "markers": markers,
        "surveys": list(surveys.values()),
        "reloads": [m for m in markers if m["kind"] == "reload"],
        "measures": measures,
    }


def survey_answers(run: Run, name: str, *, offset: int, limit: int) -> dict[str, Any]:
    """One page of a survey's rows, each with its ``status`` (``ok``, ``degraded``,
    ``error`` or ``invalid``, and the ``reason`` when not ok) and, for a typed survey, its
    ``instrument`` and ``value``: the viewer marks the ones that are not data."""
    # The events as logged: one table of every survey would hold values of several forms
    # as JSON text.
    rows = [r for r in run.iter_events(["survey_answer"]) if r.get("name") == name]
    page = rows[offset : offset + limit]
    return {
        "name": name,
        "total": len(rows),
        "offset": offset,
        "answers": [
            {
                **{k: r.get(k) for k in ("tick", "agent_id", "answer", "reason")},
                "status": r.get("status") or "ok",
                "echo": r.get("echo") is True,
                **{k: r[k] for k in ("instrument", "value") if r.get(k) is not None},
            }
            for r in page
        ],
    }


def world(
    run: Run, layouts: Mapping[str, ViewLayout], *, limit: int = WORLD_AGENTS
) -> dict[str, Any]:
    """The drawn modules: places, the first ``limit`` agents with their place index at the
    start and every later move (flat ``[tick, agent, place]``, place -1 in transit); the
    follow edges among those agents (as set up); the opinion histogram per tick.
    ``layouts`` is ``env_layouts(run)``, which does not change while the run goes on."""
    place_ids: list[str] = []
    places: list[dict[str, Any]] = []
    start: dict[str, str] = {}
    arrive: dict[str, str] = {}
    edges: list[tuple[str, str]] = []
    for name, lay in layouts.items():
        for pid, (x, y) in lay.places.items():
            place_ids.append(pid)
            places.append({"id": pid, "x": x, "y": y, "category": lay.categories.get(pid, name)})
        start.update(lay.start)
        arrive.update(lay.arrive)
        edges.extend(lay.edges)
    known = run.agents  # sorted; a listing of the agents' folders: done once
    agents = sorted(start)[:limit] if start else known[:limit]
    a_index = {a: i for i, a in enumerate(agents)}
    p_index = {p: i for i, p in enumerate(place_ids)}
    drawn = [lay for lay in layouts.values() if lay.arrive or lay.leave]
    log = world_log(run, drawn, keep=("social_opinions",))
    moves: list[int] = []
    for layout_moves in log.moves:
        for tick, agent, place in layout_moves:
            i = a_index.get(agent)
            if i is not None:
                moves.extend((tick, i, p_index.get(place, -1) if place is not None else -1))
    drawn_edges = [[a_index[a], a_index[b]] for a, b in edges if a in a_index and b in a_index][
        : 4 * limit
    ]
    opinions = [
        {"tick": r["tick"], "histogram": r.get("histogram"), "mean": r.get("mean")}
        for r in log.kept
    ]
    return {
        "modules": sorted(layouts),
        "places": places,
        "agents": agents,
        "agents_total": len(known),
        "start": [p_index.get(start.get(a, ""), -1) for a in agents],
        "moves": moves,
        "edges": drawn_edges,
        "opinions": opinions,
    }
