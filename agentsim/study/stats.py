"""The statistics of a study's comparison: Student's t intervals on per-replicate values.

Replicates are the unit of inference: each number given here is one run's summary (the
arm's mean over its agents, a count, an environment series' value), never one agent's.
Three intervals, all two-sided at ``level`` (0.95 by default):

- ``mean_ci(values)``: an arm's mean, ``mean ± t(n-1) · s / √n``.
- ``welch(arm, control)``: the difference of two means whose replicates are not paired,
  ``(m_a - m_c) ± t(df) · √(s_a²/n_a + s_c²/n_c)`` with the Welch-Satterthwaite ``df``.
- ``paired(differences)``: the mean of per-replicate differences (replicates that share a
  seed, or per-agent differences averaged within a replicate), ``mean_ci`` of them.

With fewer than two values (two per side for ``welch``) no interval exists: ``low`` and
``high`` are ``None`` and ``note`` says why; nothing pretends to a zero-width interval.
Only the t quantile comes from scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["LEVEL", "Estimate", "mean_ci", "paired", "t_quantile", "welch"]

LEVEL = 0.95


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """A mean (or a difference of means) over ``n`` replicates with its t interval.

    ``sd`` is the sample standard deviation of the values (of the differences for a paired
    estimate; ``None`` for Welch, which has two), ``se`` the standard error and ``df`` the
    t distribution's degrees of freedom; all four are ``None`` when ``n`` is too small."""

    method: str  # "t", "welch" or "paired t"
    n: int  # replicates (pairs for a paired estimate; the smaller arm for Welch)
    mean: float | None
    sd: float | None = None
    se: float | None = None
    df: float | None = None
    low: float | None = None
    high: float | None = None
    level: float = LEVEL
    note: str = ""

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "n": self.n,
            "mean": self.mean,
            "sd": self.sd,
            "se": self.se,
            "df": self.df,
            "low": self.low,
            "high": self.high,
            "level": self.level,
            "note": self.note,
        }


def t_quantile(df: float, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom."""
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, df))


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else math.nan
    return mean, var


def mean_ci(values: Sequence[float], *, level: float = LEVEL, method: str = "t") -> Estimate:
    """The mean of ``values`` with its Student's t interval (``n - 1`` degrees of freedom)."""
    n = len(values)
    if n == 0:
        return Estimate(method=method, n=0, mean=None, level=level, note="no replicate has data")
    mean, var = _mean_var(values)
    if n == 1:
        return Estimate(
            method=method,
            n=1,
            mean=mean,
            level=level,
            note="one replicate: no interval can be computed",
        )
    sd = math.sqrt(var)
    se = sd / math.sqrt(n)
    half = t_quantile(n - 1, level) * se
    return Estimate(
        method=method,
        n=n,
        mean=mean,
        sd=sd,
        se=se,
        df=float(n - 1),
        low=mean - half,
        high=mean + half,
        level=level,
        note="no variation across replicates" if sd == 0 else "",
    )


def paired(differences: Sequence[float], *, level: float = LEVEL) -> Estimate:
    """The mean of paired differences (one per replicate) with its t interval."""
    return mean_ci(differences, level=level, method="paired t")


def welch(arm: Sequence[float], control: Sequence[float], *, level: float = LEVEL) -> Estimate:
    """``mean(arm) - mean(control)`` for unpaired replicates, with Welch's t interval."""
    na, nc = len(arm), len(control)
    if not na or not nc:
        side = "the arm" if not na else "the control"
        return Estimate(method="welch", n=0, mean=None, level=level, note=f"{side} has no data")
    ma, va = _mean_var(arm)
    mc, vc = _mean_var(control)
    diff = ma - mc
    if na < 2 or nc < 2:
        return Estimate(
            method="welch",
            n=min(na, nc),
            mean=diff,
            level=level,
            note="one replicate on a side: no interval can be computed",
        )
    qa, qc = va / na, vc / nc
    se = math.sqrt(qa + qc)
    if se == 0:
        return Estimate(
            method="welch",
            n=min(na, nc),
            mean=diff,
            se=0.0,
            low=diff,
            high=diff,
            level=level,
            note="no variation across replicates",
        )
    df = (qa + qc) ** 2 / (qa**2 / (na - 1) + qc**2 / (nc - 1))
    half = t_quantile(df, level) * se
    return Estimate(
        method="welch",
        n=min(na, nc),
        mean=diff,
        se=se,
        df=df,
        low=diff - half,
        high=diff + half,
        level=level,
    )
