"""The trainer hands finished steps to the built-in metrics in blocks (issue 12, item 6).

When the metrics' shared step feed alone listens to ``train.step``, a step publishes no
event: the trainer keeps its columns and hands the feed one block before each test pass
and before the end of each epoch. The metrics must come out exactly as from the events,
and any other listener of ``train.step`` must still get every step as an event.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from native_fakes import BATCH, SIZE, Data, Executor, NumpySGD, Optimizer

from d5core.bus import BEGIN, END, TEST_PASS, TRAIN_EPOCH, TRAIN_STEP, Event, MetricBus
from d5core.lv2.metrics import LossCurve, TrainingAccuracy
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import RunClock, StopConditions, Trainer, default_metrics
from d5core.metrics import Throughput, WallclockTime
from d5core.metrics._common import StepBlock, StepFeed

STEPS_PER_EPOCH = -(-SIZE // BATCH)  # 7, the last of 2 samples


def _trainer(path: str, bus: MetricBus, **options: Any) -> Trainer:
    executor, data = Executor(counter=path == "native-counter"), Data()
    optimizer: Any = NumpySGD() if path == "numpy" else Optimizer()
    options.setdefault("stop", StopConditions(max_epochs=2))
    trainer = Trainer(
        executor, "loss", optimizer, data, make_sampler("shuffle", SIZE, BATCH, seed=0),
        test_set=data, bus=bus, progress=False, native=path != "numpy", **options,
    )  # fmt: skip
    assert trainer.optimizer_path == ("numpy" if path == "numpy" else "native")
    return trainer


class _Deliveries:
    """Records every block the step feed is handed, in order with other events."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, log: list[Any]) -> None:
        real = StepFeed.deliver

        def deliver(feed: StepFeed, block: StepBlock) -> None:
            log.append(("block", block.epoch, block.first_step, len(block)))
            real(feed, block)

        monkeypatch.setattr(StepFeed, "deliver", deliver)


