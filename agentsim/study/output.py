"""What ``agentsim study report`` writes: ``summary.md``, ``comparison.json`` and a PNG per
compared measure (each arm's mean over ticks with its confidence band).

The plots follow the house style of ``agentsim report`` (matplotlib's object API on the Agg
canvas, the data on the left, the legend in a column on the right); where an arm has one
replicate at a tick there is no band, only its line.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentsim._atomic import atomic_write_text

if TYPE_CHECKING:
    from agentsim.study.compare import ArmResult, Comparison, ItemResult
    from agentsim.study.stats import Estimate

__all__ = ["Written", "format_estimate", "plot_item", "summary_markdown", "write_outputs"]

_WIDTH = 11.0  # inches, as agentsim report's plots
_LEFT, _RIGHT = 0.09, 0.72
_HEIGHT = 3.6
_NONE = "—"


@dataclass(frozen=True, slots=True)
class Written:
    summary: Path
    json: Path
    plots: dict[str, Path]  # item key -> PNG


def _num(x: float) -> str:
    if abs(x) >= 1000:
        return f"{x:,.1f}"
    return f"{x:.3f}"


def format_estimate(e: Estimate | None, *, signed: bool = False) -> str:
    """``mean [low, high]``, or the mean and why there is no interval."""
    if e is None or e.mean is None:
        return _NONE if e is None else f"no data ({e.note})" if e.note else "no data"
    mean = f"{e.mean:+.3f}" if signed and abs(e.mean) < 1000 else _num(e.mean)
    if e.low is None or e.high is None:
        return f"{mean} (no interval: {e.n} replicate{'s' if e.n != 1 else ''})"
    same = " (no variation across replicates)" if e.low == e.high else ""
    return f"{mean} [{_num(e.low)}, {_num(e.high)}]{same}"


def _method(e: Estimate) -> str:
    if e.method == "paired t":
        return f"paired t, {e.n} pair{'s' if e.n != 1 else ''}"
    if e.method == "welch":
        return "Welch t"
    return e.method


def _diff_cell(r: ArmResult) -> str:
    if r.difference is None:
        return _NONE
    cell = format_estimate(r.difference, signed=True)
    return f"{cell} ({_method(r.difference)})" if r.difference.mean is not None else cell


def _paired_cell(r: ArmResult) -> str:
    if r.paired_agents is None:
        return _NONE if r.paired_vs is None else f"no agents in common with {r.paired_vs}"
    e = r.paired_agents
    reps = f"{e.n} replicate{'s' if e.n != 1 else ''}"
    return f"{format_estimate(e, signed=True)} (vs {r.paired_vs}, {reps})"


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", key).strip("-") or "measure"


def _plot_names(cmp: Comparison) -> dict[str, str]:
    """A unique file name per item."""
    names: dict[str, str] = {}
    used: set[str] = set()
    for it in cmp.items:
        base = _slug(it.key)
        name, i = base, 2
        while name in used:
            name, i = f"{base}-{i}", i + 1
        used.add(name)
        names[it.key] = f"{name}.png"
    return names


def _level(cmp: Comparison) -> str:
    return f"{cmp.level * 100:g}%"


def summary_markdown(cmp: Comparison, plots: dict[str, str] | None = None) -> str:
    """The summary a researcher can paste: a table per measure and a note on the method."""
    lv = _level(cmp)
    lines = [f"# Study {cmp.study}: comparison of the arms", ""]
    arms = []
    for a in cmp.arms:
        n = len(cmp.runs[a])
        what = " (control)" if a == cmp.control else ""
        if cmp.from_tick.get(a) is not None:
            what += f" (forked at tick {cmp.from_tick[a]})"
        arms.append(f"`{a}`{what}: {n} complete run{'s' if n != 1 else ''}")
    lines += ["Arms: " + "; ".join(arms) + ".", ""]
    if cmp.left_out:
        lines.append("Runs left out (not complete):")
        lines += [f"- `{lo.run}` (arm `{lo.arm}`): {lo.reason}" for lo in cmp.left_out]
        lines.append("")
    if not cmp.items:
        lines += ["No measure could be compared (see the notes below).", ""]
    for it in cmp.items:
        lines += _item_table(cmp, it, lv)
        if plots and it.key in plots:
            lines += [f"![{it.label}](plots/{plots[it.key]})", ""]
    if cmp.notes:
        lines.append("Notes:")
        lines += [f"- {n}" for n in cmp.notes]
        lines.append("")
    lines += [
        "## Method",
        "",
        "Each run is reduced to one value per measure (its summary over the agents); the "
        "replicates of an arm are the sample, since the agents of one run share their "
        "environment and are not independent. "
        f"An arm's mean has a {lv} Student's t interval (n - 1 degrees of freedom). "
        "The difference to the control is a paired t interval over replicates that share "
        "their seed (the replicate's arm value minus its control value), or Welch's t "
        "interval when the replicates are not paired. For an arm forked from another run, "
        "the paired difference per agent is the mean over the agents of each agent's value "
        "minus its value in the parent run, within a replicate, then a t interval across "
        "replicates. With one replicate no interval can be computed and none is shown. "
        "See docs/comparisons.md.",
        "",
    ]
    return "\n".join(lines)


def _item_table(cmp: Comparison, it: ItemResult, lv: str) -> list[str]:
    forks = any(r.paired_vs is not None for r in it.final.values())
    head = ["arm", "n replicates", f"mean [{lv} CI]", f"difference to control [{lv} CI]"]
    if forks:
        head.append(f"paired difference per agent [{lv} CI]")
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in it.final.values():
        cells = [f"`{r.arm}`", str(len(r.values)), format_estimate(r.estimate), _diff_cell(r)]
        if forks:
            cells.append(_paired_cell(r))
        rows.append("| " + " | ".join(cells) + " |")
    return [
        f"## {it.label}",
        "",
        f"Final value: {it.final_is}; unit: {it.unit}.",
        "",
        *rows,
        "",
    ]


def plot_item(cmp: Comparison, it: ItemResult, path: Path) -> Path:
    """Each arm's mean over ticks with its confidence band (where it has one)."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(_WIDTH, _HEIGHT))
    fig.subplots_adjust(left=_LEFT, right=_RIGHT, top=0.86, bottom=0.17)
    fig.suptitle(f"{it.label}: mean over replicates per arm ({_level(cmp)} CI band)")
    ax = fig.add_subplot(1, 1, 1)
    for i, a in enumerate(cmp.arms):
        pts = [(t.tick, t.arms[a]) for t in it.ticks if t.arms[a].mean is not None]
        if not pts:
            continue
        xs = [t for t, _ in pts]
        ys = [_finite(e.mean) for _, e in pts]
        n = max(e.n for _, e in pts)
        style: dict[str, Any] = {"linewidth": 4, "alpha": 0.4} if a == cmp.control else {}
        (line,) = ax.plot(
            xs,
            ys,
            color=f"C{i % 10}",
            marker="." if len(xs) < 40 else None,
            label=f"{a} ({'control, ' if a == cmp.control else ''}n={n})",
            **style,
        )
        band = [(t, e) for t, e in pts if e.low is not None and e.high is not None]
        if len(band) == 1:  # a band over one tick has no width: its interval as a bar
            (t, e), y = band[0], _finite(band[0][1].mean)
            ax.errorbar(
                [t],
                [y],
                yerr=[[y - _finite(e.low)], [_finite(e.high) - y]],
                color=line.get_color(),
                capsize=6,
                alpha=0.6,
            )
        elif band:
            ax.fill_between(
                [t for t, _ in band],
                [_finite(e.low) for _, e in band],
                [_finite(e.high) for _, e in band],
                color=line.get_color(),
                alpha=0.18,
                linewidth=0,
            )
        start = cmp.from_tick.get(a)
        if start is not None:
            ax.axvline(start - 0.5, color=line.get_color(), linestyle="-.", linewidth=1)
    if not it.ticks:
        ax.text(0.5, 0.5, "no data per tick", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("tick")
    ax.set_ylabel(it.unit, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    handles = ax.get_legend_handles_labels()[0]
    if any(cmp.from_tick.get(a) is not None for a in cmp.arms):
        from matplotlib.lines import Line2D

        handles.append(
            Line2D([], [], color="0.3", linestyle="-.", label="a forked arm starts (its colour)")
        )
    if handles:
        ax.legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.015, 1.0), borderaxespad=0,
            fontsize=8,
        )  # fmt: skip
    fig.savefig(path, dpi=100, bbox_inches="tight", pad_inches=0.2)
    return path


def _finite(x: float | None) -> float:
    return x if x is not None and math.isfinite(x) else math.nan


def write_outputs(cmp: Comparison, out: Path) -> Written:
    """``summary.md``, ``comparison.json`` and ``plots/*.png`` in ``out`` (created)."""
    plots_dir = out / "plots"
    plots_dir.mkdir(parents=True, exist_ok=True)
    names = _plot_names(cmp)
    plots = {it.key: plot_item(cmp, it, plots_dir / names[it.key]) for it in cmp.items}
    data: dict[str, Any] = cmp.to_dict()
    data["plots"] = {k: f"plots/{v}" for k, v in names.items()}
    js = out / "comparison.json"
    atomic_write_text(js, json.dumps(data, indent=2, allow_nan=False) + "\n")
    summary = out / "summary.md"
    atomic_write_text(summary, summary_markdown(cmp, names))
    return Written(summary=summary, json=js, plots=plots)
