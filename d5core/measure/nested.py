"""Statistics of a nested design: samples within worker processes, processes within a run.

The samples of one process share that process's luck: where its memory landed, which
cores it ran on, what ran beside it. Identical invocations differ by far more than the
confidence interval of one process says. So d5 treats the *process* as the unit of
independence (``docs/measurement.md``, "Between runs"):

- :func:`summarize_nested` reports the median of the process medians, a confidence
  interval from the spread *between* processes (a Student-t interval on the logarithms of
  the process medians), the typical interval *within* one process, and the share of the
  variance that lies between processes;
- :func:`compare_nested` compares two such sets process by process (Welch's t-test on
  the log process medians) and calls a change only when it is also larger than the
  machine's noise floor; with too few processes on a side it says so and judges the
  change against the noise floor alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as _st

from d5core.measure.compare import judge
from d5core.measure.stats import median_ci

__all__ = [
    "BETWEEN_UNKNOWN",
    "DEFAULT_NESTED_ALPHA",
    "MIN_PROCESSES",
    "NestedComparison",
    "NestedSummary",
    "between_ci",
    "between_share",
    "compare_nested",
    "summarize_nested",
]

#: The label of a summary or comparison made from a single process.
BETWEEN_UNKNOWN = "between-run variance unknown"
#: Processes needed on each side of :func:`compare_nested` for its t-test.
MIN_PROCESSES = 3
#: Significance level of :func:`compare_nested` (as :data:`d5core.measure.compare.DEFAULT_ALPHA`:
#: a comparison of two runs tests many benchmarks at once).
DEFAULT_NESTED_ALPHA = 0.01
#: How the between-process interval is computed (stored with each summary).
_BETWEEN_METHOD = "student-t on log process medians"


# -- one set of processes -----------------------------------------------------------------


@dataclass(frozen=True)
class NestedSummary:
    """What d5 reports about samples taken in several independent processes.

    ``median`` is the median of ``process_medians``. ``ci_low``/``ci_high`` is its
    interval at ``confidence`` from the spread between processes (``None`` with one
    process: the summary is then labelled :data:`BETWEEN_UNKNOWN`).
    ``within_ci_low``/``within_ci_high`` is the interval one process typically reports:
    each process's order-statistic interval of its median, taken relative to that median;
    the median of those relative bounds, applied to ``median``. ``between_share`` is the
    share of the variance of the log samples that lies between processes (random-effects
    one-way ANOVA, clipped into [0, 1]; ``None`` with one process or one sample per
    process). ``log_sd_between`` is the standard deviation of the log process medians.
    """

    n_processes: int
    n_samples: int
    process_medians: list[float]
    process_sizes: list[int]
    median: float
    ci_low: float | None
    ci_high: float | None
    confidence: float
    within_ci_low: float
    within_ci_high: float
    between_share: float | None
    log_sd_between: float | None
    method: str = _BETWEEN_METHOD

    @property
    def between_known(self) -> bool:
        """Whether the spread between processes could be estimated (two processes or more)."""
        return self.ci_low is not None and self.ci_high is not None

    @property
    def label(self) -> str:
        """:data:`BETWEEN_UNKNOWN` for a single process; empty otherwise."""
        return "" if self.between_known else BETWEEN_UNKNOWN

    @property
    def ci_rel_halfwidth(self) -> float:
        """The larger distance from the median to a between-process CI bound, relative to
        the median; infinite when the between-process variance is unknown."""
        if self.ci_low is None or self.ci_high is None:
            return math.inf
        return max(self.median - self.ci_low, self.ci_high - self.median) / self.median

    @property
    def within_rel_halfwidth(self) -> float:
        """:attr:`ci_rel_halfwidth` of the within-process interval."""
        return max(self.median - self.within_ci_low, self.within_ci_high - self.median) / (
            self.median
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every field, with :attr:`label`."""
        data = asdict(self)
        data["label"] = self.label
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NestedSummary:
        """The summary stored by :meth:`to_json`; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _log_processes(per_process: Sequence[ArrayLike]) -> list[np.ndarray[Any, Any]]:
    """Each process's samples as an array, checked: present, finite and positive."""
    if len(per_process) == 0:
        raise ValueError("a nested summary needs the samples of at least one process")
    arrays = []
    for i, samples in enumerate(per_process):
        x = np.asarray(samples, dtype=float).ravel()
        if x.size == 0:
            raise ValueError(f"process {i} has no samples")
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise ValueError(
                f"process {i} has a sample that is not a positive finite number: the "
                "between-process statistics work on logarithms of times"
            )
        arrays.append(x)
    return arrays


