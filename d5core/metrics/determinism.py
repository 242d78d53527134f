"""Determinism: how far reruns with one seed spread, and whether they are bitwise equal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import finish, json_number, one_line

__all__ = ["Determinism"]


def _named_arrays(run: Any) -> dict[str, np.ndarray]:
    """A run as named arrays: a loss-curve result, a mapping of arrays, or one array."""
    if isinstance(run, Mapping) and "curve" in run and "unit" in run:
        return {"loss": np.array([float(point[2]) for point in run["curve"]])}
    if isinstance(run, Mapping):
        return {str(k): np.asarray(v) for k, v in run.items()}
    return {"output": np.asarray(run)}


class Determinism(Metric):
    """Spread of reruns with one seed, fed the runs' loss curves or outputs with :meth:`add`.

    Each run is one array, a mapping of named arrays, or a ``loss_curve`` result. For
    every name, ``bitwise_identical`` says whether all runs have the same dtype, shape and
    bytes; ``max_abs_diff`` is the largest spread (max minus min across runs) of any
    element, NaN matching NaN; a non-finite value in one run where another has a
    different one (a run that diverged) makes it ``"inf"``. 1-D curves of different
    lengths (a run that stopped early) are compared over their common prefix and flagged.
    ``value`` is the largest ``max_abs_diff``, in the units of the compared values.
    """

    name: ClassVar[str] = "determinism"
    unit: ClassVar[str] = "1"
    better: ClassVar[str] = "lower"

    def __init__(self) -> None:
        self.runs: list[dict[str, np.ndarray]] = []

    def add(self, run: Any) -> None:
        """Add one rerun's curve or outputs."""
        try:
            self.runs.append(_named_arrays(run))
        except Exception as exc:
            self.problems.append(f"run {len(self.runs)} could not be read: {one_line(exc)}")

    @staticmethod
    def _compare(arrays: list[np.ndarray]) -> dict[str, Any]:
        first = arrays[0]
        identical = all(
            a.dtype == first.dtype and a.shape == first.shape and a.tobytes() == first.tobytes()
            for a in arrays[1:]
        )
        row: dict[str, Any] = {"bitwise_identical": identical}
        shapes = {a.shape for a in arrays}
        if len(shapes) > 1:
            if not all(a.ndim == 1 for a in arrays):
                row["problem"] = f"shapes differ: {sorted(shapes)}"
                return row
            n = min(a.shape[0] for a in arrays)
            arrays = [a[:n] for a in arrays]
            row["length_mismatch"] = sorted(s[0] for s in shapes)
        try:
            stack = np.stack([a.astype(np.float64) for a in arrays])
        except (TypeError, ValueError) as exc:
            row["problem"] = f"not numeric: {one_line(exc)}"
            return row
        finite = np.isfinite(stack).all(axis=0)
        same = (stack == stack[0]).all(axis=0) | np.isnan(stack).all(axis=0)
        mismatch = int(np.count_nonzero(~finite & ~same))
        sub = stack[:, finite]
        spread = float((sub.max(axis=0) - sub.min(axis=0)).max()) if sub.size else 0.0
        row["nonfinite_mismatch"] = mismatch
        row["max_abs_diff"] = math.inf if mismatch else spread
        return row

    def result(self) -> MetricResult:
        if len(self.runs) < 2:
            return finish(
                self,
                self.unavailable(
                    f"needs at least 2 runs to compare, got {len(self.runs)} (call add(run))"
                ),
            )
        names = list(self.runs[0])
        per_output: dict[str, dict[str, Any]] = {}
        for name in names:
            missing = [i for i, r in enumerate(self.runs) if name not in r]
            if missing:
                per_output[name] = {
                    "bitwise_identical": False,
                    "problem": f"missing from runs {missing}",
                }
                continue
            per_output[name] = self._compare([r[name] for r in self.runs])
        extra = sorted({k for r in self.runs[1:] for k in r} - set(names))
        diffs = [row["max_abs_diff"] for row in per_output.values() if "max_abs_diff" in row]
        identical = not extra and all(row["bitwise_identical"] for row in per_output.values())
        if not diffs:
            return finish(
                self,
                self.unavailable("no output could be compared across runs", per_output=per_output),
            )
        for row in per_output.values():
            if "max_abs_diff" in row:
                row["max_abs_diff"] = json_number(row["max_abs_diff"])
        out: MetricResult = {
            "value": json_number(max(diffs)),
            "unit": self.unit,
            "bitwise_identical": identical,
            "runs": len(self.runs),
        }
        out["per_output"] = per_output
        if extra:
            out["outputs_not_in_first_run"] = extra
        return finish(self, out)
