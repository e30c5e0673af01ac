"""The PNG plots of ``agentsim report``, drawn from the series of ``collect_report_data``.

matplotlib's object API on the Agg canvas: no pyplot state, no display. Every figure has
the same furniture, so fixed margins are used instead of a layout engine (which would
double the drawing time): the data on the left, legends and notes in a column on the
right, outside the data. The PNG is cut to what was drawn (``bbox_inches="tight"``), so a
long legend widens the image instead of being cut off at its edge. Interventions, surveys
and hot reloads happen between two ticks (after tick ``t - 1`` ended, before tick ``t``
ran), so their vertical lines sit at ``t - 0.5``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from agentsim.inspect.report import Marker, Series

__all__ = [
    "activity_plot",
    "city_plot",
    "measures_plot",
    "opinion_plot",
    "skills_plot",
    "tokens_plot",
]

_WIDTH = 11.0  # inches
_LEFT, _RIGHT = 0.09, 0.72  # the data; the legend column starts at _RIGHT + 0.015
_ROW, _TOP_IN, _BOTTOM_IN = 2.6, 0.5, 0.8  # inches per row, above the rows, below them
_LINE_IN = 0.17  # inches per line of a legend at 8 points
_MARK_COLOR = "tab:red"  # the vertical lines of interventions and surveys
_RELOAD_COLOR = "tab:purple"  # and of hot reloads, dotted
_FORK_COLOR = "tab:green"  # and of the tick a fork left its parent, dash-dotted
_GROUP_ROWS = 4  # groups drawn as heat maps of their own; summary.md has every group
_MEASURE_ROWS = 6  # measures drawn, one row each
_MARKS_LISTED = 6  # legend entries for them; summary.md lists every one


@dataclass(frozen=True, slots=True)
class _Frame:
    """A figure with ``rows`` stacked axes sharing the tick axis."""

    fig: Any
    axes: list[Any]


def _frame(title: str, rows: int = 1, *, legend_lines: int = 0) -> _Frame:
    """``rows`` axes, each tall enough for a legend (and note) of ``legend_lines`` lines."""
    from matplotlib.figure import Figure

    row = max(_ROW, legend_lines * _LINE_IN + 0.2)
    height = row * rows + _TOP_IN + _BOTTOM_IN
    fig = Figure(figsize=(_WIDTH, height))
    fig.subplots_adjust(
        left=_LEFT,
        right=_RIGHT,
        top=1 - _TOP_IN / height,
        bottom=_BOTTOM_IN / height,
        hspace=0.15,
    )
    fig.suptitle(title)
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0].tolist()
    return _Frame(fig=fig, axes=axes)


def _x_range(s: Series, markers: Sequence[Marker]) -> tuple[float, float]:
    xs = [float(t) for t in s.ticks] + [m.tick - 0.5 for m in markers]
    return (min(xs) - 0.5, max(xs) + 0.5) if xs else (-0.5, 0.5)


def _time_axis(ax: Any, s: Series, markers: Sequence[Marker]) -> None:
    """Label the tick axis with the simulated time at up to ten ticks."""
    ax.set_xlim(*_x_range(s, markers))
    ax.set_xlabel("simulated time (start of the tick)")
    if not s.ticks:
        return
    step = -(-len(s.ticks) // 10)
    idx = list(range(0, len(s.ticks), step))
    labels = []
    for i in idx:
        try:
            labels.append(datetime.fromisoformat(s.times[i]).strftime("%a %H:%M"))
        except ValueError:
            labels.append(f"tick {s.ticks[i]}")
    ax.set_xticks([s.ticks[i] for i in idx], labels, rotation=30, ha="right", fontsize=8)


def _mark(axes: Sequence[Any], markers: Sequence[Marker]) -> list[Any]:
    """A dashed vertical line at each intervention or survey on every axis, numbered above
    the first axis; returns legend handles that say what each number was, so that no label
    covers the data."""
    from matplotlib.lines import Line2D
    from matplotlib.transforms import blended_transform_factory

    by_tick: dict[int, list[Marker]] = {}
    for m in markers:
        by_tick.setdefault(m.tick, []).append(m)
    handles = []
    top = axes[0]
    above = blended_transform_factory(top.transData, top.transAxes)
    for number, (tick, ms) in enumerate(sorted(by_tick.items()), start=1):
        # A tick with only hot reloads is dotted purple; one with any workflow step, red.
        kinds = {m.kind for m in ms}
        color = (
            _FORK_COLOR
            if "fork" in kinds
            else _RELOAD_COLOR
            if kinds == {"reload"}
            else _MARK_COLOR
        )
        style: Literal[":", "--", "-."] = (
            "-." if "fork" in kinds else ":" if kinds == {"reload"} else "--"
        )
        for ax in axes:
            ax.axvline(tick - 0.5, color=color, linestyle=style, linewidth=1.2, zorder=3)
        top.text(
            tick - 0.5,
            1.01,
            str(number),
            transform=above,
            ha="center",
            va="bottom",
            fontsize=8,
            fontweight="bold",
            color=color,
        )
        if number <= _MARKS_LISTED:
            label = f"{number}: before tick {tick}: " + "\n    ".join(m.label for m in ms)
            handles.append(Line2D([], [], color=color, linestyle=style, label=label))
    if len(by_tick) > _MARKS_LISTED:
        more = f"... {len(by_tick) - _MARKS_LISTED} more (listed in summary.md)"
        handles.append(Line2D([], [], color="none", label=more))
    return handles


def _mark_lines(markers: Sequence[Marker]) -> int:
    """How many legend lines ``_mark`` needs."""
    ticks = sorted({m.tick for m in markers})
    listed = sum(1 for m in markers if m.tick in ticks[:_MARKS_LISTED])
    return listed + (len(ticks) > _MARKS_LISTED)


def _legend(ax: Any, extra: Sequence[Any] = (), *, own: bool = True) -> None:
    """The legend in the column right of the data: the axis' own labelled artists (unless
    ``own`` is false) then ``extra``."""
    handles = [*(ax.get_legend_handles_labels()[0] if own else ()), *extra]
    if handles:
        ax.legend(
            handles=handles,
            loc="upper left",
            bbox_to_anchor=(1.015, 1.0),
            borderaxespad=0,
            fontsize=8,
        )


def _counts(ax: Any) -> None:
    """A y axis of counts: whole numbers only, with thousands separators."""
    from matplotlib.ticker import MaxNLocator, StrMethodFormatter

    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))


def _no_data(ax: Any, text: str = "no data") -> None:
    """An empty axis that says so (no made-up scale)."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _save(frame: _Frame, path: Path) -> Path:
    frame.fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.2)
    return path


