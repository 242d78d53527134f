"""The loss curve of training and testing, with divergence flagged as a result, and the
time until the test loss first reaches a target (:class:`TimeToLoss`)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from d5core.bus import TEST_PASS
from d5core.levels.metrics import Metric, MetricResult
from d5core.lv2.metrics.accuracy import TimeToAccuracy
from d5core.metrics._common import (
    Progress,
    StepBlock,
    StepFeed,
    accuracy_of,
    completion_events,
    finish,
    json_number,
    payload_of,
)

__all__ = ["LossCurve", "TimeToLoss"]


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            return float(value)  # numpy scalars, 0-d arrays, framework scalars
        except (TypeError, ValueError):
            return None
    return float(value)


class LossCurve(Metric):
    """The whole training loss curve ``(step, epoch, loss)`` and the test curve.

    Training points come from the ``loss`` in finished ``train.step`` payloads; test
    points ``(step, epoch, loss, accuracy)`` from finished ``test.pass`` payloads. A NaN
    or infinite loss is divergence: ``status`` becomes ``"diverged"`` and ``diverged_at``
    says where (a result, not a crash). ``value`` is the last training loss while it is
    finite, else ``None``. Non-finite losses are stored as ``"nan"``, ``"inf"`` or
    ``"-inf"`` because strict JSON has no such numbers.
    """

    name: ClassVar[str] = "loss_curve"
    unit: ClassVar[str] = "loss"
    better: ClassVar[str] = "lower"

    def __init__(self) -> None:
        self.progress = Progress()
        self.curve: list[tuple[int, int, float]] = []
        self.test_curve: list[tuple[int | None, int, float | None, float | None]] = []
        self.diverged_at: dict[str, Any] | None = None
        self.steps_without_loss = 0

    def attach(self, bus: Any) -> None:
        self.progress = StepFeed.of(bus).join(self, self._on_step, on_steps=self._on_steps)
        for name in completion_events(TEST_PASS):
            self.listen(bus, name, self._on_test)

    def _diverged(self, where: str, step: int | None, epoch: int, loss: float) -> None:
        if self.diverged_at is None:
            self.diverged_at = {
                "in": where,
                "step": step,
                "epoch": epoch,
                "loss": json_number(loss),
            }

    def _on_step(self, event: Any, step: int, epoch: int) -> None:
        loss = payload_of(event).get("loss")
        if type(loss) is not float:  # a Python float, as the trainer's, is taken as it is
            loss = _as_float(loss)
            if loss is None:
                self.steps_without_loss += 1
                return
        self.curve.append((step, epoch, loss))
        if not math.isfinite(loss):
            self._diverged("train", step, epoch, loss)

    def _on_steps(self, block: StepBlock) -> None:
        epoch, curve = block.epoch, self.curve
        for step, value in enumerate(block.losses, block.first_step):
            loss = value if type(value) is float else _as_float(value)
            if loss is None:
                self.steps_without_loss += 1
                continue
            curve.append((step, epoch, loss))
            if not math.isfinite(loss):
                self._diverged("train", step, epoch, loss)

    def _on_test(self, event: Any) -> None:
        payload = payload_of(event)
        loss = _as_float(payload.get("loss"))
        found = accuracy_of(payload)
        if loss is None and found is None:
            return
        step, epoch = self.progress.at(event)
        self.test_curve.append((step, epoch, loss, None if found is None else found[0]))
        if loss is not None and not math.isfinite(loss):
            self._diverged("test", step, epoch, loss)

    def result(self) -> MetricResult:
        if not self.curve and not self.test_curve:
            why = (
                f"{self.steps_without_loss} train.step events carried no loss"
                if self.steps_without_loss
                else "no train.step or test.pass with a loss"
            )
            return finish(self, self.unavailable(why))
        last = self.curve[-1][2] if self.curve else None
        out: MetricResult = {
            "value": last if last is not None and math.isfinite(last) else None,
            "unit": self.unit,
            "status": "diverged" if self.diverged_at else "ok",
            "diverged": self.diverged_at is not None,
        }
        if self.diverged_at:
            out["diverged_at"] = self.diverged_at
        out["steps"] = len(self.curve)
        out["curve"] = [[s, e, json_number(v)] for s, e, v in self.curve]
        out["test_curve"] = [
            [s, e, None if v is None else json_number(v), a] for s, e, v, a in self.test_curve
        ]
        if self.steps_without_loss:
            out["steps_without_loss"] = self.steps_without_loss
        return finish(self, out)


class TimeToLoss(TimeToAccuracy):
    """Wall time from the first touch of data until the mean test loss first falls to
    ``target`` or below: :class:`~d5core.lv2.metrics.accuracy.TimeToAccuracy` (MLPerf's
    clock) on the test passes' ``loss`` with ``mode="min"``. The target of a regression
    (``target_loss``), where accuracy means nothing.

    :param target: the mean test loss to reach, for example ``0.05``.
    """

    name: ClassVar[str] = "time_to_loss"

    def __init__(self, target: float | None = None) -> None:
        super().__init__(target, key="loss", mode="min")
