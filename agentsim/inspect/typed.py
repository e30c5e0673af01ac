"""Typed survey answers tabulated per group: what ``agentsim report`` writes under "Typed
answers", and ``typed_surveys(run)`` in Python.

Only ``ok`` rows are data. Rows of steps that degraded or failed and typed answers that did
not fit their form (``invalid``) are counted apart and never enter a mean, a share or a
distribution. ``sd`` is the sample standard deviation (n - 1), absent below two answers.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentsim.inspect.run import Run

__all__ = ["ALL", "GroupTable", "TypedSurvey", "markdown", "tabulate", "typed_surveys"]

ALL = "all"
"""The name of the row over every group."""


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupTable:
    """One group's typed answers (``group`` is ``all`` for every group together).

    ``counts``: answers per value, in the instrument's order (likert: every point of the
    scale; choice: every option); empty for ``number`` and ``json``. ``quantiles``
    (``number``): min, first quartile, median, third quartile, max."""

    group: str
    n: int
    invalid: int
    not_ok: int
    mean: float | None = None
    sd: float | None = None
    counts: Mapping[str, int] = field(default_factory=dict)
    quantiles: tuple[float, ...] = ()

    def share(self, key: str) -> float | None:
        """The share of ``key`` among the ``n`` answers (None without answers)."""
        return self.counts.get(key, 0) / self.n if self.n else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "n": self.n,
            "invalid": self.invalid,
            "not_ok": self.not_ok,
            "mean": self.mean,
            "sd": self.sd,
            "counts": dict(self.counts),
            "quantiles": list(self.quantiles),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedSurvey:
    """A typed survey or interview of a run: its step, form and rows as stored."""

    name: str
    kind: str  # survey or interview
    instrument: str
    spec: Any  # the form as written in ``answer:`` ({likert: [1, 5]} -> [1, 5])
    question: str
    rows: tuple[Mapping[str, Any], ...]

    @property
    def tick(self) -> int | None:
        return int(self.rows[0]["tick"]) if self.rows else None

    def tables(self) -> list[GroupTable]:
        """``all`` first, then each group (sorted)."""
        return tabulate(self.instrument, self.spec, self.rows)


def typed_surveys(run: Run) -> list[TypedSurvey]:
    """The run's typed surveys and interviews that have answers, in workflow order (none
    for a run folder without answers or without its ``config.yaml``)."""
    found: list[TypedSurvey] = []
    if not (run.path / "surveys").is_dir() or not (run.path / "config.yaml").is_file():
        return found
    steps = run.config_dict().get("workflow") or []
    for index, item in enumerate(steps):
        if not isinstance(item, Mapping):
            continue
        for kind in ("survey", "interview"):
            step = item.get(kind)
            if not isinstance(step, Mapping) or not isinstance(step.get("answer"), Mapping):
                continue
            ((instrument, spec),) = step["answer"].items()
            name = str(step.get("name") or f"{kind}-{index}")
            path = run.path / "surveys" / f"{name}.jsonl"
            if not path.is_file():
                continue
            rows = tuple(
                json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()
            )
            found.append(
                TypedSurvey(
                    name=name,
                    kind=kind,
                    instrument=str(instrument),
                    spec=spec,
                    question=str(step.get("question", "")),
                    rows=rows,
                )
            )
    return found


def tabulate(instrument: str, spec: Any, rows: Iterable[Mapping[str, Any]]) -> list[GroupTable]:
    """Per-group tables of typed answer rows (``all`` first, then the groups, sorted)."""
    by_group: dict[str, list[Mapping[str, Any]]] = {}
    every = list(rows)
    for r in every:
        by_group.setdefault(str(r.get("group") or "-"), []).append(r)
    parts = [(ALL, every), *sorted(by_group.items())]
    return [_table(instrument, spec, group, part) for group, part in parts]


def _table(instrument: str, spec: Any, group: str, rows: Sequence[Mapping[str, Any]]) -> GroupTable:
    ok = [r.get("value") for r in rows if r.get("status", "ok") == "ok"]
    invalid = sum(r.get("status") == "invalid" for r in rows)
    not_ok = sum(r.get("status", "ok") not in ("ok", "invalid") for r in rows)
    base: dict[str, Any] = {"group": group, "n": len(ok), "invalid": invalid, "not_ok": not_ok}
    if instrument in ("likert", "number"):
        nums = [float(v) for v in ok if isinstance(v, int | float) and not isinstance(v, bool)]
        mean = statistics.fmean(nums) if nums else None
        sd = statistics.stdev(nums) if len(nums) >= 2 else None
        if instrument == "likert":
            low, high = int(spec[0]), int(spec[1])
            seen = Counter(int(v) for v in nums)
            counts = {str(p): seen.get(p, 0) for p in range(low, high + 1)}
            return GroupTable(**base, mean=mean, sd=sd, counts=counts)
        quantiles: tuple[float, ...] = ()
        if nums:
            qs = statistics.quantiles(nums, n=4, method="inclusive") if len(nums) >= 2 else []
            quantiles = (min(nums), *qs, max(nums)) if qs else (nums[0],) * 5
        return GroupTable(**base, mean=mean, sd=sd, quantiles=quantiles)
    if instrument == "choice":
        chosen = Counter(str(v) for v in ok)
        return GroupTable(**base, counts={str(o): chosen.get(str(o), 0) for o in spec})
    return GroupTable(**base)


def markdown(survey: TypedSurvey) -> list[str]:
    """The lines of one typed survey's section in ``summary.md``."""
    tick = survey.tick
    out = [
        f"### {survey.kind} {survey.name} ({survey.instrument}, before tick {tick})",
        "",
        f"_{_cell(survey.question)}_",
        "",
    ]
    tables = survey.tables()
    note = "invalid: did not fit the form after a retry; not ok: the step degraded or failed"
    if survey.instrument == "choice":
        options = [str(o) for o in survey.spec]
        out += [
            f"| group | n | {' | '.join(_cell(o) for o in options)} | invalid | not ok |",
            "|---|---:|" + "---:|" * len(options) + "---:|---:|",
        ]
        for t in tables:
            cells = [_count(t.counts.get(o, 0), t.share(o)) for o in options]
            out.append(
                f"| {_cell(t.group)} | {t.n:,} | {' | '.join(cells)} | {t.invalid:,} "
                f"| {t.not_ok:,} |"
            )
    elif survey.instrument in ("likert", "number"):
        what = "distribution" if survey.instrument == "likert" else "min / q1 / median / q3 / max"
        out += [
            f"| group | n | mean | sd | {what} | invalid | not ok |",
            "|---|---:|---:|---:|---|---:|---:|",
        ]
        for t in tables:
            if survey.instrument == "likert":
                dist = ", ".join(f"{k}: {v:,}" for k, v in t.counts.items())
            else:
                dist = " / ".join(f"{q:.4g}" for q in t.quantiles) or "-"
            out.append(
                f"| {_cell(t.group)} | {t.n:,} | {_num(t.mean)} | {_num(t.sd)} | {dist} "
                f"| {t.invalid:,} | {t.not_ok:,} |"
            )
    else:
        out += ["| group | n | invalid | not ok |", "|---|---:|---:|---:|"]
        out += [f"| {_cell(t.group)} | {t.n:,} | {t.invalid:,} | {t.not_ok:,} |" for t in tables]
    return [*out, "", f"({note}; values in surveys/{survey.name}.jsonl and .parquet)", ""]


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def _count(n: int, share: float | None) -> str:
    return f"{n:,}" if share is None else f"{n:,} ({share:.0%})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