def _marker(n: int) -> str | None:
    return "." if n < 40 else None


def _lines(
    s: Series,
    names: Sequence[str],
    *,
    title: str,
    ylabel: str,
    markers: Sequence[Marker],
    path: Path,
    labels: Mapping[str, str] | None = None,
    note: str = "",
    wide_first: bool = False,
    empty: str = "no data",
) -> Path:
    lines = len(names) + _mark_lines(markers) + (note.count("\n") + 2 if note else 0)
    frame = _frame(title, legend_lines=lines)
    (ax,) = frame.axes
    for i, name in enumerate(names if s.ticks else ()):
        label = f"{(labels or {}).get(name, name)} (Σ {sum(s.columns[name]):,.0f})"
        # Drawn wide and pale, the first line stays visible under another equal to it.
        wide = {"linewidth": 5, "alpha": 0.35} if wide_first and i == 0 else {}
        ax.plot(s.ticks, s.columns[name], label=label, marker=_marker(len(s.ticks)), **wide)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    _counts(ax)
    if not s.ticks:
        _no_data(ax)
    elif not names:
        _no_data(ax, empty)
    _time_axis(ax, s, markers)
    _legend(ax, _mark(frame.axes, markers))
    if note:
        # At the foot of the legend column, level with the bottom of the data.
        ax_bottom = ax.get_position().y0
        frame.fig.text(_RIGHT + 0.015, ax_bottom, note, fontsize=8, va="bottom", color="0.25")
    return _save(frame, path)


_ACTIVITY = {
    "steps": "agent steps",
    "actions": "actions logged",
    "skipped": "skipped by a hook",
    "errors": "steps with an error",
    "degraded": "degraded: model failed",
}


def activity_plot(s: Series, markers: Sequence[Marker], path: Path) -> Path:
    return _lines(
        s,
        list(_ACTIVITY),
        title="agent activity per tick",
        ylabel="count per tick",
        markers=markers,
        path=path,
        labels=_ACTIVITY,
        wide_first=True,
    )


