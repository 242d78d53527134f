"""The statistics behind every figure: the median's CI, outliers, stability, normality."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from d5core.measure.stats import (
    Summary,
    arithmetic_mean,
    harmonic_mean,
    median_ci,
    median_ci_coverage,
    median_ci_ranks,
    summarize,
)

TRIALS, N = 2000, 50


def test_median_ci_ranks_follow_le_boudec_formula_for_n_50() -> None:
    # z√n = 1.95996·7.0711 = 13.859: ⌊(50 − 13.859)/2⌋ = 18, ⌈1 + (50 + 13.859)/2⌉ = 33.
    assert median_ci_ranks(50) == (18, 33)
    ordered = np.arange(1.0, 51.0)
    assert median_ci(np.random.default_rng(0).permutation(ordered)) == (18.0, 33.0)


def test_exact_coverage_is_the_binomial_probability_between_the_ranks() -> None:
    lo, hi = median_ci_ranks(50)
    expected = sum(math.comb(50, k) for k in range(lo, hi)) / 2**50
    assert median_ci_coverage(50) == pytest.approx(expected, rel=1e-12)


def test_exact_coverage_reaches_95_percent_from_six_samples_on() -> None:
    assert all(median_ci_coverage(n) >= 0.95 for n in range(6, 1001))
    assert median_ci_coverage(5) == pytest.approx(1 - 2 / 2**5)


@pytest.mark.parametrize(
    ("draw", "true_median"),
    [
        (lambda rng: rng.lognormal(0.0, 1.0, size=(TRIALS, N)), 1.0),
        (lambda rng: rng.exponential(1.0, size=(TRIALS, N)), math.log(2.0)),
    ],
    ids=["lognormal", "exponential"],
)
def test_median_ci_covers_the_true_median_as_often_as_the_binomial_predicts(
    draw: object, true_median: float
) -> None:
    rng = np.random.default_rng(12345)
    data = draw(rng)  # type: ignore[operator]
    covered = 0
    for row in data:
        lo, hi = median_ci(row)
        covered += lo <= true_median <= hi
    expected = median_ci_coverage(N)
    sigma = math.sqrt(expected * (1 - expected) / TRIALS)
    assert abs(covered / TRIALS - expected) < 4 * sigma
    assert 0.93 < covered / TRIALS < 0.99


@pytest.mark.parametrize("n", [1, 2, 5, 6])
def test_median_ci_with_too_few_samples_for_an_interval_is_min_and_max(n: int) -> None:
    samples = [3.0, 1.0, 4.0, 1.5, 5.0, 9.0][:n]
    assert median_ci(samples) == (min(samples), max(samples))
    assert summarize(samples).ci_coverage == pytest.approx(max(0.0, 1 - 2 / 2**n) if n > 1 else 0)


def test_tukey_outliers_are_counted_exactly_and_kept() -> None:
    # 1..100: p25 = 25.75, p75 = 75.25, IQR = 49.5, fences -48.5 and 149.5. Changing
    # extreme values without changing their order leaves the quartiles where they are.
    data = [float(v) for v in range(1, 101)]
    data[0] = -49.0  # below the lower fence
    data[96] = 149.5  # on the fence: not an outlier
    data[97], data[98], data[99] = 150.0, 200.0, 1000.0  # above the upper fence
    s = summarize(data)
    assert (s.p25, s.p75, s.iqr) == (25.75, 75.25, 49.5)
    assert s.outliers == 4
    assert s.n == 100 and s.max == 1000.0 and s.min == -49.0


def test_no_outliers_in_evenly_spread_samples() -> None:
    assert summarize(np.linspace(1.0, 2.0, 101)).outliers == 0


@pytest.mark.parametrize(
    ("spread", "label"),
    [
        (0.05, "stable"),
        (0.10, "stable"),
        (0.15, "unstable"),
        (0.25, "unstable"),
        (0.30, "very unstable"),
    ],
)
def test_stability_follows_iqr_over_median(spread: float, label: str) -> None:
    # Quartiles of 5 samples are the 2nd and 4th: IQR/median is exactly ``spread``, so
    # the limits themselves (10%, 25%) are pinned down too.
    d = 100.0 * spread / 2
    s = summarize([100 - 2 * d, 100 - d, 100.0, 100 + d, 100 + 2 * d])
    assert s.iqr / s.median == spread
    assert s.stability == label


def test_shapiro_flags_exponential_data_as_not_normal_and_normal_data_as_normal() -> None:
    rng = np.random.default_rng(7)
    normal = summarize(rng.normal(10.0, 1.0, 300))
    skewed = summarize(rng.exponential(1.0, 300))
    assert normal.normal is True and normal.shapiro_p is not None and normal.shapiro_p > 0.05
    assert skewed.normal is False and skewed.shapiro_p is not None and skewed.shapiro_p < 1e-6


def test_shapiro_is_not_run_below_three_samples_or_on_constant_samples() -> None:
    assert summarize([1.0, 2.0]).shapiro_p is None
    assert summarize([1.0, 2.0]).normal is None
    assert summarize([2.0] * 10).shapiro_p is None


def test_summary_survives_a_json_round_trip() -> None:
    s = summarize(np.random.default_rng(1).lognormal(size=40))
    text = json.dumps(s.to_json())
    assert Summary.from_json(json.loads(text)) == s


def test_summary_from_json_accepts_records_without_newer_fields() -> None:
    d = summarize([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).to_json()
    del d["ci_coverage"]
    d["from_the_future"] = 1
    assert Summary.from_json(d).ci_coverage is None


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf")]])
def test_summarize_rejects_empty_and_non_finite_samples(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)


@given(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_summary_orders_its_figures(samples: list[float]) -> None:
    s = summarize(samples)
    assert s.min <= s.ci_low <= s.median <= s.ci_high <= s.max
    assert s.min <= s.p5 <= s.p25 <= s.median <= s.p75 <= s.p95 <= s.p99 <= s.max
    assert 0 <= s.outliers <= s.n == len(samples)


def test_harmonic_mean_of_rates_is_total_work_over_total_time() -> None:
    # 100 samples in 1 s, then 100 samples in 4 s: 200 samples in 5 s.
    assert harmonic_mean([100.0, 25.0]) == pytest.approx(40.0)
    # Batches of 300 at 100/s (3 s) and 100 at 25/s (4 s): 400 samples in 7 s.
    assert harmonic_mean([100.0, 25.0], weights=[300, 100]) == pytest.approx(400 / 7)
    assert harmonic_mean([10.0, 0.0]) == 0.0
    with pytest.raises(ValueError):
        harmonic_mean([-1.0])


def test_arithmetic_mean_of_costs_is_total_cost_over_count() -> None:
    assert arithmetic_mean([1.0, 2.0, 6.0]) == pytest.approx(3.0)
    assert arithmetic_mean([1.0, 3.0], weights=[3, 1]) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        arithmetic_mean([])
