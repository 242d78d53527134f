"""Comparing two sets of samples: is the candidate better, worse, or the same?

A change needs two things at once: a significant Mann–Whitney U test (two-sided, at
``alpha``) and a ratio of medians that differs from 1 by more than ``min_effect``. Its
``change`` says which way the candidate's median moved (``"higher"`` or ``"lower"``), and
its ``verdict`` what that means for the quantity: ``"better"`` or ``"worse"`` by the
direction the caller gives (lower is better for times, higher for accuracies and rates),
``"changed"`` when the caller gives none.
Within one run samples are many and the test finds tiny differences; between runs the
machine's state (frequency, neighbours, placement, memory layout) moves medians by a few
tenths of a percent to several percent, which no p-value computed from one run's samples
accounts for. The effect threshold keeps such drifts from being reported as changes.
``docs/measurement.md`` gives the reasoning behind the defaults.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as _st

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "DEFAULT_ALPHA",
    "DEFAULT_MIN_EFFECT",
    "VERDICTS",
    "Comparison",
    "compare",
    "judge",
    "within_run_test",
]

#: Significance level of the Mann–Whitney U test.
DEFAULT_ALPHA = 0.01
#: Smallest relative change of the median reported as a change (5%).
DEFAULT_MIN_EFFECT = 0.05
#: Resamples and seed of the bootstrap CI of the ratio of medians (deterministic).
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20150101
#: Every verdict :func:`compare` gives.
VERDICTS: tuple[str, ...] = ("better", "worse", "same", "changed")


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare`.

    ``ratio`` is candidate median / baseline median with its percentile-bootstrap CI
    (``ratio_ci_low``, ``ratio_ci_high`` at ``confidence``; seeded, so the same samples
    always give the same interval). ``p_value`` is the two-sided Mann–Whitney U test's.
    ``effect_size`` is Cliff's delta of candidate against baseline, P(c > b) − P(c < b),
    from −1 (every candidate sample smaller) to +1 (every one larger).
    ``change`` is ``"higher"`` or ``"lower"`` (the candidate's median, when the
    difference is significant and above ``min_effect``), else ``"none"``. ``verdict`` is
    ``"better"`` or ``"worse"`` for that change judged with ``lower_is_better``,
    ``"changed"`` when ``lower_is_better`` is ``None`` (no known direction), and
    ``"same"`` when there is no change.
    """

    baseline_median: float
    candidate_median: float
    ratio: float
    ratio_ci_low: float
    ratio_ci_high: float
    p_value: float
    effect_size: float
    alpha: float
    verdict: str
    min_effect: float = DEFAULT_MIN_EFFECT
    confidence: float = 0.95
    lower_is_better: bool | None = True
    n_baseline: int = 0
    n_candidate: int = 0
    change: str = "none"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every field."""
        return asdict(self)

    def describe(self, unit: str = "s") -> str:
        """One line: the verdict with the ratio, its CI, p and the baseline's figure."""
        moved = "" if self.change == "none" else f" ({self.change})"
        return (
            f"{self.verdict}{moved}: candidate/baseline = {self.ratio:.3f} "
            f"[{self.ratio_ci_low:.3f}, {self.ratio_ci_high:.3f}] "
            f"(baseline median {self.baseline_median:.4g} {unit}, p = {self.p_value:.2g}, "
            f"Cliff's delta = {self.effect_size:+.2f})"
        )


def judge(change: str, lower_is_better: bool | None) -> str:
    """The verdict on a ``change`` (``"higher"``, ``"lower"`` or ``"none"``).

    ``"better"`` or ``"worse"`` by ``lower_is_better``; ``"changed"`` when it is ``None``;
    ``"same"`` for no change.
    """
    if change == "none":
        return "same"
    if lower_is_better is None:
        return "changed"
    return "better" if (change == "lower") == lower_is_better else "worse"


def _ratio_of_medians(baseline: Any, candidate: Any, axis: int = -1) -> Any:
    return np.median(candidate, axis=axis) / np.median(baseline, axis=axis)


def _ratio_ci(
    b: np.ndarray[Any, Any], c: np.ndarray[Any, Any], confidence: float
) -> tuple[float, float]:
    """Percentile-bootstrap CI of the ratio of medians; the range of ratios below 2 samples."""
    if b.size < 2 or c.size < 2:
        return float(c.min() / b.max()), float(c.max() / b.min())
    ratio = float(_ratio_of_medians(b, c))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate resamples: handled below
        res = _st.bootstrap(
            (b, c),
            _ratio_of_medians,
            n_resamples=BOOTSTRAP_RESAMPLES,
            batch=max(1, min(BOOTSTRAP_RESAMPLES, 4_000_000 // (b.size + c.size))),
            vectorized=True,
            paired=False,
            confidence_level=confidence,
            method="percentile",
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(low) and math.isfinite(high)):
        return ratio, ratio
    return low, high


def within_run_test(baseline: ArrayLike, candidate: ArrayLike) -> tuple[float, float]:
    """(p, Cliff's delta): the two-sided Mann–Whitney U test of the pooled samples.

    The samples of one process share that process's luck, so this p-value describes
    the samples, not the runs: ``d5 results compare`` shows it as information and takes
    its verdict from the processes (:func:`d5core.measure.nested.compare_nested`).
    """
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    test = _st.mannwhitneyu(c, b, alternative="two-sided", method="auto")
    p = float(test.pvalue)
    if not math.isfinite(p):  # every sample equal: nothing to tell apart
        p = 1.0
    return p, 2.0 * float(test.statistic) / (b.size * c.size) - 1.0


def compare(
    baseline: ArrayLike,
    candidate: ArrayLike,
    *,
    alpha: float = DEFAULT_ALPHA,
    lower_is_better: bool | None = True,
    min_effect: float = DEFAULT_MIN_EFFECT,
    confidence: float = 0.95,
) -> Comparison:
    """Compare the samples of a candidate with those of a baseline.

    :param baseline: the reference samples (e.g. seconds per call).
    :param candidate: the samples of the thing compared with it.
    :param alpha: significance level of the two-sided Mann–Whitney U test.
    :param lower_is_better: ``True`` for costs (time, energy, loss, errors), ``False``
        for rates and accuracies, ``None`` when no direction is better.
    :param min_effect: the ratio of medians must differ from 1 by more than this.
    :param confidence: level of the ratio's CI.
    :raises ValueError: on empty, NaN or infinite samples, or a baseline median of 0.
    """
    b = np.asarray(baseline, dtype=float).ravel()
    c = np.asarray(candidate, dtype=float).ravel()
    for what, x in (("baseline", b), ("candidate", c)):
        if x.size == 0:
            raise ValueError(f"the {what} has no samples")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"the {what} has NaN or infinite samples")
    b_med, c_med = float(np.median(b)), float(np.median(c))
    if b_med == 0.0:
        raise ValueError("the baseline median is 0: a ratio to it is undefined")
    ratio = c_med / b_med
    low, high = _ratio_ci(b, c, confidence)
    p, delta = within_run_test(b, c)
    change = "none"
    if p < alpha and abs(ratio - 1.0) > min_effect:
        change = "higher" if ratio > 1.0 else "lower"
    return Comparison(
        baseline_median=b_med,
        candidate_median=c_med,
        ratio=ratio,
        ratio_ci_low=low,
        ratio_ci_high=high,
        p_value=p,
        effect_size=delta,
        alpha=alpha,
        verdict=judge(change, lower_is_better),
        min_effect=min_effect,
        confidence=confidence,
        lower_is_better=lower_is_better,
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        change=change,
    )