def between_ci(process_medians: ArrayLike, confidence: float = 0.95) -> tuple[float, float] | None:
    """The confidence interval of the centre of the process medians, from their spread.

    A Student-t interval on the logarithms: ``exp(mean ± t(k−1) · sd / √k)``. Each process
    median is close to normal (the central limit theorem for medians), and so, for
    multiplicative process effects, is its logarithm; the t-interval then has its nominal
    coverage from two processes on (order-statistic intervals need six). The interval is
    widened, if need be, to contain the median of the process medians, the figure d5
    reports. ``None`` for fewer than two processes.
    """
    m = np.asarray(process_medians, dtype=float).ravel()
    k = int(m.size)
    if k < 2:
        return None
    logs = np.log(m)
    centre, sd = float(np.mean(logs)), float(np.std(logs, ddof=1))
    half = float(_st.t.ppf(0.5 + confidence / 2.0, k - 1)) * sd / math.sqrt(k)
    median = float(np.median(m))
    return min(math.exp(centre - half), median), max(math.exp(centre + half), median)


def between_share(per_process: Sequence[ArrayLike]) -> float | None:
    """The share of the variance of the log samples that lies between processes.

    Random-effects one-way ANOVA with unequal group sizes: ``σ²_between = (MSB − MSW)/n₀``
    (clipped at 0), ``n₀ = (N − Σnᵢ²/N)/(k − 1)``; the share is
    ``σ²_between / (σ²_between + MSW)``. ``None`` for one process, or when no process has
    two samples (the within-process variance is then unknown).
    """
    groups = [np.log(x) for x in _log_processes(per_process)]
    k = len(groups)
    sizes = np.array([g.size for g in groups], dtype=float)
    n = float(sizes.sum())
    if k < 2 or n - k < 1:
        return None
    means = np.array([g.mean() for g in groups])
    grand = float(np.concatenate(groups).mean())
    msb = float(np.sum(sizes * (means - grand) ** 2)) / (k - 1)
    msw = float(sum(np.sum((g - g.mean()) ** 2) for g in groups)) / (n - k)
    n0 = (n - float(np.sum(sizes**2)) / n) / (k - 1)
    var_between = max(0.0, (msb - msw) / n0)
    total = var_between + msw
    if total == 0.0:
        return 0.0
    return min(1.0, max(0.0, var_between / total))


def _within_ci(
    arrays: Sequence[np.ndarray[Any, Any]], medians: np.ndarray[Any, Any], confidence: float
) -> tuple[float, float]:
    """Median of the processes' relative order-statistic bounds (see :class:`NestedSummary`)."""
    lows, highs = [], []
    for x, med in zip(arrays, medians, strict=True):
        lo, hi = median_ci(x, confidence)
        lows.append(lo / med)
        highs.append(hi / med)
    return float(np.median(lows)), float(np.median(highs))


def summarize_nested(per_process: Sequence[ArrayLike], confidence: float = 0.95) -> NestedSummary:
    """Summarise samples taken in several processes (one array of samples per process).

    :raises ValueError: when there is no process, a process has no samples, or a sample
        is not a positive finite number.
    """
    arrays = _log_processes(per_process)
    medians = np.array([float(np.median(x)) for x in arrays])
    median = float(np.median(medians))
    within_lo, within_hi = _within_ci(arrays, medians, confidence)
    ci = between_ci(medians, confidence)
    return NestedSummary(
        n_processes=len(arrays),
        n_samples=int(sum(x.size for x in arrays)),
        process_medians=[float(v) for v in medians],
        process_sizes=[int(x.size) for x in arrays],
        median=median,
        ci_low=None if ci is None else ci[0],
        ci_high=None if ci is None else ci[1],
        confidence=float(confidence),
        within_ci_low=median * within_lo,
        within_ci_high=median * within_hi,
        between_share=between_share(arrays),
        log_sd_between=float(np.std(np.log(medians), ddof=1)) if len(arrays) > 1 else None,
    )


# -- two sets of processes -----------------------------------------------------------------


