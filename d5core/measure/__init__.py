"""Measuring: the clock, the engine that samples, summaries and comparisons of samples.

``docs/measurement.md`` explains the rules these modules implement.
"""

from __future__ import annotations

from d5core.measure.clock import Clock, default_clock, measure_clock
from d5core.measure.compare import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT, Comparison, compare
from d5core.measure.engine import (
    MIN_SAMPLES,
    Measurement,
    MeasureOptions,
    flush_cpu_caches,
    measure,
    synchronizer_for,
    synchronizer_of,
)
from d5core.measure.stats import (
    Summary,
    arithmetic_mean,
    harmonic_mean,
    median_ci,
    median_ci_coverage,
    median_ci_ranks,
    summarize,
)

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_MIN_EFFECT",
    "MIN_SAMPLES",
    "Clock",
    "Comparison",
    "MeasureOptions",
    "Measurement",
    "Summary",
    "arithmetic_mean",
    "compare",
    "default_clock",
    "flush_cpu_caches",
    "harmonic_mean",
    "measure",
    "measure_clock",
    "median_ci",
    "median_ci_coverage",
    "median_ci_ranks",
    "summarize",
    "synchronizer_for",
    "synchronizer_of",
]
