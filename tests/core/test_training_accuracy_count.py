"""The trainer's native path counts training accuracy once per epoch (issue 12, item 6).

An executor with ``native_correct_counter`` is handed each step's logits and labels and
asked for the count once per epoch; one without it is counted every step, as before.
The executor is the numpy stand-in of ``tests/native_fakes.py``: no plugin is needed.
"""

from __future__ import annotations

from typing import Any

import pytest
from native_fakes import BATCH, SIZE, Data, Executor, Logits, Optimizer

from d5core.bus import TRAIN_EPOCH, TRAIN_STEP, Event, MetricBus
from d5core.lv2.metrics import LossCurve
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer
from d5core.metrics import Throughput


def _run(executor: Executor, **options: Any) -> tuple[Any, list[Event], list[Event]]:
    bus = MetricBus()
    steps: list[Event] = []
    epochs: list[Event] = []
    bus.subscribe(f"{TRAIN_STEP}.end", steps.append)
    bus.subscribe(f"{TRAIN_EPOCH}.end", epochs.append)
    options.setdefault("stop", StopConditions(max_epochs=2))
    trainer = Trainer(
        executor, "loss", Optimizer(), Data(), make_sampler("shuffle", SIZE, BATCH, seed=0),
        bus=bus, progress=False, **options,
    )  # fmt: skip
    assert trainer.optimizer_path == "native"
    return trainer.run(), steps, epochs


def test_the_counter_is_read_once_per_epoch_and_gives_the_per_step_accuracy():
    executor = Executor(counter=True)
    counted, steps, epochs = _run(executor)
    per_step, old_steps, old_epochs = _run(Executor(counter=False))
    assert counted.losses == per_step.losses
    assert executor.log.calls == (["add"] * 7 + ["take"]) * 2
    # the epoch's end carries the count, the steps none; without a counter, the steps do
    assert all("correct" not in e.payload for e in steps)
    assert [(e.payload["correct"], e.payload["count"]) for e in epochs] == [
        (sum(e.payload["correct"] for e in old_steps[i * 7 : (i + 1) * 7]), SIZE) for i in range(2)
    ]
    assert all("correct" not in e.payload for e in old_epochs)
    new, old = (r.metrics["training_accuracy"] for r in (counted, per_step))
    assert [e["steps"] for e in new["per_epoch"]] == [e["steps"] for e in old["per_epoch"]]
    assert [e["weight"] for e in new["per_epoch"]] == [e["weight"] for e in old["per_epoch"]]
    assert [e["accuracy"] for e in new["per_epoch"]] == pytest.approx(
        [e["accuracy"] for e in old["per_epoch"]], rel=1e-15
    )
    assert 0 < new["value"] < 1


def test_a_run_stopped_within_an_epoch_counts_the_steps_it_took():
    executor = Executor(counter=True)
    result, _, epochs = _run(executor, stop=StopConditions(max_epochs=2, max_steps=3))
    assert result.stop_reason == "max_steps"
    assert executor.log.calls == ["add"] * 3 + ["take"]
    assert epochs[0].payload["count"] == 3 * BATCH
    assert result.metrics["training_accuracy"]["per_epoch"][0]["steps"] == 3


@pytest.mark.parametrize("counter", [True, False])
@pytest.mark.parametrize("metrics", [[], [LossCurve, Throughput]], ids=["none", "no-accuracy"])
def test_nothing_is_counted_when_no_metric_reads_the_accuracy(counter: bool, metrics: list):
    executor = Executor(counter=counter)
    trainer = Trainer(
        executor, "loss", Optimizer(), Data(), make_sampler("shuffle", SIZE, BATCH, seed=0),
        metrics=[m() for m in metrics], progress=False,
    )  # fmt: skip
    Logits.argmaxes = 0
    result = trainer.run()
    assert result.steps == 7
    assert executor.log.calls == []
    assert Logits.argmaxes == 0
    if metrics:  # the steps are still published, with their loss and batch size
        assert len(result.metrics["loss_curve"]["curve"]) == 7
        assert result.metrics["throughput"]["samples"] == SIZE


class _ArrayOnly:
    """A tensor with no torch-style methods, only ``__array__`` (as TensorFlow's)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        return np.asarray(self._value, dtype=dtype)


class _ArrayOnlyExecutor(Executor):
    def native_train_step(self, feeds: Any, loss: str) -> Any:
        outputs, grads = super().native_train_step(feeds, loss)
        return {k: _ArrayOnly(v) for k, v in outputs.items()}, grads


def test_tensors_without_item_are_read_through_numpy():
    plain, _, _ = _run(Executor(counter=False))
    wrapped, _, _ = _run(_ArrayOnlyExecutor(counter=False))
    assert wrapped.losses == plain.losses
    assert wrapped.metrics["training_accuracy"] == plain.metrics["training_accuracy"]
