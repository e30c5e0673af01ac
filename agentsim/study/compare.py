"""Comparing a study's arms: ``compare_study(STUDY_DIR)`` and ``agentsim study report``.

A study folder (docs/studies.md) holds ``manifest.json`` and one ordinary run folder per arm
and replicate. For each measure the study names, each complete run is read (``open_run``)
and reduced to one value per tick and one final value, the run's summary; the arms are then
compared on those summaries, so the replicate is the unit of inference (docs/comparisons.md
says which statistics and why).

    >>> cmp = compare_study("studies/park-closure")
    >>> item = cmp.items[0]
    >>> item.final["closure"].difference   # an Estimate: mean, low, high, method
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentsim._paths import is_inside
from agentsim.errors import AgentsimError, ConfigError, RunError
from agentsim.inspect import Run, open_run
from agentsim.inspect._files import iter_jsonl, read_json
from agentsim.study.stats import LEVEL, Estimate, mean_ci, paired, welch

__all__ = [
    "ArmResult",
    "Comparison",
    "ItemResult",
    "LeftOut",
    "RunValues",
    "StudyRun",
    "TickResult",
    "compare_study",
    "main",
    "read_study",
]

_FORMAT = 1
_COMPLETE = "complete"
_RUN_DONE = ("completed", "completed with problems")
_COMPARED = ("likert", "number", "choice")  # survey instruments with a mean to compare


# -- the study folder --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StudyRun:
    """One run of the manifest: its arm, replicate, seed (and sample) and folder."""

    id: str
    arm: str
    replicate: int
    seed: int | None
    sample: int | None
    dir: Path
    fork_of: Mapping[str, Any] | None
    state: str

    @property
    def pair_key(self) -> tuple[int | None, int | None]:
        """Runs of two arms with the same key share their seed (and sample): paired."""
        return (self.seed, self.sample)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeftOut:
    """A run of the study the comparison leaves out, and why."""

    run: str
    arm: str
    state: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.run, "arm": self.arm, "state": self.state, "reason": self.reason}


def _bad(path: Path, problem: str, fix: str = "") -> ConfigError:
    return ConfigError(
        "STUDY_DIR",
        f"{path}: {problem}",
        fix or "give the folder `agentsim study STUDY.yaml` wrote (it holds manifest.json)",
    )


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def read_study(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[StudyRun]]:
    """The study's manifest and its runs, checked; a folder that is not a study is a
    ``ConfigError`` naming the problem. A run's folder must lie inside the study folder."""
    root = Path(path)
    if not root.is_dir():
        raise _bad(root, "is not a folder")
    mpath = root / "manifest.json"
    if not mpath.is_file():
        raise _bad(root, "is not a study folder (no manifest.json)")
    try:
        manifest = read_json(mpath, what="study manifest")
    except RunError as exc:
        raise _bad(root, str(exc), "restore manifest.json or run the study again") from None
    if manifest.get("format") != _FORMAT:
        raise _bad(
            root,
            f"manifest.json has format {manifest.get('format')!r}, not {_FORMAT} "
            "(is it a run folder's manifest?)",
        )
    arms = manifest.get("arms")
    if (
        not isinstance(arms, list)
        or not arms
        or not all(isinstance(a, dict) and isinstance(a.get("name"), str) for a in arms)
    ):
        raise _bad(root, "manifest.json has no list of arms with names", "run the study again")
    names = [a["name"] for a in arms]
    control = manifest.get("control") or names[0]
    if control not in names:
        raise _bad(
            root,
            f"the control arm {control!r} is not one of the arms ({', '.join(names)})",
            "run the study again",
        )
    measures = manifest.get("measures")
    if not isinstance(measures, list):
        raise _bad(root, "manifest.json has no list of measures", "run the study again")
    raw_runs = manifest.get("runs")
    if not isinstance(raw_runs, list):
        raise _bad(root, "manifest.json has no list of runs", "run the study again")
    runs: list[StudyRun] = []
    for i, r in enumerate(raw_runs):
        if not (
            isinstance(r, dict)
            and isinstance(r.get("id"), str)
            and isinstance(r.get("dir"), str)
            and r.get("arm") in names
        ):
            raise _bad(
                root,
                f"runs[{i}] of manifest.json needs an id, a dir and one of the arms",
                "run the study again",
            )
        folder = root / r["dir"]
        if Path(r["dir"]).is_absolute() or not is_inside(folder, root):
            raise _bad(
                root,
                f"run {r['id']}'s folder {r['dir']!r} is not inside the study folder",
                "keep each run's folder inside the study folder (a relative dir, no links out)",
            )
        fork = r.get("fork_of")
        runs.append(
            StudyRun(
                id=r["id"],
                arm=r["arm"],
                replicate=_int_or_none(r.get("replicate")) or 0,
                seed=_int_or_none(r.get("seed")),
                sample=_int_or_none(r.get("sample")),
                dir=folder,
                fork_of=dict(fork) if isinstance(fork, dict) else None,
                state=str(r.get("state") or "unknown"),
            )
        )
    return {**manifest, "control": control}, runs


