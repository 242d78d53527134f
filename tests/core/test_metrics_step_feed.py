"""The built-in per-step metrics share one bus subscriber (issue 12, item 6).

Each finished ``train.step`` costs one callback however many default metrics read it,
and time to accuracy stops listening to step begins once its clock started, so that a
step publishes no begin event at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, ClassVar

import pytest

from d5core.bus import TEST_PASS, TRAIN_EPOCH, TRAIN_STEP, MetricBus
from d5core.levels.metrics import Metric, MetricResult
from d5core.lv2.metrics import LossCurve, TestAccuracy, TrainingAccuracy
from d5core.lv2.trainer import RunClock, default_metrics
from d5core.metrics import Throughput
from d5core.metrics._common import StepFeed


class CountingBus(MetricBus):
    """A bus that counts the subscriptions made to each event name, live ones only."""

    def __init__(self) -> None:
        super().__init__()
        self.live: Counter[str] = Counter()

    def subscribe(self, name: str, callback: Any) -> Callable[[], None]:
        undo = super().subscribe(name, callback)
        self.live[name] += 1
        done = False

        def unsubscribe() -> None:
            nonlocal done
            if not done:
                done = True
                self.live[name] -= 1
            undo()

        return unsubscribe


def test_default_metrics_attach_one_subscriber_per_step_event():
    bus = CountingBus()
    clock = RunClock(bus, default_metrics(0.9))
    clock.begin()  # attaches the metrics, publishes run.start
    assert bus.live[f"{TRAIN_STEP}.end"] == 1
    assert bus.live[TRAIN_STEP] == 1
    # time to accuracy's clock started at run.start: no step publishes a begin event
    assert bus.live[f"{TRAIN_STEP}.begin"] == 0
    assert not bus.wants(f"{TRAIN_STEP}.begin")
    clock.stop()
    assert +bus.live == Counter()  # every subscription undone


def test_every_step_metric_reads_the_shared_feed():
    bus = CountingBus()
    metrics = [LossCurve(), TrainingAccuracy(), Throughput()]
    for metric in metrics:
        metric.attach(bus)
    assert bus.live[f"{TRAIN_STEP}.end"] == 1
    for step in range(3):
        bus.publish(f"{TRAIN_STEP}.end", step=step, epoch=0, loss=1.0 / (step + 1),
                    correct=step, count=4, batch_size=4, duration_ns=1_000_000)  # fmt: skip
    curve, accuracy, throughput = (m.result() for m in metrics)
    assert curve["curve"] == [[0, 0, 1.0], [1, 0, 0.5], [2, 0, pytest.approx(1 / 3)]]
    assert accuracy["value"] == pytest.approx(3 / 12)
    assert throughput["value"] == pytest.approx(4000.0)


class _Failing(Metric):
    name: ClassVar[str] = "failing"

    def attach(self, bus: Any) -> None:
        self.progress = StepFeed.of(bus).join(self, self._on_step)

    def _on_step(self, event: Any, step: int, epoch: int) -> None:
        raise ValueError("bad step")

    def result(self) -> MetricResult:
        return {"value": 0, "unit": ""}


def test_a_metric_failing_in_the_feed_keeps_the_problem_and_the_others_go_on():
    bus = MetricBus()
    failing, curve = _Failing(), LossCurve()
    failing.attach(bus)
    curve.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", loss=2.0)
    bus.publish(f"{TRAIN_STEP}.end", loss=1.0)
    problems = failing.safe_result()["problems"]
    assert problems == ["handling 'train.step.end' raised ValueError: bad step"]
    assert [p[2] for p in curve.result()["curve"]] == [2.0, 1.0]
    assert bus.errors == []


def test_the_feed_unsubscribes_when_its_last_metric_detaches():
    bus = MetricBus()
    first, second = LossCurve(), TrainingAccuracy()
    first.attach(bus)
    second.attach(bus)
    first.detach()
    assert bus.wants(f"{TRAIN_STEP}.end")
    bus.publish(f"{TRAIN_STEP}.end", loss=1.0, correct=1, count=2)
    second.detach()
    assert not bus.wants(f"{TRAIN_STEP}.end") and not bus.wants(f"{TRAIN_EPOCH}.end")
    assert first.result()["unavailable"] == "no train.step or test.pass with a loss"
    assert second.result()["value"] == 0.5


# -- training accuracy counted for the whole epoch -------------------------------


def test_training_accuracy_takes_the_epoch_count_from_the_end_of_the_epoch():
    bus = MetricBus()
    metric = TrainingAccuracy()
    metric.attach(bus)
    for step in range(3):
        bus.publish(f"{TRAIN_STEP}.end", step=step, epoch=0, count=10, loss=1.0)
    bus.publish(f"{TRAIN_EPOCH}.end", epoch=0, correct=21, count=30)
    bus.publish(f"{TRAIN_STEP}.end", step=3, epoch=1, count=10, loss=1.0)
    bus.publish(f"{TRAIN_EPOCH}.end", epoch=1, correct=9, count=10)
    out = metric.result()
    assert out["per_epoch"] == [
        {"epoch": 0, "accuracy": pytest.approx(0.7), "weight": 30.0, "steps": 3},
        {"epoch": 1, "accuracy": pytest.approx(0.9), "weight": 10.0, "steps": 1},
    ]
    assert out["value"] == pytest.approx(0.9)
    assert "steps_without_accuracy" not in out


def test_training_accuracy_counts_steps_whose_epoch_brings_no_count_as_without():
    bus = MetricBus()
    metric = TrainingAccuracy()
    metric.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", loss=1.0)
    bus.publish(f"{TRAIN_EPOCH}.end")
    bus.publish(f"{TRAIN_STEP}.end", loss=1.0)  # its epoch never ended
    out = metric.result()
    assert out["unavailable"] == "2 train.step events carried no correct/count or accuracy"


def test_each_bus_keeps_one_feed_of_its_own():
    bus, other = MetricBus(), MetricBus()
    assert StepFeed.of(bus) is StepFeed.of(bus)
    assert StepFeed.of(other) is not StepFeed.of(bus)
    made: list[int] = []
    assert bus.shared("k", lambda: made.append(1) or "first") == "first"
    assert bus.shared("k", lambda: made.append(2) or "second") == "first"
    assert made == [1]


# -- order of steps and test passes ------------------------------------------------


def test_a_test_pass_is_placed_after_the_steps_before_it():
    bus = MetricBus()
    curve, best = LossCurve(), TestAccuracy()
    curve.attach(bus)
    best.attach(bus)
    for step in range(5):
        bus.publish(f"{TRAIN_STEP}.end", step=step, epoch=0, loss=1.0)
    bus.publish(f"{TRAIN_STEP}.end", step=5, epoch=0, loss=float("nan"))
    bus.publish(f"{TEST_PASS}.end", loss=float("inf"), correct=1, count=2)
    out = curve.result()
    assert out["diverged_at"] == {"in": "train", "step": 5, "epoch": 0, "loss": "nan"}
    assert out["test_curve"] == [[5, 0, "inf", 0.5]]
    assert best.result()["curve"][0]["step"] == 5
