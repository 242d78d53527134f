"""Find-peak for the server scenario: the highest target QPS whose run is VALID.

Why a bisection and not LoadGen's own mode
------------------------------------------
LoadGen 6.0.17 has a ``TestMode.FindPeakPerformance`` and it runs from Python here
(probed twice with a 2 ms busy-wait SUT completing from a worker thread, 1 s runs, a
20 ms bound: about 20 s and 13 runs for one probe; peaks of 463 and 175 QPS as the
machine's load changed). d5 does not use it, for four reasons found in those probes and
in LoadGen's ``loadgen.cc``:

- it keeps a QPS when the latency percentile is met (``PerfConstraintsMet``) and ignores
  early stopping and the minimum query count, so the peak it reports can be INVALID
  (both probes' final runs were: "Early stopping satisfied: NO"), while d5 reports
  the highest VALID run;
- it logs only the bounds it moves between, not each run's validity or percentiles, so
  the runs it made cannot all be reported;
- it stops at a fixed number of decimals (``server_find_peak_qps_decimals_of_precision``)
  with no bound on the number of runs;
- all its runs share one process, one warm-up and one sample library, where d5 runs each
  setting in a fresh worker process.

So :func:`find_peak` brackets and bisects with :func:`~d5core.loadgen.loadgen.run_scenario`
in performance mode: each run is a full, separately logged LoadGen run, judged VALID or
INVALID by LoadGen and by d5's checks, and every run made is in the result.

The search
----------
1. Run at ``low`` (default: the settings' target QPS, else the QPS the worker derives
   from its calibration: half the single-sample rate).
2. If that run is INVALID, halve the QPS until one is VALID; if it is VALID, double it
   until one is INVALID, or take ``high`` as the (untested) upper end when given.
3. Bisect between the highest VALID QPS and the lowest INVALID one (or ``high``) until
   they are within ``tolerance`` of each other (relative to the upper end).

The search never makes more than ``max_runs`` runs; a result that ran out of runs before
the bracket closed says so (``converged`` is false).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.loadgen.loadgen import ScenarioResult
    from d5core.loadgen.settings import ScenarioSettings

__all__ = ["PeakResult", "PeakRun", "find_peak"]


class PeakRun(NamedTuple):
    """One run of the search: its target QPS, whether it was VALID, its p99 latency (s)."""

    qps: float
    valid: bool
    p99: float | None


@dataclass
class PeakResult:
    """What :func:`find_peak` found, with every run it made, in the order made."""

    executor: str
    #: The highest target QPS whose run was VALID; ``None`` when no run was.
    qps: float | None
    runs: list[PeakRun] = field(default_factory=list)
    #: How the peak was searched: ``"bisection"`` (see the module's docstring), or
    #: ``"loadgen"`` for LoadGen's own find-peak mode.
    method: str = "bisection"
    #: Whether the bracket closed within the tolerance before the runs ran out.
    converged: bool = False
    #: The lowest target QPS whose run was INVALID (``None``: none was, or none tried).
    lowest_invalid: float | None = None
    #: The full result of each run, in the order of :attr:`runs`.
    results: list[ScenarioResult] = field(default_factory=list, repr=False)
    #: Per run, LoadGen's and d5's failed checks (empty for a VALID run).
    failed_checks: list[list[str]] = field(default_factory=list)

    @property
    def message(self) -> str:
        """One line: the peak (or that none was found), the bracket and the runs made."""
        runs = f"{len(self.runs)} run(s) by {self.method}"
        if self.qps is None:
            tried = ", ".join(f"{r.qps:.4g}" for r in self.runs)
            return (
                f"{self.executor}: no server run was VALID ({runs}, target QPS tried: "
                f"{tried}); lower the target QPS or raise the latency bound"
            )
        above = (
            f", {self.lowest_invalid:.4g} INVALID"
            if self.lowest_invalid is not None
            else ", no INVALID run above it"
        )
        closed = "" if self.converged else " (not converged: raise max_runs)"
        return f"{self.executor}: peak server QPS {self.qps:.4g} VALID{above}; {runs}{closed}"

    def to_json(self) -> dict[str, Any]:
        """The result as plain JSON types (without the full per-run results)."""
        return {
            "executor": self.executor,
            "qps": self.qps,
            "method": self.method,
            "converged": self.converged,
            "lowest_invalid": self.lowest_invalid,
            "runs": [
                {"qps": r.qps, "valid": r.valid, "p99": r.p99, "failed_checks": checks}
                for r, checks in zip(self.runs, self.failed_checks, strict=True)
            ],
            "log_dirs": [r.log_dir for r in self.results],
            "message": self.message,
        }


def _positive(name: str, value: float | None) -> float | None:
    if value is None:
        return None
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise UsageError(f"find-peak {name} must be a positive number of QPS, got {value!r}")
    return float(value)


def find_peak(
    model: str | Path,
    executor: str,
    settings: ScenarioSettings,
    log_dir: Path,
    *,
    low: float | None = None,
    high: float | None = None,
    tolerance: float = 0.05,
    max_runs: int = 8,
    batch: int | None = None,
) -> PeakResult:
    """The highest server target QPS at which ``executor`` runs VALID (see the module's
    docstring for the search and why it is not LoadGen's own find-peak mode).

    :param settings: server settings; their ``target_qps`` is the first QPS tried unless
        ``low`` is given (when both are ``None``, the first run takes the QPS the worker
        derives from its calibration), their latency bound is the bound every run is
        held to, and their ``mode`` is ignored (every run is a performance run).
    :param log_dir: each run's LoadGen logs go to a subdirectory named after its order
        and target QPS.
    :param low: the first QPS tried; ``high``: the upper end of the search (not run
        unless the bisection reaches it), default unbounded (doubling).
    :param tolerance: stop when the VALID and INVALID ends are this close, relative.
    :param max_runs: the most runs the search makes.
    :raises UsageError: one line, for settings of another scenario, or a bad ``low``,
        ``high``, ``tolerance`` or ``max_runs``.
    """
    from d5core.loadgen import loadgen

    if settings.scenario != "server":
        raise UsageError(
            f"--find-peak searches the server scenario's QPS; use --scenario server, "
            f"not {settings.scenario}"
        )
    lo = _positive("low", low)
    hi = _positive("high", high)
    if lo is not None and hi is not None and hi <= lo:
        raise UsageError(f"find-peak high {hi:g} must be above low {lo:g}")
    if not (isinstance(tolerance, int | float) and 0 < tolerance < 1):
        raise UsageError(f"find-peak tolerance must be between 0 and 1, got {tolerance!r}")
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise UsageError(f"find-peak max_runs must be an integer >= 1, got {max_runs!r}")
    start = lo or settings.target_qps
    if hi is not None and (start is None or start >= hi):
        start = hi / 2
    out = PeakResult(executor=executor, qps=None)
    root = Path(log_dir)

    def trial(asked: float | None) -> float:
        """Run at ``asked`` QPS (``None``: the worker's choice); return the QPS run."""
        index = len(out.runs)
        name = f"run{index:02d}-qps{asked:.6g}" if asked is not None else f"run{index:02d}"
        run_dir = root / name
        run_dir.mkdir(parents=True, exist_ok=True)
        trial_settings = settings.with_values(mode="performance", target_qps=asked)
        result = loadgen.run_scenario(model, executor, trial_settings, run_dir, batch=batch)
        used = result.settings.target_qps if asked is None else asked
        if used is None or not used > 0:
            raise UsageError(
                f"the first find-peak run of {executor} did not say which target QPS it "
                f"ran; give --target-qps"
            )
        qps = float(used)
        checks = list(result.failed_checks)
        valid = result.valid is True and not checks
        out.runs.append(PeakRun(qps, valid, result.percentiles_s.get("99")))
        out.results.append(result)
        out.failed_checks.append(checks)
        if valid:
            out.qps = qps if out.qps is None else max(out.qps, qps)
        else:
            bad = out.lowest_invalid
            out.lowest_invalid = qps if bad is None else min(bad, qps)
        return qps

    def valid() -> bool:
        return out.runs[-1].valid

    # 1-2: bracket the peak between a VALID run and an INVALID one (or ``high``).
    qps = trial(start)
    if valid():
        while hi is None and len(out.runs) < max_runs:
            qps = trial(qps * 2)
            if not valid():
                break
    else:
        while len(out.runs) < max_runs:
            qps = trial(qps / 2)
            if valid():
                break

    # 3: bisect the bracket.
    def upper() -> float | None:
        return out.lowest_invalid if out.lowest_invalid is not None else hi

    def closed() -> bool:
        top = upper()
        return out.qps is not None and top is not None and (top - out.qps) <= tolerance * top

    while out.qps is not None and upper() is not None and not closed():
        if len(out.runs) >= max_runs:
            break
        top = upper()
        assert top is not None
        trial(_midpoint(out.qps, top))
    out.converged = closed()
    return out


def _midpoint(low: float, high: float) -> float:
    """The middle of ``[low, high]`` to 6 significant digits (a QPS of 841.725, not
    841.7249999999999), unless rounding would leave the open interval."""
    middle = (low + high) / 2
    rounded = float(f"{middle:.6g}")
    return rounded if low < rounded < high else middle
