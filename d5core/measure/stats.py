"""Summaries of measured samples: the median with its confidence interval, and the rest.

Every figure is computed from all samples; outliers are counted, never removed. The
median's interval is distribution-free (order statistics), so it holds for the skewed,
heavy-tailed distributions timings have.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as _st

__all__ = [
    "NORMALITY_ALPHA",
    "STABLE_LIMIT",
    "UNSTABLE_LIMIT",
    "Summary",
    "arithmetic_mean",
    "harmonic_mean",
    "median_ci",
    "median_ci_coverage",
    "median_ci_ranks",
    "normal_quantile",
    "ranks_for_z",
    "summarize",
]

#: Shapiro–Wilk p-values below this reject normality (then report the median, not the mean).
NORMALITY_ALPHA = 0.05
#: IQR/median above this is "unstable".
STABLE_LIMIT = 0.10
#: IQR/median above this is "very unstable".
UNSTABLE_LIMIT = 0.25
#: Percentiles reported besides the quartiles (numpy's default, linear interpolation).
_PERCENTILES = (5.0, 25.0, 50.0, 75.0, 95.0, 99.0)


def normal_quantile(confidence: float) -> float:
    """The two-sided standard normal quantile ``z`` of ``confidence`` (1.96 at 0.95)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    return float(_st.norm.ppf(0.5 + confidence / 2.0))


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """1-based ranks of the order statistics bounding the median's CI (Le Boudec).

    With ``z`` the two-sided normal quantile, the ranks are ``⌊(n − z√n)/2⌋`` and
    ``⌈1 + (n + z√n)/2⌉``, clamped into ``[1, n]``. Clamping happens for ``n < 6`` at
    95%: the interval is then ``[min, max]`` and covers the median with probability
    ``1 − 2^(1−n)`` only (see :func:`median_ci_coverage`), below the nominal level.
    """
    if n < 1:
        raise ValueError("at least one sample is needed for a confidence interval")
    return ranks_for_z(n, normal_quantile(confidence))


def ranks_for_z(n: int, z: float) -> tuple[int, int]:
    """:func:`median_ci_ranks` for a given normal quantile ``z`` (for hot loops)."""
    half = z * math.sqrt(n)
    lo = math.floor((n - half) / 2.0)
    hi = math.ceil(1.0 + (n + half) / 2.0)
    return min(max(lo, 1), n), min(max(hi, 1), n)


def median_ci_coverage(n: int, confidence: float = 0.95) -> float:
    """The exact probability that :func:`median_ci` covers the true median.

    For continuous data, ``[x(l), x(u)]`` covers the median exactly when between ``l`` and
    ``u − 1`` samples fall below it, a Binomial(n, ½) event, whatever the distribution.
    """
    lo, hi = median_ci_ranks(n, confidence)
    if hi <= lo:
        return 0.0
    return float(_st.binom.cdf(hi - 1, n, 0.5) - _st.binom.cdf(lo - 1, n, 0.5))