@dataclass(frozen=True)
class NestedComparison:
    """The outcome of :func:`compare_nested`.

    ``ratio`` is candidate median / baseline median (medians of process medians), with
    its interval ``ratio_ci_low``/``ratio_ci_high`` at ``confidence`` (``None`` when
    nothing bounds it: a single process on a side and no noise floor). ``p_value`` is
    the test's (``None`` when there is none). ``method`` is ``"welch"`` (Welch's t-test
    on log process medians), ``"paired"`` (paired t-test on the per-round log ratios)
    or ``"noise-floor"`` (too few processes: a z-test that takes the noise floor as the
    spread of one process). ``change`` is ``"higher"``/``"lower"``/``"none"``,
    ``verdict`` ``"better"``/``"worse"``/``"same"`` (``"changed"`` when
    ``lower_is_better`` is ``None``), and ``reason`` says in words why.
    """

    baseline_median: float
    candidate_median: float
    ratio: float
    ratio_ci_low: float | None
    ratio_ci_high: float | None
    p_value: float | None
    alpha: float
    min_effect: float
    confidence: float
    lower_is_better: bool | None
    n_baseline: int
    n_candidate: int
    min_processes: int
    enough_processes: bool
    method: str
    change: str
    verdict: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every field."""
        return asdict(self)

    def describe(self, unit: str = "s") -> str:
        """One line: the verdict, the ratio with its interval, the base, and the reason."""
        ci = (
            ""
            if self.ratio_ci_low is None or self.ratio_ci_high is None
            else f" [{self.ratio_ci_low:.3f}, {self.ratio_ci_high:.3f}]"
        )
        moved = "" if self.change == "none" else f" ({self.change})"
        return (
            f"{self.verdict}{moved}: candidate/baseline = {self.ratio:.3f}{ci} (baseline "
            f"median {self.baseline_median:.4g} {unit} over {self.n_baseline} processes, "
            f"candidate over {self.n_candidate}): {self.reason}"
        )


def _medians(side: NestedSummary | Sequence[ArrayLike], what: str) -> np.ndarray[Any, Any]:
    if isinstance(side, NestedSummary):
        return np.asarray(side.process_medians, dtype=float)
    try:
        return np.array([float(np.median(x)) for x in _log_processes(side)])
    except ValueError as exc:
        raise ValueError(f"the {what}: {exc}") from exc


def _t_test(
    b: np.ndarray[Any, Any], c: np.ndarray[Any, Any], paired: bool, confidence: float
) -> tuple[float, float, float]:
    """(p, low, high): the t-test's p-value and the interval of the log ratio's centre."""
    if paired:
        d = c - b
        k = d.size
        mean, se, df = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(k), float(k - 1)
    else:
        vb, vc = float(b.var(ddof=1)) / b.size, float(c.var(ddof=1)) / c.size
        mean, se = float(c.mean() - b.mean()), math.sqrt(vb + vc)
        df = (vb + vc) ** 2 / (vb**2 / (b.size - 1) + vc**2 / (c.size - 1)) if se > 0 else 1.0
    if se == 0.0:  # every process equal on both sides: exact, or exactly different
        return (1.0 if mean == 0.0 else 0.0), mean, mean
    p = float(2.0 * _st.t.sf(abs(mean) / se, df))
    half = float(_st.t.ppf(0.5 + confidence / 2.0, df)) * se
    return p, mean - half, mean + half


def _pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _enough_reason(p: float, alpha: float, effect: float, min_effect: float) -> str:
    if p >= alpha:
        return f"not significant between processes (p = {p:.2g} >= alpha = {alpha:g})"
    if effect <= min_effect:
        return (
            f"significant (p = {p:.2g}) but the change of {_pct(effect)} is within the "
            f"noise floor of {_pct(min_effect)}"
        )
    significant = f"significant between processes (p = {p:.2g} < {alpha:g})"
    if min_effect == 0.0:
        return f"{significant}; a change of {_pct(effect)} (no noise floor was given)"
    return (
        f"{significant}; the change of {_pct(effect)} exceeds the noise floor of {_pct(min_effect)}"
    )


def _too_few(kb: int, kc: int, need: int) -> str:
    return (
        f"{BETWEEN_UNKNOWN}: {kb} baseline and {kc} candidate processes, fewer than the "
        f"{need} needed on each side to estimate it"
    )


class _Verdict(NamedTuple):
    called: bool
    p_value: float | None
    low: float | None
    high: float | None
    reason: str


def _by_processes(
    b: np.ndarray[Any, Any],
    c: np.ndarray[Any, Any],
    ratio: float,
    alpha: float,
    min_effect: float,
    confidence: float,
    paired: bool,
) -> _Verdict:
    """Enough processes: the t-test on log process medians, and the noise floor."""
    p, lo_log, hi_log = _t_test(np.log(b), np.log(c), paired, confidence)
    effect = abs(ratio - 1.0)
    return _Verdict(
        called=p < alpha and effect > min_effect,
        p_value=p,
        low=min(math.exp(lo_log), ratio),
        high=max(math.exp(hi_log), ratio),
        reason=_enough_reason(p, alpha, effect, min_effect),
    )


def _by_noise_floor(
    kb: int, kc: int, ratio: float, alpha: float, min_effect: float, confidence: float
) -> _Verdict:
    """Too few processes: a z-test that takes the floor as one process's spread."""
    if min_effect == 0.0:
        return _Verdict(
            False, None, None, None, "no noise floor is known to judge by (run 'd5 calibrate')"
        )
    effect = abs(ratio - 1.0)
    spread = math.log1p(min_effect) * math.sqrt(1.0 / kb + 1.0 / kc)
    p = float(2.0 * _st.norm.sf(abs(math.log(ratio)) / spread))
    half = float(_st.norm.ppf(0.5 + confidence / 2.0)) * spread
    called = p < alpha and effect > min_effect
    return _Verdict(
        called=called,
        p_value=p,
        low=ratio * math.exp(-half),
        high=ratio * math.exp(half),
        reason=(
            f"the change of {_pct(effect)} is {'beyond' if called else 'within'} what a "
            f"noise floor of {_pct(min_effect)} allows (p = {p:.2g})"
        ),
    )


