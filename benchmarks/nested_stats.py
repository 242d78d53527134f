"""Seeded simulations behind d5's nested design (figures in ``docs/measurement.md``).

1. Coverage of the between-process interval of :func:`d5core.measure.nested.summarize_nested`
   (a Student-t interval on the log process medians) against two alternatives: the
   order-statistic interval of the median of the process medians, and a hierarchical
   bootstrap (resample processes, then samples within each; percentile interval).
2. False verdicts on identical pairs and detection of a 10% slowdown by
   :func:`d5core.measure.nested.compare_nested`, for several process counts.

The model: process ``i`` has a multiplicative effect ``exp(b_i)`` with ``b_i ~ N(0, σ_b)``,
plus, with probability ``--outliers``, a slowdown drawn from U(1.2, 1.8) (a process that
shared its cores with a burst of other work, as seen on the project's machine); within a
process, ``n`` samples are lognormal with σ_w = 0.1 (skewed, as timings are). The true
value is the median over processes without outliers, 1.0.

    .venv/bin/python benchmarks/nested_stats.py [--trials 2000] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Any

import numpy as np

from d5core.measure.nested import compare_nested, summarize_nested
from d5core.measure.noise import shamos_log_spread
from d5core.measure.stats import median_ci

SIGMA_W = 0.1
SAMPLES = 30


def processes(
    rng: np.random.Generator, k: int, sigma_b: float, outliers: float, scale: float = 1.0
) -> list[np.ndarray]:
    """``k`` processes of ``SAMPLES`` samples each, as the module docstring describes."""
    effects = rng.normal(0.0, sigma_b, k)
    slow = rng.random(k) < outliers
    effects = effects + np.where(slow, np.log(rng.uniform(1.2, 1.8, k)), 0.0)
    return [scale * np.exp(e + rng.normal(0.0, SIGMA_W, SAMPLES)) for e in effects]


def hierarchical_bootstrap(
    rng: np.random.Generator, procs: list[np.ndarray], resamples: int = 400
) -> tuple[float, float]:
    """Percentile interval of the median of process medians, resampling both levels."""
    k = len(procs)
    data = np.stack(procs)
    stats = np.empty(resamples)
    for r in range(resamples):
        chosen = data[rng.integers(0, k, k)]
        idx = rng.integers(0, SAMPLES, chosen.shape)
        stats[r] = np.median(np.median(np.take_along_axis(chosen, idx, axis=1), axis=1))
    lo, hi = np.percentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def coverage(trials: int, k: int, sigma_b: float, seed: int) -> dict[str, float]:
    """Observed coverage of the true centre (1.0) by each interval."""
    rng = np.random.default_rng(seed)
    hits = {"t_log": 0, "order_statistics": 0, "hierarchical_bootstrap": 0}
    boot_trials = min(trials, 500)
    for trial in range(trials):
        procs = processes(rng, k, sigma_b, 0.0)
        s = summarize_nested(procs)
        assert s.ci_low is not None and s.ci_high is not None
        hits["t_log"] += s.ci_low <= 1.0 <= s.ci_high
        lo, hi = median_ci(s.process_medians)
        hits["order_statistics"] += lo <= 1.0 <= hi
        if trial < boot_trials:
            lo, hi = hierarchical_bootstrap(rng, procs)
            hits["hierarchical_bootstrap"] += lo <= 1.0 <= hi
    return {
        "t_log": hits["t_log"] / trials,
        "order_statistics": hits["order_statistics"] / trials,
        "hierarchical_bootstrap": hits["hierarchical_bootstrap"] / boot_trials,
    }


def verdicts(trials: int, k: int, sigma_b: float, outliers: float, seed: int) -> dict[str, float]:
    """Share of identical pairs called changed, and of 10% slowdowns called worse.

    The noise floor passed to the comparison is estimated as ``d5 calibrate`` does, from
    a separate set of ``max(k, 6)`` processes of the same model.
    """
    rng = np.random.default_rng(seed)
    false = detected = 0
    for _ in range(trials):
        calib = [float(np.median(p)) for p in processes(rng, max(k, 6), sigma_b, outliers)]
        floor = math.expm1(shamos_log_spread(calib))
        base = processes(rng, k, sigma_b, outliers)
        same = processes(rng, k, sigma_b, outliers)
        slow = processes(rng, k, sigma_b, outliers, scale=1.1)
        false += compare_nested(base, same, min_effect=floor).change != "none"
        detected += compare_nested(base, slow, min_effect=floor).verdict == "worse"
    return {"false_verdicts": false / trials, "detected_10pct": detected / trials}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows: dict[str, Any] = {"coverage": [], "verdicts": []}
    for k in (2, 3, 5, 10):
        cov = coverage(args.trials, k, 0.05, seed=k)
        rows["coverage"].append({"k": k, "sigma_b": 0.05, **cov})
    for sigma_b, outliers in ((0.03, 0.0), (0.03, 0.1), (0.05, 0.0)):
        for k in (1, 2, 3, 5, 6, 8, 10):
            v = verdicts(args.trials // 2, k, sigma_b, outliers, seed=100 + k)
            rows["verdicts"].append({"k": k, "sigma_b": sigma_b, "outliers": outliers, **v})
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        print()
        return 0
    print(f"coverage of 95% intervals, {args.trials} trials (bootstrap: up to 500)")
    print("| k | t on log medians | order statistics | hierarchical bootstrap |")
    print("|---|---|---|---|")
    for r in rows["coverage"]:
        print(
            f"| {r['k']} | {r['t_log']:.3f} | {r['order_statistics']:.3f} | "
            f"{r['hierarchical_bootstrap']:.3f} |"
        )
    print(f"\nverdicts, {args.trials // 2} pairs each")
    print("| σ_b | outlier processes | k per side | false verdicts | 10% slowdown detected |")
    print("|---|---|---|---|---|")
    for r in rows["verdicts"]:
        print(
            f"| {r['sigma_b']:.0%} | {r['outliers']:.0%} | {r['k']} | "
            f"{r['false_verdicts']:.3f} | {r['detected_10pct']:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