def median_ci(samples: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """The nonparametric confidence interval of the median: two order statistics.

    See :func:`median_ci_ranks` for the ranks. For ``n < 6`` at 95% no interval reaches
    the nominal level: the sample minimum and maximum are returned, and
    :attr:`Summary.ci_coverage` says how much they actually cover.
    """
    ordered = np.sort(np.asarray(samples, dtype=float))
    lo, hi = median_ci_ranks(int(ordered.size), confidence)
    return float(ordered[lo - 1]), float(ordered[hi - 1])


def _stability(iqr: float, median: float) -> str:
    if median == 0.0:
        return "stable" if iqr == 0.0 else "very unstable"
    spread = iqr / abs(median)
    if spread > UNSTABLE_LIMIT:
        return "very unstable"
    if spread > STABLE_LIMIT:
        return "unstable"
    return "stable"


@dataclass(frozen=True)
class Summary:
    """What d5 reports about one set of samples.

    ``median`` with its ``ci_low``/``ci_high`` at ``confidence`` is the headline; ``mean``
    is meaningful only when ``normal`` is true. ``outliers`` counts samples beyond the
    Tukey fences (1.5·IQR outside the quartiles); they stay in every figure.
    ``stability`` is ``"stable"``, ``"unstable"`` (IQR/median > 10%) or
    ``"very unstable"`` (> 25%). ``ci_coverage`` is the exact coverage of the median's
    interval, below ``confidence`` only when there were too few samples.
    Percentiles use linear interpolation between order statistics.
    """

    n: int
    median: float
    ci_low: float
    ci_high: float
    confidence: float
    mean: float
    std: float
    min: float
    max: float
    p5: float
    p25: float
    p75: float
    p95: float
    p99: float
    iqr: float
    outliers: int
    shapiro_p: float | None
    normal: bool | None
    stability: str
    ci_coverage: float | None = None

    @property
    def ci_rel_halfwidth(self) -> float:
        """The larger distance from the median to a CI bound, relative to the median."""
        if self.median == 0.0:
            return 0.0 if self.ci_low == self.ci_high == 0.0 else math.inf
        return max(self.median - self.ci_low, self.ci_high - self.median) / abs(self.median)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every field."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Summary:
        """The summary stored by :meth:`to_json`; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def summarize(samples: ArrayLike, confidence: float = 0.95) -> Summary:
    """Summarise ``samples`` (any unit; all of them, in the order taken or not).

    :raises ValueError: when there is no sample or one is NaN or infinite.
    """
    x = np.asarray(samples, dtype=float).ravel()
    n = int(x.size)
    if n == 0:
        raise ValueError("cannot summarise an empty set of samples")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{int(np.sum(~np.isfinite(x)))} of {n} samples are NaN or infinite")
    p5, p25, median, p75, p95, p99 = (float(v) for v in np.percentile(x, _PERCENTILES))
    iqr = p75 - p25
    fence_lo, fence_hi = p25 - 1.5 * iqr, p75 + 1.5 * iqr
    outliers = int(np.count_nonzero((x < fence_lo) | (x > fence_hi)))
    ci_low, ci_high = median_ci(x, confidence)
    shapiro_p: float | None = None
    if n >= 3 and float(np.ptp(x)) > 0.0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # n > 5000: "p-value may not be accurate"
            shapiro_p = float(_st.shapiro(x).pvalue)
    return Summary(
        n=n,
        median=median,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=float(confidence),
        mean=float(np.mean(x)),
        std=float(np.std(x, ddof=1)) if n > 1 else 0.0,
        min=float(np.min(x)),
        max=float(np.max(x)),
        p5=p5,
        p25=p25,
        p75=p75,
        p95=p95,
        p99=p99,
        iqr=iqr,
        outliers=outliers,
        shapiro_p=shapiro_p,
        normal=None if shapiro_p is None else shapiro_p >= NORMALITY_ALPHA,
        stability=_stability(iqr, median),
        ci_coverage=median_ci_coverage(n, confidence),
    )


def _values(values: ArrayLike, weights: ArrayLike | None) -> tuple[Any, Any]:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("cannot average an empty sequence")
    w = None if weights is None else np.asarray(weights, dtype=float)
    if w is not None and w.shape != x.shape:
        raise ValueError(f"{w.size} weights for {x.size} values")
    return x, w


def arithmetic_mean(values: ArrayLike, weights: ArrayLike | None = None) -> float:
    """The mean to aggregate costs (seconds, joules): the total divided by the count.

    With ``weights`` (e.g. how often each cost occurs) the weighted mean.
    """
    x, w = _values(values, weights)
    return float(np.average(x, weights=w))


def harmonic_mean(values: ArrayLike, weights: ArrayLike | None = None) -> float:
    """The mean to aggregate rates (samples/s, FLOP/s).

    Rates measured over equal amounts of work average harmonically: the result is the
    total work over the total time. With ``weights`` (the work behind each rate, e.g.
    batch sizes), work done at different amounts is accounted for.

    :raises ValueError: for a negative rate (a rate of 0 gives 0).
    """
    x, w = _values(values, weights)
    if np.any(x < 0):
        raise ValueError("the harmonic mean is defined for non-negative rates only")
    if np.any(x == 0):
        return 0.0
    return float(_st.hmean(x, weights=w))
