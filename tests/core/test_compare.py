"""Comparing two sets of samples: verdicts, the ratio's CI, effect size."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np
import pytest

from d5core.measure import DEFAULT_ALPHA, MeasureOptions, compare, measure


def draws(seed: int, n: int = 200, scale: float = 1.0) -> np.ndarray:
    return scale * np.random.default_rng(seed).lognormal(np.log(1e-3), 0.05, n)


def test_two_sample_sets_from_one_distribution_are_the_same() -> None:
    verdicts = [compare(draws(seed), draws(seed + 100)).verdict for seed in range(20)]
    assert verdicts == ["same"] * 20


def test_a_candidate_20_percent_slower_is_slower() -> None:
    c = compare(draws(1), draws(2, scale=1.2))
    assert (c.verdict, c.change) == ("worse", "higher")
    assert c.ratio == pytest.approx(1.2, rel=0.02)
    assert 1.0 < c.ratio_ci_low <= c.ratio <= c.ratio_ci_high
    assert c.p_value < DEFAULT_ALPHA
    assert c.effect_size > 0.9


def test_a_candidate_20_percent_faster_is_faster() -> None:
    c = compare(draws(1), draws(2, scale=0.8))
    assert (c.verdict, c.change) == ("better", "lower")
    assert c.effect_size < -0.9 and c.ratio_ci_high < 1.0


def test_for_rates_a_higher_candidate_is_better() -> None:
    assert compare(draws(1), draws(2, scale=1.2), lower_is_better=False).verdict == "better"


def test_a_significant_difference_below_the_minimum_effect_is_the_same() -> None:
    c = compare(draws(1, n=5000), draws(2, n=5000, scale=1.01))
    assert c.p_value < DEFAULT_ALPHA  # significant...
    assert c.verdict == "same"  # ...but smaller than the default minimum effect
    assert compare(draws(1, n=5000), draws(2, n=5000, scale=1.01), min_effect=0.005).verdict == (
        "worse"
    )


def test_cliffs_delta_is_one_when_every_candidate_sample_is_larger() -> None:
    c = compare([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert c.effect_size == 1.0
    assert compare([4.0, 5.0, 6.0], [1.0, 2.0, 3.0]).effect_size == -1.0


def test_too_few_samples_are_never_significant() -> None:
    c = compare([1.0, 1.1, 0.9], [2.0, 2.1, 1.9])
    assert c.p_value > DEFAULT_ALPHA and c.verdict == "same"


def test_identical_constant_samples_are_the_same() -> None:
    c = compare([1.0] * 10, [1.0] * 10)
    assert c.verdict == "same" and c.ratio == 1.0 and c.p_value == 1.0


def test_the_ratio_ci_is_deterministic() -> None:
    a, b = draws(3), draws(4, scale=1.1)
    assert compare(a, b) == compare(a, b)


def test_a_single_sample_gets_the_range_of_ratios_as_its_interval() -> None:
    c = compare([2.0], [1.0, 3.0])
    assert (c.ratio_ci_low, c.ratio_ci_high) == (0.5, 1.5)


def test_comparison_serialises_to_json() -> None:
    d = json.loads(json.dumps(compare(draws(1), draws(2)).to_json()))
    assert d["verdict"] == "same" and d["alpha"] == DEFAULT_ALPHA


@pytest.mark.parametrize("bad", [[], [float("nan")]])
def test_bad_samples_are_refused(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        compare(bad, [1.0])


def spin(ns: int) -> Callable[[], None]:
    def wait() -> None:
        end = time.perf_counter_ns() + ns
        while time.perf_counter_ns() < end:
            pass

    return wait


def test_real_callables_same_work_is_same_and_20_percent_more_work_is_slower() -> None:
    # Busy-waiting on the clock takes the same wall time whatever the CPU's speed, so
    # the verdicts hold on a loaded machine; preemption only adds outliers.
    opts = MeasureOptions(time_budget_s=0.3, max_samples=60)
    base = measure(spin(1_000_000), opts).samples
    again = measure(spin(1_000_000), opts).samples
    slow = measure(spin(1_200_000), opts).samples
    assert compare(base, again).verdict == "same"
    assert compare(base, slow).verdict == "worse"
    assert compare(slow, base).verdict == "better"
