"""``agentsim report RUN``: ``report/summary.md`` and PNG plots from the event log.

One streamed pass over ``events.jsonl`` collects every series (``collect_report_data``,
pure); the plots are drawn from those series with matplotlib's object API on the Agg
canvas (no pyplot state, no display), and ``write_report`` returns the series it plotted so
that a notebook or a test can check them against the events.

Per-tick series cover the ticks whose ``tick_end`` is in the log: a tick still running (or
cut by a crash) is left out rather than drawn half-counted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from agentsim.inspect.run import Run, open_run
from agentsim.inspect.summary import RunOverview, summarize

__all__ = ["Report", "ReportData", "Series", "collect_report_data", "write_report"]

_TOP_SKILLS = 10
_ACTIVITY = ("steps", "actions", "skipped", "errors", "degraded")


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
class ReportData:
    """Everything the plots show. Module series are ``None`` when the run has no such module.

    - ``activity``: steps, actions (agent_action events), skipped, errors, degraded
    - ``skills``: activations per skill id
    - ``tokens``: prompt_tokens, completion_tokens, model_calls
    - ``city``: agents per place id, plus ``in_transit``
    - ``opinions``: agents per opinion bin (``[-1.0,-0.8)`` ...), ``opinion_stats``: mean, std
    """

    activity: Series
    skills: Series
    tokens: Series
    city: Series | None = None
    opinions: Series | None = None
    opinion_stats: Series | None = None


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
    city: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    social: dict[int, Mapping[str, Any]] = field(default_factory=dict)


def _bin_labels(n: int) -> list[str]:
    edges = [round(-1 + 2 * i / n, 2) for i in range(n + 1)]
    return [f"[{edges[i]:+.1f},{edges[i + 1]:+.1f})" for i in range(n)]


def _num(v: Any) -> float:
    return v if isinstance(v, int | float) and not isinstance(v, bool) else 0


def collect_report_data(events: Iterable[Mapping[str, Any]]) -> ReportData:
    """All report series from events, in one pass."""
    acc = _Acc()
    for ev in events:
        kind, tick = ev.get("type"), ev.get("tick")
        if not isinstance(tick, int):
            continue
        if kind == "tick_end":
            acc.tick_end[tick] = ev
            acc.times[tick] = str(ev.get("time", ""))
        elif kind == "agent_action":
            acc.actions[tick] += 1
        elif kind == "skill_activated":
            acc.skills[str(ev.get("skill"))][tick] += 1
        elif kind == "city_occupancy":
            acc.city[tick] = ev
        elif kind == "social_opinions":
            acc.social[tick] = ev
    ticks = tuple(sorted(acc.tick_end))
    times = tuple(acc.times[t] for t in ticks)

    def series(columns: Mapping[str, Sequence[float]]) -> Series:
        return Series(ticks=ticks, times=times, columns={k: tuple(v) for k, v in columns.items()})

    te = acc.tick_end
    activity = series(
        {
            "steps": [_num(te[t].get("steps")) for t in ticks],
            "actions": [acc.actions[t] for t in ticks],
            "skipped": [_num(te[t].get("skipped")) for t in ticks],
            "errors": [_num(te[t].get("errors")) for t in ticks],
            "degraded": [_num(te[t].get("degraded")) for t in ticks],
        }
    )
    skills = series({s: [c[t] for t in ticks] for s, c in sorted(acc.skills.items())})
    tokens = series(
        {k: [_num(te[t].get(k)) for t in ticks] for k in ("prompt_tokens", "completion_tokens")}
        | {"model_calls": [_num(te[t].get("model_calls")) for t in ticks]}
    )
    city = None
    if acc.city:
        places = sorted({p for ev in acc.city.values() for p in (ev.get("occupancy") or {})})
        occ = {t: acc.city.get(t, {}) for t in ticks}
        cols = {p: [_num((occ[t].get("occupancy") or {}).get(p, 0)) for t in ticks] for p in places}
        cols["in_transit"] = [_num(occ[t].get("in_transit", 0)) for t in ticks]
        city = series(cols)
    opinions = stats = None
    if acc.social:
        n = max(len(ev.get("histogram") or ()) for ev in acc.social.values())
        hists = {t: list(acc.social.get(t, {}).get("histogram") or [0] * n) for t in ticks}
        opinions = series(
            {label: [hists[t][i] for t in ticks] for i, label in enumerate(_bin_labels(n))}
        )
        stats = series(
            {k: [_num(acc.social.get(t, {}).get(k)) for t in ticks] for k in ("mean", "std")}
        )
    return ReportData(
        activity=activity,
        skills=skills,
        tokens=tokens,
        city=city,
        opinions=opinions,
        opinion_stats=stats,
    )


# -- plots --------------------------------------------------------------------------------


def _figure(title: str, rows: int = 1) -> Any:
    from matplotlib.figure import Figure

    # Fixed margins instead of a layout engine: the layout pass would double the drawing
    # time, and these figures all have the same furniture.
    height = 3.2 * rows + 0.6
    fig = Figure(figsize=(9, height))
    fig.subplots_adjust(left=0.08, right=0.97, top=1 - 0.45 / height, bottom=0.75 / height)
    fig.suptitle(title)
    return fig


def _time_axis(ax: Any, s: Series) -> None:
    """Label a tick axis with simulated clock times at up to eight positions."""
    if not s.ticks:
        return
    step = max(1, len(s.ticks) // 8)
    idx = list(range(0, len(s.ticks), step))
    labels = []
    for i in idx:
        try:
            labels.append(datetime.fromisoformat(s.times[i]).strftime("%a %H:%M"))
        except ValueError:
            labels.append(str(s.ticks[i]))
    ax.set_xticks([s.ticks[i] for i in idx], labels, rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("simulated time")


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=100)
    return path


def _lines(s: Series, names: Sequence[str], title: str, ylabel: str, path: Path) -> Path:
    fig = _figure(title)
    ax = fig.add_subplot()
    for name in names:
        ax.plot(s.ticks, s.columns[name], label=name, marker="." if len(s.ticks) < 40 else None)
    if names:
        ax.legend(fontsize=8, loc="upper left", ncols=2)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel(ylabel)
    _time_axis(ax, s)
    return _save(fig, path)


def _place_kind(place: str) -> str:
    head, sep, tail = place.rpartition("-")
    return head if sep and tail.isdigit() else place


def _city_plot(s: Series, path: Path) -> Path:
    kinds: dict[str, list[float]] = {}
    for place, values in s.columns.items():
        if place == "in_transit":
            continue
        acc = kinds.setdefault(_place_kind(place), [0.0] * len(s.ticks))
        for i, v in enumerate(values):
            acc[i] += v
    names = sorted(kinds)
    fig = _figure("city: agents by kind of place over the day")
    ax = fig.add_subplot()
    stacks = [kinds[k] for k in names] + [list(s.columns["in_transit"])]
    ax.stackplot(s.ticks, *stacks, labels=[*names, "in transit"])
    ax.legend(fontsize=8, loc="upper left", ncols=3)
    ax.set_ylabel("agents")
    _time_axis(ax, s)
    return _save(fig, path)


def _opinion_plot(hist: Series, stats: Series, path: Path) -> Path:
    fig = _figure("social: opinion distribution over time", rows=2)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"hspace": 0.12})
    labels = list(hist.columns)
    matrix = [list(hist.columns[label]) for label in labels]
    lo, hi = (hist.ticks[0], hist.ticks[-1]) if hist.ticks else (0, 1)
    im = top.imshow(
        matrix, aspect="auto", origin="lower", extent=(lo - 0.5, hi + 0.5, -1, 1), cmap="viridis"
    )
    fig.colorbar(im, ax=top, label="agents")
    top.set_ylabel("opinion")
    mean, std = stats.columns["mean"], stats.columns["std"]
    bottom.plot(stats.ticks, mean, label="mean")
    bottom.fill_between(
        stats.ticks,
        [m - d for m, d in zip(mean, std, strict=True)],
        [m + d for m, d in zip(mean, std, strict=True)],
        alpha=0.3,
        label="mean ± std",
    )
    bottom.set_ylim(-1, 1)
    bottom.set_ylabel("opinion")
    bottom.legend(fontsize=8, loc="upper left")
    _time_axis(bottom, stats)
    return _save(fig, path)


def _top_skills(s: Series) -> list[str]:
    totals = sorted(s.columns, key=lambda k: (-sum(s.columns[k]), k))
    return totals[:_TOP_SKILLS]


# -- summary.md ---------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _summary_md(ov: RunOverview, images: Mapping[str, Path], data: ReportData) -> str:
    out = [f"# Run {ov.run_id} ({ov.name})", ""]
    rows = [
        ("state", f"{ov.state.get('state')} (manifest: {ov.state.get('status')})"),
        ("ticks", f"{ov.ticks_done} of {_fmt(ov.ticks_total)} (last: {_fmt(ov.last_time)})"),
        ("agents", _fmt(ov.agents)),
        ("agent steps", f"{ov.agent_steps:,} ({_fmt(ov.agent_steps_per_s)} /s wall clock)"),
        ("model calls", _fmt(ov.model_calls)),
        (
            "tokens",
            f"{ov.tokens:,} ({ov.prompt_tokens:,} prompt, {ov.completion_tokens:,} completion)",
        ),
        ("cost", _fmt(ov.cost) if ov.cost is not None else "- (no prices configured)"),
        ("script calls", _fmt(ov.script_calls)),
        ("skipped steps", _fmt(ov.skipped)),
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
    out += ["", "## Skills", ""]
    if ov.skills:
        out += ["| skill | activations | script calls | failed |", "|---|---|---|---|"]
        out += [
            f"| {sid} | {u.activations:,} | {u.script_calls:,} | {u.script_failures:,} |"
            for sid, u in ov.skills.items()
        ]
    else:
        out.append("No skill was activated or called.")
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


def write_report(run: Run | str | Path, *, out_dir: Path | None = None) -> Report:
    """Write ``summary.md`` and the PNG plots (default folder: ``RUN/report``)."""
    r = run if isinstance(run, Run) else open_run(run)
    overview = summarize(r)
    data = collect_report_data(r.iter_events())
    folder = out_dir if out_dir is not None else r.path / "report"
    folder.mkdir(parents=True, exist_ok=True)
    images: dict[str, Path] = {
        "activity": _lines(
            data.activity, _ACTIVITY, "agent activity per tick", "agents", folder / "activity.png"
        ),
        "skills": _lines(
            data.skills,
            _top_skills(data.skills),
            "skill activations per tick",
            "activations",
            folder / "skills.png",
        ),
        "tokens": _lines(
            data.tokens,
            ("prompt_tokens", "completion_tokens"),
            "model tokens per tick",
            "tokens",
            folder / "tokens.png",
        ),
    }
    if data.city is not None:
        images["city"] = _city_plot(data.city, folder / "city_occupancy.png")
    if data.opinions is not None and data.opinion_stats is not None:
        images["social"] = _opinion_plot(
            data.opinions, data.opinion_stats, folder / "social_opinions.png"
        )
    summary = folder / "summary.md"
    summary.write_text(_summary_md(overview, images, data), encoding="utf-8")
    return Report(dir=folder, summary=summary, images=images, data=data, overview=overview)
