"""Statistics of samples nested in processes: summaries, intervals, and comparisons."""

from __future__ import annotations

import math

import numpy as np
import pytest

from d5core.measure.nested import (
    BETWEEN_UNKNOWN,
    NestedSummary,
    between_ci,
    between_share,
    compare_nested,
    summarize_nested,
)
from d5core.measure.noise import shamos_log_spread

SIGMA_W = 0.10  # within-process spread of the log samples
SAMPLES = 30


def processes(rng, k, sigma_b, scale=1.0, outliers=0.0):
    """``k`` processes: a lognormal process effect (σ_b), optionally a share of processes
    slowed 1.2–1.8× (a burst of other work), then lognormal samples within (σ_w)."""
    effects = rng.normal(0.0, sigma_b, k)
    slow = rng.random(k) < outliers
    effects = effects + np.where(slow, np.log(rng.uniform(1.2, 1.8, k)), 0.0)
    return [scale * np.exp(e + rng.normal(0.0, SIGMA_W, SAMPLES)) for e in effects]


def calibrated_floor(rng, sigma_b, outliers=0.0, k=10):
    """The noise floor as ``d5 calibrate`` estimates it, from ``k`` processes of the model."""
    medians = [float(np.median(p)) for p in processes(rng, k, sigma_b, outliers=outliers)]
    return math.expm1(shamos_log_spread(medians))


# -- summaries -----------------------------------------------------------------------------


def test_summary_reports_the_median_of_process_medians_and_counts() -> None:
    procs = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0]]
    s = summarize_nested(procs)
    assert s.process_medians == [2.0, 6.0, 10.0]
    assert s.median == 6.0
    assert (s.n_processes, s.n_samples, s.process_sizes) == (3, 11, [3, 5, 3])


def test_between_interval_is_a_t_interval_on_log_process_medians() -> None:
    medians = [1.0, 1.1, 0.95, 1.05]
    logs = np.log(medians)
    half = 3.182446305284263 * logs.std(ddof=1) / 2.0  # t(0.975, 3) · sd / √4
    low, high = between_ci(medians)
    assert low == pytest.approx(math.exp(logs.mean() - half))
    assert high == pytest.approx(math.exp(logs.mean() + half))


def test_between_interval_is_widened_to_contain_the_reported_median() -> None:
    medians = [1.0] * 11 + [2.0] * 10  # bimodal: the t-interval alone would miss 1.0
    low, high = between_ci(medians)
    assert low == 1.0 and high > 1.0


def test_one_process_has_no_between_interval_and_says_so() -> None:
    s = summarize_nested([np.linspace(1.0, 2.0, 20)])
    assert s.ci_low is None and s.ci_high is None and s.between_share is None
    assert not s.between_known
    assert s.label == BETWEEN_UNKNOWN == "between-run variance unknown"
    assert s.to_json()["label"] == BETWEEN_UNKNOWN
    assert s.ci_rel_halfwidth == math.inf
    assert s.within_ci_low < s.median < s.within_ci_high


def test_within_interval_is_the_typical_interval_of_one_process() -> None:
    rng = np.random.default_rng(3)
    procs = [scale * np.exp(rng.normal(0, 0.05, 100)) for scale in (1.0, 2.0, 4.0)]
    s = summarize_nested(procs)
    # Three processes far apart: the between-process interval is far wider than any
    # process's own, which is a few percent of its median.
    assert s.within_rel_halfwidth < 0.05
    assert s.ci_rel_halfwidth > 1.0
    assert s.within_ci_low < s.median < s.within_ci_high


def test_between_share_follows_the_anova_definition() -> None:
    # Logs: process A at ±0.1 around 0, process B at ±0.1 around 1 (two samples each).
    procs = [np.exp([-0.1, 0.1]), np.exp([0.9, 1.1])]
    # MSW = 4 · 0.01 / 2 = 0.02; MSB = 2 · 2 · 0.25 = 1.0; n0 = 2; σ²_b = 0.49.
    assert between_share(procs) == pytest.approx(0.49 / (0.49 + 0.02))


def test_between_share_is_zero_when_processes_agree_and_one_when_only_they_differ() -> None:
    rng = np.random.default_rng(5)
    same = [np.exp(rng.normal(0, 0.1, 200)) for _ in range(6)]
    assert between_share(same) < 0.02
    assert between_share([[1.0, 1.0], [2.0, 2.0]]) == 1.0
    assert between_share([[1.0], [2.0]]) is None  # no process has two samples


def test_summary_round_trips_through_json() -> None:
    s = summarize_nested([[1.0, 1.1, 1.2], [1.3, 1.2, 1.25]])
    assert NestedSummary.from_json({**s.to_json(), "unknown": 1}) == s


@pytest.mark.parametrize(
    ("procs", "message"),
    [
        ([], "at least one process"),
        ([[1.0], []], "process 1 has no samples"),
        ([[1.0, 0.0]], "process 0 has a sample that is not a positive finite number"),
        ([[1.0, math.nan]], "process 0 has a sample that is not a positive finite number"),
    ],
)
def test_bad_samples_are_refused_naming_the_process(procs, message) -> None:
    with pytest.raises(ValueError, match=message):
        summarize_nested(procs)


@pytest.mark.parametrize("k", [3, 5])
def test_between_interval_covers_the_true_centre_95_percent_of_the_time(k) -> None:
    """2000 seeded trials of lognormal process effects (σ_b = 5%) and skewed samples;
    the true centre of the process medians is 1."""
    rng = np.random.default_rng(20150101 + k)
    hits = 0
    for _ in range(2000):
        s = summarize_nested(processes(rng, k, 0.05))
        hits += s.ci_low <= 1.0 <= s.ci_high
    assert 0.93 <= hits / 2000 <= 0.97