def compare_nested(
    baseline: NestedSummary | Sequence[ArrayLike],
    candidate: NestedSummary | Sequence[ArrayLike],
    *,
    alpha: float = DEFAULT_NESTED_ALPHA,
    min_effect: float = 0.0,
    lower_is_better: bool | None = True,
    min_processes: int = MIN_PROCESSES,
    confidence: float = 0.95,
    paired: bool = False,
) -> NestedComparison:
    """Compare two sets of processes at the level of processes.

    Each side is a :class:`NestedSummary` or a list of per-process sample arrays.

    With at least ``min_processes`` processes on each side, a change is called when
    Welch's t-test on the log process medians gives ``p < alpha`` **and** the ratio of
    the medians differs from 1 by more than ``min_effect``. With fewer, the between-run
    variance is unknown; the reason says so, and a change is called only when the ratio
    is beyond what the noise floor allows: ``|log ratio| > z(1 − alpha/2) · s ·
    √(1/k_b + 1/k_c)`` with ``s = log(1 + min_effect)`` (the floor taken as the spread of
    a single process's median); without a noise floor (``min_effect`` 0) no change is
    called at all.

    :param alpha: significance level.
    :param min_effect: the machine's noise floor (``d5 calibrate``): the relative
        standard deviation of one invocation's median; no smaller change is called.
    :param lower_is_better: ``True`` for times, ``False`` for rates, ``None`` when no
        direction is better.
    :param min_processes: processes needed on each side for the t-test (at least 2).
    :param confidence: level of the ratio's interval.
    :param paired: the two sides ran in the same rounds (process *i* of each side in
        one worker): a paired t-test on the per-round log ratios, which removes the
        rounds' shared luck. Needs equal process counts.
    :raises ValueError: for bad samples, ``alpha`` outside (0, 1), a negative
        ``min_effect``, ``min_processes`` below 2, or unequal counts when ``paired``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    if not min_effect >= 0.0:
        raise ValueError(f"min_effect (the noise floor) must be >= 0, got {min_effect}")
    if min_processes < 2:
        raise ValueError(f"min_processes must be at least 2, got {min_processes}")
    b, c = _medians(baseline, "baseline"), _medians(candidate, "candidate")
    if paired and b.size != c.size:
        raise ValueError(
            f"a paired comparison needs as many candidate processes as baseline ones, "
            f"got {b.size} and {c.size}"
        )
    b_med, c_med = float(np.median(b)), float(np.median(c))
    ratio = c_med / b_med
    enough = min(b.size, c.size) >= min_processes
    if enough:
        method = "paired" if paired else "welch"
        verdict = _by_processes(b, c, ratio, alpha, min_effect, confidence, paired)
    else:
        method = "noise-floor"
        found = _by_noise_floor(b.size, c.size, ratio, alpha, min_effect, confidence)
        verdict = found._replace(
            reason=f"{_too_few(b.size, c.size, min_processes)}; {found.reason}"
        )
    change = ("higher" if ratio > 1.0 else "lower") if verdict.called else "none"
    return NestedComparison(
        baseline_median=b_med,
        candidate_median=c_med,
        ratio=ratio,
        ratio_ci_low=verdict.low,
        ratio_ci_high=verdict.high,
        p_value=verdict.p_value,
        alpha=alpha,
        min_effect=min_effect,
        confidence=confidence,
        lower_is_better=lower_is_better,
        n_baseline=int(b.size),
        n_candidate=int(c.size),
        min_processes=min_processes,
        enough_processes=enough,
        method=method,
        change=change,
        verdict=judge(change, lower_is_better),
        reason=verdict.reason,
    )
