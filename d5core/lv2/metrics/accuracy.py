"""Accuracy metrics: training and test accuracy, final test accuracy, time to accuracy."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

from d5core.bus import TEST_PASS, TRAIN_STEP
from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import (
    RUN_START,
    Progress,
    StepBlock,
    StepFeed,
    accuracy_of,
    completion_events,
    counts_of,
    duration_s,
    finish,
    payload_of,
)

__all__ = ["FinalTestAccuracy", "TestAccuracy", "TimeToAccuracy", "TrainingAccuracy"]


class TrainingAccuracy(Metric):
    """Training accuracy per epoch, from the payloads of finished ``train.step`` events.

    A step's payload gives ``correct`` and ``count`` (or ``accuracy``, weighted by
    ``count`` when present). Steps are pooled per epoch (``correct / count`` over the
    epoch); ``value`` is the accuracy of the last epoch. The model changes during an
    epoch, so this is a running estimate, not the accuracy of the final model.

    Steps whose payload has no accuracy may have it counted for the whole epoch: the
    trainer's native path counts correct predictions on the device and publishes the
    epoch's ``correct`` and ``count`` with the end of ``train.epoch`` (one device sync
    per epoch instead of one per step). Such an epoch counts as its steps pooled.
    """

    name: ClassVar[str] = "training_accuracy"
    unit: ClassVar[str] = "fraction"
    better: ClassVar[str] = "higher"
    #: The trainer's native path counts correct predictions only for a run with a
    #: metric that reads them (a device count costs time even without a sync).
    reads_correct: ClassVar[bool] = True

    def __init__(self) -> None:
        self.progress = Progress()
        # epoch -> [sum of accuracy * weight, sum of weights, steps]
        self.epochs: dict[int, list[float]] = {}
        self.steps_without_accuracy = 0
        # epoch -> steps without an accuracy, until its end says whether it has one
        self._pending: dict[int, int] = {}

    def attach(self, bus: Any) -> None:
        feed = StepFeed.of(bus)
        self.progress = feed.join(self, self._on_step, self._on_epoch, self._on_steps)

    def _on_step(self, event: Any, _step: int, epoch: int) -> None:
        payload = payload_of(event)
        found = accuracy_of(payload) if "correct" in payload or "accuracy" in payload else None
        if found is None:
            pending = self._pending
            pending[epoch] = pending.get(epoch, 0) + 1
            return
        accuracy, weight = found
        tally = self.epochs.setdefault(epoch, [0.0, 0.0, 0])
        tally[0] += accuracy * weight
        tally[1] += weight
        tally[2] += 1

    def _on_steps(self, block: StepBlock) -> None:
        """Steps of one epoch: pooled as their events would be (``correct``/``count``)."""
        epoch = block.epoch
        if block.correct is None:  # counted for the whole epoch, or not at all
            self._pending[epoch] = self._pending.get(epoch, 0) + len(block)
            return
        tally = self.epochs.setdefault(epoch, [0.0, 0.0, 0])
        for correct, count in zip(block.correct, block.batch_sizes, strict=True):
            if count > 0:  # weighted as accuracy_of weighs an event: correct / count * count
                weight = float(count)
                tally[0] += float(correct) / weight * weight
                tally[1] += weight
                tally[2] += 1
            else:
                self._pending[epoch] = self._pending.get(epoch, 0) + 1

    def _on_epoch(self, event: Any, _step: int, epoch: int) -> None:
        """The epoch's ``correct`` and ``count`` cover its steps that had no accuracy."""
        steps = self._pending.pop(epoch, 0)
        counts = counts_of(payload_of(event))
        if counts is None:
            self.steps_without_accuracy += steps
            return
        tally = self.epochs.setdefault(epoch, [0.0, 0.0, 0])
        tally[0] += counts[0]
        tally[1] += counts[1]
        tally[2] += steps

    def result(self) -> MetricResult:
        without = self.steps_without_accuracy + sum(self._pending.values())
        if not self.epochs:
            why = (
                f"{without} train.step events carried no correct/count or accuracy"
                if without
                else "no train.step event was published"
            )
            return finish(self, self.unavailable(why))
        per_epoch = [
            {"epoch": epoch, "accuracy": acc / weight, "weight": weight, "steps": int(steps)}
            for epoch, (acc, weight, steps) in self.epochs.items()
        ]
        out: MetricResult = {"value": per_epoch[-1]["accuracy"], "unit": self.unit}
        out["epoch"] = per_epoch[-1]["epoch"]
        out["per_epoch"] = per_epoch
        if without:
            out["steps_without_accuracy"] = without
        return finish(self, out)


