"""Summaries of repeated training runs: one value per run, never pooled samples.

Runs are the independent units: the per-step rates of one run share its machine state,
data order and warm-up, so pooling the steps of several runs and computing an interval
from them counts every step as an independent sample and gives an interval far too
narrow. Every summary here takes one value per run.

Time to accuracy follows MLPerf Training: every run counts, and a run that never reached
the target counts as infinitely slow. The median and its interval are order statistics,
so they stay defined while fewer than half of the runs failed to reach the target, and
say "not reached" (``math.inf``) otherwise. The olympic mean drops the best and the worst
run (from 3 runs on) and averages the rest; it is undefined when a run it keeps never
reached the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = [
    "across_runs",
    "median_interval",
    "olympic_mean",
    "range_of",
    "time_to_accuracy_summary",
    "true_median",
]


def true_median(values: Sequence[float]) -> float:
    """The median: the middle value, or the mean of the two middle values of an even count.

    Infinite values sort last; a middle value that is infinite makes the median infinite.

    :raises ValueError: for no values or a NaN among them.
    """
    ordered = _sorted(values)
    n = len(ordered)
    middle = n // 2
    if n % 2:
        return ordered[middle]
    low, high = ordered[middle - 1], ordered[middle]
    return math.inf if math.isinf(high) else (low + high) / 2.0


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """The nonparametric confidence interval of the median: two order statistics.

    The ranks are :func:`d5core.measure.stats.median_ci_ranks`'s: below 6 values at 95%
    the interval is the full range. Infinite values sort last, so an upper bound that
    falls on a run that never reached the target is infinite.
    """
    from d5core.measure.stats import median_ci_ranks

    ordered = _sorted(values)
    lo, hi = median_ci_ranks(len(ordered), confidence)
    return ordered[lo - 1], ordered[hi - 1]


def olympic_mean(values: Sequence[float]) -> float | None:
    """MLPerf's olympic mean: best and worst dropped from 3 values on, the rest averaged.

    ``None`` when a kept value is infinite (a kept run never reached the target).
    """
    ordered = _sorted(values)
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    if not all(math.isfinite(v) for v in kept):
        return None
    return sum(kept) / len(kept)


def time_to_accuracy_summary(times: Sequence[float | None]) -> dict[str, Any]:
    """Time to accuracy over every run; ``None`` marks a run that never reached the target.

    :return: ``runs``, ``reached``, ``median`` and its interval ``ci_low``/``ci_high``
        (each ``math.inf`` when it falls on a run that did not reach the target), and the
        ``olympic_mean`` (``None`` when undefined).
    :raises ValueError: for no runs.
    """
    values = [math.inf if t is None else float(t) for t in times]
    low, high = median_interval(values)
    return {
        "runs": len(values),
        "reached": sum(1 for t in times if t is not None),
        "median": true_median(values),
        "ci_low": low,
        "ci_high": high,
        "olympic_mean": olympic_mean(values),
    }


def across_runs(values: Sequence[float]) -> dict[str, Any]:
    """``runs``, the ``median`` and its interval (``ci_low``, ``ci_high``) of one value per run."""
    low, high = median_interval(values)
    return {"runs": len(values), "median": true_median(values), "ci_low": low, "ci_high": high}


def range_of(values: Sequence[float]) -> dict[str, Any]:
    """``runs``, the ``median``, ``min`` and ``max`` of one value per run."""
    ordered = _sorted(values)
    return {
        "runs": len(ordered),
        "median": true_median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
    }


def _sorted(values: Sequence[float]) -> list[float]:
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("no values to summarise")
    if any(math.isnan(v) for v in ordered):
        raise ValueError("a value to summarise is NaN")
    return ordered