# -- one run's values --------------------------------------------------------------------------


@dataclass(slots=True)
class RunValues:
    """One run's summary of one measure: a value per tick, the final value, and the
    per-agent values behind the final value (empty for a run-level series)."""

    ticks: dict[int, float] = field(default_factory=dict)
    final: float | None = None
    agents: dict[str, float] = field(default_factory=dict)


def _mean(values: Iterable[float]) -> float:
    vs = list(values)
    return math.fsum(vs) / len(vs)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _agent_means(rows: Iterable[tuple[str, float]]) -> dict[str, float]:
    """Each agent's mean of its values (an agent may have several at one tick)."""
    acc: dict[str, list[float]] = {}
    for agent, v in rows:
        acc.setdefault(agent, []).append(v)
    return {a: _mean(vs) for a, vs in sorted(acc.items())}


@dataclass(slots=True)
class _RunEvents:
    """What one pass over a run's events keeps for the measures."""

    ticks: list[int] = field(default_factory=list)  # the ticks that ended
    measures: dict[str, list[tuple[int, str, float]]] = field(default_factory=dict)
    actions: list[tuple[int, str, str]] = field(default_factory=list)
    run_level: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by type


def _scan(run: Run, measure_names: set[str], env_type: Callable[[str], bool]) -> _RunEvents:
    out = _RunEvents()
    for ev in run.iter_events():
        kind, tick = ev.get("type"), ev.get("tick")
        if not isinstance(tick, int):
            continue
        if kind == "tick_end":
            out.ticks.append(tick)
        elif kind == "measure" and ev.get("name") in measure_names:
            value = _number(ev.get("value"))
            if value is not None and isinstance(ev.get("agent_id"), str):
                out.measures.setdefault(ev["name"], []).append((tick, ev["agent_id"], value))
        elif kind == "agent_action" and isinstance(ev.get("agent_id"), str):
            out.actions.append((tick, ev["agent_id"], str(ev.get("action") or "")))
        elif isinstance(kind, str) and ev.get("agent_id") is None and env_type(kind):
            out.run_level.setdefault(kind, []).append(ev)
    return out


# -- measures ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Item:
    """One compared quantity of a measure (a choice survey gives one per option)."""

    key: str  # unique, used for file names
    label: str  # for people
    unit: str  # what a value is
    final: str  # what the final value is


def _measure_kind(spec: Any) -> tuple[str, str]:
    kinds = [k for k in ("survey", "measure", "env", "action") if k in spec] if isinstance(
        spec, Mapping
    ) else []  # fmt: skip
    if len(kinds) != 1 or not isinstance(spec[kinds[0]], str) or not spec[kinds[0]]:
        raise ConfigError(
            "measures",
            f"{spec!r} is not a measure",
            "each measure is one of {survey: NAME}, {measure: NAME}, {env: MODULE.SERIES}, "
            "{action: NAME}",
        )
    return kinds[0], spec[kinds[0]]


