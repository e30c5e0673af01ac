"""``agentsim report RUN``: ``report/summary.md`` and PNG plots from the event log.

One streamed pass over ``events.jsonl`` collects every series (``collect_report_data``,
pure; ``write_report`` collects them in the pass that counts the overview);
``agentsim.inspect._plots`` draws them, and ``write_report`` returns the series it plotted
so that a notebook or a test can check them against the events.

Per-tick series cover the ticks whose ``tick_end`` is in the log: a tick still running (or
cut by a crash) is left out rather than drawn half-counted.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentsim.errors import RunError
from agentsim.inspect import _plots
from agentsim.inspect.run import Run, open_run
from agentsim.inspect.summary import RunOverview, summarize
from agentsim.run.metrics import SKILL_COUNTS

__all__ = [
    "TICK_METRICS",
    "Marker",
    "Report",
    "ReportData",
    "Series",
    "SkillTrigger",
    "collect_report_data",
    "tick_metrics",
    "write_report",
]

TICK_METRICS = (
    "steps",
    "model_calls",
    "prompt_tokens",
    "completion_tokens",
    "cached_prompt_tokens",
    "degraded",
    "errors",
    "skipped",
)
"""The ``tick_end`` fields drawn per tick, by the report's plots and the viewer's Run page."""

_TOP_SKILLS = 10
_DETAIL_CHARS = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class Series:
    """Values per tick: ``columns[name][i]`` belongs to ``ticks[i]`` (at ``times[i]``)."""

    ticks: tuple[int, ...]
    times: tuple[str, ...]
    columns: Mapping[str, tuple[float, ...]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ticks": list(self.ticks),
            "times": list(self.times),
            "columns": {k: list(v) for k, v in self.columns.items()},
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Marker:
    """An intervention, a survey or interview of the workflow, or a hot reload of the skills.
    It happened before tick ``tick`` ran (after tick ``tick - 1`` ended), at simulated time
    ``time``."""

    tick: int
    time: str
    kind: str  # intervention, survey, interview, reload or fork
    label: str  # short, for the plots: "city.close_place", "survey midday (10 answers)"
    detail: str  # for summary.md: the arguments or the message

    def to_dict(self) -> dict[str, Any]:
        return {
            "tick": self.tick,
            "time": self.time,
            "kind": self.kind,
            "label": self.label,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SkillTrigger:
    """How often one skill fired for one agent group, over the run (from ``tick_end``'s
    ``skills``): agent-steps whose catalog listed it (``visible``), agent-steps that
    activated it (``activated``), script calls that ran (``scripts``), hook outputs with
    text shown to the model (``hooks_shown``), the calls those suggested (``suggested``) and
    the suggested calls the steps made (``followed``). ``model`` is the group's model
    (``default`` for ``model:``; empty when the run's configuration cannot be read)."""

    skill: str
    group: str
    model: str = ""
    visible: int = 0
    activated: int = 0
    scripts: int = 0
    hooks_shown: int = 0
    suggested: int = 0
    followed: int = 0

    @property
    def activation_rate(self) -> float | None:
        """Activated agent-steps per visible agent-step (None when never visible)."""
        return self.activated / self.visible if self.visible else None

    def never_fires(self, defaults: Collection[str] = ()) -> bool:
        """Listed in the catalog, but never activated nor its script called, and not one of
        ``defaults`` (the skills active from the start, which need no activation)."""
        return (
            self.visible > 0 and not (self.activated or self.scripts) and self.skill not in defaults
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "group": self.group,
            "model": self.model,
            **{k: getattr(self, k) for k in SKILL_COUNTS},
            "activation_rate": self.activation_rate,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportData:
    """Everything the plots show. Module series are ``None`` when the run has no such module.

    - ``activity``: steps, actions (agent_action events), skipped, errors, degraded
    - ``skills``: activations per skill id chosen by the agents during the run;
      ``default_activations``: the default skills activated at agent setup (tick 0), per id
    - ``tokens``: prompt_tokens, cached_prompt_tokens, completion_tokens, model_calls
    - ``markers``: the interventions, surveys and hot reloads, in log order
    - ``city``: agents per place id, plus ``in_transit``
    - ``opinions``: agents per opinion bin (``[-1.0,-0.8)`` ...), ``opinion_stats``: mean,
      std of all agents, ``opinion_groups``: n, mean, std per agent group,
      ``opinion_group_bins``: agents per opinion bin per agent group (none for a log
      written before ``social_opinions`` carried them)
    - ``measures``: per measure the skills recorded (``ctx.record``), per agent group, the
      mean value (``mean``) and how many agents recorded it (``n``) at each tick
    - ``triggers``: per skill and agent group, how often it was visible, activated and used
      (``SkillTrigger``), by skill id then group; ``activated_by``: per skill id, the agents
      that activated it during the run (default activations at setup left out)
    """

    activity: Series
    skills: Series
    default_activations: Mapping[str, int]
    tokens: Series
    markers: tuple[Marker, ...] = ()
    city: Series | None = None
    opinions: Series | None = None
    opinion_stats: Series | None = None
    opinion_groups: Mapping[str, Series] | None = None
    opinion_group_bins: Mapping[str, Series] | None = None
    measures: Mapping[str, Mapping[str, Series]] = field(default_factory=dict)
    triggers: tuple[SkillTrigger, ...] = ()
    activated_by: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Report:
    dir: Path
    summary: Path
    images: Mapping[str, Path]
    data: ReportData
    overview: RunOverview = field(repr=False)


@dataclass(slots=True)
class _Acc:
    times: dict[int, str] = field(default_factory=dict)
    tick_end: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    actions: Counter[int] = field(default_factory=Counter)
    skills: defaultdict[str, Counter[int]] = field(default_factory=lambda: defaultdict(Counter))
    defaults: Counter[str] = field(default_factory=Counter)
    # Interventions as they come; a survey as its (tick, kind, name), counted in ``answers``.
    markers: list[Marker | tuple[int, str, str]] = field(default_factory=list)
    # (time, answers of the model, rows left out: a step that degraded or failed).
    answers: dict[tuple[int, str, str], tuple[str, int, int]] = field(default_factory=dict)
    city: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    social: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    # measure name -> group -> tick -> [sum, count]
    measures: dict[str, dict[str, dict[int, list[float]]]] = field(default_factory=dict)
    # (skill id, group) -> the ``SKILL_COUNTS`` summed over the ticks
    triggers: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    # skill id -> the agents that activated it (as indexes into ``agent_index``)
    activators: dict[str, set[int]] = field(default_factory=dict)
    agent_index: dict[str, int] = field(default_factory=dict)

    def add(self, ev: Mapping[str, Any]) -> None:
        """Count one event (of any type, in log order)."""
        kind, tick = ev.get("type"), ev.get("tick")
        if not isinstance(tick, int):
            return
        if kind == "tick_end":
            self.tick_end[tick] = ev
            self.times[tick] = str(ev.get("time", ""))
            self._add_triggers(ev.get("skills"))
        elif kind == "agent_action":
            self.actions[tick] += 1
        elif kind == "skill_activated":
            if ev.get("default") is True:
                self.defaults[str(ev.get("skill"))] += 1
            else:
                self.skills[str(ev.get("skill"))][tick] += 1
                index = self.agent_index.setdefault(str(ev.get("agent_id")), len(self.agent_index))
                self.activators.setdefault(str(ev.get("skill")), set()).add(index)
        elif kind == "city_occupancy":
            self.city[tick] = ev
        elif kind == "social_opinions":
            self.social[tick] = ev
        elif kind == "intervention":
            self.markers.append(_intervention(ev, tick))
        elif kind == "skills_reloaded":
            self.markers.append(_reload(ev, tick))
        elif kind == "measure":
            value = ev.get("value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                by_group = self.measures.setdefault(str(ev.get("name")), {})
                acc = by_group.setdefault(str(ev.get("group") or "all agents"), {})
                slot = acc.setdefault(tick, [0.0, 0])
                slot[0] += value
                slot[1] += 1
        elif kind in ("survey_answer", "interview_answer"):
            key = (tick, str(kind).removesuffix("_answer"), str(ev.get("name", "")))
            if key not in self.answers:
                self.markers.append(key)
            time, n, out = self.answers.get(key, (str(ev.get("time", "")), 0, 0))
            ok = ev.get("status", "ok") == "ok"  # runs before the status: every row ok
            self.answers[key] = (time, n + ok, out + (not ok))

    def _add_triggers(self, skills: Any) -> None:
        """Sum one ``tick_end``'s ``skills`` (group -> skill id -> counts)."""
        if not isinstance(skills, Mapping):
            return  # a log written before tick_end carried them
        for group, per in skills.items():
            for sid, counts in (per if isinstance(per, Mapping) else {}).items():
                slot = self.triggers.setdefault((str(sid), str(group)), [0] * len(SKILL_COUNTS))
                for i, key in enumerate(SKILL_COUNTS):
                    slot[i] += int(_num(counts.get(key, 0)))


def _bin_labels(n: int) -> list[str]:
    edges = [round(-1 + 2 * i / n, 2) for i in range(n + 1)]
    return [f"[{edges[i]:+.1f},{edges[i + 1]:+.1f})" for i in range(n)]


def _num(v: Any) -> float:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else 0


def tick_metrics(
    tick_end: Mapping[int, Mapping[str, Any]], ticks: Iterable[int]
) -> dict[str, tuple[float, ...]]:
    """The series of the ``TICK_METRICS`` at ``ticks``, from each tick's ``tick_end`` event
    (or its fields); a tick without one, or a field that is not a number, counts 0."""
    ends = [tick_end.get(t, {}) for t in ticks]
    return {k: tuple(_num(e.get(k)) for e in ends) for k in TICK_METRICS}


def _cut(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."


def _intervention(ev: Mapping[str, Any], tick: int) -> Marker:
    time = str(ev.get("time", ""))
    if ev.get("env") is not None:
        args = ev.get("args") or {}
        return Marker(
            tick=tick,
            time=time,
            kind="intervention",
            label=f"{ev.get('env')}.{ev.get('action')}",
            detail=_cut(json.dumps(args, sort_keys=True, ensure_ascii=False)) if args else "",
        )
    n = ev.get("recipients")
    return Marker(
        tick=tick,
        time=time,
        kind="intervention",
        label=f"message to {n} agents" if isinstance(n, int) else "message",
        detail=_cut(repr(str(ev.get("message", "")))),
    )


def _reload(ev: Mapping[str, Any], tick: int) -> Marker:
    parts = [
        f"{what} {', '.join(map(str, ev.get(what) or ()))}"
        for what in ("added", "changed", "removed")
        if ev.get(what)
    ]
    return Marker(
        tick=tick,
        time=str(ev.get("time", "")),
        kind="reload",
        label=_cut("skills reloaded: " + ("; ".join(parts) or "no change")),
        detail=f"registry generation {ev.get('generation')}",
    )


def _fork_marker(manifest: Mapping[str, Any], times: Mapping[int, str]) -> Marker | None:
    """Where a fork left its parent (``manifest.parent``): the ticks before it are the
    parent's, the ticks from it on the fork's own."""
    parent = manifest.get("parent")
    if not isinstance(parent, Mapping) or not isinstance(parent.get("tick"), int):
        return None
    tick = parent["tick"]
    return Marker(
        tick=tick,
        time=times.get(tick, ""),
        kind="fork",
        label=f"forked from {parent.get('run_id') or parent.get('run')}",
        detail=f"ticks before {tick} are the parent's ({parent.get('run')})",
    )


def _survey(key: tuple[int, str, str], time: str, answers: int, left_out: int = 0) -> Marker:
    """A survey's marker: the answers of the model counted; the rows of steps that degraded
    or failed (status not ``ok``) left out, and said so."""
    tick, kind, name = key
    count = f"{answers} answer{'' if answers == 1 else 's'}"
    out = f", {left_out} left out: not ok" if left_out else ""
    return Marker(
        tick=tick,
        time=time,
        kind=kind,
        label=f"{kind} {name} ({count}{out})",
        detail=f"{count} in surveys/{name}.jsonl"
        + (
            f"; {left_out} row{'' if left_out == 1 else 's'} left out (status degraded or "
            "error: not the model's answer)"
            if left_out
            else ""
        ),
    )


def collect_report_data(events: Iterable[Mapping[str, Any]]) -> ReportData:
    """All report series from events, in one pass."""
    acc = _Acc()
    for ev in events:
        acc.add(ev)
    return _report_data(acc)


def _report_data(acc: _Acc) -> ReportData:
    """The series of the events counted in ``acc``."""
    ticks = tuple(sorted(acc.tick_end))

    def series(columns: Mapping[str, Sequence[float]], at: Sequence[int] = ticks) -> Series:
        return Series(
            ticks=tuple(at),
            times=tuple(acc.times[t] for t in at),
            columns={k: tuple(v) for k, v in columns.items()},
        )

    metrics = tick_metrics(acc.tick_end, ticks)
    activity = series(
        {
            "steps": metrics["steps"],
            "actions": [acc.actions[t] for t in ticks],
            **{k: metrics[k] for k in ("skipped", "errors", "degraded")},
        }
    )
    skills = series({s: [c[t] for t in ticks] for s, c in sorted(acc.skills.items())})
    tokens = series(
        {
            k: metrics[k]
            for k in ("prompt_tokens", "cached_prompt_tokens", "completion_tokens", "model_calls")
        }
    )
    city = None
    if acc.city:
        places = sorted({p for ev in acc.city.values() for p in (ev.get("occupancy") or {})})
        occ = {t: acc.city.get(t, {}) for t in ticks}
        cols = {p: [_num((occ[t].get("occupancy") or {}).get(p, 0)) for t in ticks] for p in places}
        cols["in_transit"] = [_num(occ[t].get("in_transit", 0)) for t in ticks]
        city = series(cols)
    opinions = stats = groups = group_bins = None
    if acc.social:
        n = max(len(ev.get("histogram") or ()) for ev in acc.social.values())
        hists = {t: list(acc.social.get(t, {}).get("histogram") or [0] * n) for t in ticks}
        opinions = series(
            {label: [hists[t][i] for t in ticks] for i, label in enumerate(_bin_labels(n))}
        )
        stats = series(
            {k: [_num(acc.social.get(t, {}).get(k)) for t in ticks] for k in ("mean", "std")}
        )
        groups = _opinion_groups(acc.social, ticks, acc.times)
        group_bins = _opinion_group_bins(acc.social, ticks, acc.times)
    return ReportData(
        activity=activity,
        skills=skills,
        default_activations=dict(sorted(acc.defaults.items())),
        tokens=tokens,
        markers=tuple(
            m if isinstance(m, Marker) else _survey(m, *acc.answers[m]) for m in acc.markers
        ),
        city=city,
        opinions=opinions,
        opinion_stats=stats,
        opinion_groups=groups,
        opinion_group_bins=group_bins or None,
        measures={
            name: {
                group: Series(
                    ticks=tuple(at := [t for t in ticks if t in per_tick]),
                    times=tuple(acc.times[t] for t in at),
                    columns={
                        "mean": tuple(per_tick[t][0] / per_tick[t][1] for t in at),
                        "n": tuple(per_tick[t][1] for t in at),
                    },
                )
                for group, per_tick in sorted(groups.items())
            }
            for name, groups in sorted(acc.measures.items())
        },
        triggers=tuple(
            SkillTrigger(
                skill=sid,
                group=group,
                visible=c[0],
                activated=c[1],
                scripts=c[2],
                hooks_shown=c[3],
                suggested=c[4],
                followed=c[5],
            )
            for (sid, group), c in sorted(acc.triggers.items())
        ),
        activated_by={sid: len(agents) for sid, agents in sorted(acc.activators.items())},
    )


def _opinion_groups(
    social: Mapping[int, Mapping[str, Any]], ticks: Sequence[int], times: Mapping[int, str]
) -> dict[str, Series]:
    """n, mean and std per agent group, at the ticks whose ``social_opinions`` names the
    group (none for a log written before the event carried groups)."""
    per_tick = {t: social[t].get("groups") or {} for t in ticks if t in social}
    out: dict[str, Series] = {}
    for name in sorted({g for groups in per_tick.values() for g in groups}):
        at = [t for t, groups in per_tick.items() if isinstance(groups.get(name), dict)]
        rows = [per_tick[t][name] for t in at]
        out[name] = Series(
            ticks=tuple(at),
            times=tuple(times[t] for t in at),
            columns={k: tuple(_num(r.get(k)) for r in rows) for k in ("n", "mean", "std")},
        )
    return out


def _opinion_group_bins(
    social: Mapping[int, Mapping[str, Any]], ticks: Sequence[int], times: Mapping[int, str]
) -> dict[str, Series]:
    """Agents per opinion bin per agent group, at the ticks whose ``social_opinions``
    carries ``group_histograms``."""
    per_tick = {t: social[t].get("group_histograms") or {} for t in ticks if t in social}
    out: dict[str, Series] = {}
    for name in sorted({g for hists in per_tick.values() for g in hists}):
        at = [t for t, hists in per_tick.items() if isinstance(hists.get(name), list)]
        if not at:
            continue
        n = max(len(per_tick[t][name]) for t in at)
        cols = {
            label: tuple(_num((per_tick[t][name] + [0] * n)[i]) for t in at)
            for i, label in enumerate(_bin_labels(n))
        }
        out[name] = Series(ticks=tuple(at), times=tuple(times[t] for t in at), columns=cols)
    return out


def _top_skills(s: Series) -> list[str]:
    totals = sorted(s.columns, key=lambda k: (-sum(s.columns[k]), k))
    return totals[:_TOP_SKILLS]


# -- summary.md ---------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _cell(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _behaviour_md(ov: RunOverview) -> list[str]:
    """What the agents did, first (``agentsim.run.behaviour``): per model and group, how
    their steps ended, how many acted, how varied their actions were, their tool calls and
    answers; then the notes a reader must see before the results."""
    if not ov.behaviour:
        return []
    out = ["## Behaviour", ""]
    out += [
        f"- {_cell(line.strip())}" for line in ov.behaviour if not line.strip().startswith("note:")
    ]
    notes = [
        line.strip()[len("note: ") :] for line in ov.behaviour if line.strip().startswith("note:")
    ]
    if notes:
        out += ["", *(f"**Note:** {_cell(n)}" + "  " for n in notes)]
    return [*out, ""]


def _pct(part: int, whole: int) -> str:
    return f" ({part / whole:.0%})" if whole else ""


def _triggers_md(data: ReportData) -> list[str]:
    """Per skill and group: visible, activated, used; the skills that never fire."""
    out = ["", "## Skill trigger rates", ""]
    if not data.triggers:
        return [*out, "Not recorded (no agent step saw a catalog, or an older log)."]
    defaults = set(data.default_activations)
    out += [
        "Per skill and agent group, over the run: **visible**, agent-steps whose catalog "
        "listed the skill; **activated**, agent-steps that activated it (share of visible); "
        "**agents**, agents of any group that activated it; **scripts**, its script calls; "
        "**hooks shown**, its hook outputs with text shown to the model; **followed**, the "
        "calls those outputs suggested (`SUGGESTED:` lines) that the step made. A skill "
        "**never fires** for a group whose catalog listed it when no step activated it or "
        "called its script (default skills, active from the start, excepted): its "
        "description may not say when to use it.",
        "",
        "| skill | group | model | visible | activated | agents | scripts | hooks shown "
        "| followed | |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    never: dict[str, list[str]] = {}
    for t in data.triggers:
        flag = ""
        if t.never_fires(defaults):
            flag = "never fires"
            never.setdefault(t.skill, []).append(t.group)
        elif t.skill in defaults:
            flag = "default"
        followed = f"{t.followed:,} of {t.suggested:,}" if t.suggested else "-"
        out.append(
            f"| {_cell(t.skill)} | {_cell(t.group)} | {_cell(t.model or '-')} | {t.visible:,} "
            f"| {t.activated:,}{_pct(t.activated, t.visible)} "
            f"| {data.activated_by.get(t.skill, 0):,} | {t.scripts:,} | {t.hooks_shown:,} "
            f"| {followed} | {flag} |"
        )
    if never:
        listed = "; ".join(f"{sid} ({', '.join(groups)})" for sid, groups in never.items())
        out += ["", f"**Never fires:** {_cell(listed)}."]
    return out


def _summary_md(ov: RunOverview, images: Mapping[str, Path], data: ReportData) -> str:
    out = [f"# Run {ov.run_id} ({ov.name})", ""]
    out += _behaviour_md(ov)
    rows = [
        ("state", f"{ov.state.get('state')} (manifest: {ov.state.get('status')})"),
        ("ticks", f"{ov.ticks_done} of {_fmt(ov.ticks_total)} (last: {_fmt(ov.last_time)})"),
        ("agents", _fmt(ov.agents)),
        ("agent steps", f"{ov.agent_steps:,} ({_fmt(ov.agent_steps_per_s)} /s wall clock)"),
        ("model calls", _fmt(ov.model_calls)),
        (
            "tokens",
            f"{ov.tokens:,} ({ov.prompt_tokens:,} prompt, {ov.cached_prompt_tokens:,} of them "
            f"cached; {ov.completion_tokens:,} completion)",
        ),
        ("cost", _fmt(ov.cost) if ov.cost is not None else "- (no prices configured)"),
        *(
            (
                f"model {name}",
                f"{m['calls']:,} calls, {m['prompt_tokens'] + m['completion_tokens']:,} tokens, "
                f"{m['errors']:,} errors, cost {_fmt(m['cost'])}",
            )
            for name, m in ov.models.items()
        ),
        ("script calls", _fmt(ov.script_calls)),
        ("skipped steps", _fmt(ov.skipped)),
        (
            "steps by outcome",
            ", ".join(f"{k} {n:,}" for k, n in ov.outcomes.items() if n) or "-",
        ),
        ("steps that acted", _fmt(ov.acted)),
        (
            "tool calls",
            ", ".join(f"{k} {n:,}" for k, n in ov.tool_calls.items() if n) or "-",
        ),
    ]
    out += ["| | |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
    out += ["## Errors", ""]
    if ov.errors:
        out += [
            "| kind | count |",
            "|---|---|",
            *(f"| {k} | {n:,} |" for k, n in ov.errors.items()),
        ]
    else:
        out.append("None.")
    out += ["", "## Interventions, surveys and hot reloads", ""]
    if data.markers:
        out += [
            "Each happened between two ticks, before the tick given; the plots mark them "
            "(hot reloads in a dotted line of their own colour).",
            "",
            "| before tick | time | kind | what | details |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| {m.tick} | {m.time} | {m.kind} | {_cell(m.label)} | {_cell(m.detail or '-')} |"
            for m in data.markers
        ]
    else:
        out.append("None.")
    if data.measures:
        out += [
            "",
            "## Measures",
            "",
            "Recorded by the skills (`ctx.record`); the measures plot draws each group's mean.",
            "",
            "| measure | group | records | ticks | mean at the last tick |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| {_cell(name)} | {_cell(group)} | {int(sum(g.columns['n'])):,} | {len(g.ticks)} "
            f"| {g.columns['mean'][-1]:.4g} |"
            for name, groups in data.measures.items()
            for group, g in groups.items()
            if g.ticks
        ]
    out += ["", "## Skills", ""]
    if ov.skills:
        out += [
            "Activations include the default skills activated when the agents were set up "
            "(the `default` column); the skills plot draws only the others.",
            "",
            "| skill | activations | default | script calls | failed |",
            "|---|---|---|---|---|",
        ]
        out += [
            f"| {sid} | {u.activations:,} | {u.default_activations:,} | {u.script_calls:,} "
            f"| {u.script_failures:,} |"
            for sid, u in ov.skills.items()
        ]
    else:
        out.append("No skill was activated or called.")
    out += _triggers_md(data)
    out += ["", "## Hot reloads", ""]
    if ov.hot_reloads:
        out += [
            f"- tick {r.get('tick')}: generation {r.get('generation')}; added "
            f"{', '.join(r.get('added') or []) or '-'}; changed "
            f"{', '.join(r.get('changed') or []) or '-'}; removed "
            f"{', '.join(r.get('removed') or []) or '-'}"
            for r in ov.hot_reloads
        ]
    else:
        out.append("None.")
    out += ["", "## Plots", ""]
    for name, p in images.items():
        out += [f"![{name}]({p.name})", ""]
    if len(data.skills.columns) > _TOP_SKILLS:
        out.append(f"(skill plot: the {_TOP_SKILLS} most activated of {len(data.skills.columns)})")
    return "\n".join(out).rstrip() + "\n"


def _group_models(run: Run) -> dict[str, str]:
    """Group -> the name of its model (``default`` for ``model:``), from ``config.yaml``;
    {} when it cannot be read."""
    try:
        groups = run.config_dict().get("agents")
    except RunError:
        return {}
    return {
        str(g["group"]): str(g.get("model") or "default")
        for g in (groups if isinstance(groups, list) else [])
        if isinstance(g, Mapping) and "group" in g
    }


def write_report(run: Run | str | Path, *, out_dir: Path | None = None) -> Report:
    """Write ``summary.md`` and the PNG plots (default folder: ``RUN/report``)."""
    r = run if isinstance(run, Run) else open_run(run)
    acc = _Acc()
    overview = summarize(r, each_event=acc.add)  # one read of the log for both
    data = _report_data(acc)
    if data.triggers:
        models = _group_models(r)
        data = replace(
            data,
            triggers=tuple(replace(t, model=models.get(t.group, "")) for t in data.triggers),
        )
    fork = _fork_marker(r.manifest(), acc.times)
    if fork is not None:
        data = replace(data, markers=tuple(sorted((*data.markers, fork), key=lambda m: m.tick)))
    folder = out_dir if out_dir is not None else r.path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    marks = data.markers
    images: dict[str, Path] = {
        "activity": _plots.activity_plot(data.activity, marks, folder / "activity.png"),
        "skills": _plots.skills_plot(
            data.skills,
            _top_skills(data.skills),
            data.default_activations,
            marks,
            folder / "skills.png",
        ),
        "tokens": _plots.tokens_plot(data.tokens, marks, folder / "tokens.png"),
    }
    if data.city is not None:
        images["city"] = _plots.city_plot(data.city, marks, folder / "city_occupancy.png")
    if data.measures:
        images["measures"] = _plots.measures_plot(data.measures, marks, folder / "measures.png")
    if data.opinions is not None and data.opinion_stats is not None:
        images["social"] = _plots.opinion_plot(
            data.opinions,
            data.opinion_stats,
            data.opinion_groups or {},
            data.opinion_group_bins or {},
            marks,
            folder / "social_opinions.png",
        )
    summary = folder / "summary.md"
    summary.write_text(_summary_md(overview, images, data), encoding="utf-8")
    return Report(dir=folder, summary=summary, images=images, data=data, overview=overview)