class _TestPasses(Metric):
    """Collects one record per finished ``test.pass`` (instant or span end)."""

    unit: ClassVar[str] = "fraction"
    better: ClassVar[str] = "higher"

    def __init__(self, *, key: str = "accuracy") -> None:
        self.key = key
        self.progress = Progress()
        self.passes: list[dict[str, Any]] = []
        self.passes_without_value = 0

    def attach(self, bus: Any) -> None:
        self.progress = StepFeed.of(bus).join(self)
        for name in completion_events(TEST_PASS):
            self.listen(bus, name, self._on_test)

    def _on_test(self, event: Any) -> None:
        found = accuracy_of(payload_of(event), self.key)
        if found is None:
            self.passes_without_value += 1
            return
        step, epoch = self.progress.at(event)
        self.passes.append(
            {
                "pass": len(self.passes),
                "step": step,
                "epoch": epoch,
                self.key: found[0],
                "t_ns": int(getattr(event, "t_ns", 0)),
            }
        )

    def _none(self) -> MetricResult:
        why = (
            f"{self.passes_without_value} test.pass events carried no {self.key}"
            if self.passes_without_value
            else "no test.pass event was published"
        )
        return finish(self, self.unavailable(why))

    def _best_pass_result(self) -> MetricResult:
        """``value``: the best pass (highest or lowest, as ``better`` says); ``final``:
        the last; ``curve``: every pass."""
        if not self.passes:
            return self._none()
        pick = max if self.better == "higher" else min
        best = pick(self.passes, key=lambda p: float(p[self.key]))
        curve = [{k: v for k, v in p.items() if k != "t_ns"} for p in self.passes]
        out: MetricResult = {"value": best[self.key], "unit": self.unit}
        out.update(best_pass=best["pass"], final=self.passes[-1][self.key], passes=len(curve))
        out["curve"] = curve
        return finish(self, out)

    def _last_pass_result(self) -> MetricResult:
        """``value``: the last pass, with its step and epoch."""
        if not self.passes:
            return self._none()
        last = self.passes[-1]
        out: MetricResult = {"value": last[self.key], "unit": self.unit}
        out.update(step=last["step"], epoch=last["epoch"], passes=len(self.passes))
        return finish(self, out)


class TestAccuracy(_TestPasses):
    """Test accuracy of every test pass; ``value`` is the best pass.

    Each finished ``test.pass`` contributes ``correct / count`` (or ``accuracy``) from its
    payload, with the step and epoch it followed. ``curve`` lists every pass; ``final``
    is the last one (see also ``final_test_accuracy``).

    :param key: the payload key of the test metric, ``"accuracy"`` by default.
    """

    __test__ = False  # not a pytest test class, despite its name
    name: ClassVar[str] = "test_accuracy"

    def result(self) -> MetricResult:
        return self._best_pass_result()


class FinalTestAccuracy(_TestPasses):
    """Test accuracy of the last test pass of the run.

    :param key: the payload key of the test metric, ``"accuracy"`` by default.
    """

    name: ClassVar[str] = "final_test_accuracy"

    def result(self) -> MetricResult:
        return self._last_pass_result()