def _rounded(value: Any) -> Any:
    """``value`` with every float to 9 significant digits (a duration in ns and in s)."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _comparable(result: Any) -> dict[str, Any]:
    """What must not depend on how steps reached the metrics (not the times)."""
    metrics = result.metrics
    throughput = metrics["throughput"]
    return {
        "losses": result.losses,
        "loss_curve": metrics["loss_curve"],
        "training_accuracy": metrics["training_accuracy"],
        "test_accuracy": [
            {k: v for k, v in p.items() if k != "t_ns"} for p in metrics["test_accuracy"]["curve"]
        ],
        "throughput": (throughput["steps"], throughput["samples"]),
    }


@pytest.mark.parametrize("path", ["native-counter", "native", "numpy"])
def test_metrics_read_the_same_steps_from_blocks_as_from_events(monkeypatch, path):
    log: list[Any] = []
    _Deliveries(monkeypatch, log)
    blocks = _trainer(path, MetricBus(), test_every=3).run()
    delivered = sum(entry[3] for entry in log)
    assert delivered == blocks.steps == 2 * STEPS_PER_EPOCH
    log.clear()
    bus = MetricBus()
    events: list[Event] = []
    bus.subscribe(TRAIN_STEP + END, events.append)  # another listener: every step published
    published = _trainer(path, bus, test_every=3).run()
    assert log == []
    assert len(events) == published.steps
    assert _comparable(blocks) == _comparable(published)


def test_a_block_comes_before_each_test_pass_and_before_the_end_of_its_epoch(monkeypatch):
    log: list[Any] = []
    _Deliveries(monkeypatch, log)
    bus = MetricBus()
    bus.subscribe(TEST_PASS + END, lambda e: log.append(("test", e.payload["step"])))
    bus.subscribe(TRAIN_EPOCH + END, lambda e: log.append(("epoch end", e.payload["epoch"])))
    _trainer("native-counter", bus, test_every=3).run()
    assert log == [
        ("block", 0, 0, 3), ("test", 3), ("block", 0, 3, 3), ("test", 6),
        ("block", 0, 6, 1), ("epoch end", 0),
        ("block", 1, 7, 2), ("test", 9), ("block", 1, 9, 3), ("test", 12),
        ("block", 1, 12, 2), ("epoch end", 1),
    ]  # fmt: skip


def test_steps_before_a_step_that_raises_reach_the_metrics_before_the_epoch_ends():
    bus = MetricBus()
    curve = LossCurve()
    order: list[str] = []
    bus.subscribe(TRAIN_EPOCH + END, lambda e: order.append(f"epoch end {len(curve.curve)}"))
    trainer = _trainer("native", bus, stop=StopConditions(max_epochs=1))
    trainer.metrics = [curve]  # attached when the run starts
    executor = trainer.executor
    real, calls = executor.native_train_step, []

    def failing(feeds: Any, loss: str) -> Any:
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("the device went away")
        return real(feeds, loss)

    executor.native_train_step = failing
    with pytest.raises(RuntimeError, match="went away"):
        trainer.run()
    assert [point[0] for point in curve.curve] == [0, 1, 2, 3]
    assert order == ["epoch end 4"]


def _feed_with(bus: MetricBus, *metrics: Any) -> StepFeed:
    for metric in metrics:
        metric.attach(bus)
    return StepFeed.of(bus)


def test_the_default_metrics_take_blocks_once_the_run_started():
    bus = MetricBus()
    clock = RunClock(bus, default_metrics(0.5))
    feed = StepFeed.of(bus)
    assert not feed.takes_blocks()  # nothing joined yet
    clock.begin()  # time to accuracy stops reading step begins at run.start
    assert feed.takes_blocks()
    clock.stop()
    assert not feed.takes_blocks()


@pytest.mark.parametrize(
    "listen",
    [
        lambda bus: bus.subscribe(TRAIN_STEP + END, lambda e: None),
        lambda bus: bus.subscribe(TRAIN_STEP + BEGIN, lambda e: None),
        lambda bus: bus.subscribe(TRAIN_STEP, lambda e: None),
        lambda bus: bus.subscribe_all(lambda e: None),
    ],
    ids=["end", "begin", "instant", "everything"],
)
def test_any_other_listener_of_the_steps_makes_them_events(listen):
    bus = MetricBus()
    feed = _feed_with(bus, LossCurve(), TrainingAccuracy())
    undo = listen(bus)
    assert not feed.takes_blocks()
    undo()
    assert feed.takes_blocks()


@pytest.mark.parametrize(
    "metric",
    [
        lambda: Throughput(where={"phase": "warm"}),
        lambda: Throughput(batch_key="tokens"),
        lambda: WallclockTime(where={"phase": "warm"}),
    ],
    ids=["throughput where", "throughput batch key", "wallclock where"],
)
def test_a_metric_that_needs_each_payload_makes_the_steps_events(metric):
    bus = MetricBus()
    feed = _feed_with(bus, LossCurve(), metric())
    assert not feed.takes_blocks()


def test_an_idle_feed_takes_no_blocks():
    assert not StepFeed.of(MetricBus()).takes_blocks()


def test_a_block_is_read_as_its_steps_would_be():
    """Each built-in reader of steps, from one block and from the same steps' events."""

    def metrics() -> list[Any]:
        return [LossCurve(), TrainingAccuracy(), Throughput(warmup=1), WallclockTime(warmup=1)]

    sizes, losses, seconds = [4, 4, 0, 2], [2.0, float("nan"), 1.0, 0.5], [0.1, 0.2, 0.0, 0.05]
    correct = [1, 3, 0, 2]
    from_block, from_events = metrics(), metrics()
    bus = MetricBus()
    for metric in from_block:
        metric.attach(bus)
    StepFeed.of(bus).deliver(StepBlock(3, 10, sizes, losses, seconds, [0.1] * 4, correct))
    other = MetricBus()
    for metric in from_events:
        metric.attach(other)
    for i in range(4):
        other.publish(
            TRAIN_STEP + END, level=2, step=10 + i, epoch=3, batch_size=sizes[i],
            count=sizes[i], loss=losses[i], correct=correct[i], lr=0.1,
            duration_ns=int(np.round(seconds[i] * 1e9)),
        )  # fmt: skip
    for a, b in zip(from_block, from_events, strict=True):
        assert _rounded(a.result()) == _rounded(b.result()), a.name
    assert StepFeed.of(bus).progress.step == StepFeed.of(other).progress.step == 13