def skills_plot(
    s: Series,
    names: Sequence[str],
    defaults: Mapping[str, int],
    markers: Sequence[Marker],
    path: Path,
) -> Path:
    note = ""
    if defaults:
        rows = [f"  {sid}: {n:,}" for sid, n in sorted(defaults.items(), key=lambda kv: -kv[1])]
        shown = rows[:8] + ([f"  ... {len(rows) - 8} more"] if len(rows) > 8 else [])
        note = "not drawn: default skills\nactivated at agent setup\n" + "\n".join(shown)
    if len(s.columns) > len(names):
        note += f"\n\nthe {len(names)} most activated\nof {len(s.columns)} skills are drawn"
    return _lines(
        s,
        names,
        title="skill activations per tick, chosen by the agents",
        ylabel="activations per tick",
        markers=markers,
        path=path,
        note=note.strip("\n"),
        empty="no skill was activated by an agent during the run",
    )


def tokens_plot(s: Series, markers: Sequence[Marker], path: Path) -> Path:
    """Prompt and completion tokens differ by orders of magnitude: one row each; the prompt
    tokens the server's cache served share the prompt row."""
    rows = (
        ("prompt_tokens", "prompt tokens per tick"),
        ("completion_tokens", "completion tokens\nper tick"),
        ("model_calls", "model calls per tick"),
    )
    frame = _frame("model use per tick", rows=len(rows))
    for ax, (name, ylabel) in zip(frame.axes, rows, strict=True):
        ax.plot(s.ticks, s.columns[name], marker=_marker(len(s.ticks)), color="tab:blue")
        if name == "prompt_tokens" and any(s.columns["cached_prompt_tokens"]):
            ax.plot(s.ticks, s.columns["cached_prompt_tokens"], color="tab:green", label="cached")
        ax.set_ylabel(ylabel, fontsize=9)
        ax.set_ylim(bottom=0)
        _counts(ax)
        if not s.ticks:
            _no_data(ax)
    handles = _mark(frame.axes, markers)
    _time_axis(frame.axes[-1], s, markers)
    _legend(frame.axes[0], handles)
    return _save(frame, path)


def _place_kind(place: str) -> str:
    head, sep, tail = place.rpartition("-")
    return head if sep and tail.isdigit() else place


def city_plot(s: Series, markers: Sequence[Marker], path: Path) -> Path:
    kinds: dict[str, list[float]] = {}
    for place, values in s.columns.items():
        if place == "in_transit":
            continue
        acc = kinds.setdefault(_place_kind(place), [0.0] * len(s.ticks))
        for i, v in enumerate(values):
            acc[i] += v
    names = sorted(kinds)
    lines = len(names) + 1 + _mark_lines(markers)
    frame = _frame("city: where the agents are (by kind of place)", legend_lines=lines)
    (ax,) = frame.axes
    stacks = [kinds[k] for k in names] + [list(s.columns["in_transit"])]
    ax.stackplot(s.ticks, *stacks, labels=[*names, "in transit"])
    ax.set_ylabel("agents (stacked)")
    _counts(ax)
    _time_axis(ax, s, markers)
    stacked, _ = ax.get_legend_handles_labels()
    # Top of the stack first, as the areas are seen.
    _legend(ax, [*stacked[::-1], *_mark(frame.axes, markers)], own=False)
    return _save(frame, path)


def measures_plot(
    measures: Mapping[str, Mapping[str, Series]], markers: Sequence[Marker], path: Path
) -> Path:
    """The measures the skills recorded (``ctx.record``): a row per measure, a line per
    agent group, the group's mean at each tick it was recorded."""
    names = list(measures)[:_MEASURE_ROWS]
    groups = sorted({g for name in names for g in measures[name]})
    lines = len(groups) + _mark_lines(markers)
    frame = _frame("measures recorded by the skills (mean per group)", rows=len(names),
                   legend_lines=lines)  # fmt: skip
    colors = {g: f"C{i % 10}" for i, g in enumerate(groups)}
    ticks: list[int] = []
    times: list[str] = []
    for ax, name in zip(frame.axes, names, strict=True):
        for group, g in measures[name].items():
            ax.plot(g.ticks, g.columns["mean"], marker=_marker(len(g.ticks)),
                    color=colors[group], label=group)  # fmt: skip
            for t, time in zip(g.ticks, g.times, strict=True):
                if t not in ticks:
                    ticks.append(t)
                    times.append(time)
        ax.set_ylabel(name, fontsize=9)
    from matplotlib.lines import Line2D

    from agentsim.inspect.report import Series  # the module that imports this one

    order = sorted(range(len(ticks)), key=ticks.__getitem__)
    span = Series(
        ticks=tuple(ticks[i] for i in order), times=tuple(times[i] for i in order), columns={}
    )
    handles = [Line2D([], [], color=colors[g], label=f"group {g}") for g in groups]
    handles += _mark(frame.axes, markers)
    _time_axis(frame.axes[-1], span, markers)
    for ax in frame.axes[:-1]:
        ax.set_xlim(*_x_range(span, markers))
    _legend(frame.axes[0], handles, own=False)
    if len(measures) > len(names):
        frame.fig.text(_RIGHT + 0.015, frame.axes[-1].get_position().y0,
                       f"{len(measures) - len(names)} more measures\nin the events", fontsize=8,
                       va="bottom", color="0.25")  # fmt: skip
    return _save(frame, path)


