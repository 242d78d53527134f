"""Numerical error of outputs against a reference: L1, L2, max absolute, max relative."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import finish, json_number, one_line, payload_of
from d5core.validate.operators import error_metrics

__all__ = ["NumericalError"]


class NumericalError(Metric):
    """Error norms of outputs against a reference, fed arrays directly with :meth:`add`.

    The norms are those of :func:`d5core.validate.operators.error_metrics`: ``l1``,
    ``l2``, ``max_abs`` and ``max_rel`` (with a denominator floored at the tensor's
    scale), plus their relative forms and a count of disagreeing non-finite values.
    Several outputs are combined as one: ``l1`` adds, ``l2`` adds in quadrature, the
    maxima take the maximum. ``value`` is the combined ``max_rel``.

    :param event: an event to listen to whose payload carries ``actual`` and
        ``expected`` arrays (and optionally the output's ``label``); none by default.
    """

    name: ClassVar[str] = "numerical_error"
    unit: ClassVar[str] = "1"
    better: ClassVar[str] = "lower"

    def __init__(self, *, event: str | None = None) -> None:
        self.event = event
        self.per_output: dict[str, dict[str, float]] = {}
        self.failed: dict[str, str] = {}

    def attach(self, bus: Any) -> None:
        if self.event:
            self.listen(bus, self.event, self._on_event)

    def _on_event(self, event: Any) -> None:
        payload = payload_of(event)
        if "actual" in payload and "expected" in payload:
            self.add(payload["actual"], payload["expected"], name=payload.get("label"))

    def add(self, actual: Any, expected: Any, name: str | None = None) -> dict[str, float] | None:
        """Compare ``actual`` with ``expected``; return the norms, or ``None`` on failure.

        A failure (such as different shapes) is recorded under ``failed``, never raised.
        """
        key = str(name) if name is not None else f"output{len(self.per_output) + len(self.failed)}"
        try:
            norms = error_metrics(np.asarray(actual), np.asarray(expected))
        except Exception as exc:
            self.failed[key] = one_line(exc)
            return None
        self.per_output[key] = norms
        return norms

    def result(self) -> MetricResult:
        if not self.per_output:
            why = (
                "no comparison succeeded: " + "; ".join(f"{k}: {v}" for k, v in self.failed.items())
                if self.failed
                else "no arrays were compared (call add(actual, expected))"
            )
            return finish(self, self.unavailable(why, failed=dict(self.failed)))
        rows = list(self.per_output.values())
        norms = {
            "l1": sum(r["l1"] for r in rows),
            "l2": math.sqrt(sum(r["l2"] ** 2 for r in rows)),
            # numpy's max: a NaN norm (an output with non-finite values) is never hidden
            "max_abs": float(np.max([r["max_abs"] for r in rows])),
            "max_rel": float(np.max([r["max_rel"] for r in rows])),
            "nonfinite": int(sum(r["nonfinite"] for r in rows)),
        }
        out: MetricResult = {"value": json_number(norms["max_rel"]), "unit": self.unit}
        out.update({k: json_number(v) for k, v in norms.items()})
        out["per_output"] = {
            k: {n: json_number(x) for n, x in v.items()} for k, v in self.per_output.items()
        }
        if self.failed:
            out["failed"] = dict(self.failed)
        return finish(self, out)