def _env_matcher(module: str) -> Callable[[str], bool]:
    """Whether an event type is one a module writes: declared with writer ``env:MODULE``
    (the built-in modules), else named ``MODULE_...`` (a user module's own events)."""
    from agentsim.events import EVENTS

    declared = {name for name, et in EVENTS.items() if et.writer == f"env:{module}"}
    if declared:
        return lambda kind: kind in declared
    return lambda kind: kind.startswith(f"{module}_")


_MISSING = object()


def _resolve(obj: Any, parts: Sequence[str]) -> Any:
    """The value at a dotted path; a key may itself hold dots (a place id)."""
    if not parts:
        return obj
    if not isinstance(obj, dict):
        return _MISSING
    for k in range(len(parts), 0, -1):
        key = ".".join(parts[:k])
        if key in obj:
            found = _resolve(obj[key], parts[k:])
            if found is not _MISSING:
                return found
    if len(parts) == 1 and obj and all(_number(v) is not None for v in obj.values()):
        return 0  # a key left out of a table of counts (an empty place) counts zero
    return _MISSING


class _Collector:
    """The per-run values of every item of the study's measures."""

    def __init__(self, runs: Mapping[str, Run], measures: Sequence[Mapping[str, Any]]) -> None:
        self.runs = runs
        self.measures = [(_measure_kind(m), dict(m)) for m in measures]
        self.notes: list[str] = []
        names = {name for (kind, name), _ in self.measures if kind == "measure"}
        self.modules = {
            name.partition(".")[0]: _env_matcher(name.partition(".")[0])
            for (kind, name), _ in self.measures
            if kind == "env"
        }
        matchers = list(self.modules.values())
        self.events = {
            rid: _scan(run, names, lambda kind: any(m(kind) for m in matchers))
            for rid, run in runs.items()
        }

    def items(self) -> Iterator[tuple[dict[str, Any], _Item, dict[str, RunValues]]]:
        for (kind, name), spec in self.measures:
            if kind == "survey":
                for item, values in self._survey(name):
                    yield spec, item, values
            elif kind == "measure":
                yield spec, *self._measure(name)
            elif kind == "env":
                found = self._env(name)
                if found is not None:
                    yield spec, *found
            else:
                yield spec, *self._action(name)

    # surveys (rows per contract C1: value, instrument, group)

    def _survey(self, name: str) -> list[tuple[_Item, dict[str, RunValues]]]:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            self.notes.append(f"survey {name!r}: not a survey name; not compared")
            return []
        rows: dict[str, list[dict[str, Any]]] = {}
        instruments: set[str] = set()
        found = False
        for rid, run in self.runs.items():
            path = run.path / "surveys" / f"{name}.jsonl"
            found = found or path.is_file()
            ok = []
            for row in iter_jsonl(path):
                if row.get("status") != "ok" or row.get("value") is None:
                    continue
                if isinstance(row.get("instrument"), str):
                    instruments.add(row["instrument"])
                if isinstance(row.get("tick"), int) and isinstance(row.get("agent_id"), str):
                    ok.append(row)
            rows[rid] = ok
        if not found:
            self.notes.append(f"survey {name}: no run has surveys/{name}.jsonl; not compared")
            return []
        if not instruments:
            self.notes.append(
                f"survey {name}: no typed answers (free text only); not compared. Give the "
                "survey step an `answer:` instrument (likert, choice or number)"
            )
            return []
        if len(instruments) > 1 or not instruments <= set(_COMPARED):
            self.notes.append(
                f"survey {name}: instrument {', '.join(sorted(instruments))} has no mean to "
                f"compare; not compared (see surveys/{name}.jsonl)"
            )
            return []
        (instrument,) = instruments
        if instrument == "choice":
            options = sorted(
                {str(r["value"]) for rs in rows.values() for r in rs if isinstance(r["value"], str)}
            )
            return [
                (
                    _Item(
                        key=f"survey-{name}-{option}",
                        label=f"survey {name}: share answering {option!r}",
                        unit="share of the agents' answers",
                        final=f"the answers to the last asking of {name}",
                    ),
                    {
                        rid: _answers_values(
                            rs, lambda v, o=option: float(v == o) if isinstance(v, str) else None
                        )
                        for rid, rs in rows.items()
                    },
                )
                for option in options
            ]
        item = _Item(
            key=f"survey-{name}",
            label=f"survey {name} ({instrument}): mean answer",
            unit="mean answer over the agents",
            final=f"the answers to the last asking of {name}",
        )
        return [(item, {rid: _answers_values(rs, _number) for rid, rs in rows.items()})]

    # ctx.record measures (`measure` events)

    def _measure(self, name: str) -> tuple[_Item, dict[str, RunValues]]:
        item = _Item(
            key=f"measure-{name}",
            label=f"measure {name}",
            unit="mean over the agents",
            final="each agent's last recorded value, averaged over the agents",
        )
        values: dict[str, RunValues] = {}
        for rid, ev in self.events.items():
            recs = ev.measures.get(name, [])
            rv = RunValues()
            by_tick: dict[int, list[tuple[str, float]]] = {}
            last: dict[str, tuple[int, list[float]]] = {}  # agent -> its last tick's values
            for tick, agent, value in recs:
                by_tick.setdefault(tick, []).append((agent, value))
                t0, vs = last.get(agent, (tick, []))
                if tick > t0:
                    last[agent] = (tick, [value])
                elif tick == t0:
                    last[agent] = (tick, [*vs, value])
            for tick in sorted(by_tick):
                rv.ticks[tick] = _mean(_agent_means(by_tick[tick]).values())
            rv.agents = {a: _mean(vs) for a, (_, vs) in sorted(last.items())}
            rv.final = _mean(rv.agents.values()) if rv.agents else None
            values[rid] = rv
        if not any(v.final is not None for v in values.values()):
            self.notes.append(f"measure {name}: no run recorded it (ctx.record({name!r}, ...))")
        return item, values

    # environment module series

    def _env(self, name: str) -> tuple[_Item, dict[str, RunValues]] | None:
        module, _, path = name.partition(".")
        if not module or not path:
            self.notes.append(
                f"env {name!r}: give MODULE.SERIES (e.g. social.mean, city.in_transit); "
                "not compared"
            )
            return None
        matches = self.modules[module]
        parts = path.split(".")
        values: dict[str, RunValues] = {}
        seen = False
        for rid, ev in self.events.items():
            rv = RunValues()
            for kind, events in sorted(ev.run_level.items()):
                if not matches(kind):
                    continue
                for e in events:
                    body = {k: v for k, v in e.items() if k not in ("tick", "time", "type")}
                    found = _resolve(body, parts)
                    value = _number(found) if found is not _MISSING else None
                    if value is None:
                        continue
                    if _resolve_strict(body, parts):
                        seen = True
                    rv.ticks[e["tick"]] = value
            if rv.ticks:
                rv.final = rv.ticks[max(rv.ticks)]
            values[rid] = rv
        if not seen:
            self.notes.append(
                f"env {name}: no run's {module} module recorded a number at {path!r} "
                "in its run-level events; not compared"
            )
            return None
        item = _Item(
            key=f"env-{name}",
            label=f"env {name}",
            unit=f"{module}'s {path} at the tick's end",
            final="its value at the run's last tick",
        )
        return item, values

    # action counts (`agent_action` events)

    def _action(self, name: str) -> tuple[_Item, dict[str, RunValues]]:
        item = _Item(
            key=f"action-{name}",
            label=f"action {name!r}: count",
            unit="agent_action events per tick",
            final="the count over the run (the paired difference: per agent)",
        )
        values: dict[str, RunValues] = {}
        for rid, ev in self.events.items():
            rv = RunValues(ticks=dict.fromkeys(sorted(set(ev.ticks)), 0.0))
            per_agent = dict.fromkeys(self.runs[rid].agents, 0.0)
            for tick, agent, action in ev.actions:
                if _action_matches(action, name):
                    rv.ticks[tick] = rv.ticks.get(tick, 0.0) + 1
                    per_agent[agent] = per_agent.get(agent, 0.0) + 1
            rv.final = math.fsum(rv.ticks.values()) if rv.ticks else None
            rv.agents = per_agent
            values[rid] = rv
        if not any(v.final for v in values.values()):
            self.notes.append(f"action {name!r}: no agent_action event of any run matches it")
        return item, values


