"""The intervals on a hand-computed case: the formulas written out here, with Student's t
quantiles from a printed table (two-sided 95%: t(2) = 4.302653, t(4) = 2.776445)."""

from __future__ import annotations

import math

import pytest

from agentsim.study.stats import mean_ci, paired, t_quantile, welch

T2 = 4.302652729911275  # t(0.975, 2 degrees of freedom)
T4 = 2.7764451051977987  # t(0.975, 4)


def test_mean_ci_of_three_replicates() -> None:
    e = mean_ci([2.0, 4.0, 6.0])
    # mean 4, s = sqrt(((2-4)^2 + 0 + (6-4)^2) / 2) = 2, se = 2 / sqrt(3)
    half = T2 * 2 / math.sqrt(3)
    assert (e.method, e.n, e.mean, e.sd, e.df) == ("t", 3, 4.0, 2.0, 2.0)
    assert e.se == pytest.approx(2 / math.sqrt(3))
    assert (e.low, e.high) == (pytest.approx(4 - half), pytest.approx(4 + half))
    assert e.low == pytest.approx(-0.9682750)  # 4 - 4.302653 * 1.154701


def test_one_replicate_has_no_interval_and_none_has_no_mean() -> None:
    one = mean_ci([3.5])
    assert (one.n, one.mean, one.low, one.high, one.sd) == (1, 3.5, None, None, None)
    assert one.note == "one replicate: no interval can be computed" and not one.has_interval
    none = mean_ci([])
    assert (none.n, none.mean, none.note) == (0, None, "no replicate has data")


def test_paired_differences() -> None:
    # arm [3, 7, 8] and control [2, 4, 6] with the same seeds: differences 1, 3, 2
    e = paired([3 - 2, 7 - 4, 8 - 6])
    half = T2 * 1.0 / math.sqrt(3)  # s of (1, 3, 2) is 1
    assert (e.method, e.n, e.mean, e.sd) == ("paired t", 3, 2.0, 1.0)
    assert (e.low, e.high) == (pytest.approx(2 - half), pytest.approx(2 + half))


def test_welch_with_equal_variances_has_2n_minus_2_degrees_of_freedom() -> None:
    e = welch([5.0, 7.0, 9.0], [2.0, 4.0, 6.0])
    se = math.sqrt(4 / 3 + 4 / 3)
    assert (e.method, e.mean, e.df) == ("welch", 3.0, pytest.approx(4.0))
    assert e.se == pytest.approx(se)
    assert (e.low, e.high) == (pytest.approx(3 - T4 * se), pytest.approx(3 + T4 * se))


def test_welch_satterthwaite_degrees_of_freedom_with_unequal_variances() -> None:
    # arm [3, 7, 8]: mean 6, var 7; control [2, 4, 6]: mean 4, var 4
    # nu = (7/3 + 4/3)^2 / ((7/3)^2 / 2 + (4/3)^2 / 2) = 242 / 65
    e = welch([3.0, 7.0, 8.0], [2.0, 4.0, 6.0])
    assert e.mean == 2.0 and e.df == pytest.approx(242 / 65)
    half = t_quantile(242 / 65) * math.sqrt(11 / 3)
    assert (e.low, e.high) == (pytest.approx(2 - half), pytest.approx(2 + half))
    # the quantile lies between the table's t(3) = 3.182446 and t(4) = 2.776445
    assert T4 < t_quantile(242 / 65) < 3.182446


def test_welch_edges() -> None:
    one = welch([1.0], [2.0, 3.0])
    assert (one.mean, one.low, one.high) == (-1.5, None, None)
    assert one.note == "one replicate on a side: no interval can be computed"
    assert welch([], [1.0, 2.0]).note == "the arm has no data"
    assert welch([1.0, 2.0], []).note == "the control has no data"
    flat = welch([2.0, 2.0], [1.0, 1.0])
    assert (flat.mean, flat.low, flat.high, flat.note) == (
        1.0, 1.0, 1.0, "no variation across replicates"
    )  # fmt: skip
    assert mean_ci([1.0, 1.0]).note == "no variation across replicates"
    assert t_quantile(2) == pytest.approx(T2) and t_quantile(4, 0.95) == pytest.approx(T4)
