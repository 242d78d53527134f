"""Issue 33, scoring: AlgoPerf's definitions checked on small tables worked out by hand.

Definitions (mlcommons/submissions_algorithms, scoring/performance_profile.py): a study's
time is its fastest trial's (inf: none reached the target); a workload's time the median
over studies (np.median: the mean of the two middle ones for an even count); r = t / the
best t of the workload; rho(tau) = share of the suite's workloads with r <= tau; the
score the integral of rho from 1 to 4 over 3. For a step function the integral is exact:
each workload with r <= 4 adds (4 - r) / 3 / W.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.algorithms.scoring import (
    R_MAX,
    entry_score,
    geometric_speedup,
    median_time,
    performance_ratios,
    profile_steps,
    resolve_entry,
    rho,
    score_trials,
    study_interval,
    study_time,
)
from d5core.lv2.algorithms.trials import TrialRecord

INF = math.inf


def _trial(workload, algorithm, study, trial, time, executor="numpy", outcome=None):
    """A trial record; ``time`` None is a miss."""
    return TrialRecord(
        campaign="c1", suite="tiny", suite_hash="h", workload=workload, algorithm=algorithm,
        executor=executor, ruleset="external", study=study, trial=trial, seed=study * 10 + trial,
        outcome=outcome or ("reached" if time is not None else "missed"),
        time_to_target_s=time,
    )  # fmt: skip


def _algoperf_trapezoid_score(ratios, n_workloads):
    """AlgoPerf's own computation: rho on np.linspace(1, 4, 100), trapezoid rule,
    divided by the range of tau (compute_leaderboard_score(normalize=True))."""
    points = np.linspace(1.0, 4.0, 100)
    values = [sum(1 for r in ratios if r <= tau) / n_workloads for tau in points]
    integrate = getattr(np, "trapezoid", None) or np.trapz
    return float(integrate(values, x=points)) / 3.0


# -- one workload's time ----------------------------------------------------------------


def test_a_study_time_is_its_fastest_trial_and_inf_when_none_reached():
    assert study_time([12.0, INF, 9.0]) == 9.0
    assert study_time([INF, INF]) == INF
    assert study_time([]) == INF
    assert study_time([math.nan, 5.0]) == 5.0  # NaN is a miss, never the minimum


def test_the_median_over_studies_follows_np_median_with_misses():
    assert median_time([3.0, 1.0, INF]) == 3.0  # odd: the middle one; one miss of 3 is fine
    assert median_time([INF, INF, 5.0]) == INF  # two misses of 3: the workload is missed
    assert median_time([7.0]) == 7.0  # a single study
    assert median_time([12.0, 10.0, INF, 14.0]) == 13.0  # even: (12 + 14) / 2
    assert median_time([10.0, INF, INF, 12.0]) == INF  # even: (12 + inf) / 2
    for times in ([3.0, 1.0, INF], [12.0, 10.0, INF, 14.0], [10.0, INF, INF, 12.0], [2.0, 4.0]):
        assert median_time(times) == float(np.median(times))  # AlgoPerf's np.median
    with pytest.raises(ValueError, match="at least one study"):
        median_time([])


def test_the_study_interval_has_a_median_ci_only_with_enough_studies():
    one = study_interval([7.0])
    assert (one.low, one.high, one.ci, one.coverage) == (7.0, 7.0, None, 0.0)
    five = study_interval([5.0, 1.0, 3.0, 2.0, 4.0])
    assert (five.low, five.high, five.ci) == (1.0, 5.0, None)  # 1 - 2^-4 = 0.9375 < 0.95
    assert five.coverage == pytest.approx(0.9375)
    six = study_interval([5.0, 1.0, 3.0, 2.0, 6.0, 4.0])
    # n = 6: ranks floor((6 - 1.96*sqrt 6)/2) -> 1 and ceil(1 + (6 + 4.80)/2) -> 6 (clamped)
    assert six.ci == (1.0, 6.0) and six.coverage == pytest.approx(1 - 2**-5)
    twelve = study_interval([float(v) for v in (7, 3, 12, 1, 9, 5, 11, 2, 8, 4, 10, 6)])
    # n = 12: z*sqrt(12) = 6.79; ranks floor(2.60) = 2 and ceil(1 + 9.39) = 11
    assert twelve.ci == (2.0, 11.0) and twelve.coverage >= 0.95
    missed = study_interval([INF, 4.0, 2.0])
    assert (missed.low, missed.high) == (2.0, INF)


# -- ratios, profiles and scores ---------------------------------------------------------


def test_one_workload_two_algorithms_ratio_and_score():
    ratios = performance_ratios({"A": {"w": 10.0}, "B": {"w": 20.0}})
    assert ratios == {"A": {"w": 1.0}, "B": {"w": 2.0}}
    # A: rho = 1 on [1, 4] -> 1. B: rho = 0 on [1, 2), 1 on [2, 4] -> (4 - 2) / 3.
    assert entry_score(ratios["A"].values()) == 1.0
    assert entry_score(ratios["B"].values()) == pytest.approx(2 / 3)
    assert profile_steps(ratios["B"].values()) == [(1.0, 0.0), (2.0, 1.0), (4.0, 1.0)]


def test_a_tie_gives_both_algorithms_ratio_one_and_the_full_score():
    ratios = performance_ratios({"A": {"w": 10.0}, "B": {"w": 10.0}})
    assert ratios["A"]["w"] == ratios["B"]["w"] == 1.0
    assert entry_score(ratios["A"].values()) == entry_score(ratios["B"].values()) == 1.0


def test_three_workloads_with_misses_by_hand():
    times = {
        "A": {"w1": 10.0, "w2": 30.0, "w3": INF},
        "B": {"w1": 20.0, "w2": 10.0, "w3": 40.0},
        "C": {"w1": 50.0, "w3": 10.0},  # no time on w2: a miss
    }
    r = performance_ratios(times, ["w1", "w2", "w3"])
    # best per workload: 10, 10, 10
    assert r["A"] == {"w1": 1.0, "w2": 3.0, "w3": INF}
    assert r["B"] == {"w1": 2.0, "w2": 1.0, "w3": 4.0}
    assert r["C"] == {"w1": 5.0, "w2": INF, "w3": 1.0}
    # A: ((4-1) + (4-3)) / (3*3) = 4/9; B: ((4-2) + (4-1) + (4-4)) / 9 = 5/9;
    # C: (4-1) / 9 = 1/3 (r = 5 is beyond r_max: no area)
    assert entry_score(r["A"].values()) == pytest.approx(4 / 9)
    assert entry_score(r["B"].values()) == pytest.approx(5 / 9)
    assert entry_score(r["C"].values()) == pytest.approx(1 / 3)
    # rho of B: 1/3 at tau=1 (w2), 2/3 from 2 (w1), 1 at exactly 4 (w3: r <= tau)
    assert rho(r["B"].values(), 1.0) == pytest.approx(1 / 3)
    assert rho(r["B"].values(), 3.99) == pytest.approx(2 / 3)
    assert rho(r["B"].values(), 4.0) == 1.0
    for entry in "ABC":  # AlgoPerf's 100-point trapezoid is within half a grid step of it
        exact = entry_score(r[entry].values())
        assert abs(_algoperf_trapezoid_score(r[entry].values(), 3) - exact) <= 1 / 198 + 1e-12


def test_a_workload_every_algorithm_missed_still_counts_in_the_denominator():
    r = performance_ratios({"A": {"w1": 10.0, "w2": INF}, "B": {"w1": 20.0, "w2": INF}})
    assert r["A"]["w2"] == r["B"]["w2"] == INF
    # A: (4 - 1) / (2 * 3) = 1/2; B: (4 - 2) / 6 = 1/3
    assert entry_score(r["A"].values()) == pytest.approx(0.5)
    assert entry_score(r["B"].values()) == pytest.approx(1 / 3)
    assert rho(r["A"].values(), R_MAX) == 0.5


def test_a_ratio_below_one_against_a_reference_scores_as_one_and_r_max_must_exceed_one():
    assert entry_score([0.5]) == 1.0
    with pytest.raises(ValueError, match="r_max must be above 1"):
        entry_score([1.0], r_max=1.0)


def test_geometric_speedup_is_over_the_workloads_both_reached():
    base = {"w1": 20.0, "w2": 10.0, "w3": 40.0}
    mine = {"w1": 10.0, "w2": 30.0, "w3": INF}
    sp = geometric_speedup(mine, base, baseline="B")
    # w1: 20/10 = 2; w2: 10/30 = 1/3; w3 missed by A: left out -> sqrt(2/3)
    assert sp.value == pytest.approx(math.sqrt(2 / 3))
    assert (sp.workloads, sp.of, sp.baseline) == (2, 3, "B")
    none = geometric_speedup({"w": INF}, {"w": 5.0})
    assert (none.value, none.workloads, none.of) == (None, 0, 1)


# -- from trial records ------------------------------------------------------------------


def test_score_trials_takes_each_studys_best_trial_and_the_median_over_studies():
    trials = [
        # A on w: study 0 best 12; study 1 none; study 2 best 9 -> [9, 12, inf] -> 12
        _trial("w", "A", 0, 0, 12.0), _trial("w", "A", 0, 1, None),
        _trial("w", "A", 1, 0, None), _trial("w", "A", 1, 1, None, outcome="diverged"),
        _trial("w", "A", 2, 0, 9.0), _trial("w", "A", 2, 1, 11.0),
        # B on w: studies 6, 7, 30 -> 7
        _trial("w", "B", 0, 0, 6.0), _trial("w", "B", 0, 1, 8.0),
        _trial("w", "B", 1, 0, 7.0), _trial("w", "B", 1, 1, None, outcome="failed"),
        _trial("w", "B", 2, 0, None, outcome="over_budget"), _trial("w", "B", 2, 1, 30.0),
    ]  # fmt: skip
    board = score_trials(trials, baseline="B")
    a, b = board.time("A@numpy", "w"), board.time("B@numpy", "w")
    assert a is not None and b is not None
    assert a.study_times == (12.0, INF, 9.0) and a.time == 12.0
    assert (a.trials, a.trials_reached) == (6, 3)
    assert b.study_times == (6.0, 7.0, 30.0) and b.time == 7.0
    assert (a.interval.low, a.interval.high, a.interval.ci) == (9.0, INF, None)
    scores = {e.entry: e for e in board.entries}
    # r_A = 12/7: (4 - 12/7) / 3 = 16/21
    assert scores["A@numpy"].score == pytest.approx(16 / 21)
    assert scores["B@numpy"].score == 1.0
    assert [e.entry for e in board.entries] == ["B@numpy", "A@numpy"]  # best first
    assert scores["A@numpy"].speedup is not None
    assert scores["A@numpy"].speedup.value == pytest.approx(7 / 12)
    assert board.warnings == ()


def test_one_algorithm_on_two_executors_is_two_entries_and_a_bare_baseline_is_ambiguous():
    trials = [_trial("w", "adam", 0, 0, 5.0, "numpy"), _trial("w", "adam", 0, 0, 10.0, "torch")]
    board = score_trials(trials)
    assert {e.entry for e in board.entries} == {"adam@numpy", "adam@torch"}
    assert board.ratios["adam@torch"]["w"] == 2.0
    with pytest.raises(UsageError, match=r"ambiguous.*adam@numpy, adam@torch"):
        score_trials(trials, baseline="adam")
    assert resolve_entry("sgd", ["adam@numpy", "sgd@numpy"]) == "sgd@numpy"
    with pytest.raises(UsageError, match="'nope' is not among the scored algorithms"):
        resolve_entry("nope", ["adam@numpy"])


def test_a_workload_without_trials_for_an_entry_is_a_miss_with_a_warning():
    trials = [
        _trial("w1", "A", 0, 0, 10.0), _trial("w2", "A", 0, 0, 10.0),
        _trial("w1", "B", 0, 0, 10.0),
    ]  # fmt: skip
    board = score_trials(trials)
    assert board.ratios["B@numpy"]["w2"] == INF
    assert {e.entry: e.reached for e in board.entries} == {"A@numpy": 2, "B@numpy": 1}
    assert {e.entry: e.score for e in board.entries}["B@numpy"] == pytest.approx(0.5)
    assert board.warnings == ("B@numpy has no trial on w2: counted as a miss",)
    with pytest.raises(UsageError, match="no trials to score"):
        score_trials([])