def _resolve_strict(body: Mapping[str, Any], parts: Sequence[str]) -> bool:
    """Whether the path is really there (not only a zero for a left-out count)."""
    obj: Any = body
    rest = list(parts)
    while rest:
        if not isinstance(obj, dict):
            return False
        for k in range(len(rest), 0, -1):
            key = ".".join(rest[:k])
            if key in obj:
                obj, rest = obj[key], rest[k:]
                break
        else:
            return False
    return True


def _action_matches(action: str, name: str) -> bool:
    """An action matches its whole text or one of its comma-separated parts (the scripted
    model writes "checked social feed, posted on social")."""
    return action == name or name in (part.strip() for part in action.split(","))


def _answers_values(rows: Sequence[Mapping[str, Any]], value_of: Any) -> RunValues:
    """A survey's values: per tick, the mean over the agents of each agent's answers; the
    final value is the last tick's."""
    rv = RunValues()
    by_tick: dict[int, list[tuple[str, float]]] = {}
    for r in rows:
        v = value_of(r["value"])
        if v is not None:
            by_tick.setdefault(r["tick"], []).append((r["agent_id"], v))
    for tick in sorted(by_tick):
        rv.ticks[tick] = _mean(_agent_means(by_tick[tick]).values())
    if by_tick:
        rv.agents = _agent_means(by_tick[max(by_tick)])
        rv.final = _mean(rv.agents.values())
    return rv