# -- comparisons ---------------------------------------------------------------------------


def test_identical_pairs_give_a_false_verdict_in_at_most_5_percent() -> None:
    """400 seeded pairs of 6 processes each, σ_b = 3%, the floor estimated as calibrate
    does; also with one process in ten slowed 1.2–1.8×."""
    rng = np.random.default_rng(11)
    for outliers in (0.0, 0.1):
        false = 0
        for _ in range(400):
            floor = calibrated_floor(rng, 0.03, outliers)
            a, b = (
                processes(rng, 6, 0.03, outliers=outliers),
                processes(rng, 6, 0.03, outliers=outliers),
            )
            false += compare_nested(a, b, min_effect=floor).change != "none"
        assert false / 400 <= 0.05


def test_a_real_10_percent_slowdown_is_detected_in_at_least_90_percent() -> None:
    """400 seeded pairs of 8 processes each, σ_b = 3%, floor estimated as calibrate does."""
    rng = np.random.default_rng(12)
    detected = 0
    for _ in range(400):
        floor = calibrated_floor(rng, 0.03)
        base, slow = processes(rng, 8, 0.03), processes(rng, 8, 0.03, scale=1.1)
        c = compare_nested(base, slow, min_effect=floor)
        detected += c.verdict == "worse"
    assert detected / 400 >= 0.90


def test_a_slowdown_is_worse_for_times_and_better_for_rates() -> None:
    rng = np.random.default_rng(1)
    base, slow = processes(rng, 6, 0.01), processes(rng, 6, 0.01, scale=1.2)
    c = compare_nested(base, slow, min_effect=0.01)
    assert (c.verdict, c.change, c.method, c.enough_processes) == ("worse", "higher", "welch", True)
    assert c.ratio_ci_low <= c.ratio <= c.ratio_ci_high and c.ratio_ci_low > 1.0
    assert c.p_value < 0.01
    assert compare_nested(base, slow, lower_is_better=False).verdict == "better"
    assert compare_nested(base, slow, lower_is_better=None).verdict == "changed"


def test_a_significant_change_within_the_noise_floor_is_not_called() -> None:
    rng = np.random.default_rng(2)
    base, slow = processes(rng, 8, 0.002), processes(rng, 8, 0.002, scale=1.06)
    assert compare_nested(base, slow, min_effect=0.0).verdict == "worse"
    c = compare_nested(base, slow, min_effect=0.10)
    assert c.p_value < 0.01 and c.verdict == "same"
    assert "within the noise floor of 10.0%" in c.reason


def test_too_few_processes_says_so_and_calls_nothing_without_a_floor() -> None:
    rng = np.random.default_rng(4)
    base, slow = processes(rng, 2, 0.01), processes(rng, 2, 0.01, scale=2.0)
    c = compare_nested(base, slow)
    assert not c.enough_processes and c.method == "noise-floor"
    assert c.verdict == "same" and c.p_value is None and c.ratio_ci_low is None
    assert c.reason.startswith("between-run variance unknown: 2 baseline and 2 candidate")
    assert "run 'd5 calibrate'" in c.reason


def test_too_few_processes_calls_only_changes_beyond_the_noise_floor() -> None:
    rng = np.random.default_rng(6)
    floor = math.expm1(0.03)  # the true spread of one process
    false = detected = 0
    for _ in range(1000):
        a, b = processes(rng, 1, 0.03), processes(rng, 1, 0.03)
        slow = processes(rng, 1, 0.03, scale=1.3)
        false += compare_nested(a, b, min_effect=floor).change != "none"
        detected += compare_nested(a, slow, min_effect=floor).verdict == "worse"
    assert false / 1000 <= 0.05
    assert detected / 1000 >= 0.9
    c = compare_nested(a, slow, min_effect=floor)
    assert "what a noise floor of 3.0% allows" in c.reason


def test_paired_comparison_removes_the_rounds_shared_luck() -> None:
    rng = np.random.default_rng(8)
    rounds = rng.normal(0.0, 0.10, 4)  # large luck shared by both jobs of a round
    base = [np.exp(r + rng.normal(0, 0.01, 30)) for r in rounds]
    cand = [1.05 * np.exp(r + rng.normal(0, 0.01, 30)) for r in rounds]
    assert compare_nested(base, cand, min_effect=0.01).verdict == "same"
    paired = compare_nested(base, cand, min_effect=0.01, paired=True)
    assert (paired.verdict, paired.method) == ("worse", "paired")


def test_summaries_compare_like_their_samples() -> None:
    rng = np.random.default_rng(9)
    base, slow = processes(rng, 5, 0.01), processes(rng, 5, 0.01, scale=1.2)
    direct = compare_nested(base, slow, min_effect=0.02)
    summarized = compare_nested(summarize_nested(base), summarize_nested(slow), min_effect=0.02)
    assert summarized == direct


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "alpha must be between 0 and 1"),
        ({"min_effect": -0.1}, "min_effect"),
        ({"min_processes": 1}, "min_processes must be at least 2"),
        ({"paired": True}, "as many candidate processes"),
    ],
)
def test_bad_comparison_settings_are_refused(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        compare_nested([[1.0], [1.1], [1.2]], [[1.0], [1.1]], **kwargs)


def test_describe_gives_verdict_ratio_base_and_reason() -> None:
    c = compare_nested(
        [[1.0, 1.01], [1.02, 1.0], [0.99, 1.0]], [[2.0, 2.01], [2.02, 2.0], [1.98, 2.0]]
    )
    text = c.describe()
    assert text.startswith("worse (higher): candidate/baseline = 1.9")
    assert "over 3 processes" in text and "significant between processes" in text