def _heat_map(ax: Any, hist: Series, markers: Sequence[Marker]) -> Any:
    """Each tick's share of the agents per opinion bin, -1 at the bottom to +1 at the top."""
    matrix = [list(col) for col in hist.columns.values()]
    totals = [sum(col) or 1 for col in zip(*matrix, strict=True)] if matrix else []
    shares = [[v / t for v, t in zip(row, totals, strict=True)] for row in matrix]
    lo, hi = _x_range(hist, markers)
    im = ax.imshow(
        shares or [[0.0]],
        aspect="auto",
        origin="lower",
        extent=(lo, hi, -1, 1),
        cmap="viridis",
        vmin=0,
        vmax=1,
    )
    ax.set_xlim(lo, hi)
    return im


def opinion_plot(
    hist: Series,
    stats: Series,
    groups: Mapping[str, Series],
    group_bins: Mapping[str, Series],
    markers: Sequence[Marker],
    path: Path,
) -> Path:
    """Each tick's opinion distribution as a heat map (a column per tick, the share of the
    agents in each bin): all agents, then each group of its own, so a group that splits in
    two shows two bands. A log written before ``social_opinions`` carried the groups' bins
    gets each group's mean ± std instead."""
    drawn = list(group_bins)[:_GROUP_ROWS]
    rows = 1 + (len(drawn) if drawn else 1)
    lines = (0 if drawn else 2 * max(1, len(groups))) + _mark_lines(markers)
    frame = _frame("social: opinions over time", rows=rows, legend_lines=lines)
    top, *below = frame.axes
    im = _heat_map(top, hist, markers)
    top.set_ylabel("opinion:\nall agents", fontsize=9)
    if drawn:
        for ax, name in zip(below, drawn, strict=True):
            _heat_map(ax, group_bins[name], markers)
            ax.set_ylabel(f"opinion:\n{name}", fontsize=9)
        if len(group_bins) > len(drawn):
            note = f"{len(group_bins) - len(drawn)} more groups\nnot drawn"
            frame.fig.text(
                _RIGHT + 0.015,
                below[-1].get_position().y0,
                note,
                fontsize=8,
                va="bottom",
                color="0.25",
            )
    else:
        (bottom,) = below
        series = groups or {"all agents": stats}
        for name, g in series.items():
            mean, std = g.columns["mean"], g.columns["std"]
            (line,) = bottom.plot(
                g.ticks, mean, label=f"{name}: mean", marker=_marker(len(g.ticks))
            )
            bottom.fill_between(
                g.ticks,
                [m - d for m, d in zip(mean, std, strict=True)],
                [m + d for m, d in zip(mean, std, strict=True)],
                alpha=0.2,
                color=line.get_color(),
                label=f"{name}: ± std",
            )
        bottom.set_ylim(-1, 1)
        bottom.axhline(0, color="0.6", linewidth=0.8)
        bottom.set_ylabel("opinion by group\n(mean ± std)", fontsize=9)
    # One colour scale for every heat map, beside the first; the legend below it.
    box = top.get_position()
    cax = frame.fig.add_axes((_RIGHT + 0.015, box.y0, 0.015, box.height))
    frame.fig.colorbar(im, cax=cax, label="share of the\nagents in the bin")
    handles = _mark(frame.axes, markers)
    _time_axis(frame.axes[-1], hist, markers)
    _legend(frame.axes[-1], handles, own=not drawn)
    return _save(frame, path)