# -- the comparison ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ArmResult:
    """One arm's final values of one item, compared with the control."""

    arm: str
    runs: tuple[str, ...]  # the runs with a value, in replicate order
    values: tuple[float, ...]  # their final values
    estimate: Estimate  # the arm's mean over its replicates
    difference: Estimate | None  # arm - control (None for the control)
    paired_vs: str | None = None  # the arm a fork's agents are paired with
    paired_agents: Estimate | None = None  # per-agent differences: within, then across

    def to_dict(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "runs": list(self.runs),
            "values": list(self.values),
            "estimate": self.estimate.to_dict(),
            "difference": self.difference.to_dict() if self.difference else None,
            "paired_vs": self.paired_vs,
            "paired_agents": self.paired_agents.to_dict() if self.paired_agents else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TickResult:
    """Each arm's mean at one tick, and its difference to the control."""

    tick: int
    arms: Mapping[str, Estimate]
    differences: Mapping[str, Estimate]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tick": self.tick,
            "arms": {a: e.to_dict() for a, e in self.arms.items()},
            "differences": {a: e.to_dict() for a, e in self.differences.items()},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemResult:
    """One compared quantity: its final values per arm, and per tick."""

    measure: Mapping[str, Any]  # the study's measure it comes from
    key: str
    label: str
    unit: str
    final_is: str
    final: Mapping[str, ArmResult]  # by arm, in the study's order
    ticks: tuple[TickResult, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "measure": dict(self.measure),
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "final_is": self.final_is,
            "final": [r.to_dict() for r in self.final.values()],
            "ticks": [t.to_dict() for t in self.ticks],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """A study's arms compared on each of its measures (``compare_study``)."""

    study: str
    path: Path
    control: str
    arms: tuple[str, ...]
    from_tick: Mapping[str, int | None]
    runs: Mapping[str, tuple[str, ...]]  # the complete runs compared, by arm
    left_out: tuple[LeftOut, ...]
    items: tuple[ItemResult, ...]
    notes: tuple[str, ...]
    level: float = LEVEL

    def item(self, key: str) -> ItemResult:
        for it in self.items:
            if it.key == key:
                return it
        keys = ", ".join(it.key for it in self.items) or "none"
        raise KeyError(f"no item {key!r} in the comparison (items: {keys})")

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": 1,
            "study": self.study,
            "path": str(self.path),
            "control": self.control,
            "level": self.level,
            "arms": [
                {"name": a, "from_tick": self.from_tick.get(a), "runs": list(self.runs[a])}
                for a in self.arms
            ],
            "left_out": [lo.to_dict() for lo in self.left_out],
            "items": [it.to_dict() for it in self.items],
            "notes": list(self.notes),
        }


def _difference(
    arm: Sequence[StudyRun],
    control: Sequence[StudyRun],
    value: Mapping[str, float],
) -> Estimate:
    """arm - control: a paired t over the replicates that share a seed (and sample) with a
    control replicate, else Welch's t over the two arms' replicates."""
    a_keys = [r.pair_key for r in arm if r.id in value]
    c_by_key = {r.pair_key: r for r in control if r.id in value}
    unique = len(set(a_keys)) == len(a_keys) and len(c_by_key) == sum(
        1 for r in control if r.id in value
    )
    pairs = [
        value[r.id] - value[c_by_key[r.pair_key].id]
        for r in arm
        if r.id in value and r.pair_key in c_by_key
    ]
    if unique and pairs and all(k != (None, None) for k in a_keys):
        est = paired(pairs)
        unpaired = len(a_keys) + len(c_by_key) - 2 * len(pairs)
        if unpaired:
            note = f"{unpaired} replicate(s) without a partner left out"
            est = dataclasses.replace(est, note="; ".join(filter(None, [est.note, note])))
        return est
    return welch([value[r.id] for r in arm if r.id in value],
                 [value[r.id] for r in control if r.id in value])  # fmt: skip


def _paired_agents(
    arm: Sequence[StudyRun],
    by_id: Mapping[str, StudyRun],
    values: Mapping[str, RunValues],
) -> tuple[str | None, Estimate | None]:
    """A fork's per-agent differences to its parent run: the mean over the agents both runs
    have within a replicate, then a t interval across replicates."""
    parents = [by_id.get(str((r.fork_of or {}).get("run"))) for r in arm]
    if not arm or any(r.fork_of is None for r in arm):
        return None, None
    if not any(v.agents for v in values.values()):
        return None, None  # a run-level series: no agent to pair
    vs_arms = {p.arm for p in parents if p is not None}
    per_replicate = []
    for r, p in zip(arm, parents, strict=True):
        if p is None or r.id not in values or p.id not in values:
            continue
        a, b = values[r.id].agents, values[p.id].agents
        common = sorted(set(a) & set(b))
        if common:
            per_replicate.append(_mean(a[g] - b[g] for g in common))
    if not vs_arms or not per_replicate:
        return (sorted(vs_arms)[0] if vs_arms else None), None
    return ", ".join(sorted(vs_arms)), paired(per_replicate)


def compare_study(path: str | os.PathLike[str], *, level: float = LEVEL) -> Comparison:
    """Compare the arms of the study at ``path`` on each of its measures.

    Only runs whose manifest state is ``complete`` (and whose folder says so) are used;
    the others are in ``left_out`` with the reason."""
    manifest, runs = read_study(path)
    root = Path(path)
    arm_names = tuple(a["name"] for a in manifest["arms"])
    control = str(manifest["control"])
    left: list[LeftOut] = []
    opened: dict[str, Run] = {}
    for r in runs:
        if r.state != _COMPLETE:
            left.append(LeftOut(run=r.id, arm=r.arm, state=r.state, reason=f"state {r.state}"))
            continue
        try:
            run = open_run(r.dir)
            status = str(run.manifest().get("status"))
        except RunError as exc:
            left.append(LeftOut(run=r.id, arm=r.arm, state=r.state, reason=str(exc)))
            continue
        if status not in _RUN_DONE:
            reason = f"its run folder says {status}"
            left.append(LeftOut(run=r.id, arm=r.arm, state=r.state, reason=reason))
            continue
        opened[r.id] = run
    if not opened:
        named = ", ".join(f"{lo.run} ({lo.reason})" for lo in left) or "the manifest lists none"
        raise RunError(
            f"no run of study {root} is complete: {named}; go on with "
            f"`agentsim study --resume {root}`"
        )
    used = [r for r in runs if r.id in opened]
    by_arm = {a: [r for r in used if r.arm == a] for a in arm_names}
    by_id = {r.id: r for r in used}
    collector = _Collector(opened, manifest["measures"])
    items: list[ItemResult] = []
    for spec, item, values in collector.items():
        final_of = {rid: v.final for rid, v in values.items() if v.final is not None}
        final: dict[str, ArmResult] = {}
        for a in arm_names:
            rs = [r for r in by_arm[a] if r.id in final_of]
            diff = None if a == control else _difference(by_arm[a], by_arm[control], final_of)
            vs, pa = _paired_agents(by_arm[a], by_id, values) if a != control else (None, None)
            final[a] = ArmResult(
                arm=a,
                runs=tuple(r.id for r in rs),
                values=tuple(final_of[r.id] for r in rs),
                estimate=mean_ci([final_of[r.id] for r in rs], level=level),
                difference=diff,
                paired_vs=vs,
                paired_agents=pa,
            )
        ticks = sorted({t for v in values.values() for t in v.ticks})
        per_tick = []
        for t in ticks:
            at = {rid: v.ticks[t] for rid, v in values.items() if t in v.ticks}
            per_tick.append(
                TickResult(
                    tick=t,
                    arms={
                        a: mean_ci([at[r.id] for r in by_arm[a] if r.id in at], level=level)
                        for a in arm_names
                    },
                    differences={
                        a: _difference(by_arm[a], by_arm[control], at)
                        for a in arm_names
                        if a != control
                    },
                )
            )
        items.append(
            ItemResult(
                measure=spec,
                key=item.key,
                label=item.label,
                unit=item.unit,
                final_is=item.final,
                final=final,
                ticks=tuple(per_tick),
            )
        )
    return Comparison(
        study=str(manifest.get("name") or root.name),
        path=root,
        control=control,
        arms=arm_names,
        from_tick={a["name"]: _int_or_none(a.get("from_tick")) for a in manifest["arms"]},
        runs={a: tuple(r.id for r in by_arm[a]) for a in arm_names},
        left_out=tuple(left),
        items=tuple(items),
        notes=tuple(collector.notes),
        level=level,
    )


# -- agentsim study report ---------------------------------------------------------------------


def main(argv: list[str]) -> int:
    """``agentsim study report STUDY_DIR [--out DIR]``: writes ``summary.md``,
    ``comparison.json`` and a plot per measure into DIR (default ``STUDY_DIR/report``)."""
    parser = argparse.ArgumentParser(
        prog="agentsim study report",
        description="Compare a study's arms: each arm's mean with a 95%% confidence interval "
        "across replicates, the difference to the control, per-agent paired differences for "
        "forked arms, and plots over ticks (docs/comparisons.md).",
        epilog="Exit codes: 0 written; 1 no run of the study is complete; 2 bad input.",
    )
    parser.add_argument("study_dir", metavar="STUDY_DIR", help="the folder `agentsim study` wrote")
    parser.add_argument("--out", metavar="DIR", help="where to write (default STUDY_DIR/report)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    from agentsim.study.output import write_outputs

    try:
        cmp = compare_study(args.study_dir)
        out = Path(args.out) if args.out else Path(args.study_dir) / "report"
        written = write_outputs(cmp, out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except AgentsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    n_runs = sum(len(v) for v in cmp.runs.values())
    print(
        f"study {cmp.study}: {len(cmp.arms)} arms, {n_runs} complete runs, "
        f"{len(cmp.items)} measures compared"
    )
    for lo in cmp.left_out:
        print(f"  left out: {lo.run} (arm {lo.arm}): {lo.reason}")
    for note in cmp.notes:
        print(f"  note: {note}")
    print(f"wrote {written.summary}, {written.json} and {len(written.plots)} plots")
    return 0