class TimeToAccuracy(_TestPasses):
    """Wall time from the first touch of data until the test metric first reaches a target.

    MLPerf's definition: the clock starts at the earliest of ``run.start``, the first
    ``train.step.begin`` and the first ``test.pass.begin`` (or an instant ``train.step``
    or ``test.pass``, less its ``duration_ns``), and stops at the end of the first test
    pass whose metric reaches ``target``. It never pauses: evaluation, checkpoints and
    logging all count. Times come from the events' timestamps. ``value`` is ``None`` with
    ``"not_reached"`` when the target is never reached.

    :param target: the test metric to reach, for example ``0.759``.
    :param key: the payload key of the test metric, ``"accuracy"`` by default.
    :param mode: ``"max"`` when higher is better (reached at ``>= target``), ``"min"``
        when lower is (reached at ``<= target``, for a loss or perplexity).
    """

    name: ClassVar[str] = "time_to_accuracy"
    unit: ClassVar[str] = "s"
    better: ClassVar[str] = "lower"

    def __init__(
        self, target: float | None = None, *, key: str = "accuracy", mode: str = "max"
    ) -> None:
        super().__init__(key=key)
        self.target = None if target is None else float(target)
        self.mode = mode
        self.start_ns: int | None = None
        self.reached: dict[str, Any] | None = None
        self._touches: list[Callable[[], None]] = []

    def attach(self, bus: Any) -> None:
        super().attach(bus)
        if self.start_ns is not None:
            return  # attached again after the clock started: nothing left to touch
        touches = [
            self.listen(bus, name, self._on_first_touch)
            for name in (RUN_START, f"{TRAIN_STEP}.begin", f"{TEST_PASS}.begin")
        ]
        touches.append(self.listen(bus, TRAIN_STEP, self._on_completion))
        self._touches = touches

    def _touch(self, t_ns: int) -> None:
        if self.start_ns is None or t_ns < self.start_ns:
            self.start_ns = t_ns
        # Only the first touch counts: stop listening for more, so that steps publish
        # no begin event for it (unsubscribing during a delivery is safe on the bus).
        touches, self._touches = self._touches, []
        for undo in touches:
            undo()

    def _on_first_touch(self, event: Any) -> None:
        if self.start_ns is None:
            self._touch(int(event.t_ns))

    def _on_completion(self, event: Any) -> None:
        """An event that reports data touched without a begin event: start before it."""
        if self.start_ns is None:
            self._touch(int(event.t_ns) - int((duration_s(event) or 0.0) * 1e9))

    def _reaches(self, value: float) -> bool:
        assert self.target is not None
        if math.isnan(value):
            return False
        return value <= self.target if self.mode == "min" else value >= self.target

    def _on_test(self, event: Any) -> None:
        self._on_completion(event)
        before = len(self.passes)
        super()._on_test(event)
        if self.reached is not None or self.target is None or len(self.passes) == before:
            return
        last = self.passes[-1]
        if self.start_ns is None or not self._reaches(last[self.key]):
            return
        self.reached = dict(last, seconds=(last["t_ns"] - self.start_ns) / 1e9)

    def result(self) -> MetricResult:
        if self.target is None:
            return finish(self, self.unavailable("no target was given (target=...)"))
        if self.mode not in ("max", "min"):
            return finish(self, self.unavailable(f"mode must be 'max' or 'min', not {self.mode!r}"))
        if not self.passes:
            return self._none()
        common = {"target": self.target, "key": self.key, "mode": self.mode}
        if self.reached is None:
            pick = min if self.mode == "min" else max
            best = pick(float(p[self.key]) for p in self.passes)
            out: MetricResult = {"value": None, "unit": self.unit, "reached": False, **common}
            out["not_reached"] = (
                f"best {self.key} {best:g} in {len(self.passes)} test passes "
                f"did not reach the target {self.target:g}"
            )
            out["best"] = best
            return finish(self, out)
        r = self.reached
        out = {"value": r["seconds"], "unit": self.unit, "reached": True, **common}
        out.update(step=r["step"], epoch=r["epoch"], passes=r["pass"] + 1)
        out[self.key] = r[self.key]
        return finish(self, out)

    @classmethod
    def combine(cls, results: Sequence[Mapping[str, Any]]) -> MetricResult:
        """MLPerf's olympic mean of several runs: drop the fastest and the slowest, average.

        A run that did not reach the target counts as infinitely slow, so one such run
        can be the dropped slowest; with fewer than 3 runs nothing is dropped.
        """
        times = sorted(
            float(r["value"]) if isinstance(r.get("value"), int | float) else math.inf
            for r in results
        )
        out: MetricResult = {
            "unit": cls.unit,
            "runs": len(times),
            "not_reached": sum(1 for t in times if math.isinf(t)),
        }
        if not times:
            return {"unavailable": "no runs", **out}
        kept = times[1:-1] if len(times) >= 3 else times
        if any(math.isinf(t) for t in kept):
            out.update(value=None, reason="too many runs did not reach the target")
            return out
        mean = sum(kept) / len(kept)
        finite = [t for t in times if math.isfinite(t)]
        out.update(
            value=mean,
            aggregation="olympic mean" if len(times) >= 3 else "mean",
            min=finite[0],
            max=finite[-1],
        )
        return out
